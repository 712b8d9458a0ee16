//! The runlog lines are a public contract (docs/RUNLOG.md): runs recorded with fakes must
//! produce exactly the lines in `tests/golden/runlog.jsonl`, byte for byte, with only the
//! clock-dependent values (`ts`, `latency_ms`) zeroed. The golden file was captured from the
//! engine as it was before its payloads became typed, so any change to a key, a `null` or a
//! value's shape shows here. Regenerate it only for a deliberate format change:
//! `FABRIC_UPDATE_GOLDEN=1 cargo test -p fabric-core --test runlog_golden`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use async_trait::async_trait;
use fabric_core::delegate::{Lineage, RunBudget};
use fabric_core::engine::ModelParams;
use fabric_core::execute::{Member, Roster, TaskForce, TaskForceMode, execute_task_force};
use fabric_core::recruit::{RoutingCall, RoutingFailure};
use fabric_core::{
    ChatError, ChatResponse, NoopObserver, RunSandbox, SecurityNotice, Tool, ToolContext,
    ToolError, ToolNotice, ToolSource,
};
use fabric_domain::{EventKind, EventPayload, RunId, SpecialistSpec, ToolCall, ToolSpec, Usage};
use fabric_fakes::{MemStore, ScriptedChat, call_raw, specialist_as};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

const GOLDEN: &str = "tests/golden/runlog.jsonl";

fn text(content: &str) -> Result<ChatResponse, ChatError> {
    Ok(ChatResponse {
        content: Some(content.into()),
        usage: Some(Usage {
            prompt_tokens: 10,
            completion_tokens: 2,
            total_tokens: 12,
        }),
        finish_reason: Some("stop".into()),
        ..ChatResponse::default()
    })
}

/// `list_files` answers; `rm` is refused for safety.
struct FakeTool(ToolSpec);

#[async_trait]
impl Tool for FakeTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<Value, ToolError> {
        match self.0.name.as_str() {
            "rm" => Err(ToolError::Denied {
                event_type: "path_escape".into(),
                attempted: "../etc".into(),
                message: "`../etc` is outside the workspace".into(),
            }),
            "fail" => Err(ToolError::Failed("it broke".into())),
            _ => Ok(json!("a.txt")),
        }
    }
}

fn tool(name: &str) -> Arc<dyn Tool> {
    Arc::new(FakeTool(
        ToolSpec::with_schema(name, "fake", json!({"type": "object"})).unwrap(),
    ))
}

/// A source that notices one MCP server becoming ready before the first step.
struct Notices(Mutex<Vec<ToolNotice>>);

#[async_trait]
impl ToolSource for Notices {
    fn version(&self) -> u64 {
        0
    }
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }
    fn take_notices(&self) -> Vec<ToolNotice> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn specialist(id: &str) -> SpecialistSpec {
    specialist_as(id, &format!("You are {id}."), &["list_files", "rm", "fail"])
}

fn member(id: &str, chat: &ScriptedChat) -> Member {
    Member::new(
        specialist(id).into(),
        vec![tool("list_files"), tool("rm"), tool("fail")],
        chat.client(),
        format!("{id}-key"),
        ModelParams::named(format!("{id}-model")),
    )
}

fn force(members: Vec<Member>, mode: TaskForceMode) -> TaskForce {
    TaskForce {
        prompt: "do the thing".into(),
        members,
        recruitment: Roster::explicit(Vec::new(), "test"),
        routing_call: None,
        mode,
        // One at a time, so the parallel scenario writes its lines in a fixed order.
        max_parallel: 1,
        max_steps: 6,
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

/// The lines as the file store writes them, with the clock taken out.
async fn record(force: TaskForce) -> Vec<String> {
    let store = MemStore::new()
        .with_id("golden-run")
        .with_workspace("/ws/golden-run/workspace");
    execute_task_force(&store, force, &NoopObserver, CancellationToken::new())
        .await
        .unwrap();
    let events = store.events();
    events
        .into_iter()
        .map(|mut event| {
            event.ts = 0.0;
            match &mut event.payload {
                EventPayload::LlmResponse(response) => response.latency_ms = 0.0,
                EventPayload::RoutingResponse(response) => response.latency_ms = 0.0,
                _ => {}
            }
            serde_json::to_string(&event).unwrap()
        })
        .collect()
}

/// A lone specialist that does everything a loop can: an MCP notice, a plain-text reply, bad
/// arguments, an unknown tool, a refused call, a failed call, a result and `finish_task`;
/// started by a routing call, delegated by a parent, with the sandbox off.
async fn single_with_everything() -> Vec<String> {
    let chat = ScriptedChat::new(vec![
        text("I think it is done."),
        call_raw("list_files", "{not json"),
        call_raw("nope", "{}"),
        call_raw("rm", r#"{"path": "../etc"}"#),
        call_raw("fail", ""),
        Ok(ChatResponse {
            content: Some("working".into()),
            tool_calls: vec![
                ToolCall {
                    id: "c-1".into(),
                    name: "list_files".into(),
                    arguments: "{}".into(),
                },
                ToolCall {
                    id: "c-2".into(),
                    name: "finish_task".into(),
                    arguments: r#"{"summary": "done"}"#.into(),
                },
            ],
            usage: Some(Usage {
                prompt_tokens: 20,
                completion_tokens: 5,
                total_tokens: 25,
            }),
            finish_reason: Some("tool_calls".into()),
            queued_ms: None,
            prompt_cache: None,
            constrained: false,
        }),
    ]);
    let mut m = member("eng", &chat);
    m.model_reason = Some("the largest model that fits".into());
    m.sources = vec![Arc::new(Notices(Mutex::new(vec![ToolNotice {
        kind: EventKind::McpServer,
        payload: json!({"server": "gh", "status": "ready", "elapsed_ms": 12, "tools": ["mcp__gh__me"], "skipped": [{"tool": "x", "reason": "too long"}]}),
    }])))];
    let mut f = force(vec![m], TaskForceMode::Sequential);
    f.recruitment = Roster {
        specialist_ids: Vec::new(),
        routing_method: "llm".into(),
        required_capabilities: vec!["code".into()],
        reason: "it builds".into(),
    };
    f.routing_call = Some(RoutingCall {
        model_key: "router".into(),
        model: "tiny".into(),
        content: None,
        tool_arguments: Some(r#"{"specialists": ["eng"]}"#.into()),
        latency_ms: 3.25,
        outcome: Ok((vec!["eng".into()], "it builds".into())),
    });
    f.sandbox = RunSandbox {
        policy: json!({"mode": "off", "enforced_by_kernel": false, "limits": {"cpu_s": 60}}).into(),
        notices: vec![SecurityNotice {
            event_type: "sandbox_off".into(),
            message: "the OS sandbox is off".into(),
        }],
    };
    f.lineage = Some(
        Lineage::root(Arc::new(RunBudget::unlimited())).child(RunId::parse("parent-run").unwrap()),
    );
    record(f).await
}

/// A routing call whose answer was not used, then a run that runs out of steps.
async fn single_out_of_steps() -> Vec<String> {
    let chat = ScriptedChat::new(vec![call_raw("list_files", "{}")]);
    let mut f = force(vec![member("eng", &chat)], TaskForceMode::Sequential);
    f.max_steps = 1;
    f.recruitment.routing_method = "keyword_fallback".into();
    f.routing_call = Some(RoutingCall {
        model_key: "router".into(),
        model: "tiny".into(),
        content: Some("not json".into()),
        tool_arguments: None,
        latency_ms: 1.5,
        outcome: Err(RoutingFailure::NotAnObject {
            answer: String::new(),
        }),
    });
    record(f).await
}

/// Two members in turn: the second gets the first's payload, then fails (partial result).
async fn sequential_partial() -> Vec<String> {
    let a = ScriptedChat::new(vec![
        call_raw("list_files", "{}"),
        call_raw("finish_task", r#"{"summary": "A"}"#),
    ]);
    let b = ScriptedChat::new(vec![]);
    record(force(
        vec![member("a", &a), member("b", &b)],
        TaskForceMode::Sequential,
    ))
    .await
}

/// Two members side by side, both failing: `task_force_parallel`, then `run_failed`.
async fn parallel_failed() -> Vec<String> {
    let a = ScriptedChat::new(vec![]);
    let b = ScriptedChat::new(vec![]);
    record(force(
        vec![member("a", &a), member("b", &b)],
        TaskForceMode::Parallel,
    ))
    .await
}

/// Two members side by side, both finishing: the merged result.
async fn parallel_complete() -> Vec<String> {
    let a = ScriptedChat::new(vec![
        call_raw("list_files", "{}"),
        call_raw("finish_task", r#"{"summary": "A"}"#),
    ]);
    let b = ScriptedChat::new(vec![
        call_raw("list_files", "{}"),
        call_raw("finish_task", r#"{"summary": "B"}"#),
    ]);
    record(force(
        vec![member("a", &a), member("b", &b)],
        TaskForceMode::Parallel,
    ))
    .await
}

#[tokio::test]
async fn runlog_lines_match_the_golden_file() {
    let mut lines = Vec::new();
    lines.extend(single_with_everything().await);
    lines.extend(single_out_of_steps().await);
    lines.extend(sequential_partial().await);
    lines.extend(parallel_failed().await);
    lines.extend(parallel_complete().await);
    let actual = lines.join("\n") + "\n";
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if std::env::var_os("FABRIC_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
    }
    let expected =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for (i, (want, got)) in expected.lines().zip(actual.lines()).enumerate() {
        assert_eq!(got, want, "line {} of {GOLDEN}", i + 1);
    }
    assert_eq!(actual.lines().count(), expected.lines().count());

    // Every kind the engine writes appears at least once.
    let kinds: BTreeSet<String> = actual
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["kind"].to_string())
        .collect();
    for kind in [
        "run_start",
        "recruitment",
        "task_force_parallel",
        "pack_start",
        "pack_end",
        "mcp_server",
        "llm_request",
        "llm_response",
        "corrective_reprompt",
        "tool_call",
        "tool_result",
        "tool_error",
        "security_event",
        "run_complete",
        "run_failed",
    ] {
        assert!(kinds.contains(&format!("\"{kind}\"")), "no {kind} line");
    }
}
