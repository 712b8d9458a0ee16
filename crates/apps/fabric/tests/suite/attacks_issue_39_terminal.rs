//! Terminal escapes (issue #39): what a run writes (a file's contents and name), what the
//! model calls (a tool's name) and what tools answer reach the operator's terminal through
//! `fabric run`, `diff`, `diff --stat`, `apply` and `logs show`. In the human forms every
//! control character is shown as an escape (`\x1b`, `\u{9b}`), never obeyed; the `--json`
//! forms keep the exact text (ADR-089).

use fabric_test_support::Turn;
use serde_json::{Value, json};
use std::path::Path;

use super::fixture::{Fixture, Run};
use super::projects::user_repo;

/// A clipboard write (OSC 52, BEL-terminated).
const OSC52: &str = "\u{1b}]52;c;SGVsbG8=\u{7}";
/// Cursor up and erase the line: hides the diff line before it from the reviewer.
const HIDE: &str = "\u{1b}[1A\u{1b}[2K";
/// The 8-bit CSI (C1), which some terminals obey as ESC `[`.
const CSI8: &str = "\u{9b}";

fn file_name() -> String {
    format!("notes{OSC52}{HIDE}.txt")
}

fn content() -> String {
    format!("harmless\nrm -rf ~ {HIDE}\nclip {OSC52}\n{CSI8}31mred\n")
}

/// The finish payload's summary: `fabric run` prints the payload as JSON on stdout.
fn summary() -> String {
    format!("wrote the notes {CSI8}2J{OSC52}")
}

fn tool_name() -> String {
    format!("x{OSC52}")
}

fn turns() -> Vec<Turn> {
    vec![
        Turn::tool_call(
            "write_file",
            json!({"path": file_name(), "content": content()}),
        ),
        Turn::tool_call(tool_name(), json!({})),
        Turn::tool_call(
            "finish_task",
            json!({"summary": summary(), "artifacts": [], "next_steps": [], "notes": ""}),
        ),
    ]
}

/// The control characters (other than newline and tab) `bytes` would have a terminal obey:
/// ESC, BEL, DEL, the C1 controls (UTF-8 `C2 80..9F`).
fn obeyed(bytes: &[u8]) -> Vec<char> {
    String::from_utf8_lossy(bytes)
        .chars()
        .filter(|c| c.is_control() && *c != '\n' && *c != '\t')
        .collect()
}

/// Each command whose output holds control characters, with them.
fn leaks(runs: &[(&str, &Run)]) -> Vec<String> {
    let mut found = Vec::new();
    for (what, run) in runs {
        for (stream, bytes) in [
            ("stdout", &run.output.stdout),
            ("stderr", &run.output.stderr),
        ] {
            let bad = obeyed(bytes);
            if !bad.is_empty() {
                found.push(format!("{what} ({stream}): {bad:?}"));
            }
        }
    }
    found
}

/// The one run of these tests, in human form on `repo`; its id.
async fn run_human(fx: &Fixture, repo: &Path) -> (Run, String) {
    let run = fx
        .fabric(&[
            "run",
            "write the notes",
            "--pack",
            "engineering",
            "--project",
            repo.to_str().expect("utf-8"),
        ])
        .await;
    run.assert_code(0);
    let list = fx.fabric(&["logs", "list", "--json"]).await;
    let id = list.json()[0]["run_id"]
        .as_str()
        .expect("run id")
        .to_owned();
    (run, id)
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_39_run_diff_apply_and_logs_show_escapes_never_obey_them() {
    let fx = Fixture::new(turns()).await;
    let repo = user_repo(&fx);
    let (run, id) = run_human(&fx, &repo).await;
    let diff = fx.fabric(&["diff", &id]).await;
    diff.assert_code(0);
    let stat = fx.fabric(&["diff", &id, "--stat"]).await;
    stat.assert_code(0);
    let logs = fx.fabric(&["logs", "show", &id]).await;
    logs.assert_code(0);
    let apply = fx.fabric(&["apply", &id]).await;
    apply.assert_code(0);
    // Applying again is refused, naming the file.
    let again = fx.fabric(&["apply", &id]).await;
    again.assert_code(2);
    let leaked = leaks(&[
        ("fabric run", &run),
        ("fabric diff", &diff),
        ("fabric diff --stat", &stat),
        ("fabric logs show", &logs),
        ("fabric apply", &apply),
        ("fabric apply (refused)", &again),
    ]);
    assert!(
        leaked.is_empty(),
        "control characters printed:\n{}",
        leaked.join("\n")
    );

    // The result is JSON a person reads, escapes and all, yet the same value.
    let result: Value = serde_json::from_str(&run.stdout).expect("the payload as JSON");
    assert_eq!(result["summary"], summary());
    assert!(run.stdout.contains("\\u009b2J\\u001b]52"), "{}", run.stdout);
    // Each is shown where it was: the tool's name on stderr.
    assert!(
        run.stderr.contains("→ x\\x1b]52;c;SGVsbG8=\\x07"),
        "{}",
        run.stderr
    );
    // The reviewer sees that the file holds escapes, on the lines that hold them.
    assert!(
        diff.stdout.contains("+rm -rf ~ \\x1b[1A\\x1b[2K\n"),
        "{}",
        diff.stdout
    );
    assert!(diff.stdout.contains("+clip \\x1b]52;c;SGVsbG8=\\x07\n"));
    assert!(diff.stdout.contains("+\\u{9b}31mred\n"), "{}", diff.stdout);
    let shown_name = "notes\\x1b]52;c;SGVsbG8=\\x07\\x1b[1A\\x1b[2K.txt";
    assert!(stat.stdout.contains(shown_name), "{}", stat.stdout);
    assert!(logs.stdout.contains("\\u{9b}31mred"), "{}", logs.stdout);
    assert!(apply.stdout.contains(shown_name), "{}", apply.stdout);
    assert!(again.stderr.contains(shown_name), "{}", again.stderr);
    // What was applied is the file with its exact name and contents.
    assert_eq!(
        std::fs::read_to_string(repo.join(file_name())).expect("applied with its exact name"),
        content()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_39_json_forms_keep_the_exact_text() {
    let fx = Fixture::new(turns()).await;
    let repo = user_repo(&fx);
    let result = fx
        .run_json(
            "write the notes",
            &["--project", repo.to_str().expect("utf-8")],
            0,
        )
        .await;
    let id = result["_meta"]["run_id"].as_str().expect("run id");
    // `run --json`: the payload exactly (serde leaves U+009B as it is; only C0 is escaped).
    assert_eq!(result["summary"], summary());

    let diff = fx.fabric(&["diff", id, "--json"]).await;
    diff.assert_code(0);
    assert_eq!(diff.json()["files"][0]["path"], file_name());

    // `logs show --json` prints the runlog's lines as stored, byte for byte.
    let logs = fx.fabric(&["logs", "show", id, "--json"]).await;
    logs.assert_code(0);
    let runlog = std::fs::read_to_string(
        fx.workspace_root()
            .join("runs")
            .join(id)
            .join("runlog.jsonl"),
    )
    .expect("runlog");
    assert_eq!(logs.stdout, runlog);
    let events: Vec<Value> = logs
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let tools: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "tool_call")
        .filter_map(|e| e["payload"]["tool"].as_str())
        .collect();
    assert!(tools.contains(&tool_name().as_str()), "{tools:?}");
    let written = events
        .iter()
        .find(|e| e["kind"] == "tool_call" && e["payload"]["tool"] == "write_file")
        .expect("the write");
    assert_eq!(written["payload"]["args"]["content"], content());
    // The 8-bit CSI is in the runlog as the character itself, as JSON allows.
    assert!(runlog.contains(CSI8));
}
