//! `/apply` in an editor (ADR-113): a turn's changes come into the user's working tree only
//! when asked, and never over a file the editor holds unsaved changes to without asking.

use fabric_core::ports::{ApplyMode, FileStat, Workspace};
use serde_json::{Value, json};
use std::path::Path;

use crate::AcpError;
use crate::rpc::Peer;

/// Applies `ws`'s changes to the user's directory `root`; when the editor reads its
/// buffers (`fs.readTextFile`), files whose buffer differs from the disk are named and
/// the person is asked first.
pub(crate) async fn apply(
    peer: &Peer,
    session: &str,
    ws: &dyn Workspace,
    root: Option<&Path>,
) -> Result<String, AcpError> {
    if let Some(root) = root {
        let stat = ws.diff_stat().await?;
        let unsaved = unsaved(peer, session, root, &stat.files).await;
        if !unsaved.is_empty() && !confirmed(peer, session, &unsaved).await {
            return Ok(format!(
                "nothing applied: the editor has unsaved changes to {}; save or revert them, then /apply again",
                unsaved.join(", ")
            ));
        }
    }
    let applied = ws.apply(ApplyMode::WorkingTree).await?;
    Ok(match applied.files.is_empty() {
        true => "the session changed nothing; there was nothing to apply".to_owned(),
        false => format!(
            "applied {} file(s) to your working tree, uncommitted: {}",
            applied.files.len(),
            applied.files.join(", ")
        ),
    })
}

/// The changed files whose text in the editor is not the text on disk.
async fn unsaved(peer: &Peer, session: &str, root: &Path, files: &[FileStat]) -> Vec<String> {
    let mut unsaved = Vec::new();
    for file in files {
        let path = root.join(&file.path);
        let asked = json!({"sessionId": session, "path": path});
        // A file the editor does not have answers an error: nothing unsaved.
        let Ok(answer) = peer.request("fs/read_text_file", asked).await else {
            continue;
        };
        let buffer = answer.get("content").and_then(Value::as_str);
        let disk = std::fs::read_to_string(&path).ok();
        if buffer.is_some() && buffer != disk.as_deref() {
            unsaved.push(fabric_domain::visible_line(&file.path).into_owned());
        }
    }
    unsaved
}

/// Whether the person says to apply over the unsaved changes.
async fn confirmed(peer: &Peer, session: &str, unsaved: &[String]) -> bool {
    let params = json!({
        "sessionId": session,
        "toolCall": {
            "toolCallId": "apply",
            "title": format!("Apply the session's changes over unsaved changes to {}", unsaved.join(", ")),
            "kind": "edit",
            "status": "pending",
        },
        "options": [
            {"optionId": "apply", "name": "Apply anyway (the editor then shows the files changed on disk)", "kind": "allow_once"},
            {"optionId": "keep", "name": "Do not apply", "kind": "reject_once"},
        ],
    });
    let Ok(answer) = peer.request("session/request_permission", params).await else {
        return false;
    };
    answer["outcome"]["outcome"] == "selected" && answer["outcome"]["optionId"] == "apply"
}
