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
