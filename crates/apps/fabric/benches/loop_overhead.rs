//! What the tool-calling loop itself costs per step, against the floor of a bare HTTP loop.
//!
//! For N steps, the scripted server answers N-1 calls of a no-op tool, then `finish_task`.
//! The engine path is the real one: `execute_task` with the OpenAI client (pooled
//! keep-alive connection), schema checks, the no-op tool, and a real JSONL runlog on disk.
//! The floor replays the very request bodies the engine sent, in order, over one pooled
//! reqwest client to a fresh server with the same script, and decodes each answer: the same
//! bytes, the same server, nothing of ours in between. Overhead = engine - floor.
//!
//! A second table compares the run store: the same engine run with the file runlog
//! (`FsRunStore`) and with the database store (`SqlStore` on SQLite, what `fabric run`
//! takes since issue #9: the runlog line, then the index written behind it), interleaved.
//!
//! Run: `cargo bench -p fabric --bench loop_overhead` (figures in docs/BENCHMARKS.md);
//! `BENCH_TABLES=store` for the second table alone, `BENCH_REPS` (15).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

mod common;

use fabric_core::NoopObserver;
use fabric_core::execute::execute_task;
use fabric_test_support::{Scenario, ScriptedServer, Turn};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn scenario(steps: usize) -> Scenario {
    let mut turns: Vec<Turn> = (0..steps - 1)
        .map(|i| Turn::tool_call("noop", json!({"n": i})))
        .collect();
    turns.push(Turn::tool_call("finish_task", json!({"summary": "done"})));
    Scenario::new(turns)
}

/// One engine run with the file runlog; returns its wall time and the request bodies it sent.
async fn engine_run(steps: usize) -> (Duration, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let store = fabric_store_fs::FsRunStore::new(dir.path());
    engine_run_on(&store, steps).await
}

/// One engine run with the SQLite store (opened before, closed after the timing).
async fn engine_run_sql(steps: usize) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let store = fabric_store_sql::SqlStore::open(None, dir.path())
        .await
        .unwrap();
    let (elapsed, _) = engine_run_on(&store, steps).await;
    store.close().await;
    elapsed
}

async fn engine_run_on(store: &dyn fabric_core::RunStore, steps: usize) -> (Duration, Vec<Value>) {
    let server = ScriptedServer::start(scenario(steps)).await.unwrap();
    let chat = fabric_llm::build_client(
        fabric_llm::Backend::OpenAi,
        &fabric_llm::HttpSettings::new(server.base_url()),
        None,
    )
    .unwrap();
    let task = common::task(steps as u32 + 1);
    let started = Instant::now();
    let outcome = execute_task(
        store,
        chat.as_ref(),
        task,
        &NoopObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(
        outcome.status,
        fabric_domain::RunStatus::Completed,
        "{:?}",
        outcome.reason
    );
    assert_eq!(outcome.steps as usize, steps);
    let bodies = server.requests().into_iter().map(|r| r.body).collect();
    server.shutdown().await;
    (elapsed, bodies)
}

/// The floor: the same bodies, posted in order over one keep-alive client, answers decoded.
async fn floor_run(steps: usize, bodies: &[Value]) -> Duration {
    let server = ScriptedServer::start(scenario(steps)).await.unwrap();
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", server.base_url());
    let started = Instant::now();
    for body in bodies {
        let answer: Value = client
            .post(&url)
            .json(body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(answer["choices"][0]["message"]["tool_calls"].is_array());
    }
    let elapsed = started.elapsed();
    server.shutdown().await;
    elapsed
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let reps: usize = std::env::var("BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    // `BENCH_TABLES=store` (or `loop`) runs one of the two tables.
    let tables = std::env::var("BENCH_TABLES").unwrap_or_else(|_| "loop,store".into());
    if tables.contains("loop") {
        loop_table(reps).await;
    }
    if tables.contains("store") {
        store_table(reps).await;
    }
}

async fn loop_table(reps: usize) {
    println!("loop overhead per step (median of {reps} runs; ms)");
    println!(
        "{:>6} {:>12} {:>12} {:>14} {:>10}",
        "steps", "engine/step", "floor/step", "overhead/step", "overhead"
    );
    for steps in [10usize, 100] {
        // Warm-up: first connections, page cache, allocator.
        let (_, bodies) = engine_run(steps).await;
        floor_run(steps, &bodies).await;
        let mut engine = Vec::new();
        let mut floor = Vec::new();
        let mut diff = Vec::new();
        for _ in 0..reps {
            let (e, bodies) = engine_run(steps).await;
            let f = floor_run(steps, &bodies).await;
            let (e, f) = (
                e.as_secs_f64() * 1e3 / steps as f64,
                f.as_secs_f64() * 1e3 / steps as f64,
            );
            engine.push(e);
            floor.push(f);
            diff.push(e - f);
        }
        let (e, f, d) = (median(engine), median(floor), median(diff));
        println!(
            "{steps:>6} {e:>12.3} {f:>12.3} {d:>14.3} {:>9.1}%",
            d / f * 100.0
        );
    }
}

async fn store_table(reps: usize) {
    println!("\nrun store per step (median of {reps} interleaved runs; ms)");
    println!(
        "{:>6} {:>12} {:>12} {:>12} {:>10}",
        "steps", "file/step", "sqlite/step", "diff/step", "diff"
    );
    for steps in [10usize, 100] {
        engine_run(steps).await;
        engine_run_sql(steps).await;
        let (mut file, mut sql, mut diff) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            let f = engine_run(steps).await.0.as_secs_f64() * 1e3 / steps as f64;
            let s = engine_run_sql(steps).await.as_secs_f64() * 1e3 / steps as f64;
            file.push(f);
            sql.push(s);
            diff.push(s - f);
        }
        let (f, s, d) = (median(file), median(sql), median(diff));
        println!(
            "{steps:>6} {f:>12.3} {s:>12.3} {d:>12.3} {:>9.1}%",
            d / f * 100.0
        );
    }
}
