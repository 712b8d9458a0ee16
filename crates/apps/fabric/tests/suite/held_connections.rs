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

/// What a run costs `fabric serve` while it waits for its own model request (no request
/// limit), with the model at a plain `http://` address (ADR-127): the model client holds the
/// socket and nothing else. Measured in this debug build: 62 and 65 KiB a run with reqwest's
/// client, 29 with ours (docs/BENCHMARKS.md has the release figures).
#[tokio::test(flavor = "multi_thread")]
async fn issue_45_a_run_waiting_for_its_own_model_request_holds_no_http_client_buffers() {
    const RUNS: usize = 200;
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
    let served = Served::with(scenario, options).await;
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
    let waiting = |count: usize| {
        let served = &served;
        async move {
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
    };
    // Warm the server (its pools, the store's pages) with a first batch.
    start(20).await;
    waiting(20).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let before = rss_bytes(pid);
    start(RUNS).await;
    waiting(20 + RUNS).await;
    let mut peak = 0;
    for _ in 0..15 {
        peak = peak.max(rss_bytes(pid));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let each = peak.saturating_sub(before) / RUNS as u64;
    eprintln!("a run waiting for its model costs fabric serve {each} bytes");
    assert!(
        each < 48 * 1024,
        "{RUNS} runs waiting for their own model request cost fabric serve {each} bytes each"
    );
}
