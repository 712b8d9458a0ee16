//! `fabric logs list` and `fabric logs show`.

use fabric_test_support::Turn;
use serde_json::json;

use super::fixture::Fixture;

#[tokio::test(flavor = "multi_thread")]
async fn list_and_show_what_happened() {
    let fx = Fixture::new(vec![
        Turn::tool_call("write_file", json!({"path": "a.txt", "content": "A"})),
        Turn::tool_call("finish_task", json!({"summary": "Wrote a.txt"})),
    ])
    .await;
    let result = fx.run_json("write a", &[], 0).await;
    let run_id = result["_meta"]["run_id"].as_str().unwrap();

    let list = fx.fabric(&["logs", "list"]).await;
    assert_eq!(list.code(), 0, "{}", list.stderr);
    let row = list
        .stdout
        .lines()
        .find(|l| l.starts_with(run_id))
        .unwrap_or_else(|| panic!("{}", list.stdout));
    assert!(
        row.contains("completed") && row.contains("engineering") && row.contains("Wrote a.txt"),
        "{row}"
    );

    let listed = fx.fabric(&["logs", "list", "--json", "--limit", "5"]).await;
    let rows: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(rows[0]["run_id"], run_id);
    assert_eq!(rows[0]["prompt"], "write a");

    let show = fx
        .fabric(&["logs", "show", run_id, "--kinds", "tool_call,run_complete"])
        .await;
    assert_eq!(show.code(), 0, "{}", show.stderr);
    let lines: Vec<&str> = show.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", show.stdout);
    assert!(lines[0].contains("tool_call") && lines[0].contains("write_file"));
    assert!(lines[2].contains("run_complete"));

    let raw = fx.fabric(&["logs", "show", run_id, "--json"]).await;
    let on_disk = std::fs::read_to_string(
        fx.workspace_root()
            .join("runs")
            .join(run_id)
            .join("runlog.jsonl"),
    )
    .unwrap();
    assert_eq!(raw.stdout, on_disk);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_run_ids_and_kinds_are_usage_errors() {
    let fx = Fixture::new(vec![]).await;
    let run = fx
        .fabric(&["logs", "show", "20200101-000000-000-deadbeef"])
        .await;
    assert_eq!(run.code(), 2);
    assert!(
        run.stderr.contains("no run `20200101-000000-000-deadbeef`"),
        "{}",
        run.stderr
    );
    let run = fx.fabric(&["logs", "show", "../../etc"]).await;
    assert_eq!(run.code(), 2);
    assert!(run.stderr.contains("invalid run id"), "{}", run.stderr);
    let run = fx
        .fabric(&["logs", "show", "x", "--kinds", "tool_cal"])
        .await;
    assert_eq!(run.code(), 2);
    assert!(
        run.stderr.contains("unknown event kind `tool_cal`"),
        "{}",
        run.stderr
    );
    let run = fx.fabric(&["logs", "list"]).await;
    assert_eq!(run.code(), 0);
}
