//! A prepared run and the preparer that makes it, for tests of the run service and the front
//! ends above it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fabric_core::execute::RunOutcome;
use fabric_core::service::{PrepareContext, Preparer, Runnable, ServiceError, TaskRequest};
use fabric_core::{CoreError, NewRun, RunObserver};
use fabric_domain::{EventKind, RunEvent, RunStatus};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::events::run_event;

/// What a [`ScriptedRun`] does. Each event is written to the runlog, then shown to the
/// observer, as the core's recorder does.
#[derive(Clone, Copy, Debug)]
pub enum RunScript {
    /// Records `run_start`, then `run_complete`.
    Complete,
    /// Records `run_start`, then panics.
    Panic,
    /// Records `run_start`, then `n` `tool_result`s of `size` bytes each, then
    /// `run_complete`.
    Events {
        /// How many.
        n: u64,
        /// Their size in bytes.
        size: usize,
    },
    /// Records `run_start`, then ignores cancellation for this long, then `run_failed`.
    Stubborn(Duration),
}

/// A prepared run that does what its [`RunScript`] says, without a model.
pub struct ScriptedRun(pub RunScript);

async fn record(run: &NewRun, observer: &dyn RunObserver, event: RunEvent) {
    run.log.append(&event).await.unwrap();
    observer.on_event(&event).await;
}

#[async_trait]
impl Runnable for ScriptedRun {
    async fn run(
        self: Box<Self>,
        run: NewRun,
        observer: &dyn RunObserver,
        _cancel: CancellationToken,
    ) -> Result<RunOutcome, CoreError> {
        record(&run, observer, run_event(&run.id, 0, EventKind::RunStart)).await;
        let (last, kind) = match self.0 {
            RunScript::Complete => (1, EventKind::RunComplete),
            RunScript::Panic => panic!("a bug in the run"),
            RunScript::Events { n, size } => {
                for seq in 1..=n {
                    // A tool result's text at least `size` bytes long.
                    let filler = Value::String("é".repeat(size / 2));
                    let fields = json!({"run_id": run.id, "result": filler});
                    let e = RunEvent {
                        seq,
                        ..super::sample(EventKind::ToolResult, 1.0, fields)
                    };
                    record(&run, observer, e).await;
                }
                (n + 1, EventKind::RunComplete)
            }
            RunScript::Stubborn(wait) => {
                tokio::time::sleep(wait).await;
                (1, EventKind::RunFailed)
            }
        };
        record(&run, observer, run_event(&run.id, last, kind)).await;
        Ok(outcome(run))
    }
}

fn outcome(run: NewRun) -> RunOutcome {
    RunOutcome {
        run_id: run.id,
        status: RunStatus::Completed,
        payload: json!({"summary": "done"}),
        reason: None,
        workspace: run.workspace,
        specialist_ids: Vec::new(),
        model_key: "test".to_owned(),
        model: "test".to_owned(),
        steps: 0,
        usage: Default::default(),
        routing: None,
        model_reason: None,
        changes: None,
    }
}

type Make = Box<dyn Fn(&TaskRequest) -> Result<Box<dyn Runnable>, ServiceError> + Send + Sync>;

/// A preparer with no I/O: refuses the specialist `nobody` when a request is checked, then
/// makes each run with its function, after its gate (if any) is notified.
pub struct FakePreparer {
    make: Make,
    gate: Option<Arc<Notify>>,
}

impl FakePreparer {
    /// Makes each run with `make`.
    pub fn new(
        make: impl Fn(&TaskRequest) -> Result<Box<dyn Runnable>, ServiceError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            make: Box::new(make),
            gate: None,
        }
    }

    /// Prepares a [`ScriptedRun`] of `script` for each request.
    pub fn running(script: RunScript) -> Self {
        Self::new(move |_| Ok(Box::new(ScriptedRun(script))))
    }

    /// Fails each preparation with `error(request)`.
    pub fn failing(error: impl Fn(&TaskRequest) -> ServiceError + Send + Sync + 'static) -> Self {
        Self::new(move |request| Err(error(request)))
    }

    /// Prepares only once `gate` is notified.
    pub fn gated(mut self, gate: Arc<Notify>) -> Self {
        self.gate = Some(gate);
        self
    }
}

#[async_trait]
impl Preparer for FakePreparer {
    fn check(&self, request: &TaskRequest) -> Result<(), ServiceError> {
        match request.specialists.first().map(String::as_str) {
            Some("nobody") => Err(ServiceError::UnknownSpecialist {
                id: "nobody".to_owned(),
                known: String::new(),
            }),
            _ => Ok(()),
        }
    }

    async fn prepare(
        &self,
        request: TaskRequest,
        _context: &PrepareContext,
    ) -> Result<Box<dyn Runnable>, ServiceError> {
        if let Some(gate) = &self.gate {
            gate.notified().await;
        }
        (self.make)(&request)
    }
}
