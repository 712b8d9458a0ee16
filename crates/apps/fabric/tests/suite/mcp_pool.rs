//! MCP pooling through `fabric serve` (issue #45, ADR-117): a long-lived fabric keeps stdio
//! servers warm, started ahead of the runs that name their definition, and each run still
//! opens its own session. The probe server (tests/mcp/pool_probe_server.py) says which
//! process and session answer, the roots it was given and how many calls it served.

use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};
use std::time::Duration;

use super::fixture::{Fixture, of_kind, pids_where, process_with};
use super::serve_fixture::{Options, Served};

fn probe() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp/pool_probe_server.py")
        .display()
        .to_string()
}

/// How a specialist's server is started, and the tool it calls.
struct Server<'a> {
    command: &'a str,
    args: &'a str,
    tool: &'a str,
    /// More keys of the server (`\n    pool: false`).
    extra: &'a str,
}

/// A specialist `id` whose server is named `server`.
fn write_specialist(fx: &Fixture, id: &str, server: &str, how: &Server) {
    let dir = fx.workspace_root().join("specialists");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let body = format!(
        "---
name: {id}
description: Asks the server who answers.
tools: [mcp__{server}__{tool}]
mcp_servers:
  - name: {server}
    command: {command}
    args: [{args}]
    required: true{extra}
---
Ask the server.
",
        tool = how.tool,
        command = how.command,
        args = how.args,
        extra = how.extra,
    );
    std::fs::write(dir.join(format!("{id}.md")), body).expect("write specialist");
}

/// Each run: one call of `tool` of its server, then finish.
fn turns(servers: &[&str], tool: &str) -> Vec<Turn> {
    servers
        .iter()
        .flat_map(|s| {
            [
                Turn::tool_call(format!("mcp__{s}__{tool}"), json!({})),
                Turn::tool_call("finish_task", json!({"summary": "asked"})),
            ]
        })
        .collect()
}

/// `fabric serve` with a specialist per `(id, server, extra keys)`, each with the probe.
async fn serve(servers: &[&str], specialists: &[(&str, &str, &str)], marker: &str) -> Served {
    serve_with(servers, specialists, marker, "").await
}

/// [`serve`] with `config` appended to the fabric's config.
async fn serve_with(
    servers: &[&str],
    specialists: &[(&str, &str, &str)],
    marker: &str,
    config: &'static str,
) -> Served {
    let scenario = Scenario::new(turns(servers, "whoami"));
    serve_scenario(scenario, specialists, marker, config).await
}

/// [`serve_with`] the model answering as `scenario` says.
async fn serve_scenario(
    scenario: Scenario,
    specialists: &[(&str, &str, &str)],
    marker: &str,
    config: &'static str,
) -> Served {
    let fx = Fixture::with_backend(scenario, "openai").await;
    fx.trust_own_files();
    for (id, server, extra) in specialists {
        let args = format!("{}, {marker}", probe());
        let how = Server {
            command: "python3",
            args: &args,
            tool: "whoami",
            extra,
        };
        write_specialist(&fx, id, server, &how);
    }
    let options = Options {
        config,
        ..Options::default()
    };
    Served::on(fx, options).await
}

/// What one run saw: its `ready` event, the probe's answer, its log messages, its workspace.
struct Seen {
    ready: Value,
    answer: Value,
    messages: Vec<String>,
    workspace: String,
}

async fn run(s: &Served, pack: &str) -> Seen {
    let id = start_at_once(s, pack, 1).await.remove(0);
    s.wait_status(&id, "completed").await;
    seen_in(s, &id)
}

/// What the completed run `id` saw.
fn seen_in(s: &Served, id: &str) -> Seen {
    let events = s.runlog(id);
    let ready = of_kind(&events, "mcp_server")
        .into_iter()
        .find(|e| e["payload"]["status"] == "ready")
        .unwrap_or_else(|| panic!("no ready server: {events:#?}"))["payload"]
        .clone();
    let result = of_kind(&events, "tool_result")
        .into_iter()
        .find_map(|e| e["payload"]["result"].as_str())
        .unwrap_or_else(|| panic!("no result: {events:#?}"));
    let messages = of_kind(&events, "mcp_message")
        .iter()
        .filter_map(|e| e["payload"]["message"].as_str().map(str::to_owned))
        .collect();
    let workspace = events[0]["payload"]["workspace"]
        .as_str()
        .expect("run_start.workspace")
        .to_owned();
    Seen {
        ready,
        answer: serde_json::from_str(result).expect("the probe answers JSON"),
        messages,
        workspace,
    }
}

/// Waits until a process with `marker` on its command line runs (a warm one, between runs).
/// Waits until `but` (a run's own process, which may still be ending) is gone and a process
/// with `marker` runs: the pool's warm replacement.
async fn wait_for_another_process(marker: &str, but: &Value) {
    for _ in 0..400 {
        let pids = pids_with(marker);
        if !pids.is_empty() && !pids.iter().any(|pid| json!(pid) == *but) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no process with {marker} besides {but} started");
}

async fn wait_for_process(marker: &str) {
    for _ in 0..100 {
        if process_with(marker) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no process with {marker} started");
}

/// How many runs [`run_until_warm`] makes at most (the scenario needs turns for each).
const WARM_TRIES: usize = 10;

/// Runs `pack` until a run gets a warm process: the pool hands a process out once it has
/// answered the pool's `server/discover`, which under load takes a moment after the process
/// exists, so a run started before then starts its own.
async fn run_until_warm(s: &Served, pack: &str) -> Seen {
    let mut seen = Vec::new();
    for _ in 0..WARM_TRIES {
        let next = run(s, pack).await;
        if next.ready["warm"] == true {
            return next;
        }
        seen.push(next.ready);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!("no run got a warm process: {seen:?}");
}

/// The process ids of the processes with `marker` on their command line.
fn pids_with(marker: &str) -> Vec<i32> {
    pids_where("cmdline", |c| String::from_utf8_lossy(c).contains(marker))
}

fn uri(workspace: &str) -> String {
    format!("file://{workspace}")
}

#[tokio::test]
async fn issue_45_two_specialists_naming_one_server_get_a_warm_process_and_sessions_of_their_own() {
    let marker = format!("pool-probe-two-{}", std::process::id());
    // Turns for the first run, then for as many runs as `run_until_warm` may make.
    let servers: Vec<&str> = std::iter::once("probe")
        .chain(std::iter::repeat_n("me", WARM_TRIES))
        .collect();
    let s = serve(
        &servers,
        &[("alpha", "probe", ""), ("beta", "me", "")],
        &marker,
    )
    .await;
    let first = run(&s, "alpha").await;
    assert_eq!(first.ready["warm"], false, "{}", first.ready);
    // The first run left a warm process of the definition behind it, named by neither run.
    wait_for_process(&marker).await;
    let second = run_until_warm(&s, "beta").await;
    // A session of its own: another `initialize`, another session id, one call served.
    assert_ne!(first.answer["session"], second.answer["session"]);
    assert_eq!(first.answer["calls"], 1);
    assert_eq!(second.answer["calls"], 1, "{}", second.answer);
    // The roots each run sees are its own workspace.
    assert_eq!(first.answer["roots"], json!([uri(&first.workspace)]));
    assert_eq!(second.answer["roots"], json!([uri(&second.workspace)]));
    assert_ne!(first.workspace, second.workspace);
    // Each run's notifications are its session's only.
    let session = |seen: &Seen| format!("session {}", seen.answer["session"].as_str().unwrap());
    assert_eq!(first.messages, [session(&first)]);
    assert_eq!(second.messages, [session(&second)]);
}

#[tokio::test]
async fn issue_45_a_warm_server_killed_between_runs_is_replaced_and_the_run_goes_on() {
    let marker = format!("pool-probe-killed-{}", std::process::id());
    // Turns for two runs, then for as many as `run_until_warm` may make.
    let servers = vec!["probe"; 2 + WARM_TRIES];
    let s = serve(&servers, &[("alpha", "probe", "")], &marker).await;
    run(&s, "alpha").await;
    wait_for_process(&marker).await;
    for pid in pids_with(&marker) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    let after_kill = run(&s, "alpha").await;
    // The dead process is not handed out: the run starts its own and completes.
    assert_eq!(after_kill.ready["warm"], false, "{}", after_kill.ready);
    assert_eq!(after_kill.answer["calls"], 1);
    // Its own process may still be ending: the replacement is another one.
    wait_for_another_process(&marker, &after_kill.answer["pid"]).await;
    run_until_warm(&s, "alpha").await;
}

#[tokio::test]
async fn issue_45_a_server_with_pool_false_is_never_pooled() {
    let marker = format!("pool-probe-stateful-{}", std::process::id());
    let s = serve(
        &["probe", "probe"],
        &[("alpha", "probe", "\n    pool: false")],
        &marker,
    )
    .await;
    for _ in 0..2 {
        let seen = run(&s, "alpha").await;
        assert_eq!(seen.ready.get("warm"), None, "{}", seen.ready);
        // Nothing of the server is left between runs: no warm process of it.
        assert!(
            super::fixture::gone_within(&marker, Duration::from_secs(5)),
            "a pool: false server left a process"
        );
    }
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_45_a_2026_07_28_server_is_pooled_and_each_run_gets_its_own_roots() {
    // The Python SDK's server answers `server/discover`: the pool's question is answered,
    // and the run still discovers it on its own and asks its roots in its own call.
    let Some((python, script)) = python_server("client_features_server.py") else {
        return;
    };
    let fx = Fixture::with_backend(Scenario::new(turns(&["helper"; 2], "roots")), "openai").await;
    fx.trust_own_files();
    let how = Server {
        command: &python,
        args: &script,
        tool: "roots",
        extra: "\n    startup_timeout_s: 60",
    };
    write_specialist(&fx, "helper_user", "helper", &how);
    let s = Served::on(fx, Options::default()).await;
    let mut seen = Vec::new();
    for _ in 0..2 {
        let (status, body) = s
            .post_json("/runs", json!({"prompt": "roots?", "pack": "helper_user"}))
            .await;
        assert_eq!(status, 202, "{body}");
        let id = body["run_id"].as_str().expect("run id").to_owned();
        s.wait_status(&id, "completed").await;
        let events = s.runlog(&id);
        let ready = of_kind(&events, "mcp_server")
            .into_iter()
            .find(|e| e["payload"]["status"] == "ready")
            .map(|e| e["payload"]["warm"].clone());
        let roots: Value = of_kind(&events, "tool_result")
            .into_iter()
            .find_map(|e| e["payload"]["result"].as_str())
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or_else(|| panic!("no roots: {events:#?}"));
        let workspace = events[0]["payload"]["workspace"]
            .as_str()
            .unwrap()
            .to_owned();
        seen.push((ready, roots, workspace));
        // The pool starts its processes while the first run goes on; give it a moment.
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    assert_eq!(seen[0].0, Some(json!(false)), "{seen:?}");
    assert_eq!(seen[1].0, Some(json!(true)), "{seen:?}");
    for (_, roots, workspace) in &seen {
        assert_eq!(roots, &json!([uri(workspace)]));
    }
    assert_ne!(seen[0].2, seen[1].2);
}

#[tokio::test]
async fn issue_45_the_pool_keeps_its_size_and_stops_idle_processes() {
    let marker = format!("pool-probe-idle-{}", std::process::id());
    let s = serve_with(
        &["probe"],
        &[("alpha", "probe", "")],
        &marker,
        "\nmcp_pool:\n  size: 1\n  idle_timeout_s: 2\n",
    )
    .await;
    run(&s, "alpha").await;
    wait_for_process(&marker).await;
    // One warm process (`size: 1`), once the run's own has ended with the run (which takes a
    // moment under load).
    let mut pids = pids_with(&marker);
    for _ in 0..100 {
        if pids.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        pids = pids_with(&marker);
    }
    assert_eq!(pids.len(), 1, "{pids:?}");
    // Unused for `idle_timeout_s`, it is stopped.
    assert!(
        super::fixture::gone_within(&marker, Duration::from_secs(6)),
        "the idle warm process was not stopped"
    );
}

#[tokio::test]
async fn issue_45_warm_processes_end_with_the_fabric() {
    let marker = format!("pool-probe-ends-{}", std::process::id());
    let mut s = serve(&["probe"], &[("alpha", "probe", "")], &marker).await;
    run(&s, "alpha").await;
    wait_for_process(&marker).await;
    // Even a SIGKILL of the fabric, which runs no cleanup: the parent-death signal.
    s.child.kill().await.expect("kill fabric serve");
    assert!(
        super::fixture::gone_within(&marker, Duration::from_secs(5)),
        "a warm process outlived the fabric"
    );
}

/// The installed Python SDK's interpreter and `tests/mcp/SCRIPT`; `None` without the test
/// dependencies.
fn python_server(script: &str) -> Option<(String, String)> {
    let deps = fabric_test_support::test_deps()?;
    let python = deps.join("venv/bin/python").display().to_string();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp")
        .join(script)
        .display()
        .to_string();
    Some((python, script))
}

/// The 2026-07-28 probe (tests/mcp/shared_server.py) on the installed Python SDK, with
/// `marker` on its command line; `None` without the test dependencies.
fn shared_probe(marker: &str) -> Option<(String, String)> {
    let (python, script) = python_server("shared_server.py")?;
    Some((python, format!("{script}, {marker}")))
}

/// `fabric serve` whose specialist `sharer` calls the shared probe's `whoami` with `hold`
/// seconds, then finishes; every run takes the same two turns.
async fn serve_shared(marker: &str, hold: f64) -> Option<Served> {
    serve_shared_with(marker, &[hold], "", 0).await
}

/// `fabric serve` whose specialist `sharer` calls `whoami` once for each of `holds`, then
/// finishes, with `config` appended to the fabric's config, the model answering after
/// `latency_ms`.
async fn serve_shared_with(
    marker: &str,
    holds: &[f64],
    config: &'static str,
    latency_ms: u64,
) -> Option<Served> {
    let (python, args) = shared_probe(marker)?;
    let mut turns: Vec<Turn> = holds
        .iter()
        .map(|hold| Turn::tool_call("mcp__shared__whoami", json!({"hold": hold})))
        .collect();
    turns.push(Turn::tool_call("finish_task", json!({"summary": "asked"})));
    let mut scenario = Scenario::new(turns);
    scenario.turn_by = fabric_test_support::TurnBy::Conversation;
    scenario.latency_ms = latency_ms;
    let fx = Fixture::with_backend(scenario, "openai").await;
    fx.trust_own_files();
    let how = Server {
        command: &python,
        args: &args,
        tool: "whoami",
        extra: "\n    startup_timeout_s: 60",
    };
    write_specialist(&fx, "sharer", "shared", &how);
    let options = Options {
        config,
        ..Options::default()
    };
    Some(Served::on(fx, options).await)
}

/// Starts a run of `sharer`; its id.
async fn start_shared(s: &Served) -> String {
    start_at_once(s, "sharer", 1).await.remove(0)
}

/// Runs of `sharer` one after another until one gets a share of a pooled process (the
/// first starts its own, and the pool's processes, started beside it, take a moment to
/// answer `server/discover`); the pool's process ids then.
async fn warm_up_shared(s: &Served, marker: &str) -> Vec<i32> {
    for _ in 0..10 {
        let id = start_shared(s).await;
        s.wait_status(&id, "completed").await;
        let ready = payload_where(&s.runlog(&id), "mcp_server", "status", "ready").clone();
        if ready.get("shared").is_some() {
            // The runs' own processes are gone with their runs.
            tokio::time::sleep(Duration::from_millis(300)).await;
            return pids_with(marker);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!("no run got a share of the pool's processes of the 2026-07-28 probe");
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_45_twenty_runs_in_flight_share_two_processes_each_with_its_own_roots_and_progress() {
    let marker = format!("shared-probe-twenty-{}", std::process::id());
    let Some(s) = serve_shared(&marker, 1.5).await else {
        return;
    };
    let pool = warm_up_shared(&s, &marker).await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(start_shared(&s).await);
    }
    // While they are in flight, no more processes of the server than the pool's.
    let mut most = 0;
    for _ in 0..20 {
        most = most.max(pids_with(&marker).len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (pids, readies) = own_roots_and_progress(&s, &ids).await;
    let mut shared_most = 0;
    for ready in &readies {
        assert_eq!(ready["warm"], true, "{ready}");
        shared_most = shared_most.max(ready["shared"].as_u64().expect("shared"));
    }
    assert!(pids.len() <= 2, "{pids:?}");
    assert!(
        pids.iter().all(|p| pool.contains(&(*p as i32))),
        "{pids:?} {pool:?}"
    );
    assert!(
        most <= 2,
        "{most} processes of the server while 20 runs were in flight"
    );
    assert!(shared_most > 1, "no run shared a process");
}

/// Waits for each of the `sharer` runs `ids` to complete and checks that the server was given
/// the run's own workspace as its roots and that the progress of the run's call, and no other
/// run's, is in its runlog; the process ids that answered, and each run's `ready` payload.
async fn own_roots_and_progress(
    s: &Served,
    ids: &[String],
) -> (std::collections::BTreeSet<i64>, Vec<Value>) {
    let mut pids = std::collections::BTreeSet::new();
    let mut readies = Vec::new();
    for id in ids {
        s.wait_status(id, "completed").await;
        let events = s.runlog(id);
        let workspace = events[0]["payload"]["workspace"].as_str().unwrap();
        readies.push(payload_where(&events, "mcp_server", "status", "ready").clone());
        let answer: Value = of_kind(&events, "tool_result")
            .into_iter()
            .find_map(|e| serde_json::from_str(e["payload"]["result"].as_str()?).ok())
            .unwrap_or_else(|| panic!("no answer: {events:#?}"));
        // The roots the server was given with this run's call are this run's workspace.
        assert_eq!(answer["roots"], json!([uri(workspace)]), "{id}");
        pids.insert(answer["pid"].as_i64().expect("pid"));
        // The progress of this run's call, and no other run's, is in its runlog.
        let progress: Vec<String> = of_kind(&events, "mcp_message")
            .iter()
            .filter(|e| e["payload"]["type"] == "progress")
            .map(|e| e["payload"]["message"].as_str().unwrap_or("").to_owned())
            .collect();
        assert_eq!(
            progress,
            [format!("pid {} roots {}", answer["pid"], uri(workspace))],
            "{id}"
        );
    }
    (pids, readies)
}

/// Counts the processes `pids` finds every 50 ms on a thread of its own until the returned
/// stop is called, which answers the most seen at once.
fn most_processes(pids: impl Fn() -> Vec<i32> + Send + 'static) -> impl FnOnce() -> usize {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let sampler = std::thread::spawn(move || {
        let mut most = 0;
        while !stopped.load(std::sync::atomic::Ordering::Acquire) {
            most = most.max(pids().len());
            std::thread::sleep(Duration::from_millis(50));
        }
        most
    });
    move || {
        stop.store(true, std::sync::atomic::Ordering::Release);
        sampler.join().expect("the sampler")
    }
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_45_twenty_runs_arriving_at_once_on_a_cold_serve_start_at_most_two_processes() {
    // No run of the server before them: the pool does not know its revision yet, so the runs
    // wait for its first start instead of each starting a process (ADR-124).
    let marker = format!("shared-probe-cold-{}", std::process::id());
    let Some(s) = serve_shared(&marker, 1.5).await else {
        return;
    };
    burst_of_shares(&s, &marker, 20).await;
}

/// Starts `count` runs of `sharer` at once and waits for them; checks that at most 2
/// processes with `marker` ran meanwhile, and that each run got a share of one of them and
/// saw its own roots and progress.
async fn burst_of_shares(s: &Served, marker: &str, count: usize) {
    let stop = most_processes({
        let marker = marker.to_owned();
        move || pids_with(&marker)
    });
    // `POST /runs` answers at once: the runs arrive well within the server's first start.
    let ids = start_at_once(s, "sharer", count).await;
    settle(s, &ids, Duration::from_secs(60)).await;
    let most = stop();
    assert!(
        most <= 2,
        "{most} processes of the server for {count} runs arriving at once"
    );
    let (pids, readies) = own_roots_and_progress(s, &ids).await;
    for ready in &readies {
        // A share of the pool's process, not a process of the run's own.
        assert!(ready["shared"].as_u64().is_some(), "{ready}");
    }
    assert!(pids.len() <= 2, "{pids:?}");
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_45_after_an_idle_stop_runs_arriving_at_once_still_start_at_most_two_processes() {
    // The pool remembers that the definition is shared: once its processes were stopped for
    // idleness, the next runs arriving together wait for its restart again (ADR-124).
    let marker = format!("shared-probe-restart-{}", std::process::id());
    let config = "\nmcp_pool:\n  idle_timeout_s: 2\n";
    let Some(s) = serve_shared_with(&marker, &[1.0], config, 0).await else {
        return;
    };
    let id = start_shared(&s).await;
    s.wait_status(&id, "completed").await;
    assert!(
        super::fixture::gone_within(&marker, Duration::from_secs(12)),
        "the idle processes were not stopped: {:?}",
        pids_with(&marker)
    );
    burst_of_shares(&s, &marker, 10).await;
}

/// Waits up to `limit` until none of the runs `ids` is queued, starting or running.
async fn settle(s: &Served, ids: &[String], limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    for id in ids {
        loop {
            let (_, body) = s.get_json(&format!("/runs/{id}/status")).await;
            let live =
                ["queued", "starting", "running"].contains(&body["status"].as_str().unwrap_or(""));
            if !live || tokio::time::Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Starts `count` runs of `pack` one right after another (`POST /runs` answers at once);
/// their ids.
async fn start_at_once(s: &Served, pack: &str, count: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..count {
        let (status, body) = s
            .post_json("/runs", json!({"prompt": "who answers?", "pack": pack}))
            .await;
        assert_eq!(status, 202, "{body}");
        ids.push(body["run_id"].as_str().expect("run id").to_owned());
    }
    ids
}

#[tokio::test]
async fn issue_45_three_runs_arriving_at_once_on_a_cold_serve_of_a_2025_11_25_server_get_a_process_each()
 {
    // The probe refuses `server/discover`: once the pool's first start says so, the runs
    // waiting for it take it or start their own, as before (ADR-124).
    let marker = format!("pool-probe-cold-{}", std::process::id());
    // Each run takes the turns of its own conversation, however the three interleave.
    let mut scenario = Scenario::new(turns(&["probe"], "whoami"));
    scenario.turn_by = fabric_test_support::TurnBy::Conversation;
    let s = serve_scenario(scenario, &[("alpha", "probe", "")], &marker, "").await;
    let ids = start_at_once(&s, "alpha", 3).await;
    let mut seen = Vec::new();
    for id in &ids {
        s.wait_status(id, "completed").await;
        seen.push(seen_in(&s, id));
    }
    let distinct = |key: &str| {
        seen.iter()
            .map(|x| x.answer[key].to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    assert_eq!(
        distinct("pid"),
        3,
        "{:?}",
        seen.iter().map(|x| &x.answer).collect::<Vec<_>>()
    );
    assert_eq!(distinct("session"), 3);
    for x in &seen {
        assert_eq!(x.answer["calls"], 1, "{}", x.answer);
        assert_eq!(x.ready.get("shared"), None, "{}", x.ready);
        assert_eq!(x.answer["roots"], json!([uri(&x.workspace)]));
    }
}

#[tokio::test]
async fn issue_45_runs_waiting_for_a_cold_start_that_fails_each_get_the_error_and_none_hangs() {
    // A server that exits at once: the pool's first start fails, and the runs waiting for it
    // do not wait on: each starts its own, as without a pool, and fails with its reason.
    let fx = Fixture::with_backend(Scenario::new(turns(&["gone"], "whoami")), "openai").await;
    fx.trust_own_files();
    let how = Server {
        command: "python3",
        args: "-c, 'import sys; sys.exit(3)'",
        tool: "whoami",
        extra: "",
    };
    write_specialist(&fx, "quitter", "gone", &how);
    let s = Served::on(fx, Options::default()).await;
    let started = std::time::Instant::now();
    let ids = start_at_once(&s, "quitter", 3).await;
    for id in &ids {
        s.wait_status(id, "failed").await;
        let events = s.runlog(id);
        let failed = payload_where(&events, "mcp_server", "status", "failed");
        let error = failed["error"].as_str().unwrap_or_default();
        assert!(error.contains("`gone`"), "{failed}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the runs took {:?}",
        started.elapsed()
    );
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_45_a_shared_server_killed_with_runs_in_flight_fails_their_calls_and_the_next_run_works()
 {
    let marker = format!("shared-probe-killed-{}", std::process::id());
    // Each run: a call held 3 s (killed in flight), then another. The model answers after
    // 0.5 s, so every killed process has finished dying (a big process's exit takes a
    // moment under load) before a run's next call looks for a live one.
    let Some(s) = serve_shared_with(&marker, &[3.0, 0.0], "", 500).await else {
        return;
    };
    let killed = warm_up_shared(&s, &marker).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(start_shared(&s).await);
    }
    // Each call is in flight (the server holds it 3 s) when the server is killed.
    for id in &ids {
        let runlog =
            s.fx.workspace_root()
                .join(format!("runs/{id}/runlog.jsonl"));
        for _ in 0..200 {
            let text = std::fs::read_to_string(&runlog).unwrap_or_default();
            if text.contains(r#""kind":"tool_call""#) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Every process of the server at once, so no run's next call reaches one still dying.
    let pids: Vec<String> = pids_with(&marker).iter().map(i32::to_string).collect();
    let _ = std::process::Command::new("kill")
        .arg("-9")
        .args(&pids)
        .status();
    for id in &ids {
        // The run goes on: the model reads the error and finishes.
        s.wait_status(id, "completed").await;
        let events = s.runlog(id);
        let error = of_kind(&events, "tool_error")
            .into_iter()
            .find(|e| e["payload"]["tool"] == "mcp__shared__whoami")
            .unwrap_or_else(|| panic!("no tool error: {events:#?}"))["payload"]["error_message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            error.starts_with("MCP server `shared` stopped while running `mcp__shared__whoami`"),
            "{error}"
        );
        assert!(
            error.contains("being restarted: call the tool again"),
            "{error}"
        );
        // The run's next call is answered by a restarted process of the pool.
        let answer: Value = of_kind(&events, "tool_result")
            .into_iter()
            .find_map(|e| serde_json::from_str(e["payload"]["result"].as_str()?).ok())
            .unwrap_or_else(|| panic!("the next call got no answer: {events:#?}"));
        let pid = answer["pid"].as_i64().expect("pid") as i32;
        assert!(!killed.contains(&pid), "{pid} was killed");
    }
    let next = start_shared(&s).await;
    s.wait_status(&next, "completed").await;
    let answered = of_kind(&s.runlog(&next), "tool_result")
        .into_iter()
        .any(|e| {
            e["payload"]["result"]
                .as_str()
                .is_some_and(|r| r.contains("pid"))
        });
    assert!(
        answered,
        "the next run got no answer: {:#?}",
        s.runlog(&next)
    );
}

/// The process ids of the processes whose environment has `MARK=<marker>`.
fn pids_marked(marker: &str) -> Vec<i32> {
    let wanted = format!("MARK={marker}");
    pids_where("environ", |env| {
        env.split(|b| *b == 0).any(|var| var == wanted.as_bytes())
    })
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_45_a_2025_11_25_server_still_gets_a_process_of_its_own_per_run_in_flight() {
    // server-everything refuses `server/discover`: its processes are never shared.
    let Some(deps) = fabric_test_support::test_deps() else {
        return;
    };
    let script =
        deps.join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let marker = format!("everything-own-{}", std::process::id());
    let tool = "trigger-long-running-operation";
    let mut scenario = Scenario::new(vec![
        Turn::tool_call(
            format!("mcp__everything__{tool}"),
            json!({"duration": 2, "steps": 2}),
        ),
        Turn::tool_call("finish_task", json!({"summary": "held"})),
    ]);
    scenario.turn_by = fabric_test_support::TurnBy::Conversation;
    let fx = Fixture::with_backend(scenario, "openai").await;
    fx.trust_own_files();
    let args = format!("{}, stdio", script.display());
    let extra = format!("\n    startup_timeout_s: 60\n    env:\n      MARK: {marker}");
    let how = Server {
        command: "node",
        args: &args,
        tool,
        extra: &extra,
    };
    write_specialist(&fx, "everyone", "everything", &how);
    let s = Served::on(fx, Options::default()).await;
    let start = || async {
        let (status, body) = s
            .post_json("/runs", json!({"prompt": "hold", "pack": "everyone"}))
            .await;
        assert_eq!(status, 202, "{body}");
        body["run_id"].as_str().expect("run id").to_owned()
    };
    let first = start().await;
    s.wait_status(&first, "completed").await;
    let ids = [start().await, start().await, start().await];
    let mut most = 0;
    for _ in 0..30 {
        most = most.max(pids_marked(&marker).len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for id in &ids {
        s.wait_status(id, "completed").await;
        let events = s.runlog(id);
        let ready = of_kind(&events, "mcp_server")
            .into_iter()
            .find(|e| e["payload"]["status"] == "ready")
            .expect("ready")["payload"]
            .clone();
        assert_eq!(ready.get("shared"), None, "{ready}");
        assert!(ready["warm"].is_boolean(), "{ready}");
    }
    // Three runs in flight, three processes of their own at least (and the pool's spares).
    assert!(
        most >= 3,
        "{most} processes of server-everything for 3 runs in flight"
    );
}

/// The payload of the first `kind` event of `events` whose `key` is `value`.
fn payload_where<'a>(events: &'a [Value], kind: &str, key: &str, value: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["kind"] == kind && e["payload"][key] == value)
        .map(|e| &e["payload"])
        .unwrap_or_else(|| panic!("no {kind} with {key} {value}: {events:#?}"))
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_45_on_a_shared_process_each_run_answers_the_sampling_and_forms_of_its_own_calls() {
    let Some((python, script)) = python_server("client_features_server.py") else {
        return;
    };
    let marker = format!("shared-asks-{}", std::process::id());
    let call = |tool: &str| Turn::tool_call(format!("mcp__helper__{tool}"), json!({}));
    let finish = || Turn::tool_call("finish_task", json!({"summary": "done"}));
    let fx = Fixture::with_backend(
        Scenario::new(vec![
            call("roots"),
            finish(),
            Turn::tool_call("mcp__helper__summarize", json!({"text": "a long story"})),
            // Answers the server's sampling request, not a step of the loop.
            Turn::text("Fabric runs agents locally."),
            call("ask_profile"),
            finish(),
            call("ask_profile"),
            finish(),
        ]),
        "openai",
    )
    .await;
    fx.trust_own_files();
    let args = format!("{script}, {marker}");
    // Two specialists naming one definition, answering forms differently.
    for (id, extra) in [
        (
            "asker",
            "\n    startup_timeout_s: 60\n    elicitation: defaults",
        ),
        ("decliner", "\n    startup_timeout_s: 60"),
    ] {
        let how = Server {
            command: &python,
            args: &args,
            tool: "*",
            extra,
        };
        write_specialist(&fx, id, "helper", &how);
    }
    let s = Served::on(fx, Options::default()).await;
    let run = |pack: &'static str| {
        let s = &s;
        async move {
            let (status, body) = s
                .post_json("/runs", json!({"prompt": "ask", "pack": pack}))
                .await;
            assert_eq!(status, 202, "{body}");
            let id = body["run_id"].as_str().expect("run id").to_owned();
            s.wait_status(&id, "completed").await;
            s.runlog(&id)
        }
    };
    run("asker").await;
    for _ in 0..200 {
        if pids_with(&marker).len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The Python SDK takes 1–2 s to start and answer `server/discover` (the scripted turns are
    // in order here, so no probing runs as `warm_up_shared` does).
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let asker = run("asker").await;
    let decliner = run("decliner").await;
    for events in [&asker, &decliner] {
        let ready = payload_where(events, "mcp_server", "status", "ready");
        assert!(ready["shared"].as_u64().is_some(), "{ready}");
    }
    // The asker's model answered its own call's sampling request, recorded in its runlog.
    let sampling = payload_where(&asker, "mcp_request", "method", "sampling/createMessage");
    assert_eq!(sampling["outcome"], "answered", "{sampling}");
    let no_sampling = |events: &[Value]| {
        !events
            .iter()
            .any(|e| e["payload"]["method"] == "sampling/createMessage")
    };
    assert!(no_sampling(&decliner));
    // Each run's form answered by its own config: defaults for one, declined for the other.
    let profile = |events: &[Value]| -> Value {
        let result = payload_where(events, "tool_result", "tool", "mcp__helper__ask_profile");
        serde_json::from_str(result["result"].as_str().expect("text")).expect("json")
    };
    assert_eq!(profile(&asker)["action"], "accept");
    assert_eq!(profile(&decliner)["action"], "decline");
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_45_a_shared_process_no_run_holds_is_stopped_after_the_idle_timeout() {
    let marker = format!("shared-probe-idle-{}", std::process::id());
    let config = "\nmcp_pool:\n  idle_timeout_s: 4\n";
    let Some(s) = serve_shared_with(&marker, &[0.0], config, 0).await else {
        return;
    };
    warm_up_shared(&s, &marker).await;
    let id = start_shared(&s).await;
    s.wait_status(&id, "completed").await;
    let ready = payload_where(&s.runlog(&id), "mcp_server", "status", "ready").clone();
    assert!(ready["shared"].as_u64().is_some(), "{ready}");
    // The run ended, its share with it: unused for `idle_timeout_s`, both processes stop.
    assert!(
        super::fixture::gone_within(&marker, Duration::from_secs(12)),
        "an idle shared process was not stopped: {:?}",
        pids_with(&marker)
    );
}

#[tokio::test]
async fn issue_45_a_run_cancelled_while_waiting_for_a_cold_start_stops_waiting() {
    // A server that does not answer for 20 s: the run waits for the pool's start of it.
    let marker = format!("pool-slow-start-{}", std::process::id());
    let fx = Fixture::with_backend(Scenario::new(turns(&["slow"], "whoami")), "openai").await;
    fx.trust_own_files();
    let args = format!("-c, 'import time; time.sleep(20)', {marker}");
    let how = Server {
        command: "python3",
        args: &args,
        tool: "whoami",
        extra: "\n    startup_timeout_s: 60",
    };
    write_specialist(&fx, "waiter", "slow", &how);
    let s = Served::on(fx, Options::default()).await;
    let id = start_at_once(&s, "waiter", 1).await.remove(0);
    let mut reader = s.follow(&id, None).await;
    wait_for_process(&marker).await;
    // Its cancel ends the wait at once (within 5 s), not when the start ends.
    s.cancel_promptly(&id, &mut reader).await;
}
