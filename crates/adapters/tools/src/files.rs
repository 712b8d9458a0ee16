//! The file tools: `read_file`, `write_file`, `list_files`. Every path is normalised by
//! [`crate::paths::normalize`] and then opened beneath the workspace descriptor
//! ([`crate::paths::Root`]), so none of them can reach outside the workspace, even while
//! something swaps directories and links under them (ADR-026). The work is blocking system
//! calls on descriptors, run on the blocking pool.
//!
//! Hard links: a regular file with more than one name (`st_nlink > 1`) is neither read nor
//! written, since its other name may be outside the workspace (a link placed there from
//! outside, or by a process before the sandbox). The refusal is a `hard_link` security event.

use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use fabric_domain::{ToolAnnotations, ToolSpec, builtin};
use fabric_engine::typed::TypedTool;
use fabric_engine::{ToolContext, ToolError};
use rustix::fs::{FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::lines::Lines;
use crate::paths::{Root, link_escape_error, normalize, normalize_in, resolution_error};
use crate::policy::ToolPolicy;
use crate::text::decode;

pub(crate) fn io_failed(what: &str, raw: &str, error: &std::io::Error) -> ToolError {
    ToolError::Failed(format!("cannot {what} `{raw}`: {error}"))
}

fn errno_failed(what: &str, raw: &str, errno: Errno) -> ToolError {
    io_failed(what, raw, &std::io::Error::from(errno))
}

/// The `event_type` of a refused hard-linked file.
pub(crate) const HARD_LINK: &str = "hard_link";

fn hard_link_error(raw: &str, links: u64, what: &str) -> ToolError {
    ToolError::Denied {
        event_type: HARD_LINK.to_owned(),
        attempted: raw.to_owned(),
        message: format!(
            "`{raw}` is a hard link ({links} names for one file, and another name may be outside the workspace), so {what}. Use another file, or ask the user to copy it into the workspace"
        ),
    }
}

/// The number of names of a file (`st_nlink` is `u32` on some targets).
#[allow(clippy::useless_conversion)]
fn links(stat: &Stat) -> u64 {
    u64::from(stat.st_nlink)
}

fn kind(stat: &Stat) -> FileType {
    FileType::from_raw_mode(stat.st_mode)
}

/// Runs blocking file work on the blocking pool.
/// `raw` normalised ([`normalize`]); a refused path is answered with the workspace path the
/// model most likely meant, looked up off the async threads ([`normalize_in`]).
pub(crate) async fn relative_path(workspace: &Path, raw: &str) -> Result<PathBuf, ToolError> {
    match normalize(raw) {
        Ok(relative) => Ok(relative),
        Err(_) => {
            let (workspace, raw) = (workspace.to_path_buf(), raw.to_owned());
            blocking("the path check", move || normalize_in(&workspace, &raw)).await
        }
    }
}

pub(crate) async fn blocking<T: Send + 'static>(
    what: &str,
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolError::Failed(format!("{what} did not finish: {e}")))?
}

// Arguments of `read_file`. Field docs are what the model reads; no type doc, which would
// only add noise to the schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadInput {
    /// File to read, relative to the workspace, e.g. "src/main.rs".
    path: String,
    /// Optional. The first line to read, counting from 1. With `limit`, reads a big file in
    /// parts.
    #[schemars(range(min = 1))]
    offset: Option<u64>,
    /// Optional. How many lines to read at most. Default: to the end of the file.
    #[schemars(range(min = 1))]
    limit: Option<u64>,
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
            "Read a text file in the workspace and return its content. One call returns at most {} bytes, in whole lines; a bigger file or part ends with a note of the lines shown, the file's lines and bytes, and the read_file call that reads the next part. `offset` is the first line (from 1), `limit` how many lines.",
            self.policy.max_read_bytes
        );
        let spec = ToolSpec::for_input::<ReadInput>(builtin::READ_FILE, &description)
            .example(json!({"path": "src/main.rs"}))
            .example(json!({"path": "notes/long.txt", "offset": 101, "limit": 100}))
            .annotate(ToolAnnotations {
                read_only: true,
                destructive: false,
                needs_network: false,
            })
            .plan(&["list_files"], &["write_file"]);
        crate::workflows::attach(spec)
    }

    async fn run(&self, input: ReadInput, ctx: &ToolContext) -> Result<Value, ToolError> {
        let raw = input.path;
        let relative = relative_path(&ctx.workspace, &raw).await?;
        let workspace = ctx.workspace.clone();
        let max = self.policy.max_read_bytes;
        let range = (input.offset.is_some() || input.limit.is_some())
            .then(|| Lines::new(input.offset.unwrap_or(1), input.limit));
        blocking("read_file", move || {
            read_blocking(&workspace, &raw, &relative, max, range)
        })
        .await
    }
}

/// How a reader of files points at what exists: the `list_files` tool, or the MCP server's
/// listing of a run's files.
pub(crate) struct Lister<'a> {
    /// Where to look for the files that exist (`list_files`).
    pub(crate) files: &'a str,
    /// Where to look into a directory `raw`.
    pub(crate) directory: &'a dyn Fn(&str) -> String,
    /// Who refuses a hard-linked file (`read_file`).
    pub(crate) reader: &'a str,
}

/// The tools' own lister.
const TOOL_LISTER: Lister<'static> = Lister {
    files: "list_files",
    directory: &|raw| {
        format!(
            "list_files with {} shows what it contains",
            json!({"path": raw})
        )
    },
    reader: "read_file",
};

/// Opens `relative` beneath `workspace` for reading, a regular file with one name only, and
/// its size; refusals and failures worded for `lister`'s reader. Blocking.
pub(crate) fn open_regular(
    workspace: &Path,
    raw: &str,
    relative: &Path,
    lister: &Lister<'_>,
) -> Result<(OwnedFd, Stat), ToolError> {
    let root = Root::open(workspace)?;
    // O_NONBLOCK: opening a FIFO must not wait for a writer; regular files ignore it.
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = root.open_at(relative, flags).map_err(|e| match e {
        Errno::NOENT => ToolError::Failed(format!(
            "no file `{raw}` in the workspace; {} shows what exists",
            lister.files
        )),
        e => resolution_error(raw, e).unwrap_or_else(|| errno_failed("read", raw, e)),
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| errno_failed("read", raw, e))?;
    match kind(&stat) {
        FileType::Directory => {
            return Err(ToolError::Failed(format!(
                "`{raw}` is a directory, not a file; {}",
                (lister.directory)(raw)
            )));
        }
        FileType::RegularFile => {}
        // A FIFO or device would block or never end.
        _ => {
            return Err(ToolError::Failed(format!(
                "`{raw}` is not a regular file, so it cannot be read"
            )));
        }
    }
    let links = links(&stat);
    if links > 1 {
        let what = format!("{} does not read it", lister.reader);
        return Err(hard_link_error(raw, links, &what));
    }
    Ok((fd, stat))
}

fn read_blocking(
    workspace: &Path,
    raw: &str,
    relative: &Path,
    max: u64,
    range: Option<Lines>,
) -> Result<Value, ToolError> {
    let (fd, stat) = open_regular(workspace, raw, relative, &TOOL_LISTER)?;
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    let mut file = std::fs::File::from(fd);
    if let Some(range) = range {
        return range.read(file, raw, max, size);
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_failed("read", raw, &e))?;
    tracing::debug!(path = %relative.display(), bytes = bytes.len(), "read_file");
    if bytes.len() as u64 > max {
        // Too big for one answer: whole lines from the first, with the file's size and the
        // call that reads on (issue #40).
        file.seek(SeekFrom::Start(0))
            .map_err(|e| io_failed("read", raw, &e))?;
        return Lines::new(1, None).read(file, raw, max, size.max(bytes.len() as u64));
    }
    if bytes.is_empty() {
        return Ok(Value::String(format!("[file `{raw}` is empty]")));
    }
    let (mut text, lossy) = decode(&bytes, false);
    if lossy {
        text.push_str("\n[note: the file is not valid UTF-8; invalid bytes are shown as \u{FFFD}]");
    }
    Ok(Value::String(text))
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

/// The `event_type` of a write to a protected path.
pub(crate) const PROTECTED_PATH: &str = "protected_path";

/// The `write_file` tool.
pub(crate) struct WriteFileTool {
    policy: Arc<ToolPolicy>,
}

impl WriteFileTool {
    pub(crate) fn new(policy: Arc<ToolPolicy>) -> Self {
        Self { policy }
    }
}

/// Refuses a write that lands in a protected path. Checked on the lexical path and on where
/// the opened parent directory really is, so a symbolic link such as `g -> .git` does not
/// get around it.
fn check_protected(policy: &ToolPolicy, raw: &str, located: &Path) -> Result<(), ToolError> {
    if let Some(protected) = policy.protected(located) {
        return Err(ToolError::Denied {
            event_type: PROTECTED_PATH.to_owned(),
            attempted: raw.to_owned(),
            message: format!(
                "`{raw}` is inside `{protected}`, which is protected: write_file never changes it (repository metadata and the fabric's own files). Write somewhere else in the workspace"
            ),
        });
    }
    Ok(())
}

#[async_trait]
impl TypedTool for WriteFileTool {
    type Input = WriteInput;

    fn spec(&self) -> ToolSpec {
        let spec = ToolSpec::for_input::<WriteInput>(
            builtin::WRITE_FILE,
            "Create or replace a file in the workspace with the given content. Missing folders are created. Returns the path and the number of bytes written.",
        )
        .example(json!({"path": "notes/todo.md", "content": "# TODO\n- write tests\n"}))
        .annotate(ToolAnnotations {
            read_only: false,
            destructive: true,
            needs_network: false,
        })
        .plan(&["read_file"], &["read_file"]);
        crate::workflows::attach(spec)
    }

    async fn run(&self, input: WriteInput, ctx: &ToolContext) -> Result<Value, ToolError> {
        let raw = input.path;
        let relative = relative_path(&ctx.workspace, &raw).await?;
        if relative.as_os_str().is_empty() {
            return Err(ToolError::InvalidArguments(format!(
                "`path` must name a file, got `{raw}`; use for example `notes.txt`"
            )));
        }
        check_protected(&self.policy, &raw, &relative)?;
        let workspace = ctx.workspace.clone();
        let policy = Arc::clone(&self.policy);
        blocking("write_file", move || {
            write_blocking(
                &policy,
                &workspace,
                &raw,
                &relative,
                input.content.as_bytes(),
            )
        })
        .await
    }
}

/// Opens (creating them beneath the root as needed) the folders of `dir`, one prefix at a
/// time, each resolved beneath the root; checks each one's real location against the
/// protected paths before creating anything in it.
fn open_parent(
    policy: &ToolPolicy,
    root: &Root,
    raw: &str,
    dir: &Path,
) -> Result<(OwnedFd, PathBuf), ToolError> {
    let dir_flags = OFlags::PATH | OFlags::DIRECTORY;
    let fail = |e: Errno| {
        resolution_error(raw, e).unwrap_or_else(|| errno_failed("create the folders for", raw, e))
    };
    let mut prefix = PathBuf::new();
    let mut parent = root.open_at(&prefix, dir_flags).map_err(fail)?;
    for name in dir.components() {
        prefix.push(name);
        parent = match root.open_at(&prefix, dir_flags) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                let here = root
                    .locate(parent.as_fd())
                    .unwrap_or_else(|| prefix.clone());
                check_protected(policy, raw, &here.join(name))?;
                match rustix::fs::mkdirat(&parent, name.as_os_str(), Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(fail(e)),
                }
                root.open_at(&prefix, dir_flags).map_err(fail)?
            }
            Err(e) => return Err(fail(e)),
        };
    }
    let located = root.locate(parent.as_fd()).unwrap_or(prefix);
    Ok((parent, located))
}

fn write_blocking(
    policy: &ToolPolicy,
    workspace: &Path,
    raw: &str,
    relative: &Path,
    content: &[u8],
) -> Result<Value, ToolError> {
    let shown = relative.to_string_lossy().into_owned();
    let (Some(dir), Some(name)) = (relative.parent(), relative.file_name()) else {
        return Err(ToolError::InvalidArguments(format!(
            "`path` must name a file, got `{raw}`; use for example `notes.txt`"
        )));
    };
    let root = Root::open(workspace)?;
    let (parent, located) = open_parent(policy, &root, raw, dir)?;
    check_protected(policy, raw, &located.join(name))?;
    // O_NOFOLLOW: a symbolic link as the last component is refused, never written through.
    // No O_TRUNC: the file is emptied only once it is known to be a plain, single-named file.
    let flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::NOCTTY
        | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(&parent, name, flags, Mode::from_raw_mode(0o666)) {
        Ok(fd) => fd,
        Err(Errno::LOOP) => return Err(final_link_error(&parent, raw, dir, name)),
        Err(Errno::ISDIR) => {
            return Err(ToolError::Failed(format!(
                "`{raw}` is a directory; choose a file path inside it, such as `{shown}/file.txt`"
            )));
        }
        Err(e) => return Err(errno_failed("write", raw, e)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| errno_failed("write", raw, e))?;
    if kind(&stat) != FileType::RegularFile {
        return Err(ToolError::Failed(format!(
            "`{raw}` is not a regular file, so write_file does not write to it"
        )));
    }
    let links = links(&stat);
    if links > 1 {
        return Err(hard_link_error(raw, links, "write_file does not change it"));
    }
    rustix::fs::ftruncate(&fd, 0).map_err(|e| errno_failed("write", raw, e))?;
    std::fs::File::from(fd)
        .write_all(content)
        .map_err(|e| io_failed("write", raw, &e))?;
    tracing::debug!(path = %shown, bytes = content.len(), "write_file");
    Ok(json!({"path": shown, "bytes": content.len()}))
}

/// The refusal of a write whose last component is a symbolic link: an escape if the link
/// points out, otherwise the path to write instead.
fn final_link_error(parent: &OwnedFd, raw: &str, dir: &Path, name: &std::ffi::OsStr) -> ToolError {
    let Ok(target) = rustix::fs::readlinkat(parent, name, Vec::new()) else {
        return link_escape_error(raw);
    };
    let target = target.to_string_lossy().into_owned();
    match normalize(&dir.join(&target).to_string_lossy()) {
        Ok(inside) if !Path::new(&target).is_absolute() => ToolError::Failed(format!(
            "`{raw}` is a symbolic link to `{target}`; write_file does not write through a link. Write `{}` instead",
            inside.display()
        )),
        _ => link_escape_error(raw),
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
        let spec = ToolSpec::for_input::<ListInput>(builtin::LIST_FILES, &description)
            .example(json!({}))
            .example(json!({"path": "src"}))
            .annotate(ToolAnnotations {
                read_only: true,
                destructive: false,
                needs_network: false,
            })
            .plan(&[], &["read_file"]);
        crate::workflows::attach(spec)
    }

    async fn run(&self, input: ListInput, ctx: &ToolContext) -> Result<Value, ToolError> {
        let raw = input.path.unwrap_or_else(|| ".".to_owned());
        let relative = relative_path(&ctx.workspace, &raw).await?;
        let cap = input
            .max_entries
            .unwrap_or(self.policy.max_list_entries)
            .clamp(1, self.policy.max_list_entries.max(1));
        let workspace = ctx.workspace.clone();
        blocking("listing", move || {
            list_blocking(&workspace, &raw, &relative, cap)
        })
        .await
    }
}

fn list_blocking(
    workspace: &Path,
    raw: &str,
    relative: &Path,
    cap: usize,
) -> Result<Value, ToolError> {
    let root = Root::open(workspace)?;
    let fd = root.open_at(relative, OFlags::PATH).map_err(|e| match e {
        Errno::NOENT => ToolError::Failed(format!(
            "no folder `{raw}` in the workspace; list_files with {{}} lists the whole workspace"
        )),
        e => resolution_error(raw, e).unwrap_or_else(|| errno_failed("list", raw, e)),
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| errno_failed("list", raw, e))?;
    if kind(&stat) != FileType::Directory {
        return Err(ToolError::Failed(format!(
            "`{raw}` is a file, not a folder; read it with read_file"
        )));
    }
    let shown = relative.to_string_lossy();
    let prefix = if shown.is_empty() {
        String::new()
    } else {
        format!("{shown}/")
    };
    let listing = walk(&root, relative, &prefix, cap);
    tracing::debug!(path = %shown, entries = listing.entries.len(), "list_files");
    Ok(Value::String(listing.render(raw, cap)))
}

/// What a walk found.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Workspace-relative paths, folders with a trailing `/`, in tree order.
    pub(crate) entries: Vec<String>,
    /// The cap was reached with entries left.
    pub(crate) truncated: bool,
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

/// Lists the folder `start` (beneath `root`) breadth-first, up to `cap` entries, then sorts
/// them into tree order.
///
/// Breadth-first so that, when the cap cuts the listing, what is missing is the deep end
/// (a `target/` with thousands of files) rather than later top-level entries. Symbolic
/// links are listed but never followed (each folder is opened beneath the root with
/// `O_NOFOLLOW`): that keeps the walk inside the workspace and free of cycles.
pub(crate) fn walk(root: &Root, start: &Path, prefix: &str, cap: usize) -> Listing {
    let mut listing = Listing::default();
    let mut queue: VecDeque<(PathBuf, String)> =
        VecDeque::from([(start.to_path_buf(), prefix.to_owned())]);
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
    'walk: while let Some((dir, shown)) = queue.pop_front() {
        let Ok(mut children) = root
            .open_at(&dir, dir_flags)
            .and_then(rustix::fs::Dir::new)
            .map(read_children)
        else {
            listing.unreadable.push(if shown.is_empty() {
                ".".to_owned()
            } else {
                shown
            });
            continue;
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

/// The entries of an open folder, as (name, is a folder); `.` and `..` left out. An entry
/// whose type the file system does not report is looked up without following links.
fn read_children(mut read: rustix::fs::Dir) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    while let Some(Ok(entry)) = read.read() {
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Unknown => read.fd().ok().is_some_and(|fd| {
                rustix::fs::statat(fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| kind(&st) == FileType::Directory)
            }),
            other => other == FileType::Directory,
        };
        out.push((name.to_string_lossy().into_owned(), is_dir));
    }
    out
}
