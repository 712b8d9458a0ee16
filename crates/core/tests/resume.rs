//! Continuing a run from its runlog after its process stopped (issue #10), through the
//! engine's ports: a run is cut after every one of its events, as if its process had been
//! killed there, and continued from what was recorded.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use async_trait::async_trait;
use fabric_core::execute::{execute_task_force, resume_task_force};
use fabric_core::history::RunHistory;
use fabric_core::{ChatError, ChatResponse, NewRun, NoopObserver, Tool, ToolContext, ToolError};
use fabric_domain::{
    EventKind, RunEvent, RunId, RunStatus, ToolAnnotations, ToolCall, ToolSpec, Usage,
};
use fabric_fakes::{MemLog, MemStore, ScriptedChat, task};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// A model that answers by the conversation it is given (turn N for a conversation with N
/// assistant messages), so a resumed run gets the same answers, and that remembers every
/// request.
fn by_conversation(answers: Vec<ChatResponse>) -> ScriptedChat {
    ScriptedChat::by_turn(move |turn| {
        answers.get(turn).cloned().ok_or_else(|| ChatError::Decode {
            url: "fake".into(),
            detail: format!("no answer for turn {turn}"),
        })
    })
}

/// A tool that remembers the `path` of every call it ran.
struct Logged {
    spec: ToolSpec,
    ran: Arc<Mutex<Vec<String>>>,
}

impl Logged {
    fn new(name: &str, read_only: bool) -> Self {
        let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": false});
        Self {
            spec: ToolSpec::with_schema(name, "fake", schema)
                .unwrap()
                .annotate(ToolAnnotations {
                    read_only,
                    ..ToolAnnotations::default()
                }),
            ran: Arc::default(),
        }
    }
}

#[async_trait]
impl Tool for Logged {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<Value, ToolError> {
        let path = args["path"].as_str().unwrap_or_default().to_owned();
        self.ran.lock().unwrap().push(path.clone());
        Ok(json!(format!("{} {}", self.spec.name, path.len())))
    }
}

fn calls(calls: &[(&str, &str, Value)]) -> ChatResponse {
    ChatResponse {
        tool_calls: calls
            .iter()
            .map(|(id, name, args)| ToolCall {
                id: (*id).into(),
                name: (*name).into(),
                arguments: args.to_string(),
            })
            .collect(),
        ..ChatResponse::default()
    }
}

/// Three steps: a read and a write; a long text and a write with long arguments (both
/// longer than the runlog's caps); `finish_task`. Each answer reports its own token usage
/// (issue #27: with none, "every token counted once" compared 0 with 0).
fn script() -> Vec<ChatResponse> {
    let long_path = "p".repeat(2_500);
    let mut second = calls(&[("c-w1", "write", json!({"path": long_path}))]);
    second.content = Some("x".repeat(3_000));
    let mut answers = vec![
        calls(&[
            ("c-r0", "read", json!({"path": "a"})),
            ("c-w0", "write", json!({"path": "w0"})),
        ]),
        second,
        calls(&[("c-f", "finish_task", json!({"summary": "done"}))]),
    ];
    for (turn, answer) in (1..).zip(&mut answers) {
        answer.usage = Some(usage_of(turn));
    }
    answers
}

/// The tokens the model reports for its answer of turn `turn` (from 1): distinct per turn,
/// so a turn counted twice or not at all changes the sum.
fn usage_of(turn: u64) -> Usage {
    Usage::from_counts(1_000 * turn, 10 * turn + 1, None)
}

struct Tools {
    read: Arc<Logged>,
    write: Arc<Logged>,
}

impl Tools {
    fn new() -> Self {
        Self {
            read: Arc::new(Logged::new("read", true)),
            write: Arc::new(Logged::new("write", false)),
        }
    }
    fn list(&self) -> Vec<Arc<dyn Tool>> {
        vec![self.read.clone(), self.write.clone()]
    }
}

fn started_calls(events: &[RunEvent], tool: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.kind() == EventKind::ToolCall && e.payload_json().unwrap()["tool"] == tool)
        .map(|e| {
            e.payload_json().unwrap()["call_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn issue_10_a_run_cut_after_any_event_continues_without_asking_a_recorded_step_again() {
    // The run as it goes when nothing stops it.
    let store = MemStore::new();
    let model = by_conversation(script());
    let tools = Tools::new();
    let whole = execute_task_force(
        &store,
        task(model.client(), tools.list(), true, false),
        &NoopObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(whole.status, RunStatus::Completed);
    let mut spent = Usage::default();
    for turn in 1..=3 {
        spent.add(usage_of(turn));
    }
    assert_eq!(whole.usage, spent, "the model's tokens, each answer once");
    let events = store.events();
    let original_requests = model.seen().clone();
    assert_eq!(original_requests.len(), 3);
    let response = events
        .iter()
        .find(|e| e.kind() == EventKind::LlmResponse && e.step == Some(1))
        .unwrap();
    assert_eq!(
        response.payload_json().unwrap()["full_content"]
            .as_str()
            .map(str::len),
        Some(3_000),
        "a capped text is recorded whole beside its cap"
    );

    let (mut interrupted_cuts, mut reread_cuts) = (0, 0);
    // Cut after every event, the terminal one included (issue #27).
    for cut in 1..=events.len() {
        let prefix: Vec<RunEvent> = events[..cut].to_vec();
        let history = RunHistory::read(RunId::parse("test-run").unwrap(), &prefix);
        // The oracle is the prefix itself, not the history's reading of it (the code under
        // test): the answers it recorded are the model calls not to make again.
        let recorded_turns = prefix
            .iter()
            .filter(|e| e.kind() == EventKind::LlmResponse)
            .count();
        let log = MemLog::holding(prefix.clone());
        let run = NewRun {
            id: RunId::parse("test-run").unwrap(),
            workspace: std::env::temp_dir(),
            log: Box::new(log.clone()),
            versioned: None,
        };
        let model = by_conversation(script());
        let tools = Tools::new();
        let resumed = resume_task_force(
            run,
            task(model.client(), tools.list(), true, false),
            history,
            &NoopObserver,
            CancellationToken::new(),
        )
        .await;
        let all = log.events();
        let context = format!("cut after {cut} events ({:?})", events[cut - 1].kind());
        if cut == events.len() {
            // Cut after its end: there is nothing to continue, and nothing is written or
            // asked.
            assert!(resumed.is_err(), "{context}: {resumed:?}");
            assert_eq!(all, events, "{context}");
            assert_eq!(model.turns_asked(), Vec::<usize>::new(), "{context}");
            assert!(tools.write.ran.lock().unwrap().is_empty(), "{context}");
            continue;
        }
        let outcome = resumed.unwrap();

        // It ends once, completed, with a gap-free runlog.
        assert_eq!(outcome.status, RunStatus::Completed, "{context}");
        assert_eq!(outcome.payload, json!({"summary": "done"}), "{context}");
        for (i, e) in all.iter().enumerate() {
            assert_eq!(e.seq, i as u64, "{context}");
        }
        assert_eq!(
            all.iter().filter(|e| e.kind().is_terminal()).count(),
            1,
            "{context}"
        );
        assert!(all.last().unwrap().kind().is_terminal(), "{context}");
        assert_eq!(
            all.iter()
                .filter(|e| e.kind() == EventKind::RunResumed)
                .count(),
            1,
            "{context}"
        );
        assert_eq!(
            outcome.usage, whole.usage,
            "every token counted once: {context}"
        );

        // No recorded answer is asked for again; every other one exactly once.
        let asked = model.turns_asked();
        let expected: Vec<usize> = (recorded_turns..3).collect();
        assert_eq!(asked, expected, "{context}");

        // A write runs at most once over both processes; one that was in flight at the cut
        // is reported to the model as interrupted, not run again.
        let before = started_calls(&prefix, "write");
        let after: Vec<String> = tools.write.ran.lock().unwrap().clone();
        let settled_before = |id: &str| {
            prefix.iter().any(|e| {
                matches!(e.kind(), EventKind::ToolResult | EventKind::ToolError)
                    && e.payload_json().unwrap()["call_id"] == id
            })
        };
        for id in &before {
            let path = if id == "c-w0" { "w0" } else { "long" };
            let ran_again = after
                .iter()
                .any(|p| (path == "long" && p.len() == 2_500) || p == path);
            assert!(!ran_again, "{id} ran twice: {context}");
            if !settled_before(id) {
                let interrupted = all.iter().any(|e| {
                    e.kind() == EventKind::ToolError
                        && e.payload_json().unwrap()["call_id"] == id.as_str()
                        && e.payload_json().unwrap()["error_type"] == "interrupted"
                });
                assert!(interrupted, "{id} reported interrupted: {context}");
                interrupted_cuts += 1;
            }
        }
        // The read in flight at a cut runs again (it only reads).
        let read_started = !started_calls(&prefix, "read").is_empty();
        let read_settled = settled_before("c-r0");
        if read_started && !read_settled {
            assert_eq!(tools.read.ran.lock().unwrap().len(), 1, "{context}");
            reread_cuts += 1;
        }

        // Without an interrupted write, the model sees the very conversation it would have.
        let interrupted_any = all
            .iter()
            .any(|e| e.payload_json().unwrap()["error_type"] == "interrupted");
        if !interrupted_any && let Some(last) = model.seen().last() {
            assert_eq!(last, &original_requests[2], "{context}");
        }
    }
    // Both cases of a call in flight were met.
    assert!(interrupted_cuts >= 2 && reread_cuts >= 1);
}
