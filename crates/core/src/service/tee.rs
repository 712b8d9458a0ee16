//! Every event to the live buffer and to the submitter's own observer.

use async_trait::async_trait;
use fabric_domain::{LiveToolOutput, RunEvent};
use std::sync::Arc;

use crate::live::LiveRun;
use crate::live_output::OutputObserver;
use crate::ports::{ChatObserver, EventSink, RunObserver};

/// The service's sinks (metrics, traces) and the live run first (followers by id), then the
/// submitter's observer.
pub(super) struct Tee<'a> {
    pub(super) live: &'a LiveRun,
    pub(super) sinks: &'a [std::sync::Arc<dyn EventSink>],
    pub(super) extra: Option<&'a dyn RunObserver>,
    /// The same two for the run's tools' live output, which outlives a borrow.
    pub(super) output: Arc<LiveOutput>,
}

/// Where the run's tools' live output goes (issue #42): the live run's followers, then the
/// submitter's observer. Not the service's sinks: it is not an event.
pub(super) struct LiveOutput {
    pub(super) live: Arc<LiveRun>,
    pub(super) extra: Option<Arc<dyn RunObserver>>,
}

impl OutputObserver for LiveOutput {
    fn on_tool_output(&self, output: &LiveToolOutput) {
        self.live.on_tool_output(output);
        if let Some(extra) = &self.extra {
            extra.on_tool_output(output);
        }
    }
}

impl ChatObserver for Tee<'_> {
    fn on_text_delta(&self, delta: &str) {
        if let Some(extra) = self.extra {
            extra.on_text_delta(delta);
        }
    }
}

#[async_trait]
impl RunObserver for Tee<'_> {
    async fn on_event(&self, event: &RunEvent) {
        for sink in self.sinks {
            sink.observe(self.live.id(), event);
        }
        self.live.on_event(event).await;
        if let Some(extra) = self.extra {
            extra.on_event(event).await;
        }
    }

    fn on_prepared(&self, notes: &[String]) {
        if let Some(extra) = self.extra {
            extra.on_prepared(notes);
        }
    }

    fn on_notice(&self, notice: &str) {
        self.live.on_notice(notice);
        if let Some(extra) = self.extra {
            extra.on_notice(notice);
        }
    }

    fn on_tool_output(&self, output: &LiveToolOutput) {
        self.output.on_tool_output(output);
    }

    fn output_observer(&self) -> Option<Arc<dyn OutputObserver>> {
        Some(self.output.clone())
    }
}
