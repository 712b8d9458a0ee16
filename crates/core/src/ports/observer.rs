use async_trait::async_trait;
use fabric_domain::RunEvent;

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
