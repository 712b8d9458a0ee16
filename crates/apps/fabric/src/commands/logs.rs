//! `fabric logs list | show`.

use anyhow::Context;
use fabric_core::{Liveness, RunStore, StoreError};
use fabric_domain::{EventKind, RunEvent, RunId, RunStatus};
use serde_json::{Value, json};
use std::io::IsTerminal;

use crate::cli::{Cli, LogsCommand};
use crate::errors::UsageError;
use crate::render::{one_line, timestamp};
use crate::wiring;

pub(crate) async fn logs(cli: &Cli, command: &LogsCommand) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    match command {
        LogsCommand::List { limit, all, json } => list(&settings, *limit, *all, *json).await,
        LogsCommand::Search {
            query,
            semantic,
            specialist,
            status,
            since,
            limit,
            json,
        } => {
            super::catalog::search(
                &settings,
                super::catalog::SearchArgs {
                    query,
                    semantic: *semantic,
                    specialist: specialist.as_ref(),
                    status: status.as_deref(),
                    since: since.as_deref(),
                    limit: *limit,
                    json: *json,
                },
            )
            .await
        }
        LogsCommand::Prune {
            older_than,
            dry_run,
            yes,
            json,
        } => {
            let how = super::catalog::Prune {
                dry_run: *dry_run,
                ask: !*yes && !*json && std::io::stdin().is_terminal(),
                json: *json,
            };
            super::catalog::prune(&settings, older_than, how).await
        }
        LogsCommand::Show {
            run_id,
            kinds,
            json,
        } => show(&settings, run_id, kinds, *json).await,
    }
}

/// `fabric logs list`: the latest runs, those people started unless `all`.
async fn list(
    settings: &fabric_config::Settings,
    limit: usize,
    all: bool,
    json: bool,
) -> anyhow::Result<u8> {
    let store = wiring::open_store(settings).await?;
    let runs = store
        .list_runs(&fabric_core::RunQuery {
            limit,
            // The runs people started, unless all are asked for (issue #26).
            origin: (!all).then_some(fabric_domain::runlog::RunOrigin::User),
            ..Default::default()
        })
        .await?;
    let mut liveness = Vec::with_capacity(runs.len());
    for run in &runs {
        liveness.push(liveness_of(store.as_ref(), &run.id, run.status).await);
    }
    if json {
        let mut rows: Vec<Value> = Vec::with_capacity(runs.len());
        for (r, l) in runs.iter().zip(&liveness) {
            let conversation =
                fabric_core::service::conversation_totals(store.as_ref(), &r.id).await;
            rows.push(
                json!({"run_id": r.id, "started_at": r.started_at, "status": r.status,
                       "specialist_ids": r.specialist_ids, "prompt": r.prompt,
                       "summary": r.summary, "events": r.events, "origin": r.origin,
                       "parent_id": r.parent_id, "conversation": conversation,
                       "resumable": l.resumable(), "queued": l.queued()}),
            );
        }
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(0);
    }
    if runs.is_empty() {
        eprintln!(
            "no runs in {}{}",
            settings.workspace.display(),
            if all {
                ""
            } else {
                " started by people (`--all` lists delegated, review, replay, test and eval runs too)"
            }
        );
        return Ok(0);
    }
    let origin = |run: &fabric_domain::RunSummary| {
        if all {
            format!("{:<8} ", run.origin.as_str())
        } else {
            String::new()
        }
    };
    println!(
        "{:<29} {:<20} {:<24} {}{:<12} SUMMARY",
        "RUN ID",
        "STARTED (UTC)",
        "STATUS",
        if all { "ORIGIN   " } else { "" },
        "SPECIALISTS"
    );
    for (run, l) in runs.iter().zip(&liveness) {
        let summary = run.summary.as_deref().unwrap_or(&run.prompt);
        println!(
            "{:<29} {:<20} {:<24} {}{:<12} {}",
            run.id,
            timestamp(run.started_at),
            shown_status(run.status, *l),
            origin(run),
            fabric_domain::visible_line(&run.specialist_ids.join(",")),
            one_line(summary, 60)
        );
    }
    let interrupted: Vec<&RunId> = runs
        .iter()
        .zip(&liveness)
        .filter(|(_, l)| l.resumable())
        .map(|(r, _)| &r.id)
        .collect();
    match interrupted.as_slice() {
        [] => {}
        [id] => eprintln!(
            "run {id} was interrupted (its process is gone); `fabric resume {id}` continues it"
        ),
        [id, ..] => eprintln!(
            "{} runs were interrupted (their processes are gone); `fabric resume {id}` continues one, `fabric resume --all` every one",
            interrupted.len()
        ),
    }
    let queued = liveness.iter().filter(|l| l.queued()).count();
    if queued > 0 {
        eprintln!("{}", queued_hint(queued));
    }
    Ok(0)
}

/// `fabric logs show`: one run's events, described or as the runlog's own lines (`json`).
async fn show(
    settings: &fabric_config::Settings,
    run_id: &str,
    kinds: &[String],
    json: bool,
) -> anyhow::Result<u8> {
    let id = RunId::parse(run_id).map_err(|e| UsageError(e.to_string()))?;
    let wanted = parse_kinds(kinds)?;
    let store = wiring::open_store(settings).await?;
    let events = match store.read_events(&id).await {
        Err(StoreError::NotFound(_)) => {
            return Err(UsageError(format!(
                "no run `{id}` in {}; `fabric logs list` shows the runs that exist",
                settings.workspace.display()
            ))
            .into());
        }
        other => other.with_context(|| format!("reading run {id}"))?,
    };
    // On stderr, so `--json`'s lines stay the runlog's.
    if !events.last().is_some_and(|e| e.kind().is_terminal()) {
        let liveness = liveness_of(store.as_ref(), &id, RunStatus::Running).await;
        if liveness.resumable() {
            eprintln!(
                "run {id} is interrupted (resumable): its process is gone before its end; `fabric resume {id}` continues it"
            );
        } else if liveness.queued() {
            eprintln!("{}", queued_hint(1));
        }
    }
    if json {
        // The lines exactly as stored, so kinds written by a newer fabric survive.
        // A run made on another machine sharing the store has no runlog here: its
        // events are printed from the store, in the same line format.
        let text = match store.runlog_path(&id) {
            Some(path) if path.is_file() => {
                tokio::task::spawn_blocking(move || std::fs::read_to_string(path))
                    .await?
                    .context("reading the runlog")?
            }
            _ => events
                .iter()
                .map(|e| serde_json::to_string(e).map(|l| l + "\n"))
                .collect::<Result<String, _>>()?,
        };
        let lines = text.lines().filter(|l| !l.trim().is_empty());
        for (line, event) in lines.zip(&events) {
            if wanted.is_empty() || wanted.contains(&event.kind()) {
                println!("{line}");
            }
        }
        return Ok(0);
    }
    print_lineage(store.as_ref(), &id).await;
    for event in events
        .iter()
        .filter(|e| wanted.is_empty() || wanted.contains(&e.kind()))
    {
        println!("{}", describe(event));
    }
    Ok(0)
}

/// For a run that continues another: the runs it goes back through, and the conversation's
/// totals up to it (issue #42).
async fn print_lineage(store: &dyn RunStore, id: &RunId) {
    let Ok(lineage) = fabric_core::service::lineage(store, id).await else {
        return;
    };
    if lineage.len() < 2 {
        return;
    }
    for pair in lineage.windows(2) {
        let mode = pair[0].mode.map_or("continue", |m| m.as_str());
        println!("{} continues {} ({mode})", pair[0].run_id, pair[1].run_id);
    }
    if let Some(t) = fabric_core::service::ConversationTotals::of(&lineage) {
        println!(
            "conversation: {} runs, {} steps, {} tokens (from {} up to this run)",
            t.runs, t.steps, t.tokens, t.first
        );
    }
}

/// Who carries on a run without an end (issue #26), probed only for a `running` one.
async fn liveness_of(store: &dyn RunStore, id: &RunId, status: RunStatus) -> Liveness {
    if status == RunStatus::Running {
        store.liveness(id).await
    } else {
        Liveness::Unknown
    }
}

/// The STATUS column: the stored status, or for a run without an end what it is doing.
fn shown_status(status: RunStatus, liveness: Liveness) -> String {
    match liveness {
        Liveness::Interrupted => "interrupted (resumable)".to_owned(),
        Liveness::Queued => "queued".to_owned(),
        Liveness::Held | Liveness::Unknown => status.as_str().to_owned(),
    }
}

fn queued_hint(queued: usize) -> String {
    if queued == 1 {
        "1 run waits for a worker to claim it; start one with `fabric worker`".to_owned()
    } else {
        format!("{queued} runs wait for a worker to claim them; start one with `fabric worker`")
    }
}

fn parse_kinds(kinds: &[String]) -> anyhow::Result<Vec<EventKind>> {
    kinds
        .iter()
        .filter(|k| !k.trim().is_empty())
        .map(|k| {
            EventKind::parse(k.trim()).ok_or_else(|| {
                let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
                UsageError(format!(
                    "unknown event kind `{k}`; the kinds are: {}",
                    names.join(", ")
                ))
                .into()
            })
        })
        .collect()
}

fn describe(event: &RunEvent) -> String {
    let step = event.step.map_or_else(|| "-".to_owned(), |s| s.to_string());
    format!(
        "{:>4} {} step {:>3} {:<20} {}",
        event.seq,
        timestamp(event.ts),
        step,
        event.kind().as_str(),
        one_line(
            &event
                .payload_json()
                .map(|p| p.to_string())
                .unwrap_or_default(),
            160
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind docs/RUNLOG.md documents (its table and the reserved ones) is accepted.
    #[test]
    fn every_documented_kind_is_accepted() {
        let doc = include_str!("../../../../../docs/RUNLOG.md");
        let kinds_section = doc
            .split("## Kinds")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .unwrap_or_else(|| panic!("docs/RUNLOG.md has no Kinds section"));
        let documented: Vec<String> = kinds_section
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .map(str::to_owned)
            .collect();
        assert!(documented.len() >= 15, "{documented:?}");
        let parsed = parse_kinds(&documented).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.len(), documented.len());
        assert!(parsed.contains(&EventKind::McpServer));
        assert!(parse_kinds(&["nope".to_owned()]).is_err());
    }
}
