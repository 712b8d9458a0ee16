//! `run_task` as an MCP task (SEP-2663, the tasks extension of 2026-07-28; issue #29).
//!
//! A 2026-07-28 request whose `_meta` envelope declares the extension gets `run_task`
//! answered at once with a task whose id is the run's id (on 2025-11-25 the extension is
//! ignored and the blocking answer given: ADR-084, amended);
//! it polls `tasks/get` (working, then completed with the very tool result a blocking
//! `run_task` answers, or cancelled) and may `tasks/cancel`, which cancels the run. Every
//! other tool, and every client that did not declare tasks, is answered as before.
//!
//! The [`TaskBoard`] keeps what `tasks/get` answers, shared by every session (a 2026-07-28
//! client may poll on another connection than the one that started the task), for
//! [`TTL_MS`] after a task was created.

use std::collections::HashMap;
use std::sync::Mutex;

use fabric_domain::{RunId, UtcTime};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};

/// How long a task is kept after it was created: a day.
pub(crate) const TTL_MS: u64 = 24 * 60 * 60 * 1000;
/// How often a client should poll.
const POLL_MS: u64 = 1000;

/// What became of one task.
#[derive(Debug, Clone)]
enum State {
    Working,
    Completed(JsonObject),
    Cancelled,
}

#[derive(Debug, Clone)]
struct Entry {
    /// Seconds since the Unix epoch.
    created: f64,
    updated: f64,
    state: State,
}

/// The tasks this server started, by task (run) id.
#[derive(Debug, Default)]
pub(crate) struct TaskBoard(Mutex<HashMap<String, Entry>>);

impl TaskBoard {
    /// Records the task of run `id`, working, and answers its creation; tasks past their
    /// time are forgotten on the way.
    pub(crate) fn start(&self, id: &RunId) -> CreateTaskResult {
        let now = fabric_core::unix_now();
        let entry = Entry {
            created: now,
            updated: now,
            state: State::Working,
        };
        let mut board = self.lock();
        board.retain(|_, e| (now - e.created) * 1000.0 < TTL_MS as f64);
        board.insert(id.to_string(), entry.clone());
        CreateTaskResult::new(task(id.as_str(), &entry))
    }

    /// Records how the task of run `id` ended: cancelled, or completed with `result` (a
    /// failed run is a completed task whose result says so, as the blocking call answers).
    pub(crate) fn finish(&self, id: &RunId, result: &CallToolResult, cancelled: bool) {
        let state = if cancelled {
            State::Cancelled
        } else {
            match serde_json::to_value(result) {
                Ok(serde_json::Value::Object(object)) => State::Completed(object),
                // A tool result always serialises to an object; say so if it ever did not.
                _ => State::Completed(JsonObject::from_iter([(
                    "isError".to_owned(),
                    serde_json::Value::Bool(true),
                )])),
            }
        };
        if let Some(entry) = self.lock().get_mut(id.as_str()) {
            entry.updated = fabric_core::unix_now();
            entry.state = state;
        }
    }

    /// What `tasks/get` answers for `task_id`.
    pub(crate) fn get(&self, task_id: &str) -> Result<GetTaskResult, ErrorData> {
        let entry = self.entry(task_id)?;
        let payload = match entry.state.clone() {
            State::Working => TaskPayload::Working,
            State::Completed(result) => TaskPayload::Completed { result },
            State::Cancelled => TaskPayload::Cancelled,
        };
        Ok(GetTaskResult::new(DetailedTask::new(
            task(task_id, &entry),
            payload,
        )))
    }

    /// The run of `task_id`, when this server started it as a task.
    pub(crate) fn run_of(&self, task_id: &str) -> Result<RunId, ErrorData> {
        self.entry(task_id)?;
        RunId::parse(task_id).map_err(|e| ErrorData::invalid_params(e.to_string(), None))
    }

    fn entry(&self, task_id: &str) -> Result<Entry, ErrorData> {
        self.lock().get(task_id).cloned().ok_or_else(|| {
            ErrorData::invalid_params(
                format!(
                    "no task `{task_id}`; a task's id is the run id run_task answered with, kept for a day (get_run reads any run)"
                ),
                None,
            )
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // Entries are plain values: a map a panicking thread held is still whole.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn task(id: &str, entry: &Entry) -> Task {
    let status = match entry.state {
        State::Working => TaskStatus::Working,
        State::Completed(_) => TaskStatus::Completed,
        State::Cancelled => TaskStatus::Cancelled,
    };
    Task::new(id, status, iso(entry.created), iso(entry.updated))
        .with_ttl_ms(TTL_MS)
        .with_poll_interval_ms(POLL_MS)
}

/// `secs` since the Unix epoch as ISO 8601 (`2026-11-27T23:18:25Z`).
fn iso(secs: f64) -> String {
    let t = UtcTime::from_unix(secs.max(0.0) as u64);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;

    fn id() -> RunId {
        RunId::parse("20260101T000000Z-abcd").unwrap()
    }

    #[test]
    fn issue_29_a_task_works_then_completes_with_the_tool_result() {
        let board = TaskBoard::default();
        let created = board.start(&id());
        assert_eq!(created.task.task_id, "20260101T000000Z-abcd");
        assert_eq!(created.task.status, TaskStatus::Working);
        assert_eq!(created.task.ttl_ms, Some(TTL_MS));
        assert!(
            created.task.created_at.ends_with('Z'),
            "{}",
            created.task.created_at
        );
        assert_eq!(
            board.get("20260101T000000Z-abcd").unwrap().task.status(),
            TaskStatus::Working
        );
        let result = CallToolResult::success(vec![ContentBlock::text("done")]);
        board.finish(&id(), &result, false);
        let got = board.get("20260101T000000Z-abcd").unwrap().task;
        match got.payload {
            TaskPayload::Completed { result } => assert_eq!(result["content"][0]["text"], "done"),
            other => panic!("{other:?}"),
        }
        board.finish(&id(), &result, true);
        assert_eq!(
            board.get("20260101T000000Z-abcd").unwrap().task.status(),
            TaskStatus::Cancelled
        );
    }

    #[test]
    fn issue_29_an_unknown_task_is_refused_naming_what_a_task_id_is() {
        let error = TaskBoard::default().get("nope").unwrap_err();
        assert!(
            error.message.contains("a task's id is the run id"),
            "{}",
            error.message
        );
        assert_eq!(iso(0.0), "1970-01-01T00:00:00Z");
    }
}
