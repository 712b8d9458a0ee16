//! Issue #42, item 7: the viewer for a person at work. Over HTTP, a project run's diff (per
//! file, per checkpoint), `apply` and `discard`, and their refusals; in Chromium, the answer
//! box, the approval buttons, the steering box and a project run's diff applied from the
//! page (`tests/web/web_ui.py`, cases `answer`, `approve`, `deny`, `steer`, `project`).

use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};

use super::conversations::finish;
use super::fixture::{kinds, of_kind};
use super::interactive::{ASKER, asking_turns};
use super::projects::{git, user_repo};
use super::serve_fixture::{Options, Served};

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

/// The diff, apply and discard of run `id` are each refused 409 with `code`, the message
/// saying `words`.
async fn all_refused(served: &Served, id: &str, code: &str, words: &str) {
    for (method, path) in [("GET", "diff"), ("POST", "apply"), ("POST", "discard")] {
        let url = format!("/runs/{id}/{path}");
        let (status, body) = if method == "GET" {
            served.get_json(&url).await
        } else {
            served.post_json(&url, json!({})).await
        };
        assert_eq!((status, code_of(&body)), (409, code), "{path}: {body}");
        assert!(body.to_string().contains(words), "{body}");
    }
}

/// `fabric serve` with the asking specialist, over `turns`.
async fn served_asker(turns: Vec<Turn>) -> Served {
    Served::with(
        Scenario::new(turns),
        Options {
            config: ASKER,
            ..Options::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_http_diff_refuses_runs_not_ended_unversioned_or_unknown() {
    let mut turns = asking_turns();
    turns.push(Turn::tool_call("list_files", json!({})));
    turns.push(finish("looked"));
    let served = served_asker(turns).await;
    // A run that waits for an answer has not ended: its changes are not final.
    let (code, body) = served
        .post_json("/runs", json!({"prompt": "pick one", "pack": "asker"}))
        .await;
    assert_eq!(code, 202, "{body}");
    let waiting = body["run_id"].as_str().expect("id").to_owned();
    served.wait_status(&waiting, "input_required").await;
    all_refused(&served, &waiting, "run_not_ended", "has not ended").await;
    let (code, body) = served
        .post_json(
            &format!("/runs/{waiting}/input"),
            json!({"answer": "SQLite"}),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    served.wait_status(&waiting, "completed").await;

    // A scratch run has no branch.
    all_refused(&served, &waiting, "not_versioned", "scratch workspace").await;
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

    // The three are in the OpenAPI document, with their refusals.
    let (code, doc) = served.get_json("/openapi.json").await;
    assert_eq!(code, 200);
    for (path, method, statuses) in [
        (
            "/runs/{id}/diff",
            "get",
            &["200", "400", "401", "404", "409"][..],
        ),
        (
            "/runs/{id}/apply",
            "post",
            &["200", "401", "404", "409", "422"][..],
        ),
        (
            "/runs/{id}/discard",
            "post",
            &["200", "401", "404", "409"][..],
        ),
    ] {
        let op = &doc["paths"][path][method];
        for status in statuses {
            assert!(
                op["responses"][status].is_object(),
                "{method} {path} {status}"
            );
        }
    }
    let checkpoint = &doc["paths"]["/runs/{id}/diff"]["get"]["parameters"];
    assert!(
        checkpoint.to_string().contains("[0-9a-fA-F]{7,64}"),
        "{checkpoint}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_viewer_a_live_stream_ends_at_input_required_with_no_made_up_failure() {
    // A slow first step, so the stream is followed live when the run comes to wait.
    let mut slow = Turn::tool_call("list_files", json!({}));
    slow.delay_ms = Some(1_500);
    let mut turns = vec![slow];
    turns.extend(asking_turns());
    let served = served_asker(turns).await;
    let id = started(&served, "look, then pick one", "asker").await;
    let mut reader = served.follow(&id, None).await;
    let frames = reader.rest().await;
    let kinds: Vec<String> = frames
        .iter()
        .filter(|f| f.id.is_some())
        .map(|f| f.json()["kind"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        kinds.contains(&"tool_result".to_owned()),
        "followed live: {kinds:?}"
    );
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("input_required"),
        "the stream of a waiting run ends at its question: {kinds:?}"
    );
    assert!(!kinds.contains(&"run_failed".to_owned()), "{kinds:?}");
    served.wait_status(&id, "input_required").await;
}

// ---- in Chromium -----------------------------------------------------------------------

/// A specialist whose every write waits for approval.
const GUARDED: &str = "specialists:\n  guarded:\n    description: Writes only what a person approves\n    system_prompt: Write the files asked for.\n    tools: [write_file, list_files]\n    approval:\n      mode: untrusted\n";

/// Starts a run of `pack` through `POST /runs` and returns its id.
async fn started(served: &Served, prompt: &str, pack: &str) -> String {
    let (code, body) = served
        .post_json("/runs", json!({"prompt": prompt, "pack": pack}))
        .await;
    assert_eq!(code, 202, "{body}");
    body["run_id"].as_str().expect("id").to_owned()
}

/// The user messages of every request the model got.
fn user_messages(served: &Served) -> Vec<String> {
    served
        .fx
        .requests()
        .iter()
        .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}

fn text(seen: &Value, pointer: &str) -> String {
    seen.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

#[cfg_attr(
    fabric_no_browser,
    ignore = "needs Chromium, chromedriver and Selenium: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_42_viewer_answers_a_question_in_the_answer_box_and_the_run_completes() {
    let Some((python, _one)) = super::web_ui::browser().await else {
        return;
    };
    let served = served_asker(asking_turns()).await;
    let id = started(&served, "pick one", "asker").await;
    served.wait_status(&id, "input_required").await;
    let seen = super::web_ui::browse(
        &python,
        &served,
        "answer",
        &["--run-id", &id, "--text", "PostgreSQL"],
    )
    .await;
    assert_eq!(seen["asked"]["question"], "Which database?", "{seen}");
    assert_eq!(seen["asked"]["choices"], json!(["SQLite", "PostgreSQL"]));
    assert_eq!(seen["asked"]["status"], "input_required");
    assert!(
        text(&seen, "/asked/timeline").contains("Which database?"),
        "{seen}"
    );
    // The empty answer's refusal, in the server's words.
    assert!(
        text(&seen, "/refused").contains("must have 1 to 16000"),
        "{seen}"
    );
    assert_eq!(seen["shown"]["status"], "completed", "{seen}");
    assert_eq!(seen["shown"]["card_hidden"], true);
    let answered = text(&seen, "/shown/answered");
    assert!(
        answered.contains("PostgreSQL") && answered.contains("http"),
        "{seen}"
    );
    assert!(
        text(&seen, "/shown/result").contains("Chose as told"),
        "{seen}"
    );
    // The stream ended at the question, and the page followed the run going on.
    let states = seen["shown"]["states"].to_string();
    assert!(states.contains("waiting"), "{states}");

    let events = served.runlog(&id);
    let answer = &of_kind(&events, "input_answered")[0]["payload"];
    assert_eq!(
        (&answer["answer"], &answer["by"]),
        (&json!("PostgreSQL"), &json!("http"))
    );
    let requests = served.fx.requests();
    let tool = super::fixture::tool_messages(requests.last().expect("a request"));
    assert!(tool.iter().any(|m| m.contains("PostgreSQL")), "{tool:?}");
}

#[cfg_attr(
    fabric_no_browser,
    ignore = "needs Chromium, chromedriver and Selenium: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_42_viewer_approves_and_denies_with_a_reason_from_the_page() {
    let Some((python, _one)) = super::web_ui::browser().await else {
        return;
    };
    let write = |name: &str| Turn::tool_call("write_file", json!({"path": name, "content": "x"}));
    let turns = vec![
        write("a.txt"),
        write("b.txt"),
        write("c.txt"),
        write("d.txt"),
        finish("wrote what was approved"),
    ];
    let served = Served::with(
        Scenario::new(turns),
        Options {
            config: GUARDED,
            ..Options::default()
        },
    )
    .await;
    let id = started(&served, "write four files", "guarded").await;
    served.wait_status(&id, "input_required").await;
    let reason = "not a.txt, write b.txt first";
    let seen = super::web_ui::browse(
        &python,
        &served,
        "approve",
        &["--run-id", &id, "--text", reason],
    )
    .await;
    assert_eq!(seen["asked"]["tool"], "write_file", "{seen}");
    assert!(text(&seen, "/asked/args").contains("a.txt"), "{seen}");
    assert!(text(&seen, "/second").contains("b.txt"), "{seen}");
    assert!(text(&seen, "/third").contains("c.txt"), "{seen}");
    assert_eq!(seen["shown"]["status"], "completed", "{seen}");
    let answers = seen["shown"]["answers"].to_string();
    assert!(
        answers.contains("denied") && answers.contains(reason),
        "{answers}"
    );
    assert!(
        answers.contains("approved for the rest of the run"),
        "{answers}"
    );

    let events = served.runlog(&id);
    let decisions: Vec<&Value> = of_kind(&events, "input_answered")
        .iter()
        .map(|e| &e["payload"]["decision"])
        .collect();
    assert_eq!(
        decisions,
        [&json!("deny"), &json!("approve"), &json!("approve_for_run")]
    );
    assert_eq!(
        of_kind(&events, "input_required").len(),
        3,
        "d.txt is not asked about"
    );
    let workspace = of_kind(&events, "run_start")[0]["payload"]["workspace"]
        .as_str()
        .map(std::path::PathBuf::from)
        .expect("workspace");
    assert!(!workspace.join("a.txt").exists(), "denied");
    for name in ["b.txt", "c.txt", "d.txt"] {
        assert!(workspace.join(name).exists(), "{name} approved");
    }
    let tool: Vec<String> = served
        .fx
        .requests()
        .iter()
        .flat_map(super::fixture::tool_messages)
        .collect();
    assert!(
        tool.iter().any(|m| m.contains(&format!(
            "a person denied this call of `write_file`: {reason}"
        ))),
        "the model got the reason: {tool:?}"
    );
}

#[cfg_attr(
    fabric_no_browser,
    ignore = "needs Chromium, chromedriver and Selenium: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_42_viewer_steering_box_reaches_the_model_at_its_next_step() {
    let Some((python, _one)) = super::web_ui::browser().await else {
        return;
    };
    // Slow steps, so the page is open while the run works.
    // (Arguments alternate: the same call thrice in a row would be a loop.)
    let slow = |args: Value| {
        let mut turn = Turn::tool_call("list_files", args);
        turn.delay_ms = Some(2_500);
        turn
    };
    let turns = vec![
        slow(json!({})),
        slow(json!({"path": "."})),
        slow(json!({})),
        slow(json!({"path": "."})),
        finish("looked"),
    ];
    let served = served_asker(turns).await;
    let id = started(&served, "look around slowly", "asker").await;
    let said = "also check the tests <b>now</b>";
    let seen = super::web_ui::browse(
        &python,
        &served,
        "steer",
        &["--run-id", &id, "--text", said],
    )
    .await;
    assert!(text(&seen, "/sent").starts_with("Sent"), "{seen}");
    assert_eq!(seen["shown"]["status"], "completed", "{seen}");
    assert_eq!(
        seen["shown"]["steer_hidden"], true,
        "no steering an ended run"
    );
    assert!(seen["shown"]["said"].to_string().contains(said), "{seen}");

    let events = served.runlog(&id);
    let message = of_kind(&events, "user_message");
    assert_eq!(message.len(), 1, "{:?}", kinds(&events));
    assert_eq!(message[0]["payload"]["text"], said);
    assert_eq!(message[0]["payload"]["by"], "http");
    assert!(
        user_messages(&served).iter().any(|m| m == said),
        "the model's next request carries it"
    );
}

#[cfg_attr(
    fabric_no_browser,
    ignore = "needs Chromium, chromedriver and Selenium: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_42_viewer_shows_a_project_runs_diff_per_file_and_applies_it() {
    let Some((python, _one)) = super::web_ui::browser().await else {
        return;
    };
    let served = Served::start(project_turns()).await;
    let (id, repo) = project_run(&served).await;
    let seen = super::web_ui::browse(&python, &served, "project", &["--run-id", &id]).await;
    let where_ = text(&seen, "/whole/where");
    assert!(where_.contains(&format!("fabric/{id}")), "{seen}");
    let files = seen["whole"]["files"].as_array().expect("files");
    let paths: Vec<&str> = files.iter().filter_map(|f| f["path"].as_str()).collect();
    assert_eq!(paths, ["hello.txt", "src/lib.txt"], "{seen}");
    // Hostile text shown as written, never run.
    assert!(
        files[0]["added"]
            .to_string()
            .contains("+Hello <script>window.__xss=1</script>"),
        "{seen}"
    );
    assert_eq!(seen["xss"], Value::Null);
    assert!(files[1]["added"].to_string().contains("+three"), "{seen}");
    let timeline = seen["whole"]["timeline"].to_string();
    assert!(timeline.contains("branch"), "{timeline}");
    assert!(timeline.contains("checkpoint"), "{timeline}");
    // The second checkpoint alone.
    let paths: Vec<&str> = seen["checkpoint"]["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert_eq!(paths, ["src/lib.txt"], "{seen}");
    // Applied from the page: the files are in the repository's working tree, uncommitted.
    assert!(
        text(&seen, "/applied").contains("Applied 2 file(s)"),
        "{seen}"
    );
    assert!(
        std::fs::read_to_string(repo.join("hello.txt"))
            .expect("applied")
            .starts_with("Hello <script>")
    );
    let status = git(&repo, &["status", "--porcelain"]);
    assert!(status.contains("?? hello.txt"), "{status}");
}
