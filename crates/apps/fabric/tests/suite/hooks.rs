//! Issue #43: lifecycle hooks in Claude Code's settings format, from the config's `hooks:`
//! key: each event fires with the documented stdin, a PreToolUse deny or exit 2 reaches the
//! model, `updatedInput` rewrites a call, a PostToolUse formatter's change is in the call's
//! checkpoint, a Stop hook keeps a run going, a hanging hook times out, `ask` goes to the
//! approval path, and a replay decides as recorded without running a hook.

use fabric_test_support::Turn;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

use super::fixture::{Fixture, kinds, of_kind, tool_messages};
use super::projects::{git, user_repo};

fn finish() -> Turn {
    Turn::tool_call(
        "finish_task",
        json!({"summary": "done", "artifacts": [], "next_steps": [], "notes": ""}),
    )
}

fn write(path: &str, content: &str) -> Turn {
    Turn::tool_call("write_file", json!({"path": path, "content": content}))
}

/// A hook script under the fixture's directory: `body` after `#!/bin/sh`, executable.
fn script(fx: &Fixture, name: &str, body: &str) -> PathBuf {
    let path = fx.dir.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// `hooks:` with one group per `(event, matcher, command, timeout)`, in Claude Code's shape.
fn hooks_yaml(groups: &[(&str, Option<&str>, &Path, Option<u64>)]) -> String {
    let mut by_event: serde_json::Map<String, Value> = serde_json::Map::new();
    for (event, matcher, command, timeout) in groups {
        let mut hook = json!({"type": "command", "command": command.display().to_string()});
        if let Some(t) = timeout {
            hook["timeout"] = json!(t);
        }
        let mut group = json!({"hooks": [hook]});
        if let Some(m) = matcher {
            group["matcher"] = json!(m);
        }
        by_event
            .entry(event.to_string())
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .expect("a list")
            .push(group);
    }
    // JSON is YAML.
    format!("hooks: {}\n", Value::Object(by_event))
}

/// The JSON objects a dumping hook appended to `file`, one a line.
fn dumped(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn hook_runs(events: &[Value]) -> Vec<&Value> {
    of_kind(events, "hook_run")
        .into_iter()
        .map(|e| &e["payload"])
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_each_event_fires_with_claude_codes_stdin_fields() {
    let fx = Fixture::new(vec![write("a.txt", "alpha\n"), finish()]).await;
    let dump = fx.dir.path().join("stdin.jsonl");
    let env = fx.dir.path().join("env.txt");
    let dumper = script(
        &fx,
        "dump.sh",
        &format!(
            "{{ cat; echo; }} >> '{}'\necho \"$FABRIC_RUN_ID $CLAUDE_PROJECT_DIR $PWD\" >> '{}'",
            dump.display(),
            env.display()
        ),
    );
    let events = [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "Stop",
        "SessionEnd",
    ];
    let groups: Vec<_> = events
        .iter()
        .map(|e| (*e, None, dumper.as_path(), None))
        .collect();
    fx.append_config(&hooks_yaml(&groups));
    let result = fx.run_json("write a.txt", &[], 0).await;
    let id = result["_meta"]["run_id"].as_str().unwrap();
    let workspace = result["_meta"]["workspace"].as_str().unwrap();
    let inputs = dumped(&dump);
    let fired: Vec<&str> = inputs
        .iter()
        .map(|i| i["hook_event_name"].as_str().unwrap())
        .collect();
    assert_eq!(fired, events, "in the order the loop reaches them");
    let transcript = fx
        .workspace_root()
        .join("runs")
        .join(id)
        .join("runlog.jsonl");
    for input in &inputs {
        assert_eq!(input["session_id"], id);
        assert_eq!(input["transcript_path"], transcript.display().to_string());
        assert_eq!(input["cwd"], workspace);
        assert_eq!(input["permission_mode"], "default");
    }
    assert_eq!(inputs[0]["source"], "startup");
    assert_eq!(inputs[1]["prompt"], "write a.txt");
    let pre = &inputs[2];
    assert_eq!(pre["tool_name"], "write_file");
    assert_eq!(
        pre["tool_input"],
        json!({"path": "a.txt", "content": "alpha\n"})
    );
    let call_id = pre["tool_use_id"].as_str().expect("tool_use_id");
    let post = &inputs[3];
    assert_eq!(post["tool_use_id"], call_id);
    assert_eq!(post["tool_response"]["path"], "a.txt");
    assert_eq!(inputs[4]["stop_hook_active"], false);
    assert_eq!(inputs[5]["reason"], "completed");
    // The environment: the run's id, the project dir (a scratch run's workspace), its cwd.
    let env = std::fs::read_to_string(&env).unwrap();
    let line = env.lines().next().unwrap();
    assert_eq!(line, format!("{id} {workspace} {workspace}"));
    // One `hook_run` per hook, each `ok`, with its event, command and call.
    let events = fx.runlog(&result);
    let runs = hook_runs(&events);
    // The run's six hooks; the replay (above, in `run_json`) ran none.
    assert_eq!(runs.len(), 6, "{:?}", kinds(&events));
    assert_eq!(dumped(&dump).len(), 6, "the replay ran no hook");
    for run in &runs {
        assert_eq!(run["outcome"], "ok", "{run}");
        assert_eq!(run["source"], "config");
        assert_eq!(run["exit_code"], 0);
        assert!(run["duration_ms"].is_u64());
    }
    assert_eq!(runs[2]["event"], "PreToolUse");
    assert_eq!(runs[2]["call_id"], call_id);
    assert_eq!(runs[2]["tool"], "write_file");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_pre_tool_use_deny_reaches_the_model_with_its_reason() {
    let fx = Fixture::new(vec![write("secret.txt", "x"), finish()]).await;
    let deny = script(
        &fx,
        "deny.sh",
        r#"echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "secrets stay out of the repository"}}'"#,
    );
    fx.append_config(&hooks_yaml(&[(
        "PreToolUse",
        Some("Write|Edit"),
        &deny,
        None,
    )]));
    let result = fx.run_json("write the secret", &[], 0).await;
    let workspace = PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
    assert!(
        !workspace.join("secret.txt").exists(),
        "denied, it did not run"
    );
    let requests = fx.requests();
    let said = tool_messages(&requests[1]);
    assert!(
        said[0].contains("a PreToolUse hook refused this call of `write_file`: secrets stay out of the repository"),
        "{said:?}"
    );
    let events = fx.runlog(&result);
    let runs = hook_runs(&events);
    assert_eq!(runs[0]["outcome"], "denied");
    assert_eq!(runs[0]["matcher"], "Write|Edit");
    assert_eq!(runs[0]["message"], "secrets stay out of the repository");
    let failed = &of_kind(&events, "tool_error")[0]["payload"];
    assert_eq!(failed["error_type"], "permission");
    assert_eq!(
        of_kind(&events, "security_event")[0]["payload"]["event_type"],
        "hook_denied"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_exit_code_2_blocks_with_stderr() {
    let turns = vec![Turn::tool_call("shell", json!({"cmd": ["ls"]})), finish()];
    let fx = Fixture::new(turns).await;
    let block = script(
        &fx,
        "block.sh",
        "echo 'listing is not allowed here' >&2\nexit 2",
    );
    fx.append_config(&hooks_yaml(&[("PreToolUse", Some("Bash"), &block, None)]));
    let result = fx.run_json("list", &[], 0).await;
    let said = tool_messages(&fx.requests()[1]);
    assert!(said[0].contains("listing is not allowed here"), "{said:?}");
    let events = fx.runlog(&result);
    let runs = hook_runs(&events);
    assert_eq!(runs[0]["outcome"], "blocked");
    assert_eq!(runs[0]["exit_code"], 2);
    assert_eq!(runs[0]["tool"], "shell");
    assert!(
        of_kind(&events, "tool_result")
            .iter()
            .all(|r| r["payload"]["tool"] != "shell")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_updated_input_rewrites_the_call_and_the_rewrite_is_recorded() {
    let fx = Fixture::new(vec![write("a.txt", "as the model wrote it"), finish()]).await;
    let rewrite = script(
        &fx,
        "rewrite.sh",
        r#"echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": {"path": "b.txt", "content": "as the hook rewrote it"}}}'"#,
    );
    fx.append_config(&hooks_yaml(&[(
        "PreToolUse",
        Some("write_file"),
        &rewrite,
        None,
    )]));
    let result = fx.run_json("write a.txt", &[], 0).await;
    let workspace = PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
    assert!(!workspace.join("a.txt").exists());
    assert_eq!(
        std::fs::read_to_string(workspace.join("b.txt")).unwrap(),
        "as the hook rewrote it"
    );
    let events = fx.runlog(&result);
    let run = hook_runs(&events)[0];
    assert_eq!(run["outcome"], "rewritten");
    assert_eq!(
        run["updated_input"],
        json!({"path": "b.txt", "content": "as the hook rewrote it"})
    );
    // Checked against the schema again: a rewrite that does not fit is the model's error.
    let fx = Fixture::new(vec![write("a.txt", "x"), finish()]).await;
    let broken = script(
        &fx,
        "broken.sh",
        r#"echo '{"hookSpecificOutput": {"updatedInput": {"content": "no path"}}}'"#,
    );
    fx.append_config(&hooks_yaml(&[("PreToolUse", None, &broken, None)]));
    fx.run_json("write a.txt", &[], 0).await;
    let said = tool_messages(&fx.requests()[1]);
    assert!(said[0].contains("path"), "{said:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_post_tool_use_formatter_on_a_project_run_is_in_the_calls_checkpoint() {
    let fx = Fixture::new(vec![write("hello.txt", "hello world\n"), finish()]).await;
    let repo = user_repo(&fx);
    // A formatter: every .txt file of the worktree in capitals, and a note for the model.
    let format = script(
        &fx,
        "format.sh",
        "cat > /dev/null\nfor f in *.txt; do tr a-z A-Z < \"$f\" > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"; done\necho '{\"hookSpecificOutput\": {\"hookEventName\": \"PostToolUse\", \"additionalContext\": \"formatted: capitals\"}}'",
    );
    fx.append_config(&hooks_yaml(&[(
        "PostToolUse",
        Some("Write|Edit"),
        &format,
        None,
    )]));
    let result = fx
        .run_json("add hello.txt", &["--project", repo.to_str().unwrap()], 0)
        .await;
    let events = fx.runlog(&result);
    let checkpoint = &of_kind(&events, "checkpoint")[0]["payload"];
    let commit = checkpoint["commit"].as_str().expect("a commit");
    assert_eq!(
        git(&repo, &["show", &format!("{commit}:hello.txt")]),
        "HELLO WORLD"
    );
    // The note is beside the result, in the runlog and for the model.
    let said = tool_messages(&fx.requests()[1]);
    assert!(
        said[0].contains("[PostToolUse hook] formatted: capitals"),
        "{said:?}"
    );
    let k = kinds(&events);
    let at = k.iter().position(|k| *k == "checkpoint").unwrap();
    assert_eq!(
        &k[at - 1..=at + 1],
        &["hook_run", "checkpoint", "tool_result"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_stop_hook_keeps_the_run_going_until_the_file_exists() {
    // (`finish_task` is refused before any other tool was used: some work first.)
    let turns = vec![
        write("work.txt", "w"),
        finish(),
        write("done.txt", "yes"),
        finish(),
    ];
    let fx = Fixture::new(turns).await;
    let dump = fx.dir.path().join("stops.jsonl");
    let gate = script(
        &fx,
        "gate.sh",
        &format!(
            "{{ cat; echo; }} >> '{}'\nif [ -f done.txt ]; then exit 0; fi\necho '{{\"decision\": \"block\", \"reason\": \"done.txt is missing: write it first\"}}'",
            dump.display()
        ),
    );
    fx.append_config(&hooks_yaml(&[("Stop", None, &gate, None)]));
    let result = fx.run_json("finish when done", &[], 0).await;
    assert_eq!(result["_meta"]["status"], "completed");
    assert_eq!(result["_meta"]["steps"], 4);
    let requests = fx.requests();
    let messages = requests[2]["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(
        last["content"],
        "[Stop hook] done.txt is missing: write it first"
    );
    let stops = dumped(&dump);
    let active: Vec<&Value> = stops.iter().map(|s| &s["stop_hook_active"]).collect();
    assert_eq!(active, [&json!(false), &json!(true)]);
    let events = fx.runlog(&result);
    let outcomes: Vec<&Value> = hook_runs(&events).iter().map(|r| &r["outcome"]).collect();
    assert_eq!(outcomes, [&json!("blocked"), &json!("ok")]);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_stop_hook_cannot_keep_a_run_past_its_step_budget() {
    let fx = Fixture::new(vec![write("a.txt", "a"), finish(), finish(), finish()]).await;
    let never = script(&fx, "never.sh", "echo 'not yet' >&2\nexit 2");
    fx.append_config(&hooks_yaml(&[("Stop", None, &never, None)]));
    let run = fx
        .fabric(&[
            "run",
            "x",
            "--pack",
            "engineering",
            "--json",
            "--max-steps",
            "3",
        ])
        .await;
    let result = run.json();
    assert_eq!(result["_meta"]["status"], "max_steps_exceeded", "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_hook_that_hangs_times_out_and_the_run_goes_on() {
    let fx = Fixture::new(vec![write("a.txt", "x"), finish()]).await;
    let hang = script(&fx, "hang.sh", "sleep 30");
    fx.append_config(&hooks_yaml(&[("PreToolUse", None, &hang, Some(1))]));
    let started = std::time::Instant::now();
    let result = fx.run_json("write", &[], 0).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(25));
    let workspace = PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
    assert!(workspace.join("a.txt").exists(), "fail-open: the call ran");
    let events = fx.runlog(&result);
    let run = hook_runs(&events)[0];
    assert_eq!(run["outcome"], "timeout");
    assert_eq!(run["detail"], "killed after 1 s");
    assert!(run.get("exit_code").is_none());
    assert!(run["duration_ms"].as_u64().unwrap() >= 1000);
    // Garbage on stdout is typed too, and goes ahead.
    let fx = Fixture::new(vec![write("a.txt", "x"), finish()]).await;
    let garbage = script(&fx, "garbage.sh", "echo '{oops'");
    fx.append_config(&hooks_yaml(&[("PreToolUse", None, &garbage, None)]));
    let result = fx.run_json("write", &[], 0).await;
    let events = fx.runlog(&result);
    assert_eq!(hook_runs(&events)[0]["outcome"], "invalid_output");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_ask_goes_to_the_approval_path() {
    let fx = Fixture::new(vec![write("a.txt", "x"), finish()]).await;
    let ask = script(
        &fx,
        "ask.sh",
        r#"echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask", "permissionDecisionReason": "writes need a look"}}'"#,
    );
    fx.append_config(&hooks_yaml(&[("PreToolUse", None, &ask, None)]));
    let run = fx
        .fabric(&[
            "run",
            "write",
            "--pack",
            "engineering",
            "--json",
            "--on-question",
            "answer=approve",
        ])
        .await;
    run.assert_code(0);
    let result = run.json();
    let workspace = PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
    assert!(workspace.join("a.txt").exists(), "approved, it ran");
    let events = fx.runlog(&result);
    assert_eq!(
        hook_runs(&events).len(),
        1,
        "{:?}\n{}",
        kinds(&events),
        run.stderr
    );
    assert_eq!(hook_runs(&events)[0]["outcome"], "asked");
    // Answered at once (`--on-question answer=`): no wait is recorded, the answer is.
    let answered = &of_kind(&events, "input_answered")[0]["payload"];
    assert_eq!(answered["decision"], "approve");
    assert_eq!(answered["by"], "flag");
    fx.assert_replays(&result).await;
    // Asked where no one can answer: the model is told the call needs an approval.
    let fx = Fixture::new(vec![write("a.txt", "x"), finish()]).await;
    let ask = script(
        &fx,
        "ask.sh",
        r#"echo '{"hookSpecificOutput": {"permissionDecision": "ask", "permissionDecisionReason": "writes need a look"}}'"#,
    );
    fx.append_config(&hooks_yaml(&[("PreToolUse", None, &ask, None)]));
    let run = fx
        .fabric(&["run", "write", "--pack", "engineering", "--json"])
        .await;
    run.assert_code(0);
    let said = tool_messages(&fx.requests()[1]);
    assert!(said[0].contains("needs a person's approval"), "{said:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_bad_hooks_key_is_refused_with_its_key() {
    let fx = Fixture::new(vec![finish()]).await;
    fx.append_config(
        "hooks:\n  PreToolUse:\n    - matcher: \"(\"\n      hooks: [{type: command, command: x}]\n",
    );
    let run = fx.fabric(&["run", "x", "--pack", "engineering"]).await;
    assert_ne!(run.code(), 0);
    assert!(
        run.stderr.contains("`hooks.PreToolUse[0].matcher`")
            && run.stderr.contains("regular expression"),
        "{}",
        run.stderr
    );
}

/// A SessionStart hook giving context as plain text (as Claude Code takes it for these two
/// events), and a UserPromptSubmit hook giving it as `additionalContext`.
fn context_hooks(fx: &Fixture) -> (PathBuf, PathBuf) {
    let start = script(fx, "start.sh", "echo 'the tests run with make check'");
    let prompt = script(
        fx,
        "prompt.sh",
        r#"echo '{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "ticket ABC-1"}}'"#,
    );
    (start, prompt)
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_session_start_and_prompt_context_reach_the_model_after_the_system_prompt() {
    let fx = Fixture::new(vec![write("a.txt", "a"), finish()]).await;
    let (start, prompt) = context_hooks(&fx);
    fx.append_config(&hooks_yaml(&[
        ("SessionStart", Some("startup"), &start, None),
        ("UserPromptSubmit", None, &prompt, None),
    ]));
    fx.run_json("write a.txt", &[], 0).await;
    let requests = fx.requests();
    let messages: Vec<(&str, &str)> = requests[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(messages[0].0, "system");
    assert_eq!(
        messages[1],
        ("user", "[SessionStart hook] the tests run with make check")
    );
    assert_eq!(messages[2], ("user", "write a.txt"));
    assert_eq!(
        messages[3],
        ("user", "[UserPromptSubmit hook] ticket ABC-1")
    );
    // The system prompt is the same text from step to step: the prefix stays byte-stable.
    assert_eq!(requests[0]["messages"][0], requests[1]["messages"][0]);
    assert_eq!(requests[0]["messages"][1], requests[1]["messages"][1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_user_prompt_submit_block_ends_the_run_before_the_model_is_asked() {
    let fx = Fixture::new(vec![finish()]).await;
    let block = script(&fx, "block.sh", "echo 'no tasks on Fridays' >&2\nexit 2");
    fx.append_config(&hooks_yaml(&[("UserPromptSubmit", None, &block, None)]));
    let run = fx
        .fabric(&["run", "deploy", "--pack", "engineering", "--json"])
        .await;
    let result = run.json();
    assert_eq!(result["_meta"]["status"], "failed", "{result}");
    assert!(
        result["_meta"]["reason"]
            .as_str()
            .unwrap()
            .contains("a UserPromptSubmit hook blocked the task: no tasks on Fridays"),
        "{result}"
    );
    assert!(fx.requests().is_empty(), "the model was never asked");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_pre_compact_fires_before_the_conversation_is_compacted() {
    let content = "line of the notes file, with enough words to take room\n".repeat(28);
    let mut turns = vec![write("notes.txt", &content)];
    for i in 0..20 {
        let path = if i % 2 == 0 {
            "notes.txt"
        } else {
            "./notes.txt"
        };
        turns.push(Turn::tool_call("read_file", json!({"path": path})));
    }
    turns.push(finish());
    let mut scenario = fabric_test_support::Scenario::new(turns);
    for model in &mut scenario.models {
        model.context_length = Some(4096);
    }
    let fx = Fixture::with_backend(scenario, "ollama").await;
    let dump = fx.dir.path().join("compact.jsonl");
    let dumper = script(
        &fx,
        "dump.sh",
        &format!("{{ cat; echo; }} >> '{}'", dump.display()),
    );
    fx.append_config(&hooks_yaml(&[("PreCompact", Some("auto"), &dumper, None)]));
    let result = fx
        .run_json("read the notes again", &["--max-steps", "30"], 0)
        .await;
    let events = fx.runlog(&result);
    let compactions = of_kind(&events, "context_compacted").len();
    assert!(compactions > 0);
    let inputs = dumped(&dump);
    assert_eq!(inputs.len(), compactions, "one PreCompact per compaction");
    assert_eq!(inputs[0]["hook_event_name"], "PreCompact");
    assert_eq!(inputs[0]["trigger"], "auto");
    // Each is recorded before the compaction it precedes.
    let k = kinds(&events);
    let first_hook = k.iter().position(|k| *k == "hook_run").unwrap();
    assert_eq!(k[first_hook + 1], "context_compacted");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_delegated_child_fires_subagent_stop_and_its_parent_stop() {
    let fx = Fixture::new(super::delegation::delegated_hello()).await;
    super::delegation::write_lead(&fx);
    let dump = fx.dir.path().join("stops.jsonl");
    let dumper = script(
        &fx,
        "dump.sh",
        &format!("{{ cat; echo; }} >> '{}'", dump.display()),
    );
    fx.append_config(&hooks_yaml(&[
        ("Stop", None, &dumper, None),
        ("SubagentStop", None, &dumper, None),
        ("SessionStart", None, &dumper, None),
    ]));
    let run = fx
        .fabric(&["run", "make hello", "--pack", "lead", "--json"])
        .await;
    run.assert_code(0);
    let id = run.json()["_meta"]["run_id"].as_str().unwrap().to_owned();
    let inputs = dumped(&dump);
    let fired: Vec<(&str, bool)> = inputs
        .iter()
        .map(|i| {
            (
                i["hook_event_name"].as_str().unwrap(),
                i["session_id"] == id.as_str(),
            )
        })
        .collect();
    // The child (another run id) fires no SessionStart, and SubagentStop where its parent
    // fires Stop.
    assert_eq!(
        fired,
        [
            ("SessionStart", true),
            ("SubagentStop", false),
            ("Stop", true)
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_steering_message_goes_through_user_prompt_submit() {
    let mut slow = Turn::tool_call("list_files", json!({}));
    slow.delay_ms = Some(2_500);
    let fx = Fixture::new(vec![
        Turn::tool_call("list_files", json!({})),
        slow,
        finish(),
    ])
    .await;
    let dump = fx.dir.path().join("prompts.jsonl");
    let hook = script(
        &fx,
        "prompt.sh",
        &format!(
            "input=$(cat)\necho \"$input\" >> '{}'\ncase \"$input\" in *\"also check\"*) echo 'steering noted';; esac",
            dump.display()
        ),
    );
    fx.append_config(&hooks_yaml(&[("UserPromptSubmit", None, &hook, None)]));
    let run = fx
        .command(&["run", "look around", "--pack", "engineering", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("fabric run starts");
    // The run's directory appears when it is created: no store to contend with.
    let runs = fx.workspace_root().join("runs");
    let mut id = None;
    for _ in 0..600 {
        id = std::fs::read_dir(&runs)
            .into_iter()
            .flatten()
            .flatten()
            .find(|e| e.path().join("runlog.jsonl").is_file())
            .and_then(|e| e.file_name().to_str().map(str::to_owned));
        if id.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let id = id.expect("the run is listed");
    fx.fabric(&["steer", &id, "also check the tests"])
        .await
        .assert_code(0);
    let output = run.wait_with_output().await.expect("fabric run ends");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let prompts: Vec<Value> = dumped(&dump)
        .into_iter()
        .map(|i| i["prompt"].clone())
        .collect();
    assert_eq!(
        prompts,
        [json!("look around"), json!("also check the tests")]
    );
    let last = fx.requests().last().cloned().expect("a request");
    let said: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(
        &said[said.len() - 2..],
        &[
            "also check the tests",
            "[UserPromptSubmit hook] steering noted"
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_hooks_get_the_scrubbed_environment_and_die_with_their_group() {
    let fx = Fixture::new(vec![write("a.txt", "a"), finish()]).await;
    let env = fx.dir.path().join("env.txt");
    let late = fx.dir.path().join("late.txt");
    // Exits at once, leaving a process behind in its group.
    let hook = script(
        &fx,
        "env.sh",
        &format!(
            "env > '{}'\n(sleep 2; touch '{}') > /dev/null 2>&1 &\nexit 0",
            env.display(),
            late.display()
        ),
    );
    fx.append_config(&hooks_yaml(&[("PreToolUse", None, &hook, None)]));
    let run = fx
        .fabric_with(
            &["run", "write", "--pack", "engineering", "--json"],
            &[
                ("FABRIC_TEST_SECRET_API_KEY", "hunter2"),
                ("LANG", "C.UTF-8"),
            ],
        )
        .await;
    run.assert_code(0);
    let id = run.json()["_meta"]["run_id"].as_str().unwrap().to_owned();
    let seen = std::fs::read_to_string(&env).unwrap();
    let names: Vec<&str> = seen.lines().filter_map(|l| l.split('=').next()).collect();
    assert!(!seen.contains("hunter2"), "{seen}");
    assert!(
        names.contains(&"PATH") && names.contains(&"LANG"),
        "{names:?}"
    );
    assert!(seen.contains(&format!("FABRIC_RUN_ID={id}")), "{seen}");
    assert!(names.contains(&"CLAUDE_PROJECT_DIR"), "{names:?}");
    let allowed = [
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "TMPDIR",
        "TERM",
        "CLAUDE_PROJECT_DIR",
        "FABRIC_RUN_ID",
        "PWD",
        "SHLVL",
        "_",
        "OLDPWD",
    ];
    for name in &names {
        assert!(allowed.contains(name), "`{name}` reached a hook: {seen}");
    }
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(
        !late.exists(),
        "what the hook left running died with its group"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_the_terminal_shows_each_hook_run() {
    let fx = Fixture::new(vec![write("secret.txt", "x"), finish()]).await;
    let deny = script(&fx, "deny.sh", "echo 'no secrets' >&2\nexit 2");
    fx.append_config(&hooks_yaml(&[("PreToolUse", None, &deny, None)]));
    let run = fx.fabric(&["run", "write", "--pack", "engineering"]).await;
    run.assert_code(0);
    let shown = format!("{}{}", run.stdout, run.stderr);
    assert!(
        shown.contains("hook PreToolUse `")
            && shown.contains("` blocked in ")
            && shown.contains(": no secrets"),
        "{shown}"
    );
}

/// A fixture over `turns` with one `event` hook, which prints `answer` (JSON).
async fn answering(turns: Vec<Turn>, event: &str, answer: &str) -> Fixture {
    let fx = Fixture::new(turns).await;
    let hook = script(&fx, "answer.sh", &format!("echo '{answer}'"));
    fx.append_config(&hooks_yaml(&[(event, None, &hook, None)]));
    fx
}

/// The runlog of the fixture's one run.
fn only_runlog(fx: &Fixture) -> Vec<Value> {
    let runs = fx.workspace_root().join("runs");
    let mut ids = std::fs::read_dir(&runs)
        .expect("runs")
        .map(|e| e.expect("entry").file_name());
    let id = ids.next().expect("a run");
    assert!(ids.next().is_none(), "one run");
    super::fixture::read_runlog(&runs.join(id).join("runlog.jsonl"))
}

/// Every message of every request the model was sent, as text.
fn all_said(fx: &Fixture) -> String {
    fx.requests()
        .iter()
        .map(|r| r["messages"].to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_hook_answering_continue_false_stops_the_run_and_shows_its_reason() {
    // A Stop hook's `continue: false` wins over its `decision: block` (which would keep the
    // run going): the run ends `cancelled` there, and neither reason reaches the model.
    let fx = Fixture::new(vec![write("a.txt", "a"), finish(), finish()]).await;
    let ran = fx.dir.path().join("ran.txt");
    let stop = script(
        &fx,
        "stop.sh",
        &format!(
            r#"echo x >> '{}'
echo '{{"continue": false, "stopReason": "the deploy window closed", "decision": "block", "reason": "keep going"}}'"#,
            ran.display()
        ),
    );
    fx.append_config(&hooks_yaml(&[("Stop", None, &stop, None)]));
    let result = fx.run_json("write a.txt", &[], 130).await;
    assert_eq!(result["_meta"]["status"], "cancelled", "{result}");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("a Stop hook stopped the run (`continue: false`)"),
        "{reason}"
    );
    assert!(!reason.contains("deploy window"), "{reason}");
    assert_eq!(fx.requests().len(), 2, "the model was not asked again");
    let said = all_said(&fx);
    assert!(!said.contains("deploy window") && !said.contains("keep going"));
    let events = fx.runlog(&result);
    let runs = hook_runs(&events);
    assert_eq!(runs.len(), 1, "{:?}", kinds(&events));
    assert_eq!(runs[0]["outcome"], "stopped");
    assert_eq!(runs[0]["stop_reason"], "the deploy window closed");
    assert!(runs[0].get("message").is_none(), "{}", runs[0]);
    let ended = &of_kind(&events, "run_failed")[0]["payload"];
    assert_eq!(ended["status"], "cancelled");
    // `run_json` replayed it: the replay stopped as recorded and ran no hook.
    assert_eq!(std::fs::read_to_string(&ran).unwrap().lines().count(), 1);

    // A PostToolUse hook's: the call's result is recorded (and the file written), then the
    // run ends; the terminal shows the reason, escaped.
    let turns = vec![write("a.txt", "a"), write("b.txt", "b"), finish()];
    let answer = r#"{"continue": false, "stopReason": "quota \u001b[31mused up"}"#;
    let fx = answering(turns, "PostToolUse", answer).await;
    let run = fx.fabric(&["run", "write", "--pack", "engineering"]).await;
    assert_eq!(run.code(), 130, "{}\n{}", run.stdout, run.stderr);
    let shown = format!("{}{}", run.stdout, run.stderr);
    assert!(
        shown.contains("hook PostToolUse `") && shown.contains("` stopped in "),
        "{shown}"
    );
    assert!(shown.contains(": quota \\x1b[31mused up"), "{shown}");
    assert!(!shown.contains('\u{1b}'), "escaped: {shown}");
    assert_eq!(fx.requests().len(), 1, "the model was not asked again");
    let events = only_runlog(&fx);
    assert_eq!(
        of_kind(&events, "tool_result").len(),
        1,
        "{:?}",
        kinds(&events)
    );
    assert_eq!(
        of_kind(&events, "tool_call").len(),
        1,
        "b.txt was never called"
    );
    assert_eq!(hook_runs(&events)[0]["outcome"], "stopped");
    let id = &of_kind(&events, "run_start")[0]["payload"]["run_id"];
    assert!(id.is_string(), "{id}");
    fx.assert_replays(&json!({"_meta": {"run_id": id}})).await;

    // A SessionStart hook's: before the model is ever asked.
    let answer = r#"{"continue": false, "stopReason": "not on a Friday"}"#;
    let fx = answering(vec![finish()], "SessionStart", answer).await;
    let result = fx.run_json("x", &[], 130).await;
    assert_eq!(result["_meta"]["status"], "cancelled", "{result}");
    assert!(fx.requests().is_empty(), "the model was never asked");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_hook_system_message_is_shown_to_the_user_not_the_model() {
    let answer = r#"{"systemMessage": "disk \u001b[2J91% full", "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "formatted a.txt"}}"#;
    let fx = answering(vec![write("a.txt", "a"), finish()], "PostToolUse", answer).await;
    let run = fx.fabric(&["run", "write", "--pack", "engineering"]).await;
    run.assert_code(0);
    let shown = format!("{}{}", run.stdout, run.stderr);
    assert!(shown.contains("⚠ disk \\x1b[2J91% full"), "{shown}");
    assert!(!shown.contains('\u{1b}'), "escaped: {shown}");
    // The model gets the context, never the warning.
    let said = all_said(&fx);
    assert!(
        said.contains("[PostToolUse hook] formatted a.txt"),
        "{said}"
    );
    assert!(!said.contains("91% full"), "{said}");
    let events = only_runlog(&fx);
    let run = hook_runs(&events)[0];
    assert_eq!(run["outcome"], "ok");
    assert_eq!(run["system_message"], "disk \u{1b}[2J91% full");
    assert_eq!(run["message"], "formatted a.txt");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_resumed_run_gets_its_session_start_context_again() {
    let fx = Fixture::new(super::interactive::asking_turns()).await;
    fx.append_config(super::interactive::ASKER);
    let dump = fx.dir.path().join("starts.jsonl");
    // Context only at startup (the matcher), as a project's "load the ticket" hook would.
    let (start, prompt) = context_hooks(&fx);
    let resume = script(
        &fx,
        "resume.sh",
        &format!("cat >> '{}'\necho 'picked up again'", dump.display()),
    );
    fx.append_config(&hooks_yaml(&[
        ("SessionStart", Some("startup"), &start, None),
        ("SessionStart", Some("resume"), &resume, None),
        ("UserPromptSubmit", None, &prompt, None),
    ]));
    let waiting = super::interactive::run_waiting(&fx).await;
    let id = waiting["_meta"]["run_id"].as_str().unwrap().to_owned();
    let answered = fx.fabric(&["answer", &id, "SQLite", "--json"]).await;
    answered.assert_code(0);
    let requests = fx.requests();
    assert_eq!(requests.len(), 2);
    let texts = |r: &Value| -> Vec<(String, String)> {
        r["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let role = m["role"].as_str().unwrap().to_owned();
                (role, m["content"].as_str().unwrap_or("").to_owned())
            })
            .collect()
    };
    let (first, resumed) = (texts(&requests[0]), texts(&requests[1]));
    let user = |t: &str| ("user".to_owned(), t.to_owned());
    assert_eq!(
        first[1..4],
        [
            user("[SessionStart hook] the tests run with make check"),
            user("pick one"),
            user("[UserPromptSubmit hook] ticket ABC-1"),
        ]
    );
    // Resumed: the recorded start context where it was, then this start's own (`resume`).
    assert_eq!(
        resumed[1..5],
        [
            user("[SessionStart hook] the tests run with make check"),
            user("[SessionStart hook] picked up again"),
            user("pick one"),
            user("[UserPromptSubmit hook] ticket ABC-1"),
        ],
        "{resumed:?}"
    );
    // The replay of the whole run ran no hook; the resume fired SessionStart `resume`.
    let result = answered.json();
    fx.assert_replays(&result).await;
    let fired = dumped(&dump);
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(fired[0]["source"], "resume");
    // The task was submitted once: the resumed run does not submit it again.
    let events = fx.runlog(&result);
    let prompts = hook_runs(&events)
        .into_iter()
        .filter(|r| r["event"] == "UserPromptSubmit")
        .count();
    assert_eq!(prompts, 1);
}
