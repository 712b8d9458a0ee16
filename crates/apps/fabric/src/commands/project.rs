//! `fabric diff`, `fabric apply` and `fabric discard`: finishing the job of a run on a
//! project (issue #25; docs/PROJECTS.md). Each opens the ended run's versioned workspace as
//! its runlog records it, never restoring or changing its branch.

use fabric_core::ports::{ApplyMode, Workspace};
use fabric_core::service::{RunService, ServiceConfig};
use fabric_domain::{RunId, visible_line, visible_text};
use std::sync::Arc;

use crate::cli::{ApplyArgs, Cli, DiffArgs, DiscardArgs};
use crate::errors::UsageError;
use crate::wiring;

pub(crate) async fn diff(cli: &Cli, args: &DiffArgs) -> anyhow::Result<u8> {
    let (service, id) = open(cli, &args.run_id).await?;
    let ws = workspace(&service, &id).await?;
    print!(
        "{}",
        diff_text(ws.as_ref(), &id, args.stat, args.json).await?
    );
    Ok(0)
}

/// What `fabric diff` prints (shared with `fabric chat`'s `/diff`): the diff, `--stat`'s
/// lines or `--json`'s object, each line ending in a newline.
pub(super) async fn diff_text(
    ws: &dyn Workspace,
    id: &RunId,
    stat_only: bool,
    json: bool,
) -> anyhow::Result<String> {
    let stat = ws.diff_stat().await?;
    if json {
        let head = ws.head().await?;
        let files: Vec<_> = stat
            .files
            .iter()
            .map(|f| serde_json::json!({"path": f.path, "added": f.added, "removed": f.removed}))
            .collect();
        let object = serde_json::json!({
            "run_id": id,
            "branch": ws.branch(),
            "base": ws.base().as_str(),
            "head": head.as_str(),
            "files": files,
        });
        return Ok(format!("{}\n", serde_json::to_string(&object)?));
    }
    if !stat_only {
        // The files' contents as they are, escape sequences shown, not obeyed (ADR-089).
        return Ok(visible_text(&ws.diff().await?).into_owned());
    }
    let mut text = String::new();
    for f in &stat.files {
        match (f.added, f.removed) {
            (Some(a), Some(r)) => {
                let (a, r) = (format!("+{a}"), format!("-{r}"));
                text.push_str(&format!("{a:>6} {r:>6}  {}\n", visible_line(&f.path)));
            }
            _ => text.push_str(&format!("{:>13}  {}\n", "binary", visible_line(&f.path))),
        }
    }
    let (added, removed) = stat.lines();
    text.push_str(&format!(
        "{} file(s) changed on {}, +{added} -{removed}\n",
        stat.files.len(),
        visible_line(ws.branch())
    ));
    Ok(text)
}

pub(crate) async fn apply(cli: &Cli, args: &ApplyArgs) -> anyhow::Result<u8> {
    let (service, id) = open(cli, &args.run_id).await?;
    let ws = workspace(&service, &id).await?;
    let mode = if args.commit {
        ApplyMode::Commit
    } else {
        ApplyMode::WorkingTree
    };
    print!("{}", apply_text(ws.as_ref(), &id, mode).await?);
    Ok(0)
}

/// Applies run `id`'s changes and says what came of it, as `fabric apply` prints it
/// (shared with `fabric chat`'s `/apply`).
pub(super) async fn apply_text(
    ws: &dyn Workspace,
    id: &RunId,
    mode: ApplyMode,
) -> anyhow::Result<String> {
    let applied = ws.apply(mode).await.map_err(|e| {
        if e.is_user_fixable() {
            anyhow::Error::new(UsageError(e.to_string()))
        } else {
            anyhow::Error::new(e)
        }
    })?;
    if applied.files.is_empty() {
        return Ok(format!(
            "run {id} changed nothing; there was nothing to apply\n"
        ));
    }
    let done = match &applied.commit {
        Some(commit) => format!(
            "committed {} file(s) from {} as {}",
            applied.files.len(),
            visible_line(ws.branch()),
            commit.short()
        ),
        None => format!(
            "applied {} file(s) from {} to your working tree, uncommitted: {}",
            applied.files.len(),
            visible_line(ws.branch()),
            visible_line(&applied.files.join(", "))
        ),
    };
    Ok(format!(
        "{done}\n`fabric discard {id}` removes the run's worktree and branch when you are done\n"
    ))
}

pub(crate) async fn discard(cli: &Cli, args: &DiscardArgs) -> anyhow::Result<u8> {
    let (service, id) = open(cli, &args.run_id).await?;
    print!("{}", discard_text(&service, &id).await?);
    Ok(0)
}

/// Discards run `id`'s worktree and branch, as `fabric discard` does (shared with
/// `fabric chat`'s `/discard`).
pub(super) async fn discard_text(service: &RunService, id: &RunId) -> anyhow::Result<String> {
    if service.discard_workspace(id).await? {
        Ok(format!(
            "discarded the workspace and branch of run {id}; its runlog stays\n"
        ))
    } else {
        Err(UsageError(format!(
            "run `{id}` worked in a plain scratch workspace: it has no branch to discard (`fabric logs prune` removes old runs)"
        ))
        .into())
    }
}

/// The run service over this configuration's store, and the run id checked.
async fn open(cli: &Cli, run_id: &str) -> anyhow::Result<(RunService, RunId)> {
    let id = RunId::parse(run_id).map_err(|e| UsageError(e.to_string()))?;
    let settings = wiring::load_settings(cli)?;
    let fabric = wiring::fabric(&settings, ServiceConfig::default()).await?;
    Ok((fabric.service, id))
}

/// The run's versioned workspace, or a usage error saying it has none.
pub(super) async fn workspace(
    service: &RunService,
    id: &RunId,
) -> anyhow::Result<Arc<dyn Workspace>> {
    service.ended_workspace(id).await?.ok_or_else(|| {
        UsageError(format!(
            "run `{id}` worked in a plain scratch workspace, not on a project: there is no branch to diff or apply (its files are in `fabric logs show {id}`'s workspace)"
        ))
        .into()
    })
}
