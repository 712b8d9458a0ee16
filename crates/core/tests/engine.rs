//! The engine through its ports, with fakes for the model, the store and the tools.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use fabric_core::engine::MAX_TOOL_RESULT_CHARS;
use fabric_core::execute::execute_task_force;
use fabric_core::{ChatError, NoopObserver, Tool, ToolError};
use fabric_domain::{EventKind, RunStatus, ToolAnnotations};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use fabric_fakes::*;

// ---- tests -------------------------------------------------------------------------------

#[tokio::test]
async fn a_run_records_every_step_and_ends_with_one_terminal_event() {
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![
        call("work", json!({})),
        call("finish_task", json!({"summary": "ok"})),
    ]);
    let outcome = run(
        &store,
        task(chat.client(), vec![ok_tool("work")], true, false),
    )
    .await
    .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.payload, json!({"summary": "ok"}));
    use EventKind::*;
    assert_eq!(
        store.kinds(),
        vec![
            RunStart,
            Recruitment,
            MemberStart,
            LlmRequest,
            LlmResponse,
            ToolCall,
            ToolResult,
            LlmRequest,
            LlmResponse,
            ToolCall,
            ToolResult,
            RunComplete
        ]
    );
    let seqs: Vec<u64> = store.events().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..12).collect::<Vec<_>>());
}

#[tokio::test]
async fn refusals_become_tool_errors_and_security_events() {
    let denied = tool("open", ToolAnnotations::default(), |args| {
        Err(ToolError::Denied {
            event_type: "path_escape".into(),
            attempted: args["path"].as_str().unwrap_or_default().into(),
            message: "path `../x` is outside the workspace".into(),
        })
    });
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![
        call("open", json!({"path": "../x"})),
        call("finish_task", json!({"summary": "ok"})),
    ]);
    let outcome = run(
        &store,
        task(chat.client(), vec![Arc::new(denied)], true, false),
    )
    .await
    .unwrap();
    assert_eq!(
        outcome.status,
        RunStatus::Completed,
        "a refused call still counts as attempted work"
    );
    let security = store.of(EventKind::SecurityEvent);
    assert_eq!(security.len(), 1);
    assert_eq!(security[0].payload["attempted"], "../x");
    assert_eq!(
        store.of(EventKind::ToolError)[0].payload["error_type"],
        "permission"
    );
    assert_eq!(
        chat.last_tool_messages(),
        vec![r#"{"error":"path `../x` is outside the workspace"}"#]
    );
}

#[tokio::test]
async fn long_results_are_capped_for_the_model_and_the_runlog() {
    let big = tool("big", ToolAnnotations::default(), |_| {
        Ok(Value::String("x".repeat(100_000)))
    });
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![
        call("big", json!({})),
        call("finish_task", json!({"summary": "ok"})),
    ]);
    run(
        &store,
        task(chat.client(), vec![Arc::new(big)], true, false),
    )
    .await
    .unwrap();
    let seen = chat.last_tool_messages();
    assert!(seen[0].len() < MAX_TOOL_RESULT_CHARS + 100);
    assert!(seen[0].ends_with(&format!(
        "[truncated: {} more characters]",
        100_000 - MAX_TOOL_RESULT_CHARS
    )));
    let logged = store.of(EventKind::ToolResult)[0].payload["result"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(logged, seen[0]);
}

#[tokio::test]
async fn model_failures_end_with_typed_statuses() {
    for (error, status) in [
        (
            ChatError::ToolsUnsupported { model: "m".into() },
            RunStatus::ModelUnsupported,
        ),
        (
            ChatError::Unreachable {
                url: "u".into(),
                detail: "refused".into(),
            },
            RunStatus::LlmError,
        ),
    ] {
        let store = MemStore::new();
        let chat = ScriptedChat::new(vec![Err(error.clone())]);
        let outcome = run(&store, task(chat.client(), vec![], true, false))
            .await
            .unwrap();
        assert_eq!(outcome.status, status);
        assert_eq!(outcome.reason.as_deref(), Some(error.to_string().as_str()));
        let failed = store.of(EventKind::RunFailed);
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].payload["status"], status.as_str());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_mid_tool_drops_the_tool_and_records_cancelled() {
    let mut slow = tool("slow", ToolAnnotations::default(), |_| Ok(json!("late")));
    slow.delay = Duration::from_secs(30);
    let dropped = Arc::clone(&slow.dropped_early);
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![call("slow", json!({}))]);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let started = std::time::Instant::now();
    let outcome = execute_task_force(
        &store,
        task(chat.client(), vec![Arc::new(slow)], true, false),
        &NoopObserver,
        cancel,
    )
    .await
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(outcome.status, RunStatus::Cancelled);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the tool's future was dropped, so its children die with it"
    );
    assert_eq!(*store.kinds().last().unwrap(), EventKind::RunFailed);
}

#[tokio::test]
async fn read_only_specialists_and_offline_runs_get_fewer_tools() {
    let writer = tool(
        "writer",
        ToolAnnotations {
            destructive: true,
            ..Default::default()
        },
        |_| Ok(json!("w")),
    );
    let reader = tool(
        "reader",
        ToolAnnotations {
            read_only: true,
            ..Default::default()
        },
        |_| Ok(json!("r")),
    );
    let fetch = tool(
        "fetch",
        ToolAnnotations {
            read_only: true,
            needs_network: true,
            ..Default::default()
        },
        |_| Ok(json!("f")),
    );
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(writer), Arc::new(reader), Arc::new(fetch)];
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![
        call("writer", json!({})),
        call("reader", json!({})),
        call("finish_task", json!({"summary": "ok"})),
    ]);
    run(&store, task(chat.client(), tools, false, false))
        .await
        .unwrap();
    assert_eq!(
        store.of(EventKind::MemberStart)[0].payload["tools"],
        json!(["reader"])
    );
    let error = &store.of(EventKind::ToolError)[0].payload;
    assert_eq!(
        error["error_message"],
        "tool `writer` is not available in this run: this specialist may not write, and the tool is not read-only; the available tools are: reader, finish_task"
    );
}

#[tokio::test]
async fn a_runlog_that_cannot_be_written_is_an_error_not_a_silent_run() {
    let store = MemStore::new().failing_after(4);
    let chat = ScriptedChat::new(vec![
        call("work", json!({})),
        call("finish_task", json!({"summary": "ok"})),
    ]);
    let error = run(
        &store,
        task(chat.client(), vec![ok_tool("work")], true, false),
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("disk full"), "{error}");
}

#[tokio::test]
async fn finish_schema_that_is_not_an_object_fails_the_run_clearly() {
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![]);
    let mut t = task(chat.client(), vec![], true, false);
    std::sync::Arc::make_mut(&mut t.members[0].specialist).finish_schema =
        json!({"type": "string"});
    let outcome = run(&store, t).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Failed);
    assert!(outcome.reason.unwrap().contains("finish_schema"));
}

#[tokio::test]
async fn a_specialist_without_tools_may_finish_at_once() {
    let store = MemStore::new();
    let chat = ScriptedChat::new(vec![call(
        "finish_task",
        json!({"summary": "thought it through"}),
    )]);
    let outcome = run(&store, task(chat.client(), vec![], true, false))
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
}

/// A model that answers summary requests itself and everything else from a script.
fn summarising(answers: Vec<Answer>) -> ScriptedChat {
    ScriptedChat::new(answers).answering_first(|request| {
        let system = request.messages[0].content.as_deref().unwrap_or_default();
        if !system.starts_with("You summarise") {
            return None;
        }
        assert!(request.tools.is_empty(), "a summary offers no tools");
        Some(Ok(fabric_core::ChatResponse {
            content: Some("Read big.txt several times; it holds x.".into()),
            ..Default::default()
        }))
    })
}

#[tokio::test]
async fn issue_12_turns_left_out_to_fit_the_window_can_be_summarised_by_the_model() {
    let big = Arc::new(tool("read", ToolAnnotations::default(), |_| {
        Ok(json!("x".repeat(3_000)))
    }));
    let mut answers: Vec<_> = (0..12).map(|_| call("read", json!({}))).collect();
    answers.push(call("finish_task", json!({"summary": "ok"})));
    let chat = summarising(answers);
    let store = MemStore::new();
    let mut t = task(chat.client(), vec![big], true, false);
    t.max_steps = 20;
    let member = &mut t.members[0];
    member.model.context_window = Some(3_000);
    member.model.max_tokens = Some(200);
    member.model.summarize_compaction = true;
    // The same call with the same result, on purpose: no repetition breaker here.
    let mut spec = (*member.specialist).clone();
    spec.loop_aids.repeat_limit = 0;
    member.specialist = spec.into();
    let outcome = run(&store, t).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.reason);
    let compacted = store.of(EventKind::ContextCompacted);
    assert!(!compacted.is_empty());
    let summarised: Vec<_> = compacted
        .iter()
        .filter(|e| e.payload["mode"] == "summarize")
        .collect();
    assert!(!summarised.is_empty(), "{compacted:?}");
    assert_eq!(
        summarised[0].payload["summary"],
        "Read big.txt several times; it holds x."
    );
    // The model saw the summary in place of the left-out turns.
    let seen = chat.seen();
    let last = seen.last().unwrap();
    assert!(
        last.iter().any(|m| m
            .content
            .as_deref()
            .is_some_and(|c| c.contains("this is what they did: Read big.txt"))),
        "{last:?}"
    );
}

/// A tool that returns five PNGs and a TIFF besides its text, as an MCP tool can.
struct Pictures(fabric_domain::ToolSpec);

#[async_trait::async_trait]
impl Tool for Pictures {
    fn spec(&self) -> &fabric_domain::ToolSpec {
        &self.0
    }

    async fn call(&self, _: Value, _: &fabric_core::ToolContext) -> Result<Value, ToolError> {
        Ok(json!("six pictures"))
    }

    async fn call_for_model(
        &self,
        args: Value,
        ctx: &fabric_core::ToolContext,
    ) -> Result<fabric_core::ToolOutput, ToolError> {
        let mut images = vec![fabric_domain::ToolImage::new("image/png", "AAAA"); 5];
        images.insert(0, fabric_domain::ToolImage::new("image/tiff", "AAAA"));
        let result = self.call(args, ctx).await?;
        Ok(fabric_core::ToolOutput { result, images })
    }
}

#[tokio::test]
async fn issue_29_a_vision_model_gets_a_result_s_images_bounded_and_the_runlog_their_types() {
    for vision in [true, false] {
        let spec = fabric_domain::ToolSpec::with_schema("snap", "fake", json!({"type": "object"}))
            .unwrap();
        let store = MemStore::new();
        let chat = ScriptedChat::new(vec![
            call("snap", json!({})),
            call("finish_task", json!({"summary": "ok"})),
        ]);
        let mut force = task(chat.client(), vec![Arc::new(Pictures(spec))], true, false);
        std::sync::Arc::make_mut(&mut force.members[0].model.config).vision = vision;
        run(&store, force).await.unwrap();
        let seen = chat.seen();
        let result = seen[1].last().unwrap();
        let logged = &store.of(EventKind::ToolResult)[0].payload;
        assert_eq!(logged["result"].as_str(), result.content.as_deref());
        if vision {
            assert_eq!(result.images.len(), 4);
            assert_eq!(logged["images"], json!(vec!["image/png"; 4]));
            let text = result.content.as_deref().unwrap();
            assert!(
                text.starts_with("six pictures\n\n[image 1 not shown: its type image/tiff"),
                "{text}"
            );
            assert!(
                text.ends_with("image 6 not shown: a result shows at most 4 images]"),
                "{text}"
            );
        } else {
            assert!(result.images.is_empty());
            assert!(logged.get("images").is_none());
            assert_eq!(result.content.as_deref(), Some("six pictures"));
        }
    }
}

/// A first answer in prose that the server's token limit cut (`finish_reason: length`) is
/// cut to fit the window after the corrective reprompt, like any oversized turn; it used to
/// be kept whole and end the run at once with `context_window_exceeded` (issue #40).
#[tokio::test]
async fn issue_40_a_long_first_answer_in_prose_is_cut_to_fit_the_window() {
    let prose = "The river runs to the sea, and yet the sea is not full. ".repeat(70);
    assert!(prose.len() > 3_900);
    let chat = ScriptedChat::new(vec![
        Ok(fabric_core::ChatResponse {
            content: Some(prose.clone()),
            finish_reason: Some("length".into()),
            ..Default::default()
        }),
        call("work", json!({})),
        call("finish_task", json!({"summary": "ok"})),
    ]);
    let store = MemStore::new();
    let mut t = task(chat.client(), vec![ok_tool("work")], true, false);
    let member = &mut t.members[0];
    member.model.context_window = Some(1_600);
    member.model.max_tokens = Some(200);
    let outcome = run(&store, t).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.reason);
    let compacted = store.of(EventKind::ContextCompacted);
    assert_eq!(compacted.len(), 1, "{compacted:?}");
    assert_eq!(compacted[0].payload["cut_results"], 1);
    // The model saw the start of its answer, a note, and the corrective message after it.
    let seen = chat.seen();
    let answer = seen[1]
        .iter()
        .find(|m| m.role == fabric_domain::Role::Assistant)
        .and_then(|m| m.content.clone())
        .unwrap();
    assert!(answer.starts_with("The river runs"), "{answer}");
    assert!(
        answer.ends_with("more characters of this answer cut to fit the model's context window]"),
        "{answer}"
    );
    assert!(answer.len() < prose.len());
}
