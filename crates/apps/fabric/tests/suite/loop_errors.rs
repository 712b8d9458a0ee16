//! Bad tool calls go back to the model as exact errors; the run goes on.

use fabric_test_support::{ScriptedCall, Turn};
use serde_json::json;

use super::fixture::{Fixture, kinds, of_kind, tool_messages};

fn finish() -> Turn {
    Turn::tool_call("finish_task", json!({"summary": "done"}))
}

#[tokio::test(flavor = "multi_thread")]
async fn finish_task_is_validated_against_the_finish_schema() {
    let fx = Fixture::new(vec![
        // Before any real work: refused.
        finish(),
        Turn::tool_call("list_files", json!({})),
        // Missing the required summary and a wrong type: refused with both reasons.
        Turn::tool_call("finish_task", json!({"artifacts": "a.txt"})),
        finish(),
    ])
    .await;
    let result = fx.run_json("finish too early", &[], 0).await;
    assert_eq!(result["summary"], "done");
    let events = fx.runlog(&result);
    let errors = of_kind(&events, "tool_error");
    assert_eq!(errors.len(), 2);
    let first = errors[0]["payload"]["error_message"].as_str().unwrap();
    assert!(first.contains("no other tool has been used yet"), "{first}");
    let second = errors[1]["payload"]["error_message"].as_str().unwrap();
    assert!(
        second.contains("missing required parameter `summary` (a string)"),
        "{second}"
    );
    assert!(
        second.contains("parameter `artifacts` must be an array, got \"a.txt\""),
        "{second}"
    );
    // The model saw exactly those messages.
    let last = fx.requests().last().cloned().unwrap();
    let seen = tool_messages(&last);
    assert!(
        seen.iter()
            .any(|m| m.contains("missing required parameter `summary`")),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_tool_names_the_available_tools() {
    let fx = Fixture::new(vec![
        Turn::tool_call("delete_everything", json!({})),
        Turn::tool_call("list_files", json!({})),
        finish(),
    ])
    .await;
    let result = fx.run_json("unknown tool", &[], 0).await;
    let events = fx.runlog(&result);
    let error = of_kind(&events, "tool_error")[0];
    let message = error["payload"]["error_message"].as_str().unwrap();
    assert_eq!(error["payload"]["error_type"], "invalid_args");
    assert!(
        message.starts_with("unknown tool `delete_everything`; the available tools are: "),
        "{message}"
    );
    for tool in [
        "shell",
        "read_file",
        "write_file",
        "list_files",
        "finish_task",
    ] {
        assert!(message.contains(tool), "{message}");
    }
    assert!(tool_messages(&fx.requests()[1])[0].contains("unknown tool `delete_everything`"));
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_and_mistyped_arguments_get_exact_errors() {
    let mut raw = ScriptedCall::new("write_file", json!(null));
    raw.arguments_raw = Some("{\"path\": \"a.txt\", \"content\": ".into());
    let fx = Fixture::new(vec![
        Turn {
            tool_calls: vec![raw],
            ..Turn::default()
        },
        Turn::tool_call("read_file", json!({"path": 3})),
        Turn::tool_call(
            "write_file",
            json!({"path": "a.txt", "content": "x", "mode": "w"}),
        ),
        Turn::tool_call("write_file", json!({"path": "a.txt", "content": "x"})),
        finish(),
    ])
    .await;
    let result = fx.run_json("bad arguments", &[], 0).await;
    let events = fx.runlog(&result);
    let messages: Vec<&str> = of_kind(&events, "tool_error")
        .iter()
        .map(|e| e["payload"]["error_message"].as_str().unwrap())
        .collect();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert!(
        messages[0].contains("the arguments of `write_file` are not valid JSON"),
        "{}",
        messages[0]
    );
    assert!(
        messages[0].contains(r#"{"content":"...","path":"..."}"#),
        "{}",
        messages[0]
    );
    assert_eq!(
        messages[1],
        "invalid arguments for `read_file`: parameter `path` must be a string, got 3"
    );
    assert!(
        messages[2].contains("unknown parameter `mode`; expected one of `content`, `path`"),
        "{}",
        messages[2]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_path_outside_the_workspace_is_refused_and_recorded() {
    let fx = Fixture::new(vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "../escape.txt", "content": "x"}),
        ),
        Turn::tool_call("read_file", json!({"path": "/etc/passwd"})),
        Turn::tool_call("shell", json!({"cmd": ["bash", "-c", "echo hi"]})),
        Turn::tool_call("list_files", json!({})),
        finish(),
    ])
    .await;
    let result = fx.run_json("escape", &[], 0).await;
    let events = fx.runlog(&result);
    let security = of_kind(&events, "security_event");
    assert_eq!(security.len(), 3, "{:?}", kinds(&events));
    assert_eq!(security[0]["payload"]["event_type"], "path_escape");
    assert_eq!(security[0]["payload"]["attempted"], "../escape.txt");
    assert_eq!(security[2]["payload"]["event_type"], "command_not_allowed");
    let errors = of_kind(&events, "tool_error");
    assert!(
        errors
            .iter()
            .all(|e| e["payload"]["error_type"] == "permission")
    );
    let workspace = std::path::PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
    assert!(!workspace.parent().unwrap().join("escape.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_text_gets_one_corrective_message_then_a_fallback_payload() {
    let fx = Fixture::new(vec![
        Turn::text("I think it is done."),
        Turn::text("Really, all done."),
    ])
    .await;
    let result = fx.run_json("chatty model", &[], 0).await;
    assert_eq!(result["_meta"]["status"], "completed_without_finish");
    assert_eq!(result["summary"], "Really, all done.");
    let events = fx.runlog(&result);
    assert_eq!(of_kind(&events, "corrective_reprompt").len(), 1);
    let corrective = fx.requests()[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(corrective["role"], "user");
    assert!(
        corrective["content"]
            .as_str()
            .unwrap()
            .contains("call finish_task")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn max_steps_ends_the_run_with_its_own_status() {
    let mut scenario =
        fabric_test_support::Scenario::new(vec![Turn::tool_call("list_files", json!({}))]);
    scenario.on_exhausted = fabric_test_support::OnExhausted::RepeatLast;
    let fx = Fixture::with_backend(scenario, "openai").await;
    let result = fx
        .run_json("never finishes", &["--max-steps", "3"], 5)
        .await;
    assert_eq!(result["_meta"]["status"], "max_steps_exceeded");
    assert!(
        result["_meta"]["reason"]
            .as_str()
            .unwrap()
            .contains("max_steps (3)")
    );
    let events = fx.runlog(&result);
    assert_eq!(of_kind(&events, "llm_request").len(), 3);
    assert_eq!(events.last().unwrap()["kind"], "run_failed");
    assert_eq!(
        events.last().unwrap()["payload"]["status"],
        "max_steps_exceeded"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deeply_nested_arguments_are_refused_and_the_runlog_stays_readable() {
    // 126 levels parse (serde's limit is 128), but the runlog line wraps them in two more.
    let mut args = json!([]);
    for _ in 0..124 {
        args = json!([args]);
    }
    let args = json!({ "path": args });
    let fx = Fixture::new(vec![
        Turn::tool_call("list_files", args),
        Turn::tool_call("list_files", json!({})),
        finish(),
    ])
    .await;
    let result = fx.run_json("nest deep", &[], 0).await;
    let run_id = result["_meta"]["run_id"].as_str().unwrap();
    let events = fx.runlog(&result);
    let message = of_kind(&events, "tool_error")[0]["payload"]["error_message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.starts_with("the arguments of `list_files` are not valid JSON (they nest arrays and objects more than 32 levels deep; send flatter arguments): {\"path\":[[[["),
        "{message}"
    );
    let seen = tool_messages(&fx.requests()[1]);
    assert!(seen[0].contains("more than 32 levels deep"), "{seen:?}");
    let show = fx.fabric(&["logs", "show", run_id]).await;
    assert_eq!(show.code(), 0, "{}", show.stderr);
    assert!(show.stdout.contains("run_complete"), "{}", show.stdout);
}
