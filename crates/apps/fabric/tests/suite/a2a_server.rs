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
pub(crate) async fn served() -> Served {
    Served::with(
        scenario(),
        Options {
            auth: true,
            ..Options::default()
        },
    )
    .await
}

/// Runs `script` (a path from the crate) with the test deps' Python and `args`, at most 120 s.
pub(crate) async fn python(script: &str, args: &[&str]) -> std::process::Output {
    let python = fabric_test_support::test_deps()
        .map(|dir| dir.join("venv/bin/python"))
        .expect("test deps");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(script);
    tokio::time::timeout(
        std::time::Duration::from_secs(120),
        tokio::process::Command::new(python)
            .arg(&script)
            .args(args)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{} finished in time", script.display()))
    .unwrap_or_else(|e| panic!("{} ran: {e}", script.display()))
}

async fn drive(base: &str) -> Value {
    let output = python("tests/a2a/python_client.py", &[base, TOKEN]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The example of docs/A2A.md, `examples/a2a/call_fabric.py`, as a user runs it.
#[cfg_attr(
    fabric_no_a2a,
    ignore = "needs the Python A2A SDK: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_30_the_a2a_example_calls_a_fabric_specialist() {
    let served = served().await;
    let example = "../../../examples/a2a/call_fabric.py";
    let args = [
        served.base.as_str(),
        TOKEN,
        "Create hello.txt",
        "engineering",
    ];
    let output = python(example, &args).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("agent-fabric "), "{stdout}");
    assert!(lines[0].contains("engineering"), "{stdout}");
    assert!(
        lines[1].starts_with("task ") && lines[1].ends_with("TASK_STATE_WORKING"),
        "{stdout}"
    );
    assert!(
        lines.iter().any(|l| l.contains("calling `write_file`")),
        "{stdout}"
    );
    assert!(lines.contains(&"result: wrote the file"), "{stdout}");
    assert_eq!(
        lines.last(),
        Some(&"TASK_STATE_COMPLETED: wrote the file"),
        "{stdout}"
    );
    // Told a token the server does not take, it fails, saying so.
    let output = python(
        example,
        &[served.base.as_str(), "wrong", "Create hello.txt"],
    )
    .await;
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("401"),
        "{output:?}"
    );
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
            // A message naming a task answers it while it is input-required (issue #42):
            // naming no task there is, it is `TaskNotFound`.
            r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","taskId":"t","parts":[{"text":"go on"}]}}}"#,
            -32001,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"CreateTaskPushNotificationConfig","params":{}}"#,
            -32003,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER"}}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"read this"},{"url":"file:///etc/passwd"}]}}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","contextId":7,"parts":[{"text":"go"}]}}}"#,
            -32602,
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

/// Two API nodes sharing one PostgreSQL database, each with a workspace root of its own;
/// `None` (after a loud SKIP) without PostgreSQL.
async fn two_nodes() -> Option<(Served, Served)> {
    let url = super::workers::database()?;
    let store = format!("store:\n  url: {url}\n");
    let mut nodes = Vec::new();
    for _ in 0..2 {
        let fx = super::fixture::Fixture::with_backend(scenario(), "openai").await;
        fx.append_config(&store);
        let options = Options {
            auth: true,
            ..Options::default()
        };
        nodes.push(Served::on(fx, options).await);
    }
    let other = nodes.pop()?;
    Some((nodes.pop()?, other))
}

/// Issue #30: on PostgreSQL, any API node answers for any task, even one with a workspace
/// root of its own (no shared disk): the task a node ran is got, listed and found by its
/// context on another.
#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_30_any_api_node_answers_for_any_task_on_postgresql() {
    let Some((first, other)) = two_nodes().await else {
        return;
    };
    assert_ne!(first.fx.workspace_root(), other.fx.workspace_root());

    let sent = rpc(
        &first,
        "SendMessage",
        message("write hello", Some("ctx-pg")),
    )
    .await;
    let id = sent["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{sent}"))
        .to_owned();
    let done = wait_ended(&first, &id).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");

    let there = wait_ended(&other, &id).await;
    assert_eq!(there["status"]["state"], "TASK_STATE_COMPLETED", "{there}");
    assert_eq!(there["contextId"], "ctx-pg");
    assert_eq!(
        there["artifacts"][0]["parts"][0]["text"], "wrote the file",
        "{there}"
    );
    let listed = rpc(&other, "ListTasks", json!({"contextId": "ctx-pg"})).await;
    let ids: Vec<&str> = listed["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(ids, vec![id.as_str()], "{listed}");
}

/// Issue #40: ListTasks filtered by state after taking the page, so a page came back short
/// (here empty, with a next page); a `pageToken` it never gave listed from it; a state that
/// is none was an empty page. The filter is in the query now, and both are invalid params.
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_list_tasks_filters_in_the_query_and_refuses_a_token_it_never_gave() {
    let served = served().await;
    let mut ids = Vec::new();
    for prompt in ["Create a.txt", "Create b.txt", "Create c.txt"] {
        let sent = rpc(&served, "SendMessage", message(prompt, Some("ctx-40"))).await;
        let id = sent["result"]["task"]["id"].as_str().unwrap().to_owned();
        ids.push(id);
    }
    // The newest is cancelled while it works; the two before complete.
    let canceled = rpc(&served, "CancelTask", json!({"id": ids[2]})).await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    for id in &ids[..2] {
        let done = wait_ended(&served, id).await;
        assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    }
    let completed = |token: &str| json!({"contextId": "ctx-40", "status": "TASK_STATE_COMPLETED", "pageSize": 1, "pageToken": token});
    // The store's index takes a run's end a moment after its runlog does: wait for both.
    for _ in 0..100 {
        let all = json!({"contextId": "ctx-40", "status": "TASK_STATE_COMPLETED", "pageSize": 10});
        let listed = rpc(&served, "ListTasks", all).await;
        if listed["result"]["tasks"].as_array().map(Vec::len) == Some(2) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let page = rpc(&served, "ListTasks", completed("")).await;
    assert_eq!(page["result"]["tasks"][0]["id"], ids[1].as_str(), "{page}");
    assert_eq!(page["result"]["tasks"].as_array().map(Vec::len), Some(1));
    assert_eq!(page["result"]["nextPageToken"], ids[1].as_str(), "{page}");
    let page = rpc(&served, "ListTasks", completed(&ids[1])).await;
    assert_eq!(page["result"]["tasks"][0]["id"], ids[0].as_str(), "{page}");
    let canceled = rpc(
        &served,
        "ListTasks",
        json!({"contextId": "ctx-40", "status": "TASK_STATE_CANCELED"}),
    )
    .await;
    assert_eq!(
        canceled["result"]["tasks"][0]["id"],
        ids[2].as_str(),
        "{canceled}"
    );
    // No run is ever rejected: an empty page; a word that is no state: invalid params.
    let none = rpc(
        &served,
        "ListTasks",
        json!({"status": "TASK_STATE_REJECTED"}),
    )
    .await;
    assert_eq!(none["result"]["tasks"], json!([]), "{none}");
    for params in [
        json!({"pageToken": "20200101-000000-000-00000000"}),
        json!({"pageToken": "not a token"}),
        json!({"status": "DONE"}),
    ] {
        let refused = rpc(&served, "ListTasks", params.clone()).await;
        assert_eq!(refused["error"]["code"], -32602, "{params}: {refused}");
    }
    let refused = rpc(
        &served,
        "ListTasks",
        json!({"pageToken": "20200101-000000-000-00000000"}),
    )
    .await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is not one this server gave"),
        "{refused}"
    );
}

/// Issue #40: CancelTask of a task another node runs said only that it was working; it says
/// which node may cancel it.
#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_cancel_task_of_a_task_another_node_runs_says_so() {
    let Some((first, other)) = two_nodes().await else {
        return;
    };
    let sent = rpc(&first, "SendMessage", message("write hello", None)).await;
    let id = sent["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{sent}"))
        .to_owned();
    // The other node reads it from the database, which the first writes behind its runlog.
    for _ in 0..100 {
        let seen = rpc(&other, "GetTask", json!({"id": id})).await;
        if seen["result"]["status"]["state"] == "TASK_STATE_WORKING" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let refused = rpc(&other, "CancelTask", json!({"id": id})).await;
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
    let said = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        said.contains("cannot be canceled by this server: another node of this fabric runs it")
            && said.contains("send CancelTask to the node it was sent to"),
        "{said}"
    );
    let done = wait_ended(&first, &id).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
}
