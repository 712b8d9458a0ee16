//! `fabric run`: one task, start to finish.

use fabric_config::Settings;
use fabric_core::RunObserver;
use fabric_core::engine::ModelParams;
use fabric_core::execute::{Recruitment, RunOutcome, Task, execute_task};
use fabric_domain::RunStatus;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, RunArgs};
use crate::errors::UsageError;
use crate::render::{HumanRenderer, JsonLinesRenderer};
use crate::wiring;
use fabric_core::NoopObserver;

pub(crate) async fn run(cli: &Cli, args: &RunArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    let (specialist, recruitment) = choose_specialist(&settings, args)?;
    let model_key = args
        .model_key
        .clone()
        .or_else(|| specialist.model_key.clone())
        .unwrap_or_else(|| settings.default_model_key.clone());
    let model = settings.model(&model_key).ok_or_else(|| {
        UsageError(format!(
            "no model key `{model_key}`; the configured keys are: {}",
            settings.model_keys().join(", ")
        ))
    })?;
    let chat = wiring::chat_client(model)?;
    let tools = wiring::tools_for(&specialist, &settings)?;
    let network_allowed = if args.network_allowed {
        true
    } else if args.no_network_allowed {
        false
    } else {
        settings.network_allowed
    };
    let task = Task {
        prompt: args.prompt.clone(),
        specialist,
        recruitment,
        tools,
        model_key: model_key.clone(),
        model: ModelParams {
            name: model.model.clone(),
            temperature: Some(model.temperature),
            top_p: Some(model.top_p),
            max_tokens: Some(model.max_tokens),
            stream: args.stream,
        },
        max_steps: args.max_steps.unwrap_or(settings.max_steps),
        network_allowed,
    };

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
    let watcher = tokio::spawn(cancel_on_ctrl_c(cancel.clone()));
    let outcome = execute_task(&store, chat.as_ref(), task, observer, cancel).await;
    watcher.abort();
    let outcome = outcome?;

    let result = result_object(&outcome, &settings);
    if args.json {
        println!("{}", serde_json::to_string(&result)?);
    } else if outcome.status.is_success() {
        println!("{}", serde_json::to_string_pretty(&outcome.payload)?);
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

/// `--pack` names the specialist; without it the default specialist works (keyword and LLM
/// routing across several specialists come with the specialists issue).
fn choose_specialist(
    settings: &Settings,
    args: &RunArgs,
) -> anyhow::Result<(fabric_domain::SpecialistSpec, Recruitment)> {
    let (id, method, reason) = match &args.pack {
        Some(id) => (id.as_str(), "explicit", format!("--pack {id}")),
        None => (
            settings.default_specialist.as_str(),
            "default",
            "no --pack given; using the default specialist".to_owned(),
        ),
    };
    let specialist = settings.specialist(id).cloned().ok_or_else(|| {
        UsageError(format!(
            "no specialist `{id}`; the specialists are: {}",
            settings.specialist_ids().join(", ")
        ))
    })?;
    let recruitment = Recruitment {
        routing_method: method.to_owned(),
        required_capabilities: Vec::new(),
        reason,
    };
    Ok((specialist, recruitment))
}

/// The one JSON object of `--json`: the payload's fields plus `_meta`.
fn result_object(outcome: &RunOutcome, settings: &Settings) -> Value {
    let meta = json!({
        "run_id": outcome.run_id,
        "status": outcome.status,
        "reason": outcome.reason,
        "specialist_ids": outcome.specialist_ids,
        "workspace": outcome.workspace,
        "runlog": settings.workspace.join("runs").join(outcome.run_id.as_str()).join(fabric_store_fs::RUNLOG_FILE),
        "model_key": outcome.model_key,
        "model": outcome.model,
        "steps": outcome.steps,
        "usage": outcome.usage,
    });
    let mut object = match &outcome.payload {
        Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    object.insert("_meta".to_owned(), meta);
    Value::Object(object)
}

/// The first Ctrl-C or SIGTERM cancels the run, which then ends cleanly (children killed,
/// runlog closed with `run_failed`); a second one exits at once.
async fn cancel_on_ctrl_c(cancel: CancellationToken) {
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
