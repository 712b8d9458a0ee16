//! Workers on one PostgreSQL, through the real front door (issue #10): `fabric serve` with
//! `store.queue: true` and `fabric worker` processes (release binaries), a private
//! PostgreSQL cluster, the scripted model server. Three figures (docs/BENCHMARKS.md):
//!
//! - queue-to-start latency: `POST /runs` to the run's `run_start` event, one run at a time
//!   to an idle worker;
//! - throughput of 1, 2 and 4 workers: R runs of S steps submitted at once, runs x steps per
//!   second until the last one ended;
//! - takeover time against the lease: a worker killed with SIGKILL while its run waits on the
//!   model, to the `run_resumed` event written by the other worker.
//!
//! `cargo bench -p fabric --bench queue_workers`; `BENCH_RUNS` (200), `BENCH_STEPS` (10),
//! `BENCH_LEASES` (2,5,10).
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
                "models:\n  test:\n    base_url: {}\n    model: qwen2.5:7b\n    backend: openai\ndefault_model_key: test\nrouting_model_key: test\nstore:\n  url: {url}\n  queue: true\n  lease_s: {lease_s}\nserver:\n  max_runs_in_flight: 100000\n",
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
    let mut latencies = Vec::new();
    for i in 0..60 {
        let t0 = now();
        let id = submit(&http, &base, &format!("run {i}")).await;
        let started = wait_event(&setup.root(), &id, "run_start", Duration::from_secs(30)).await;
        wait_event(&setup.root(), &id, "run_complete", Duration::from_secs(30)).await;
        if i >= 10 {
            latencies.push((started - t0) * 1000.0);
        }
    }
    latencies.sort_by(f64::total_cmp);
    println!(
        "queue to start (POST /runs to run_start, idle worker, {} runs): p50 {:.1} ms, p99 {:.1} ms",
        latencies.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
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
    queue_to_start(&cluster).await;
    for workers in [1, 2, 4] {
        throughput(&cluster, workers, runs, steps).await;
    }
    let leases = std::env::var("BENCH_LEASES").unwrap_or_else(|_| "2,5,10".to_owned());
    for lease in leases.split(',').filter_map(|l| l.trim().parse().ok()) {
        takeover(&cluster, lease).await;
    }
}
