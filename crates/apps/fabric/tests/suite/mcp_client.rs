//! MCP servers end to end through `fabric run`: a markdown specialist declares the real
//! `server-everything`, the scripted model calls its tool, the runlog records the server's
//! life, and no server process outlives the run. Needs scripts/install-test-deps.sh.

use fabric_test_support::Turn;
use serde_json::json;
use std::path::PathBuf;

use super::fixture::{Fixture, alive_with, kinds, of_kind, process_with};

fn everything() -> Option<String> {
    let dir = fabric_test_support::test_deps()?;
    let script =
        dir.join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    Some(script.display().to_string())
}

fn write_specialist(fx: &Fixture, body: &str) {
    let dir = fx.workspace_root().join("specialists");
    fx.trust_own_files();
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("mcp_user.md"), body).expect("write specialist");
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn a_model_calls_an_mcp_tool_and_the_server_is_gone_after_the_run() {
    let Some(script) = everything() else { return };
    let fx = Fixture::new(vec![
        Turn::tool_call(
            "mcp__everything__echo",
            json!({"message": "from the model"}),
        ),
        Turn::tool_call("finish_task", json!({"summary": "echoed"})),
    ])
    .await;
    let marker = format!("fabric-e2e-{}", std::process::id());
    write_specialist(
        &fx,
        &format!(
            "---
name: mcp_user
description: Uses the everything server.
tools: [mcp__everything__echo, mcp__everything__get-*]
mcp_servers:
  - name: everything
    command: node
    args: [{script}, stdio, {marker}]
    required: true
    startup_timeout_s: 60
---
Use the tools.
"
        ),
    );
    let run = fx
        .fabric(&["run", "echo something", "--pack", "mcp_user", "--json"])
        .await;
    run.assert_code(0);
    let result = run.json();
    assert_eq!(result["summary"], "echoed");
    let events = fx.runlog(&result);
    let servers = of_kind(&events, "mcp_server");
    let statuses: Vec<&str> = servers
        .iter()
        .map(|e| e["payload"]["status"].as_str().unwrap_or_default())
        .collect();
    // The server may announce `tools/list_changed` after it starts (server-everything
    // does); the run follows it.
    assert_eq!(statuses[..2], ["starting", "ready"], "{:?}", kinds(&events));
    assert!(
        statuses[2..].iter().all(|s| *s == "tools_changed"),
        "{statuses:?}"
    );
    // A required server is up before the first model call, and its event is before it.
    let first_request = kinds(&events)
        .iter()
        .position(|k| *k == "llm_request")
        .unwrap_or(0);
    let ready = events
        .iter()
        .position(|e| e["payload"]["status"] == "ready")
        .unwrap_or(usize::MAX);
    assert!(ready < first_request, "{:?}", kinds(&events));
    let tools = servers[1]["payload"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(tools.contains(&json!("mcp__everything__echo")), "{tools:?}");
    assert!(
        tools.contains(&json!("mcp__everything__get-sum")),
        "{tools:?}"
    );
    assert!(!tools.contains(&json!("mcp__everything__get-env")) || tools.len() > 2);
    let result_event = of_kind(&events, "tool_result");
    let echoed = result_event[0]["payload"]["result"]
        .as_str()
        .unwrap_or_default();
    assert!(echoed.contains("from the model"), "{echoed}");
    // The model's definitions came from the MCP schema.
    let request = &fx.requests()[0];
    let echo = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["function"]["name"] == "mcp__everything__echo")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        echo["function"]["parameters"]["properties"]["message"]["type"],
        "string"
    );
    assert!(!alive_with(&marker), "the server outlived the run");
}

#[tokio::test]
async fn a_server_that_never_starts_does_not_stop_the_run() {
    let fx = Fixture::new(vec![
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call("finish_task", json!({"summary": "done without it"})),
    ])
    .await;
    let marker = format!("fabric-e2e-sleepy-{}", std::process::id());
    write_specialist(
        &fx,
        &format!(
            "---
name: mcp_user
description: Has a server that never answers.
tools: [list_files]
mcp_servers:
  - name: sleepy
    command: sh
    args: [-c, 'sleep 60; echo {marker}']
    startup_timeout_s: 1
---
Work.
"
        ),
    );
    let started = std::time::Instant::now();
    let run = fx
        .fabric(&["run", "list", "--pack", "mcp_user", "--json"])
        .await;
    run.assert_code(0);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let events = fx.runlog(&run.json());
    let servers = of_kind(&events, "mcp_server");
    assert_eq!(servers[0]["payload"]["status"], "starting");
    assert!(!alive_with(&marker), "the server outlived the run");
}

#[tokio::test]
async fn a_required_server_that_fails_fails_the_run_with_its_reason() {
    let fx = Fixture::new(vec![Turn::tool_call(
        "finish_task",
        json!({"summary": "x"}),
    )])
    .await;
    write_specialist(
        &fx,
        "---
name: mcp_user
description: Needs a server that does not exist.
tools: [list_files]
mcp_servers:
  - name: ghost
    command: fabric-no-such-program
    required: true
---
Work.
",
    );
    let run = fx
        .fabric(&["run", "x", "--pack", "mcp_user", "--json"])
        .await;
    let result = run.json();
    assert_eq!(result["_meta"]["status"], "failed", "{}", run.stdout);
    let reason = result["_meta"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("required MCP server `ghost`")
            && reason.contains("cannot start `fabric-no-such-program`"),
        "{reason}"
    );
    let events = fx.runlog(&result);
    let statuses: Vec<&str> = of_kind(&events, "mcp_server")
        .iter()
        .map(|e| e["payload"]["status"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(statuses, ["starting", "failed"]);
}

#[tokio::test]
async fn cancelling_a_run_stops_its_servers() {
    let mut slow = Turn::tool_call("finish_task", json!({"summary": "too late"}));
    slow.delay_ms = Some(30_000);
    let fx = Fixture::new(vec![slow]).await;
    let marker = format!("fabric-e2e-cancel-{}", std::process::id());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../adapters/mcp/tests/fixtures/crash_server.js");
    write_specialist(
        &fx,
        &format!(
            "---
name: mcp_user
description: Has a server up while the model thinks.
tools: [list_files]
mcp_servers:
  - name: crashy
    command: node
    args: [{}, {marker}]
    required: true
---
Work.
",
            script.display()
        ),
    );
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fabric"))
        .args(["run", "wait", "--pack", "mcp_user", "--json", "--config"])
        .arg(&fx.config)
        .arg("--workspace")
        .arg(fx.workspace_root())
        .current_dir(fx.dir.path())
        .env("XDG_CONFIG_HOME", fx.dir.path().join("xdg"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("fabric starts");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let up = || process_with(&marker);
    while !up() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Ctrl-C: the run is cancelled while the model "thinks".
    let pid = child.id().expect("pid");
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let status = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait())
        .await
        .expect("fabric stopped after Ctrl-C")
        .expect("exit status");
    assert_eq!(status.code(), Some(130));
    assert!(
        !alive_with(&marker),
        "the server outlived the cancelled run"
    );
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_12_a_server_whose_tools_are_named_is_ready_for_the_first_model_call() {
    let Some(script) = everything() else { return };
    let fx = Fixture::new(vec![
        Turn::tool_call("mcp__everything__echo", json!({"message": "first step"})),
        Turn::tool_call("finish_task", json!({"summary": "echoed"})),
    ])
    .await;
    // Not `required`: named tools are waited for all the same.
    write_specialist(
        &fx,
        &format!(
            "---
name: mcp_user
description: Uses the everything server.
tools: [mcp__everything__echo]
mcp_servers:
  - name: everything
    command: node
    args: [{script}, stdio]
    startup_timeout_s: 60
---
Use the tools.
"
        ),
    );
    let run = fx
        .fabric(&["run", "echo", "--pack", "mcp_user", "--json"])
        .await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let events = fx.runlog(&run.json());
    let starting = &of_kind(&events, "mcp_server")[0]["payload"];
    assert_eq!(starting["awaited"], true);
    assert_eq!(starting["required"], false);
    let first_request = fx.requests()[0].clone();
    let offered: Vec<&str> = first_request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(offered.contains(&"mcp__everything__echo"), "{offered:?}");
    assert_eq!(
        of_kind(&events, "tool_result")[0]["payload"]["tool"],
        "mcp__everything__echo"
    );
}

#[tokio::test]
async fn issue_12_a_named_server_that_does_not_come_up_is_waited_for_then_left_out() {
    let fx = Fixture::new(vec![
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call("finish_task", json!({"summary": "done without it"})),
    ])
    .await;
    write_specialist(
        &fx,
        "---
name: mcp_user
description: Names the tools of a server that never answers.
tools: [list_files, mcp__sleepy__*]
mcp_servers:
  - name: sleepy
    command: sh
    args: [-c, 'sleep 60']
    startup_timeout_s: 1
---
Work.
",
    );
    let run = fx
        .fabric(&["run", "list", "--pack", "mcp_user", "--json"])
        .await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let events = fx.runlog(&run.json());
    // Its timeout is recorded before the first model call, which went on without it.
    let kinds = kinds(&events);
    let timeout = events
        .iter()
        .position(|e| e["payload"]["status"] == "timeout")
        .unwrap_or(usize::MAX);
    let first_request = kinds.iter().position(|k| *k == "llm_request").unwrap_or(0);
    assert!(timeout < first_request, "{kinds:?}");
    assert_eq!(
        of_kind(&events, "mcp_server")[0]["payload"]["awaited"],
        true
    );
}
