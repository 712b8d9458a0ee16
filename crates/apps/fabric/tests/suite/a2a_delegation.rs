//! A fabric run hands tasks to remote A2A agents (issue #30): another `fabric serve`, an agent
//! built with the official Python A2A SDK's server (`examples/a2a/haiku_agent.py`), and one
//! that cannot be reached.

use std::path::PathBuf;

use fabric_test_support::scenario::TurnBy;
use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};

use super::a2a_server::served;
use super::serve_fixture::TOKEN;

/// The run of [`delegating`]'s fabric.
const DELEGATING_RUN: &[&str] = &[
    "run",
    "get a poem written",
    "--pack",
    "engineering",
    "--json",
];

/// A fabric whose engineering specialist delegates to `peer`, a remote A2A agent at `url`,
/// and whose model calls it once, then finishes.
async fn delegating(url: &str) -> super::fixture::Fixture {
    delegating_task(url, "Write poem.txt", 60).await
}

/// [`delegating`], the model handing `peer` the task `task`, which may take `timeout_s`.
async fn delegating_task(url: &str, task: &str, timeout_s: u64) -> super::fixture::Fixture {
    let mut scenario = Scenario::new(vec![
        Turn::tool_call("agent__peer", json!({ "task": task })),
        Turn::tool_call("finish_task", json!({"summary": "the peer wrote it"})),
    ]);
    scenario.turn_by = TurnBy::Conversation;
    let fx = super::fixture::Fixture::with_backend(scenario, "openai").await;
    fx.append_config(&format!(
        "network_allowed: true\nagents:\n  peer:\n    url: {url}\n    token_env: PEER_TOKEN\n    timeout_s: {timeout_s}\nspecialists:\n  engineering:\n    delegates: [peer]\n"
    ));
    fx
}

/// Runs [`DELEGATING_RUN`] in `fx` with `env`, checks that it completed, and returns what
/// `agent__peer` answered (the runlog keeps a tool's result as the text the model read).
async fn delegated(fx: &super::fixture::Fixture, env: &[(&str, &str)]) -> Value {
    let run = fx.fabric_with(DELEGATING_RUN, env).await;
    let result = run.json();
    let events = fx.runlog(&result);
    assert_eq!(run.code(), 0, "{}\n{}\n{events:#?}", run.stdout, run.stderr);
    assert_eq!(result["_meta"]["status"], "completed", "{result}");
    let answer = events
        .iter()
        .find(|e| e["kind"] == "tool_result" && e["payload"]["tool"] == "agent__peer")
        .unwrap_or_else(|| panic!("no agent__peer result: {events:?}"));
    let said: Value = serde_json::from_str(answer["payload"]["result"].as_str().unwrap()).unwrap();
    assert_eq!(said["state"], "TASK_STATE_COMPLETED", "{answer}");
    said
}

/// Runs [`DELEGATING_RUN`] in `fx` and returns the tool error its call to `agent__peer` got.
async fn refused(fx: &super::fixture::Fixture) -> String {
    let run = fx.fabric(DELEGATING_RUN).await;
    let events = fx.runlog(&run.json());
    let refused = events
        .iter()
        .find(|e| e["kind"] == "tool_error" && e["payload"]["tool"] == "agent__peer")
        .unwrap_or_else(|| panic!("no agent__peer error: {events:?}"));
    refused["payload"]["error_message"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The other direction: a fabric run hands a task to a remote A2A agent (another `fabric
/// serve`, reached over HTTP with its token), as to a local specialist.
#[tokio::test(flavor = "multi_thread")]
async fn issue_30_a_run_delegates_to_a_remote_a2a_agent() {
    let peer = served().await;
    let fx = delegating(&peer.base).await;
    let said = delegated(&fx, &[("PEER_TOKEN", TOKEN)]).await;
    assert_eq!(said["text"], "wrote the file");
    // The peer ran it as a run of its own, with the task as its prompt.
    assert_eq!(said["data"][0]["summary"], "wrote the file");
    let remote_id = said["task_id"].as_str().unwrap();
    let (code, remote) = peer.get_json(&format!("/runs/{remote_id}")).await;
    assert_eq!(code, 200);
    assert_eq!(remote["prompt"], "Write poem.txt");

    // Without the token, the peer refuses, and the model is told what to fix.
    let message = refused(&fx).await;
    assert!(message.contains("agents.peer.token_env"), "{message}");
}

/// The A2A agent of `examples/a2a/haiku_agent.py`, built with the official Python SDK's server
/// (a2a-sdk, served by uvicorn), once its card answers; killed when dropped.
struct PythonAgent {
    _child: tokio::process::Child,
    base: String,
}

impl PythonAgent {
    async fn start() -> Self {
        use tokio::io::AsyncBufReadExt;
        let python = fabric_test_support::test_deps()
            .map(|dir| dir.join("venv/bin/python"))
            .expect("test deps");
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../examples/a2a/haiku_agent.py");
        let mut child = tokio::process::Command::new(python)
            .arg(script)
            .arg("0")
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the Python A2A agent starts");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let base = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .expect("the Python A2A agent printed its address within 30 s")
            .expect("read its stdout")
            .expect("a first line");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let card = format!("{base}/.well-known/agent-card.json");
        let http = reqwest::Client::new();
        for _ in 0..100 {
            if http
                .get(&card)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Self {
                    _child: child,
                    base,
                };
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("the Python A2A agent's card at {card} did not answer within 10 s");
    }

    /// Its task `id`, as its `GetTask` answers.
    async fn get_task(&self, id: &str) -> Value {
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}});
        let response = reqwest::Client::new()
            .post(format!("{}/a2a", self.base))
            .header("A2A-Version", "1.0")
            .json(&call)
            .send()
            .await
            .expect("the Python A2A agent answers GetTask");
        let answer: Value = response.json().await.expect("a JSON-RPC answer");
        answer["result"].clone()
    }
}

/// A fabric run hands tasks to an agent the project did not write: one built with the
/// official Python A2A SDK's server components. One completes with its artifact; one fails
/// with the agent's message, which the model reads as a tool error; one that hangs is
/// cancelled at the agent when its time is up.
#[cfg_attr(
    fabric_no_a2a,
    ignore = "needs the Python A2A SDK: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_30_a_run_delegates_to_an_a2a_sdk_agent() {
    let agent = PythonAgent::start().await;

    let fx = delegating_task(&agent.base, "a haiku about rust", 60).await;
    let said = delegated(&fx, &[]).await;
    assert_eq!(said["text"], "haiku: a haiku about rust");
    assert_eq!(said["data"][0]["topic"], "a haiku about rust", "{said}");
    assert!(said["task_id"].as_str().is_some_and(|id| !id.is_empty()));

    let fx = delegating_task(&agent.base, "fail at a haiku", 60).await;
    let message = refused(&fx).await;
    assert!(message.contains("\"agent\":\"peer\""), "{message}");
    assert!(message.contains("TASK_STATE_FAILED"), "{message}");
    assert!(message.contains("no muse today"), "{message}");

    // A task that outlasts `timeout_s` is cancelled at the agent, which the SDK records.
    let fx = delegating_task(&agent.base, "hang on a haiku", 2).await;
    let message = refused(&fx).await;
    assert!(message.contains("its time ran out"), "{message}");
    let id = message
        .split('`')
        .nth(3)
        .unwrap_or_else(|| panic!("no task id: {message}"));
    let task = agent.get_task(id).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_CANCELED", "{task}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_30_an_unreachable_remote_agent_fails_the_run_naming_it() {
    let fx = delegating("http://127.0.0.1:9").await;
    let run = fx.fabric(DELEGATING_RUN).await;
    assert_ne!(run.code(), 0, "{}", run.stdout);
    let result = run.json();
    assert_eq!(result["_meta"]["status"], "failed", "{result}");
    let reason = result["_meta"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("agent `peer`: cannot fetch its card"),
        "{reason}"
    );
    assert!(
        fx.server.requests().is_empty(),
        "no model call before the tools are up"
    );
}
