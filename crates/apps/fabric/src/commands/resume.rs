//! `fabric resume`: continue a run whose process stopped before its end, or every such run
//! (docs/DURABILITY.md).

use fabric_core::service::{RunHandle, RunService, ServiceConfig, Submission};
use fabric_domain::RunId;

use super::run::{EMBED_GRACE, follow, observer_for};
use crate::cli::{Cli, ResumeArgs};
use crate::errors::UsageError;
use crate::wiring;

pub(crate) async fn resume(cli: &Cli, args: &ResumeArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    // Checked before anything starts, so a typo is answered as such.
    let id = match &args.run_id {
        Some(id) => Some(RunId::parse(id).map_err(|e| {
            UsageError(format!(
                "{e}; `fabric logs list` shows the runs and their ids"
            ))
        })?),
        None => None,
    };
    let fabric = wiring::fabric(&settings, ServiceConfig::default()).await?;
    let service = fabric.service.clone();
    let code = match id {
        Some(id) => {
            let submission = Submission::resume(id).observed(observer_for(args.json, args.stream));
            let handle = service.submit(submission)?;
            follow(&service, handle, args.json).await
        }
        None => {
            let handles = start_all(&service).await?;
            Ok(report_all(&service, handles, args.json).await)
        }
    };
    service.shutdown(EMBED_GRACE).await;
    fabric.flush_telemetry().await;
    code
}

/// Submits every interrupted run; says how many on stderr.
pub(super) async fn start_all(service: &RunService) -> anyhow::Result<Vec<RunHandle>> {
    let (handles, refused) = service.resume_interrupted(None).await?;
    if !handles.is_empty() {
        eprintln!(
            "continuing {} interrupted run{}",
            handles.len(),
            if handles.len() == 1 { "" } else { "s" }
        );
    }
    for (id, error) in refused {
        eprintln!("run {id} stays interrupted for now: {error}");
    }
    Ok(handles)
}

/// Waits for continued runs and reports each: a line on stderr, or with `json` its result
/// object as one line on stdout. Returns 0 when every one succeeded, else the exit code of
/// the first that did not.
pub(super) async fn report_all(service: &RunService, handles: Vec<RunHandle>, json: bool) -> u8 {
    let mut code = 0;
    for handle in handles {
        let id = handle.id().clone();
        let (line, exit) = match handle.outcome().await {
            Ok(outcome) => {
                if json {
                    println!("{}", service.result_object(&outcome));
                }
                let reason = outcome
                    .reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                (
                    format!("run {id} resumed and ended {}{reason}", outcome.status),
                    outcome.status.exit_code(),
                )
            }
            Err(error) => (
                format!("run {id} could not be continued: {error}"),
                crate::errors::EXIT_FAILURE,
            ),
        };
        eprintln!("{line}");
        if code == 0 {
            code = exit;
        }
    }
    code
}
