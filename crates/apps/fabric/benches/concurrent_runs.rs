//! Many runs at once in one process: how many can be in flight, what each costs in memory,
//! and how close the step throughput comes to the ideal (issue #4).
//!
//! Part 1, throughput over real HTTP: R runs of S steps (S-1 calls of a no-op tool, then
//! `finish_task`) start together against the scripted server with a fixed model latency L.
//! Ideal wall time = S x L (every run waits on the model in parallel). The floor is the
//! scripted server's own capacity: R concurrent plain HTTP clients posting S requests each to
//! a fresh server with the same latency, nothing of ours in between.
//!
//! Part 2, memory per run in flight: N runs in flight at once, driven through `execute_task_force`
//! with the real file-system run store and runlogs, but an in-process model that sleeps L and
//! answers (no HTTP): with thousands of sockets the HTTP client's and the fake server's buffers
//! (both in this process) would dominate the figure and say nothing about the fabric. Memory
//! per run = (RSS with all N waiting on the model - RSS before) / N, from /proc/self/statm.
//! Measured with no observer (`none`: `execute_task_force` alone, no run service around it; no
//! front end takes this path) and with `LiveRun` (`live`: what the run service attaches to
//! each run, keeping a window of its events for followers), both over the file store; and
//! through the run service over the SQLite store (`service`), the path every front end takes
//! since issue #9, `fabric run` included, and through the service over files alone
//! (`service-files`). `FABRIC_BENCH_MEMORY_CASES` picks the cases (`none,live,service` by
//! default).
//!
//! Run: `cargo bench -p fabric --bench concurrent_runs` (figures in docs/BENCHMARKS.md).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

mod common;
use fabric_fakes::{FakePreparer, ScriptedChat};

use fabric_core::execute::{TaskForce, execute_task_force, run_task_force};
use fabric_core::live::RunRegistry;
use fabric_core::service::{RunService, ServiceConfig, Submission, TaskRequest};
use fabric_core::{ChatClient, ChatResponse, NoopObserver, RunStore};
use fabric_domain::{RunStatus, ToolCall};
use fabric_test_support::{Scenario, ScriptedServer, Turn};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// A run of `steps` steps, with headroom: on the shared HTTP server a run may take a turn
/// another run left.
fn task(chat: Arc<dyn ChatClient>, steps: usize) -> TaskForce {
    common::task(chat, steps as u32 * 2)
}

/// The scripted turn for step `i` of `steps`: the model's answer depends only on how many
/// assistant messages the conversation already has, so one server serves many runs.
fn call_for(step: usize, steps: usize) -> ToolCall {
    if step + 1 < steps {
        ToolCall {
            id: format!("call_{step}"),
            name: "noop".into(),
            arguments: json!({"n": step}).to_string(),
        }
    } else {
        ToolCall {
            id: format!("call_{step}"),
            name: "finish_task".into(),
            arguments: json!({"summary": "done"}).to_string(),
        }
    }
}

/// An in-process model: sleeps `latency`, then answers the call its conversation's step asks
/// for; it keeps no copy of the requests, only their count.
fn sleepy_model(latency: Duration, steps: usize) -> ScriptedChat {
    ScriptedChat::by_turn(move |step| {
        Ok(ChatResponse {
            tool_calls: vec![call_for(step, steps)],
            finish_reason: Some("tool_calls".into()),
            ..ChatResponse::default()
        })
    })
    .delayed(latency)
    .unrecorded()
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// A scenario where every request gets the answer its conversation length asks for is not
/// expressible as a fixed list of turns, so each HTTP run gets `steps` turns of its own on one
/// shared server: turns are consumed in arrival order, and every turn but the last calls
/// `noop`, so any run may take any noop turn; the finish turns are the last R turns.
fn shared_scenario(runs: usize, steps: usize, latency_ms: u64) -> Scenario {
    let mut turns = Vec::with_capacity(runs * steps);
    for step in 0..steps - 1 {
        for _ in 0..runs {
            turns.push(Turn::tool_call("noop", json!({"n": step})));
        }
    }
    for _ in 0..runs {
        turns.push(Turn::tool_call("finish_task", json!({"summary": "done"})));
    }
    let mut scenario = Scenario::new(turns);
    scenario.latency_ms = latency_ms;
    scenario
}

async fn http_runs(runs: usize, steps: usize, latency_ms: u64) -> (Duration, usize) {
    let server = ScriptedServer::start(shared_scenario(runs, steps, latency_ms))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(fabric_store_fs::FsRunStore::new(dir.path()));
    let chat: Arc<dyn ChatClient> = fabric_llm::build_client(
        fabric_llm::Backend::OpenAi,
        &fabric_llm::HttpSettings::new(server.base_url()),
        None,
    )
    .unwrap();
    let started = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..runs {
        let (store, chat) = (Arc::clone(&store), Arc::clone(&chat));
        set.spawn(async move {
            execute_task_force(
                store.as_ref(),
                task(chat, steps),
                &NoopObserver,
                CancellationToken::new(),
            )
            .await
            .unwrap()
        });
    }
    let mut completed = 0;
    while let Some(outcome) = set.join_next().await {
        if outcome.unwrap().status == RunStatus::Completed {
            completed += 1;
        }
    }
    let elapsed = started.elapsed();
    server.shutdown().await;
    (elapsed, completed)
}

/// The request bodies one run sends, in order: what a fair floor replays.
async fn real_bodies(steps: usize) -> Vec<Value> {
    let server = ScriptedServer::start(shared_scenario(1, steps, 0))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = fabric_store_fs::FsRunStore::new(dir.path());
    let chat = fabric_llm::build_client(
        fabric_llm::Backend::OpenAi,
        &fabric_llm::HttpSettings::new(server.base_url()),
        None,
    )
    .unwrap();
    let outcome = execute_task_force(
        &store,
        task(chat, steps),
        &NoopObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    let bodies = server.requests().into_iter().map(|r| r.body).collect();
    server.shutdown().await;
    bodies
}

/// The server's own capacity: the same number of requests at the same concurrency, from a
/// plain client that replays the very bodies a run sends (sizes grow with the conversation),
/// so the floor pays the same parsing and recording on the server as the fabric's runs do.
async fn http_floor(
    runs: usize,
    steps: usize,
    latency_ms: u64,
    bodies: Arc<Vec<Value>>,
) -> Duration {
    let server = ScriptedServer::start(shared_scenario(runs, steps, latency_ms))
        .await
        .unwrap();
    let url = format!("{}/chat/completions", server.base_url());
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..runs {
        let (client, url, bodies) = (client.clone(), url.clone(), Arc::clone(&bodies));
        set.spawn(async move {
            for body in bodies.iter().take(steps) {
                let answer: Value = client
                    .post(&url)
                    .json(body)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert!(answer["choices"].is_array());
            }
        });
    }
    while set.join_next().await.is_some() {}
    let elapsed = started.elapsed();
    server.shutdown().await;
    elapsed
}

/// The path `fabric serve` takes since issue #9: the run service (a `LiveRun` per run) over
/// the SQLite store (its index written behind every runlog), or over the file store alone
/// (`sql` false), which tells the service's own share from the store's.
async fn in_flight_service(
    runs: usize,
    steps: usize,
    latency: Duration,
    sql: bool,
) -> (f64, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn fabric_core::RunStore> = if sql {
        Arc::new(
            fabric_store_sql::SqlStore::open(None, dir.path())
                .await
                .unwrap(),
        )
    } else {
        Arc::new(fabric_store_fs::FsRunStore::new(dir.path()))
    };
    let model = sleepy_model(latency, steps);
    // Every request prepared as the common task on the in-process model, with no I/O.
    let chat = model.clone();
    let preparer = Arc::new(FakePreparer::new(move |_| {
        Ok(Box::new(task(chat.client(), steps)))
    }));
    let service = RunService::new(store, preparer, ServiceConfig::default());
    let before = rss_bytes();
    let started = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..runs {
        let request = TaskRequest {
            prompt: "Do the bench task".into(),
            ..TaskRequest::default()
        };
        let handle = service.submit(Submission::new(request)).unwrap();
        set.spawn(async move {
            let outcome = handle.outcome().await.unwrap();
            assert_eq!(outcome.status, RunStatus::Completed);
        });
    }
    let peak = sample_peak(&model, runs, steps, started, latency).await;
    while set.join_next().await.is_some() {}
    let elapsed = started.elapsed();
    (
        peak.saturating_sub(before) as f64 / runs as f64 / 1024.0,
        elapsed,
    )
}

/// Samples RSS while every run waits on its first model call, and again at later steps,
/// when the conversations and the event buffers are larger; returns the peak.
async fn sample_peak(
    model: &ScriptedChat,
    runs: usize,
    steps: usize,
    started: Instant,
    latency: Duration,
) -> u64 {
    let mut peak = 0u64;
    let deadline = started + latency * steps as u32;
    while Instant::now() < deadline && model.calls() < runs * steps {
        if model.calls() >= runs {
            peak = peak.max(rss_bytes());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    peak
}

async fn in_flight(runs: usize, steps: usize, latency: Duration, live: bool) -> (f64, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(fabric_store_fs::FsRunStore::new(dir.path()));
    let model = sleepy_model(latency, steps);
    // As the run service makes it: a window of each run's events, older ones in the store.
    let registry = Arc::new(RunRegistry::windowed(store.clone()));
    let before = rss_bytes();
    let started = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..runs {
        let (store, model, registry) = (Arc::clone(&store), model.clone(), Arc::clone(&registry));
        set.spawn(async move {
            let chat = model.client();
            let outcome = if live {
                let run = store.create_run(fabric_core::new_run_id()).await.unwrap();
                let watched = registry.register(run.id.clone());
                let outcome = run_task_force(
                    run,
                    task(chat, steps),
                    watched.as_ref(),
                    watched.cancel_token(),
                )
                .await
                .unwrap();
                watched.finish(None);
                registry.remove(watched.id());
                outcome
            } else {
                execute_task_force(
                    store.as_ref(),
                    task(chat, steps),
                    &NoopObserver,
                    CancellationToken::new(),
                )
                .await
                .unwrap()
            };
            assert_eq!(outcome.status, RunStatus::Completed);
        });
    }
    let peak = sample_peak(&model, runs, steps, started, latency).await;
    while set.join_next().await.is_some() {}
    let elapsed = started.elapsed();
    let per_run = peak.saturating_sub(before) as f64 / runs as f64 / 1024.0;
    (per_run, elapsed)
}

/// One memory case per process: memory freed by an earlier phase stays in the allocator and
/// would hide the next phase's growth from RSS.
const CASE_VAR: &str = "FABRIC_BENCH_MEMORY_CASE";

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let latency = Duration::from_millis(2000);
    let steps = 5;
    let runs = 10_000usize;
    if let Ok(case) = std::env::var(CASE_VAR) {
        let ((kib, wall), label) = match case.as_str() {
            "live" => (
                in_flight(runs, steps, latency, true).await,
                "LiveRun, files",
            ),
            "service" => (
                in_flight_service(runs, steps, latency, true).await,
                "service, SQLite",
            ),
            "service-files" => (
                in_flight_service(runs, steps, latency, false).await,
                "service, files",
            ),
            _ => (in_flight(runs, steps, latency, false).await, "none, files"),
        };
        // No sample means the runs had not all reached their first model call before the
        // window closed: say so rather than print 0 KiB.
        let kib = if kib > 0.0 {
            format!("{kib:.1}")
        } else {
            "not sampled".to_owned()
        };
        println!(
            "{runs:>7} {steps:>6} {:>8}ms {label:>18} {kib:>10} {:>10.2} {:>10.2}",
            latency.as_millis(),
            wall.as_secs_f64(),
            (latency * steps as u32).as_secs_f64(),
        );
        return;
    }
    println!("runs in flight in one process (in-process model, real run store and runlogs)");
    println!(
        "{:>7} {:>6} {:>9} {:>18} {:>10} {:>10} {:>10}",
        "runs", "steps", "latency", "observer", "KiB/run", "wall s", "ideal s"
    );
    let cases = std::env::var("FABRIC_BENCH_MEMORY_CASES")
        .unwrap_or_else(|_| "none,live,service".to_owned());
    for case in cases.split(',') {
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .env(CASE_VAR, case)
            .output()
            .unwrap();
        print!("{}", String::from_utf8_lossy(&output.stdout));
    }
    if std::env::var_os("FABRIC_BENCH_SKIP_HTTP").is_some() {
        return;
    }
    println!();
    http_table().await;
}

async fn http_table() {
    let latency_ms = 50u64;
    println!(
        "concurrent runs over HTTP against the scripted server ({latency_ms} ms model latency)"
    );
    println!(
        "{:>6} {:>6} {:>10} {:>10} {:>10} {:>12} {:>14} {:>12}",
        "runs", "steps", "ideal s", "floor s", "fabric s", "steps/s", "vs ideal", "vs floor"
    );
    for (runs, steps) in [(200usize, 20usize), (1000, 20)] {
        let ideal = (steps as u64 * latency_ms) as f64 / 1000.0;
        let bodies = Arc::new(real_bodies(steps).await);
        let floor = http_floor(runs, steps, latency_ms, bodies)
            .await
            .as_secs_f64();
        let (wall, completed) = http_runs(runs, steps, latency_ms).await;
        assert_eq!(completed, runs);
        let wall = wall.as_secs_f64();
        println!(
            "{runs:>6} {steps:>6} {ideal:>10.2} {floor:>10.2} {wall:>10.2} {:>12.0} {:>13.0}% {:>11.0}%",
            (runs * steps) as f64 / wall,
            (wall / ideal - 1.0) * 100.0,
            (wall / floor - 1.0) * 100.0,
        );
    }
}
