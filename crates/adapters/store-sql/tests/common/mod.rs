//! Helpers shared by the store's test binaries: stores on both backends, and runs made of
//! events.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr
)]

use fabric_core::{RunStore, new_run_id};
use fabric_domain::{EventKind, RunEvent, RunId};
use fabric_store_sql::{SqlStore, StoreOptions};
use serde_json::{Value, json};
use std::time::Duration;

/// A store under test, its workspace root, and the URL to reopen it.
pub(crate) struct TestStore {
    pub(crate) store: SqlStore,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) url: Option<String>,
}

impl TestStore {
    pub(crate) fn root(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub(crate) async fn reopen(&self) -> SqlStore {
        SqlStore::open_with(self.url.as_deref(), self.root(), options())
            .await
            .unwrap()
    }
}

pub(crate) fn options() -> StoreOptions {
    StoreOptions {
        busy_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_secs(2),
        retry_after: Duration::from_millis(200),
        ..StoreOptions::default()
    }
}

pub(crate) async fn sqlite() -> TestStore {
    let dir = tempfile::tempdir().unwrap();
    let store = SqlStore::open_with(None, dir.path(), options())
        .await
        .unwrap();
    TestStore {
        store,
        dir,
        url: None,
    }
}

/// A fresh database on this binary's shared cluster, or `None` (after a loud SKIP) when
/// PostgreSQL is not installed.
pub(crate) async fn postgres() -> Option<TestStore> {
    let url = match fabric_test_support::shared_cluster() {
        Ok(cluster) => cluster.create_database().unwrap(),
        Err(e) => {
            eprintln!(
                "SKIPPED: PostgreSQL contract test: {e}; run scripts/install-test-deps.sh (FABRIC_REQUIRE_TEST_DEPS=1 makes this a failure)"
            );
            return None;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let store = SqlStore::open_with(Some(&url), dir.path(), options())
        .await
        .unwrap();
    Some(TestStore {
        store,
        dir,
        url: Some(url),
    })
}

pub(crate) fn event(seq: u64, ts: f64, kind: EventKind, payload: Value) -> RunEvent {
    RunEvent::from_wire(seq, ts, kind.as_str(), Some(0), payload)
}

/// `event` as a kind this version does not know (`unknown`), its payload kept.
pub(crate) fn of_unknown_kind(event: &RunEvent) -> fabric_domain::EventPayload {
    fabric_domain::EventPayload::Unknown {
        kind: "unknown".into(),
        payload: event.payload_json().unwrap(),
    }
}

/// What a scripted run does.
pub(crate) struct Script<'a> {
    pub(crate) prompt: &'a str,
    pub(crate) specialist: &'a str,
    pub(crate) model_key: &'a str,
    pub(crate) tool: &'a str,
    pub(crate) tool_result: &'a str,
    pub(crate) tool_error: bool,
    /// `None`: the run stays running.
    pub(crate) status: Option<&'a str>,
    pub(crate) summary: &'a str,
    pub(crate) started_at: f64,
}

impl Default for Script<'_> {
    fn default() -> Self {
        Self {
            prompt: "write hello world",
            specialist: "engineering",
            model_key: "default",
            tool: "write_file",
            tool_result: "wrote 11 bytes",
            tool_error: false,
            status: Some("completed"),
            summary: "wrote hello.txt",
            started_at: 1_700_000_000.0,
        }
    }
}

/// The events of a scripted run.
pub(crate) fn events(id: &RunId, s: &Script<'_>) -> Vec<RunEvent> {
    let t = s.started_at;
    let mut out = vec![
        event(
            0,
            t,
            EventKind::RunStart,
            json!({"run_id": id.as_str(), "prompt": s.prompt, "model_key": s.model_key, "model": "qwen2.5:7b", "parent_run_id": null}),
        ),
        event(
            1,
            t + 0.1,
            EventKind::Recruitment,
            json!({"specialist_ids": [s.specialist]}),
        ),
        event(
            2,
            t + 0.2,
            EventKind::ToolCall,
            json!({"tool": s.tool, "call_id": "c1", "args": {"path": "hello.txt", "content": "Hello World"}}),
        ),
    ];
    out.push(if s.tool_error {
        event(
            3,
            t + 0.3,
            EventKind::ToolError,
            json!({"tool": s.tool, "call_id": "c1", "error_type": "failed", "error_message": s.tool_result}),
        )
    } else {
        event(
            3,
            t + 0.3,
            EventKind::ToolResult,
            json!({"tool": s.tool, "call_id": "c1", "result": s.tool_result}),
        )
    });
    if let Some(status) = s.status {
        let kind = if matches!(status, "completed" | "completed_without_finish" | "partial") {
            EventKind::RunComplete
        } else {
            EventKind::RunFailed
        };
        out.push(event(
            4,
            t + 2.0,
            kind,
            json!({"run_id": id.as_str(), "status": status, "steps": 2, "reason": null,
                   "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                   "result": {"summary": s.summary}}),
        ));
    }
    out
}

/// Runs a scripted run through the store's `RunLog` and flushes the index behind it, as the
/// run service does at shutdown; returns its id.
pub(crate) async fn run(store: &impl RunStore, script: &Script<'_>) -> RunId {
    let id = run_unflushed(store, script).await;
    store.flush().await;
    id
}

/// Runs a scripted run through the store's `RunLog` without waiting for the index.
pub(crate) async fn run_unflushed(store: &impl RunStore, script: &Script<'_>) -> RunId {
    let new = store.create_run(new_run_id()).await.unwrap();
    for event in events(&new.id, script) {
        new.log.append(&event).await.unwrap();
    }
    // Ids are minted from the clock; keep them apart.
    tokio::time::sleep(Duration::from_millis(2)).await;
    new.id
}
