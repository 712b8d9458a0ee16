//! `fabric eval` (issue #24) through the real binary against the scripted server: a suite's
//! files are placed in each workspace, and each task is judged by its effects.

use fabric_test_support::Turn;
use serde_json::json;

use super::fixture::{Fixture, of_kind, read_runlog};

const SUITE: &str = r#"
name: two-tasks
tasks:
  - name: fix
    prompt: Fix add in calc.py.
    max_steps: 6
    files:
      calc.py: "def add(a, b):\n    return a - b\n"
    expect:
      files:
        calc.py: {contains: "a + b", lacks: "a - b"}
      commands:
        - [python3, -c, "import calc; assert calc.add(2, 3) == 5"]
  - name: answer
    prompt: What is the launch code in notes.txt?
    files:
      notes/notes.txt: "The launch code is 7421.\n"
    expect:
      payload:
        summary: {contains: "7421"}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn issue_24_fabric_eval_runs_a_suite_and_judges_it_by_its_effects() {
    let fx = Fixture::new(vec![
        Turn::tool_call("read_file", json!({"path": "calc.py"})),
        Turn::tool_call(
            "write_file",
            json!({"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}),
        ),
        Turn::tool_call("finish_task", json!({"summary": "fixed add"})),
        Turn::tool_call("read_file", json!({"path": "notes/notes.txt"})),
        Turn::tool_call("finish_task", json!({"summary": "I could not find a code"})),
    ])
    .await;
    let suite = fx.dir.path().join("suite.yaml");
    std::fs::write(&suite, SUITE).unwrap();
    let run = fx
        .fabric(&["eval", suite.to_str().unwrap(), "--json"])
        .await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    assert_eq!(report["suite"], "two-tasks");
    let key = &report["model_keys"][0];
    assert_eq!(key["model_key"], "test");
    assert_eq!(key["runs"], 2);
    assert_eq!(key["passed"], 1);
    assert_eq!(key["success_rate"], 0.5);
    let fix = &key["attempts"][0];
    assert_eq!(fix["task"], "fix");
    assert_eq!(fix["passed"], true, "{fix}");
    assert_eq!(fix["steps"], 3);
    let answer = &key["attempts"][1];
    assert_eq!(answer["passed"], false);
    assert_eq!(
        answer["failures"],
        json!([r#"payload.summary lacks "7421" (it is "I could not find a code")"#])
    );
    // The task's files were in the workspace before the run: the model read them.
    let runlog = fx
        .workspace_root()
        .join("runs")
        .join(answer["run_id"].as_str().unwrap())
        .join("runlog.jsonl");
    let events = read_runlog(&runlog);
    // Marked as evaluation runs (issue #24): out of `logs list` and `stats` unless asked.
    assert_eq!(events[0]["payload"]["origin"], "eval");
    let listed = fx.fabric(&["logs", "list", "--json"]).await.json();
    assert_eq!(listed, json!([]), "{listed}");
    let all = fx.fabric(&["logs", "list", "--all", "--json"]).await.json();
    assert_eq!(all.as_array().map(Vec::len), Some(2), "{all}");
    let results = of_kind(&events, "tool_result");
    assert!(
        results[0]["payload"]["result"]
            .as_str()
            .unwrap()
            .contains("7421"),
        "{results:?}"
    );
    // The report is kept beside the runs.
    let saved: Vec<_> = std::fs::read_dir(fx.workspace_root().join("evals"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(saved.len(), 1);
    assert!(
        saved[0]
            .file_name()
            .to_string_lossy()
            .ends_with("-two-tasks.json")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_24_fabric_eval_refuses_an_unknown_model_key_or_a_bad_suite() {
    let fx = Fixture::new(Vec::new()).await;
    let run = fx.fabric(&["eval", "--model-key", "nope"]).await;
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert!(run.stderr.contains("no model key `nope`"), "{}", run.stderr);
    let suite = fx.dir.path().join("bad.yaml");
    std::fs::write(&suite, "tasks:\n  - name: x\n    promt: typo\n").unwrap();
    let run = fx.fabric(&["eval", suite.to_str().unwrap()]).await;
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert!(run.stderr.contains("promt"), "{}", run.stderr);
    assert_eq!(fx.server.chat_request_count(), 0);
}

/// Issue #40: a model call that failed was counted as time outside the model; it is model
/// time, from its request until the run recorded its end.
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_a_failed_model_call_counts_as_model_time() {
    let mut refused = Turn::error(400, "the model is misconfigured");
    refused.delay_ms = Some(1_500);
    let fx = Fixture::new(vec![refused]).await;
    let suite = fx.dir.path().join("suite.yaml");
    std::fs::write(
        &suite,
        "name: one\ntasks:\n  - name: t\n    prompt: Say hello.\n    expect:\n      payload:\n        summary: {contains: hello}\n",
    )
    .unwrap();
    let run = fx
        .fabric(&["eval", suite.to_str().unwrap(), "--json"])
        .await;
    let report = run.json();
    let key = &report["model_keys"][0];
    let attempt = &key["attempts"][0];
    assert_eq!(attempt["status"], "llm_error", "{attempt}");
    let model_ms = attempt["model_ms"].as_u64().unwrap();
    assert!(model_ms >= 1_400, "{attempt}");
    assert!(
        model_ms <= attempt["wall_ms"].as_u64().unwrap(),
        "{attempt}"
    );
    assert!(key["outside_model_share"].as_f64().unwrap() < 0.5, "{key}");
}
