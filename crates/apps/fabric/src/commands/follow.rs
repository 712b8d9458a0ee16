//! Following a run at the terminal, shared by `fabric run` and `fabric resume` (a leaf, so
//! neither command imports the other): who renders its events, the wait for Ctrl-C or
//! SIGTERM, and the result printed at its end.

use fabric_core::execute::RunOutcome;
use fabric_core::service::{RunHandle, RunService};
use fabric_core::{NoopObserver, RunObserver};
use fabric_domain::{RunStatus, visible_json, visible_line};
use std::sync::Arc;

use crate::render::{HumanRenderer, JsonLinesRenderer};

/// How long `fabric run` waits, after printing the result, for the run to be embedded.
pub(super) const EMBED_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Who watches a run at the terminal: the human renderer, every event as JSONL
/// (`--json --stream`), or nobody (`--json`: only the result is printed).
pub(super) fn observer_for(json: bool, stream: bool) -> Arc<dyn RunObserver> {
    match (json, stream) {
        (true, true) => Arc::new(JsonLinesRenderer),
        (true, false) => Arc::new(NoopObserver),
        (false, _) => Arc::new(HumanRenderer::new()),
    }
}

/// Follows one submitted run to its end, cancelling it on Ctrl-C or SIGTERM, and prints its
/// result; returns the exit code of its status.
pub(super) async fn follow(
    service: &RunService,
    mut handle: RunHandle,
    json: bool,
) -> anyhow::Result<u8> {
    // Ctrl-C or SIGTERM cancels the run by id, during preparation too.
    let watcher = tokio::spawn(cancel_on_signal(service.clone(), handle.id().clone()));
    let prepared = handle.prepared().await;
    if let Err(error) = prepared {
        watcher.abort();
        return Err(error.into());
    }
    let outcome = handle.outcome().await;
    watcher.abort();
    let outcome = outcome?;

    if json {
        println!(
            "{}",
            serde_json::to_string(&service.result_object(&outcome))?
        );
    } else {
        let (result, notes) = ended(&outcome)?;
        if let Some(result) = result {
            println!("{result}");
        }
        for note in notes {
            eprintln!("{note}");
        }
    }
    Ok(outcome.status.exit_code())
}

/// How a run ended, for a person (shared with `fabric chat`): its result (the payload as
/// pretty JSON, with no control character a terminal would obey), when it has one, and the
/// notes about its end.
pub(super) fn ended(outcome: &RunOutcome) -> anyhow::Result<(Option<String>, Vec<String>)> {
    let mut notes = Vec::new();
    if outcome.status.has_result() {
        let pretty = serde_json::to_string_pretty(&outcome.payload)?;
        if outcome.status == RunStatus::Partial {
            notes.push(format!(
                "note: part of the task force failed: {}",
                visible_line(outcome.reason.as_deref().unwrap_or("no reason recorded"))
            ));
        }
        if outcome.status == RunStatus::CompletedWithoutFinish {
            notes.push(
                "note: the model never called finish_task; the result was built from its last reply"
                    .to_owned(),
            );
        }
        return Ok((Some(visible_json(&pretty).into_owned()), notes));
    }
    if outcome.status == RunStatus::InputRequired {
        notes.push(format!(
            "run {id} waits for an answer: `fabric answer {id} \"…\"` continues it (see `fabric logs show {id}`)",
            id = outcome.run_id
        ));
    } else {
        notes.push(format!(
            "run {} ended {}: {}",
            outcome.run_id,
            outcome.status,
            visible_line(outcome.reason.as_deref().unwrap_or("no reason recorded"))
        ));
        notes.push(format!("see `fabric logs show {}`", outcome.run_id));
    }
    Ok((None, notes))
}

/// The first Ctrl-C or SIGTERM cancels the run, which then ends cleanly (children killed,
/// runlog closed with `run_failed`); a second one exits at once.
async fn cancel_on_signal(service: RunService, id: fabric_domain::RunId) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        tracing::warn!("cannot listen for SIGTERM; only Ctrl-C cancels the run");
        let _ = tokio::signal::ctrl_c().await;
        service.cancel(&id);
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    eprintln!("\ncancelling the run (press Ctrl-C again to exit at once)");
    service.cancel(&id);
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    std::process::exit(130);
}
