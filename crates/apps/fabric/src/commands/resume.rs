//! `fabric resume`: continue a run whose process stopped before its end, or every such run
//! (docs/DURABILITY.md).

use fabric_core::execute::RunOutcome;
use fabric_core::service::{RunService, ServiceConfig, ServiceError, Submission};
use fabric_domain::{RunId, visible_line};
use std::time::{Duration, Instant};

use super::follow::{EMBED_GRACE, follow, observer_for};
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

/// A run `--all` continues: its outcome once it ends, and how long it ran here.
pub(super) type Resuming =
    tokio::task::JoinHandle<(RunId, Result<RunOutcome, ServiceError>, Duration)>;

/// Submits every interrupted run; says how many on stderr, and a line for each it takes
/// (issue #26: which runs it took was not said).
pub(super) async fn start_all(service: &RunService) -> anyhow::Result<Vec<Resuming>> {
    let since = Instant::now();
    let (handles, refused) = service.resume_interrupted(None).await?;
    if !handles.is_empty() {
        eprintln!(
            "continuing {} interrupted run{}",
            handles.len(),
            if handles.len() == 1 { "" } else { "s" }
        );
    }
    let mut resuming = Vec::with_capacity(handles.len());
    for handle in handles {
        let id = handle.id().clone();
        let specialists = service.recorded_specialists(&id).await;
        eprintln!(
            "resuming run {id} ({}): its process is gone; continuing from its last step",
            specialists_of(&specialists)
        );
        // Awaited here, as it ends, so its time is its own whatever order they are reported in.
        resuming.push(tokio::spawn(async move {
            let outcome = handle.outcome().await;
            (id, outcome, since.elapsed())
        }));
    }
    for (id, error) in refused {
        eprintln!(
            "run {id} stays interrupted for now: {}",
            visible_line(&error.to_string())
        );
    }
    Ok(resuming)
}

/// Specialists as said in a report line.
pub(super) fn specialists_of(ids: &[String]) -> String {
    if ids.is_empty() {
        "specialist not chosen yet".to_owned()
    } else {
        visible_line(&ids.join(", ")).into_owned()
    }
}

/// Waits for continued runs and reports each: a line on stderr (how it ended, in how long),
/// or with `json` its result object as one line on stdout too. Returns 0 when every one
/// succeeded, else the exit code of the first that did not.
pub(super) async fn report_all(service: &RunService, handles: Vec<Resuming>, json: bool) -> u8 {
    let mut code = 0;
    for handle in handles {
        let (line, exit) = match handle.await {
            Ok((id, Ok(outcome), elapsed)) => {
                if json {
                    println!("{}", service.result_object(&outcome));
                }
                let reason = outcome
                    .reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                (
                    format!(
                        "run {id} resumed and ended {} in {:.1} s{reason}",
                        outcome.status,
                        elapsed.as_secs_f64()
                    ),
                    outcome.status.exit_code(),
                )
            }
            Ok((id, Err(error), _)) => (
                format!("run {id} could not be continued: {error}"),
                crate::errors::EXIT_FAILURE,
            ),
            Err(join) => (
                format!("a continued run's task stopped: {join}"),
                crate::errors::EXIT_FAILURE,
            ),
        };
        eprintln!("{}", visible_line(&line));
        if code == 0 {
            code = exit;
        }
    }
    code
}
