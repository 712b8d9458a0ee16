//! `fabric acp` (issue #44) driven by an editor's side we did not write: the official ACP
//! TypeScript SDK's client (`@agentclientprotocol/sdk`, in the test deps' `acp/`), from the
//! script `tests/acp/client.mjs`, which also checks every line the fabric writes against the
//! protocol's published JSON schema. Without the SDK these tests are reported ignored
//! ("needs the ACP TypeScript SDK: run scripts/install-test-deps.sh").

use fabric_test_support::Turn;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

use super::conversations::finish;
use super::fixture::{Fixture, of_kind, read_runlog};
use super::projects::user_repo;

/// Runs `client.mjs SCENARIO` against `fabric acp` on `cwd`; its report.
async fn drive(fx: &Fixture, scenario: &str, cwd: &Path, answers: &str) -> Value {
    drive_with(fx, &["acp"], scenario, cwd, answers).await
}

/// [`drive`] with `fabric` run with `args`.
async fn drive_with(
    fx: &Fixture,
    args: &[&str],
    scenario: &str,
    cwd: &Path,
    answers: &str,
) -> Value {
    drive_env(fx, args, scenario, cwd, &[("ACP_ANSWERS", answers)]).await
}

/// [`drive_with`] with these variables set for the client.
async fn drive_env(
    fx: &Fixture,
    args: &[&str],
    scenario: &str,
    cwd: &Path,
    env: &[(&str, &str)],
) -> Value {
    let deps = fabric_test_support::acp_deps().expect("the ACP SDK is in the test deps");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp/client.mjs");
    let fabric = fx.command(args);
    let program = fabric.as_std().get_program().to_owned();
    let args: Vec<_> = fabric.as_std().get_args().map(ToOwned::to_owned).collect();
    let mut node = tokio::process::Command::new("node");
    node.arg(script)
        .arg(scenario)
        .arg(cwd)
        .arg("--")
        .arg(program)
        .args(args)
        .env("FABRIC_ACP_DEPS", deps)
        .envs(env.iter().copied());
    if scenario == "mcp" {
        let everything = fabric_test_support::test_deps()
            .expect("the MCP test servers are in the test deps")
            .join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        node.env("EVERYTHING_SCRIPT", everything);
    }
    fx.isolate(&mut node);
    let output = tokio::time::timeout(std::time::Duration::from_secs(120), node.output())
        .await
        .expect("the ACP client finished within 120 s")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "the client's report is not JSON ({e}):\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(report["failure"].is_null(), "{report:#}");
    assert_eq!(report["schemaErrors"], json!([]), "{report:#}");
    assert_eq!(report["exitCode"], 0, "{report:#}");
    report
}

fn updates<'a>(turn: &'a Value, kind: &str) -> Vec<&'a Value> {
    turn["updates"]
        .as_array()
        .expect("updates")
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

fn said(turn: &Value) -> String {
    updates(turn, "agent_message_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

/// A turn that says something, writes `hello.txt` and finishes; then one that reads it
/// (its first model answer slow, so a prompt sent meanwhile meets a running turn).
fn two_turns() -> Vec<Turn> {
    let mut write = Turn::tool_call(
        "write_file",
        json!({"path": "hello.txt", "content": "Hello World\n"}),
    );
    write.content = Some("Writing hello.txt now.".to_owned());
    let mut read = Turn::tool_call("read_file", json!({"path": "hello.txt"}));
    read.delay_ms = Some(1500);
    vec![
        write,
        finish("wrote hello.txt"),
        read,
        finish("read hello.txt back"),
    ]
}

#[cfg_attr(
    fabric_no_acp,
    ignore = "needs the ACP TypeScript SDK: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_44_an_editor_prompts_twice_on_a_git_repository_and_sees_the_diff() {
    let fx = Fixture::new(two_turns()).await;
    let repo = user_repo(&fx);
    let report = drive(&fx, "turns", &repo, "").await;
    let init = &report["initialize"];
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(init["agentCapabilities"]["mcpCapabilities"]["http"], true);
    assert_eq!(init["agentInfo"]["name"], "fabric");

    let first = &report["first"];
    assert_eq!(first["ok"]["stopReason"], "end_turn", "{first:#}");
    let text = said(first);
    assert!(text.contains("Writing hello.txt now."), "{text}");
    assert!(text.contains("wrote hello.txt"), "{text}");
    let call = updates(first, "tool_call");
    assert_eq!(call.len(), 1, "{first:#}");
    assert_eq!(call[0]["kind"], "edit");
    assert_eq!(call[0]["title"], "write_file hello.txt");
    let done = updates(first, "tool_call_update");
    let done = done.last().expect("the call's update");
    assert_eq!(done["toolCallId"], call[0]["toolCallId"]);
    assert_eq!(done["status"], "completed");
    let diff = &done["content"][0];
    assert_eq!(diff["type"], "diff", "{done:#}");
    assert_eq!(diff["path"], json!(repo.join("hello.txt")));
    assert_eq!(diff["oldText"], Value::Null);
    assert_eq!(diff["newText"], "Hello World\n");
    // The user's tree is untouched until /apply (ADR-113).
    assert!(!repo.join("hello.txt").exists());

    assert_eq!(
        report["whileRunning"]["error"]["code"], -32600,
        "{report:#}"
    );
    let second = &report["second"];
    assert_eq!(second["ok"]["stopReason"], "end_turn", "{second:#}");
    assert_eq!(updates(second, "tool_call")[0]["kind"], "read");
    // The second turn is a run that continues the first's conversation, on its branch.
    let requests = fx.requests();
    let last = requests.last().expect("requests");
    let said_before = serde_json::to_string(&last["messages"]).expect("json");
    assert!(said_before.contains("write hello.txt"), "{said_before}");
    let runs = run_dirs(&fx);
    assert_eq!(runs.len(), 2);
    let continued = runs.iter().find_map(|dir| {
        let events = read_runlog(&dir.join("runlog.jsonl"));
        of_kind(&events, "run_start")[0]["payload"]["continues"]
            .as_object()
            .cloned()
    });
    assert!(continued.is_some(), "the second run continues the first");

    assert_eq!(report["unknownSession"]["error"]["code"], -32002);
    assert_eq!(report["noPrompt"]["error"]["code"], -32602);
    assert_eq!(report["badCwd"]["error"]["code"], -32602);
    assert_eq!(report["unknownMethod"]["error"]["code"], -32601);
    let diff = said(&report["diff"]);
    assert!(diff.contains("+Hello World"), "{diff}");
}

fn run_dirs(fx: &Fixture) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(fx.workspace_root().join("runs"))
        .expect("runs")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("runlog.jsonl").is_file())
        .collect()
}

#[cfg_attr(
    fabric_no_acp,
    ignore = "needs the ACP TypeScript SDK: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_44_session_cancel_ends_the_prompt_cancelled_and_the_run_cancelled() {
    let mut slow = Turn::tool_call("list_files", json!({}));
    slow.delay_ms = Some(10_000);
    let fx = Fixture::new(vec![Turn::tool_call("list_files", json!({})), slow]).await;
    let repo = user_repo(&fx);
    let report = drive(&fx, "cancel", &repo, "").await;
    let cancelled = &report["cancelled"];
    assert_eq!(cancelled["ok"]["stopReason"], "cancelled", "{report:#}");
    let runs = run_dirs(&fx);
    assert_eq!(runs.len(), 1);
    let events = read_runlog(&runs[0].join("runlog.jsonl"));
    let end = events.last().expect("events");
    assert_eq!(end["payload"]["status"], "cancelled", "{end:#}");
}

#[cfg_attr(
    fabric_no_acp,
    ignore = "needs the ACP TypeScript SDK: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_44_in_untrusted_mode_an_approval_is_asked_of_the_editor_and_answered_both_ways() {
    let fx = Fixture::new(vec![
        Turn::tool_call("write_file", json!({"path": "a.txt", "content": "a\n"})),
        finish("wrote a.txt"),
        Turn::tool_call("write_file", json!({"path": "b.txt", "content": "b\n"})),
        finish("b.txt was refused"),
    ])
    .await;
    let repo = user_repo(&fx);
    let report = drive_with(
        &fx,
        &["acp", "--pack", "engineering"],
        "permission",
        &repo,
        "allow_once,reject_once",
    )
    .await;
    // The session's mode makes every writing call wait (no `approval` in the config).
    assert_eq!(report["modes"]["currentModeId"], "configured", "{report:#}");
    assert_eq!(report["setMode"]["ok"], json!({}), "{report:#}");
    assert_eq!(report["badMode"]["error"]["code"], -32602, "{report:#}");
    let mode_update = report["first"]["updates"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(report["leftover"].as_array().into_iter().flatten())
        .any(|u| u["sessionUpdate"] == "current_mode_update" && u["currentModeId"] == "untrusted");
    assert!(mode_update, "{report:#}");
    let asked = report["permissions"].as_array().expect("permissions");
    assert_eq!(asked.len(), 2, "{report:#}");
    let kinds: Vec<&str> = asked[0]["options"]
        .as_array()
        .expect("options")
        .iter()
        .filter_map(|o| o["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"]);
    assert_eq!(asked[0]["toolCall"]["rawInput"]["path"], "a.txt");
    let first = &report["first"];
    assert_eq!(first["ok"]["stopReason"], "end_turn", "{first:#}");
    let done = updates(first, "tool_call_update");
    assert_eq!(done.last().expect("update")["status"], "completed");
    let second = &report["second"];
    let failed = updates(second, "tool_call_update");
    assert_eq!(
        failed.last().expect("update")["status"],
        "failed",
        "{second:#}"
    );
    // The runlogs say who answered and how.
    let mut decisions: Vec<(String, String)> = run_dirs(&fx)
        .iter()
        .flat_map(|dir| read_runlog(&dir.join("runlog.jsonl")))
        .filter(|e| e["kind"] == "input_answered")
        .map(|e| {
            (
                e["payload"]["by"].as_str().unwrap_or("").to_owned(),
                e["payload"]["decision"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    decisions.sort();
    assert_eq!(
        decisions,
        [
            ("acp".to_owned(), "approve".to_owned()),
            ("acp".to_owned(), "deny".to_owned())
        ]
    );
}

#[cfg_attr(
    any(fabric_no_acp, fabric_no_mcp_deps),
    ignore = "needs the ACP TypeScript SDK and the MCP test servers: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_44_the_editors_mcp_server_is_a_tool_of_the_turn() {
    // The first answer comes late enough for the editor's server to have started.
    let mut look = Turn::tool_call("list_files", json!({}));
    look.delay_ms = Some(4000);
    let fx = Fixture::new(vec![
        look,
        Turn::tool_call(
            "mcp__everything__echo",
            json!({"message": "from the editor's server"}),
        ),
        finish("echoed"),
    ])
    .await;
    let repo = user_repo(&fx);
    let report = drive(&fx, "mcp", &repo, "").await;
    let first = &report["first"];
    assert_eq!(first["ok"]["stopReason"], "end_turn", "{first:#}");
    let calls = updates(first, "tool_call");
    let echo = calls
        .iter()
        .find(|c| c["title"] == "mcp__everything__echo")
        .unwrap_or_else(|| panic!("no echo call: {first:#}"));
    let done = updates(first, "tool_call_update");
    let result = done
        .iter()
        .find(|u| u["toolCallId"] == echo["toolCallId"])
        .expect("the echo call's update");
    assert_eq!(result["status"], "completed", "{result:#}");
    let text = result["content"][0]["content"]["text"]
        .as_str()
        .unwrap_or("");
    assert!(text.contains("from the editor's server"), "{result:#}");
}

#[cfg_attr(
    fabric_no_acp,
    ignore = "needs the ACP TypeScript SDK: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_44_a_session_is_loaded_after_fabric_acp_restarts_and_goes_on() {
    let fx = Fixture::new(vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "hello.txt", "content": "Hello World\n"}),
        ),
        finish("wrote hello.txt"),
        Turn::tool_call("read_file", json!({"path": "hello.txt"})),
        finish("read it again"),
    ])
    .await;
    let repo = user_repo(&fx);
    let before = drive(&fx, "one", &repo, "").await;
    let session = before["sessionId"].as_str().expect("session id").to_owned();
    // A new `fabric acp` process: the session comes from the store.
    let after = drive_env(&fx, &["acp"], "load", &repo, &[("ACP_SESSION", &session)]).await;
    let listed = after["list"]["ok"]["sessions"]
        .as_array()
        .expect("sessions");
    assert_eq!(listed.len(), 1, "{after:#}");
    assert_eq!(listed[0]["sessionId"], json!(session));
    assert_eq!(listed[0]["cwd"], json!(repo));
    assert_eq!(listed[0]["title"], "write hello.txt");
    assert_eq!(after["unknown"]["error"]["code"], -32002, "{after:#}");
    let load = &after["load"];
    assert_eq!(
        load["ok"]["modes"]["currentModeId"], "configured",
        "{load:#}"
    );
    let replayed: Vec<&str> = load["updates"]
        .as_array()
        .expect("updates")
        .iter()
        .filter_map(|u| u["sessionUpdate"].as_str())
        .collect();
    assert_eq!(replayed.first(), Some(&"user_message_chunk"), "{load:#}");
    assert!(replayed.contains(&"tool_call"), "{replayed:?}");
    assert!(said(load).contains("wrote hello.txt"), "{load:#}");
    let next = &after["next"];
    assert_eq!(next["ok"]["stopReason"], "end_turn", "{next:#}");
    // The turn after the restart continues the conversation of the turn before it.
    let last = fx.requests().last().cloned().expect("requests");
    let messages = serde_json::to_string(&last["messages"]).expect("json");
    assert!(messages.contains("write hello.txt"), "{messages}");
    assert!(messages.contains("and once more"), "{messages}");
}

#[cfg_attr(
    fabric_no_acp,
    ignore = "needs the ACP TypeScript SDK: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_44_apply_asks_before_writing_over_a_file_with_unsaved_changes_in_the_editor() {
    let fx = Fixture::new(vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "src/lib.txt", "content": "one\ntwo\nthree\n"}),
        ),
        finish("added three"),
    ])
    .await;
    let repo = user_repo(&fx);
    let lib = repo.join("src/lib.txt");
    let buffers = json!({lib.display().to_string(): "one\ntwo\nunsaved\n"}).to_string();
    let report = drive_env(
        &fx,
        &["acp"],
        "apply",
        &repo,
        &[
            ("ACP_ANSWERS", "reject_once,allow_once"),
            ("ACP_BUFFERS", &buffers),
        ],
    )
    .await;
    assert_eq!(
        report["first"]["ok"]["stopReason"], "end_turn",
        "{report:#}"
    );
    assert_eq!(report["reads"], json!([lib, lib]), "{report:#}");
    let asked = report["permissions"].as_array().expect("permissions");
    assert_eq!(asked.len(), 2, "{report:#}");
    assert!(
        asked[0]["toolCall"]["title"]
            .as_str()
            .unwrap_or("")
            .contains("src/lib.txt")
    );
    let refused = said(&report["refused"]);
    assert!(refused.contains("nothing applied"), "{refused}");
    let applied = said(&report["applied"]);
    assert!(applied.contains("applied 1 file(s)"), "{applied}");
    assert_eq!(
        std::fs::read_to_string(&lib).expect("lib.txt"),
        "one\ntwo\nthree\n"
    );
    let discarded = said(&report["discarded"]);
    assert!(
        discarded.contains("discarded the worktree and branch"),
        "{discarded}"
    );
}

#[cfg_attr(
    fabric_no_acp,
    ignore = "needs the ACP TypeScript SDK: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_44_a_task_forces_members_are_the_plans_entries() {
    let look_and_finish = |summary: &str| Turn {
        tool_calls: vec![
            fabric_test_support::ScriptedCall::new("list_files", json!({})),
            fabric_test_support::ScriptedCall::new(
                "finish_task",
                json!({"summary": summary, "artifacts": [], "next_steps": [], "notes": ""}),
            ),
        ],
        ..Turn::default()
    };
    let fx = Fixture::new(vec![look_and_finish("looked"), look_and_finish("wrote")]).await;
    let dir = fx.workspace_root().join("specialists");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("writer.md"),
        "---\ndescription: Writes things.\ntools: [list_files, read_file, write_file]\n---\nYou write.\n",
    )
    .expect("write the specialist");
    let repo = user_repo(&fx);
    let report = drive_with(
        &fx,
        &["acp", "--pack", "engineering,writer"],
        "one",
        &repo,
        "",
    )
    .await;
    let first = &report["first"];
    assert_eq!(first["ok"]["stopReason"], "end_turn", "{first:#}");
    let plans = updates(first, "plan");
    let statuses = |plan: &Value| -> Vec<String> {
        plan["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| {
                format!(
                    "{} {}",
                    e["content"].as_str().unwrap_or(""),
                    e["status"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    assert_eq!(
        statuses(plans[0]),
        [
            "engineering: its part of the task in_progress",
            "writer: its part of the task pending"
        ],
        "{first:#}"
    );
    let last = plans.last().expect("plans");
    assert!(
        statuses(last).iter().all(|s| s.ends_with(" completed")),
        "{first:#}"
    );
}

/// A config whose `notes` specialist is the TypeScript SDK's tiny ACP agent
/// (`tests/acp/agent.mjs`), and whose engineering specialist delegates to it.
fn with_notes_agent(fx: &Fixture, approval: &str) {
    let deps = fabric_test_support::acp_deps().expect("the ACP SDK is in the test deps");
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp/agent.mjs");
    fx.append_config(&format!(
        "specialists:\n  notes:\n    description: Writes notes through an ACP agent.\n    acp:\n      command: node\n      args: [{}]\n      env: {{FABRIC_ACP_DEPS: {}}}\n      timeout_s: 60\n  engineering:\n    delegates: [notes]\n{approval}",
        agent.display(),
        deps.display()
    ));
}

fn delegation_turns() -> Vec<Turn> {
    vec![
        Turn::tool_call("agent__notes", json!({"task": "remember the milk"})),
        finish("delegated"),
    ]
}

/// The result (or error) the runlog recorded for the `agent__notes` call.
fn notes_answer(fx: &Fixture, result: &Value) -> (String, Value) {
    let events = fx.runlog(result);
    let answer = events
        .iter()
        .find(|e| {
            (e["kind"] == "tool_result" || e["kind"] == "tool_error")
                && e["payload"]["tool"] == "agent__notes"
        })
        .unwrap_or_else(|| panic!("no answer of agent__notes: {events:#?}"))
        .clone();
    (
        answer["kind"].as_str().unwrap_or("").to_owned(),
        answer["payload"].clone(),
    )
}

#[cfg_attr(
    fabric_no_acp,
    ignore = "needs the ACP TypeScript SDK: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_44_an_acp_agent_is_a_specialist_its_permission_answered_by_the_approval_policy() {
    // `approval: never` (the default): the agent's request is allowed and it writes.
    let fx = Fixture::new([delegation_turns(), delegation_turns()].concat()).await;
    with_notes_agent(&fx, "");
    let result = fx.run_json("note it", &[], 0).await;
    let (kind, payload) = notes_answer(&fx, &result);
    assert_eq!(kind, "tool_result", "{payload:#}");
    let answer: Value = match &payload["result"] {
        Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        other => other.clone(),
    };
    assert_eq!(answer["stop_reason"], "end_turn", "{payload:#}");
    assert!(
        answer["text"]
            .as_str()
            .unwrap_or("")
            .starts_with("I wrote notes.txt in"),
        "{answer:#}"
    );
    assert_eq!(answer["calls"], json!(["write notes.txt"]));
    let workspace = PathBuf::from(result["_meta"]["workspace"].as_str().expect("workspace"));
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.txt")).expect("notes.txt"),
        "remember the milk\n"
    );
    // What the agent says reaches the people following the run while the call works.
    let shown = fx
        .fabric(&["run", "note it", "--pack", "engineering"])
        .await;
    shown.assert_code(0);
    let seen = format!("{}{}", shown.stdout, shown.stderr);
    assert!(seen.contains("→ write notes.txt"), "{seen}");
    assert!(seen.contains("I wrote notes.txt in"), "{seen}");

    // `approval: untrusted`: the call itself is approved by the flag, the agent's own
    // request is rejected (no person reaches it).
    let fx = Fixture::new(delegation_turns()).await;
    with_notes_agent(&fx, "    approval: {mode: untrusted}\n");
    let result = fx
        .run_json("note it", &["--on-question", "answer=approve"], 0)
        .await;
    let (_, payload) = notes_answer(&fx, &result);
    let text = payload.to_string();
    assert!(
        text.contains("I was not allowed to write notes.txt."),
        "{payload:#}"
    );
    assert!(text.contains("rejected"), "{payload:#}");
}

#[cfg_attr(
    fabric_no_acp,
    ignore = "needs the ACP TypeScript SDK: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_44_a_command_shows_its_live_output_and_a_question_its_choices() {
    let fx = Fixture::new(vec![
        Turn::tool_call("shell", json!({"cmd": ["echo", "hello from the shell"]})),
        Turn::tool_call(
            "ask_user",
            json!({"question": "Which colour?", "choices": ["red", "blue"]}),
        ),
        finish("chose"),
    ])
    .await;
    fx.append_config(
        "specialists:\n  engineering:\n    tools: [read_file, write_file, list_files, shell, ask_user]\n",
    );
    let repo = user_repo(&fx);
    let report = drive(&fx, "one", &repo, "allow_once").await;
    let first = &report["first"];
    assert_eq!(first["ok"]["stopReason"], "end_turn", "{first:#}");
    let calls = updates(first, "tool_call");
    assert_eq!(calls[0]["kind"], "execute", "{first:#}");
    assert_eq!(calls[0]["title"], "shell echo hello from the shell");
    assert_eq!(calls[1]["kind"], "think");
    let live = updates(first, "tool_call_update")
        .into_iter()
        .find(|u| u["status"] == "in_progress" && u["toolCallId"] == calls[0]["toolCallId"])
        .unwrap_or_else(|| panic!("no live output: {first:#}"));
    assert_eq!(
        live["content"][0]["content"]["text"],
        "hello from the shell"
    );
    let asked = &report["permissions"][0];
    assert_eq!(asked["toolCall"]["title"], "Which colour?", "{report:#}");
    let names: Vec<&str> = asked["options"]
        .as_array()
        .expect("options")
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    assert_eq!(names, ["red", "blue"]);
    // The first choice was picked: the model got it as the answer.
    let last = fx.requests().last().cloned().expect("requests");
    assert!(last["messages"].to_string().contains("red"), "{last:#}");
}

/// Lines no SDK would send: answered with JSON-RPC errors, and the process goes on.
#[tokio::test]
async fn issue_44_lines_that_are_not_json_rpc_are_errors_not_a_crash() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let fx = Fixture::new(Vec::new()).await;
    let mut child = fx
        .command(&["acp"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("fabric acp starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut ask = async |line: &str| -> Value {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write");
        let answer = tokio::time::timeout(std::time::Duration::from_secs(20), lines.next_line())
            .await
            .expect("an answer within 20 s")
            .expect("read")
            .expect("a line");
        serde_json::from_str(&answer).expect("JSON")
    };
    let junk = ask("{this is not json").await;
    assert_eq!(junk["error"]["code"], -32700, "{junk}");
    assert_eq!(junk["id"], Value::Null);
    let old = ask(r#"{"id": 7, "method": "initialize"}"#).await;
    assert_eq!(old["error"]["code"], -32600, "{old}");
    assert_eq!(old["id"], 7);
    let params = ask(r#"{"jsonrpc": "2.0", "id": 8, "method": "session/new", "params": 3}"#).await;
    assert_eq!(params["error"]["code"], -32602, "{params}");
    let fine = ask(
        r#"{"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {"protocolVersion": 1}}"#,
    )
    .await;
    assert_eq!(fine["result"]["protocolVersion"], 1, "{fine}");
    drop(stdin);
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait())
        .await
        .expect("exits once stdin closes")
        .expect("wait");
    assert!(status.success(), "{status}");
}
