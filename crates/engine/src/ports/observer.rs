use async_trait::async_trait;
use fabric_domain::{LiveToolOutput, RunEvent};
use std::sync::Arc;

use super::ChatObserver;

/// Watches a run live: the CLI's renderer, an SSE stream, a test.
///
/// `on_event` is awaited before the run goes on, so a slow watcher slows the run down
/// instead of losing events (back-pressure, never drops).
#[async_trait]
pub trait RunObserver: ChatObserver {
    /// An event, after it was written to the runlog.
    async fn on_event(&self, event: &RunEvent);

    /// Preparation ended and the run is about to start: who works on it, with which model
    /// and why, in words for a person (one line each). The default ignores them.
    fn on_prepared(&self, notes: &[String]) {
        let _ = notes;
    }

    /// Something a person watching should know that is not an event of the run and is not
    /// in its runlog: e.g. that no worker has claimed a queued run yet (issue #26). The
    /// default ignores it.
    fn on_notice(&self, notice: &str) {
        let _ = notice;
    }

    /// What a running tool printed (issue #42: a `shell` command's lines), bounded by the
    /// engine (`crate::live`); live only, never in the runlog. Called from the tool's task
    /// and never awaited: it must only queue or print. The default ignores it.
    fn on_tool_output(&self, output: &LiveToolOutput) {
        let _ = output;
    }

    /// Where the run's tools publish their live output (`ToolContext::live`); `None`, the
    /// default: nobody follows it, and tools do not split their output into lines.
    fn output_observer(&self) -> Option<Arc<dyn crate::live_output::OutputObserver>> {
        None
    }
}

/// A watcher that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

impl ChatObserver for NoopObserver {
    fn on_text_delta(&self, _delta: &str) {}
}

#[async_trait]
impl RunObserver for NoopObserver {
    async fn on_event(&self, _event: &RunEvent) {}
}

/// A process-wide watcher of every run the service executes (metrics, traces): told each
/// event with its run's id, synchronously, so it must only count or queue (no I/O, no
/// waiting).
pub trait EventSink: Send + Sync {
    /// One event of run `run`, after it was written to the runlog.
    fn observe(&self, run: &fabric_domain::RunId, event: &fabric_domain::RunEvent);

    /// Run `run` left the service (ended, suspended or failed before its first event):
    /// forget what is kept for it.
    fn forget(&self, run: &fabric_domain::RunId) {
        let _ = run;
    }

    /// Run `run` continues a trace started elsewhere: a W3C `traceparent` (`POST /run` with
    /// the header). Called before its first event. The default ignores it.
    fn link_parent(&self, run: &fabric_domain::RunId, traceparent: &str) {
        let _ = (run, traceparent);
    }
}
