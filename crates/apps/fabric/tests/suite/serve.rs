//! `fabric serve` end to end: a real server process, the scripted model server, a real
//! HTTP client and SSE reader (issue #4).

use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};
use std::time::Duration;

use super::fixture::kinds;
use super::serve_fixture::{Options, Served, TOKEN, assert_frames_match_runlog};

pub(crate) fn hello_turns() -> Vec<Turn> {
    vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "hello.txt", "content": "Hello World"}),
        ),
        Turn::tool_call(
            "finish_task",
            json!({"summary": "Created hello.txt", "artifacts": ["hello.txt"]}),
        ),
    ]
}

/// A run whose second model call takes `ms`, so it is in flight long enough to watch.
fn slow_turns(ms: u64) -> Vec<Turn> {
    let mut turns = hello_turns();
    turns[1].delay_ms = Some(ms);
    turns
}

fn body(prompt: &str) -> Value {
    json!({"prompt": prompt, "pack": "engineering"})
}

#[tokio::test(flavor = "multi_thread")]
async fn blocking_run_answers_like_fabric_run_json() {
    let s = Served::start(hello_turns()).await;
    let (code, result) = s.post_json("/run", body("Create hello.txt")).await;
    assert_eq!(code, 200, "{result}");
    assert_eq!(result["summary"], "Created hello.txt");
    assert_eq!(result["artifacts"], json!(["hello.txt"]));
    let meta = &result["_meta"];
    assert_eq!(meta["status"], "completed");
    assert_eq!(meta["specialist_ids"], json!(["engineering"]));
    assert_eq!(meta["model_key"], "test");
    assert_eq!(meta["steps"], 2);
    let run_id = meta["run_id"].as_str().unwrap();
    let runlog = s.runlog(run_id);
    assert_eq!(runlog.last().unwrap()["kind"], "run_complete");
    let workspace = std::path::PathBuf::from(meta["workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(workspace.join("hello.txt")).unwrap(),
        "Hello World"
    );

    // The same run, read back.
    let (code, view) = s.get_json(&format!("/runs/{run_id}")).await;
    assert_eq!(code, 200);
    // Issue #28: the whole view, pinned before it became a projection of `RunSummary`.
    let end = &runlog.last().unwrap()["payload"];
    assert_eq!(
        view,
        json!({
            "events": runlog.len(),
            "model_key": "test",
            "prompt": "Create hello.txt",
            "queued": false,
            "reason": null,
            "result": {"artifacts": ["hello.txt"], "summary": "Created hello.txt"},
            "resumable": false,
            "run_id": run_id,
            "specialist_ids": ["engineering"],
            "started_at": runlog[0]["ts"],
            "status": "completed",
            "steps": 2,
            "summary": "Created hello.txt",
            "usage": end["usage"],
        })
    );
    assert_eq!(view["status"], "completed");
    assert_eq!(view["result"]["summary"], "Created hello.txt");
    assert_eq!(view["prompt"], "Create hello.txt");
    assert_eq!(view["events"], runlog.len());
    let (code, events) = s.get_json(&format!("/runs/{run_id}/events")).await;
    assert_eq!(code, 200);
    assert_eq!(events["events"], Value::Array(runlog.clone()));
    let (_, after) = s.get_json(&format!("/runs/{run_id}/events?after=3")).await;
    assert_eq!(after["events"][0]["seq"], 4);
}

/// `_meta.runlog` is the runlog file's path, as the document and `fabric run --json` say:
/// the database store (the default) gave null (issue #14, found by schemathesis).
#[tokio::test(flavor = "multi_thread")]
async fn issue_14_meta_runlog_names_the_runlog_file() {
    let s = Served::start(hello_turns()).await;
    let (code, result) = s.post_json("/run", body("Create hello.txt")).await;
    assert_eq!(code, 200, "{result}");
    let meta = &result["_meta"];
    let run_id = meta["run_id"].as_str().unwrap();
    let runlog = meta["runlog"].as_str().unwrap_or_else(|| panic!("{meta}"));
    assert_eq!(
        std::path::Path::new(runlog),
        s.fx.workspace_root()
            .join("runs")
            .join(run_id)
            .join("runlog.jsonl")
    );
    assert!(std::path::Path::new(runlog).is_file(), "{runlog}");
}

#[tokio::test(flavor = "multi_thread")]
async fn stream_carries_every_runlog_event_and_ends_with_the_terminal_one() {
    let s = Served::start(hello_turns()).await;
    let response = s
        .post("/run/stream")
        .json(&body("Create hello.txt"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let frames = super::serve_fixture::SseReader::new(response).rest().await;
    let first = frames[0].json();
    assert_eq!(first["kind"], "run_start");
    let run_id = first["payload"]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        frames.last().unwrap().event.as_deref(),
        Some("run_complete")
    );
    assert_frames_match_runlog(&frames, &s.runlog(&run_id), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_run_streams_to_its_run_failed_event() {
    let s = Served::start(vec![Turn::error(400, "bad request from the model server")]).await;
    let response = s
        .post("/run/stream")
        .json(&body("fail"))
        .send()
        .await
        .unwrap();
    let frames = super::serve_fixture::SseReader::new(response).rest().await;
    let last = frames.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("run_failed"));
    assert_eq!(last.json()["payload"]["status"], "llm_error");
    // The blocking form reports the failure in `_meta`, like `fabric run --json`.
    let s = Served::start(vec![Turn::error(400, "bad request")]).await;
    let (code, result) = s.post_json("/run", body("fail")).await;
    assert_eq!(code, 200);
    assert_eq!(result["_meta"]["status"], "llm_error");
    assert!(result.get("summary").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_late_joiner_follows_a_live_run_and_resumes_after_last_event_id() {
    let s = Served::start(slow_turns(1500)).await;
    let run_id = s.start_run("Create hello.txt slowly").await;
    let status = s.wait_status(&run_id, "running").await;
    assert_eq!(status["live"], true);
    // Join late, resuming after seq 2 (run_start, recruitment, pack_start already seen).
    let mut reader = s.follow(&run_id, Some(2)).await;
    let first = reader.next().await.unwrap();
    assert_eq!(first.id.as_deref(), Some("3"));
    let (_, now) = s.get_json(&format!("/runs/{run_id}/status")).await;
    assert_eq!(now["status"], "running", "the follower joined a live run");
    let mut frames = vec![first];
    frames.extend(reader.rest().await);
    assert_eq!(
        frames.last().unwrap().event.as_deref(),
        Some("run_complete")
    );
    let runlog = s.runlog(&run_id);
    assert_frames_match_runlog(&frames, &runlog, 3);

    // The finished run replays from the runlog, with and without Last-Event-ID.
    let all = s.follow(&run_id, None).await.rest().await;
    assert_frames_match_runlog(&all, &runlog, 0);
    let tail = s.follow(&run_id, Some(8)).await.rest().await;
    assert_frames_match_runlog(&tail, &runlog, 9);
    s.wait_status(&run_id, "completed").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_goes_away_leaves_its_run_going() {
    let s = Served::start(slow_turns(800)).await;
    let response = s
        .post("/run/stream")
        .json(&body("Create hello.txt"))
        .send()
        .await
        .unwrap();
    let mut reader = super::serve_fixture::SseReader::new(response);
    let first = reader.next().await.unwrap().json();
    let run_id = first["payload"]["run_id"].as_str().unwrap().to_owned();
    drop(reader);
    s.wait_status(&run_id, "completed").await;
    assert_eq!(s.runlog(&run_id).last().unwrap()["kind"], "run_complete");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_stops_a_run_mid_model_call_and_records_it() {
    let s = Served::start(slow_turns(20_000)).await;
    let run_id = s.start_run("Create hello.txt").await;
    let mut reader = s.follow(&run_id, None).await;
    // Wait for the second model call to be in flight.
    let mut seen = Vec::new();
    while let Some(frame) = reader.next().await {
        let kind = frame.event.clone().unwrap();
        seen.push(frame);
        if kind == "llm_request"
            && seen
                .iter()
                .filter(|f| f.event.as_deref() == Some("llm_request"))
                .count()
                == 2
        {
            break;
        }
    }
    let started = std::time::Instant::now();
    let response = s
        .post(&format!("/runs/{run_id}/cancel"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let rest = reader.rest().await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cancel was prompt"
    );
    let last = rest.last().unwrap().json();
    assert_eq!(last["kind"], "run_failed");
    assert_eq!(last["payload"]["status"], "cancelled");
    let status = s.wait_status(&run_id, "cancelled").await;
    assert_eq!(status["live"], false);
    let runlog = s.runlog(&run_id);
    assert_eq!(runlog.last().unwrap()["payload"]["status"], "cancelled");
    // A run that ended cannot be cancelled again.
    let response = s
        .post(&format!("/runs/{run_id}/cancel"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 409);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "run_not_running");
}

/// The processes whose command line is exactly `argv`.
fn processes_running(argv: &[&str]) -> Vec<u32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_stops_a_run_mid_tool_and_kills_the_command() {
    // A long command the shell tool may run; its odd argument names it among processes.
    let argv = ["sleep", "987.654"];
    let s = Served::with(
        Scenario::new(vec![
            Turn::tool_call("shell", json!({"cmd": argv})),
            Turn::tool_call("finish_task", json!({"summary": "never reached"})),
        ]),
        Options {
            config: "shell:\n  allowed_commands: [sleep]\n",
            ..Options::default()
        },
    )
    .await;
    let run_id = s.start_run("Wait a long time").await;
    let mut reader = s.follow(&run_id, None).await;
    while let Some(frame) = reader.next().await {
        if frame.event.as_deref() == Some("tool_call") {
            break;
        }
    }
    // The command is running.
    let mut running = Vec::new();
    for _ in 0..100 {
        running = processes_running(&argv);
        if !running.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!running.is_empty(), "`sleep 987.654` started");
    s.cancel_promptly(&run_id, &mut reader).await;
    // The command and its process group are gone.
    let mut left = running.clone();
    for _ in 0..40 {
        left = processes_running(&argv);
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(left.is_empty(), "still running: {left:?}");
    for pid in running {
        let alive = std::process::Command::new("kill")
            .args(["-0", "--", &format!("-{pid}")])
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(!alive, "process group {pid} is gone");
    }
    // One model call: the run never got to its second turn.
    assert_eq!(s.fx.server.chat_request_count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_may_narrow_the_servers_permissions_but_not_widen_them() {
    let s = Served::with(
        Scenario::new(hello_turns()),
        Options {
            config: "max_steps: 10\nnetwork_allowed: false\n",
            ..Options::default()
        },
    )
    .await;
    let (code, error) = s
        .post_json(
            "/runs",
            json!({"prompt": "x", "pack": "engineering", "network_allowed": true}),
        )
        .await;
    assert_eq!(code, 403, "{error}");
    assert_eq!(error["error"]["code"], "not_permitted");
    assert_eq!(
        error["error"]["message"],
        "`network_allowed: true` is refused: this server's config has `network_allowed: false`, and a request may only narrow the server's permissions"
    );
    let (code, error) = s
        .post_json("/run", json!({"prompt": "x", "max_steps": 11}))
        .await;
    assert_eq!(code, 403, "{error}");
    assert_eq!(
        error["error"]["message"],
        "`max_steps` 11 is more than this server allows (10, its config's `max_steps`); ask for at most 10 or leave it out"
    );
    // Narrowing is fine.
    let (code, result) = s
        .post_json(
            "/run",
            json!({"prompt": "Create hello.txt", "pack": "engineering", "network_allowed": false, "max_steps": 2}),
        )
        .await;
    assert_eq!(code, 200, "{result}");
    assert_eq!(result["_meta"]["status"], "completed");
    assert_eq!(s.fx.server.chat_request_count(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_server_that_cannot_be_started_is_a_503_with_the_reason() {
    let s = Served::with(
        Scenario::new(vec![]),
        Options {
            rewrite: Some(|url, yaml| {
                // The model key points at a local Ollama that is down, and the command that
                // would start it does not exist.
                yaml.replace(url, "http://127.0.0.1:9")
                    .replace("backend: openai", "backend: ollama")
                    + "local_llm_ensure_available: true\nlocal_llm_start_cmd: [fabric-test-no-such-server]\n"
            }),
            ..Options::default()
        },
    )
    .await;
    let (code, error) = s
        .post_json("/runs", json!({"prompt": "x", "pack": "engineering"}))
        .await;
    assert_eq!(code, 503, "{error}");
    assert_eq!(error["error"]["code"], "model_unavailable");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("cannot start `fabric-test-no-such-server` (local_llm_start_cmd): ")
            && message.contains("install it, start the model server yourself"),
        "{message}"
    );
    let (_, health) = s.get_json("/health").await;
    assert_eq!(health["runs_in_flight"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn auth_guards_everything_but_health_and_the_openapi_document() {
    let s = Served::with(
        Scenario::new(hello_turns()),
        Options {
            auth: true,
            ..Options::default()
        },
    )
    .await;
    let anon = reqwest::Client::new();
    assert_eq!(
        anon.get(s.url("/health")).send().await.unwrap().status(),
        200
    );
    assert_eq!(
        anon.get(s.url("/openapi.json"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    for token in [None, Some("wrong"), Some("test-token-012345678")] {
        let mut request = anon.post(s.url("/runs")).json(&body("x"));
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{token:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], "unauthorized");
    }
    // Auth comes before reading the body: a bad body without a token is still a 401.
    let response = anon
        .post(s.url("/run"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let response = anon.get(s.url("/runs")).send().await.unwrap();
    assert_eq!(response.status(), 401);
    // With the token, it works.
    let response = anon
        .get(s.url("/runs"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (code, result) = s.post_json("/run", body("Create hello.txt")).await;
    assert_eq!(code, 200, "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_over_the_in_flight_limit_get_429_with_retry_after() {
    let s = Served::with(
        Scenario::new(slow_turns(3000)),
        Options {
            config: "server:\n  max_runs_in_flight: 1\n",
            ..Options::default()
        },
    )
    .await;
    let run_id = s.start_run("slow").await;
    let response = s
        .post("/runs")
        .json(&body("one more"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "2");
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "too_many_runs");
    // A bad request is still answered as one when the server is full.
    let (code, error) = s.post_json("/runs", json!({"prompt": ""})).await;
    assert_eq!(code, 422, "{error}");
    let (_, health) = s.get_json("/health").await;
    assert_eq!(health["runs_in_flight"], 1);
    s.wait_status(&run_id, "completed").await;
}

/// Method, path, content type, body, expected status and error code.
type BadCase = (
    &'static str,
    &'static str,
    Option<&'static str>,
    String,
    u16,
    &'static str,
);

#[tokio::test(flavor = "multi_thread")]
async fn every_bad_input_is_a_4xx_with_a_stable_code() {
    let s = Served::with(
        Scenario::new(vec![]),
        Options {
            config: "server:\n  max_body_bytes: 2048\n",
            ..Options::default()
        },
    )
    .await;
    let json_type = "application/json";
    let cases: Vec<BadCase> = vec![
        (
            "POST",
            "/run",
            Some(json_type),
            "{not json".into(),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/run",
            Some(json_type),
            "".into(),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/run",
            Some(json_type),
            r#"{"prompt": "x"} trailing"#.into(),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/run",
            Some(json_type),
            r#"{"prompt": 42}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/run",
            Some(json_type),
            "[]".into(),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/run",
            Some(json_type),
            "null".into(),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/run",
            Some(json_type),
            "{}".into(),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/runs",
            Some(json_type),
            r#"{"prompt": "x", "colour": "red"}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/runs",
            Some(json_type),
            r#"{"prompt": "   "}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/runs",
            Some(json_type),
            r#"{"prompt": "x", "max_steps": 0}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/runs",
            Some(json_type),
            r#"{"prompt": "x", "max_steps": -1}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/runs",
            Some(json_type),
            r#"{"prompt": "x", "max_steps": 5000}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/runs",
            Some(json_type),
            r#"{"prompt": "x", "network_allowed": "yes"}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/run/stream",
            Some(json_type),
            r#"{"prompt": "x", "pack": "nobody"}"#.into(),
            422,
            "unknown_specialist",
        ),
        (
            "POST",
            "/run",
            Some(json_type),
            r#"{"prompt": "x", "model_key": "huge"}"#.into(),
            422,
            "unknown_model_key",
        ),
        (
            "POST",
            "/run",
            Some(json_type),
            r#"{"prompt": "x", "pack": ""}"#.into(),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/run",
            Some("text/plain"),
            r#"{"prompt": "x"}"#.into(),
            415,
            "unsupported_media_type",
        ),
        (
            "POST",
            "/run",
            None,
            r#"{"prompt": "x"}"#.into(),
            415,
            "unsupported_media_type",
        ),
        (
            "POST",
            "/run",
            Some(json_type),
            format!(r#"{{"prompt": "{}"}}"#, "x".repeat(10_000)),
            413,
            "payload_too_large",
        ),
        (
            "GET",
            "/runs/..%2Fx",
            None,
            String::new(),
            400,
            "invalid_run_id",
        ),
        (
            "GET",
            "/runs/a%20b/status",
            None,
            String::new(),
            400,
            "invalid_run_id",
        ),
        (
            "POST",
            "/runs/..%2F..%2Fetc/cancel",
            None,
            String::new(),
            400,
            "invalid_run_id",
        ),
        (
            "GET",
            "/runs/20200101-000000-000-00000000",
            None,
            String::new(),
            404,
            "run_not_found",
        ),
        (
            "GET",
            "/runs/20200101-000000-000-00000000/status",
            None,
            String::new(),
            404,
            "run_not_found",
        ),
        (
            "GET",
            "/runs/20200101-000000-000-00000000/events",
            None,
            String::new(),
            404,
            "run_not_found",
        ),
        (
            "POST",
            "/runs/20200101-000000-000-00000000/cancel",
            None,
            String::new(),
            404,
            "run_not_found",
        ),
        (
            "GET",
            "/runs?limit=0",
            None,
            String::new(),
            400,
            "invalid_parameter",
        ),
        (
            "GET",
            "/runs?limit=lots",
            None,
            String::new(),
            400,
            "invalid_parameter",
        ),
        (
            "GET",
            "/runs?status=sleepy",
            None,
            String::new(),
            400,
            "invalid_parameter",
        ),
        (
            "GET",
            "/runs?before=..%2Fx",
            None,
            String::new(),
            400,
            "invalid_run_id",
        ),
        (
            "GET",
            "/runs?colour=red",
            None,
            String::new(),
            400,
            "invalid_parameter",
        ),
        ("GET", "/nowhere", None, String::new(), 404, "not_found"),
        (
            "DELETE",
            "/runs",
            None,
            String::new(),
            405,
            "method_not_allowed",
        ),
        (
            "GET",
            "/run",
            None,
            String::new(),
            405,
            "method_not_allowed",
        ),
    ];
    for (method, path, content_type, text, status, code) in cases {
        let mut request = s
            .http
            .request(method.parse().unwrap(), s.url(path))
            .body(text.clone());
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        let response = request.send().await.unwrap();
        let got = response.status().as_u16();
        let error: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(got, status, "{method} {path} {text:.60}: {error}");
        assert_eq!(
            error["error"]["code"], code,
            "{method} {path} {text:.60}: {error}"
        );
        assert!(
            error["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    // A bad Last-Event-ID on a real run.
    let s = Served::start(hello_turns()).await;
    let (_, result) = s.post_json("/run", body("Create hello.txt")).await;
    let run_id = result["_meta"]["run_id"].as_str().unwrap();
    let response = s
        .get(&format!("/runs/{run_id}/events"))
        .header("accept", "text/event-stream")
        .header("last-event-id", "seven")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    // No model calls were made for any bad request.
    assert_eq!(s.fx.server.chat_request_count(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_are_listed_newest_first_a_page_at_a_time() {
    let mut turns = hello_turns();
    turns.extend(hello_turns());
    turns.push(Turn::error(400, "no"));
    let s = Served::start(turns).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (_, result) = s.post_json("/run", body("Create hello.txt")).await;
        ids.push(result["_meta"]["run_id"].as_str().unwrap().to_owned());
    }
    let (code, page) = s.get_json("/runs?limit=2").await;
    assert_eq!(code, 200);
    let listed: Vec<&str> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec![ids[2].as_str(), ids[1].as_str()]);
    let next = page["next_before"].as_str().unwrap();
    let (_, page2) = s.get_json(&format!("/runs?limit=2&before={next}")).await;
    assert_eq!(page2["runs"][0]["run_id"], ids[0].as_str());
    // Issue #26: each run says who started it.
    assert_eq!(page2["runs"][0]["origin"], "user", "{page2}");
    assert!(page2["next_before"].is_null());
    let (_, failed) = s.get_json("/runs?status=llm_error").await;
    assert_eq!(failed["runs"].as_array().unwrap().len(), 1);
    assert_eq!(failed["runs"][0]["run_id"], ids[2].as_str());
    let (_, completed) = s.get_json("/runs?status=completed").await;
    assert_eq!(completed["runs"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue9_runs_are_searched_counted_and_pruned_over_http() {
    let mut turns = hello_turns();
    turns.push(Turn::error(400, "no"));
    let s = Served::start(turns).await;
    let (_, done) = s
        .post_json("/run", body("Create hello.txt about zebras"))
        .await;
    let done_id = done["_meta"]["run_id"].as_str().unwrap().to_owned();
    let (_, failed) = s.post_json("/run", body("Something about giraffes")).await;
    assert_eq!(failed["_meta"]["status"], "llm_error");

    let (code, found) = s.get_json("/runs/search?q=zebras").await;
    assert_eq!(code, 200, "{found}");
    assert_eq!(found["mode"], "text");
    assert_eq!(found["hits"][0]["run"]["run_id"], done_id.as_str());
    assert_eq!(found["hits"][0]["run"]["status"], "completed");
    assert!(found["hits"][0]["score"].as_f64().unwrap() > 0.0);
    let (_, filtered) = s.get_json("/runs/search?q=giraffes&status=completed").await;
    assert!(
        filtered["hits"].as_array().unwrap().is_empty(),
        "{filtered}"
    );
    for (query, code) in [
        ("/runs/search", 400),
        ("/runs/search?q=x&limit=0", 400),
        ("/runs/search?q=x&status=nope", 400),
        ("/runs/search?q=x&since=yesterday", 400),
        ("/runs/search?q=x&semantic=true", 422),
        ("/stats?by=colour", 400),
    ] {
        let (got, body) = s.get_json(query).await;
        assert_eq!(got, code, "{query}: {body}");
        assert!(body["error"]["code"].is_string(), "{query}: {body}");
    }

    let (code, stats) = s.get_json("/stats").await;
    assert_eq!(code, 200);
    assert_eq!(stats["by"], "specialist");
    assert_eq!(stats["rows"][0]["key"], "engineering");
    assert_eq!(stats["rows"][0]["runs"], 2);
    assert_eq!(stats["rows"][0]["success_rate"], 0.5);
    let (_, by_model) = s.get_json("/stats?by=model&since=1d").await;
    assert_eq!(by_model["rows"][0]["key"], "test", "{by_model}");

    let (code, kept) = s
        .post_json("/runs/prune", json!({"older_than": "1d"}))
        .await;
    assert_eq!((code, kept["deleted"].as_u64()), (200, Some(0)), "{kept}");
    let (code, bad) = s
        .post_json("/runs/prune", json!({"older_than": "soon"}))
        .await;
    assert_eq!(code, 422, "{bad}");
    let (code, pruned) = s
        .post_json("/runs/prune", json!({"older_than": "0s"}))
        .await;
    assert_eq!(
        (code, pruned["deleted"].as_u64()),
        (200, Some(2)),
        "{pruned}"
    );
    let (_, page) = s.get_json("/runs").await;
    assert!(page["runs"].as_array().unwrap().is_empty(), "{page}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_openapi_document_covers_every_endpoint() {
    let s = Served::start(vec![]).await;
    let (code, doc) = s.get_json("/openapi.json").await;
    assert_eq!(code, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for (path, method) in [
        ("/health", "get"),
        ("/run", "post"),
        ("/run/stream", "post"),
        ("/runs", "get"),
        ("/runs", "post"),
        ("/runs/{id}", "get"),
        ("/runs/{id}/status", "get"),
        ("/runs/{id}/events", "get"),
        ("/runs/{id}/cancel", "post"),
        ("/runs/search", "get"),
        ("/runs/prune", "post"),
        ("/stats", "get"),
        ("/openapi.json", "get"),
    ] {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is documented");
        if path != "/health" && path != "/openapi.json" {
            assert!(
                op["responses"]["401"].is_object(),
                "{method} {path} documents 401"
            );
        }
    }
    let schemas = &doc["components"]["schemas"];
    for name in ["RunRequest", "ErrorBody", "EventDoc", "RunView", "RunPage"] {
        assert!(schemas[name].is_object(), "{name}");
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_loopback_address_without_a_token_is_refused() {
    let fx = super::fixture::Fixture::new(vec![]).await;
    let run = fx
        .fabric_with(
            &[
                "serve",
                "--host",
                "0.0.0.0",
                "--port",
                "0",
                "--token-env",
                "FABRIC_TEST_NO_TOKEN",
            ],
            &[],
        )
        .await;
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert!(run.stderr.contains("without a token"), "{}", run.stderr);
    assert!(
        run.stderr.contains("FABRIC_TEST_NO_TOKEN"),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_cancels_runs_in_flight_records_them_and_exits_0() {
    let mut s = Served::start(slow_turns(30_000)).await;
    let run_id = s.start_run("slow").await;
    let mut reader = s.follow(&run_id, None).await;
    while let Some(frame) = reader.next().await {
        if frame.json()["seq"] == 5 {
            break;
        }
    }
    let pid = s.child.id().unwrap();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(Duration::from_secs(20), s.child.wait())
        .await
        .expect("the server stopped within 20 s")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let rest = reader.rest().await;
    assert_eq!(rest.last().unwrap().event.as_deref(), Some("run_failed"));
    let runlog = s.runlog(&run_id);
    assert_eq!(runlog.last().unwrap()["payload"]["status"], "cancelled");
    assert!(kinds(&runlog).contains(&"llm_request"));
}
