//! A run seen as an A2A task: the run id is the task id, its status the task's state, its
//! result an artifact. Projections only: nothing here is stored.

use fabric_domain::{RunStatus, RunSummary, UtcTime};

use super::{RpcError, code};
use serde_json::{Value, json};

/// A task's state in the protocol's words.
pub(crate) fn state_of(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Running => "TASK_STATE_WORKING",
        RunStatus::InputRequired => "TASK_STATE_INPUT_REQUIRED",
        RunStatus::Completed | RunStatus::CompletedWithoutFinish | RunStatus::Partial => {
            "TASK_STATE_COMPLETED"
        }
        RunStatus::Cancelled => "TASK_STATE_CANCELED",
        RunStatus::MaxStepsExceeded
        | RunStatus::BudgetExceeded
        | RunStatus::LlmError
        | RunStatus::ModelUnsupported
        | RunStatus::Failed
        | RunStatus::Interrupted
        | RunStatus::QualityGateFailed
        | RunStatus::ContextWindowExceeded
        | RunStatus::Stalled
        | RunStatus::Unanswered => "TASK_STATE_FAILED",
    }
}

/// The protocol's task states, every one of them.
const STATES: [&str; 9] = [
    "TASK_STATE_UNSPECIFIED",
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
];

/// The run statuses a `ListTasks` state filter stands for: `Ok(Some(vec![]))` for none (no
/// filter, or `TASK_STATE_UNSPECIFIED`), `Ok(None)` for a state no run is ever in, and the
/// invalid-params error for a word that is no state.
pub(crate) fn statuses_of(state: Option<&str>) -> Result<Option<Vec<RunStatus>>, RpcError> {
    let Some(state) = state.filter(|s| !s.is_empty() && *s != STATES[0]) else {
        return Ok(Some(Vec::new()));
    };
    if !STATES.contains(&state) {
        return Err(RpcError(
            code::INVALID_PARAMS,
            format!(
                "`status` must be a task state ({}), got `{state}`",
                STATES.join(", ")
            ),
        ));
    }
    let statuses: Vec<RunStatus> = RunStatus::ALL
        .into_iter()
        .filter(|s| state_of(*s) == state)
        .collect();
    Ok((!statuses.is_empty()).then_some(statuses))
}

/// Seconds since the epoch as the protocol's timestamp (RFC 3339, UTC, `…T…Z`).
pub(crate) fn timestamp(unix: f64) -> String {
    format!("{}Z", UtcTime::from_unix(unix.max(0.0) as u64)).replacen(' ', "T", 1)
}

/// An agent's message with one text part.
pub(crate) fn agent_message(task_id: &str, context_id: &str, text: &str) -> Value {
    json!({
        "messageId": format!("{task_id}-status"),
        "taskId": task_id,
        "contextId": context_id,
        "role": "ROLE_AGENT",
        "parts": [{"text": text}],
    })
}

/// The task's context: the one its A2A client gave or was given, else (a run started
/// another way) the task's own id.
pub(crate) fn context_of(run: &RunSummary) -> &str {
    run.context_id.as_deref().unwrap_or(run.id.as_str())
}

/// The run's status as a task status: its state, when it changed, and for an ended run a
/// message saying how (the summary, or the reason it failed).
pub(crate) fn status_of(run: &RunSummary) -> Value {
    let state = state_of(run.status);
    let mut status = json!({
        "state": state,
        "timestamp": timestamp(run.ended_at.unwrap_or(run.started_at)),
    });
    let said = match run.status {
        RunStatus::Running => None,
        // The question the task waits on, for the client to answer in its next message.
        RunStatus::InputRequired => run.reason.clone(),
        s if s.has_result() => run.summary.clone(),
        _ => Some(format!(
            "{}: {}",
            run.status,
            run.reason
                .as_deref()
                .unwrap_or("the run ended without a result")
        )),
    };
    if let Some(text) = said {
        status["message"] = agent_message(run.id.as_str(), context_of(run), &text);
    }
    status
}

/// The run's result as the task's artifact: its summary as text and the whole finish
/// payload as data.
pub(crate) fn artifact_of(run: &RunSummary) -> Option<Value> {
    let result = run.result.as_ref().filter(|_| run.status.has_result())?;
    let mut parts = Vec::new();
    if let Some(summary) = &run.summary {
        parts.push(json!({"text": summary}));
    }
    parts.push(json!({"data": result, "mediaType": "application/json"}));
    Some(json!({
        "artifactId": format!("{}-result", run.id),
        "name": "result",
        "description": "The run's result: its summary, and the specialist's finish payload.",
        "parts": parts,
    }))
}

/// The task of a run. `history` adds the user's message (the run's prompt).
pub(crate) fn task_of(run: &RunSummary, history: bool) -> Value {
    let id = run.id.as_str();
    let context_id = context_of(run);
    let mut task = json!({
        "id": id,
        "contextId": context_id,
        "status": status_of(run),
        "metadata": {"specialists": run.specialist_ids, "steps": run.steps},
    });
    if let Some(artifact) = artifact_of(run) {
        task["artifacts"] = json!([artifact]);
    }
    if history {
        task["history"] = json!([{
            "messageId": format!("{id}-prompt"),
            "taskId": id,
            "contextId": context_id,
            "role": "ROLE_USER",
            "parts": [{"text": run.prompt}],
        }]);
    }
    task
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_domain::RunId;

    fn run(status: RunStatus) -> RunSummary {
        let mut run = RunSummary::new(
            RunId::parse("20261127-120000-abcdef").unwrap_or_else(|e| panic!("{e}")),
        );
        run.status = status;
        run.prompt = "write a.txt".into();
        run.started_at = 1_795_000_000.0;
        run
    }

    #[test]
    fn issue_30_every_status_has_a_state_and_failures_say_why() {
        for status in RunStatus::ALL {
            assert!(state_of(status).starts_with("TASK_STATE_"));
        }
        let mut failed = run(RunStatus::LlmError);
        failed.reason = Some("the model server answered 500".into());
        let task = task_of(&failed, false);
        assert_eq!(
            task["contextId"], task["id"],
            "a run started elsewhere is its own context"
        );
        assert_eq!(task["status"]["state"], "TASK_STATE_FAILED");
        assert_eq!(
            task["status"]["message"]["parts"][0]["text"],
            "llm_error: the model server answered 500"
        );
        assert!(task.get("artifacts").is_none());
        let mut done = run(RunStatus::Completed);
        done.summary = Some("wrote a.txt".into());
        done.result = Some(json!({"summary": "wrote a.txt", "artifacts": ["a.txt"]}));
        done.context_id = Some("ctx-1".into());
        let task = task_of(&done, true);
        assert_eq!(task["contextId"], "ctx-1");
        assert_eq!(task["status"]["message"]["contextId"], "ctx-1");
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
        assert_eq!(task["artifacts"][0]["parts"][0]["text"], "wrote a.txt");
        assert_eq!(
            task["artifacts"][0]["parts"][1]["data"]["artifacts"][0],
            "a.txt"
        );
        assert_eq!(task["history"][0]["parts"][0]["text"], "write a.txt");
        assert_eq!(timestamp(1_795_000_000.0), "2026-11-18T11:06:40Z");
    }
}
