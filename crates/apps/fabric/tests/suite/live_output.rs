//! Issue #42, item 5: a `shell` command's lines reach the run's followers while it runs
//! (`fabric run`'s human output, the SSE stream of `fabric serve`), bounded in size and rate,
//! never recorded: the runlog and the tool's result are what they were (ADR-106).

use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;

use super::fixture::{Fixture, gone_within, kinds};
use super::serve_fixture::{Frame, Options, Served};

/// `sh -c SCRIPT` as the shell tool's arguments.
fn sh(script: &str) -> Value {
    json!({"cmd": ["sh", "-c", script]})
}

/// Three lines a second apart.
const SLOW: &str = "for i in 1 2 3; do echo line$i; sleep 1; done";

fn turns(args: Value) -> Vec<Turn> {
    vec![
        Turn::tool_call("shell", args),
        Turn::tool_call("finish_task", json!({"summary": "ran it"})),
    ]
}

const ALLOW: &str = "shell:\n  allowed_commands: [sh, seq]\n";

/// `fabric serve` allowing `sh` and `seq`, answering with `turns`.
async fn served(turns: Vec<Turn>) -> Served {
    let options = Options {
        config: ALLOW,
        ..Options::default()
    };
    Served::with(Scenario::new(turns), options).await
}

/// What `shell` returned, as the runlog's `tool_result` has it (the text the model was
/// given, read back as JSON).
fn shell_result(runlog: &[Value]) -> Value {
    let text = runlog
        .iter()
        .find(|e| e["kind"] == "tool_result" && e["payload"]["tool"] == "shell")
        .and_then(|e| e["payload"]["result"].as_str())
        .expect("a shell tool_result");
    serde_json::from_str(text).expect("the result is JSON")
}

/// No live line is in the runlog: no event of a new kind, and the lines only where the
/// command's result carries them (the result, and the model's next request).
fn assert_no_live_line_recorded(runlog: &[Value]) {
    let kinds = kinds(runlog);
    assert!(!kinds.contains(&"tool_output"), "{kinds:?}");
    for event in runlog {
        let text = event.to_string();
        if text.contains("line1") {
            assert!(
                matches!(event["kind"].as_str(), Some("tool_result" | "llm_request")),
                "{text}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_fabric_run_shows_a_slow_commands_lines_before_it_ends() {
    let fx = Fixture::new(turns(sh(SLOW))).await;
    fx.append_config(ALLOW);
    let mut child = fx
        .command(&["run", "Run the slow command", "--pack", "engineering"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("fabric run starts");
    let mut lines = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut seen: Vec<(Instant, String)> = Vec::new();
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("a line of human output within 60 s")
    {
        seen.push((Instant::now(), line));
    }
    let status = child.wait().await.expect("fabric run ends");
    let shown: Vec<&str> = seen.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(status.code(), Some(0), "{shown:#?}");
    let at = |wanted: &str| {
        seen.iter()
            .position(|(_, l)| l.trim_end() == wanted)
            .unwrap_or_else(|| panic!("no `{wanted}` in {shown:#?}"))
    };
    let (call, first, last) = (
        at("→ shell {\"cmd\":[\"sh\",\"-c\",\"for i in 1 2 3; do echo line$i; sleep 1; done\"]}"),
        at("  │ line1"),
        at("  │ line3"),
    );
    let result = seen
        .iter()
        .position(|(_, l)| l.starts_with("  ✓"))
        .unwrap_or_else(|| panic!("no result line in {shown:#?}"));
    // Under its call, in order, before its result; the first a good while before the end.
    assert!(
        call < first && first < at("  │ line2") && at("  │ line2") < last && last < result,
        "{shown:#?}"
    );
    let early = seen[result].0 - seen[first].0;
    assert!(
        early >= Duration::from_millis(1500),
        "line1 came only {early:?} before the result"
    );

    let runlogs = std::fs::read_dir(fx.workspace_root().join("runs")).expect("runs");
    let dir = runlogs.flatten().next().expect("one run").path();
    let runlog = super::fixture::read_runlog(&dir.join("runlog.jsonl"));
    assert_no_live_line_recorded(&runlog);
    assert_eq!(shell_result(&runlog)["stdout"], "line1\nline2\nline3\n");
}

/// The frames of a run's SSE stream until its end, each with when it came.
async fn frames_until_end(s: &Served, run_id: &str) -> Vec<(Instant, Frame)> {
    let mut reader = s.follow(run_id, None).await;
    let mut frames = Vec::new();
    while let Some(frame) = reader.next().await {
        frames.push((Instant::now(), frame));
    }
    frames
}

fn named<'a>(frames: &'a [(Instant, Frame)], event: &str) -> Vec<&'a (Instant, Frame)> {
    frames
        .iter()
        .filter(|(_, f)| f.event.as_deref() == Some(event))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_an_sse_follower_gets_each_line_as_it_is_printed() {
    let s = served(turns(sh(SLOW))).await;
    let run_id = s.start_run("Run the slow command").await;
    let frames = frames_until_end(&s, &run_id).await;
    let position = |event: &str| {
        frames
            .iter()
            .position(|(_, f)| f.event.as_deref() == Some(event))
            .unwrap_or_else(|| panic!("no {event} frame"))
    };
    let output = named(&frames, "tool_output");
    let lines: Vec<Value> = output.iter().map(|(_, f)| f.json()).collect();
    let call = frames[position("tool_call")].1.json();
    let call_id = call["payload"]["call_id"].clone();
    assert_eq!(
        lines,
        (1..=3)
            .map(
                |i| json!({"call_id": call_id, "tool": "shell", "step": call["step"],
                            "stream": "stdout", "line": format!("line{i}")})
            )
            .collect::<Vec<_>>()
    );
    // No `id:`: live output does not move `Last-Event-ID`.
    assert!(output.iter().all(|(_, f)| f.id.is_none()));
    // Between the call and its result, the first line well before the result.
    let (first, result) = (
        frames
            .iter()
            .position(|(_, f)| f.event.as_deref() == Some("tool_output"))
            .unwrap(),
        position("tool_result"),
    );
    assert!(position("tool_call") < first && first + 3 <= result);
    let early = frames[result].0 - frames[first].0;
    assert!(
        early >= Duration::from_millis(1500),
        "line1 came only {early:?} before the result"
    );

    let runlog = s.runlog(&run_id);
    assert_no_live_line_recorded(&runlog);
    // The other frames are the runlog's lines, as before.
    let events: Vec<&Frame> = frames
        .iter()
        .map(|(_, f)| f)
        .filter(|f| f.event.as_deref() != Some("tool_output"))
        .collect();
    assert_eq!(events.len(), runlog.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_a_flood_of_lines_reaches_followers_bounded_and_the_result_is_unchanged() {
    let mut flood = turns(json!({"cmd": ["seq", "1", "100000"]}));
    // Time for the follower to come before the command runs.
    flood[0].delay_ms = Some(1000);
    let s = served(flood).await;
    let run_id = s.start_run("Print a lot").await;
    let frames = frames_until_end(&s, &run_id).await;
    let output: Vec<Value> = named(&frames, "tool_output")
        .iter()
        .map(|(_, f)| f.json())
        .collect();
    let shown = output.iter().filter(|o| o.get("line").is_some()).count();
    let dropped: u64 = output.iter().filter_map(|o| o["dropped"].as_u64()).sum();
    // A burst of 100, then at most 50 a second while the call ran (by its runlog).
    let runlog = s.runlog(&run_id);
    let ts = |kind: &str| {
        runlog
            .iter()
            .find(|e| e["kind"] == kind && e["payload"]["tool"] == "shell")
            .and_then(|e| e["ts"].as_f64())
            .unwrap()
    };
    let most = 100.0 + 50.0 * (ts("tool_result") - ts("tool_call")) + 1.0;
    assert!(
        shown >= 100 && shown as f64 <= most,
        "{shown} lines shown, at most {most}"
    );
    assert_eq!(
        shown as u64 + dropped,
        100_000,
        "every line shown or counted"
    );
    assert_eq!(output[0]["line"], "1");
    assert!(
        output.last().unwrap()["dropped"].as_u64().unwrap() > 0,
        "the end says what was left out"
    );
    // All of it, the last count too, before the call's result.
    let result = frames
        .iter()
        .position(|(_, f)| f.event.as_deref() == Some("tool_result"))
        .unwrap();
    let last_output = frames
        .iter()
        .rposition(|(_, f)| f.event.as_deref() == Some("tool_output"))
        .unwrap();
    assert!(last_output < result);

    // The result is what the same command gives with nobody following.
    assert!(!kinds(&runlog).contains(&"tool_output"));
    let followed = shell_result(&runlog);
    let fx = Fixture::new(turns(json!({"cmd": ["seq", "1", "100000"]}))).await;
    fx.append_config(ALLOW);
    let result = fx.run_json("Print a lot", &[], 0).await;
    let alone = shell_result(&fx.runlog(&result));
    assert_eq!(followed, alone);
    assert!(
        followed["stdout"]
            .as_str()
            .unwrap()
            .contains("[output truncated: ")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_cancel_mid_command_while_its_lines_are_followed() {
    let marker = "issue42tick";
    let script =
        format!("i=0; while [ $i -lt 150 ]; do echo {marker}$i; sleep 0.2; i=$((i+1)); done");
    let s = served(turns(sh(&script))).await;
    let run_id = s.start_run("Tick for 30 s").await;
    let mut reader = s.follow(&run_id, None).await;
    let mut lines = 0;
    while let Some(frame) = reader.next().await {
        if frame.event.as_deref() == Some("tool_output") {
            lines += 1;
            if lines == 2 {
                break;
            }
        }
    }
    assert_eq!(lines, 2);
    s.cancel_promptly(&run_id, &mut reader).await;
    assert!(
        gone_within(marker, Duration::from_secs(5)),
        "the command is gone"
    );
}

/// The web viewer shows the lines under the running call, and its result once it ends.
#[cfg_attr(
    fabric_no_browser,
    ignore = "needs Chromium, chromedriver and Selenium: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_42_the_viewer_shows_a_running_commands_lines_under_its_call() {
    let Some(python) = fabric_test_support::browser_deps() else {
        return;
    };
    let script = "echo out1; echo err1 >&2; sleep 2; echo out2; sleep 3; echo out3";
    let mut slow = turns(sh(script));
    // Time for the browser to start and follow the run before the command prints.
    slow[0].delay_ms = Some(6000);
    let s = served(slow).await;
    let run_id = s.start_run("Run the slow command").await;
    let seen = super::web_ui::browse_case(&python, &s, "live_output", &["--run-id", &run_id]).await;
    let running = &seen["running"];
    assert_eq!(running["state"], "running", "{seen}");
    assert_eq!(running["results"], 0, "no result yet: {seen}");
    let lines: Vec<&str> = running["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        lines.starts_with(&["out1", "err1"]) || lines.starts_with(&["err1", "out1"]),
        "{seen}"
    );
    let classes = running["classes"].to_string();
    assert!(
        classes.contains("stderr") && classes.contains("stdout"),
        "{classes}"
    );
    // At the end the result replaces the live lines.
    let ended = &seen["ended"];
    assert_eq!(ended["live_blocks"], 0, "{seen}");
    assert!(ended["results"].to_string().contains("out3"), "{seen}");
}
