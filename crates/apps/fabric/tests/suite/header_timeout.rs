//! Slow and silent clients (issue #45, ADR-133): a connection must send a whole request head
//! within `server.header_timeout_s`, and a held request's body must keep coming, or the
//! server disconnects it; before, a client that connected and sent nothing (or a byte now
//! and then) held a descriptor and a task for as long as it liked. Answers that take long
//! (a blocking run, an event stream) are not cut.

use fabric_test_support::{Scenario, TurnBy};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::serve_fixture::{Options, Served};

const ONE_SECOND: &str = "server:\n  header_timeout_s: 1\n";

async fn served(latency_ms: u64) -> Served {
    let mut scenario = Scenario::new(super::serve::hello_turns());
    scenario.latency_ms = latency_ms;
    // Every run gets the scenario from its first turn.
    scenario.turn_by = TurnBy::Conversation;
    Served::with(
        scenario,
        Options {
            config: ONE_SECOND,
            ..Options::default()
        },
    )
    .await
}

async fn connect(served: &Served) -> TcpStream {
    TcpStream::connect(served.base.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Reads until the server closes the connection, for at most `within`; returns what it sent
/// and how long that took, or panics naming `what` when it kept the connection open.
async fn closed_within(stream: &mut TcpStream, within: Duration, what: &str) -> (String, Duration) {
    let started = Instant::now();
    let mut got = Vec::new();
    match tokio::time::timeout(within, stream.read_to_end(&mut got)).await {
        Ok(_) => (
            String::from_utf8_lossy(&got).into_owned(),
            started.elapsed(),
        ),
        Err(_) => panic!("{what}: the server kept the connection open past {within:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_45_a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let served = served(0).await;
    let mut silent = connect(&served).await;
    let (sent, took) = closed_within(&mut silent, Duration::from_secs(5), "silent").await;
    assert_eq!(sent, "", "nothing is answered to a request never made");
    assert!(took >= Duration::from_millis(900), "closed after {took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_45_a_head_sent_a_little_at_a_time_is_cut_off() {
    let served = served(0).await;
    // A blocking `POST /run` (the held path) and a `GET` (hyper's), each head left unfinished
    // and fed a byte every 300 ms: progress does not reset the deadline.
    for head in [
        "POST /run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n",
        "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n",
    ] {
        let mut slow = connect(&served).await;
        slow.write_all(head.as_bytes()).await.unwrap();
        let started = Instant::now();
        let mut dripped = 0;
        while started.elapsed() < Duration::from_secs(5) {
            if slow.write_all(b"X").await.is_err() {
                break;
            }
            dripped += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let (_, took) = closed_within(&mut slow, Duration::from_secs(1), head).await;
        let cut = started.elapsed().saturating_sub(took);
        assert!(
            dripped < 12 && cut < Duration::from_secs(3),
            "{head:?}: {dripped} bytes dripped over {cut:?} before the server cut it"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_45_a_held_request_whose_body_stops_coming_is_closed() {
    let served = served(0).await;
    let mut stalled = connect(&served).await;
    stalled
        .write_all(
            b"POST /run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":",
        )
        .await
        .unwrap();
    let (sent, took) = closed_within(&mut stalled, Duration::from_secs(5), "stalled body").await;
    assert_eq!(sent, "", "no run starts from half a body");
    assert!(took >= Duration::from_millis(900), "closed after {took:?}");
    let (_, runs) = served.get_json("/runs").await;
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(0), "{runs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_45_an_idle_keep_alive_connection_is_closed_after_its_answer() {
    let served = served(0).await;
    let mut idle = connect(&served).await;
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let (sent, took) = closed_within(&mut idle, Duration::from_secs(5), "keep-alive").await;
    assert!(sent.starts_with("HTTP/1.1 200"), "{sent}");
    assert!(took >= Duration::from_millis(900), "closed after {took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_45_answers_that_take_longer_than_the_header_timeout_are_not_cut() {
    // Each model call takes 1.5 s: the run's answer and its event stream outlast the
    // one-second header timeout.
    let served = served(1_500).await;
    let blocking = served
        .post("/run")
        .json(&json!({"prompt": "finish", "pack": "engineering"}))
        .send()
        .await
        .unwrap();
    assert_eq!(blocking.status().as_u16(), 200);
    let body: serde_json::Value = blocking.json().await.unwrap();
    assert_eq!(body["_meta"]["status"], "completed", "{body}");
    let run_id = served.start_run("finish again").await;
    // The stream ends with the run, seconds after it was opened.
    let started = Instant::now();
    let frames = served.follow(&run_id, None).await.rest().await;
    let kinds: Vec<String> = frames
        .iter()
        .map(|frame| frame.json()["kind"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(started.elapsed() > Duration::from_secs(2), "{kinds:?}");
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("run_complete"),
        "{kinds:?}"
    );
}
