//! Starting and ending runs on a real socket with in-process fakes: a run that panics, the
//! in-flight limit around a slow preparation, a model that cannot be used, a slow SSE client,
//! a crashed run, and the order of shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fabric_api_http::{ApiConfig, ApiError, AppState, serve_with_grace};
use fabric_core::RunStore;
use fabric_core::service::{RunService, ServiceConfig, ServiceError};
use fabric_domain::{EventKind, RunId, RunStatus};
use fabric_fakes::{FakePreparer, MemStore, RunScript, run_event};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// A stored run whose runlog has only `run_start`: its process died.
fn crashed(store: &MemStore) -> RunId {
    let id = RunId::parse("20200101-000000-000-0000dead").unwrap();
    store.insert(id.clone(), vec![run_event(&id, 0, EventKind::RunStart)]);
    id
}

struct Server {
    base: String,
    http: reqwest::Client,
    store: Arc<MemStore>,
    state: AppState,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), ApiError>>,
}

impl Server {
    async fn start(launcher: FakePreparer, config: ApiConfig) -> Self {
        Self::start_limited(launcher, config, 64).await
    }

    async fn start_limited(launcher: FakePreparer, config: ApiConfig, limit: usize) -> Self {
        let store = Arc::new(MemStore::per_run());
        let service = RunService::new(
            Arc::clone(&store) as Arc<dyn RunStore>,
            Arc::new(launcher),
            ServiceConfig {
                max_runs_in_flight: Some(limit),
                ..ServiceConfig::default()
            },
        );
        let state = AppState::new(service, config);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve_with_grace(
            listener,
            state.clone(),
            async move {
                let _ = stopped.await;
            },
            Duration::from_secs(5),
        ));
        Self {
            base,
            http: reqwest::Client::new(),
            store,
            state,
            stop: Some(stop),
            task,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.http.get(self.url(path)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn wait_status(&self, id: &str, expected: &str) {
        for _ in 0..200 {
            let (_, body) = self.get(&format!("/runs/{id}/status")).await;
            if body["status"] == expected {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("run {id} never reached {expected}");
    }

    /// Signals shutdown and waits for `serve` to return.
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(15), self.task)
            .await
            .expect("shutdown completed")
            .unwrap()
            .unwrap();
    }
}

/// Reads a whole SSE body and returns the `event:` names.
async fn sse_kinds(response: reqwest::Response) -> Vec<String> {
    let text = tokio::time::timeout(Duration::from_secs(20), response.text())
        .await
        .expect("the stream ended")
        .unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_panicking_run_ends_failed_everywhere_and_shutdown_completes() {
    let s = Server::start(
        FakePreparer::running(RunScript::Panic),
        ApiConfig::default(),
    )
    .await;
    // Streaming: the stream ends with a terminal run_failed.
    let response = s
        .http
        .post(s.url("/run/stream"))
        .json(&json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let kinds = sse_kinds(response).await;
    assert_eq!(kinds, vec!["run_start", "run_failed"]);
    // Background: the status is `failed`, not stuck `running`, and the runlog records it.
    let (code, accepted) = s.post("/runs", json!({"prompt": "x"})).await;
    assert_eq!(code, 202, "{accepted}");
    let id = accepted["run_id"].as_str().unwrap().to_owned();
    s.wait_status(&id, "failed").await;
    let (_, status) = s.get(&format!("/runs/{id}/status")).await;
    assert_eq!(status["live"], false);
    let stored = s.store.events_of(&RunId::parse(&id).unwrap());
    let last = stored.last().unwrap();
    assert_eq!(last.kind(), EventKind::RunFailed);
    assert_eq!(last.seq, 1);
    assert_eq!(last.terminal_status(), Some(RunStatus::Failed));
    assert_eq!(
        last.end_reason(),
        Some("the run panicked: a bug in the run")
    );
    // Blocking: a 500 that names the run.
    let (code, error) = s.post("/run", json!({"prompt": "x"})).await;
    assert_eq!(code, 500, "{error}");
    assert_eq!(error["error"]["code"], "internal");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("run `2026") && message.contains("failed inside the fabric"),
        "{message}"
    );
    let (_, health) = s.get("/health").await;
    assert_eq!(health["runs_in_flight"], 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_limit_counts_preparation_and_answers_429_at_once() {
    let gate = Arc::new(Notify::new());
    let launcher =
        FakePreparer::running(RunScript::Events { n: 1, size: 10 }).gated(Arc::clone(&gate));
    let s = Arc::new(Server::start_limited(launcher, ApiConfig::default(), 1).await);
    let first = {
        let s = Arc::clone(&s);
        tokio::spawn(async move { s.post("/runs", json!({"prompt": "slow to prepare"})).await })
    };
    // The first request is preparing (waiting on the gate) and holds the only slot.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let asked = Instant::now();
    let (code, error) = s.post("/runs", json!({"prompt": "one more"})).await;
    assert_eq!(code, 429, "{error}");
    assert_eq!(error["error"]["code"], "too_many_runs");
    assert!(asked.elapsed() < Duration::from_secs(2), "answered at once");
    // A bad request is still answered as one while the server is full.
    let (code, error) = s
        .post("/runs", json!({"prompt": "x", "pack": "nobody"}))
        .await;
    assert_eq!(
        (code, error["error"]["code"].as_str()),
        (422, Some("unknown_specialist"))
    );
    gate.notify_one();
    let (code, accepted) = first.await.unwrap();
    assert_eq!(code, 202, "{accepted}");
    s.wait_status(accepted["run_id"].as_str().unwrap(), "completed")
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_abandons_a_preparation_in_flight() {
    let gate = Arc::new(Notify::new());
    let launcher = FakePreparer::running(RunScript::Events { n: 1, size: 10 }).gated(gate);
    let s = Server::start(launcher, ApiConfig::default()).await;
    let url = s.url("/runs");
    let pending = tokio::spawn(async move {
        let response = reqwest::Client::new()
            .post(url)
            .json(&json!({"prompt": "never prepared"}))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json::<Value>().await.unwrap())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.stop().await;
    let (code, error) = pending.await.unwrap();
    assert_eq!(
        (code, error["error"]["code"].as_str()),
        (503, Some("shutting_down"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_that_cannot_be_used_is_a_503_with_the_reason() {
    let launcher = FakePreparer::failing(|_| {
        ServiceError::ModelUnavailable(fabric_core::ports::SetupError::ModelUnavailable(
            "cannot start `ollama serve` (local_llm_start_cmd)".into(),
        ))
    });
    let s = Server::start(launcher, ApiConfig::default()).await;
    let (code, error) = s.post("/run", json!({"prompt": "x"})).await;
    assert_eq!(code, 503, "{error}");
    assert_eq!(error["error"]["code"], "model_unavailable");
    assert_eq!(
        error["error"]["message"],
        "cannot start `ollama serve` (local_llm_start_cmd)"
    );
    let (_, health) = s.get("/health").await;
    assert_eq!(health["runs_in_flight"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_client_loses_nothing_and_does_not_hold_the_run_back() {
    // About 8 MB of events: far more than the socket buffers hold.
    let (n, size) = (2000, 4096);
    let s = Server::start(
        FakePreparer::running(RunScript::Events { n, size }),
        ApiConfig::default(),
    )
    .await;
    let response = s
        .http
        .post(s.url("/run/stream"))
        .json(&json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // The client reads nothing until the run has ended: the run is not held back.
    for _ in 0..400 {
        if s.state.service().registry().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        s.state.service().registry().is_empty(),
        "the run ended while its client read nothing"
    );
    // Then every event arrives, in order.
    let text = tokio::time::timeout(Duration::from_secs(30), response.text())
        .await
        .unwrap()
        .unwrap();
    let ids: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|id| id.parse().unwrap())
        .collect();
    assert_eq!(ids, (0..=n + 1).collect::<Vec<_>>());
    assert!(text.contains("event: run_complete"));
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_crashed_run_says_this_server_is_not_running_it() {
    let s = Server::start(
        FakePreparer::running(RunScript::Panic),
        ApiConfig::default(),
    )
    .await;
    let id = crashed(&s.store);
    let (code, error) = s.post(&format!("/runs/{id}/cancel"), Value::Null).await;
    assert_eq!(code, 409, "{error}");
    assert_eq!(error["error"]["code"], "run_not_running");
    assert_eq!(
        error["error"]["message"],
        format!(
            "run `{id}` is not running in this server: its runlog has no terminal event (the process that ran it stopped without recording its end, or another process is running it), so it cannot be cancelled here"
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_stops_accepting_before_the_runs_have_drained() {
    let s = Server::start(
        FakePreparer::running(RunScript::Stubborn(Duration::from_secs(2))),
        ApiConfig::default(),
    )
    .await;
    let (code, accepted) = s.post("/runs", json!({"prompt": "x"})).await;
    assert_eq!(code, 202, "{accepted}");
    let addr = s.base.trim_start_matches("http://").to_owned();
    let state = s.state.clone();
    let stopping = tokio::spawn(s.stop());
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The run ignores cancellation for 2 s, so it is still in flight...
    assert_eq!(state.service().registry().len(), 1);
    // ...yet the server no longer accepts connections (or closes them unanswered).
    let answered = match TcpStream::connect(&addr).await {
        Err(_) => false,
        Ok(mut stream) => {
            let _ = stream
                .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
                .await;
            let mut buf = [0u8; 64];
            matches!(
                tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await,
                Ok(Ok(n)) if n > 0
            )
        }
    };
    assert!(!answered, "a new connection was served during shutdown");
    stopping.await.unwrap();
    assert!(state.service().registry().is_empty());
}

/// The server speaks HTTP/1.1 on its own connection loop (ADR-128): a plain request is
/// answered, and a client opening with HTTP/2's preface has its connection closed rather
/// than answered in HTTP/2.
#[tokio::test(flavor = "multi_thread")]
async fn issue_45_the_api_answers_http_1_1_and_closes_an_http_2_preface() {
    let s = Server::start(
        FakePreparer::running(RunScript::Stubborn(Duration::from_secs(2))),
        ApiConfig::default(),
    )
    .await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    let exchange = |request: &'static [u8]| {
        let addr = addr.clone();
        async move {
            let mut stream = TcpStream::connect(&addr).await.unwrap();
            stream.write_all(request).await.unwrap();
            let mut answer = Vec::new();
            // Read until the server closes the connection.
            tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
                .await
                .expect("the server closed the connection within 5 s")
                .ok();
            String::from_utf8_lossy(&answer).into_owned()
        }
    };
    let answer =
        exchange(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let answer = exchange(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
    // Whatever HTTP/1 says before closing, never an HTTP/2 SETTINGS frame (type 4 at byte 3).
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 "),
        "{answer:?}"
    );
    s.stop().await;
}

/// Writes `pieces` to a new connection to `addr`, a moment apart, and reads until the server
/// closes it.
async fn exchange_in_pieces(addr: &str, pieces: &[&[u8]]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    for piece in pieces {
        stream.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer))
        .await
        .expect("the server closed the connection within 20 s")
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// A head's field, by its lowercase name.
fn field<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    let head = answer.split("\r\n\r\n").next().unwrap_or("");
    head.lines()
        .filter_map(|l| l.split_once(": "))
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

/// A blocking `POST /run` is answered without hyper's connection (ADR-129): with its length,
/// a date, and the connection closed after it, even when its head and body come in pieces.
#[tokio::test(flavor = "multi_thread")]
async fn issue_45_a_blocking_run_is_answered_with_its_length_and_its_connection_closed() {
    let s = Server::start(
        FakePreparer::running(RunScript::Complete),
        ApiConfig::default(),
    )
    .await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    let body = br#"{"prompt": "x"}"#;
    let head = format!(
        "POST /run HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let (first, rest) = head.as_bytes().split_at(20);
    let answer = exchange_in_pieces(&addr, &[first, rest, &body[..4], &body[4..]]).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert_eq!(field(&answer, "connection"), Some("close"), "{answer}");
    assert_eq!(field(&answer, "content-type"), Some("application/json"));
    assert!(
        field(&answer, "date").is_some_and(|d| d.ends_with(" GMT")),
        "{answer}"
    );
    let (_, json) = answer.split_once("\r\n\r\n").unwrap();
    assert_eq!(
        field(&answer, "content-length"),
        Some(json.len().to_string().as_str())
    );
    let result: Value = serde_json::from_str(json).unwrap();
    assert_eq!(result["_meta"]["status"], "completed", "{result}");
    // Errors come as the router makes them: an unknown field is the API's 422 body.
    let bad = br#"{"prompt": "x", "nope": 1}"#;
    let head = format!(
        "POST /run HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        bad.len()
    );
    let answer = exchange_in_pieces(&addr, &[head.as_bytes(), bad]).await;
    assert!(answer.starts_with("HTTP/1.1 4"), "{answer}");
    assert!(answer.contains(r#""error""#), "{answer}");
    s.stop().await;
}

/// `POST /run/stream` on the same path: the events as they happen, the stream ending with the
/// connection.
#[tokio::test(flavor = "multi_thread")]
async fn issue_45_a_streamed_run_ends_with_its_connection() {
    let s = Server::start(
        FakePreparer::running(RunScript::Events { n: 3, size: 10 }),
        ApiConfig::default(),
    )
    .await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    let request = b"POST /run/stream HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 15\r\n\r\n{\"prompt\": \"x\"}";
    let answer = exchange_in_pieces(&addr, &[request]).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert_eq!(field(&answer, "content-type"), Some("text/event-stream"));
    assert_eq!(field(&answer, "content-length"), None, "{answer}");
    assert_eq!(field(&answer, "connection"), Some("close"));
    let ids: Vec<&str> = answer
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .collect();
    assert_eq!(ids, ["0", "1", "2", "3", "4"], "{answer}");
    assert!(answer.contains("event: run_complete"), "{answer}");
    s.stop().await;
}

/// Everything else is hyper's, as before ADR-129: requests on one kept connection, a chunked
/// `POST /run`, and one that asks `100-continue`.
#[tokio::test(flavor = "multi_thread")]
async fn issue_45_other_requests_keep_hypers_connection() {
    let s = Server::start(
        FakePreparer::running(RunScript::Complete),
        ApiConfig::default(),
    )
    .await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let mut answers = String::new();
    for _ in 0..2 {
        stream
            .write_all(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        answers.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert_eq!(answers.matches("HTTP/1.1 200 OK").count(), 2, "{answers}");
    assert!(!answers.contains("connection: close"), "{answers}");
    let chunked = exchange_in_pieces(
        &addr,
        &[b"POST /run HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\nf\r\n{\"prompt\": \"x\"}\r\n0\r\n\r\n"],
    )
    .await;
    assert!(chunked.starts_with("HTTP/1.1 200 OK\r\n"), "{chunked}");
    assert!(chunked.contains(r#""status":"completed""#), "{chunked}");
    let continued = exchange_in_pieces(
        &addr,
        &[
            b"POST /run HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 15\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n",
            b"{\"prompt\": \"x\"}",
        ],
    )
    .await;
    assert!(
        continued.starts_with("HTTP/1.1 100 Continue\r\n"),
        "{continued}"
    );
    assert!(continued.contains("HTTP/1.1 200 OK"), "{continued}");
    s.stop().await;
}
