//! `fabric replay` and `fabric test` (issue #12): recorded runs re-run with no model server,
//! and users' scenario files run against their specialists.

use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};

use super::fixture::Fixture;

/// Points the config's model at a port nothing listens on: a replay must not need it.
fn no_model_server(fx: &Fixture) {
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let yaml = std::fs::read_to_string(&fx.config).unwrap().replace(
        &fx.server.base_url(),
        &format!("http://127.0.0.1:{dead}/v1"),
    );
    let yaml = yaml.replace(&fx.server.root_url(), &format!("http://127.0.0.1:{dead}"));
    std::fs::write(&fx.config, yaml).unwrap();
}

async fn replay(fx: &Fixture, run_id: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["replay", run_id, "--json"];
    args.extend_from_slice(extra);
    let run = fx.fabric(&args).await;
    assert!(
        run.code() == 0 || run.code() == 1,
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    (run.code(), run.json())
}

fn work() -> Vec<Turn> {
    vec![
        Turn::tool_call("write_file", json!({"path": "a.txt", "content": "alpha"})),
        Turn::tool_call("read_file", json!({"path": "a.txt"})),
        Turn::tool_call("shell", json!({"cmd": ["cat", "a.txt"]})),
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call("finish_task", json!({"summary": "wrote and read a.txt"})),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_12_a_recorded_run_replays_with_no_model_server_and_no_divergence() {
    let fx = Fixture::new(work()).await;
    let recorded = fx.run_json("write a.txt then read it", &[], 0).await;
    let id = recorded["_meta"]["run_id"].as_str().unwrap().to_owned();
    no_model_server(&fx);
    let (code, report) = replay(&fx, &id, &[]).await;
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["divergences"], json!([]));
    assert_eq!(report["status"], "completed");
    assert_ne!(report["replay_run_id"], report["run_id"]);
    // The replay is a run of its own, with today's tools really run.
    let replayed = report["replay_run_id"].as_str().unwrap();
    let workspace = fx
        .workspace_root()
        .join("runs")
        .join(replayed)
        .join("workspace");
    assert_eq!(
        std::fs::read_to_string(workspace.join("a.txt")).unwrap(),
        "alpha"
    );
    // And the human report says so.
    let run = fx.fabric(&["replay", &id]).await;
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(run.stdout.contains("no divergence"), "{}", run.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_12_a_changed_specialist_shows_where_the_replay_diverges() {
    let fx = Fixture::new(work()).await;
    let recorded = fx.run_json("write a.txt then read it", &[], 0).await;
    let id = recorded["_meta"]["run_id"].as_str().unwrap().to_owned();
    no_model_server(&fx);
    // Today the specialist may no longer run commands.
    fx.append_config(
        "specialists:\n  engineering:\n    tools: [read_file, write_file, list_files]\n",
    );
    let (code, report) = replay(&fx, &id, &[]).await;
    assert_eq!(code, 1, "{report}");
    let divergences: Vec<String> = report["divergences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_owned())
        .collect();
    let all = divergences.join("\n");
    assert!(
        all.contains("offered other tools") && all.contains("\"shell\""),
        "{all}"
    );
    assert!(
        all.contains("step 3") && all.contains("`shell`") && all.contains("a validation now fails"),
        "{all}"
    );
    // `--specialist-from recorded` asks only about the tools' behaviour, with the tools the
    // recording had; `shell` is gone today, which is still a divergence.
    let (code, report) = replay(&fx, &id, &["--specialist-from", "recorded"]).await;
    assert_eq!(code, 1, "{report}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_12_replays_of_the_suites_kinds_of_run_do_not_diverge() {
    // A plain-text answer corrected, then work.
    let corrected = vec![
        Turn::text("Sure, I will write it."),
        Turn::tool_call("write_file", json!({"path": "b.txt", "content": "beta"})),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ];
    // A call the Ollama server returned as text, repaired.
    let repaired = vec![
        Turn::text("<tool_call>\n{\"name\": \"list_files\", \"arguments\": {}}\n</tool_call>"),
        Turn::tool_call("finish_task", json!({"summary": "listed"})),
    ];
    // A refused call (outside the workspace), then a fix.
    let refused = vec![
        Turn::tool_call("write_file", json!({"path": "../x.txt", "content": "x"})),
        Turn::tool_call("write_file", json!({"path": "x.txt", "content": "x"})),
        Turn::tool_call("finish_task", json!({"summary": "wrote x"})),
    ];
    // Out of steps.
    let endless = vec![Turn::tool_call("list_files", json!({})); 3];
    for (turns, backend, extra, code) in [
        (corrected, "openai", vec![], 0),
        (repaired, "ollama", vec![], 0),
        (refused, "openai", vec![], 0),
        (endless, "openai", vec!["--max-steps", "3"], 5),
    ] {
        let fx = Fixture::with_backend(Scenario::new(turns), backend).await;
        let recorded = fx.run_json("do the work", &extra, code).await;
        let id = recorded["_meta"]["run_id"].as_str().unwrap().to_owned();
        no_model_server(&fx);
        let (replay_code, report) = replay(&fx, &id, &[]).await;
        assert_eq!(replay_code, 0, "{backend}: {report}");
        assert_eq!(report["status"], recorded["_meta"]["status"], "{report}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_12_fabric_test_runs_scenario_files_against_a_markdown_specialist() {
    let fx = Fixture::new(vec![]).await;
    no_model_server(&fx);
    let specialists = fx.workspace_root().join("specialists");
    std::fs::create_dir_all(&specialists).unwrap();
    std::fs::write(
        specialists.join("greeter.md"),
        "---\nname: greeter\ndescription: Writes greetings.\ntools: [write_file, read_file]\n---\nYou write greeting files.\n",
    )
    .unwrap();
    let tests = fx.workspace_root().join("tests");
    std::fs::create_dir_all(&tests).unwrap();
    std::fs::write(
        tests.join("hello.yaml"),
        r#"name: writes hello
specialist: greeter
prompt: Write hello.txt saying Hello
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: hello.txt, content: Hello}}
  - tool_calls:
      - {name: finish_task, arguments: {summary: wrote hello.txt}}
expect:
  status: completed
  files: {hello.txt: Hello, other.txt: null}
  tool_calls: [write_file, finish_task]
  payload: {summary: wrote hello.txt}
"#,
    )
    .unwrap();
    std::fs::write(
        tests.join("wrong.yaml"),
        r#"specialist: greeter
prompt: Write bye.txt
turns:
  - tool_calls: [{name: write_file, arguments: {path: bye.txt, content: Bye}}]
  - tool_calls: [{name: finish_task, arguments: {summary: done}}]
expect:
  files: {bye.txt: Goodbye}
  tool_calls: [write_file, read_file, finish_task]
"#,
    )
    .unwrap();
    let run = fx.fabric(&["test"]).await;
    assert_eq!(run.code(), 1, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("ok    writes hello"), "{}", run.stdout);
    assert!(run.stdout.contains("FAIL  wrong"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("file `bye.txt`: expected \"Goodbye\", got \"Bye\""),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("1 passed, 1 failed"), "{}", run.stdout);
    let json = fx
        .fabric(&["test", tests.join("hello.yaml").to_str().unwrap(), "--json"])
        .await;
    assert_eq!(json.code(), 0, "{}", json.stderr);
    assert_eq!(json.json()["passed"], 1);

    // A mistake in a scenario file is named with the file and the key.
    std::fs::write(
        tests.join("bad.yaml"),
        "specialist: greeter\nprompt: x\nturns: []\nexpect: {colour: red}\n",
    )
    .unwrap();
    let bad = fx
        .fabric(&["test", tests.join("bad.yaml").to_str().unwrap()])
        .await;
    assert_eq!(bad.code(), 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("bad.yaml") && bad.stderr.contains("colour"),
        "{}",
        bad.stderr
    );
}
