//! `fabric run`: one task, start to finish.

use fabric_core::execute::execute_task_force;
use fabric_core::{NoopObserver, RunObserver};
use fabric_domain::RunStatus;
use tokio_util::sync::CancellationToken;

use crate::app::{self, TaskRequest};
use crate::cli::{Cli, RunArgs};
use crate::render::{HumanRenderer, JsonLinesRenderer};
use crate::wiring;

pub(crate) async fn run(cli: &Cli, args: &RunArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    let network_allowed = if args.network_allowed {
        Some(true)
    } else if args.no_network_allowed {
        Some(false)
    } else {
        None
    };
    let prepared = app::prepare(
        &settings,
        TaskRequest {
            prompt: args.prompt.clone(),
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
        },
    )
    .await?;
    if !args.json {
        eprintln!("{}", prepared.recruitment_note());
        for note in prepared.model_notes() {
            eprintln!("{note}");
        }
    }

    let store = wiring::store(&settings);
    let human;
    let observer: &dyn RunObserver = match (args.json, args.stream) {
        (true, true) => &JsonLinesRenderer,
        (true, false) => &NoopObserver,
        (false, _) => {
            human = HumanRenderer::new();
            &human
        }
    };
    let cancel = CancellationToken::new();
    let watcher = tokio::spawn(cancel_on_signal(cancel.clone()));
    let outcome = execute_task_force(&store, prepared.task_force(), observer, cancel).await;
    watcher.abort();
    let outcome = outcome?;

    if args.json {
        println!(
            "{}",
            serde_json::to_string(&app::result_object(&outcome, &settings))?
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
async fn cancel_on_signal(cancel: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        tracing::warn!("cannot listen for SIGTERM; only Ctrl-C cancels the run");
        let _ = tokio::signal::ctrl_c().await;
        cancel.cancel();
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    eprintln!("\ncancelling the run (press Ctrl-C again to exit at once)");
    cancel.cancel();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    std::process::exit(130);
}
