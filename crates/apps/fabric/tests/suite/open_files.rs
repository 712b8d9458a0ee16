//! A serving fabric's open-files limit (issue #45, ADR-132): each run in flight holds its
//! runlog and its model connection open, and a login shell's soft limit (often 1,024) used to
//! fail runs past a few hundred with "Too many open files" although the hard limit allowed
//! far more.

use fabric_test_support::{Scenario, Turn};
use serde_json::json;

use super::serve_fixture::{Options, Served};

/// The soft and hard "Max open files" of a process.
fn open_files_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .expect("a Max open files line");
    let mut numbers = line
        .split_whitespace()
        .filter_map(|word| word.parse::<u64>().ok());
    (numbers.next().unwrap(), numbers.next().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_45_serve_holds_more_runs_than_the_soft_open_files_limit_it_was_started_with() {
    const RUNS: usize = 150;
    let mut scenario = finishing();
    // Every run waits on the model for the whole test, holding what it holds.
    scenario.latency_ms = 600_000;
    let served = Served::with(
        scenario,
        Options {
            config: "server:\n  max_runs_in_flight: 200\n",
            shell_first: Some("ulimit -Sn 128"),
            ..Options::default()
        },
    )
    .await;
    let pid = served.child.id().unwrap();
    let (soft, hard) = open_files_limits(pid);
    assert_eq!(soft, hard, "serve raises its soft limit to the hard one");
    assert!(soft > 128, "the hard limit here is {hard}");
    // 150 runlogs, and the server's own descriptors, do not fit in 128: before, the runs past
    // about a hundred ended `failed` and POST /runs answered 500.
    for n in 0..RUNS {
        let (status, body) = served
            .post_json(
                "/runs",
                json!({"prompt": format!("task {n}"), "pack": "engineering"}),
            )
            .await;
        assert_eq!(status, 202, "run {n}: {body}");
    }
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    assert!(
        fds > 128 + 20,
        "{fds} descriptors open: the runs hold theirs"
    );
}

fn finishing() -> Scenario {
    Scenario::new(vec![Turn::tool_call(
        "finish_task",
        json!({"summary": "done"}),
    )])
}

/// `fabric serve` with `config` appended, started after `shell_first`; its stderr is read
/// back from the returned file (in the returned directory) once the server is up.
async fn serve_logged(
    config: &'static str,
    shell_first: &'static str,
) -> (Served, tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let served = Served::with(
        finishing(),
        Options {
            config,
            shell_first: Some(shell_first),
            stderr: Some(log.clone()),
            ..Options::default()
        },
    )
    .await;
    // The server still serves, whatever it said: a warning is advice, not a refusal.
    let (status, _) = served.get_json("/health").await;
    assert_eq!(status, 200);
    (served, dir, log)
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_45_serve_warns_when_its_hard_limit_cannot_hold_the_runs_it_may_take() {
    let (served, _dir, log) =
        serve_logged("server:\n  max_runs_in_flight: 1000\n", "ulimit -n 200").await;
    assert_eq!(open_files_limits(served.child.id().unwrap()), (200, 200));
    // Said before the server answers its first request.
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains(
            "warning: the open-files limit is 200, enough for about 45 runs in flight, but server.max_runs_in_flight allows 1000"
        ),
        "{said}"
    );
    assert!(said.contains("at least 3064"), "{said}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_45_serve_says_nothing_of_a_limit_that_holds_its_runs() {
    // The default 64 runs need 64 * 3 + 64 = 256.
    let (_served, _dir, log) = serve_logged("", "ulimit -n 300").await;
    let said = std::fs::read_to_string(&log).unwrap();
    // The log is the server's, read after what it says at start (not an empty file).
    assert!(said.contains("note: no token"), "{said}");
    assert!(!said.contains("open-files limit"), "{said}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_45_doctor_warns_when_the_hard_limit_cannot_hold_the_runs_in_flight() {
    let fx = super::fixture::Fixture::with_backend(finishing(), "openai").await;
    let mut yaml = std::fs::read_to_string(&fx.config).unwrap();
    yaml.push_str("server:\n  max_runs_in_flight: 1000\n");
    std::fs::write(&fx.config, yaml).unwrap();
    let script = super::fixture::exec_after("ulimit -n 200");
    let limited = ["bash", "-c", script.as_str()];
    let run = fx.fabric_via(&limited, &["doctor"], &[], 60).await;
    assert!(
        run.stdout.contains(
            "[warn] open files: the open-files limit is 200, enough for about 45 runs in flight, but server.max_runs_in_flight allows 1000"
        ),
        "{}",
        run.stdout
    );
    // The same config under the hard limit this test has: enough.
    let run = fx.fabric(&["doctor"]).await;
    assert!(
        run.stdout.contains("[ok  ] open files: ")
            && run
                .stdout
                .contains("runs in flight (server.max_runs_in_flight: 1000)"),
        "{}",
        run.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_45_runs_past_the_hard_limit_fail_with_a_log_that_names_the_fix() {
    let mut scenario = finishing();
    scenario.latency_ms = 600_000;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    // Hard and soft 100: nothing to raise. Each run holds its runlog (the model's 16
    // connections are shared), so some of 120 runs find no descriptor left.
    let served = Served::with(
        scenario,
        Options {
            config: "server:\n  max_runs_in_flight: 200\n",
            shell_first: Some("ulimit -n 100"),
            stderr: Some(log.clone()),
            ..Options::default()
        },
    )
    .await;
    let mut refused = 0;
    for n in 0..120 {
        let (status, body) = served
            .post_json(
                "/runs",
                json!({"prompt": format!("task {n}"), "pack": "engineering"}),
            )
            .await;
        match status {
            202 => {}
            500 => refused += 1,
            _ => panic!("run {n}: {status} {body}"),
        }
    }
    assert!(refused > 0, "the limit of 100 held 120 runs");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("Too many open files") && said.contains("raise the open-files hard limit"),
        "{said}"
    );
}
