//! The happy paths of `fabric run`.

use fabric_test_support::{Scenario, ScriptedCall, Turn};
use serde_json::json;

use super::fixture::{Fixture, kinds, of_kind, read_runlog};

fn hello_turns() -> Vec<Turn> {
    vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "hello.txt", "content": "Hello World"}),
        ),
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call(
            "finish_task",
            json!({"summary": "Created hello.txt", "artifacts": ["hello.txt"], "next_steps": [], "notes": ""}),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn engineering_run_writes_its_file_and_returns_a_validated_payload() {
    let fx = Fixture::new(hello_turns()).await;
    let result = fx
        .run_json(
            "Create hello.txt containing Hello World, then list the workspace",
            &[],
            0,
        )
        .await;
    assert_eq!(result["summary"], "Created hello.txt");
    assert_eq!(result["artifacts"], json!(["hello.txt"]));
    let meta = &result["_meta"];
    assert_eq!(meta["status"], "completed");
    assert_eq!(meta["specialist_ids"], json!(["engineering"]));
    assert_eq!(meta["model"], "qwen2.5:7b");
    assert_eq!(meta["model_key"], "test");
    assert_eq!(meta["steps"], 3);
    assert!(meta["usage"]["total_tokens"].as_u64().unwrap() > 0);

    let workspace = std::path::PathBuf::from(meta["workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(workspace.join("hello.txt")).unwrap(),
        "Hello World"
    );
    assert!(workspace.starts_with(fx.workspace_root().canonicalize().unwrap()));

    let events = fx.runlog(&result);
    assert_eq!(
        kinds(&events),
        vec![
            "run_start",
            "recruitment",
            "pack_start",
            "llm_request",
            "llm_response",
            "tool_call",
            "tool_result",
            "llm_request",
            "llm_response",
            "tool_call",
            "tool_result",
            "llm_request",
            "llm_response",
            "tool_call",
            "tool_result",
            "run_complete",
        ]
    );
    let listed = of_kind(&events, "tool_result")[1]["payload"]["result"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(listed.contains("hello.txt"), "{listed}");
    let response = of_kind(&events, "llm_response")[0];
    assert!(response["payload"]["latency_ms"].as_f64().is_some());
    assert!(
        response["payload"]["usage"]["prompt_tokens"]
            .as_u64()
            .is_some()
    );
    assert_eq!(
        events.last().unwrap()["payload"]["result"]["summary"],
        "Created hello.txt"
    );

    // The model was offered the four tools plus finish_task, generated from their contracts.
    let first = &fx.requests()[0];
    let mut names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        vec![
            "finish_task",
            "list_files",
            "read_file",
            "shell",
            "write_file"
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn human_output_shows_steps_and_prints_the_payload() {
    let fx = Fixture::new(hello_turns()).await;
    let run = fx
        .fabric(&["run", "Create hello.txt", "--pack", "engineering"])
        .await;
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(run.stderr.contains("write_file"), "{}", run.stderr);
    assert!(
        run.stderr.contains("completed in 3 steps"),
        "{}",
        run.stderr
    );
    let payload: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(payload["summary"], "Created hello.txt");
}

#[tokio::test(flavor = "multi_thread")]
async fn streaming_over_sse_with_json_lines() {
    let mut turns = hello_turns();
    turns[0].content = Some("I will create the file now.".into());
    let fx = Fixture::new(turns).await;
    let run = fx
        .fabric(&[
            "run",
            "Create hello.txt",
            "--pack",
            "engineering",
            "--json",
            "--stream",
        ])
        .await;
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let lines: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (result, events) = lines.split_last().unwrap();
    assert_eq!(result["_meta"]["status"], "completed");
    assert_eq!(events.first().unwrap()["kind"], "run_start");
    assert_eq!(events.last().unwrap()["kind"], "run_complete");
    // What was streamed is what the runlog holds.
    let logged = fx.runlog(result);
    assert_eq!(logged.len(), events.len());
    assert_eq!(
        logged[4]["payload"]["content"],
        "I will create the file now."
    );
    assert!(fx.requests().iter().all(|r| r["stream"] == true));
}

#[tokio::test(flavor = "multi_thread")]
async fn ollama_native_backend_streams_ndjson_and_sets_num_ctx() {
    let fx = Fixture::with_backend(Scenario::new(hello_turns()), "ollama").await;
    let run = fx
        .fabric(&[
            "run",
            "Create hello.txt",
            "--pack",
            "engineering",
            "--json",
            "--stream",
        ])
        .await;
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let result: serde_json::Value =
        serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["_meta"]["status"], "completed");
    let requests = fx.server.requests();
    assert!(
        requests.iter().all(|r| r.path == "/api/chat"),
        "{:?}",
        requests.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    assert!(requests[0].body["options"]["num_ctx"].as_u64().unwrap() >= 8192);
    fx.runlog(&result);
}

#[tokio::test(flavor = "multi_thread")]
async fn arguments_as_object_and_missing_call_ids_are_accepted() {
    let mut write = ScriptedCall::new("write_file", json!({"path": "a.txt", "content": "A"}));
    write.arguments_as_object = true;
    write.omit_id = true;
    let mut list = ScriptedCall::new("list_files", json!({}));
    list.omit_id = true;
    let turns = vec![
        Turn {
            tool_calls: vec![write, list],
            content_null: true,
            ..Turn::default()
        },
        Turn {
            omit_usage: true,
            ..Turn::tool_call("finish_task", json!({"summary": "ok"}))
        },
    ];
    let fx = Fixture::new(turns).await;
    let result = fx.run_json("two calls at once", &[], 0).await;
    assert_eq!(result["summary"], "ok");
    let events = fx.runlog(&result);
    let results = of_kind(&events, "tool_result");
    assert_eq!(results.len(), 3);
    let ids: Vec<&str> = results
        .iter()
        .take(2)
        .map(|e| e["payload"]["call_id"].as_str().unwrap())
        .collect();
    assert!(!ids[0].is_empty() && ids[0] != ids[1], "{ids:?}");
    // The tool messages answered the generated ids.
    let second = &fx.requests()[1];
    let answered: Vec<&str> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(answered, ids);
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_land_under_fabric_workspace_env() {
    let fx = Fixture::new(hello_turns()).await;
    let other = fx.dir.path().join("elsewhere");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_fabric"));
    let output = cmd
        .args(["run", "Create hello.txt", "--pack", "engineering", "--json"])
        .env("FABRIC_CONFIG_PATH", &fx.config)
        .env("FABRIC_WORKSPACE", &other)
        .current_dir(fx.dir.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let run_id = result["_meta"]["run_id"].as_str().unwrap();
    read_runlog(&other.join("runs").join(run_id).join("runlog.jsonl"));
}
