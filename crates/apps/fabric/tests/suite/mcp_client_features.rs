//! The fabric as an MCP client, for what a server may ask of it (issue #29): a completion of
//! the run's model (sampling), an answer to a form (elicitation), the roots, and the log
//! messages and progress it sends while a tool runs. The server is a real one on the
//! official Python SDK (`tests/mcp/client_features_server.py`); the model is the scripted
//! server, which also answers the sampling request. Needs scripts/install-test-deps.sh.

use fabric_test_support::Turn;
use serde_json::{Value, json};

use super::fixture::{Fixture, kinds, of_kind};

/// The venv's python and the server script, or `None` when the test deps are missing.
fn server() -> Option<(String, String)> {
    let python = fabric_test_support::test_deps()?.join("venv/bin/python");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp/client_features_server.py");
    Some((python.display().to_string(), script.display().to_string()))
}

/// A specialist `helper_user` with the server as `helper`, and `extra` server keys.
fn write_specialist(fx: &Fixture, python: &str, script: &str, extra: &str) {
    fx.trust_own_files();
    let dir = fx.workspace_root().join("specialists");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let body = format!(
        "---
name: helper_user
description: Uses the helper server.
tools: [mcp__helper__*]
mcp_servers:
  - name: helper
    command: {python}
    args: [{script}]
    required: true
    startup_timeout_s: 60{extra}
---
Use the tools.
"
    );
    std::fs::write(dir.join("helper_user.md"), body).expect("write specialist");
}

fn call(tool: &str) -> Turn {
    Turn::tool_call(format!("mcp__helper__{tool}"), json!({}))
}

fn result_of<'a>(events: &'a [Value], tool: &str) -> &'a str {
    of_kind(events, "tool_result")
        .into_iter()
        .find(|e| e["payload"]["tool"] == format!("mcp__helper__{tool}"))
        .and_then(|e| e["payload"]["result"].as_str())
        .unwrap_or_else(|| {
            let errors: Vec<_> = of_kind(events, "tool_error")
                .iter()
                .map(|e| e["payload"].to_string())
                .collect();
            panic!("no result of {tool}: {:?}\n{errors:#?}", kinds(events))
        })
}

fn requests<'a>(events: &'a [Value], method: &str) -> Vec<&'a Value> {
    of_kind(events, "mcp_request")
        .into_iter()
        .filter(|e| e["payload"]["method"] == method)
        .map(|e| &e["payload"])
        .collect()
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_29_a_server_borrows_the_model_gets_a_form_answered_reads_the_roots_and_reports() {
    // 2026-07-28: the questions come back as the call's `InputRequiredResult` (SEP-2322).
    let Some((python, script)) = server() else {
        return;
    };
    asks_and_reports(&python, &script).await;
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_29_a_2025_11_25_server_asks_during_the_call() {
    // server-everything (the TypeScript SDK) speaks 2025-11-25: `initialize`, and its
    // requests arrive while its tool runs.
    let Some(dir) = fabric_test_support::test_deps() else {
        return;
    };
    let everything =
        dir.join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let fx = Fixture::new(vec![
        Turn::tool_call(
            "mcp__helper__trigger-sampling-request",
            json!({"prompt": "hi"}),
        ),
        Turn::text("Sampled by the run's model."),
        call("trigger-elicitation-request"),
        call("get-roots-list"),
        Turn::tool_call(
            "mcp__helper__trigger-long-running-operation",
            json!({"duration": 0.4, "steps": 2}),
        ),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ])
    .await;
    write_specialist(
        &fx,
        "node",
        &format!("{}, stdio", everything.display()),
        "\n    elicitation: defaults",
    );
    let run = fx
        // Its sampling tool says it is open-world.
        .fabric(&[
            "run",
            "use the helper",
            "--pack",
            "helper_user",
            "--json",
            "--network-allowed",
        ])
        .await;
    run.assert_code(0);
    let result = run.json();
    let events = fx.runlog(&result);
    let sampled = result_of(&events, "trigger-sampling-request");
    assert!(sampled.contains("Sampled by the run's model."), "{sampled}");
    assert_eq!(
        requests(&events, "sampling/createMessage")[0]["outcome"],
        "answered"
    );
    // Its form requires a name it gives no default for: declined, saying so.
    let form = &requests(&events, "elicitation/create")[0];
    assert_eq!(form["outcome"], "declined");
    assert!(
        form["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("requires `name`"),
        "{form}"
    );
    // The run's workspace, as the URI the fabric gave.
    let workspace = of_kind(&events, "run_start")[0]["payload"]["workspace"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let roots = result_of(&events, "get-roots-list");
    assert!(roots.contains(&format!("file://{workspace}")), "{roots}");
    let progress: Vec<_> = of_kind(&events, "mcp_message")
        .into_iter()
        .filter(|e| e["payload"]["type"] == "progress")
        .map(|e| &e["payload"])
        .collect();
    assert_eq!(progress.len(), 2, "{:?}", kinds(&events));
    assert_eq!(
        progress[1]["tool"],
        "mcp__helper__trigger-long-running-operation"
    );
}

async fn asks_and_reports(python: &str, script: &str) {
    let fx = Fixture::new(vec![
        Turn::tool_call("mcp__helper__summarize", json!({"text": "a long story"})),
        // Answers the server's sampling request, not a step of the loop.
        Turn::text("Fabric runs agents locally."),
        call("ask_profile"),
        call("roots"),
        call("index"),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ])
    .await;
    write_specialist(&fx, python, script, "\n    elicitation: defaults");
    let run = fx
        .fabric(&["run", "use the helper", "--pack", "helper_user", "--json"])
        .await;
    run.assert_code(0);
    let result = run.json();
    let events = fx.runlog(&result);

    // Sampling: the run's model answered, with the server's system prompt and no tools.
    let sampled: Value = serde_json::from_str(result_of(&events, "summarize")).expect("json");
    assert_eq!(sampled["text"], "Fabric runs agents locally.", "{sampled}");
    assert_eq!(sampled["stop"], "endTurn");
    let asked = &fx.requests()[1];
    assert_eq!(
        asked["messages"][0]["content"],
        "You summarise in five words."
    );
    assert_eq!(asked["messages"][1]["content"], "Summarise: a long story");
    assert!(
        asked
            .get("tools")
            .is_none_or(|t| t.as_array().is_none_or(Vec::is_empty)),
        "{asked}"
    );
    let sampling = requests(&events, "sampling/createMessage");
    assert_eq!(sampling.len(), 1, "{:?}", kinds(&events));
    assert_eq!(sampling[0]["outcome"], "answered");
    assert_eq!(sampling[0]["model"], sampled["model"]);
    assert!(
        sampling[0]["usage"]["total_tokens"].as_u64().is_some(),
        "{}",
        sampling[0]
    );

    // Elicitation: accepted with the form's defaults, as the config allows.
    let profile: Value = serde_json::from_str(result_of(&events, "ask_profile")).expect("json");
    assert_eq!(
        profile,
        json!({"action": "accept", "data": {"name": "John Doe", "age": 30}})
    );
    let forms = requests(&events, "elicitation/create");
    assert_eq!(forms[0]["outcome"], "answered");
    assert_eq!(forms[0]["fields"], json!(["age", "name"]));

    // Roots: the run's workspace.
    let workspace = of_kind(&events, "run_start")[0]["payload"]["workspace"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let roots: Value = serde_json::from_str(result_of(&events, "roots")).expect("json");
    assert_eq!(roots, json!([format!("file://{workspace}")]));

    // Log messages and progress, recorded while the tool ran (before its result).
    let messages = of_kind(&events, "mcp_message");
    let texts: Vec<(&str, &str)> = messages
        .iter()
        .map(|e| {
            let p = &e["payload"];
            let head = p["level"].as_str().unwrap_or("progress");
            (head, p["message"].as_str().unwrap_or_default())
        })
        .collect();
    assert_eq!(
        texts,
        [
            ("info", "indexing started"),
            ("progress", "file 1 of 3"),
            ("progress", "file 2 of 3"),
            ("progress", "file 3 of 3"),
            ("warning", "one file was empty"),
        ],
        "{messages:?}"
    );
    let last = messages
        .last()
        .map(|e| e["payload"].clone())
        .unwrap_or_default();
    assert_eq!(messages[3]["payload"]["tool"], "mcp__helper__index");
    assert_eq!(
        (
            messages[3]["payload"]["progress"].as_f64(),
            messages[3]["payload"]["total"].as_f64()
        ),
        (Some(3.0), Some(3.0))
    );
    assert_eq!(last["server"], "helper");
    let position =
        |pred: &dyn Fn(&Value) -> bool| events.iter().position(pred).unwrap_or(usize::MAX);
    let first_log = position(&|e| e["kind"] == "mcp_message");
    let index_result =
        position(&|e| e["kind"] == "tool_result" && e["payload"]["tool"] == "mcp__helper__index");
    assert!(first_log < index_result, "{:?}", kinds(&events));
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_29_sampling_off_is_refused_and_forms_are_declined_by_default() {
    let Some((python, script)) = server() else {
        return;
    };
    let fx = Fixture::new(vec![
        Turn::tool_call("mcp__helper__summarize", json!({"text": "x"})),
        call("ask_profile"),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ])
    .await;
    write_specialist(&fx, &python, &script, "\n    sampling: false");
    // Human output: the requests show as they are answered.
    let run = fx
        .fabric(&["run", "use the helper", "--pack", "helper_user"])
        .await;
    run.assert_code(0);
    assert!(
        run.stderr
            .contains("helper asked sampling/createMessage: refused"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("helper asked elicitation/create: declined"),
        "{}",
        run.stderr
    );
    // No model call was made for the server: the three turns are the loop's.
    assert_eq!(fx.requests().len(), 3);
    let run_dir = fx.workspace_root().join("runs");
    let id = std::fs::read_dir(&run_dir)
        .expect("runs")
        .flatten()
        .next()
        .expect("a run")
        .file_name();
    let events = super::fixture::read_runlog(&run_dir.join(id).join("runlog.jsonl"));
    let error = of_kind(&events, "tool_error")[0]["payload"]["error_message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(error.contains("sampling: false"), "{error}");
    let refused = requests(&events, "sampling/createMessage");
    assert_eq!(refused[0]["outcome"], "refused");
    let profile: Value = serde_json::from_str(result_of(&events, "ask_profile")).expect("json");
    assert_eq!(profile["action"], "decline");
    let declined = requests(&events, "elicitation/create");
    assert!(
        declined[0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("elicitation: defaults"),
        "{}",
        declined[0]
    );
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_29_a_server_s_completion_is_a_step_of_the_run_s_budget() {
    let Some((python, script)) = server() else {
        return;
    };
    let fx = Fixture::new(vec![
        Turn::tool_call("mcp__helper__summarize", json!({"text": "x"})),
        Turn::text("never asked"),
    ])
    .await;
    write_specialist(&fx, &python, &script, "");
    let run = fx
        .fabric(&[
            "run",
            "use the helper",
            "--pack",
            "helper_user",
            "--json",
            "--max-steps",
            "1",
        ])
        .await;
    let result = run.json();
    // The server's request took the run's one step: refused, and the loop stops at its limit.
    assert_eq!(result["_meta"]["status"], "max_steps_exceeded", "{result}");
    let events = fx.runlog(&result);
    let refused = requests(&events, "sampling/createMessage");
    assert_eq!(refused[0]["outcome"], "refused", "{:?}", kinds(&events));
    assert!(
        refused[0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("step"),
        "{}",
        refused[0]
    );
    assert_eq!(
        fx.requests().len(),
        1,
        "the server's request made no model call"
    );
}
