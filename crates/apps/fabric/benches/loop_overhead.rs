//! What the tool-calling loop itself costs per step, against the floor of a bare HTTP loop.
//!
//! For N steps, the scripted server answers N-1 calls of a no-op tool, then `finish_task`.
//! The engine path is the real one: `execute_task_force` with the OpenAI client (pooled
//! keep-alive connection), schema checks, the no-op tool, and a real JSONL runlog on disk.
//! The floor replays the very request bodies the engine sent, in order, over one pooled
//! reqwest client to a fresh server with the same script, and decodes each answer: the same
//! bytes, the same server, nothing of ours in between. Overhead = engine - floor, per run;
//! the table prints the median of those differences (not clamped: a negative one keeps its
//! sign) and their 25th and 75th percentiles, so a figure near zero can be read against its
//! spread.
//!
//! A second table compares the run store: the same engine run with the file runlog
//! (`FsRunStore`) and with the database store (`SqlStore` on SQLite, what `fabric run`
//! takes since issue #9: the runlog line, then the index written behind it), interleaved.
//!
//! A third table measures telemetry (issue #13): the same engine run with no observer
//! (telemetry off: the run service then calls only its metrics) against one whose observer
//! feeds every event to the metrics and to the tracer, whose exporter posts OTLP protobuf to
//! a local endpoint that takes and drops it.
//!
//! Run: `cargo bench -p fabric --bench loop_overhead` (figures in docs/BENCHMARKS.md);
//! `BENCH_TABLES=store` (or `telemetry`) for one table alone, `BENCH_REPS` (15).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

mod common;

use fabric_core::NoopObserver;
use fabric_core::execute::execute_task_force;
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

/// Tells every event to the sinks, as the run service does.
struct Sinks(
    Vec<std::sync::Arc<dyn fabric_core::EventSink>>,
    fabric_domain::RunId,
);

impl fabric_core::ChatObserver for Sinks {
    fn on_text_delta(&self, _delta: &str) {}
}

#[async_trait::async_trait]
impl fabric_core::RunObserver for Sinks {
    async fn on_event(&self, event: &fabric_domain::RunEvent) {
        for sink in &self.0 {
            sink.observe(&self.1, event);
        }
    }
}

async fn engine_run_on(store: &dyn fabric_core::RunStore, steps: usize) -> (Duration, Vec<Value>) {
    engine_run_observed(store, steps, &NoopObserver).await
}

async fn engine_run_observed(
    store: &dyn fabric_core::RunStore,
    steps: usize,
    observer: &dyn fabric_core::RunObserver,
) -> (Duration, Vec<Value>) {
    let server = ScriptedServer::start(scenario(steps)).await.unwrap();
    let chat = fabric_llm::build_client(
        fabric_llm::Backend::OpenAi,
        &fabric_llm::HttpSettings::new(server.base_url()),
        None,
    )
    .unwrap();
    let task = common::task(chat, steps as u32 + 1);
    let started = Instant::now();
    let outcome = execute_task_force(store, task, observer, CancellationToken::new())
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

/// The 25th and 75th percentiles of `xs` (nearest rank).
fn quartiles(xs: &[f64]) -> (f64, f64) {
    let mut xs = xs.to_vec();
    xs.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| xs[((xs.len() - 1) as f64 * q).round() as usize];
    (at(0.25), at(0.75))
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
    if tables.contains("telemetry") {
        telemetry_table(reps).await;
    }
}

/// An OTLP endpoint that takes every request and drops it.
async fn null_collector() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    let router = axum::Router::new().fallback(|| async { "" });
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

async fn telemetry_table(reps: usize) {
    println!("\ntelemetry per step (median of {reps} interleaved runs; ms)");
    println!(
        "{:>6} {:>12} {:>12} {:>12} {:>10}",
        "steps", "off/step", "on/step", "diff/step", "diff"
    );
    let telemetry = fabric_telemetry::Telemetry::start(fabric_telemetry::TelemetryOptions {
        traces_url: null_collector().await,
        resource: fabric_telemetry::resource_from_env("bench", |_| None).unwrap(),
        capture_content: false,
        providers: std::collections::HashMap::new(),
        metrics_url: String::new(),
        metrics_interval: Duration::from_secs(3600),
    });
    let metrics: std::sync::Arc<dyn fabric_core::EventSink> =
        std::sync::Arc::new(fabric_core::metrics::Metrics::new());
    for steps in [10usize, 100] {
        let dir = tempfile::tempdir().unwrap();
        let store = fabric_store_fs::FsRunStore::new(dir.path());
        let on = |n: usize| {
            Sinks(
                vec![std::sync::Arc::clone(&metrics), telemetry.sink()],
                fabric_domain::RunId::parse(&format!("20260101-000000-000-{n:08x}")).unwrap(),
            )
        };
        engine_run_on(&store, steps).await;
        engine_run_observed(&store, steps, &on(0)).await;
        let (mut off, mut with, mut diff) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..reps {
            let o = engine_run_on(&store, steps).await.0.as_secs_f64() * 1e3 / steps as f64;
            let w = engine_run_observed(&store, steps, &on(i + 1))
                .await
                .0
                .as_secs_f64()
                * 1e3
                / steps as f64;
            off.push(o);
            with.push(w);
            diff.push(w - o);
        }
        let (o, w, d) = (median(off), median(with), median(diff));
        println!(
            "{steps:>6} {o:>12.3} {w:>12.3} {d:>12.3} {:>9.1}%",
            d / o * 100.0
        );
    }
    telemetry.flush(Duration::from_secs(2)).await;
}

async fn loop_table(reps: usize) {
    println!(
        "loop overhead per step (median of {reps} runs; overhead: median of the per-run differences, and their p25..p75; ms)"
    );
    println!(
        "{:>6} {:>12} {:>12} {:>14} {:>10} {:>18}",
        "steps", "engine/step", "floor/step", "overhead/step", "overhead", "p25..p75"
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
        let (q1, q3) = quartiles(&diff);
        let spread = format!("{q1:.3}..{q3:.3}");
        let (e, f, d) = (median(engine), median(floor), median(diff));
        println!(
            "{steps:>6} {e:>12.3} {f:>12.3} {d:>14.3} {:>9.1}% {spread:>18}",
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
