//! A failing model server ends the run with a typed status, a clear message and a valid runlog.

use fabric_test_support::{Scenario, Turn};
use serde_json::json;

use super::fixture::{Fixture, of_kind, read_runlog};

#[tokio::test(flavor = "multi_thread")]
async fn a_500_while_the_model_loads_is_retried() {
    let fx = Fixture::new(vec![
        Turn::error(500, "model is loading"),
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call("finish_task", json!({"summary": "ok"})),
    ])
    .await;
    let result = fx.run_json("recover", &[], 0).await;
    assert_eq!(result["_meta"]["status"], "completed");
    assert_eq!(fx.server.chat_request_count(), 3);
    fx.runlog(&result);
}

#[tokio::test(flavor = "multi_thread")]
async fn persistent_5xx_gives_up_with_llm_error() {
    let mut scenario = Scenario::new(vec![Turn::error(503, "overloaded")]);
    scenario.on_exhausted = fabric_test_support::OnExhausted::RepeatLast;
    let fx = Fixture::with_backend(scenario, "openai").await;
    let result = fx.run_json("give up", &[], 3).await;
    assert_eq!(result["_meta"]["status"], "llm_error");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("gave up after 3 attempts") && reason.contains("503"),
        "{reason}"
    );
    let events = fx.runlog(&result);
    assert_eq!(events.last().unwrap()["payload"]["status"], "llm_error");
}

#[tokio::test(flavor = "multi_thread")]
async fn unreachable_server_names_the_url_and_the_fix() {
    let fx = Fixture::new(vec![]).await;
    // Point the config at a port where nothing listens.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let yaml = format!(
        "models:\n  test:\n    base_url: http://127.0.0.1:{port}/v1\n    model: m\n    backend: openai\n    max_retries: 0\ndefault_model_key: test\nrouting_model_key: test\n"
    );
    std::fs::write(&fx.config, yaml).unwrap();
    let run = fx.fabric(&["run", "hello", "--pack", "engineering"]).await;
    assert_eq!(run.code(), 3, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "no model server answers at http://127.0.0.1:{port}"
        )),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("ollama serve"), "{}", run.stderr);
    let runs = std::fs::read_dir(fx.workspace_root().join("runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let events = read_runlog(&runs.path().join("runlog.jsonl"));
    assert_eq!(events.last().unwrap()["payload"]["status"], "llm_error");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_without_tools_ends_with_model_unsupported() {
    let fx = Fixture::with_backend(
        Scenario::new(vec![Turn::error(
            400,
            "registry.ollama.ai/library/sqlcoder:15b does not support tools",
        )]),
        "ollama",
    )
    .await;
    let run = fx
        .fabric(&["run", "hello", "--pack", "engineering", "--json"])
        .await;
    assert_eq!(run.code(), 4, "{}", run.stderr);
    let result = run.json();
    assert_eq!(result["_meta"]["status"], "model_unsupported");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("`qwen2.5:7b` does not support tool calling")
            && reason.contains("--model-key"),
        "{reason}"
    );
    fx.runlog(&result);
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_cancels_cleanly() {
    let slow = Turn {
        delay_ms: Some(30_000),
        ..Turn::tool_call("list_files", json!({}))
    };
    let fx = Fixture::new(vec![slow]).await;
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fabric"))
        .args(["run", "slow", "--pack", "engineering", "--json", "--config"])
        .arg(&fx.config)
        .arg("--workspace")
        .arg(fx.workspace_root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the model call is in flight, then interrupt.
    for _ in 0..200 {
        if fx.server.chat_request_count() > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(fx.server.chat_request_count(), 1);
    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let output = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["_meta"]["status"], "cancelled");
    let events = fx.runlog(&result);
    assert_eq!(
        of_kind(&events, "run_failed")[0]["payload"]["status"],
        "cancelled"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_installed_model_that_cannot_call_tools_is_refused_before_the_run() {
    let mut scenario = Scenario::new(vec![]);
    let mut plain = fabric_test_support::ModelInfo::new("qwen2.5:7b");
    plain.capabilities = vec!["completion".into()];
    let mut capable = fabric_test_support::ModelInfo::new("llama3.1:8b");
    capable.capabilities = vec!["completion".into(), "tools".into()];
    scenario.models = vec![plain, capable];
    let fx = Fixture::with_backend(scenario, "ollama").await;
    let run = fx.fabric(&["run", "hello", "--pack", "engineering"]).await;
    assert_ne!(run.code(), 0);
    assert!(
        run.stderr
            .contains("`qwen2.5:7b` is installed but cannot call tools")
            && run.stderr.contains("such as llama3.1:8b"),
        "{}",
        run.stderr
    );
    assert_eq!(
        fx.server.chat_request_count(),
        0,
        "no run was started: {}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_14_the_readme_scenario_serves_any_number_of_runs_and_exhaustion_is_not_retried() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripted-llm/scenarios/hello.yaml"
    );
    let scenario = fabric_test_support::Scenario::from_file(path).unwrap();
    let fx = Fixture::with_backend(scenario, "openai").await;
    for _ in 0..2 {
        let result = fx.run_json("Create hello.txt", &[], 0).await;
        assert_eq!(result["_meta"]["status"], "completed");
    }

    // A scenario that serves turns in order runs out, and says so once: not retried.
    let fx = Fixture::new(vec![fabric_test_support::Turn::tool_call(
        "finish_task",
        serde_json::json!({"summary": "once"}),
    )])
    .await;
    let _ = fx.fabric(&["run", "a", "--pack", "engineering"]).await;
    let before = fx.server.chat_request_count();
    let second = fx.fabric(&["run", "b", "--pack", "engineering"]).await;
    assert_eq!(second.code(), 3, "{}", second.stderr);
    assert!(
        second.stderr.contains("scenario exhausted after 1 turns")
            && second.stderr.contains("turn_by: conversation"),
        "{}",
        second.stderr
    );
    assert_eq!(
        fx.server.chat_request_count(),
        before + 1,
        "the exhausted answer was not retried: {}",
        second.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_26_fabric_mock_llm_serves_the_readme_example_from_the_binary() {
    // `fabric-scripted-llm` needed the source checkout; `fabric mock-llm` ships it.
    use tokio::io::AsyncBufReadExt;
    let fx = Fixture::new(vec![]).await;
    let mut server = fx
        .command(&["mock-llm", "--port", "0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let first = tokio::time::timeout(std::time::Duration::from_secs(20), lines.next_line())
        .await
        .expect("it says where it listens")
        .unwrap()
        .unwrap_or_default();
    let url = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line: {first}"))
        .to_owned();
    // The README's config, pointed at the port it chose.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../README.md"))
            .unwrap();
    let example = readme
        .split("<!-- mock-llm-example -->\n```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README has the mock-llm example");
    assert!(
        example.starts_with("fabric mock-llm --port 18080 &"),
        "{example}"
    );
    let yaml = example
        .split("<<'YAML'\n")
        .nth(1)
        .and_then(|rest| rest.split("YAML\n").next())
        .unwrap()
        .replace("http://127.0.0.1:18080", &url);
    std::fs::write(&fx.config, yaml).unwrap();
    for _ in 0..2 {
        let run = fx
            .fabric(&["run", "Create hello.txt", "--pack", "engineering", "--json"])
            .await;
        assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
        let result = run.json();
        let workspace = std::path::PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
        assert_eq!(
            std::fs::read_to_string(workspace.join("hello.txt")).unwrap(),
            "Hello World"
        );
    }
    server.start_kill().unwrap();
    let _ = server.wait().await;

    // A scenario with a mistake is a usage error naming the file.
    let bad = fx.dir.path().join("bad.yaml");
    std::fs::write(&bad, "turns: [{nonsense: 1}]\n").unwrap();
    let run = fx
        .fabric(&["mock-llm", "--scenario", bad.to_str().unwrap()])
        .await;
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert!(run.stderr.contains("bad.yaml"), "{}", run.stderr);
}
