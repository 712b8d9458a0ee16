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
    let stat = ws.diff_stat().await?;
    if args.json {
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
        println!("{}", serde_json::to_string(&object)?);
    } else if args.stat {
        for f in &stat.files {
            match (f.added, f.removed) {
                (Some(a), Some(r)) => {
                    let (a, r) = (format!("+{a}"), format!("-{r}"));
                    println!("{a:>6} {r:>6}  {}", visible_line(&f.path))
                }
                _ => println!("{:>13}  {}", "binary", visible_line(&f.path)),
            }
        }
        let (added, removed) = stat.lines();
        println!(
            "{} file(s) changed on {}, +{added} -{removed}",
            stat.files.len(),
            visible_line(ws.branch())
        );
    } else {
        // The files' contents as they are, escape sequences shown, not obeyed (ADR-089).
        print!("{}", visible_text(&ws.diff().await?));
    }
    Ok(0)
}

pub(crate) async fn apply(cli: &Cli, args: &ApplyArgs) -> anyhow::Result<u8> {
    let (service, id) = open(cli, &args.run_id).await?;
    let ws = workspace(&service, &id).await?;
    let mode = if args.commit {
        ApplyMode::Commit
    } else {
        ApplyMode::WorkingTree
    };
    let applied = ws.apply(mode).await.map_err(|e| {
        if e.is_user_fixable() {
            anyhow::Error::new(UsageError(e.to_string()))
        } else {
            anyhow::Error::new(e)
        }
    })?;
    if applied.files.is_empty() {
        println!("run {id} changed nothing; there was nothing to apply");
        return Ok(0);
    }
    match &applied.commit {
        Some(commit) => println!(
            "committed {} file(s) from {} as {}",
            applied.files.len(),
            visible_line(ws.branch()),
            commit.short()
        ),
        None => println!(
            "applied {} file(s) from {} to your working tree, uncommitted: {}",
            applied.files.len(),
            visible_line(ws.branch()),
            visible_line(&applied.files.join(", "))
        ),
    }
    println!("`fabric discard {id}` removes the run's worktree and branch when you are done");
    Ok(0)
}

pub(crate) async fn discard(cli: &Cli, args: &DiscardArgs) -> anyhow::Result<u8> {
    let (service, id) = open(cli, &args.run_id).await?;
    if service.discard_workspace(&id).await? {
        println!("discarded the workspace and branch of run {id}; its runlog stays");
        Ok(0)
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
async fn workspace(service: &RunService, id: &RunId) -> anyhow::Result<Arc<dyn Workspace>> {
    service.ended_workspace(id).await?.ok_or_else(|| {
        UsageError(format!(
            "run `{id}` worked in a plain scratch workspace, not on a project: there is no branch to diff or apply (its files are in `fabric logs show {id}`'s workspace)"
        ))
        .into()
    })
}
