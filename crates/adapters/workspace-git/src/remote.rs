//! The remote (`store.workspace_remote`): each checkpoint pushed under a lease, and the
//! branch fetched by a worker that takes a run over.

use crate::git::redact;
use crate::open::{fetch_into, last_line};
use crate::workspace::{GitWorkspace, remote_ref};
use fabric_engine::ports::{CommitId, Workspace, WorkspaceError};

/// Pushes the branch's tip, expecting the remote's to be what this worker last saw; the
/// push may rewind it (a continued run restored an earlier step and went on from there),
/// which is why it is forced, and why only under that lease.
pub(crate) async fn push(ws: &GitWorkspace) -> Result<(), WorkspaceError> {
    let Some(remote) = &ws.spec.remote else {
        return Ok(());
    };
    let mut leased = ws.leased.lock().await;
    let tip = ws.head().await?;
    let dst = format!("refs/heads/{}", ws.branch);
    let ran = ws
        .git
        .run(
            Some(&ws.at),
            [
                "push",
                "--porcelain",
                "--quiet",
                &format!("--force-with-lease={dst}:{leased}"),
                "--end-of-options",
                remote,
                &format!("{tip}:{dst}"),
            ],
            None,
        )
        .await?;
    if ran.ok {
        *leased = tip.to_string();
        return Ok(());
    }
    let said = format!("{}\n{}", String::from_utf8_lossy(&ran.stdout), ran.stderr);
    if said.contains("stale info") || said.contains("[rejected]") || said.contains("fetch first") {
        return Err(WorkspaceError::RemoteMoved {
            remote: redact(remote),
            branch: ws.branch.clone(),
        });
    }
    Err(WorkspaceError::RemoteUnavailable {
        remote: redact(remote),
        detail: last_line(&ran.stderr),
    })
}

/// Fetches the branch into `refs/fabric/remote/<run-id>` and takes its tip as the lease.
pub(crate) async fn fetch_branch(ws: &GitWorkspace) -> Result<Option<CommitId>, WorkspaceError> {
    let Some(remote) = &ws.spec.remote else {
        return Ok(None);
    };
    let mut leased = ws.leased.lock().await;
    let dst = remote_ref(&ws.spec.run_id);
    if !fetch_into(&ws.git, &ws.at, remote, &ws.branch, &dst).await? {
        leased.clear();
        return Ok(None);
    }
    let tip = crate::workspace::commit_of(&ws.git, &ws.at, &dst)
        .await?
        .ok_or_else(|| WorkspaceError::RemoteUnavailable {
            remote: redact(remote),
            detail: format!("{dst} is missing after a fetch"),
        })?;
    *leased = tip.to_string();
    Ok(Some(tip))
}
