//! Writes each event to the runlog, then shows it to the observer, numbering them in order.

use fabric_domain::{EventPayload, RunEvent};
use tokio::sync::Mutex;

use crate::ports::{RunLog, RunObserver, StoreError};

/// What every view of one run's recorder shares.
pub(crate) struct Journal<'a> {
    log: &'a dyn RunLog,
    observer: &'a dyn RunObserver,
    /// The next `seq`. The async mutex is held while the event is written and shown, so
    /// numbering, writing and showing are one step: concurrent task-force members can never
    /// interleave inside an event, leave a gap, or show events out of `seq` order. (A writer
    /// task with a bounded channel would do the same with more moving parts; writes are
    /// short, so the lock is simply the queue.)
    next_seq: Mutex<u64>,
}

impl<'a> Journal<'a> {
    /// A journal whose next event gets `seq` `next_seq` (0 for a new run, the count of its
    /// events for a resumed one).
    pub(crate) fn new(log: &'a dyn RunLog, observer: &'a dyn RunObserver, next_seq: u64) -> Self {
        Self {
            log,
            observer,
            next_seq: Mutex::new(next_seq),
        }
    }

    /// The recorder of the run as a whole.
    pub(crate) fn recorder(&self) -> Recorder<'_> {
        Recorder {
            journal: self,
            member: None,
        }
    }
}

/// A writer of one run's events: the run's own, or a task-force member's view that tags
/// every payload with its `pack_index`. Cheap to copy; all views share one `seq`.
#[derive(Clone, Copy)]
pub(crate) struct Recorder<'a> {
    journal: &'a Journal<'a>,
    member: Option<u32>,
}

impl<'a> Recorder<'a> {
    /// The view of task-force member `member` (written as `pack_index`).
    pub(crate) fn member(self, member: u32) -> Self {
        Self {
            journal: self.journal,
            member: Some(member),
        }
    }

    /// The task-force member this view records for, if any.
    pub(crate) fn member_index(&self) -> Option<u32> {
        self.member
    }

    pub(crate) fn observer(&self) -> &'a dyn RunObserver {
        self.journal.observer
    }

    /// Records one typed payload (`fabric_domain::runlog`) as an event of its kind. The
    /// runlog comes first: what a watcher saw is always on disk. The event stays typed on
    /// its way to the observers; only the runlog's edge writes it as JSON.
    ///
    /// The recording is boxed, on the heap only while it runs: inline, its payload (twice),
    /// the event and the lock's wait were 1.2 KiB in every future that records, up to the
    /// run's, held by every run in flight while it waits for its model (issue #45).
    pub(crate) fn record(
        &self,
        step: Option<u32>,
        payload: impl Into<EventPayload>,
    ) -> Recording<'a> {
        self.record_payload(step, payload.into())
    }

    fn record_payload(&self, step: Option<u32>, payload: EventPayload) -> Recording<'a> {
        let this = *self;
        Box::pin(async move {
            let mut next_seq = this.journal.next_seq.lock().await;
            let event = RunEvent {
                seq: *next_seq,
                ts: crate::unix_now(),
                step,
                member: this.member,
                payload,
            };
            this.journal.log.append(&event).await?;
            *next_seq += 1;
            this.journal.observer.on_event(&event).await;
            Ok(())
        })
    }
}

/// One event being recorded ([`Recorder::record`]).
pub(crate) type Recording<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), StoreError>> + Send + 'a>>;

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
