//! Issue #42, item 7: the viewer for a person at work. Over HTTP, a project run's diff (per
//! file, per checkpoint), `apply` and `discard`, and their refusals; in Chromium, the answer
//! box, the approval buttons, the steering box and a project run's diff applied from the
//! page (`tests/web/web_ui.py`, cases `answer`, `approve`, `deny`, `steer`, `project`).

use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};

use super::fixture::{kinds, of_kind};
use super::interactive::{ASKER, asking_turns};
use super::projects::{git, user_repo};
use super::serve_fixture::{Options, Served};

fn finish(summary: &str) -> Turn {
    Turn::tool_call(
        "finish_task",
        json!({"summary": summary, "artifacts": [], "next_steps": [], "notes": ""}),
    )
}

/// A project run's turns: a new file, then a change to a tracked one (two checkpoints), and
/// a file whose content is hostile text for a page.
fn project_turns() -> Vec<Turn> {
    vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "hello.txt", "content": "Hello <script>window.__xss=1</script>\n"}),
        ),
        Turn::tool_call(
            "write_file",
            json!({"path": "src/lib.txt", "content": "one\ntwo\nthree\n"}),
        ),
        finish("wrote hello.txt and a third line"),
    ]
}

/// A project run made on the command line against the served fixture's store: its id and
/// the repository.
async fn project_run(served: &Served) -> (String, std::path::PathBuf) {
    let repo = user_repo(&served.fx);
    let run = served
        .fx
        .fabric(&[
            "run",
            "edit the project",
            "--pack",
            "engineering",
            "--json",
            "--project",
            repo.to_str().expect("utf-8"),
        ])
        .await;
    run.assert_code(0);
    let id = run.json()["_meta"]["run_id"]
        .as_str()
        .expect("id")
        .to_owned();
    (id, repo)
}

fn code_of(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_http_diff_shows_a_project_run_per_file_and_per_checkpoint() {
    let served = Served::start(project_turns()).await;
    let (id, _repo) = project_run(&served).await;
    let (code, diff) = served.get_json(&format!("/runs/{id}/diff")).await;
    assert_eq!(code, 200, "{diff}");
    assert_eq!(diff["branch"], format!("fabric/{id}"));
    assert_eq!(diff["checkpoint"], Value::Null);
    assert_eq!(diff["from"], diff["base"]);
    assert_eq!(diff["to"], diff["head"]);
    let files = diff["files"].as_array().expect("files");
    let paths: Vec<&str> = files.iter().filter_map(|f| f["path"].as_str()).collect();
    assert_eq!(paths, ["hello.txt", "src/lib.txt"], "{diff}");
    let hello = &files[0];
    assert_eq!(
        (hello["added"].as_u64(), hello["removed"].as_u64()),
        (Some(1), Some(0))
    );
    let text = hello["diff"].as_str().expect("diff");
    assert!(
        text.starts_with("diff --git a/hello.txt b/hello.txt\n"),
        "{text}"
    );
    assert!(text.contains("+Hello <script>"), "{text}");
    assert!(
        !text.contains("src/lib.txt"),
        "one file's part only: {text}"
    );
    assert!(files[1]["diff"].as_str().expect("diff").contains("+three"));
    assert_eq!(hello["truncated"], false);

    // Per checkpoint: the second against the first.
    let checkpoints: Vec<String> = of_kind(&served.runlog(&id), "checkpoint")
        .iter()
        .filter_map(|e| e["payload"]["commit"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(diff["checkpoints"], json!(checkpoints));
    assert_eq!(checkpoints.len(), 2);
    let (code, second) = served
        .get_json(&format!(
            "/runs/{id}/diff?checkpoint={}",
            &checkpoints[1][..10]
        ))
        .await;
    assert_eq!(code, 200, "{second}");
    assert_eq!(second["checkpoint"], checkpoints[1].as_str());
    assert_eq!(second["from"], checkpoints[0].as_str());
    let paths: Vec<&str> = second["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert_eq!(paths, ["src/lib.txt"], "{second}");
    let (code, first) = served
        .get_json(&format!("/runs/{id}/diff?checkpoint={}", checkpoints[0]))
        .await;
    assert_eq!(code, 200, "{first}");
    assert_eq!(first["from"], diff["base"], "the first against the base");
    assert_eq!(first["files"][0]["path"], "hello.txt");

    // A checkpoint that is none of the run's, or no commit id at all.
    let (code, body) = served
        .get_json(&format!("/runs/{id}/diff?checkpoint=0000000"))
        .await;
    assert_eq!(
        (code, code_of(&body)),
        (404, "checkpoint_not_found"),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&checkpoints[0])),
        "the message lists the run's checkpoints: {body}"
    );
    let (code, body) = served
        .get_json(&format!("/runs/{id}/diff?checkpoint=HEAD"))
        .await;
    assert_eq!((code, code_of(&body)), (400, "invalid_parameter"), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_http_diff_apply_and_discard_finish_the_job_as_the_cli_does() {
    let served = Served::start(project_turns()).await;
    let (id, repo) = project_run(&served).await;
    let (code, applied) = served
        .post_json(&format!("/runs/{id}/apply"), json!({}))
        .await;
    assert_eq!(code, 200, "{applied}");
    assert_eq!(applied["files"], json!(["hello.txt", "src/lib.txt"]));
    assert_eq!(applied["commit"], Value::Null);
    assert!(
        std::fs::read_to_string(repo.join("hello.txt"))
            .expect("applied")
            .starts_with("Hello <script>")
    );
    let status = git(&repo, &["status", "--porcelain"]);
    assert!(status.contains("?? hello.txt"), "uncommitted: {status}");
    assert!(status.contains(" M src/lib.txt"), "uncommitted: {status}");

    // Applied again over its own uncommitted changes: refused, nothing written.
    let (code, body) = served
        .post_json(&format!("/runs/{id}/apply"), json!({"commit": true}))
        .await;
    assert_eq!((code, code_of(&body)), (409, "apply_refused"), "{body}");
    let (code, body) = served
        .post_json(&format!("/runs/{id}/apply"), json!({"commit": "yes"}))
        .await;
    assert_eq!((code, code_of(&body)), (422, "invalid_request"), "{body}");

    let (code, body) = served
        .post_json(&format!("/runs/{id}/discard"), json!({}))
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["discarded"], true);
    let branches = git(&repo, &["branch", "--list", "fabric/*"]);
    assert!(branches.is_empty(), "the branch is gone: {branches}");
    let (code, body) = served.get_json(&format!("/runs/{id}/diff")).await;
    assert_eq!((code, code_of(&body)), (409, "workspace_gone"), "{body}");
    // Discarding what is gone is no error, as `fabric discard` says.
    let (code, _) = served
        .post_json(&format!("/runs/{id}/discard"), json!({}))
        .await;
    assert_eq!(code, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_http_diff_refuses_runs_not_ended_unversioned_or_unknown() {
    let mut turns = asking_turns();
    turns.push(Turn::tool_call("list_files", json!({})));
    turns.push(finish("looked"));
    let served = Served::with(
        Scenario::new(turns),
        Options {
            config: ASKER,
            ..Options::default()
        },
    )
    .await;
    // A run that waits for an answer has not ended: its changes are not final.
    let (code, body) = served
        .post_json("/runs", json!({"prompt": "pick one", "pack": "asker"}))
        .await;
    assert_eq!(code, 202, "{body}");
    let waiting = body["run_id"].as_str().expect("id").to_owned();
    served.wait_status(&waiting, "input_required").await;
    for (method, path) in [("GET", "diff"), ("POST", "apply"), ("POST", "discard")] {
        let url = format!("/runs/{waiting}/{path}");
        let (code, body) = if method == "GET" {
            served.get_json(&url).await
        } else {
            served.post_json(&url, json!({})).await
        };
        assert_eq!(
            (code, code_of(&body)),
            (409, "run_not_ended"),
            "{path}: {body}"
        );
        assert!(body.to_string().contains("has not ended"), "{body}");
    }
    let (code, body) = served
        .post_json(
            &format!("/runs/{waiting}/input"),
            json!({"answer": "SQLite"}),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    served.wait_status(&waiting, "completed").await;

    // A scratch run has no branch.
    for (method, path) in [("GET", "diff"), ("POST", "apply"), ("POST", "discard")] {
        let url = format!("/runs/{waiting}/{path}");
        let (code, body) = if method == "GET" {
            served.get_json(&url).await
        } else {
            served.post_json(&url, json!({})).await
        };
        assert_eq!(
            (code, code_of(&body)),
            (409, "not_versioned"),
            "{path}: {body}"
        );
        assert!(body.to_string().contains("scratch workspace"), "{body}");
    }
    let events = served.runlog(&waiting);
    assert!(
        of_kind(&events, "workspace").is_empty(),
        "{:?}",
        kinds(&events)
    );

    // No such run; no run id.
    let (code, body) = served
        .get_json("/runs/20260101-000000-000-abcdef00/diff")
        .await;
    assert_eq!((code, code_of(&body)), (404, "run_not_found"), "{body}");
    let (code, body) = served
        .post_json("/runs/20260101-000000-000-abcdef00/apply", json!({}))
        .await;
    assert_eq!((code, code_of(&body)), (404, "run_not_found"), "{body}");
    let (code, body) = served.get_json("/runs/..%2Fx/diff").await;
    assert_eq!((code, code_of(&body)), (400, "invalid_run_id"), "{body}");
}
