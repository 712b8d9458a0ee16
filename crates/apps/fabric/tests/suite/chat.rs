//! Issue #42, item 6: `fabric chat` driven through a pseudo-terminal, step by step
//! (`tests/pty_driver.py`): turns that continue the conversation, a line typed during a
//! turn said to it, a question and an approval answered at the prompt, Ctrl-C cancelling a
//! turn and not the session, `/diff` and `/apply` of a project session, the ways out, and
//! the refusal without a terminal.

use fabric_test_support::Turn;
use serde_json::{Value, json};

use super::fixture::{Fixture, kinds, of_kind, read_runlog, tool_messages};
use super::projects::user_repo;

/// What a session showed, and how it ended.
struct Session {
    code: Option<i64>,
    output: String,
}

/// A step of the person at the terminal.
fn expect(text: &str) -> Value {
    json!({"expect": text, "timeout": 40})
}

fn send(text: &str) -> Value {
    json!({"send": text})
}

fn sleep(secs: f64) -> Value {
    json!({"sleep": secs})
}

/// Runs `fabric chat ARGS` on a pseudo-terminal, taking `steps`; the session must end
/// within 30 s of the last.
async fn chat(fx: &Fixture, args: &[&str], steps: Vec<Value>) -> Session {
    use tokio::io::AsyncWriteExt;
    let mut argv: Vec<String> = vec![env!("CARGO_BIN_EXE_fabric").to_owned(), "chat".to_owned()];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    argv.extend([
        "--config".to_owned(),
        fx.config.display().to_string(),
        "--workspace".to_owned(),
        fx.workspace_root().display().to_string(),
    ]);
    let driver = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pty_driver.py");
    let mut cmd = tokio::process::Command::new("python3");
    fx.isolate(&mut cmd);
    cmd.arg(driver)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("python3 runs the pty driver");
    let spec = json!({"argv": argv, "steps": steps, "exit_within": 30});
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(spec.to_string().as_bytes())
        .await
        .expect("write the steps");
    drop(stdin);
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(240),
        child.wait_with_output(),
    )
    .await
    .expect("the session ended")
    .expect("the driver ran");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the driver's report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let output = report["output"].as_str().unwrap_or_default().to_owned();
    assert!(
        report["failed"].is_null(),
        "{}; the terminal showed:\n{output}",
        report["failed"]
    );
    Session {
        code: report["code"].as_i64(),
        output,
    }
}

impl Session {
    fn assert_ended_cleanly(&self) {
        assert_eq!(self.code, Some(0), "the terminal showed:\n{}", self.output);
    }
}

/// The runs of the fixture, oldest first, each with its runlog.
fn runs(fx: &Fixture) -> Vec<(String, Vec<Value>)> {
    let dir = fx.workspace_root().join("runs");
    let mut ids: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids.into_iter()
        .map(|id| {
            let events = read_runlog(&dir.join(&id).join("runlog.jsonl"));
            (id, events)
        })
        .collect()
}

fn finish(summary: &str) -> Turn {
    Turn::tool_call(
        "finish_task",
        json!({"summary": summary, "artifacts": [], "next_steps": [], "notes": ""}),
    )
}

/// A `list_files` call the model takes `ms` to answer with.
fn slow_look(ms: u64) -> Turn {
    let mut slow = Turn::tool_call("list_files", json!({}));
    slow.delay_ms = Some(ms);
    slow
}

fn status(events: &[Value]) -> String {
    let end = events.last().expect("an end");
    end["payload"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn continued_from(events: &[Value]) -> Value {
    of_kind(events, "run_start")[0]["payload"]["continues"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_chat_each_line_is_a_turn_continuing_the_last_and_a_line_typed_meanwhile_steers() {
    let fx = Fixture::new(vec![
        slow_look(2_000),
        finish("looked around"),
        Turn::tool_call("list_files", json!({})),
        finish("went on"),
    ])
    .await;
    let session = chat(
        &fx,
        &["--pack", "engineering"],
        vec![
            expect("fabric chat"),
            expect("› "),
            send("look around\r"),
            expect("fabric run "),
            sleep(0.3),
            send("also check the tests\r"),
            expect("said to the turn"),
            expect("completed in 2 steps"),
            expect("looked around"),
            // Two lines, the first ended with `\`: one turn.
            send("now go on\\\r"),
            send("and on\r"),
            expect("completed in 2 steps"),
            send("/exit\r"),
        ],
    )
    .await;
    session.assert_ended_cleanly();
    let runs = runs(&fx);
    assert_eq!(runs.len(), 2, "two turns, two runs: {}", session.output);
    let (first, first_events) = &runs[0];
    let (_, second_events) = &runs[1];
    assert_eq!(status(first_events), "completed");
    assert_eq!(status(second_events), "completed");
    // The line typed during the first turn reached its model, recorded as said.
    let said = of_kind(first_events, "user_message");
    assert_eq!(said.len(), 1, "{:?}", kinds(first_events));
    assert_eq!(said[0]["payload"]["text"], "also check the tests");
    assert_eq!(said[0]["payload"]["by"], "chat");
    // The second turn continues the first: its request carries the first's conversation.
    let link = continued_from(second_events);
    assert_eq!(link["run_id"], first.as_str(), "{link}");
    assert_eq!(link["mode"], "continue");
    let requests = fx.requests();
    assert_eq!(requests.len(), 4);
    let earlier = requests[1]["messages"]
        .as_array()
        .expect("messages")
        .clone();
    let later = requests[2]["messages"]
        .as_array()
        .expect("messages")
        .clone();
    assert_eq!(
        serde_json::to_string(&later[..earlier.len()]).expect("json"),
        serde_json::to_string(&earlier).expect("json"),
        "the second turn's first request starts with the first turn's last"
    );
    assert_eq!(
        later.last().expect("a message"),
        &json!({"role": "user", "content": "now go on\nand on"})
    );
    // The lines are kept in the history file under the user's state directory, private.
    let history = fx.dir.path().join("xdg-state/agent-fabric/chat_history");
    let kept = std::fs::read_to_string(&history).expect("the history file");
    assert!(kept.contains("look around"), "{kept}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&history)
        .expect("metadata")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // Ordinary runs: listed like any other.
    let listed = fx.fabric(&["logs", "list", "--json"]).await;
    assert!(listed.stdout.contains(first.as_str()), "{}", listed.stdout);
}

/// A specialist that may ask, and one whose writes wait for approval.
const PEOPLE: &str = "specialists:\n  asker:\n    description: Asks before it decides\n    system_prompt: Ask the user when a decision is theirs.\n    tools: [ask_user, list_files]\n  careful:\n    description: Writes with approval\n    system_prompt: Write what you are asked.\n    tools: [write_file]\n    approval: {mode: untrusted, rules: [{tool: finish_task, action: allow}]}\n";

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_chat_a_question_is_answered_at_the_prompt() {
    let fx = Fixture::new(vec![
        Turn::tool_call(
            "ask_user",
            json!({"question": "Which database?", "choices": ["SQLite", "PostgreSQL"]}),
        ),
        finish("chose as told"),
    ])
    .await;
    fx.append_config(PEOPLE);
    let session = chat(
        &fx,
        &["--pack", "asker"],
        vec![
            expect("› "),
            send("pick a database\r"),
            expect("Which database?"),
            expect("SQLite | PostgreSQL"),
            send("PostgreSQL\r"),
            expect("completed in 2 steps"),
            send("/exit\r"),
        ],
    )
    .await;
    session.assert_ended_cleanly();
    let requests = fx.requests();
    let tool = tool_messages(requests.last().expect("a request"));
    assert!(
        tool.iter().any(|m| m.contains("PostgreSQL")),
        "the model got the answer: {tool:?}"
    );
    let runs = runs(&fx);
    let answered = of_kind(&runs[0].1, "input_answered");
    assert_eq!(answered.len(), 1, "{:?}", kinds(&runs[0].1));
    assert_eq!(answered[0]["payload"]["by"], "terminal");
    assert_eq!(answered[0]["payload"]["answer"], "PostgreSQL");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_chat_an_approval_is_answered_at_the_prompt() {
    let fx = Fixture::new(vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "notes.txt", "content": "approved\n"}),
        ),
        finish("wrote notes.txt"),
    ])
    .await;
    fx.append_config(PEOPLE);
    let session = chat(
        &fx,
        &["--pack", "careful"],
        vec![
            expect("› "),
            send("write the notes\r"),
            expect("May `write_file` run?"),
            send("perhaps\r"),
            expect("answer approve, approve_for_run or deny"),
            send("approve\r"),
            expect("completed in 2 steps"),
            send("/exit\r"),
        ],
    )
    .await;
    session.assert_ended_cleanly();
    let runs = runs(&fx);
    let events = &runs[0].1;
    let answered = of_kind(events, "input_answered");
    assert_eq!(answered.len(), 1, "{:?}", kinds(events));
    assert_eq!(answered[0]["payload"]["decision"], "approve");
    let wrote = of_kind(events, "tool_result");
    assert!(
        wrote.iter().any(|e| e["payload"]["tool"] == "write_file"),
        "the approved call ran: {:?}",
        kinds(events)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_chat_ctrl_c_cancels_the_turn_and_the_session_goes_on() {
    let fx = Fixture::new(vec![
        slow_look(20_000),
        Turn::tool_call("list_files", json!({})),
        finish("went on"),
    ])
    .await;
    let session = chat(
        &fx,
        &["--pack", "engineering"],
        vec![
            expect("› "),
            send("take your time\r"),
            expect("fabric run "),
            sleep(0.5),
            send("\x03"),
            expect("cancelling the turn"),
            expect("cancelled"),
            send("go on then\r"),
            expect("completed in 2 steps"),
            send("\x04"),
        ],
    )
    .await;
    session.assert_ended_cleanly();
    let runs = runs(&fx);
    assert_eq!(runs.len(), 2, "{}", session.output);
    assert_eq!(status(&runs[0].1), "cancelled");
    assert_eq!(status(&runs[1].1), "completed");
    assert_eq!(continued_from(&runs[1].1)["run_id"], runs[0].0.as_str());
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_chat_ctrl_d_during_a_turn_cancels_it_and_ends_the_session() {
    let fx = Fixture::new(vec![slow_look(20_000)]).await;
    let session = chat(
        &fx,
        &["--pack", "engineering"],
        vec![
            expect("› "),
            send("take your time\r"),
            expect("fabric run "),
            sleep(0.3),
            send("\x04"),
            expect("cancelling the turn"),
        ],
    )
    .await;
    session.assert_ended_cleanly();
    let runs = runs(&fx);
    assert_eq!(runs.len(), 1, "{}", session.output);
    assert_eq!(status(&runs[0].1), "cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_chat_diff_and_apply_show_and_take_the_sessions_project_changes() {
    let fx = Fixture::new(vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "hello.txt", "content": "Hello World\n"}),
        ),
        finish("wrote hello.txt"),
        Turn::tool_call("read_file", json!({"path": "hello.txt"})),
        finish("read it"),
    ])
    .await;
    let repo = user_repo(&fx);
    let project = repo.display().to_string();
    let session = chat(
        &fx,
        &["--pack", "engineering", "--project", &project],
        vec![
            expect("› "),
            send("/diff\r"),
            expect("no turn has run yet"),
            send("write hello\r"),
            expect("completed in 2 steps"),
            send("/diff\r"),
            expect("+Hello World"),
            send("/apply\r"),
            expect("applied 1 file(s)"),
            send("/fork\r"),
            expect("the next turn forks run"),
            send("read it back\r"),
            expect("completed in 2 steps"),
            send("/discard\r"),
            expect("discarded the workspace and branch"),
            expect("the next line starts a new conversation"),
            send("/exit\r"),
        ],
    )
    .await;
    session.assert_ended_cleanly();
    assert!(session.output.contains("hello.txt"), "{}", session.output);
    let runs = runs(&fx);
    assert_eq!(runs.len(), 2);
    let link = continued_from(&runs[1].1);
    assert_eq!(link["run_id"], runs[0].0.as_str(), "{link}");
    assert_eq!(link["mode"], "fork");
    // The fork's branch was discarded; the first turn's is left alone.
    let branches = super::projects::git(&repo, &["branch", "--list", "fabric/*"]);
    assert!(branches.contains(&runs[0].0), "{branches}");
    assert!(!branches.contains(&runs[1].0), "{branches}");
    assert_eq!(
        std::fs::read_to_string(repo.join("hello.txt")).expect("applied"),
        "Hello World\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_chat_exit_ctrl_d_and_ctrl_c_twice_end_the_session_and_help_lists_commands() {
    let fx = Fixture::new(Vec::new()).await;
    let session = chat(
        &fx,
        &[],
        vec![
            expect("› "),
            send("/help\r"),
            expect("/fork"),
            send("/fork\r"),
            expect("nothing to fork yet"),
            send("/frob\r"),
            expect("no command `/frob`"),
            send("/exit\r"),
        ],
    )
    .await;
    session.assert_ended_cleanly();
    let session = chat(&fx, &[], vec![expect("› "), send("\x04")]).await;
    session.assert_ended_cleanly();
    let session = chat(
        &fx,
        &[],
        vec![
            expect("› "),
            send("\x03"),
            expect("Ctrl-C again"),
            // The editor reads again (its prompt drawn) before the second.
            expect("› "),
            send("\x03"),
        ],
    )
    .await;
    session.assert_ended_cleanly();
    assert!(runs(&fx).is_empty(), "no turn ran");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_chat_without_a_terminal_is_refused() {
    let fx = Fixture::new(Vec::new()).await;
    let run = fx.fabric(&["chat"]).await;
    run.assert_code(2);
    assert!(
        run.stderr.contains("needs a terminal") && run.stderr.contains("--continue"),
        "{}",
        run.stderr
    );
}
