//! Issue #29: `run_task` as an MCP task (the SEP-2663 tasks extension), driven over `/mcp`
//! of `fabric serve` by rmcp's own client (the official Rust SDK; the Python SDK 2.3.0 has
//! no tasks client): a client that declares tasks gets a task whose id is the run id, polls
//! it to its result or cancels it (which cancels the run); one that does not declare tasks
//! gets the blocking answer it always had, and cancelling that request cancels the run.

use std::time::Duration;

use fabric_test_support::{Scenario, Turn};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    DetailedTask, GetTaskParams, Implementation, ReadResourceRequestParams, ResourceContents,
    TaskPayload, TaskStatus,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

use super::mcp_server::turns_with_a_slow_second_run;
use super::serve_fixture::{Options, Served};

type Client = RunningService<RoleClient, ClientConfig>;

/// An rmcp client of `url`, declaring the tasks extension when `tasks`.
async fn connect(url: &str, tasks: bool) -> Client {
    let capabilities = if tasks {
        ClientCapabilities::builder().enable_tasks().build()
    } else {
        ClientCapabilities::default()
    };
    // The tasks extension belongs to 2026-07-28: `server/discover`, no `initialize`, and the
    // capabilities in every request's envelope.
    let modern = ClientLifecycleMode::Auto {
        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    };
    ClientConfig::new(capabilities, Implementation::new("issue-29-tasks", "1"))
        .serve_with_lifecycle(StreamableHttpClientTransport::from_uri(url), modern)
        .await
        .expect("connected to /mcp")
}

fn run_task(prompt: &str) -> CallToolRequestParams {
    let args = json!({"prompt": prompt, "specialist": "engineering"});
    CallToolRequestParams::new("run_task")
        .with_arguments(args.as_object().cloned().unwrap_or_default())
}

/// Polls task `id` until it has ended (30 s at most).
async fn ended(client: &Client, id: &str) -> DetailedTask {
    for _ in 0..300 {
        let task = client
            .get_task(GetTaskParams::new(id))
            .await
            .expect("tasks/get")
            .task;
        if task.status().is_terminal() {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("task {id} did not end within 30 s");
}

/// Two runs' turns, the second one's model call taking 30 s (it is cancelled before).
fn turns() -> Vec<Turn> {
    turns_with_a_slow_second_run(30_000)
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_29_run_task_is_a_task_for_a_client_that_declares_tasks() {
    let served = Served::with(Scenario::new(turns()), Options::default()).await;
    let client = connect(&served.url("/mcp"), true).await;
    let server = client
        .peer_info()
        .expect("the server's answer to initialize");
    assert!(
        server.capabilities.supports_tasks(),
        "{:?}",
        server.capabilities
    );

    let response = client
        .call_tool_once(run_task("Create hello.txt"))
        .await
        .expect("tools/call");
    let CallToolResponse::Task(created) = response else {
        panic!("run_task was not a task: {response:?}");
    };
    assert_eq!(created.task.status, TaskStatus::Working);
    let id = created.task.task_id.clone();
    // Other tools stay plain calls.
    let listed = client
        .call_tool_once(CallToolRequestParams::new("list_specialists"))
        .await
        .expect("tools/call");
    assert!(
        matches!(listed, CallToolResponse::Complete(_)),
        "{listed:?}"
    );

    let done = ended(&client, &id).await;
    let TaskPayload::Completed { result } = done.payload else {
        panic!("task {id} ended {:?}", done.task.status);
    };
    // The very answer a blocking run_task gives, the task's id being the run's.
    let answer = &result["structuredContent"];
    assert_eq!(answer["summary"], "wrote hello.txt", "{result:?}");
    assert_eq!(answer["_meta"]["run_id"], Value::String(id.clone()));
    assert_eq!(answer["_meta"]["status"], "completed");
    let file = served
        .fx
        .workspace_root()
        .join("runs")
        .join(&id)
        .join("workspace/hello.txt");
    assert_eq!(std::fs::read_to_string(file).unwrap_or_default(), "Hello");

    // Cancelling the task cancels the run, whose model call would take 30 s.
    let response = client
        .call_tool_once(run_task("Write slowly"))
        .await
        .expect("tools/call");
    let CallToolResponse::Task(slow) = response else {
        panic!("run_task was not a task: {response:?}");
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    client
        .cancel_task(CancelTaskParams::new(slow.task.task_id.clone()))
        .await
        .expect("tasks/cancel");
    let cancelled = ended(&client, &slow.task.task_id).await;
    assert_eq!(cancelled.status(), TaskStatus::Cancelled);

    let unknown = client
        .get_task(GetTaskParams::new("20200101T000000Z-none"))
        .await;
    let error = format!("{unknown:?}");
    assert!(error.contains("no task `20200101T000000Z-none`"), "{error}");
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_29_a_client_without_tasks_gets_run_task_answered_in_full() {
    let served = Served::with(Scenario::new(turns()), Options::default()).await;
    let client = connect(&served.url("/mcp"), false).await;
    let response = client
        .call_tool_once(run_task("Create hello.txt"))
        .await
        .expect("tools/call");
    let CallToolResponse::Complete(result) = response else {
        panic!("run_task was not answered in full: {response:?}");
    };
    let answer = result.structured_content.unwrap_or_default();
    assert_eq!(answer["summary"], "wrote hello.txt");
    // tasks/get needs the extension declared (-32021 in rmcp's words).
    let refused = client.get_task(GetTaskParams::new("any")).await;
    assert!(refused.is_err(), "{refused:?}");
    let _ = client.cancel().await;
}

/// The status in run `uri`'s summary, read as a resource.
async fn status_of(client: &Client, uri: &str) -> String {
    let read = client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .expect("resources/read");
    let Some(ResourceContents::TextResourceContents { text, .. }) = read.contents.first() else {
        panic!("{uri} is not text: {read:?}");
    };
    let summary: Value = serde_json::from_str(text).expect("a JSON summary");
    summary["status"].as_str().unwrap_or_default().to_owned()
}

/// The run's first model call takes 30 s; the client gives up on its `run_task` after half
/// a second (rmcp then sends `notifications/cancelled`), and the run ends `cancelled`.
#[tokio::test(flavor = "multi_thread")]
async fn issue_29_cancelling_a_run_task_request_cancels_its_run() {
    let slow = turns().remove(2);
    let served = Served::with(Scenario::new(vec![slow]), Options::default()).await;
    let client = connect(&served.url("/mcp"), false).await;
    let call = client.call_tool_once(run_task("Write slowly"));
    let gave_up = tokio::time::timeout(Duration::from_millis(500), call).await;
    assert!(
        gave_up.is_err(),
        "run_task answered within 0.5 s: {gave_up:?}"
    );
    let listed = client.list_resources(None).await.expect("resources/list");
    let uri = listed
        .resources
        .first()
        .expect("the run, listed")
        .uri
        .clone();
    for _ in 0..100 {
        if status_of(&client, &uri).await != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status_of(&client, &uri).await, "cancelled");
    let _ = client.cancel().await;
}
