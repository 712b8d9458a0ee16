//! Task forces through the ports: sequential hand-off, parallel overlap, partial results.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use async_trait::async_trait;
use fabric_fakes::Line;

use fabric_core::engine::ModelParams;
use fabric_core::execute::{
    HANDOFF_END, Member, Roster, TaskForce, TaskForceMode, execute_task_force,
};
use fabric_core::recruit::{RoutingCall, RoutingFailure};
use fabric_core::{NewRun, NoopObserver, Tool, ToolContext, ToolError};
use fabric_domain::{EventKind, RunId, RunStatus, SpecialistSpec, ToolSpec};
use fabric_fakes::{Answer, MemLog, MemStore, ScriptedChat, call, specialist_as};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A model that answers from its own script, after a delay, remembering every request.
fn chat(answers: Vec<Answer>, delay_ms: u64) -> ScriptedChat {
    ScriptedChat::new(answers).delayed(Duration::from_millis(delay_ms))
}

/// Works once (`list_files`), then finishes with `summary`.
fn worker(summary: &str, delay_ms: u64) -> ScriptedChat {
    chat(
        vec![
            call("list_files", json!({})),
            call("finish_task", json!({"summary": summary})),
        ],
        delay_ms,
    )
}

/// One runlog for the run, whose appends yield so concurrent members would interleave if
/// the recorder let them.
fn tf_store() -> MemStore {
    MemStore::new().with_id("tf-run").yielding()
}

struct ListFiles(ToolSpec);

#[async_trait]
impl Tool for ListFiles {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<Value, ToolError> {
        Ok(json!("a.txt"))
    }
}

fn list_files() -> Arc<dyn Tool> {
    Arc::new(ListFiles(
        ToolSpec::with_schema("list_files", "fake", json!({"type": "object"})).unwrap(),
    ))
}

fn specialist(id: &str) -> SpecialistSpec {
    specialist_as(id, &format!("You are {id}."), &["list_files"])
}

fn member(id: &str, chat: &ScriptedChat) -> Member {
    Member::new(
        specialist(id).into(),
        vec![list_files()],
        chat.client(),
        format!("{id}-key"),
        ModelParams::named(format!("{id}-model")),
    )
}

fn force(members: Vec<Member>, mode: TaskForceMode, max_parallel: usize) -> TaskForce {
    TaskForce {
        prompt: "do the thing".into(),
        members,
        recruitment: Roster::explicit(Vec::new(), "test"),
        routing_call: None,
        mode,
        max_parallel,
        max_steps: 5,
        network_allowed: false,
        sandbox: Default::default(),
        lineage: None,
        share_parent_workspace: false,
        fallback: None,
        origin: Default::default(),
        context_id: None,
        person: None,
        instructions: None,
        hooks: None,
    }
}

fn assert_gapless(events: &[Line]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64, "seq is gapless and in write order");
    }
    assert!(events.last().unwrap().kind.is_terminal());
    assert_eq!(events.iter().filter(|e| e.kind.is_terminal()).count(), 1);
}

#[tokio::test]
async fn sequential_hands_the_previous_payload_to_the_next_member() {
    let store = tf_store();
    let (a, b) = (worker("found three papers", 0), worker("built it", 0));
    let outcome = execute_task_force(
        &store,
        force(
            vec![member("research", &a), member("engineering", &b)],
            TaskForceMode::Sequential,
            1,
        ),
        &NoopObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.specialist_ids, ["research", "engineering"]);
    assert_eq!(outcome.steps, 4);

    // The second member's first request holds the first member's payload, delimited.
    let first_of_b = &b.seen()[0];
    let handoff = first_of_b.last().unwrap().content.clone().unwrap();
    assert!(handoff.contains("<<<HANDOFF from research>>>"), "{handoff}");
    assert!(handoff.contains("found three papers") && handoff.ends_with(HANDOFF_END));
    assert!(
        first_of_b[0]
            .content
            .as_deref()
            .unwrap()
            .starts_with("You are engineering.")
    );
    // The first member saw no hand-off.
    assert_eq!(a.seen()[0].len(), 2);

    let merged = &outcome.payload;
    assert_eq!(
        merged["summary"],
        "research: found three papers | engineering: built it"
    );
    assert_eq!(merged["sections"][1]["result"]["summary"], "built it");

    let events = store.lines();
    assert_gapless(&events);
    let packs = store.of(EventKind::MemberStart);
    assert_eq!(packs.len(), 2);
    assert_eq!(packs[1].payload["pack_index"], 1);
    assert_eq!(packs[1].payload["handoff_from"], "research");
    assert_eq!(packs[1].payload["model"], "engineering-model");
    // Steps count from 0 for each member; pack_index says whose they are.
    let requests = store.of(EventKind::LlmRequest);
    let tags: Vec<(Option<u32>, u64)> = requests
        .iter()
        .map(|e| (e.step, e.payload["pack_index"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        tags,
        [(Some(0), 0), (Some(1), 0), (Some(0), 1), (Some(1), 1)]
    );
    let recruitment = &store.of(EventKind::Recruitment)[0].payload;
    assert_eq!(recruitment["is_task_force"], true);
    assert_eq!(recruitment["task_force_mode"], "sequential");
}

#[tokio::test]
async fn a_failed_sequential_member_stops_the_chain_with_a_partial_result() {
    let store = tf_store();
    let a = worker("step one", 0);
    let b = chat(vec![], 0); // script exhausted: llm_error
    let c = worker("never", 0);
    let outcome = execute_task_force(
        &store,
        force(
            vec![member("a", &a), member("b", &b), member("c", &c)],
            TaskForceMode::Sequential,
            1,
        ),
        &NoopObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.status, RunStatus::Partial);
    assert_eq!(outcome.status.exit_code(), 6);
    assert_eq!(outcome.payload["sections"][2]["status"], "skipped");
    assert!(c.seen().is_empty());
    let reason = outcome.reason.unwrap();
    assert!(
        reason.contains("`b` ended llm_error") && reason.contains("`c` was skipped"),
        "{reason}"
    );
    let last = store.lines().pop().unwrap();
    assert_eq!(last.kind(), EventKind::RunComplete);
    assert_eq!(last.payload["status"], "partial");
}

#[tokio::test]
async fn parallel_members_overlap_in_time_and_merge_in_recruitment_order() {
    let store = tf_store();
    // Two model calls of 150 ms each per member: 300 ms alone, 900 ms one after another.
    let (a, b, c) = (worker("A", 150), worker("B", 150), worker("C", 150));
    let outcome = execute_task_force(
        &store,
        force(
            vec![member("a", &a), member("b", &b), member("c", &c)],
            TaskForceMode::Parallel,
            3,
        ),
        &NoopObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    // They overlapped: every member asked its first question before any got an answer
    // (order and causality, not wall time, which a busy machine stretches).
    let events = store.lines();
    let first = |kind: EventKind, member: u64| {
        events
            .iter()
            .find(|e| e.kind() == kind && e.payload["pack_index"] == member)
            .map(|e| e.seq)
            .unwrap()
    };
    let last_first_request = (0..3)
        .map(|m| first(EventKind::LlmRequest, m))
        .max()
        .unwrap();
    let first_answer = (0..3)
        .map(|m| first(EventKind::LlmResponse, m))
        .min()
        .unwrap();
    assert!(last_first_request < first_answer, "members did not overlap");
    assert_eq!(outcome.payload["summary"], "a: A | b: B | c: C");
    let events = store.lines();
    assert_gapless(&events);
    let tf = store.of(EventKind::TaskForceParallel);
    assert_eq!(tf[0].payload["max_parallel"], 3);
    // Every loop event carries its member's pack_index.
    for e in events.iter().filter(|e| e.step.is_some()) {
        assert!(e.payload["pack_index"].is_u64(), "{e:?}");
    }
}

#[tokio::test]
async fn the_parallel_limit_is_respected() {
    let store = tf_store();
    let (a, b) = (worker("A", 100), worker("B", 100));
    execute_task_force(
        &store,
        force(
            vec![member("a", &a), member("b", &b)],
            TaskForceMode::Parallel,
            1,
        ),
        &NoopObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    // One at a time: the second member asks its first question after the first member's
    // last answer.
    let events = store.lines();
    let last_answer_of_a = events
        .iter()
        .filter(|e| e.kind() == EventKind::LlmResponse && e.payload["pack_index"] == 0)
        .map(|e| e.seq)
        .max()
        .unwrap();
    let first_request_of_b = events
        .iter()
        .find(|e| e.kind() == EventKind::LlmRequest && e.payload["pack_index"] == 1)
        .map(|e| e.seq)
        .unwrap();
    assert!(
        first_request_of_b > last_answer_of_a,
        "limit 1 runs one at a time"
    );
}

#[tokio::test]
async fn a_failing_parallel_member_keeps_the_others_results() {
    let store = tf_store();
    let a = worker("A done", 30);
    let b = chat(vec![call("list_files", json!({}))], 0); // then exhausted
    let c = worker("C done", 10);
    let outcome = execute_task_force(
        &store,
        force(
            vec![member("a", &a), member("b", &b), member("c", &c)],
            TaskForceMode::Parallel,
            3,
        ),
        &NoopObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.status, RunStatus::Partial);
    let sections = outcome.payload["sections"].as_array().unwrap();
    let ids: Vec<&str> = sections
        .iter()
        .map(|s| s["specialist_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["a", "b", "c"],
        "recruitment order, not completion order"
    );
    assert_eq!(sections[0]["result"]["summary"], "A done");
    assert_eq!(sections[1]["status"], "llm_error");
    assert_eq!(sections[2]["result"]["summary"], "C done");
    assert_gapless(&store.lines());
}

#[tokio::test]
async fn all_members_failing_is_a_failed_run() {
    let store = tf_store();
    let (a, b) = (chat(vec![], 0), chat(vec![], 0));
    let outcome = execute_task_force(
        &store,
        force(
            vec![member("a", &a), member("b", &b)],
            TaskForceMode::Parallel,
            2,
        ),
        &NoopObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.status, RunStatus::LlmError);
    assert_eq!(outcome.payload, Value::Null);
    assert_eq!(store.lines().pop().unwrap().kind(), EventKind::RunFailed);
}

#[tokio::test]
async fn the_routing_call_is_recorded_before_recruitment() {
    let store = tf_store();
    let a = worker("A", 0);
    let mut f = force(vec![member("a", &a)], TaskForceMode::Sequential, 1);
    f.routing_call = Some(RoutingCall {
        model_key: "router".into(),
        model: "tiny".into(),
        content: Some("not json".into()),
        tool_arguments: None,
        latency_ms: 3.0,
        outcome: Err(RoutingFailure::NotAnObject {
            answer: String::new(),
        }),
    });
    execute_task_force(&store, f, &NoopObserver, CancellationToken::new())
        .await
        .unwrap();
    let kinds: Vec<EventKind> = store.lines().iter().take(4).map(|e| e.kind()).collect();
    assert_eq!(
        kinds,
        [
            EventKind::RunStart,
            EventKind::LlmRequest,
            EventKind::LlmResponse,
            EventKind::Recruitment
        ]
    );
    let response = &store.of(EventKind::LlmResponse)[0].payload;
    assert_eq!(response["purpose"], "routing");
    assert!(
        response["error"]
            .as_str()
            .unwrap()
            .contains("not a JSON object")
    );
}

#[tokio::test]
async fn issue_10_a_continued_task_force_does_not_run_members_that_had_ended() {
    let store = tf_store();
    let a = worker("A done", 0);
    let b = chat(vec![call("list_files", json!({}))], 0); // then exhausted: llm_error
    let c = worker("C done", 0);
    let whole = execute_task_force(
        &store,
        force(
            vec![member("a", &a), member("b", &b), member("c", &c)],
            TaskForceMode::Parallel,
            3,
        ),
        &NoopObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(whole.status, RunStatus::Partial);
    assert_eq!(store.of(EventKind::MemberEnd).len(), 3);
    // The process stopped right before writing the run's end.
    let mut events = store.events();
    events.pop();
    let history = fabric_core::history::RunHistory::read(RunId::parse("tf-run").unwrap(), &events);
    let log = MemLog::holding(events).yielding();
    let run = NewRun {
        id: RunId::parse("tf-run").unwrap(),
        workspace: std::env::temp_dir(),
        log: Box::new(log.clone()),
        versioned: None,
    };
    // Models with nothing to say: asking any of them would fail the member.
    let (a2, b2, c2) = (chat(vec![], 0), chat(vec![], 0), chat(vec![], 0));
    let again = fabric_core::execute::resume_task_force(
        run,
        force(
            vec![member("a", &a2), member("b", &b2), member("c", &c2)],
            TaskForceMode::Parallel,
            3,
        ),
        history,
        &NoopObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(again.status, RunStatus::Partial);
    assert_eq!(again.payload, whole.payload);
    assert_eq!(again.usage, whole.usage);
    for chat in [&a2, &b2, &c2] {
        assert!(chat.seen().is_empty(), "no member asked again");
    }
    assert_gapless(&log.lines());
}
