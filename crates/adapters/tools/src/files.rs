//! The file tools: `read_file`, `write_file`, `list_files`. Every path goes through
//! [`crate::paths::confine`] first, so none of them can reach outside the workspace.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use fabric_core::typed::TypedTool;
use fabric_core::{ToolContext, ToolError};
use fabric_domain::{ToolAnnotations, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::paths::confine;
use crate::policy::ToolPolicy;
use crate::text::decode;

fn not_found(raw: &str) -> ToolError {
    ToolError::Failed(format!(
        "no file `{raw}` in the workspace; list_files shows what exists"
    ))
}

fn io_failed(what: &str, raw: &str, error: &std::io::Error) -> ToolError {
    ToolError::Failed(format!("cannot {what} `{raw}`: {error}"))
}

// Arguments of `read_file`. Field docs are what the model reads; no type doc, which would
// only add noise to the schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadInput {
    /// File to read, relative to the workspace, e.g. "src/main.rs".
    path: String,
}

/// The `read_file` tool.
pub(crate) struct ReadFileTool {
    policy: Arc<ToolPolicy>,
}

impl ReadFileTool {
    pub(crate) fn new(policy: Arc<ToolPolicy>) -> Self {
        Self { policy }
    }
}

#[async_trait]
impl TypedTool for ReadFileTool {
    type Input = ReadInput;

    fn spec(&self) -> ToolSpec {
        let description = format!(
            "Read a text file in the workspace and return its content. Files larger than {} bytes are cut, with a note saying so.",
            self.policy.max_read_bytes
        );
        ToolSpec::for_input::<ReadInput>("read_file", &description)
            .example(json!({"path": "src/main.rs"}))
            .annotate(ToolAnnotations {
                read_only: true,
                destructive: false,
                needs_network: false,
            })
            .plan(&["list_files"], &["write_file"])
    }

    async fn run(&self, input: ReadInput, ctx: &ToolContext) -> Result<Value, ToolError> {
        let raw = input.path.as_str();
        let path = confine(&ctx.workspace, raw).await?;
        let meta = match tokio::fs::metadata(&path.absolute).await {
            Ok(meta) => meta,
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(not_found(raw)),
            Err(e) => return Err(io_failed("read", raw, &e)),
        };
        if meta.is_dir() {
            return Err(ToolError::Failed(format!(
                "`{raw}` is a directory, not a file; list_files with {} shows what it contains",
                json!({"path": raw})
            )));
        }
        if !meta.is_file() {
            // A FIFO or device would block or never end.
            return Err(ToolError::Failed(format!(
                "`{raw}` is not a regular file, so it cannot be read"
            )));
        }
        let file = tokio::fs::File::open(&path.absolute)
            .await
            .map_err(|e| match e.kind() {
                ErrorKind::NotFound => not_found(raw),
                _ => io_failed("read", raw, &e),
            })?;
        let mut bytes = Vec::new();
        file.take(self.policy.max_read_bytes)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| io_failed("read", raw, &e))?;
        tracing::debug!(path = %path.relative, bytes = bytes.len(), "read_file");

        let size = meta.len().max(bytes.len() as u64);
        let cut = size > bytes.len() as u64;
        let (mut text, lossy) = decode(&bytes, cut);
        if bytes.is_empty() && !cut {
            return Ok(Value::String(format!("[file `{raw}` is empty]")));
        }
        if lossy {
            text.push_str(
                "\n[note: the file is not valid UTF-8; invalid bytes are shown as \u{FFFD}]",
            );
        }
        if cut {
            text.push_str(&format!(
                "\n[truncated: file is {size} bytes, showing the first {}]",
                bytes.len()
            ));
        }
        Ok(Value::String(text))
    }
}

// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteInput {
    /// File to write, relative to the workspace, e.g. "src/lib.rs". Missing folders are created. An existing file is replaced.
    path: String,
    /// The complete new content of the file.
    content: String,
}

/// The `write_file` tool.
pub(crate) struct WriteFileTool;

#[async_trait]
impl TypedTool for WriteFileTool {
    type Input = WriteInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_input::<WriteInput>(
            "write_file",
            "Create or replace a file in the workspace with the given content. Missing folders are created. Returns the path and the number of bytes written.",
        )
        .example(json!({"path": "notes/todo.md", "content": "# TODO\n- write tests\n"}))
        .annotate(ToolAnnotations {
            read_only: false,
            destructive: true,
            needs_network: false,
        })
        .plan(&["read_file"], &["read_file"])
    }

    async fn run(&self, input: WriteInput, ctx: &ToolContext) -> Result<Value, ToolError> {
        let raw = input.path.as_str();
        let path = confine(&ctx.workspace, raw).await?;
        if path.relative == "." {
            return Err(ToolError::InvalidArguments(format!(
                "`path` must name a file, got `{raw}`; use for example `notes.txt`"
            )));
        }
        if let Ok(meta) = tokio::fs::metadata(&path.absolute).await
            && meta.is_dir()
        {
            return Err(ToolError::Failed(format!(
                "`{raw}` is a directory; choose a file path inside it, such as `{}/file.txt`",
                path.relative
            )));
        }
        if let Some(parent) = path.absolute.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| io_failed("create the folders for", raw, &e))?;
        }
        tokio::fs::write(&path.absolute, input.content.as_bytes())
            .await
            .map_err(|e| io_failed("write", raw, &e))?;
        tracing::debug!(path = %path.relative, bytes = input.content.len(), "write_file");
        Ok(json!({"path": path.relative, "bytes": input.content.len()}))
    }
}

// Arguments of `list_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListInput {
    /// Optional. Folder to list, relative to the workspace. Default "." (the whole workspace).
    path: Option<String>,
    /// Optional. Most entries to return. Default 500.
    #[schemars(range(min = 1))]
    max_entries: Option<usize>,
}

/// The `list_files` tool.
pub(crate) struct ListFilesTool {
    policy: Arc<ToolPolicy>,
}

impl ListFilesTool {
    pub(crate) fn new(policy: Arc<ToolPolicy>) -> Self {
        Self { policy }
    }
}

#[async_trait]
impl TypedTool for ListFilesTool {
    type Input = ListInput;

    fn spec(&self) -> ToolSpec {
        let description = format!(
            "List the files and folders under a folder of the workspace, recursively, one path per line. Folders end with `/`. Paths are relative to the workspace, ready for read_file. At most {} entries.",
            self.policy.max_list_entries
        );
        ToolSpec::for_input::<ListInput>("list_files", &description)
            .example(json!({}))
            .example(json!({"path": "src"}))
            .annotate(ToolAnnotations {
                read_only: true,
                destructive: false,
                needs_network: false,
            })
            .plan(&[], &["read_file"])
    }

    async fn run(&self, input: ListInput, ctx: &ToolContext) -> Result<Value, ToolError> {
        let raw = input.path.unwrap_or_else(|| ".".to_owned());
        let path = confine(&ctx.workspace, &raw).await?;
        let cap = input
            .max_entries
            .unwrap_or(self.policy.max_list_entries)
            .clamp(1, self.policy.max_list_entries.max(1));
        match tokio::fs::metadata(&path.absolute).await {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(ToolError::Failed(format!(
                    "`{raw}` is a file, not a folder; read it with read_file"
                )));
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(ToolError::Failed(format!(
                    "no folder `{raw}` in the workspace; list_files with {{}} lists the whole workspace"
                )));
            }
            Err(e) => return Err(io_failed("list", &raw, &e)),
        }
        let prefix = if path.relative == "." {
            String::new()
        } else {
            format!("{}/", path.relative)
        };
        let root = path.absolute.clone();
        let listing = tokio::task::spawn_blocking(move || walk(&root, &prefix, cap))
            .await
            .map_err(|e| ToolError::Failed(format!("listing did not finish: {e}")))?;
        tracing::debug!(path = %path.relative, entries = listing.entries.len(), "list_files");
        Ok(Value::String(listing.render(&raw, cap)))
    }
}

/// What a walk found.
#[derive(Debug, Default)]
struct Listing {
    /// Workspace-relative paths, folders with a trailing `/`, in tree order.
    entries: Vec<String>,
    /// The cap was reached with entries left.
    truncated: bool,
    /// Folders that could not be read (permissions).
    unreadable: Vec<String>,
}

impl Listing {
    fn render(&self, raw: &str, cap: usize) -> String {
        let mut out = self.entries.join("\n");
        if self.entries.is_empty() {
            out = format!("[folder `{raw}` is empty]");
        }
        if self.truncated {
            out.push_str(&format!(
                "\n[listing stopped at {cap} entries; list a subfolder, e.g. {}, to see more]",
                json!({"path": self.entries.iter().find(|e| e.ends_with('/')).map_or(raw, |e| e.trim_end_matches('/'))})
            ));
        }
        if !self.unreadable.is_empty() {
            out.push_str(&format!(
                "\n[could not read: {}]",
                self.unreadable.join(", ")
            ));
        }
        out
    }
}

/// Lists `root` breadth-first, up to `cap` entries, then sorts them into tree order.
///
/// Breadth-first so that, when the cap cuts the listing, what is missing is the deep end
/// (a `target/` with thousands of files) rather than later top-level entries. Symbolic
/// links are listed but never followed: that keeps the walk inside the workspace and free of
/// cycles.
fn walk(root: &Path, prefix: &str, cap: usize) -> Listing {
    let mut listing = Listing::default();
    let mut queue: VecDeque<(PathBuf, String)> =
        VecDeque::from([(root.to_path_buf(), prefix.to_owned())]);
    'walk: while let Some((dir, shown)) = queue.pop_front() {
        let mut children: Vec<(String, bool)> = match std::fs::read_dir(&dir) {
            Ok(read) => read
                .filter_map(Result::ok)
                .map(|entry| {
                    let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                    (entry.file_name().to_string_lossy().into_owned(), is_dir)
                })
                .collect(),
            Err(_) => {
                listing.unreadable.push(if shown.is_empty() {
                    ".".to_owned()
                } else {
                    shown
                });
                continue;
            }
        };
        children.sort();
        for (name, is_dir) in children {
            if listing.entries.len() >= cap {
                listing.truncated = true;
                break 'walk;
            }
            if is_dir {
                let child = format!("{shown}{name}/");
                queue.push_back((dir.join(&name), child.clone()));
                listing.entries.push(child);
            } else {
                listing.entries.push(format!("{shown}{name}"));
            }
        }
    }
    // Tree order: compare by components, so `a/` and its contents come before `a.txt`.
    listing.entries.sort_by(|a, b| {
        a.trim_end_matches('/')
            .split('/')
            .cmp(b.trim_end_matches('/').split('/'))
    });
    listing
}
