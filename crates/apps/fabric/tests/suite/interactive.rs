//! Issue #42: working with a run: a question that waits in the store and is answered from
//! the CLI or over HTTP, answered at once by `--on-question`, and steering.

use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};

use super::fixture::{Fixture, kinds, of_kind, tool_messages};
use super::serve_fixture::{Options, Served};

/// A specialist that may ask (and read the workspace).
pub(crate) const ASKER: &str = "specialists:\n  asker:\n    description: Asks before it decides\n    system_prompt: Ask the user when a decision is theirs.\n    tools: [ask_user, list_files]\n";

pub(crate) fn asking_turns() -> Vec<Turn> {
    vec![
        Turn::tool_call(
            "ask_user",
            json!({"question": "Which database?", "choices": ["SQLite", "PostgreSQL"]}),
        ),
        Turn::tool_call(
            "finish_task",
            json!({"summary": "Chose as told", "artifacts": [], "next_steps": [], "notes": ""}),
        ),
    ]
}

async fn asker(turns: Vec<Turn>) -> Fixture {
    let fx = Fixture::new(turns).await;
    fx.append_config(ASKER);
    fx
}

/// `fabric serve` over a model that asks, with `config` (the asking specialist).
async fn asking_server(config: &'static str) -> Served {
    Served::with(
        Scenario::new(asking_turns()),
        Options {
            config,
            ..Options::default()
        },
    )
    .await
}

/// A run started with `POST /runs` (the asking specialist), once it waits for its answer.
async fn waiting_run(served: &Served) -> String {
    let (code, body) = served
        .post_json("/runs", json!({"prompt": "pick one", "pack": "asker"}))
        .await;
    assert_eq!(code, 202, "{body}");
    let id = body["run_id"].as_str().unwrap().to_owned();
    served.wait_status(&id, "input_required").await;
    id
}

/// `fabric run "pick one" --pack asker --json --on-question wait`: its result, waiting for
/// its answer (exit code 9).
pub(crate) async fn run_waiting(fx: &Fixture) -> Value {
    let waiting = fx
        .fabric(&[
            "run",
            "pick one",
            "--pack",
            "asker",
            "--json",
            "--on-question",
            "wait",
        ])
        .await;
    waiting.assert_code(9);
    waiting.json()
}

/// The tool messages of the model's last request.
fn last_tool_messages(fx: &Fixture) -> Vec<String> {
    let requests = fx.requests();
    tool_messages(requests.last().expect("a request"))
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_a_question_waits_holding_no_process_and_fabric_answer_continues_it() {
    let fx = asker(asking_turns()).await;
    let result = run_waiting(&fx).await;
    assert_eq!(result["_meta"]["status"], "input_required", "{result}");
    let id = result["_meta"]["run_id"].as_str().unwrap().to_owned();
    let events = fx.runlog(&result);
    let asked = of_kind(&events, "input_required");
    assert_eq!(asked.len(), 1, "{:?}", kinds(&events));
    assert_eq!(asked[0]["payload"]["question"], "Which database?");
    assert_eq!(
        asked[0]["payload"]["choices"],
        json!(["SQLite", "PostgreSQL"])
    );
    assert!(of_kind(&events, "run_complete").is_empty());
    assert!(of_kind(&events, "run_failed").is_empty());
    // The process that ran it is gone: the wait is in the store alone.
    let listed = fx.fabric(&["logs", "list", "--json"]).await;
    assert!(
        listed.stdout.contains("input_required"),
        "{}",
        listed.stdout
    );

    let answered = fx.fabric(&["answer", &id, "PostgreSQL", "--json"]).await;
    answered.assert_code(0);
    let result = answered.json();
    assert_eq!(result["_meta"]["status"], "completed", "{result}");
    assert_eq!(result["summary"], "Chose as told");
    let tool = last_tool_messages(&fx);
    assert!(
        tool.iter().any(|m| m.contains("PostgreSQL")),
        "the model got the answer as the call's result: {tool:?}"
    );
    let events = fx.runlog(&result);
    let answer = of_kind(&events, "input_answered");
    assert_eq!(answer.len(), 1, "{:?}", kinds(&events));
    assert_eq!(answer[0]["payload"]["by"], "cli");
    assert_eq!(answer[0]["payload"]["call_id"], asked_call(&events));
    assert_eq!(of_kind(&events, "run_resumed").len(), 1);
    assert_eq!(of_kind(&events, "run_complete").len(), 1);
    // Replayed, the recorded answer is given again: the run goes the same way.
    fx.assert_replays(&result).await;

    // Bad input: an answer to a run that waits for none.
    let again = fx.fabric(&["answer", &id, "SQLite"]).await;
    assert_ne!(again.code(), 0);
    assert!(again.stderr.contains("not waiting"), "{}", again.stderr);
    let unknown = fx
        .fabric(&["answer", "20260101-000000-000-abcdef", "x"])
        .await;
    assert_ne!(unknown.code(), 0);
    assert!(unknown.stderr.contains("no run"), "{}", unknown.stderr);
}

fn asked_call(events: &[Value]) -> Value {
    of_kind(events, "input_required")[0]["payload"]["call_id"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_on_question_answers_or_fails_and_without_anyone_the_model_is_told() {
    let fx = asker(asking_turns()).await;
    let run = fx
        .fabric(&[
            "run",
            "pick one",
            "--pack",
            "asker",
            "--json",
            "--on-question",
            "answer=SQLite",
        ])
        .await;
    run.assert_code(0);
    assert!(last_tool_messages(&fx).iter().any(|m| m.contains("SQLite")));
    let events = fx.runlog(&run.json());
    assert_eq!(
        of_kind(&events, "input_answered")[0]["payload"]["by"],
        "flag"
    );

    let fx = asker(asking_turns()).await;
    let run = fx
        .fabric(&[
            "run",
            "pick one",
            "--pack",
            "asker",
            "--json",
            "--on-question",
            "fail",
        ])
        .await;
    run.assert_code(10);
    assert_eq!(run.json()["_meta"]["status"], "unanswered");

    let fx = asker(asking_turns()).await;
    let run = fx
        .fabric(&["run", "pick one", "--pack", "asker", "--json"])
        .await;
    run.assert_code(0);
    let tool = last_tool_messages(&fx);
    assert!(
        tool.iter()
            .any(|m| m.contains("no one can answer questions in this run")
                && m.contains("--on-question")),
        "{tool:?}"
    );

    let bad = fx
        .fabric(&["run", "x", "--pack", "asker", "--on-question", "maybe"])
        .await;
    bad.assert_code(2);
    assert!(bad.stderr.contains("--on-question takes"), "{}", bad.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_over_http_a_run_waits_input_required_and_post_input_answers_it() {
    let served = asking_server(ASKER).await;
    let id = waiting_run(&served).await;

    // Bad input first: an empty answer, an unknown run, a message to nothing.
    let (code, body) = served
        .post_json(&format!("/runs/{id}/input"), json!({"answer": " "}))
        .await;
    assert_eq!(code, 422, "{body}");
    let (code, _) = served
        .post_json(
            "/runs/20260101-000000-000-abcdef/input",
            json!({"answer": "x"}),
        )
        .await;
    assert_eq!(code, 404);
    let long = "x".repeat(16_001);
    let (code, body) = served
        .post_json(&format!("/runs/{id}/input"), json!({"answer": long}))
        .await;
    assert_eq!(code, 422, "{body}");

    let (code, body) = served
        .post_json(
            &format!("/runs/{id}/input"),
            json!({"answer": "PostgreSQL"}),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    served.wait_status(&id, "completed").await;
    let events = served.runlog(&id);
    assert_eq!(
        of_kind(&events, "input_answered")[0]["payload"]["by"],
        "http"
    );

    // Answered twice, or steering an ended run: 409 with its status.
    let (code, body) = served
        .post_json(&format!("/runs/{id}/input"), json!({"answer": "SQLite"}))
        .await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["error"]["code"], "run_not_waiting", "{body}");
    let (code, body) = served
        .post_json(
            &format!("/runs/{id}/messages"),
            json!({"text": "and tests"}),
        )
        .await;
    assert_eq!(code, 409, "{body}");
    assert!(body.to_string().contains("completed"), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_a_message_said_to_a_running_run_reaches_the_model_at_its_next_step() {
    let mut slow = Turn::tool_call("list_files", json!({}));
    slow.delay_ms = Some(1_500);
    let turns = vec![
        Turn::tool_call("list_files", json!({})),
        slow,
        Turn::tool_call(
            "finish_task",
            json!({"summary": "done", "artifacts": [], "next_steps": [], "notes": ""}),
        ),
    ];
    let served = Served::with(
        Scenario::new(turns),
        Options {
            config: ASKER,
            ..Options::default()
        },
    )
    .await;
    let (code, body) = served
        .post_json("/runs", json!({"prompt": "look around", "pack": "asker"}))
        .await;
    assert_eq!(code, 202, "{body}");
    let id = body["run_id"].as_str().unwrap().to_owned();
    // While its second model call takes its time, a person says something.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let (code, body) = served
        .post_json(
            &format!("/runs/{id}/messages"),
            json!({"text": "also check the tests"}),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    served.wait_status(&id, "completed").await;
    let events = served.runlog(&id);
    let said = of_kind(&events, "user_message");
    assert_eq!(said.len(), 1, "{:?}", kinds(&events));
    assert_eq!(said[0]["payload"]["text"], "also check the tests");
    let requests = served.fx.requests();
    let last = requests.last().unwrap();
    let user: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(user.contains(&"also check the tests"), "{user:?}");
}

/// A specialist whose every write waits for approval.
const GUARDED: &str = "specialists:\n  guarded:\n    description: Writes only what a person approves\n    system_prompt: Write the files asked for.\n    tools: [write_file, list_files]\n    approval:\n      mode: untrusted\n";

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_approvals_deny_with_a_reason_then_approve_for_the_rest_of_the_run() {
    let write = |name: &str| Turn::tool_call("write_file", json!({"path": name, "content": "x"}));
    let turns = vec![
        write("a.txt"),
        write("b.txt"),
        write("c.txt"),
        Turn::tool_call(
            "finish_task",
            json!({"summary": "wrote", "artifacts": [], "next_steps": [], "notes": ""}),
        ),
    ];
    let fx = Fixture::new(turns).await;
    fx.append_config(GUARDED);
    let run = fx
        .fabric(&[
            "run",
            "write",
            "--pack",
            "guarded",
            "--json",
            "--on-question",
            "wait",
        ])
        .await;
    run.assert_code(9);
    let result = run.json();
    let id = result["_meta"]["run_id"].as_str().unwrap().to_owned();
    let workspace = std::path::PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
    let asked = of_kind(&fx.runlog(&result), "input_required")[0]["payload"].clone();
    assert_eq!(asked["input"], "approval");
    assert_eq!(asked["tool"], "write_file");
    assert_eq!(asked["arguments"]["path"], "a.txt");
    assert!(
        !workspace.join("a.txt").exists(),
        "nothing runs before approval"
    );

    // An answer that decides nothing is refused; a denial's reason reaches the model.
    let vague = fx.fabric(&["answer", &id, "hmm"]).await;
    assert_ne!(vague.code(), 0);
    assert!(vague.stderr.contains("approve_for_run"), "{}", vague.stderr);
    let denied = fx
        .fabric(&[
            "answer",
            &id,
            "deny not this one",
            "--json",
            "--on-question",
            "wait",
        ])
        .await;
    denied.assert_code(9);
    let tool = last_tool_messages(&fx);
    assert!(
        tool.iter()
            .any(|m| m.contains("a person denied this call of `write_file`: not this one")),
        "{tool:?}"
    );
    assert!(!workspace.join("a.txt").exists());

    let approved = fx
        .fabric(&["answer", &id, "approve_for_run", "--json"])
        .await;
    approved.assert_code(0);
    assert!(workspace.join("b.txt").exists());
    assert!(
        workspace.join("c.txt").exists(),
        "approved for the run: not asked again"
    );
    let events = fx.runlog(&approved.json());
    assert_eq!(
        of_kind(&events, "input_required").len(),
        2,
        "{:?}",
        kinds(&events)
    );
    let answers: Vec<&Value> = of_kind(&events, "input_answered")
        .iter()
        .map(|e| &e["payload"]["decision"])
        .collect();
    assert_eq!(answers, vec![&json!("deny"), &json!("approve_for_run")]);
    let refused = of_kind(&events, "security_event");
    assert!(
        refused
            .iter()
            .any(|e| e["payload"]["event_type"] == "approval_denied"),
        "{refused:?}"
    );
    fx.assert_replays(&approved.json()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_an_unanswered_wait_ends_unanswered_after_server_input_timeout() {
    let served = Served::with(
        Scenario::new(asking_turns()),
        Options {
            config: "specialists:\n  asker:\n    description: Asks before it decides\n    system_prompt: Ask the user when a decision is theirs.\n    tools: [ask_user, list_files]\nserver:\n  input_timeout_s: 1\n",
            ..Options::default()
        },
    )
    .await;
    let id = waiting_run(&served).await;
    let asked = of_kind(&served.runlog(&id), "input_required")[0]["payload"].clone();
    assert!(asked["expires_at"].as_f64().is_some(), "{asked}");
    // Nobody answers: the server ends it.
    served.wait_status(&id, "unanswered").await;
    let events = served.runlog(&id);
    let end = of_kind(&events, "run_failed");
    assert_eq!(end[0]["payload"]["status"], "unanswered");
    assert!(
        end[0]["payload"]["reason"]
            .as_str()
            .unwrap()
            .contains("server.input_timeout_s")
    );
    let (code, body) = served
        .post_json(&format!("/runs/{id}/input"), json!({"answer": "late"}))
        .await;
    assert_eq!(code, 409, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_a_waiting_run_survives_a_kill_of_fabric_serve_and_is_answered_by_the_next() {
    let mut served = asking_server(ASKER).await;
    let id = waiting_run(&served).await;
    served.child.start_kill().expect("SIGKILL");
    served.child.wait().await.expect("wait");
    // The next server does not take it for an interrupted run: it waits for its answer.
    let next = served.another_node().await;
    let (_, status) = next.get_json(&format!("/runs/{id}/status")).await;
    assert_eq!(status["status"], "input_required", "{status}");
    let (code, body) = next
        .post_json(&format!("/runs/{id}/input"), json!({"answer": "SQLite"}))
        .await;
    assert_eq!(code, 202, "{body}");
    next.wait_status(&id, "completed").await;
    let events = next.runlog(&id);
    assert_eq!(
        of_kind(&events, "run_resumed").len(),
        1,
        "{:?}",
        kinds(&events)
    );
}

#[cfg_attr(
    fabric_no_a2a,
    ignore = "needs the Python A2A SDK: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_42_the_python_a2a_sdk_gets_input_required_and_answers_by_task_id() {
    use super::serve_fixture::TOKEN;
    let served = Served::with(
        Scenario::new(asking_turns()),
        Options {
            config: ASKER,
            auth: true,
            ..Options::default()
        },
    )
    .await;
    let output =
        super::a2a_server::python("tests/a2a/answer_task.py", &[&served.base, TOKEN]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let asked = &seen["asked"];
    assert_eq!(
        asked["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{seen}"
    );
    assert_eq!(
        asked["status"]["message"]["parts"][0]["text"], "Which database?",
        "{seen}"
    );
    let answered = &seen["answered"];
    assert_eq!(answered["id"], asked["id"], "{seen}");
    assert_eq!(
        answered["status"]["state"], "TASK_STATE_COMPLETED",
        "{seen}"
    );
    let events = served.runlog(answered["id"].as_str().unwrap());
    assert_eq!(
        of_kind(&events, "input_answered")[0]["payload"]["by"],
        "a2a"
    );
    assert!(
        last_tool_messages(&served.fx)
            .iter()
            .any(|m| m.contains("PostgreSQL"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_the_python_mcp_sdk_answers_a_run_task_question_by_elicitation() {
    let Some(dir) = fabric_test_support::test_deps() else {
        return;
    };
    let fx = asker(asking_turns()).await;
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/elicit_client.py");
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(90),
        tokio::process::Command::new(dir.join("venv/bin/python"))
            .arg(script)
            .arg(env!("CARGO_BIN_EXE_fabric"))
            .arg(&fx.config)
            .arg(fx.workspace_root())
            .output(),
    )
    .await
    .expect("the Python client finished within 90 s")
    .expect("python ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    let asked = &seen["asked"][0];
    assert!(
        asked["message"]
            .as_str()
            .unwrap()
            .starts_with("Which database?"),
        "{seen}"
    );
    assert_eq!(
        asked["requested_schema"]["required"],
        json!(["answer"]),
        "{seen}"
    );
    assert_eq!(seen["result"]["_meta"]["status"], "completed", "{seen}");
    assert!(
        last_tool_messages(&fx)
            .iter()
            .any(|m| m.contains("PostgreSQL"))
    );
    let events = fx.runlog(&seen["result"]);
    assert_eq!(
        of_kind(&events, "input_answered")[0]["payload"]["by"],
        "mcp"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_on_request_asks_about_a_command_the_allowlist_refuses_instead_of_refusing_it() {
    let turns = || {
        vec![
            Turn::tool_call("shell", json!({"cmd": ["ln", "-s", "target", "made.txt"]})),
            Turn::tool_call(
                "finish_task",
                json!({"summary": "made", "artifacts": [], "next_steps": [], "notes": ""}),
            ),
        ]
    };
    let specialist = |mode: &str| {
        format!(
            "specialists:\n  builder:\n    description: Runs commands\n    system_prompt: Run what is asked.\n    tools: [shell]\n    approval:\n      mode: {mode}\n"
        )
    };
    // Approved (`--on-question answer=...` approves): the command runs once, as asked.
    let fx = Fixture::new(turns()).await;
    fx.append_config(&specialist("on_request"));
    let run = fx
        .fabric(&[
            "run",
            "make it",
            "--pack",
            "builder",
            "--json",
            "--on-question",
            "answer=ok",
        ])
        .await;
    run.assert_code(0);
    let result = run.json();
    let workspace = std::path::PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
    assert!(
        workspace.join("made.txt").symlink_metadata().is_ok(),
        "approved, it ran"
    );
    let events = fx.runlog(&result);
    let answered = of_kind(&events, "input_answered");
    assert_eq!(
        answered[0]["payload"]["decision"],
        "approve",
        "{:?}",
        kinds(&events)
    );
    assert!(
        of_kind(&events, "tool_error").is_empty(),
        "{:?}",
        kinds(&events)
    );

    // Without the mode, the allowlist refuses it as before.
    let fx = Fixture::new(turns()).await;
    fx.append_config(&specialist("never"));
    let run = fx
        .fabric(&[
            "run",
            "make it",
            "--pack",
            "builder",
            "--json",
            "--on-question",
            "answer=ok",
        ])
        .await;
    let result = run.json();
    let workspace = std::path::PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
    assert!(workspace.join("made.txt").symlink_metadata().is_err());
    let events = fx.runlog(&result);
    let refused = of_kind(&events, "security_event");
    assert_eq!(refused[0]["payload"]["event_type"], "command_not_allowed");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_fabric_run_on_a_terminal_asks_inline_and_the_typed_line_is_the_answer() {
    let fx = asker(asking_turns()).await;
    let (code, screen) = fx
        .on_terminal(&["run", "pick one", "--pack", "asker"], "PostgreSQL\n")
        .await;
    assert_eq!(code, 0, "{screen}");
    assert!(screen.contains("? Which database?"), "{screen}");
    assert!(screen.contains("SQLite | PostgreSQL"), "{screen}");
    assert!(
        last_tool_messages(&fx)
            .iter()
            .any(|m| m.contains("PostgreSQL"))
    );
    let listed = fx.fabric(&["logs", "list", "--json"]).await;
    let runs: Value = serde_json::from_str(listed.stdout.trim()).expect("json");
    let id = runs["runs"][0]["run_id"]
        .as_str()
        .or_else(|| runs[0]["run_id"].as_str())
        .unwrap_or_else(|| panic!("{runs}"))
        .to_owned();
    let events = super::fixture::read_runlog(
        &fx.workspace_root()
            .join("runs")
            .join(&id)
            .join("runlog.jsonl"),
    );
    let answer = of_kind(&events, "input_answered");
    assert_eq!(
        answer[0]["payload"]["by"],
        "terminal",
        "{:?}",
        kinds(&events)
    );
    // Nothing was waited for in the store: the terminal answered at once.
    assert!(of_kind(&events, "input_required").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_fabric_steer_from_another_process_reaches_a_running_fabric_run() {
    // The steering is said while the model takes its time over the second step, so the run
    // hears it at the third whatever the machine's load (a race seen under CI's load).
    let mut slow = Turn::tool_call("list_files", json!({}));
    slow.delay_ms = Some(4_000);
    let fx = asker(vec![
        Turn::tool_call("list_files", json!({})),
        slow,
        Turn::tool_call(
            "finish_task",
            json!({"summary": "done", "artifacts": [], "next_steps": [], "notes": ""}),
        ),
    ])
    .await;
    let run = fx
        .command(&["run", "look around", "--pack", "asker", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("fabric run starts");
    // Its id, once its model has been asked for the slow second step.
    for _ in 0..600 {
        if fx.requests().len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let mut id = None;
    for _ in 0..100 {
        let listed = fx.fabric(&["logs", "list", "--json"]).await;
        if let Ok(runs) = serde_json::from_str::<Value>(listed.stdout.trim()) {
            id = runs["runs"][0]["run_id"]
                .as_str()
                .or_else(|| runs[0]["run_id"].as_str())
                .map(str::to_owned);
        }
        if id.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let id = id.expect("the run is listed");
    let steer = fx.fabric(&["steer", &id, "also check the tests"]).await;
    steer.assert_code(0);
    let output = run.wait_with_output().await.expect("fabric run ends");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = fx.requests().last().cloned().expect("a request");
    let heard = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["role"] == "user" && m["content"] == "also check the tests");
    assert!(heard, "{last}");
    // Steering an ended run is refused, naming its status.
    let late = fx.fabric(&["steer", &id, "too late"]).await;
    let shown = fx.fabric(&["logs", "show", &id, "--json"]).await;
    assert!(
        late.code() != 0 && late.stderr.contains("has ended (completed)"),
        "exit {}, stderr: {}\nthe run: {}",
        late.code(),
        late.stderr,
        shown.stdout.chars().take(2_000).collect::<String>()
    );
}
