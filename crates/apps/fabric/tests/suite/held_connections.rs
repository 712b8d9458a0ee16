//! What a connection held open costs `fabric serve` (issue #45, ADR-120): each accepted
//! connection gets the finished router, not a rebuilt copy of its route table. Before, every
//! connection cost about 30 KiB before it sent a byte (a blocking `POST /run` holds one for
//! its whole run).

use fabric_test_support::Turn;
use serde_json::json;
use std::time::Duration;

use super::serve_fixture::Served;

fn rss_bytes(pid: u32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_45_a_connection_held_open_costs_serve_no_copy_of_its_router() {
    const CONNECTIONS: usize = 400;
    let served = Served::start(vec![Turn::tool_call(
        "finish_task",
        json!({"summary": "done"}),
    )])
    .await;
    let pid = served.child.id().unwrap();
    let address = served.base.trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_bytes(pid);
    for _ in 0..CONNECTIONS {
        held.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let each = rss_bytes(pid).saturating_sub(before) / CONNECTIONS as u64;
    // Measured: 0.1–0.2 KiB a connection after, 30.6 KiB before (docs/BENCHMARKS.md).
    assert!(
        each < 10 * 1024,
        "{CONNECTIONS} idle connections cost fabric serve {each} bytes each"
    );
    // The server still answers while they are held.
    let (status, _) = served.get_json("/health").await;
    assert_eq!(status, 200);
    drop(held);
}

/// `fabric serve` over a model that answers no run before the test ends, without a request
/// limit: every run holds its own model request.
async fn serve_waiting_runs() -> Served {
    let mut scenario = fabric_test_support::Scenario::new(vec![
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ]);
    scenario.turn_by = fabric_test_support::TurnBy::Conversation;
    // Every run waits on its first model call until the test ends.
    scenario.latency_ms = 300_000;
    let options = super::serve_fixture::Options {
        rewrite: Some(|base, _| {
            format!(
                "models:\n  test:\n    base_url: {base}\n    model: qwen2.5:7b\n    backend: openai\n    timeout_s: 600\n    max_concurrent_requests: 10000\ndefault_model_key: test\nrouting_model_key: test\nserver:\n  max_runs_in_flight: 100000\n"
            )
        }),
        ..Default::default()
    };
    Served::with(scenario, options).await
}

/// Waits until `count` runs have asked the model.
async fn wait_for_model_calls(served: &Served, count: usize) {
    let started = std::time::Instant::now();
    while served.fx.server.chat_request_count() < count {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{} of {count} runs reached the model within 120 s",
            served.fx.server.chat_request_count()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The largest RSS of process `pid` over 1.5 s.
async fn peak_rss(pid: u32) -> u64 {
    let mut peak = 0;
    for _ in 0..15 {
        peak = peak.max(rss_bytes(pid));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    peak
}

/// What a run costs `fabric serve` while it waits for its own model request (no request
/// limit), with the model at a plain `http://` address (ADR-127): the model client holds the
/// socket and nothing else. Measured in this debug build: 62 and 65 KiB a run with reqwest's
/// client, 29 with ours (docs/BENCHMARKS.md has the release figures).
#[tokio::test(flavor = "multi_thread")]
async fn issue_45_a_run_waiting_for_its_own_model_request_holds_no_http_client_buffers() {
    const RUNS: usize = 200;
    let served = serve_waiting_runs().await;
    let pid = served.child.id().unwrap();
    let start = |count: usize| {
        let served = &served;
        async move {
            for _ in 0..count {
                let (status, body) = served
                    .post_json("/runs", json!({"prompt": "wait", "pack": "engineering"}))
                    .await;
                assert_eq!(status, 202, "{body}");
            }
        }
    };
    // Warm the server (its pools, the store's pages) with a first batch.
    start(20).await;
    wait_for_model_calls(&served, 20).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let before = rss_bytes(pid);
    start(RUNS).await;
    wait_for_model_calls(&served, 20 + RUNS).await;
    let each = peak_rss(pid).await.saturating_sub(before) / RUNS as u64;
    eprintln!("a run waiting for its model costs fabric serve {each} bytes");
    assert!(
        each < 48 * 1024,
        "{RUNS} runs waiting for their own model request cost fabric serve {each} bytes each"
    );
}

/// Starts `count` blocking `POST /run`s on connections of their own, with a chunked body when
/// `chunked`, and keeps the connections open (the answers come after the test).
async fn hold_blocking_runs(
    served: &Served,
    count: usize,
    chunked: bool,
) -> Vec<tokio::net::TcpStream> {
    use tokio::io::AsyncWriteExt;
    let address = served.base.trim_start_matches("http://").to_owned();
    let body = r#"{"prompt": "wait", "pack": "engineering"}"#;
    let request = if chunked {
        format!(
            "POST /run HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        )
    } else {
        format!(
            "POST /run HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let mut held = Vec::with_capacity(count);
    for _ in 0..count {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        held.push(stream);
    }
    held
}

/// What a blocking `POST /run` waiting for its model costs a server of its own, with a
/// chunked body when `chunked`.
async fn blocking_run_cost(chunked: bool) -> u64 {
    const RUNS: usize = 300;
    const STEP: usize = 25;
    let served = serve_waiting_runs().await;
    let pid = served.child.id().unwrap();
    // Warm the server (its pools, the store's pages) with a first batch.
    let mut held = hold_blocking_runs(&served, 20, chunked).await;
    wait_for_model_calls(&served, 20).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let before = rss_bytes(pid);
    // A few at a time: a burst's passing costs (the store writer's queue) would blur the
    // runs' own.
    for started in (STEP..=RUNS).step_by(STEP) {
        held.extend(hold_blocking_runs(&served, STEP, chunked).await);
        wait_for_model_calls(&served, 20 + started).await;
    }
    let each = peak_rss(pid).await.saturating_sub(before) / RUNS as u64;
    drop(held);
    each
}

/// A blocking `POST /run` holds its connection for its run's life; answered without hyper's
/// connection (ADR-129), it holds the socket and not hyper's 8 KiB read and write buffers.
/// The same request with a chunked body is still hyper's, so the test measures both, each in
/// a server of its own: the held ones must cost at least 4 KiB a run less, and under 44 KiB.
/// Measured in this debug build: 34.5–37.5 KiB held, 46 KiB through hyper.
#[tokio::test(flavor = "multi_thread")]
async fn issue_45_a_blocking_run_holds_no_http_server_buffers() {
    let ours = blocking_run_cost(false).await;
    let hypers = blocking_run_cost(true).await;
    eprintln!(
        "a blocking run costs fabric serve {ours} bytes; through hyper's connection {hypers}"
    );
    assert!(
        ours < 44 * 1024 && ours + 4 * 1024 < hypers,
        "a blocking run costs fabric serve {ours} bytes, through hyper's connection {hypers}"
    );
}

/// Sockets `fabric serve` (process `pid`) holds open.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

/// A client that sent another request behind its blocking `POST /run` (pipelining) and then
/// went away: the server lets its connection go at once, as it does for one that sent
/// nothing more. Before, the bytes behind the body ended the watch for the close, and the
/// connection stayed open until the run ended.
#[tokio::test(flavor = "multi_thread")]
async fn issue_45_a_blocking_request_with_a_pipelined_one_behind_it_is_let_go_when_its_client_closes()
 {
    use tokio::io::AsyncWriteExt;
    let served = serve_waiting_runs().await;
    let pid = served.child.id().unwrap();
    let body = json!({"prompt": "wait", "pack": "engineering"}).to_string();
    let mut client = tokio::net::TcpStream::connect(served.base.trim_start_matches("http://"))
        .await
        .unwrap();
    let request = format!(
        "POST /run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    client.write_all(request.as_bytes()).await.unwrap();
    wait_for_model_calls(&served, 1).await;
    client
        .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let holding = sockets(pid);
    drop(client);
    let started = std::time::Instant::now();
    while sockets(pid) >= holding {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the server still holds {} sockets ({holding} with the client) 5 s after the client closed",
            sockets(pid)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The run goes on (its model request is still open), as docs/HTTP.md says.
    assert_eq!(served.fx.server.chat_request_count(), 1);
}
