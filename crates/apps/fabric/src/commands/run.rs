//! `fabric run`: one task, start to finish, through the run service.

use fabric_core::service::{RunHandle, RunService, ServiceConfig, Submission, TaskRequest};
use fabric_core::{NoopObserver, RunObserver};
use fabric_domain::RunStatus;
use std::sync::Arc;

use crate::cli::{Cli, RunArgs};
use crate::render::{HumanRenderer, JsonLinesRenderer};
use crate::wiring;

/// How long `fabric run` waits, after printing the result, for the run to be embedded.
pub(super) const EMBED_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

pub(crate) async fn run(cli: &Cli, args: &RunArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    let network_allowed = if args.network_allowed {
        Some(true)
    } else if args.no_network_allowed {
        Some(false)
    } else {
        None
    };
    let fabric = wiring::fabric(&settings, ServiceConfig::default()).await?;
    let service = fabric.service.clone();
    // Runs a stopped process left go on alongside this one; their outcomes go to stderr.
    let resumed = if args.resume_interrupted {
        super::resume::start_all(&service).await?
    } else {
        Vec::new()
    };
    let code = match &args.prompt {
        Some(prompt) => {
            let request = TaskRequest {
                prompt: prompt.clone(),
                pack: args.pack.clone(),
                model_key: args.model_key.clone(),
                model: args.model.clone(),
                network_allowed,
                max_steps: args.max_steps,
                stream: args.stream,
                sandbox: args
                    .sandbox
                    .as_deref()
                    .and_then(fabric_config::SandboxMode::parse),
                continued: false,
                origin: fabric_domain::runlog::RunOrigin::User,
            };
            let submission =
                Submission::new(request).observed(observer_for(args.json, args.stream));
            let handle = service.submit(submission)?;
            follow(&service, handle, args.json).await?
        }
        None => 0,
    };
    let resumed_code = super::resume::report_all(&service, resumed, false).await;
    // The run is embedded for search in the background; give that a moment before exiting
    // (what is not done then is done by the next `fabric index rebuild` or `fabric serve`).
    service.shutdown(EMBED_GRACE).await;
    fabric.flush_telemetry().await;
    Ok(if args.prompt.is_some() {
        code
    } else {
        resumed_code
    })
}

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
    } else if outcome.status.has_result() {
        println!("{}", serde_json::to_string_pretty(&outcome.payload)?);
        if outcome.status == RunStatus::Partial {
            eprintln!(
                "note: part of the task force failed: {}",
                outcome.reason.as_deref().unwrap_or("no reason recorded")
            );
        }
        if outcome.status == RunStatus::CompletedWithoutFinish {
            eprintln!(
                "note: the model never called finish_task; the result was built from its last reply"
            );
        }
    } else {
        eprintln!(
            "run {} ended {}: {}",
            outcome.run_id,
            outcome.status,
            outcome.reason.as_deref().unwrap_or("no reason recorded")
        );
        eprintln!("see `fabric logs show {}`", outcome.run_id);
    }
    Ok(outcome.status.exit_code())
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
