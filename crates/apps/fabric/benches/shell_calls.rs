//! What the OS sandbox costs per `shell` call, through the path a user takes (issue #15):
//! the `fabric` binary runs a task whose model (the scripted server) asks for N-1 `shell`
//! calls of `true`, then `finish_task`, once with `--sandbox off` and once with `--sandbox
//! strict` (Landlock, seccomp, limits, and where the host allows them the namespaces and,
//! for root, the switch to `nobody`), interleaved. The difference of the medians, divided by
//! the calls, is the sandbox's cost per call; `spawn_cost` in the sandbox crate splits it by
//! layer.
//!
//! Run: `cargo bench -p fabric --bench shell_calls` (`BENCH_STEPS`, 50; `BENCH_REPS`, 7).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use std::time::{Duration, Instant};

use fabric_test_support::{Scenario, ScriptedServer, Turn};
use serde_json::json;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One `fabric run` of `steps` steps under `sandbox`; its wall time.
async fn run(steps: usize, sandbox: &str) -> Duration {
    let mut turns: Vec<Turn> = (0..steps - 1)
        .map(|_| Turn::tool_call("shell", json!({"cmd": ["true"]})))
        .collect();
    turns.push(Turn::tool_call("finish_task", json!({"summary": "done"})));
    let server = ScriptedServer::start(Scenario::new(turns)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fabric.yaml");
    std::fs::write(
        &config,
        format!(
            "models:\n  bench:\n    base_url: {}\n    model: qwen2.5:7b\n    backend: openai\ndefault_model_key: bench\nrouting_model_key: bench\n",
            server.base_url()
        ),
    )
    .unwrap();
    let max_steps = (steps + 1).to_string();
    let started = Instant::now();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fabric"))
        .args(["run", "bench", "--pack", "engineering", "--json"])
        .args(["--sandbox", sandbox, "--max-steps", &max_steps])
        .arg("--config")
        .arg(&config)
        .arg("--workspace")
        .arg(dir.path().join(".fabric"))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env_remove("FABRIC_CONFIG_PATH")
        .env_remove("FABRIC_WORKSPACE")
        .env_remove("RUST_LOG")
        .env("XDG_CONFIG_HOME", dir.path().join("xdg"))
        .output()
        .await
        .unwrap();
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("\"completed\""),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.shutdown().await;
    elapsed
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let steps = env_or("BENCH_STEPS", 50).max(2);
    let reps = env_or("BENCH_REPS", 7).max(1);
    let probe = fabric_sandbox::probe();
    // Warm-up: page cache, the binary, the probe's first run.
    run(steps, "strict").await;
    let (mut off, mut strict) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        off.push(run(steps, "off").await.as_secs_f64() * 1000.0);
        strict.push(run(steps, "strict").await.as_secs_f64() * 1000.0);
    }
    let calls = (steps - 1) as f64;
    let (off, strict) = (median(off), median(strict));
    println!(
        "shell_calls: {steps} steps ({} shell calls of `true`), median of {reps} runs of `fabric run`",
        steps - 1
    );
    println!(
        "  host: namespaces {:?}, commands as nobody {:?}, root {}",
        probe.namespaces.is_ok(),
        probe.unprivileged.is_ok(),
        probe.root
    );
    println!(
        "  --sandbox off:    {off:8.1} ms per run, {:.3} ms per step",
        off / steps as f64
    );
    println!(
        "  --sandbox strict: {strict:8.1} ms per run, {:.3} ms per step",
        strict / steps as f64
    );
    println!(
        "  the sandbox costs {:.3} ms per shell call",
        (strict - off) / calls
    );
}
