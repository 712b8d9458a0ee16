//! `fabric serve` as an A2A agent (issue #30), driven by the official Python A2A SDK
//! (`a2a-sdk`, pinned in the test deps): the card, a task sent and waited for, one streamed,
//! read back, listed, one cancelled, one followed, and the protocol's errors.

use std::path::PathBuf;

use fabric_test_support::scenario::TurnBy;
use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};

use super::serve_fixture::{Options, Served, TOKEN};

pub(crate) fn scenario() -> Scenario {
    let mut finish = Turn::tool_call(
        "finish_task",
        json!({"summary": "wrote the file", "artifacts": ["hello.txt"]}),
    );
    // Long enough to cancel a task, or subscribe to it, while it runs.
    finish.delay_ms = Some(2500);
    let mut scenario = Scenario::new(vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "hello.txt", "content": "Hello"}),
        ),
        finish,
    ]);
    scenario.turn_by = TurnBy::Conversation;
    scenario
}

/// `fabric serve` with the token, over [`scenario`].
async fn served() -> Served {
    Served::with(
        scenario(),
        Options {
            auth: true,
            ..Options::default()
        },
    )
    .await
}

async fn drive(base: &str) -> Value {
    let python = fabric_test_support::test_deps()
        .map(|dir| dir.join("venv/bin/python"))
        .expect("test deps");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/a2a/python_client.py");
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        tokio::process::Command::new(python)
            .arg(script)
            .args([base, TOKEN])
            .output(),
    )
    .await
    .expect("the A2A client finished in time")
    .expect("the A2A client ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn states(events: &Value) -> Vec<String> {
    events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            e.pointer("/task/status/state")
                .or(e.pointer("/statusUpdate/status/state"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

#[cfg_attr(
    fabric_no_a2a,
    ignore = "needs the Python A2A SDK: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_30_the_python_a2a_sdk_sends_follows_lists_and_cancels_tasks() {
    let served = served().await;
    let seen = drive(&served.base).await;

    let card = &seen["card"];
    assert_eq!(card["name"], "agent-fabric");
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(
        card["supportedInterfaces"][1]["protocolBinding"],
        "HTTP+JSON"
    );
    assert_eq!(
        card["supportedInterfaces"][1]["url"],
        format!("{}/a2a/v1", served.base)
    );
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        format!("{}/a2a", served.base)
    );
    let skills: Vec<&str> = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(skills.contains(&"engineering"), "{skills:?}");
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );

    // The task is the run: completed, its result an artifact, the workspace written.
    let task = &seen["blocking"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "wrote the file");
    assert_eq!(
        task["artifacts"][0]["parts"][1]["data"]["summary"],
        "wrote the file"
    );
    let id = task["id"].as_str().unwrap();
    let (code, run) = served.get_json(&format!("/runs/{id}")).await;
    assert_eq!(code, 200);
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["specialist_ids"], json!(["engineering"]));

    // Streamed: the task, a status per tool call, the artifact, the final status.
    let stream = &seen["stream"];
    let streamed = states(stream);
    assert_eq!(
        streamed.first().map(String::as_str),
        Some("TASK_STATE_WORKING")
    );
    assert_eq!(
        streamed.last().map(String::as_str),
        Some("TASK_STATE_COMPLETED"),
        "{stream}"
    );
    let said: Vec<&str> = stream
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.pointer("/statusUpdate/status/message/parts/0/text"))
        .filter_map(Value::as_str)
        .collect();
    assert!(said.iter().any(|t| t.contains("`write_file`")), "{said:?}");
    assert!(
        stream
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.get("artifactUpdate").is_some())
    );

    // Asked for (`acceptedOutputModes`), the file the run wrote comes as a file part: in the
    // stream's artifacts and in the task SendMessage answers; not to a client that did not ask.
    let file = json!({"raw": "SGVsbG8=", "filename": "hello.txt", "mediaType": "text/plain"});
    let streamed_files = stream
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e.pointer("/artifactUpdate/artifact/name") == Some(&json!("files")))
        .unwrap_or_else(|| panic!("no files artifact: {stream}"));
    assert_eq!(
        streamed_files["artifactUpdate"]["artifact"]["parts"][0],
        file
    );
    assert_eq!(
        seen["files"]["artifacts"][1]["name"], "files",
        "{}",
        seen["files"]
    );
    assert_eq!(seen["files"]["artifacts"][1]["parts"][0], file);
    assert_eq!(
        task["artifacts"].as_array().map(Vec::len),
        Some(1),
        "{task}"
    );

    assert_eq!(seen["get"]["id"], id);
    assert_eq!(
        seen["get"]["history"][0]["parts"][0]["text"],
        "Create hello.txt"
    );
    let listed: Vec<&str> = seen["list"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert!(listed.contains(&id), "{listed:?}");
    assert!(
        seen["list"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.get("artifacts").is_none()),
        "ListTasks leaves artifacts out unless asked (includeArtifacts)"
    );

    assert_eq!(seen["started"]["status"]["state"], "TASK_STATE_WORKING");
    check_cancelled_followed_and_errors(&seen);
    check_rest(&seen["rest"], &served).await;
}

/// The cancelled task, the one followed to its end, and the SDK's typed errors for an
/// unknown task, a message without text and a task that ended, with our messages.
fn check_cancelled_followed_and_errors(seen: &Value) {
    assert_eq!(
        seen["canceled"]["status"]["state"], "TASK_STATE_CANCELED",
        "{}",
        seen["canceled"]
    );
    let subscribed = states(&seen["subscribed"]);
    assert_eq!(
        subscribed.last().map(String::as_str),
        Some("TASK_STATE_COMPLETED"),
        "{subscribed:?}"
    );
    let errors = &seen["errors"];
    for (key, wanted) in [
        ("unknown_task", "TaskNotFoundError"),
        ("no_text", "InvalidParamsError"),
        ("not_cancelable", "TaskNotCancelableError"),
    ] {
        let text = errors[key].as_str().unwrap();
        assert!(text.starts_with(wanted), "{key}: {text}");
    }
    assert!(errors["no_text"].as_str().unwrap().contains("no text"));
}

/// What the SDK saw over the HTTP+JSON binding: the same tasks as over JSON-RPC.
async fn check_rest(seen: &Value, served: &Served) {
    assert_eq!(seen["transport"], "RestTransport", "{seen}");
    let task = &seen["blocking"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["contextId"], "rest-conv");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "wrote the file");
    let id = task["id"].as_str().unwrap();
    let (code, run) = served.get_json(&format!("/runs/{id}")).await;
    assert_eq!((code, &run["status"]), (200, &json!("completed")), "{run}");
    let streamed = states(&seen["stream"]);
    assert_eq!(
        streamed.first().map(String::as_str),
        Some("TASK_STATE_WORKING")
    );
    assert_eq!(
        streamed.last().map(String::as_str),
        Some("TASK_STATE_COMPLETED")
    );
    let file = seen["stream"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|e| e.pointer("/artifactUpdate/artifact/parts/0/raw"));
    assert_eq!(file, Some(&json!("SGVsbG8=")), "{}", seen["stream"]);
    assert_eq!(seen["get"]["id"], id);
    let listed = seen["list"]["tasks"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "one task in the context: {listed:?}");
    assert_eq!(listed[0]["id"], id);
    check_cancelled_followed_and_errors(seen);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_30_the_a2a_endpoint_keeps_the_token_and_answers_bad_requests_in_json_rpc() {
    let served = served().await;
    let http = reqwest::Client::new();
    // The card is public (discovery); the endpoint is not.
    let card = http
        .get(format!("{}/.well-known/agent-card.json", served.base))
        .send()
        .await
        .unwrap();
    assert_eq!(card.status(), 200);
    let post = |body: &'static str, token: bool| {
        let mut request = http
            .post(format!("{}/a2a", served.base))
            .header("content-type", "application/json")
            .body(body);
        if token {
            request = request.bearer_auth(TOKEN);
        }
        request.send()
    };
    let refused = post(
        r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#,
        false,
    )
    .await
    .unwrap();
    assert_eq!(refused.status(), 401);
    for (body, code) in [
        ("{not json", -32700),
        (r#"{"id":1,"method":"GetTask"}"#, -32600),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"Nope","params":{}}"#,
            -32601,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"bogus"}}"#,
            -32001,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","taskId":"t","parts":[{"text":"go on"}]}}}"#,
            -32004,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"CreateTaskPushNotificationConfig","params":{}}"#,
            -32003,
        ),
    ] {
        let answer: Value = post(body, true).await.unwrap().json().await.unwrap();
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.len() > 10),
            "{answer}"
        );
    }
}

/// The HTTP+JSON binding keeps the token and answers what it cannot do with an HTTP status
/// and the A2A reason the SDKs map to their typed errors.
#[tokio::test(flavor = "multi_thread")]
async fn issue_30_the_http_json_binding_answers_errors_as_statuses_with_reasons() {
    let served = served().await;
    let url = |path: &str| format!("{}/a2a/v1{path}", served.base);
    let refused = served.http.get(url("/tasks")).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let unknown = "20260101-120000-000-0123abcd";
    for (method, path, body, status, reason) in [
        (
            "GET",
            format!("/tasks/{unknown}"),
            "",
            404,
            "TASK_NOT_FOUND",
        ),
        (
            "GET",
            "/tasks?pageSize=many".to_owned(),
            "",
            400,
            "INVALID_PARAMS",
        ),
        (
            "POST",
            format!("/tasks/{unknown}:pause"),
            "",
            404,
            "METHOD_NOT_FOUND",
        ),
        (
            "POST",
            format!("/tasks/{unknown}:cancel"),
            "",
            404,
            "TASK_NOT_FOUND",
        ),
        (
            "POST",
            "/message:send".to_owned(),
            "{not json",
            400,
            "INVALID_REQUEST",
        ),
        (
            "POST",
            "/message:send".to_owned(),
            r#"{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"data":{"a":1}}]}}"#,
            400,
            "INVALID_PARAMS",
        ),
        (
            "POST",
            format!("/tasks/{unknown}/pushNotificationConfigs"),
            "{}",
            400,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
    ] {
        let request = match method {
            "GET" => served.http.get(url(&path)),
            _ => served.http.post(url(&path)).body(body),
        };
        let response = request.bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{method} {path}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(
            answer["error"]["details"][0]["reason"], reason,
            "{path}: {answer}"
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.len() > 10),
            "{answer}"
        );
    }
    let old = served
        .http
        .get(url("/tasks"))
        .bearer_auth(TOKEN)
        .header("A2A-Version", "0.3")
        .send()
        .await
        .unwrap();
    assert_eq!(old.status(), 400);
    let answer: Value = old.json().await.unwrap();
    assert_eq!(
        answer["error"]["details"][0]["reason"],
        "VERSION_NOT_SUPPORTED"
    );
}

/// One JSON-RPC call to `served`'s `/a2a`, with the token, sent; its response.
pub(crate) async fn call(served: &Served, method: &str, params: Value) -> reqwest::Response {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    served
        .http
        .post(format!("{}/a2a", served.base))
        .bearer_auth(TOKEN)
        .json(&call)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"))
}

/// [`call`]'s whole JSON answer.
pub(crate) async fn rpc(served: &Served, method: &str, params: Value) -> Value {
    call(served, method, params)
        .await
        .json()
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"))
}

/// A message with `text`, in `context` when given.
pub(crate) fn message(text: &str, context: Option<&str>) -> Value {
    let mut message = json!({"messageId": text, "role": "ROLE_USER", "parts": [{"text": text}]});
    if let Some(context) = context {
        message["contextId"] = json!(context);
    }
    json!({"message": message, "configuration": {"returnImmediately": true}})
}

/// A client's `contextId` is kept on the task and every answer about it, a follow-up in the
/// same context is a new task in it, ListTasks finds a context's tasks, and a message that
/// gives none is given a context of its own.
#[tokio::test(flavor = "multi_thread")]
async fn issue_30_a_context_is_kept_and_a_follow_up_is_a_new_task_in_it() {
    let served = served().await;
    let first = rpc(
        &served,
        "SendMessage",
        message("Create a.txt", Some("conv-1")),
    )
    .await;
    let first = &first["result"]["task"];
    assert_eq!(first["contextId"], "conv-1", "{first}");
    // Answered at once, yet read back once the run recorded its start.
    assert_eq!(first["status"]["state"], "TASK_STATE_WORKING", "{first}");
    assert_eq!(first["history"][0]["parts"][0]["text"], "Create a.txt");
    let second = rpc(&served, "SendMessage", message("Now b.txt", Some("conv-1"))).await;
    let second = &second["result"]["task"];
    assert_eq!(second["contextId"], "conv-1", "{second}");
    assert_ne!(first["id"], second["id"], "a follow-up is a new task");
    let alone = rpc(&served, "SendMessage", message("Create c.txt", None)).await;
    let alone = &alone["result"]["task"];
    let own = alone["contextId"].as_str().unwrap_or_default();
    assert!(own.starts_with("ctx-") && own != "conv-1", "{alone}");

    // Every answer about the task says its context: GetTask, once ended, with its messages.
    let ended = wait_ended(&served, first["id"].as_str().unwrap()).await;
    assert_eq!(ended["contextId"], "conv-1");
    assert_eq!(ended["status"]["message"]["contextId"], "conv-1", "{ended}");
    assert_eq!(ended["history"][0]["contextId"], "conv-1");

    let listed = rpc(&served, "ListTasks", json!({"contextId": "conv-1"})).await;
    let ids: Vec<&Value> = listed["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|t| &t["id"])
        .collect();
    assert_eq!(ids, [&second["id"], &first["id"]], "newest first: {listed}");
    let listed = rpc(&served, "ListTasks", json!({"contextId": own})).await;
    assert_eq!(listed["result"]["tasks"][0]["id"], alone["id"], "{listed}");

    let bad = rpc(&served, "SendMessage", message("x", Some(&"c".repeat(300)))).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("contextId")
    );
}

/// GetTask on `id` until it is no longer working (at most 30 s).
pub(crate) async fn wait_ended(served: &Served, id: &str) -> Value {
    for _ in 0..300 {
        let task = rpc(served, "GetTask", json!({"id": id})).await["result"].clone();
        if task["status"]["state"] != "TASK_STATE_WORKING" {
            return task;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("task {id} still working after 30 s");
}

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

/// The A2A agent of `tests/a2a/python_agent.py`, built with the official Python SDK's server
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
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/a2a/python_agent.py");
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
