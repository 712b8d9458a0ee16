//! The fabric as an MCP server, driven from outside the project by the official Python MCP
//! SDK (installed by scripts/install-test-deps.sh): over stdio (`fabric mcp`) and over
//! streamable HTTP (`fabric serve`, `/mcp`, same bearer token).

use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};
use std::path::PathBuf;

use super::fixture::Fixture;
use super::serve_fixture::{Options, Served, TOKEN};

/// The venv's python, or `None` with a message when the test deps are not installed.
fn python() -> Option<PathBuf> {
    fabric_test_support::test_deps().map(|dir| dir.join("venv/bin/python"))
}

fn script() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp/python_client.py")
        .display()
        .to_string()
}

/// The model's turns: the first run's, then the second one's, which the client subscribes to
/// (its first turn comes late, so the subscription is in place before the run changes).
fn turns() -> Vec<Turn> {
    turns_with_a_slow_second_run(1500)
}

/// Two runs' turns: one that writes hello.txt, and one whose first turn comes after
/// `delay_ms` (the MCP tasks test cancels it meanwhile).
pub(super) fn turns_with_a_slow_second_run(delay_ms: u64) -> Vec<Turn> {
    let mut slow = Turn::tool_call("write_file", json!({"path": "more.txt", "content": "More"}));
    slow.delay_ms = Some(delay_ms);
    vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "hello.txt", "content": "Hello"}),
        ),
        Turn::tool_call("finish_task", json!({"summary": "wrote hello.txt"})),
        slow,
        Turn::tool_call("finish_task", json!({"summary": "wrote more.txt"})),
    ]
}

async fn drive(python: &PathBuf, args: &[String]) -> Value {
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(90),
        tokio::process::Command::new(python)
            .arg(script())
            .args(args)
            .output(),
    )
    .await
    .expect("the Python client finished within 90 s")
    .expect("python ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "python client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("one JSON object")
}

fn check(seen: &Value) {
    // Issue #29: the server declares what it offers, and no list changes.
    let capabilities = &seen["capabilities"];
    assert_eq!(
        capabilities["resources"],
        json!({"subscribe": true}),
        "{capabilities}"
    );
    assert_eq!(capabilities["logging"], json!({}), "{capabilities}");
    assert_eq!(capabilities["completions"], json!({}), "{capabilities}");
    assert_eq!(capabilities["tools"], json!({}), "{capabilities}");
    issue_29_runs_are_resources(seen);
    issue_29_run_ids_and_paths_are_completed(seen);
    issue_29_a_subscribed_run_reports_its_changes_and_runs_are_logged(seen);
    // Issue #29: each specialist is a prompt taking the task; its text is the specialist's
    // system prompt, then the task.
    let prompts = seen["prompts"].as_array().expect("prompts");
    assert!(
        prompts
            .iter()
            .any(|p| p["name"] == "engineering" && p["arguments"] == json!([["task", true]])),
        "{prompts:?}"
    );
    let text = seen["prompt_text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("You are the engineering specialist")
            && text.ends_with("# Task\n\nFix the failing test"),
        "{text}"
    );
    assert_eq!(seen["prompt_role"], "user");
    assert!(
        seen["prompt_missing_task"]
            .as_str()
            .is_some_and(|m| m.contains("needs the argument `task`")),
        "{}",
        seen["prompt_missing_task"]
    );
    let names: Vec<&str> = seen["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        [
            "run_task",
            "list_specialists",
            "get_run",
            "search_runs",
            "run_stats",
            "prune_runs"
        ]
    );
    // The listed schema is the contract's schema.
    let run_task = fabric_mcp::server_tools().remove(0);
    assert_eq!(seen["tools"][0]["inputSchema"], run_task.input_schema);
    // Issue #29: every tool publishes the shape of its structured answer, and the SDK
    // checked each answer above against it (it refuses one that does not fit).
    for (listed, contract) in seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .zip(fabric_mcp::server_tools())
    {
        assert_eq!(
            Some(&listed["outputSchema"]),
            contract.output_schema.as_ref(),
            "{}",
            contract.name
        );
    }
    let ids: Vec<&str> = seen["specialists"]["specialists"]
        .as_array()
        .expect("specialists")
        .iter()
        .map(|s| s["id"].as_str().unwrap_or_default())
        .collect();
    assert!(ids.contains(&"engineering"), "{ids:?}");
    assert_eq!(seen["run"]["summary"], "wrote hello.txt");
    assert_eq!(seen["run"]["_meta"]["status"], "completed");
    let kinds: Vec<&str> = seen["progress_kinds"]
        .as_array()
        .expect("progress")
        .iter()
        .map(|k| k.as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds.first(), Some(&"run_start"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run_complete"), "{kinds:?}");
    assert!(kinds.contains(&"tool_call"), "{kinds:?}");
    assert_eq!(seen["get_run"]["status"], "completed");
    assert_eq!(seen["get_run"]["run_id"], seen["run"]["_meta"]["run_id"]);
    issue_28_answers_keep_their_shape(seen);
    // Issue #9: the run just made is found and counted through MCP.
    assert_eq!(seen["search"]["mode"], "text");
    assert_eq!(
        seen["search"]["hits"][0]["run_id"],
        seen["run"]["_meta"]["run_id"]
    );
    let write = seen["stats"]["rows"]
        .as_array()
        .expect("stats rows")
        .iter()
        .find(|r| r["key"] == "write_file")
        .cloned()
        .unwrap_or_default();
    assert_eq!(write["tool_calls"], 1, "{}", seen["stats"]);
    assert_eq!(seen["bad_search_is_error"], true);
    let bad_search = seen["bad_search_text"].as_str().unwrap_or_default();
    assert!(bad_search.contains("limit"), "{bad_search}");
    assert_eq!(seen["bad_is_error"], true);
    let bad = seen["bad_text"].as_str().unwrap_or_default();
    assert!(
        bad.contains("invalid arguments for `run_task`") && bad.contains("prompt"),
        "{bad}"
    );
}

/// Issue #29: the run just made, read back as resources: listed, its summary, its runlog,
/// its files and one file; a path out of its workspace refused, with the reason.
fn issue_29_runs_are_resources(seen: &Value) {
    let r = &seen["resources"];
    let run_id = seen["run"]["_meta"]["run_id"].as_str().unwrap_or_default();
    let uri = format!("fabric://runs/{run_id}");
    assert_eq!(r["listed"][0]["uri"], uri, "{}", r["listed"]);
    assert_eq!(r["listed"][0]["mime"], "application/json");
    assert_eq!(r["listed"][0]["description"], "completed: wrote hello.txt");
    // One page; after the run, none older; a cursor the server never gave is refused.
    assert_eq!(r["next_cursor"], Value::Null);
    assert_eq!(r["after_run"], json!([]));
    assert_eq!(r["bad_cursor"]["code"], -32602);
    let bad_cursor = r["bad_cursor"]["message"].as_str().unwrap_or_default();
    assert!(
        bad_cursor.contains("cursor `not a cursor` is not one this server gave"),
        "{bad_cursor}"
    );
    assert_eq!(
        r["templates"],
        json!([
            "fabric://runs/{run_id}",
            "fabric://runs/{run_id}/runlog",
            "fabric://runs/{run_id}/files",
            "fabric://runs/{run_id}/files/{+path}"
        ])
    );
    let summary: Value = serde_json::from_str(r["run"]["text"].as_str().unwrap_or("{}")).unwrap();
    assert_eq!(summary["id"], run_id);
    assert_eq!(summary["status"], "completed");
    assert_eq!(summary["summary"], "wrote hello.txt");
    let runlog = r["runlog"]["text"].as_str().unwrap_or_default();
    assert_eq!(r["runlog"]["mime"], "application/jsonl");
    let kinds: Vec<String> = runlog
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("run_start"));
    assert_eq!(kinds.last().map(String::as_str), Some("run_complete"));
    let files: Value = serde_json::from_str(r["files"]["text"].as_str().unwrap_or("{}")).unwrap();
    assert_eq!(files, json!({"files": ["hello.txt"], "truncated": false}));
    assert_eq!(r["file"]["text"], "Hello");
    assert_eq!(r["file"]["mime"], "text/plain");
    // Refused by the file tools' own confinement, with their words.
    let escape = r["escape"]["message"].as_str().unwrap_or_default();
    assert!(
        escape.contains("path `../runlog.jsonl` is outside the workspace"),
        "{}",
        r["escape"]
    );
    assert_eq!(r["escape"]["code"], -32602);
    let absolute = r["escape_absolute"]["message"].as_str().unwrap_or_default();
    assert!(
        absolute.contains("path `/etc/passwd` is outside the workspace"),
        "{absolute}"
    );
    let missing = r["missing_file"]["message"].as_str().unwrap_or_default();
    assert!(
        missing.contains("no file `none.txt` in the workspace"),
        "{missing}"
    );
    let missing_run = r["missing_run"]["message"].as_str().unwrap_or_default();
    assert!(
        missing_run.contains("no run `20200101T000000Z-none`"),
        "{missing_run}"
    );
    let unknown = r["unknown"]["message"].as_str().unwrap_or_default();
    assert!(unknown.contains("the fabric's resources are"), "{unknown}");
}

/// Issue #29: `completion/complete` offers the run's id and its workspace's paths; a
/// specialist's task is free text; what does not exist is refused, saying what does.
fn issue_29_run_ids_and_paths_are_completed(seen: &Value) {
    let c = &seen["completions"];
    let run_id = &seen["run"]["_meta"]["run_id"];
    assert_eq!(c["run_id"]["values"], json!([run_id]), "{c}");
    assert_eq!(c["run_id"]["has_more"], false);
    assert_eq!(
        c["path"],
        json!({"values": ["hello.txt"], "total": 1, "has_more": false})
    );
    let without = c["path_without_run"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        without.contains("send `run_id` in `context.arguments`"),
        "{without}"
    );
    assert_eq!(c["task"]["values"], json!([]));
    assert_eq!(c["unknown_prompt"]["code"], -32602);
    let unknown = c["unknown_prompt"]["message"].as_str().unwrap_or_default();
    assert!(unknown.contains("no prompt `nobody`"), "{unknown}");
    let argument = c["unknown_argument"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        argument.contains("`fabric://runs/{run_id}` has no argument `id`; it has `run_id`"),
        "{argument}"
    );
}

/// Issue #29: the second run, subscribed to while it went on, was reported updated; log
/// messages told of both ends of the runs the client asked them for.
fn issue_29_a_subscribed_run_reports_its_changes_and_runs_are_logged(seen: &Value) {
    let watched = seen["watched_run"].as_str().unwrap_or_default();
    let uri = format!("fabric://runs/{watched}");
    let updates = seen["updates"].as_array().expect("updates");
    assert!(!updates.is_empty(), "no update for {uri}");
    assert!(updates.iter().all(|u| u == &json!(uri)), "{updates:?}");
    assert_eq!(seen["logs_before_level"], json!([]));
    let logs = seen["logs"].as_array().expect("logs");
    let of_watched: Vec<(&str, &str)> = logs
        .iter()
        .filter(|l| l["data"]["run_id"] == watched)
        .map(|l| {
            (
                l["level"].as_str().unwrap_or_default(),
                l["data"]["event"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        of_watched,
        [("info", "run_started"), ("info", "run_ended")],
        "{logs:?}"
    );
    assert!(
        logs.iter().all(|l| l["logger"] == "agent-fabric"),
        "{logs:?}"
    );
}

/// Issue #28: `get_run`, `list_specialists`, `prune_runs` and the tools' error texts, pinned
/// before the MCP front end took the run service and typed errors, so that refactor is proved
/// to change nothing a client sees.
fn issue_28_answers_keep_their_shape(seen: &Value) {
    let run = &seen["get_run"];
    let keys: Vec<&str> = run
        .as_object()
        .expect("get_run is an object")
        .keys()
        .map(String::as_str)
        .collect();
    let expected = [
        "events",
        "prompt",
        "queued",
        "reason",
        "result",
        "resumable",
        "run_id",
        "status",
        "steps",
        "usage",
    ];
    assert_eq!(keys, expected, "{run}");
    let events = run["events"].as_array().expect("events");
    assert_eq!(events[0]["kind"], "run_start");
    let end = &events.last().expect("an end")["payload"];
    let projected = json!({
        "prompt": "Create hello.txt",
        "queued": false,
        "reason": end["reason"],
        "resumable": false,
        "result": end["result"],
        "run_id": seen["run"]["_meta"]["run_id"],
        "status": "completed",
        "steps": end["steps"],
        "usage": end["usage"],
    });
    let mut without_events = run.clone();
    without_events.as_object_mut().map(|o| o.remove("events"));
    assert_eq!(without_events, projected);
    assert_eq!(end["reason"], Value::Null);
    assert_eq!(end["steps"], 2);

    assert_eq!(seen["specialists"]["default"], "engineering");
    assert_eq!(
        seen["specialists"]["specialists"][0],
        json!({
            "delegates": [],
            "description": "Plans, implements, tests and reviews code and files in its workspace.",
            "id": "engineering",
            "mcp_servers": [],
            "tools": ["shell", "read_file", "write_file", "list_files"],
        })
    );
    assert_eq!(seen["pruned"], json!({"deleted": 0, "run_ids": []}));
    assert_eq!(
        seen["errors"],
        json!({
            "get_run {\"run_id\": \"20200101T000000Z-none\"}": [true, "no run `20200101T000000Z-none`; `fabric logs list` shows the runs that exist"],
            "get_run {\"run_id\": \"no such run\"}": [true, "invalid run id `no such run`: run ids hold only letters, digits, `-` and `_`"],
            "prune_runs {\"older_than\": \"soon\"}": [true, "parameter `older_than`: `soon` is not a duration; write a number and a unit: 90s, 30m, 12h, 7d or 2w"],
            "run_stats {\"by\": \"day\"}": [true, "parameter `by` must be specialist, model or tool; got `day`"],
            "run_stats {\"since\": \"yesterday\"}": [true, "parameter `since`: `yesterday` is not a date; write 2026-11-01, 2026-11-01T12:30:00Z, or a duration back from now such as 7d"],
        })
    );
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn a_python_mcp_client_runs_a_task_over_stdio() {
    over_stdio("stdio", "2025-11-25").await;
}

/// Issue #29: the SDK's default client (`Client(...)`, which negotiates 2026-07-28) refused
/// every tool list, `resultType` missing from it.
#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_29_the_python_sdks_default_client_runs_a_task_over_stdio() {
    over_stdio("stdio-default", "2026-07-28").await;
}

/// The Python client in `mode` over `fabric mcp`, expecting the revision `version`.
async fn over_stdio(mode: &str, version: &str) {
    let Some(python) = python() else { return };
    let fx = Fixture::new(turns()).await;
    let seen = drive(
        &python,
        &[
            mode.into(),
            env!("CARGO_BIN_EXE_fabric").into(),
            fx.config.display().to_string(),
            fx.workspace_root().display().to_string(),
        ],
    )
    .await;
    assert_eq!(seen["protocol_version"], version);
    check(&seen);
    let run_id = seen["run"]["_meta"]["run_id"].as_str().unwrap_or_default();
    let file = fx
        .workspace_root()
        .join("runs")
        .join(run_id)
        .join("workspace/hello.txt");
    assert_eq!(std::fs::read_to_string(file).unwrap_or_default(), "Hello");
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn a_python_mcp_client_runs_a_task_over_http_with_the_token() {
    over_http("http", "2025-11-25").await;
}

/// Issue #29: as over stdio, the SDK's default client on `/mcp`.
#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_29_the_python_sdks_default_client_runs_a_task_over_http() {
    over_http("http-default", "2026-07-28").await;
}

/// The Python client in `mode` over `/mcp` of `fabric serve`, expecting the revision
/// `version`; then `/mcp` without the token.
async fn over_http(mode: &str, version: &str) {
    let Some(python) = python() else { return };
    let (_served, url) = served_mcp().await;
    let seen = drive(&python, &[mode.into(), url.clone(), TOKEN.into()]).await;
    assert_eq!(seen["protocol_version"], version);
    check(&seen);
    // Without the token, /mcp is refused like every other protected endpoint.
    assert_eq!(initialize(&url, None, None).await, 401);
}

/// `fabric serve` with the token, and its `/mcp` URL.
async fn served_mcp() -> (Served, String) {
    let served = Served::with(
        Scenario::new(turns()),
        Options {
            auth: true,
            ..Options::default()
        },
    )
    .await;
    let url = format!("{}/mcp", served.base);
    (served, url)
}

/// The HTTP status of an `initialize` POST to `url`, with the token and `Origin` given.
async fn initialize(url: &str, token: Option<&str>, origin: Option<&str>) -> u16 {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    request.send().await.expect("request").status().as_u16()
}

/// Issue #29: a browser page from elsewhere is refused with 403 (the 2025-11-25 revision's
/// DNS-rebinding rule), even with the token; a page on this machine and a client that sends
/// no `Origin` are served.
#[tokio::test]
async fn issue_29_mcp_refuses_a_browser_origin_from_elsewhere() {
    let (_served, url) = served_mcp().await;
    let with = |origin| initialize(&url, Some(TOKEN), origin);
    assert_eq!(with(Some("http://evil.example")).await, 403);
    assert_eq!(with(Some("http://localhost:6274")).await, 200);
    assert_eq!(with(None).await, 200);
}
