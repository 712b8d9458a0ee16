//! Bringing a run's result into the user's working tree: refused, before anything is
//! written, when it conflicts with what the user committed since the base or touches a file
//! with uncommitted changes.

use crate::git::{At, fields};
use crate::workspace::{GitWorkspace, commit_of, parse_status};
use fabric_engine::ports::{AppliedRun, ApplyMode, CommitId, Workspace, WorkspaceError};
use std::collections::BTreeSet;

pub(crate) async fn apply(
    ws: &GitWorkspace,
    mode: ApplyMode,
) -> Result<AppliedRun, WorkspaceError> {
    let top = ws.project_top()?.to_path_buf();
    let at = At::User(top.clone());
    let git = &ws.git;
    let tip = ws.head().await?;
    let Some(user_head) = commit_of(git, &at, "HEAD").await? else {
        return Err(WorkspaceError::NoCommits { repo: top });
    };
    // The user's HEAD with the run's changes merged in, computed without touching any file.
    let merged = if user_head == ws.base {
        format!("{tip}^{{tree}}")
    } else {
        let ran = git
            .run(
                Some(&at),
                [
                    "merge-tree",
                    "--write-tree",
                    "--name-only",
                    "--no-messages",
                    "-z",
                    &format!("--merge-base={}", ws.base),
                    user_head.as_str(),
                    tip.as_str(),
                ],
                None,
            )
            .await?;
        let mut out = fields(&ran.stdout);
        let tree = out.next().unwrap_or_default();
        match ran.code {
            Some(0) => tree,
            Some(1) => {
                let files: BTreeSet<String> = out.collect();
                return Err(WorkspaceError::Conflict {
                    branch: ws.branch.clone(),
                    files: files.into_iter().collect(),
                });
            }
            _ => return Err(ran.error(&top)),
        }
    };
    let names = ["--name-only", "-z", "--no-renames"];
    let names = git
        .diff(&at, &top, &names, user_head.as_str(), &merged)
        .await?;
    let touched: Vec<String> = fields(&names).collect();
    if touched.is_empty() {
        return Ok(AppliedRun::default());
    }
    let status = git
        .run(
            Some(&at),
            [
                "status",
                "--porcelain=v1",
                "-z",
                "--no-renames",
                "--untracked-files=all",
                "--ignore-submodules=all",
            ],
            None,
        )
        .await?
        .checked(&top)?;
    let changed = parse_status(&status.stdout).changed;
    let dirty: BTreeSet<&String> = changed.iter().filter(|p| touched.contains(p)).collect();
    if !dirty.is_empty() {
        return Err(WorkspaceError::Uncommitted {
            files: dirty.into_iter().cloned().collect(),
        });
    }
    let flags = ["--binary", "--no-renames"];
    let patch = git
        .diff(&at, &top, &flags, user_head.as_str(), &merged)
        .await?;
    let commit = match mode {
        ApplyMode::WorkingTree => {
            git.run(Some(&at), ["apply", "-"], Some(&patch))
                .await?
                .checked(&top)?;
            None
        }
        ApplyMode::Commit => {
            git.run(Some(&at), ["apply", "--index", "-"], Some(&patch))
                .await?
                .checked(&top)?;
            let message = format!(
                "fabric: apply run {}\n\nThe changes of branch {} ({} files).\n\nFabric-Run: {}\n",
                ws.spec.run_id,
                ws.branch,
                touched.len(),
                ws.spec.run_id
            );
            let commit = git
                .run(
                    Some(&at),
                    ["commit-tree", &merged, "-p", user_head.as_str(), "-F", "-"],
                    Some(message.as_bytes()),
                )
                .await?
                .checked(&top)?
                .text();
            // HEAD (and the branch it names) moves only if nobody moved it meanwhile.
            git.run(
                Some(&at),
                [
                    "update-ref",
                    "-m",
                    "fabric: apply",
                    "HEAD",
                    &commit,
                    user_head.as_str(),
                ],
                None,
            )
            .await?
            .checked(&top)?;
            Some(CommitId(commit))
        }
    };
    Ok(AppliedRun {
        files: touched,
        commit,
    })
}
