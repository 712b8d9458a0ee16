//! What the loop does for small models (issue #24): the repetition breaker and
//! `require_finish`, through the engine's ports with fakes.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use fabric_core::{ChatError, ChatResponse};
use fabric_domain::{EventKind, RunStatus, ToolAnnotations};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use fabric_fakes::*;

fn text(content: &str) -> Result<ChatResponse, ChatError> {
    Ok(ChatResponse {
        content: Some(content.into()),
        ..ChatResponse::default()
    })
}

static LOOKS: AtomicU32 = AtomicU32::new(0);

#[tokio::test]
async fn issue_24_a_repeated_call_is_nudged_then_refused_then_the_run_stalls() {
    let look = tool("look", ToolAnnotations::default(), |_| {
        LOOKS.fetch_add(1, Ordering::SeqCst);
        Ok(json!("(empty)"))
    });
    let store = MemStore::new();
    let chat = ScriptedChat::new((0..6).map(|_| call("look", json!({}))).collect());
    let outcome = run(
        &store,
        task(chat.client(), vec![Arc::new(look)], true, false),
    )
    .await
    .unwrap();
    assert_eq!(outcome.status, RunStatus::Stalled);
    assert_eq!(outcome.steps, 6);
    assert!(
        outcome.reason.as_deref().unwrap().contains("`look`"),
        "{:?}",
        outcome.reason
    );
    // Three ran; the fourth and fifth were refused without running; the sixth stopped it.
    assert_eq!(LOOKS.load(Ordering::SeqCst), 3);
    let loops = store.of(EventKind::LoopDetected);
    let actions: Vec<(&str, u64)> = loops
        .iter()
        .map(|e| {
            (
                e.payload["action"].as_str().unwrap(),
                e.payload["repeats"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        vec![
            ("nudged", 3),
            ("refused", 4),
            ("refused", 5),
            ("stopped", 6)
        ]
    );
    // The model was sent the note with the third result, and the refusal as an error.
    // The last tool message of request `n`.
    let sent = |n: usize| {
        let seen = chat.seen();
        seen[n]
            .iter()
            .rev()
            .find(|m| m.role == fabric_domain::Role::Tool)
            .and_then(|m| m.content.clone())
            .unwrap()
    };
    let third = sent(3);
    assert!(
        third.starts_with("(empty)\n\nnote: this is the 3rd time in a row that `look`"),
        "{third}"
    );
    let fourth = sent(4);
    assert!(
        fourth.contains("not run: `look` was already called 3 times"),
        "{fourth}"
    );
    let errors = store.of(EventKind::ToolError);
    assert_eq!(errors.len(), 2);
    assert_eq!(errors[0].payload["error_type"], "failed");
    // The runlog still ends with one terminal event naming the status.
    let failed = store.of(EventKind::RunFailed);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].payload["status"], "stalled");
}

#[tokio::test]
async fn issue_24_the_repetition_breaker_can_be_switched_off() {
    let store = MemStore::new();
    let chat = ScriptedChat::new(
        (0..5)
            .map(|_| call("work", json!({})))
            .chain([call("finish_task", json!({"summary": "ok"}))])
            .collect(),
    );
    let mut task = task(chat.client(), vec![ok_tool("work")], true, false);
    let mut spec = (*task.members[0].specialist).clone();
    spec.loop_aids.repeat_limit = 0;
    task.members[0].specialist = spec.into();
    let outcome = run(&store, task).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert!(store.of(EventKind::LoopDetected).is_empty());
}

#[tokio::test]
async fn issue_24_a_run_that_did_nothing_says_so() {
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![text("Sure!"), text("Done, I think.")]);
    let outcome = run(
        &store,
        task(chat.client(), vec![ok_tool("work")], true, false),
    )
    .await
    .unwrap();
    assert_eq!(outcome.status, RunStatus::CompletedWithoutFinish);
    assert!(
        outcome
            .reason
            .as_deref()
            .unwrap()
            .contains("never called a tool or finish_task, so nothing was done"),
        "{:?}",
        outcome.reason
    );
}

#[tokio::test]
async fn issue_24_require_finish_keeps_asking_for_finish_task() {
    let with_finish = |answers| {
        let store = MemStore::new();
        let chat = ScriptedChat::new(answers);
        let mut task = task(chat.client(), vec![ok_tool("work")], true, false);
        let mut spec = (*task.members[0].specialist).clone();
        spec.loop_aids.require_finish = true;
        task.members[0].specialist = spec.into();
        task.max_steps = 5;
        (store, task)
    };
    // Prose, work, prose twice more, then the call: completed.
    let (store, task) = with_finish(vec![
        text("a"),
        call("work", json!({})),
        text("b"),
        text("c"),
        call("finish_task", json!({"summary": "ok"})),
    ]);
    let outcome = run(&store, task).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.reason);
    let reprompts = store.of(EventKind::CorrectiveReprompt);
    assert_eq!(reprompts.len(), 3);
    assert_eq!(reprompts[2].payload["attempt"], 2);
    assert_eq!(reprompts[2].payload["max_retries"], 5);
    // Prose to the end: the step limit, never `completed_without_finish`.
    let (store, task) = with_finish((0..5).map(|_| text("prose")).collect());
    let outcome = run(&store, task).await.unwrap();
    assert_eq!(outcome.status, RunStatus::MaxStepsExceeded);
}
