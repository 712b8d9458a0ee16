//! Every event to the live buffer and to the submitter's own observer.

use async_trait::async_trait;
use fabric_domain::RunEvent;

use crate::live::LiveRun;
use crate::ports::{ChatObserver, EventSink, RunObserver};

/// The service's sinks (metrics, traces) and the live run first (followers by id), then the
/// submitter's observer.
pub(super) struct Tee<'a> {
    pub(super) live: &'a LiveRun,
    pub(super) sinks: &'a [std::sync::Arc<dyn EventSink>],
    pub(super) extra: Option<&'a dyn RunObserver>,
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
}
