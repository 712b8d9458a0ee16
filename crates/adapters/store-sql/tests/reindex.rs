//! Issue #40: `fabric index rebuild` read each run's indexed events with a query of its own.
//! Counted here from sqlx's own statement events (a test binary of its own, so no other
//! test's queries are counted), on SQLite and on PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Script, TestStore, run};
use fabric_core::RunCatalog;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Statements that read a run's indexed events.
static EVENT_READS: AtomicUsize = AtomicUsize::new(0);

/// Counts the statements sqlx runs that read `events` by run.
struct Statements;

struct Statement(bool);

impl Visit for Statement {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "db.statement" || field.name() == "summary" {
            self.0 |= value.contains("FROM events WHERE run_id");
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
}

impl Subscriber for Statements {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("sqlx")
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut seen = Statement(false);
        event.record(&mut seen);
        if seen.0 {
            EVENT_READS.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// Rebuilding the index of 30 runs reads their indexed events in one query, not 30.
async fn reads_the_events_of_many_runs_at_once(t: &TestStore) {
    let s = &t.store;
    for i in 0..30 {
        let prompt = format!("task number {i}");
        run(
            s,
            &Script {
                prompt: &prompt,
                ..Script::default()
            },
        )
        .await;
    }
    s.flush().await;
    EVENT_READS.store(0, Ordering::SeqCst);
    assert_eq!(s.reindex().await.unwrap().runs, 0, "nothing to repair");
    assert_eq!(EVENT_READS.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_40_index_rebuild_batches_its_reads() {
    tracing::subscriber::set_global_default(Statements).expect("the only subscriber");
    let store = common::sqlite().await;
    reads_the_events_of_many_runs_at_once(&store).await;
    if let Some(store) = common::postgres().await {
        reads_the_events_of_many_runs_at_once(&store).await;
    }
}
