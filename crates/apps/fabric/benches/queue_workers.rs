//! Workers on one PostgreSQL, through the real front door (issue #10): `fabric serve` with
//! `store.queue: true` and `fabric worker` processes (release binaries), a private
//! PostgreSQL cluster, the scripted model server. Three figures (docs/BENCHMARKS.md):
//!
//! - queue-to-start latency: `POST /runs` to the run's `run_start` event, one run at a time
//!   to an idle worker: p50, p99 (only from 100 samples up: with fewer, the 99th percentile
//!   is the slowest sample) and the maximum;
//! - throughput of 1, 2 and 4 workers: R runs of S steps submitted at once, runs x steps per
//!   second until the last one ended;
//! - the cost of a step: one 100-step run by `fabric run` on SQLite against a worker on
//!   PostgreSQL;
//! - takeover time against the lease: a worker killed with SIGKILL while its run waits on the
//!   model, to the `run_resumed` event written by the other worker.
//!
//! `cargo bench -p fabric --bench queue_workers`; `BENCH_RUNS` (200), `BENCH_STEPS` (10),
//! `BENCH_LEASES` (2,5,10), `BENCH_QUEUE_SAMPLES` (200, after 10 warm-up runs).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use fabric_test_support::{PgCluster, Scenario, ScriptedServer, Turn, TurnBy};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// S steps: S-1 listings, then `finish_task`; `slow_step` waits `slow_ms` at that step.
fn scenario(steps: usize, slow: Option<(usize, u64)>) -> Scenario {
    let mut turns: Vec<Turn> = (0..steps - 1)
        .map(|_| Turn::tool_call("list_files", json!({})))
        .collect();
    turns.push(Turn::tool_call(
        "finish_task",
        json!({"summary": "done", "artifacts": [], "next_steps": [], "notes": ""}),
    ));
    if let Some((step, ms)) = slow {
        turns[step].delay_ms = Some(ms);
    }
    let mut scenario = Scenario::new(turns);
    scenario.turn_by = TurnBy::Conversation;
    scenario
}

struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
    _server: ScriptedServer,
}

impl Setup {
    async fn new(url: &str, scenario: Scenario, lease_s: u64) -> Self {
        let server = ScriptedServer::start(scenario).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("fabric.yaml");
        std::fs::write(
            &config,
            format!(
                "models:\n  test:\n    base_url: {}\n    model: qwen2.5:7b\n    backend: openai\ndefault_model_key: test\nrouting_model_key: test\nmax_steps: 200\nstore:\n  url: {url}\n  queue: true\n  lease_s: {lease_s}\nserver:\n  max_runs_in_flight: 100000\n",
                server.base_url()
            ),
        )
        .unwrap();
        Self {
            dir,
            config,
            _server: server,
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join(".fabric")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fabric"));
        cmd.args(args)
            .arg("--config")
            .arg(&self.config)
            .arg("--workspace")
            .arg(self.root())
            .env("NO_COLOR", "1")
            .env_remove("FABRIC_STORE_URL")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    fn worker(&self, concurrency: usize) -> Child {
        self.command(&["worker", "--concurrency", &concurrency.to_string()])
            .spawn()
            .unwrap()
    }

    async fn serve(&self) -> (Child, String) {
        let mut child = self
            .command(&["serve", "--port", "0"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next_line().await.unwrap().unwrap();
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        (child, first.trim_start_matches("listening on ").to_owned())
    }
}

async fn submit(http: &reqwest::Client, base: &str, prompt: &str) -> String {
    let response = http
        .post(format!("{base}/runs"))
        .json(&json!({"prompt": prompt, "pack": "engineering"}))
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    body["run_id"].as_str().expect("run_id").to_owned()
}

fn runlog(root: &Path, id: &str) -> Vec<Value> {
    std::fs::read_to_string(root.join("runs").join(id).join("runlog.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn event_ts(events: &[Value], kind: &str) -> Option<f64> {
    events
        .iter()
        .find(|e| e["kind"] == kind)
        .and_then(|e| e["ts"].as_f64())
}

async fn wait_event(root: &Path, id: &str, kind: &str, within: Duration) -> f64 {
    let started = Instant::now();
    loop {
        if let Some(ts) = event_ts(&runlog(root, id), kind) {
            return ts;
        }
        assert!(started.elapsed() < within, "{id}: no {kind}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn queue_to_start(cluster: &PgCluster) {
    let url = cluster.create_database().unwrap();
    let setup = Setup::new(&url, scenario(2, None), 30).await;
    let _worker = setup.worker(4);
    let (_serve, base) = setup.serve().await;
    let http = reqwest::Client::new();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let samples = env_or("BENCH_QUEUE_SAMPLES", 200).max(1);
    let mut latencies = Vec::new();
    for i in 0..samples + 10 {
        let t0 = now();
        let id = submit(&http, &base, &format!("run {i}")).await;
        let started = wait_event(&setup.root(), &id, "run_start", Duration::from_secs(30)).await;
        wait_event(&setup.root(), &id, "run_complete", Duration::from_secs(30)).await;
        if i >= 10 {
            latencies.push((started - t0) * 1000.0);
        }
    }
    latencies.sort_by(f64::total_cmp);
    // Below 100 samples the 99th percentile is the slowest one: print it as the maximum only.
    let p99 = if latencies.len() >= 100 {
        format!("p99 {:.1} ms, ", percentile(&latencies, 0.99))
    } else {
        String::new()
    };
    println!(
        "queue to start (POST /runs to run_start, idle worker, {} runs): p50 {:.1} ms, {p99}max {:.1} ms",
        latencies.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 1.0)
    );
}

async fn throughput(cluster: &PgCluster, workers: usize, runs: usize, steps: usize) {
    let url = cluster.create_database().unwrap();
    let setup = Setup::new(&url, scenario(steps, None), 30).await;
    let _workers: Vec<Child> = (0..workers).map(|_| setup.worker(16)).collect();
    let (_serve, base) = setup.serve().await;
    let http = reqwest::Client::new();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let mut ids = Vec::with_capacity(runs);
    for i in 0..runs {
        ids.push(submit(&http, &base, &format!("run {i}")).await);
    }
    for id in &ids {
        wait_event(&setup.root(), id, "run_complete", Duration::from_secs(600)).await;
    }
    let wall = started.elapsed().as_secs_f64();
    println!(
        "throughput, {workers} worker(s) x 16: {runs} runs x {steps} steps in {wall:.2} s = {:.0} steps/s ({:.1} runs/s)",
        (runs * steps) as f64 / wall,
        runs as f64 / wall
    );
}

/// One long run's cost per step, from its `run_start` to its end: `fabric run` in process
/// (SQLite, the index written behind the loop) against a worker (PostgreSQL, every event
/// inserted under its fence before the loop goes on).
async fn per_step(cluster: &PgCluster, steps: usize) {
    let url = cluster.create_database().unwrap();
    let setup = Setup::new(&url, scenario(steps, None), 30).await;
    let wall = |events: &[Value]| {
        let start = event_ts(events, "run_start").unwrap();
        let end = events.last().and_then(|e| e["ts"].as_f64()).unwrap();
        (end - start) * 1000.0 / steps as f64
    };
    // In process, on SQLite: the same config without the queue's store.
    let local = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(&setup.config).unwrap();
    let config = local.path().join("fabric.yaml");
    let cut = text.find("store:").unwrap();
    std::fs::write(&config, &text[..cut]).unwrap();
    let mut sqlite = Vec::new();
    for _ in 0..5 {
        let output = Command::new(env!("CARGO_BIN_EXE_fabric"))
            .args(["run", "per step", "--pack", "engineering", "--json"])
            .arg("--config")
            .arg(&config)
            .arg("--workspace")
            .arg(local.path().join(".fabric"))
            .env_remove("FABRIC_STORE_URL")
            .output()
            .await
            .unwrap();
        let result: Value = serde_json::from_slice(&output.stdout).unwrap();
        let id = result["_meta"]["run_id"].as_str().unwrap().to_owned();
        sqlite.push(wall(&runlog(&local.path().join(".fabric"), &id)));
    }
    let _worker = setup.worker(1);
    let (_serve, base) = setup.serve().await;
    let http = reqwest::Client::new();
    let mut postgres = Vec::new();
    for _ in 0..5 {
        let id = submit(&http, &base, "per step").await;
        wait_event(&setup.root(), &id, "run_complete", Duration::from_secs(120)).await;
        postgres.push(wall(&runlog(&setup.root(), &id)));
    }
    sqlite.sort_by(f64::total_cmp);
    postgres.sort_by(f64::total_cmp);
    println!(
        "one {steps}-step run, ms per step (median of 5): fabric run on SQLite {:.3}, a worker on PostgreSQL {:.3}",
        sqlite[2], postgres[2]
    );
}

async fn takeover(cluster: &PgCluster, lease_s: u64) {
    let url = cluster.create_database().unwrap();
    let setup = Setup::new(&url, scenario(4, Some((2, 60_000))), lease_s).await;
    let mut first = setup.worker(1);
    let (_serve, base) = setup.serve().await;
    let http = reqwest::Client::new();
    let id = submit(&http, &base, "taken over").await;
    let root = setup.root();
    loop {
        let events = runlog(&root, &id);
        if events
            .iter()
            .any(|e| e["kind"] == "llm_request" && e["step"] == 2)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _second = setup.worker(1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = now();
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    let resumed = wait_event(&root, &id, "run_resumed", Duration::from_secs(120)).await;
    println!(
        "takeover with lease {lease_s} s: a killed worker's run resumed by another {:.2} s after the kill",
        resumed - killed
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let cluster =
        PgCluster::start().expect("a private PostgreSQL cluster (scripts/install-test-deps.sh)");
    let runs = env_or("BENCH_RUNS", 200);
    let steps = env_or("BENCH_STEPS", 10);
    if std::env::var("BENCH_ONLY").as_deref() == Ok("per_step") {
        per_step(&cluster, 100).await;
        return;
    }
    queue_to_start(&cluster).await;
    per_step(&cluster, 100).await;
    for workers in [1, 2, 4] {
        throughput(&cluster, workers, runs, steps).await;
    }
    let leases = std::env::var("BENCH_LEASES").unwrap_or_else(|_| "2,5,10".to_owned());
    for lease in leases.split(',').filter_map(|l| l.trim().parse().ok()) {
        takeover(&cluster, lease).await;
    }
}
