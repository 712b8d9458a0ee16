//! The trace context of the run a task works for (issue #13): the run service runs each run
//! inside [`scope`], and an adapter that makes an outgoing call for it (a model request)
//! asks [`current_traceparent`] for the W3C header that makes the remote side's spans
//! children of the call's span. Where the header comes from is installed once per process
//! ([`install`]: the tracer, when telemetry is on); without it, or outside a run, there is
//! none. A task-local and not a parameter: the engine stays blind to tracing, and every call
//! of a run (its members, its routing) happens in the run's own task.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use fabric_domain::RunId;

/// Gives the `traceparent` of a run's call in flight.
pub trait TraceSource: Send + Sync {
    /// The header for run `run`'s current outgoing call, if it is traced.
    fn traceparent(&self, run: &RunId) -> Option<String>;
}

tokio::task_local! {
    static RUN: RunId;
}

static SOURCE: OnceLock<Arc<dyn TraceSource>> = OnceLock::new();

/// Installs where headers come from, once per process (later calls are ignored).
pub fn install(source: Arc<dyn TraceSource>) {
    if SOURCE.set(source).is_err() {
        tracing::debug!("a trace source was installed already; the first one stays");
    }
}

/// Runs `future` as the work of run `run`. Not an `async fn`: one would keep `future` in its
/// own state beside the task-local future it was moved into, twice the size for every run
/// in flight (2 KiB each through the run service; issue #14).
pub fn scope<F: Future>(run: RunId, future: F) -> impl Future<Output = F::Output> {
    RUN.scope(run, future)
}

/// The `traceparent` for an outgoing call of the run this task works for, if traced.
pub fn current_traceparent() -> Option<String> {
    let source = SOURCE.get()?;
    RUN.try_with(|run| source.traceparent(run)).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;

    impl TraceSource for Fixed {
        fn traceparent(&self, run: &RunId) -> Option<String> {
            Some(format!("for {run}"))
        }
    }

    #[tokio::test]
    async fn only_a_run_s_own_task_has_a_traceparent() {
        install(Arc::new(Fixed));
        assert_eq!(current_traceparent(), None);
        let run = RunId::parse("20260101-000000-000-aaaaaaaa").unwrap_or_else(|e| panic!("{e}"));
        let inside = scope(run.clone(), async { current_traceparent() }).await;
        assert_eq!(inside, Some(format!("for {run}")));
    }
}
