//! Memory per run in flight through the real front door (issue #14): the `fabric` binary
//! serving over HTTP, the model behind real HTTP (the scripted server, in this process), and
//! a real HTTP client starting the runs.
//!
//! Each case starts a fresh `fabric serve` over the SQLite store, with the model answering
//! after a long latency so every run waits on its first model call. It starts `warm` runs,
//! reads the server's RSS (`/proc/<pid>/statm`), starts N more, and once every run has its
//! directory it samples the RSS for a few seconds and keeps the peak. Memory per run =
//! (peak - RSS with the warm runs) / N: the marginal cost of one more run, without the
//! process's fixed cost (code, pools, the first SQLite pages).
//!
//! Cases (`FABRIC_BENCH_SERVE_CASES`, comma-separated, each `endpoint:runs:limit`):
//! `runs` is `POST /runs` (the answer comes back once the run is prepared), `run` is
//! `POST /run` (the connection is held until the run ends); `limit` is
//! `models.<key>.max_concurrent_requests`, or `default` to leave it out (the default config:
//! 16 for an OpenAI-compatible server since issue #26; before, no limit, one connection to
//! the model server per run), or `none` for the config's largest limit (10,000): every run
//! holds its own model request, as with a server that can take them all (issue #45).
//!
//! Run: `cargo bench -p fabric --bench serve_memory` (figures in docs/BENCHMARKS.md).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use fabric_test_support::{Scenario, ScriptedServer, Turn, TurnBy};
use serde_json::json;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::task::JoinSet;

const DEFAULT_CASES: &str = "runs:1000:default,runs:10000:default,runs:10000:64,run:5000:64,\
     run:1000:none,runs:1000:none";

/// `none`: the largest `max_concurrent_requests` the config takes.
const NO_LIMIT: u32 = 10_000;

/// Runs started before the baseline is read.
const WARM: usize = 100;

/// Long enough that no run gets its first answer while the case is measured.
const MODEL_LATENCY_MS: u64 = 600_000;

fn rss_bytes(pid: u32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Descriptors the server holds open (`/proc/<pid>/fd`): what bounds the runs one process can
/// hold in flight under `ulimit -n`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| entries.count())
        .unwrap_or(0)
}

/// Runs that have their directory under the workspace root's `runs/`.
fn runs_started(root: &Path) -> usize {
    std::fs::read_dir(root.join("runs"))
        .map(|entries| entries.count())
        .unwrap_or(0)
}

struct Case {
    endpoint: String,
    runs: usize,
    limit: Option<u32>,
}

fn parse_cases(text: &str) -> Vec<Case> {
    text.split(',')
        .map(|case| {
            let parts: Vec<&str> = case.split(':').collect();
            assert_eq!(parts.len(), 3, "a case is endpoint:runs:limit, got {case}");
            assert!(
                parts[0] == "runs" || parts[0] == "run",
                "endpoint is runs or run"
            );
            Case {
                endpoint: parts[0].to_owned(),
                runs: parts[1].parse().expect("runs is a number"),
                limit: match parts[2] {
                    "default" => None,
                    "none" => Some(NO_LIMIT),
                    n => Some(n.parse().expect("limit is a number, `none` or `default`")),
                },
            }
        })
        .collect()
}

/// Starts `fabric serve` over a config pointing at `model_url`; returns the child and the
/// base URL it printed.
async fn serve(
    dir: &Path,
    model_url: &str,
    case: &Case,
) -> (tokio::process::Child, String, std::path::PathBuf) {
    let limit = case
        .limit
        .map(|n| format!("    max_concurrent_requests: {n}\n"))
        .unwrap_or_default();
    let config = dir.join("fabric.yaml");
    std::fs::write(
        &config,
        format!(
            "models:\n  bench:\n    base_url: {model_url}\n    model: qwen2.5:7b\n    backend: openai\n    timeout_s: 3600\n{limit}default_model_key: bench\nrouting_model_key: bench\nserver:\n  max_runs_in_flight: 100000\n"
        ),
    )
    .unwrap();
    let root = dir.join(".fabric");
    // `FABRIC_BENCH_SERVE_WRAPPER="heaptrack -o /tmp/serve"` runs the server under a profiler to find where
    // the memory goes (the RSS figures are then the wrapper's, not the server's).
    let mut command = match std::env::var("FABRIC_BENCH_SERVE_WRAPPER") {
        Ok(wrapper) => {
            let mut words = wrapper.split_whitespace();
            let mut command = Command::new(words.next().expect("a wrapper command"));
            command.args(words).arg(env!("CARGO_BIN_EXE_fabric"));
            command
        }
        Err(_) => Command::new(env!("CARGO_BIN_EXE_fabric")),
    };
    let mut child = command
        .args(["serve", "--port", "0"])
        .arg("--config")
        .arg(&config)
        .arg("--workspace")
        .arg(&root)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("FABRIC_CONFIG_PATH")
        .env_remove("FABRIC_WORKSPACE")
        .env_remove("FABRIC_API_TOKEN")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .process_group(0)
        .spawn()
        .expect("fabric serve starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // A wrapper may print lines of its own first.
    let base = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("fabric serve says where it listens");
        if let Some(base) = line.strip_prefix("listening on ") {
            break base.to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, base, root)
}

/// Starts `count` runs through `endpoint`. `POST /runs` answers once the run is prepared, so
/// those are awaited here (at most 32 at once, as a client with a small pool would);
/// `POST /run` holds its connection until the run ends, so those go on in `held`.
async fn start_runs(
    http: &reqwest::Client,
    base: &str,
    endpoint: &str,
    count: usize,
    held: &mut JoinSet<()>,
) {
    let url = format!("{base}/{endpoint}");
    let body = json!({"prompt": "Read the notes and finish.", "pack": "engineering"});
    if endpoint == "run" {
        for _ in 0..count {
            let (http, url, body) = (http.clone(), url.clone(), body.clone());
            held.spawn(async move {
                // Ends with the server: the run never gets its answer.
                let _ = http.post(&url).json(&body).send().await;
            });
        }
        return;
    }
    let mut set = JoinSet::new();
    for i in 0..count {
        if i >= 32 {
            set.join_next().await.unwrap().unwrap();
        }
        let (http, url, body) = (http.clone(), url.clone(), body.clone());
        set.spawn(async move {
            let response = http.post(&url).json(&body).send().await.unwrap();
            assert_eq!(response.status().as_u16(), 202, "POST /runs answers 202");
        });
    }
    while let Some(done) = set.join_next().await {
        done.unwrap();
    }
}

/// Waits until `target` runs have their directory, for at most `within`.
async fn wait_started(root: &Path, target: usize, within: Duration) -> Duration {
    let started = Instant::now();
    while runs_started(root) < target {
        assert!(
            started.elapsed() < within,
            "only {} of {target} runs started within {within:?}",
            runs_started(root)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

/// What one case measured.
struct Measured {
    kib_per_run: f64,
    base_mib: f64,
    submit: Duration,
    /// Descriptors per run at the peak, over the baseline's.
    fds_per_run: f64,
}

async fn measure(case: &Case, model_url: &str) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, base, root) = serve(dir.path(), model_url, case).await;
    let pid = child.id().unwrap();
    let http = reqwest::Client::new();
    let mut held = JoinSet::new();
    start_runs(&http, &base, &case.endpoint, WARM, &mut held).await;
    wait_started(&root, WARM, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = rss_bytes(pid);
    let fds_before = open_fds(pid);
    let started = Instant::now();
    start_runs(&http, &base, &case.endpoint, case.runs, &mut held).await;
    wait_started(&root, WARM + case.runs, Duration::from_secs(600)).await;
    let submit = started.elapsed();
    // The last runs are still on their way to the model call: sample for a while.
    let (mut peak, mut fds) = (0, 0);
    for _ in 0..30 {
        peak = peak.max(rss_bytes(pid));
        fds = fds.max(open_fds(pid));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // SIGTERM to the whole group, so a wrapper's server ends cleanly and writes its profile.
    let _ = std::process::Command::new("kill")
        .args(["-TERM", "--", &format!("-{pid}")])
        .status();
    if tokio::time::timeout(Duration::from_secs(120), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
    held.abort_all();
    let runs = case.runs as f64;
    Measured {
        kib_per_run: peak.saturating_sub(before) as f64 / runs / 1024.0,
        base_mib: before as f64 / 1024.0 / 1024.0,
        submit,
        fds_per_run: fds.saturating_sub(fds_before) as f64 / runs,
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let cases = std::env::var("FABRIC_BENCH_SERVE_CASES").unwrap_or_else(|_| DEFAULT_CASES.into());
    let mut scenario = Scenario::new(vec![
        Turn::tool_call("list_files", json!({"path": "."})),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ]);
    scenario.turn_by = TurnBy::Conversation;
    scenario.latency_ms = MODEL_LATENCY_MS;
    let server = ScriptedServer::start(scenario).await.unwrap();
    println!(
        "runs in flight through `fabric serve` (SQLite store, model over HTTP answering after {} s)",
        MODEL_LATENCY_MS / 1000
    );
    println!(
        "{:>9} {:>7} {:>6} {:>10} {:>12} {:>10} {:>8}",
        "endpoint", "runs", "limit", "KiB/run", "base MiB", "start s", "fds/run"
    );
    for case in parse_cases(&cases) {
        let m = measure(&case, &server.base_url()).await;
        println!(
            "{:>9} {:>7} {:>6} {:>10.1} {:>12.1} {:>10.1} {:>8.2}",
            format!("/{}", case.endpoint),
            case.runs,
            case.limit.map_or("default".to_owned(), |n| n.to_string()),
            m.kib_per_run,
            m.base_mib,
            m.submit.as_secs_f64(),
            m.fds_per_run,
        );
    }
}
