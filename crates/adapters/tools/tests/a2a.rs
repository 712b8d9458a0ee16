//! A remote A2A agent as a tool (issue #30), against fixture agents on 127.0.0.1 that
//! complete, fail, hang or answer garbage. The fabric's own A2A server and the official
//! Python SDK's are driven through the binary's tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use fabric_core::{Tool, ToolContext};
use fabric_domain::RunId;
use fabric_tools::a2a::{RemoteAgentConfig, RemoteAgentError, remote_agents};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct Agent {
    mode: &'static str,
    base: String,
    calls: Arc<Mutex<Vec<Value>>>,
}

async fn card(State(agent): State<Agent>) -> axum::response::Response {
    use axum::response::IntoResponse;
    if agent.mode == "html-card" {
        return "<html>welcome</html>".into_response();
    }
    let version = if agent.mode == "old-card" {
        "0.3"
    } else {
        "1.0"
    };
    axum::Json(json!({
        "name": "poet", "description": "Writes poems.", "version": "1",
        "supportedInterfaces": [{"url": format!("{}/rpc", agent.base), "protocolBinding": "JSONRPC", "protocolVersion": version}],
        "skills": [{"id": "haiku", "name": "haiku", "description": "Haiku."}],
    }))
    .into_response()
}

async fn rpc(
    State(agent): State<Agent>,
    axum::Json(request): axum::Json<Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let id = request["id"].clone();
    agent.calls.lock().unwrap().push(request.clone());
    let gets = agent
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c["method"] == "GetTask")
        .count();
    let task = |state: &str| json!({"id": "t1", "contextId": "t1", "status": {"state": state}});
    let result = match (agent.mode, request["method"].as_str().unwrap_or_default()) {
        ("garbage", _) => return "<html>oops</html>".into_response(),
        ("shapeless", "SendMessage") => json!({"weird": 1}),
        ("stateless", "GetTask") => json!({"id": "t1", "status": {}}),
        ("odd-state", "SendMessage") => json!({"task": {"id": "t1", "status": {"state": "done!"}}}),
        (_, "SendMessage") => json!({"task": task("TASK_STATE_WORKING")}),
        ("completes", "GetTask") if gets >= 2 => json!({
            "id": "t1", "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"artifactId": "a", "parts": [{"text": "An old silent pond"}, {"data": {"lines": 3}}]}],
        }),
        ("fails", "GetTask") => json!({"id": "t1", "status": {"state": "TASK_STATE_FAILED",
            "message": {"role": "ROLE_AGENT", "parts": [{"text": "no muse today"}]}}}),
        (_, "GetTask") => task("TASK_STATE_WORKING"),
        (_, "CancelTask") => task("TASK_STATE_CANCELED"),
        (_, other) => {
            return axum::Json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("no {other}")}})).into_response();
        }
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

async fn agent(mode: &'static str) -> Agent {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let agent = Agent {
        mode,
        base,
        calls: Arc::default(),
    };
    let router = Router::new()
        .route("/.well-known/agent-card.json", get(card))
        .route("/rpc", post(rpc))
        .with_state(agent.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    agent
}

fn config(agent: &Agent, timeout_s: u64) -> RemoteAgentConfig {
    RemoteAgentConfig {
        name: "poet".into(),
        url: agent.base.clone(),
        token: Some("secret".into()),
        timeout_s,
    }
}

fn ctx() -> ToolContext {
    ToolContext {
        approved: false,
        sampler: None,
        live: None,
        run_id: RunId::parse("test-run").unwrap(),
        workspace: std::env::temp_dir(),
        network_allowed: true,
        cancel: CancellationToken::new(),
        lineage: Default::default(),
    }
}

async fn tool(agent: &Agent, timeout_s: u64) -> Arc<dyn Tool> {
    remote_agents(&[config(agent, timeout_s)])
        .await
        .unwrap()
        .remove(0)
}

fn methods(agent: &Agent) -> Vec<String> {
    agent
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|c| c["method"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn issue_30_a_remote_agent_answers_through_its_tool() {
    let agent = agent("completes").await;
    let tool = tool(&agent, 30).await;
    assert_eq!(tool.spec().name, "agent__poet");
    assert!(
        tool.spec()
            .description
            .contains("Writes poems; skills: haiku")
    );
    let answer = tool
        .call(json!({"task": "a haiku on ponds"}), &ctx())
        .await
        .unwrap();
    assert_eq!(answer["state"], "TASK_STATE_COMPLETED");
    assert_eq!(answer["text"], "An old silent pond");
    assert_eq!(answer["data"][0]["lines"], 3);
    assert_eq!(methods(&agent), ["SendMessage", "GetTask", "GetTask"]);
    let sent = agent.calls.lock().unwrap()[0].clone();
    assert_eq!(
        sent["params"]["message"]["parts"][0]["text"],
        "a haiku on ponds"
    );
    assert_eq!(sent["params"]["configuration"]["returnImmediately"], true);
}

/// The tool error a call to the fixture agent in `mode` ends with.
async fn refusal(mode: &'static str) -> String {
    let agent = agent(mode).await;
    tool(&agent, 30)
        .await
        .call(json!({"task": "a haiku"}), &ctx())
        .await
        .unwrap_err()
        .to_string()
}

/// The error of starting with the fixture agent in `mode`, whose card does not do.
async fn bad_card(mode: &'static str) -> RemoteAgentError {
    let agent = agent(mode).await;
    let error = remote_agents(&[config(&agent, 30)]).await.err().unwrap();
    assert!(matches!(error, RemoteAgentError::BadCard { .. }), "{error}");
    error
}

#[tokio::test]
async fn issue_30_a_remote_failure_is_a_tool_error_naming_the_agent_and_its_words() {
    let error = refusal("fails").await;
    assert!(
        error.contains("TASK_STATE_FAILED")
            && error.contains("no muse today")
            && error.contains("poet"),
        "{error}"
    );
}

#[tokio::test]
async fn issue_30_a_hanging_agent_is_cancelled_at_the_timeout_and_when_the_run_is() {
    let agent = agent("hangs").await;
    let error = tool(&agent, 1)
        .await
        .call(json!({"task": "a haiku"}), &ctx())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("its time ran out"), "{error}");
    assert_eq!(
        methods(&agent).last().map(String::as_str),
        Some("CancelTask")
    );

    let agent = self::agent("hangs").await;
    let tool = tool(&agent, 60).await;
    let ctx = ctx();
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        cancel.cancel();
    });
    let error = tool
        .call(json!({"task": "a haiku"}), &ctx)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("the run was cancelled"), "{error}");
    assert_eq!(
        methods(&agent).last().map(String::as_str),
        Some("CancelTask")
    );
}

#[tokio::test]
async fn issue_30_garbage_and_bad_cards_get_clear_errors() {
    let error = refusal("garbage").await;
    assert!(
        error.contains("could not be reached") && error.contains("not JSON"),
        "{error}"
    );

    let error = bad_card("old-card").await;
    assert!(
        error.to_string().contains("protocol version 1.x"),
        "{error}"
    );

    let gone = RemoteAgentConfig {
        name: "gone".into(),
        url: "http://127.0.0.1:9".into(),
        token: None,
        timeout_s: 5,
    };
    let error = remote_agents(&[gone]).await.err().unwrap();
    assert!(
        error
            .to_string()
            .starts_with("agent `gone`: cannot fetch its card"),
        "{error}"
    );

    let agent = self::agent("completes").await;
    let error = tool(&agent, 30)
        .await
        .call(json!({"task": " "}), &ctx())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("`task` is empty"), "{error}");
}

/// Answers that are JSON-RPC but not A2A v1.0 (no task and no message, a task without a
/// state or with one the protocol does not have) are tool errors that say so, not an empty
/// success or a wait until the timeout; a card that is not JSON is a bad card.
#[tokio::test]
async fn issue_30_answers_of_the_wrong_shape_are_tool_errors_not_silence() {
    for (mode, method, what) in [
        ("shapeless", "SendMessage", "neither a task nor a message"),
        ("stateless", "GetTask", "a task without `status.state`"),
        ("odd-state", "SendMessage", "not an A2A v1.0 state"),
    ] {
        let started = std::time::Instant::now();
        let error = refusal(mode).await;
        assert!(
            error.contains(&format!("answered {method} with"))
                && error.contains(what)
                && error.contains("agents.poet.url"),
            "{mode}: {error}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{mode}: no wait"
        );
    }
    let error = bad_card("html-card").await;
    assert!(error.to_string().contains("not JSON"), "{error}");
}
