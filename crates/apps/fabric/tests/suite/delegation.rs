//! Sub-agents as tools, end to end: a lead specialist hands a task to `engineering` through
//! `agent__engineering`; the child has its own runlog linked by `parent_run_id`, its payload
//! comes back as the tool result, and its steps are paid from the parent's budget.

use fabric_test_support::Turn;
use serde_json::{Value, json};

use super::fixture::{Fixture, of_kind, read_runlog};

const LEAD: &str = "---
name: lead
description: Plans and delegates the writing.
tools: [list_files]
delegates: [engineering]
---
You lead. Delegate the writing to engineering, then report.
";

/// Writes the `lead` specialist, who delegates to `engineering`, into the fixture's workspace.
pub(crate) fn write_lead(fx: &Fixture) {
    let dir = fx.workspace_root().join("specialists");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("lead.md"), LEAD).expect("write lead");
}

fn child_runlog(fx: &Fixture, run_id: &str) -> Vec<Value> {
    read_runlog(
        &fx.workspace_root()
            .join("runs")
            .join(run_id)
            .join("runlog.jsonl"),
    )
}

/// The lead hands `engineering` the writing of hello.txt, the child writes it and
/// finishes, the lead finishes.
pub(crate) fn delegated_hello() -> Vec<Turn> {
    vec![
        Turn::tool_call(
            "agent__engineering",
            json!({"task": "Create hello.txt with Hello"}),
        ),
        // The child's two turns.
        Turn::tool_call(
            "write_file",
            json!({"path": "hello.txt", "content": "Hello"}),
        ),
        Turn::tool_call("finish_task", json!({"summary": "child wrote hello.txt"})),
        // The lead again.
        Turn::tool_call("finish_task", json!({"summary": "delegated and done"})),
    ]
}

#[tokio::test]
async fn a_delegated_task_runs_as_a_child_and_its_payload_comes_back() {
    let fx = Fixture::new(delegated_hello()).await;
    write_lead(&fx);
    let run = fx
        .fabric(&["run", "make hello", "--pack", "lead", "--json"])
        .await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["summary"], "delegated and done");
    let events = fx.runlog(&result);
    let start = &of_kind(&events, "run_start")[0]["payload"];
    assert_eq!(start["depth"], 0);
    assert!(start["parent_run_id"].is_null());
    let pack = &of_kind(&events, "pack_start")[0]["payload"];
    assert!(
        pack["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t == "agent__engineering")
    );
    let tool_result = &of_kind(&events, "tool_result")[0]["payload"];
    assert_eq!(tool_result["tool"], "agent__engineering");
    let answer: Value =
        serde_json::from_str(tool_result["result"].as_str().unwrap_or("{}")).unwrap_or_default();
    assert_eq!(answer["status"], "completed");
    assert_eq!(answer["result"]["summary"], "child wrote hello.txt");
    let child_id = answer["run_id"].as_str().unwrap_or_default();
    let child = child_runlog(&fx, child_id);
    let child_start = &of_kind(&child, "run_start")[0]["payload"];
    assert_eq!(child_start["parent_run_id"], result["_meta"]["run_id"]);
    assert_eq!(child_start["depth"], 1);
    assert_eq!(of_kind(&child, "run_complete").len(), 1);
    // Separate workspaces by default: the file is in the child's.
    let file = fx
        .workspace_root()
        .join("runs")
        .join(child_id)
        .join("workspace/hello.txt");
    assert_eq!(std::fs::read_to_string(file).unwrap_or_default(), "Hello");
}

#[tokio::test]
async fn a_child_that_exhausts_the_shared_budget_ends_with_a_typed_reason() {
    let fx = Fixture::new(vec![
        Turn::tool_call("agent__engineering", json!({"task": "Write a lot"})),
        Turn::tool_call("write_file", json!({"path": "a.txt", "content": "a"})),
        Turn::tool_call("write_file", json!({"path": "b.txt", "content": "b"})),
        Turn::tool_call("finish_task", json!({"summary": "never reached"})),
    ])
    .await;
    write_lead(&fx);
    // Three model calls for the whole tree: the lead's first, then two for the child.
    let run = fx
        .fabric(&[
            "run",
            "make files",
            "--pack",
            "lead",
            "--json",
            "--max-steps",
            "3",
        ])
        .await;
    let result = run.json();
    assert_eq!(
        result["_meta"]["status"], "budget_exceeded",
        "{}",
        run.stdout
    );
    assert_eq!(run.code(), 5);
    let events = fx.runlog(&result);
    let error = &of_kind(&events, "tool_error")[0]["payload"];
    assert_eq!(error["tool"], "agent__engineering");
    let told: Value =
        serde_json::from_str(error["error_message"].as_str().unwrap_or("{}")).unwrap_or_default();
    assert_eq!(told["status"], "budget_exceeded", "{error}");
    assert!(
        told["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("step budget"),
        "{told}"
    );
}

#[tokio::test]
async fn the_depth_cap_refuses_delegation_with_a_reason() {
    let fx = Fixture::new(vec![
        Turn::tool_call("agent__engineering", json!({"task": "Anything"})),
        Turn::tool_call("finish_task", json!({"summary": "did it myself"})),
    ])
    .await;
    write_lead(&fx);
    let mut yaml = std::fs::read_to_string(&fx.config).unwrap_or_default();
    yaml.push_str("delegation:\n  max_depth: 0\n");
    std::fs::write(&fx.config, yaml).unwrap_or_default();
    let run = fx.fabric(&["run", "x", "--pack", "lead", "--json"]).await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let events = fx.runlog(&run.json());
    let error = &of_kind(&events, "tool_error")[0]["payload"];
    let told: Value =
        serde_json::from_str(error["error_message"].as_str().unwrap_or("{}")).unwrap_or_default();
    assert_eq!(told["status"], "depth_exceeded", "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_10_a_child_run_killed_with_its_parent_is_continued_by_the_parent() {
    let mut slow_finish =
        Turn::tool_call("finish_task", json!({"summary": "child wrote hello.txt"}));
    slow_finish.delay_ms = Some(10_000);
    let fx = Fixture::new(vec![
        Turn::tool_call(
            "agent__engineering",
            json!({"task": "Create hello.txt with Hello"}),
        ),
        // The child: a write, then its finish, which the kill interrupts...
        Turn::tool_call(
            "write_file",
            json!({"path": "hello.txt", "content": "Hello"}),
        ),
        slow_finish,
        // ...asked again by the continued child.
        Turn::tool_call("finish_task", json!({"summary": "child wrote hello.txt"})),
        // The lead again.
        Turn::tool_call("finish_task", json!({"summary": "delegated and done"})),
    ])
    .await;
    write_lead(&fx);
    let mut parent = fx
        .command(&["run", "make hello", "--pack", "lead", "--json"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("fabric run starts");
    let runs = fx.workspace_root().join("runs");
    let child_asked_to_finish = || {
        std::fs::read_dir(&runs)
            .into_iter()
            .flatten()
            .flatten()
            .any(|dir| {
                let text =
                    std::fs::read_to_string(dir.path().join("runlog.jsonl")).unwrap_or_default();
                text.contains("\"depth\":1")
                    && text.lines().any(|l| {
                        serde_json::from_str::<Value>(l)
                            .is_ok_and(|e| e["kind"] == "llm_request" && e["step"] == 1)
                    })
            })
    };
    // The runlog records the request before it is sent: wait for the server to have it too,
    // so the slow answer is the one the kill interrupts (on a busy machine the kill could
    // otherwise come first, and the continued child would get the slow answer).
    let asked = || child_asked_to_finish() && fx.server.chat_request_count() >= 3;
    for _ in 0..1_000 {
        if asked() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(asked(), "the child reached its second step");
    parent.start_kill().expect("SIGKILL");
    parent.wait().await.expect("wait");

    let resumed = fx.fabric(&["resume", "--all", "--json"]).await;
    assert_eq!(resumed.code(), 0, "{}\n{}", resumed.stdout, resumed.stderr);
    // One run was continued: the parent; the child went on inside it.
    assert!(
        resumed.stderr.contains("continuing 1 interrupted run"),
        "{}",
        resumed.stderr
    );
    let result = resumed.json();
    assert_eq!(result["summary"], "delegated and done");
    let events = fx.runlog(&result);
    assert_eq!(of_kind(&events, "run_resumed").len(), 1);
    let tool_result = &of_kind(&events, "tool_result")[0]["payload"];
    assert_eq!(tool_result["tool"], "agent__engineering");
    let answer: Value =
        serde_json::from_str(tool_result["result"].as_str().unwrap_or("{}")).unwrap_or_default();
    assert_eq!(answer["status"], "completed");
    let child = child_runlog(&fx, answer["run_id"].as_str().unwrap_or_default());
    assert_eq!(of_kind(&child, "run_resumed").len(), 1);
    assert_eq!(of_kind(&child, "run_complete").len(), 1);
    // Five requests: the lead's first, the child's two, the child's second again (its first
    // answer was lost with the process), the lead's last. The lead's first step and the
    // child's first were replayed.
    assert_eq!(fx.server.chat_request_count(), 5);
}
