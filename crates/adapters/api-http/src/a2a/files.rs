//! The files a run wrote, as file parts of its task, for a client that accepts them
//! (ADR-071): the paths its finish payload lists in `artifacts` (relative to its
//! workspace), each read from inside the workspace and sent inline (`raw`, base64 in JSON)
//! with its `filename` and `mediaType`, within a size cap. What cannot be sent is named
//! in the artifact's `metadata.omitted` with the reason, never dropped silently.

use std::path::{Component, Path};

use base64::Engine as _;
use fabric_domain::{EventPayload, RunSummary};
use serde_json::{Value, json};

use crate::AppState;

/// The largest file sent inline.
pub(crate) const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The most bytes of files one task carries.
pub(crate) const MAX_TOTAL_BYTES: u64 = 4 * 1024 * 1024;

/// Why a file is left out of a task (its `reason` in `metadata.omitted`).
#[derive(Debug, thiserror::Error)]
enum Omitted {
    /// The run ran elsewhere.
    #[error("the run's workspace is not on this server")]
    NoWorkspace,
    /// An absolute path, or one with `..`.
    #[error("not a path inside the run's workspace")]
    NotInside,
    /// Nothing at that path.
    #[error("no such file in the run's workspace")]
    NoSuchFile,
    /// A link that leads out.
    #[error("it leads outside the run's workspace")]
    LeadsOutside,
    /// The system refused.
    #[error("cannot read it: {detail}")]
    Unreadable {
        /// The system's words.
        detail: String,
    },
    /// A directory or a device.
    #[error("not a regular file")]
    NotAFile,
    /// A hard link.
    #[error("it has more than one name (a hard link), so it may not be the run's")]
    HardLink,
    /// Over the cap.
    #[error(
        "{bytes} bytes: more than a task carries inline (a file at most {MAX_FILE_BYTES}, all files {MAX_TOTAL_BYTES}); read it from the run's workspace"
    )]
    TooLarge {
        /// The file's size.
        bytes: u64,
    },
}

/// The media types a `SendMessage` accepts (`configuration.acceptedOutputModes`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Accepted(Vec<String>);

impl Accepted {
    /// What `params` (a `SendMessage`'s) accepts.
    pub(crate) fn of(params: &Value) -> Self {
        let modes = params
            .pointer("/configuration/acceptedOutputModes")
            .and_then(Value::as_array)
            .map(|modes| {
                modes
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|m| {
                        m.split(';')
                            .next()
                            .unwrap_or_default()
                            .trim()
                            .to_ascii_lowercase()
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self(modes)
    }

    /// Whether `media` is accepted: named, or matched by `type/*` or `*/*`.
    fn accepts(&self, media: &str) -> bool {
        let kind = media.split('/').next().unwrap_or_default();
        self.0
            .iter()
            .any(|m| m == media || m == "*/*" || m.strip_suffix("/*") == Some(kind))
    }
}

/// A file's media type by its extension; `application/octet-stream` when unknown.
pub(crate) fn media_type(path: &str) -> &'static str {
    let extension = Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match extension.as_deref() {
        Some("txt" | "log") => "text/plain",
        Some("md") => "text/markdown",
        Some("html" | "htm") => "text/html",
        Some("css") => "text/css",
        Some("csv") => "text/csv",
        Some("js" | "mjs") => "text/javascript",
        Some(
            "py" | "rs" | "go" | "java" | "c" | "h" | "cpp" | "ts" | "sh" | "toml" | "yaml" | "yml",
        ) => "text/plain",
        Some("json") => "application/json",
        Some("xml") => "application/xml",
        Some("pdf") => "application/pdf",
        Some("zip") => "application/zip",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

/// The `files` artifact of `run` for a client accepting `accepted`, or `None` when the run
/// has no result, lists no file, or the client accepts none of their types.
pub(crate) async fn artifact(
    state: &AppState,
    run: &RunSummary,
    accepted: &Accepted,
) -> Option<Value> {
    let paths = listed(run);
    if accepted.0.is_empty() || paths.is_empty() {
        return None;
    }
    let workspace = workspace_of(state, run).await;
    let (parts, omitted) = collect(workspace.as_deref(), &paths, accepted).await;
    if parts.is_empty() && omitted.is_empty() {
        return None;
    }
    let mut artifact = json!({
        "artifactId": format!("{}-files", run.id),
        "name": "files",
        "description": "The files the run wrote (its result's `artifacts`), inline.",
        "parts": parts,
    });
    if !omitted.is_empty() {
        artifact["metadata"] = json!({"omitted": omitted});
    }
    Some(artifact)
}

/// The paths the run's result lists in `artifacts` (its strings).
fn listed(run: &RunSummary) -> Vec<String> {
    run.result
        .as_ref()
        .filter(|_| run.status.has_result())
        .and_then(|r| r.get("artifacts"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The run's workspace, as its `run_start` recorded it.
async fn workspace_of(state: &AppState, run: &RunSummary) -> Option<std::path::PathBuf> {
    let events = match state.service().store().read_events(&run.id).await {
        Ok(events) => events,
        Err(e) => {
            tracing::warn!(run_id = %run.id, error = %e, "cannot read the run's start for its files");
            return None;
        }
    };
    events.into_iter().find_map(|e| match e.payload {
        EventPayload::RunStart(start) => Some(start.workspace),
        _ => None,
    })
}

/// The file parts of `paths` inside `workspace` that `accepted` takes, and what was left out
/// (`{path, reason}`).
pub(crate) async fn collect(
    workspace: Option<&Path>,
    paths: &[String],
    accepted: &Accepted,
) -> (Vec<Value>, Vec<Value>) {
    let (mut parts, mut omitted) = (Vec::new(), Vec::new());
    let mut total = 0;
    let root = match workspace {
        Some(w) => tokio::fs::canonicalize(w).await.ok(),
        None => None,
    };
    for path in paths {
        let media = media_type(path);
        if !accepted.accepts(media) {
            continue;
        }
        let read = match &root {
            Some(root) => read_inside(root, path, MAX_TOTAL_BYTES - total).await,
            None => Err(Omitted::NoWorkspace),
        };
        match read {
            Ok(bytes) => {
                total += bytes.len() as u64;
                parts.push(json!({
                    "raw": base64::engine::general_purpose::STANDARD.encode(&bytes),
                    "filename": path,
                    "mediaType": media,
                }));
            }
            Err(reason) => omitted.push(json!({"path": path, "reason": reason.to_string()})),
        }
    }
    (parts, omitted)
}

/// The bytes of `path` under `root` (canonical): a relative path that stays inside it, to a
/// regular file of at most [`MAX_FILE_BYTES`] and `room`.
async fn read_inside(root: &Path, path: &str, room: u64) -> Result<Vec<u8>, Omitted> {
    let relative = Path::new(path);
    if !relative
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(Omitted::NotInside);
    }
    let full = tokio::fs::canonicalize(root.join(relative))
        .await
        .map_err(|_| Omitted::NoSuchFile)?;
    if !full.starts_with(root) {
        return Err(Omitted::LeadsOutside);
    }
    let unreadable = |e: std::io::Error| Omitted::Unreadable {
        detail: e.to_string(),
    };
    let meta = tokio::fs::metadata(&full).await.map_err(unreadable)?;
    if !meta.is_file() {
        return Err(Omitted::NotAFile);
    }
    // As the file tools: a second name (a hard link) may be outside the workspace.
    if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        return Err(Omitted::HardLink);
    }
    if meta.len() > MAX_FILE_BYTES.min(room) {
        return Err(Omitted::TooLarge { bytes: meta.len() });
    }
    tokio::fs::read(&full).await.map_err(unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(modes: &[&str]) -> Accepted {
        Accepted::of(&json!({"configuration": {"acceptedOutputModes": modes}}))
    }

    #[test]
    fn issue_30_output_modes_match_by_type_wildcard_or_all() {
        assert!(accepted(&["*/*"]).accepts("image/png"));
        assert!(accepted(&["text/*"]).accepts("text/markdown"));
        assert!(!accepted(&["text/*"]).accepts("image/png"));
        assert!(accepted(&["Text/Plain; charset=utf-8"]).accepts("text/plain"));
        assert!(!Accepted::of(&json!({})).accepts("text/plain"));
        assert_eq!(media_type("a/b.PNG"), "image/png");
        assert_eq!(media_type("Makefile"), "application/octet-stream");
    }

    #[tokio::test]
    async fn issue_30_files_are_read_inside_the_workspace_within_the_cap() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let workspace = dir.path().join("ws");
        let write =
            |p: &Path, bytes: &[u8]| std::fs::write(p, bytes).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(workspace.join("sub")).unwrap_or_else(|e| panic!("{e}"));
        write(&workspace.join("hello.txt"), b"Hello");
        write(&workspace.join("sub/pic.png"), &[0x89, b'P', b'N', b'G']);
        write(
            &workspace.join("big.txt"),
            &vec![b'x'; (MAX_FILE_BYTES + 1) as usize],
        );
        write(&dir.path().join("secret.txt"), b"not yours");
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), workspace.join("link.txt"))
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::hard_link(dir.path().join("secret.txt"), workspace.join("hard.txt"))
            .unwrap_or_else(|e| panic!("{e}"));
        let paths: Vec<String> = [
            "hello.txt",
            "sub/pic.png",
            "big.txt",
            "../secret.txt",
            "link.txt",
            "hard.txt",
            "gone.txt",
            "/etc/hostname",
        ]
        .map(str::to_owned)
        .to_vec();
        let (parts, omitted) = collect(Some(&workspace), &paths, &accepted(&["*/*"])).await;
        assert_eq!(parts.len(), 2, "{parts:?}");
        assert_eq!(parts[0]["raw"], "SGVsbG8=");
        assert_eq!(parts[0]["filename"], "hello.txt");
        assert_eq!(parts[0]["mediaType"], "text/plain");
        assert_eq!(parts[1]["mediaType"], "image/png");
        let reasons: Vec<(&str, &str)> = omitted
            .iter()
            .map(|o| {
                (
                    o["path"].as_str().unwrap_or_default(),
                    o["reason"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert!(
            reasons[0].0 == "big.txt" && reasons[0].1.contains("more than a task carries"),
            "{reasons:?}"
        );
        assert!(reasons[1].1.contains("not a path inside"), "{reasons:?}");
        assert!(
            reasons[2].1.contains("outside the run's workspace"),
            "{reasons:?}"
        );
        assert!(reasons[3].1.contains("more than one name"), "{reasons:?}");
        assert!(reasons[4].1.contains("no such file"), "{reasons:?}");
        assert!(reasons[5].1.contains("not a path inside"), "{reasons:?}");

        // Only what the client accepts; nothing at all without a workspace here.
        let (parts, omitted) = collect(Some(&workspace), &paths, &accepted(&["image/png"])).await;
        assert_eq!((parts.len(), omitted.len()), (1, 0));
        let (parts, omitted) = collect(None, &paths[..1], &accepted(&["text/plain"])).await;
        assert!(parts.is_empty());
        assert!(
            omitted[0]["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("not on this server")
        );
    }
}
