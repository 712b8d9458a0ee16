//! Writes each event to the runlog, then shows it to the observer, numbering them in order.

use fabric_domain::{EventKind, RunEvent};
use serde_json::Value;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::ports::{RunLog, RunObserver, StoreError};

/// The single writer of one run's events. Holding `&mut` to it is what keeps `seq` gapless.
pub(crate) struct Recorder<'a> {
    log: &'a dyn RunLog,
    observer: &'a dyn RunObserver,
    next_seq: u64,
}

impl<'a> Recorder<'a> {
    pub(crate) fn new(log: &'a dyn RunLog, observer: &'a dyn RunObserver) -> Self {
        Self {
            log,
            observer,
            next_seq: 0,
        }
    }

    pub(crate) fn observer(&self) -> &'a dyn RunObserver {
        self.observer
    }

    /// Records one event. The runlog comes first: what a watcher saw is always on disk.
    pub(crate) async fn emit(
        &mut self,
        kind: EventKind,
        step: Option<u32>,
        payload: Value,
    ) -> Result<(), StoreError> {
        let event = RunEvent {
            seq: self.next_seq,
            ts: now(),
            kind,
            step,
            payload,
        };
        self.log.append(&event).await?;
        self.next_seq += 1;
        self.observer.on_event(&event).await;
        Ok(())
    }
}

fn now() -> f64 {
    // A clock before 1970 is not a state a run can do anything about; 0 keeps the line valid.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Cuts `text` to at most `max` characters, saying how much was left out.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((cut, _)) => {
            let rest = text[cut..].chars().count();
            format!("{}\n[truncated: {rest} more characters]", &text[..cut])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn truncate_keeps_short_text_and_says_what_was_cut() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("abcdef", 3), "abc\n[truncated: 3 more characters]");
        assert_eq!(truncate("ééé", 2), "éé\n[truncated: 1 more characters]");
    }
}
