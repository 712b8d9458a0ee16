//! Conversations (issue #42, item 1): `fabric run --continue RUN_ID` and `--fork RUN_ID`
//! go on with an earlier run's conversation, byte for byte as its model last saw it; a
//! project run on the same branch (continue) or a new one from its head (fork); the link in
//! `run_start.continues`, the lineage in `logs show`, replay, and the refusals.

use fabric_test_support::Turn;
use serde_json::{Value, json};
use std::path::PathBuf;

use super::fixture::{Fixture, of_kind};
use super::projects::{git, user_repo};

pub(super) fn finish(summary: &str) -> Turn {
    Turn::tool_call(
        "finish_task",
        json!({"summary": summary, "artifacts": [], "next_steps": [], "notes": ""}),
    )
}

/// A first run that writes `hello.txt` and finishes, then a second that reads it and
/// finishes.
fn two_runs() -> Vec<Turn> {
    vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "hello.txt", "content": "Hello World\n"}),
        ),
        finish("wrote hello.txt"),
        Turn::tool_call("read_file", json!({"path": "hello.txt"})),
        finish("read hello.txt"),
    ]
}

fn run_id(result: &Value) -> String {
    result["_meta"]["run_id"]
        .as_str()
        .expect("run id")
        .to_owned()
}

fn messages(request: &Value) -> Vec<Value> {
    request["messages"].as_array().expect("messages").clone()
}

/// The second run's first request carries the first run's last request byte for byte, then
/// the answer that ended it (its `finish_task` call and the accepted payload as its result),
/// then the new prompt.
fn assert_inherits(requests: &[Value], last_of_first: usize, prompt: &str) {
    let earlier = messages(&requests[last_of_first]);
    let later = messages(&requests[last_of_first + 1]);
    assert_eq!(
        serde_json::to_string(&later[..earlier.len()]).expect("json"),
        serde_json::to_string(&earlier).expect("json"),
        "the inherited conversation is the earlier run's, byte for byte"
    );
    // The answer that ended it: its calls, each answered in order, `finish_task` last.
    let answer = &later[earlier.len()];
    assert_eq!(answer["role"], "assistant");
    let calls = answer["tool_calls"].as_array().expect("calls");
    assert_eq!(later.len(), earlier.len() + calls.len() + 2, "{later:#?}");
    for (n, call) in calls.iter().enumerate() {
        let result = &later[earlier.len() + 1 + n];
        assert_eq!(result["role"], "tool");
        assert_eq!(result["tool_call_id"], call["id"]);
    }
    assert_eq!(
        calls.last().expect("a call")["function"]["name"],
        "finish_task"
    );
    let finished = &later[earlier.len() + calls.len()];
    assert!(
        finished["content"]
            .as_str()
            .is_some_and(|c| c.contains("wrote hello.txt")),
        "{finished}"
    );
    assert_eq!(
        later[earlier.len() + calls.len() + 1],
        json!({"role": "user", "content": prompt})
    );
}

/// The first run of [`two_runs`] and the run that continues it, each replayed with no
/// divergence by `run_json` (the continued one with the same inherited conversation, its
/// digest, and the same answers).
async fn first_and_continued(fx: &Fixture) -> (Value, Value) {
    let first = fx.run_json("write hello.txt", &[], 0).await;
    let id = run_id(&first);
    let second = fx
        .run_json("now read it back", &["--continue", &id], 0)
        .await;
    (first, second)
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_a_continued_run_goes_on_with_the_earlier_conversation_and_files() {
    let fx = Fixture::new(two_runs()).await;
    let (first, second) = first_and_continued(&fx).await;
    let id = run_id(&first);
    let requests = fx.requests();
    assert_eq!(requests.len(), 4, "two model calls per run");
    assert_inherits(&requests, 1, "now read it back");
    // A scratch run's files are copied: the file the first run wrote is there.
    let events = fx.runlog(&second);
    let read = &of_kind(&events, "tool_result")[0]["payload"];
    assert_eq!(read["result"], "Hello World\n", "{read}");
    // The link, with the digest of what was inherited.
    let start = &of_kind(&events, "run_start")[0]["payload"];
    let link = &start["continues"];
    assert_eq!(link["run_id"], id.as_str());
    assert_eq!(link["mode"], "continue");
    assert_eq!(link["specialist_id"], "engineering");
    assert_eq!(
        link["messages"], 5,
        "task, write, its result, finish, its result"
    );
    assert_eq!(link["digest"].as_str().map(str::len), Some(64));
    // The first run's own start has none.
    let first_events = fx.runlog(&first);
    let first_start = &of_kind(&first_events, "run_start")[0]["payload"];
    assert!(first_start.get("continues").is_none());
    // `logs show` walks the lineage and shows the conversation's totals.
    let second_id = run_id(&second);
    let shown = fx.fabric(&["logs", "show", &second_id]).await;
    shown.assert_code(0);
    assert!(
        shown.stdout.contains(&format!("continues {id} (continue)")),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains("conversation: 2 runs, 4 steps"),
        "{}",
        shown.stdout
    );
    // `logs list --json` names each run's conversation (its first run).
    let listed = fx.fabric(&["logs", "list", "--json"]).await;
    listed.assert_code(0);
    let runs: Value = serde_json::from_str(listed.stdout.trim()).expect("json");
    let continued = runs
        .as_array()
        .expect("runs")
        .iter()
        .find(|r| r["run_id"] == second_id.as_str())
        .expect("listed");
    assert_eq!(
        continued["conversation"]["first"],
        id.as_str(),
        "{continued}"
    );
    assert_eq!(continued["conversation"]["runs"], 2, "{continued}");
    assert_eq!(continued["conversation"]["steps"], 4, "{continued}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_continue_works_on_the_same_branch_and_fork_on_a_new_one() {
    let turns = vec![
        Turn::tool_call("write_file", json!({"path": "a.txt", "content": "a\n"})),
        finish("wrote hello.txt"),
        // The fork.
        Turn::tool_call("write_file", json!({"path": "b.txt", "content": "b\n"})),
        finish("wrote b"),
        // The continuation.
        Turn::tool_call("write_file", json!({"path": "c.txt", "content": "c\n"})),
        finish("wrote c"),
    ];
    let fx = Fixture::new(turns).await;
    let repo = user_repo(&fx);
    let repo_arg = repo.to_str().expect("utf-8");
    let first = fx.run_json("write a", &["--project", repo_arg], 0).await;
    let id = run_id(&first);
    let branch = format!("fabric/{id}");
    let head = git(&repo, &["rev-parse", &branch]);

    // Fork: a new branch from the first run's head; the first branch does not move.
    let fork = fx.run_json("write b", &["--fork", &id], 0).await;
    let fork_id = run_id(&fork);
    assert_inherits(&fx.requests(), 1, "write b");
    let fork_branch = fork["_meta"]["changes"]["branch"].as_str().expect("branch");
    assert_eq!(fork_branch, format!("fabric/{fork_id}"));
    assert_eq!(
        git(&repo, &["rev-parse", &branch]),
        head,
        "the earlier branch is untouched"
    );
    assert_eq!(git(&repo, &["show", &format!("{fork_branch}:a.txt")]), "a");
    assert_eq!(git(&repo, &["show", &format!("{fork_branch}:b.txt")]), "b");
    let fork_events = fx.runlog(&fork);
    let start = &of_kind(&fork_events, "run_start")[0]["payload"];
    assert_eq!(start["continues"]["mode"], "fork");

    // Continue: on the first run's own branch, from its head.
    let cont = fx.run_json("write c", &["--continue", &id], 0).await;
    let events = fx.runlog(&cont);
    let opened = &of_kind(&events, "workspace")[0]["payload"];
    assert_eq!(opened["branch"], branch.as_str(), "{opened}");
    assert_eq!(opened["owner"], id.as_str());
    assert_eq!(opened["restored_to"], head.as_str());
    let moved = git(&repo, &["rev-parse", &branch]);
    assert_ne!(
        moved, head,
        "the continuation committed on the earlier branch"
    );
    assert_eq!(git(&repo, &["show", &format!("{branch}:c.txt")]), "c");
    assert!(
        std::process::Command::new("git")
            .args(["cat-file", "-e", &format!("{branch}:b.txt")])
            .stderr(std::process::Stdio::null())
            .current_dir(&repo)
            .status()
            .is_ok_and(|s| !s.success()),
        "the fork's work is not on the earlier branch"
    );
    // `fabric diff` of the continued run is the branch's.
    let diff = fx.fabric(&["diff", &run_id(&cont), "--stat"]).await;
    diff.assert_code(0);
    assert!(
        diff.stdout.contains("c.txt") && diff.stdout.contains("a.txt"),
        "{}",
        diff.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_runs_that_cannot_be_continued_are_refused_clearly() {
    let mut turns = vec![Turn::tool_call("list_files", json!({})), finish("done")];
    // A run that stays running for a while.
    turns.push(Turn {
        delay_ms: Some(30_000),
        ..finish("slow")
    });
    let fx = Fixture::new(turns).await;
    let first = fx.run_json("do it", &[], 0).await;
    let id = run_id(&first);

    // An unknown run.
    let unknown = "20200101-000000-000-00000000";
    let run = fx
        .fabric(&["run", "go on", "--continue", unknown, "--json"])
        .await;
    run.assert_code(2);
    let error = run.json();
    assert_eq!(error["error"]["code"], "usage_error");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("no run `{unknown}` to continue"))),
        "{error}"
    );
    // Without `--json`: the same words on stderr.
    let run = fx.fabric(&["run", "go on", "--continue", "nope"]).await;
    run.assert_code(2);
    assert!(
        run.stderr.contains("no run `nope` to continue"),
        "{}",
        run.stderr
    );

    // Another project than the run's (a scratch run).
    let repo = user_repo(&fx);
    let run = fx
        .fabric(&[
            "run",
            "go on",
            "--continue",
            &id,
            "--project",
            repo.to_str().expect("utf-8"),
        ])
        .await;
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("worked on a scratch workspace, not on project"),
        "{}",
        run.stderr
    );

    // Several specialists.
    let run = fx
        .fabric(&[
            "run",
            "go on",
            "--continue",
            &id,
            "--pack",
            "engineering,research",
        ])
        .await;
    run.assert_code(2);
    assert!(
        run.stderr.contains("goes on with one specialist"),
        "{}",
        run.stderr
    );

    // A run still running.
    let mut slow = fx
        .command(&["run", "slowly", "--pack", "engineering", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start");
    let runs = fx.workspace_root().join("runs");
    let running = wait_for_new_run(&runs, &id).await;
    let run = fx.fabric(&["run", "go on", "--continue", &running]).await;
    run.assert_code(2);
    assert!(
        run.stderr
            .contains(&format!("run `{running}` has not ended")),
        "{}",
        run.stderr
    );
    let _ = slow.start_kill();
    let _ = slow.wait().await;

    // A run whose runlog cannot be read back.
    let broken = runs.join(&id).join("runlog.jsonl");
    std::fs::write(&broken, "").expect("empty the runlog");
    let run = fx.fabric(&["run", "go on", "--continue", &id]).await;
    run.assert_code(2);
    assert!(
        run.stderr
            .contains(&format!("run `{id}` cannot be continued")),
        "{}",
        run.stderr
    );
}

/// The id of the run in `runs` other than `known`, once its runlog has its start.
async fn wait_for_new_run(runs: &std::path::Path, known: &str) -> String {
    for _ in 0..200 {
        let found: Option<PathBuf> = std::fs::read_dir(runs)
            .expect("runs")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n != known));
        if let Some(dir) = found
            && std::fs::read_to_string(dir.join("runlog.jsonl"))
                .is_ok_and(|t| t.contains("llm_request"))
        {
            return dir
                .file_name()
                .and_then(|n| n.to_str())
                .expect("name")
                .to_owned();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the slow run did not start");
}

/// The runs of [`two_runs`], then one that stays running for a few seconds.
fn served_turns() -> Vec<Turn> {
    let mut turns = two_runs();
    turns.push(Turn {
        delay_ms: Some(4_000),
        ..Turn::tool_call("list_files", json!({}))
    });
    turns.push(finish("listed"));
    // A run on a project, started from the command line.
    turns.push(list_and_finish("looked"));
    turns
}

/// The first run of [`two_runs`] through `POST /run`; its id.
async fn first_over_http(served: &super::serve_fixture::Served) -> String {
    let (code, first) = served
        .post_json(
            "/run",
            json!({"prompt": "write hello.txt", "pack": "engineering"}),
        )
        .await;
    assert_eq!(code, 200, "{first}");
    run_id(&first)
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_post_runs_with_continues_goes_on_with_the_conversation() {
    use super::serve_fixture::Served;
    let served = Served::start(served_turns()).await;
    let id = first_over_http(&served).await;
    let (code, accepted) = served
        .post_json(
            "/runs",
            json!({"prompt": "now read it back", "continues": {"run_id": id}}),
        )
        .await;
    assert_eq!(code, 202, "{accepted}");
    let second = accepted["run_id"].as_str().expect("id").to_owned();
    served.wait_status(&second, "completed").await;
    assert_inherits(&served.fx.requests(), 1, "now read it back");
    let events = served.runlog(&second);
    let start = &of_kind(&events, "run_start")[0]["payload"];
    assert_eq!(start["continues"]["run_id"], id.as_str());
    let recruitment = &of_kind(&events, "recruitment")[0]["payload"];
    assert_eq!(recruitment["specialist_id"], "engineering");
    assert_eq!(
        recruitment["reason"],
        format!("the specialist of run {id}, whose conversation this run continues")
    );

    // The refusals, each with its status and code.
    let refused = |body: Value| {
        let served = &served;
        async move { served.post_json("/runs", body).await }
    };
    let (code, body) =
        refused(json!({"prompt": "x", "continues": {"run_id": "20200101-000000-000-00000000"}}))
            .await;
    assert_eq!(
        (code, &body["error"]["code"]),
        (404, &json!("run_not_found")),
        "{body}"
    );
    let (code, body) = refused(json!({"prompt": "x", "continues": {"run_id": ""}})).await;
    assert_eq!(
        (code, &body["error"]["code"]),
        (400, &json!("invalid_run_id")),
        "{body}"
    );
    let (code, body) =
        refused(json!({"prompt": "x", "continues": {"run_id": id, "fork": 1}})).await;
    assert_eq!(code, 422, "a fork flag that is no boolean: {body}");
    let (code, body) = refused(
        json!({"prompt": "x", "pack": "engineering,research", "continues": {"run_id": id}}),
    )
    .await;
    assert_eq!(
        (code, &body["error"]["code"]),
        (422, &json!("cannot_continue")),
        "{body}"
    );
    let running = served.start_run("list slowly").await;
    let (code, body) = refused(json!({"prompt": "x", "continues": {"run_id": running}})).await;
    assert_eq!(
        (code, &body["error"]["code"]),
        (409, &json!("run_not_ended")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("has not ended")),
        "{body}"
    );
    served.wait_status(&running, "completed").await;

    // A project run made on the command line is held to the server's `project_roots` (none
    // here) when a client continues it, as a named project would be.
    let repo = user_repo(&served.fx);
    let cli = served
        .fx
        .fabric(&[
            "run",
            "look",
            "--pack",
            "engineering",
            "--json",
            "--project",
            repo.to_str().expect("utf-8"),
        ])
        .await;
    cli.assert_code(0);
    let on_project = run_id(&cli.json());
    let (code, body) = refused(json!({"prompt": "x", "continues": {"run_id": on_project}})).await;
    assert_eq!(
        (code, &body["error"]["code"]),
        (422, &json!("invalid_project")),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_the_mcp_run_task_continues_a_run() {
    let fx = Fixture::new(two_runs()).await;
    let first = fx
        .mcp_calls(&[(
            "run_task",
            json!({"prompt": "write hello.txt", "specialist": "engineering"}),
        )])
        .await;
    let id = first[0]["structuredContent"]["_meta"]["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{first:?}"))
        .to_owned();
    let second = fx
        .mcp_calls(&[(
            "run_task",
            json!({"prompt": "now read it back", "continues": {"run_id": id}}),
        )])
        .await;
    let meta = &second[0]["structuredContent"]["_meta"];
    assert_eq!(meta["status"], "completed", "{second:?}");
    assert_inherits(&fx.requests(), 1, "now read it back");
    // An unknown run is a tool error with the service's words.
    let refused = fx
        .mcp_calls(&[(
            "run_task",
            json!({"prompt": "x", "continues": {"run_id": "20200101-000000-000-00000000"}}),
        )])
        .await;
    assert_eq!(refused[0]["isError"], true, "{refused:?}");
    assert!(
        refused[0]
            .to_string()
            .contains("no run `20200101-000000-000-00000000` to continue"),
        "{refused:?}"
    );
}

/// `fabric serve` with the token, over [`two_runs`].
async fn served_with_token() -> super::serve_fixture::Served {
    super::serve_fixture::Served::with(
        fabric_test_support::Scenario::new(two_runs()),
        super::serve_fixture::Options {
            auth: true,
            ..Default::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_an_a2a_message_naming_an_earlier_task_continues_its_run() {
    use super::a2a_server::rpc;
    let served = served_with_token().await;
    let message = |text: &str, context: &str, reference: Option<&str>| {
        let mut m = json!({"messageId": text, "role": "ROLE_USER", "contextId": context,
            "parts": [{"text": text}]});
        if let Some(task) = reference {
            m["referenceTaskIds"] = json!([task]);
        }
        json!({"message": m})
    };
    let first = rpc(
        &served,
        "SendMessage",
        message("write hello.txt", "conv-42", None),
    )
    .await;
    let first_id = first["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{first}"))
        .to_owned();
    // Another context: refused, naming the task's own.
    let other = rpc(
        &served,
        "SendMessage",
        message("go on", "elsewhere", Some(&first_id)),
    )
    .await;
    assert_eq!(other["error"]["code"], -32602, "{other}");
    assert!(
        other["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("its context is `conv-42`")),
        "{other}"
    );
    let second = rpc(
        &served,
        "SendMessage",
        message("now read it back", "conv-42", Some(&first_id)),
    )
    .await;
    let task = &second["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{second}");
    assert_eq!(task["contextId"], "conv-42");
    assert_inherits(&served.fx.requests(), 1, "now read it back");
    let events = served.runlog(task["id"].as_str().expect("id"));
    let start = &of_kind(&events, "run_start")[0]["payload"];
    assert_eq!(start["continues"]["run_id"], first_id.as_str());
    assert_eq!(start["context_id"], "conv-42");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_replay_of_a_continued_run_rebuilds_the_same_requests_and_says_when_it_cannot() {
    let fx = Fixture::new(two_runs()).await;
    let (first, second) = first_and_continued(&fx).await;
    let id = run_id(&first);
    let second_id = run_id(&second);
    // Once the earlier runlog says something else, the rebuilt conversation is not the
    // recorded one, and the replay says so.
    let runlog = fx
        .workspace_root()
        .join("runs")
        .join(&id)
        .join("runlog.jsonl");
    let text = std::fs::read_to_string(&runlog).expect("runlog");
    std::fs::write(
        &runlog,
        text.replace("write hello.txt", "write goodbye.txt"),
    )
    .expect("write");
    let replay = fx.fabric(&["replay", &second_id, "--json"]).await;
    replay.assert_code(1);
    let report = replay.json();
    let divergences = report["divergences"].to_string();
    assert!(
        divergences.contains(&format!(
            "the conversation inherited from run `{id}` is not the recorded one"
        )),
        "{report}"
    );
}

/// One answer that lists the files and finishes.
fn list_and_finish(summary: &str) -> Turn {
    Turn {
        tool_calls: vec![
            fabric_test_support::ScriptedCall::new("list_files", json!({})),
            fabric_test_support::ScriptedCall::new(
                "finish_task",
                json!({"summary": summary, "artifacts": [], "next_steps": [], "notes": ""}),
            ),
        ],
        ..Turn::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_a_task_force_continues_the_member_that_ended_it_or_the_one_named() {
    let fx = Fixture::new(vec![
        list_and_finish("engineering done"),
        list_and_finish("wrote hello.txt"),
        list_and_finish("went on"),
        // The parallel task force, then its writer member's continuation.
        list_and_finish("one"),
        list_and_finish("two"),
        list_and_finish("went on"),
    ])
    .await;
    // A second specialist with engineering's finish schema, from the workspace's directory.
    let dir = fx.workspace_root().join("specialists");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("writer.md"),
        "---\ndescription: Writes things.\ntools: [list_files, read_file, write_file]\n---\nYou write.\n",
    )
    .expect("write the specialist");
    // Sequential: the last member that worked goes on, its hand-over included.
    let id = fabric_json(&fx, &["run", "look around", "--pack", "engineering,writer"]).await;
    let go_on = fabric_json(&fx, &["run", "go on", "--continue", &id]).await;
    let events = fx.runlog(&json!({"_meta": {"run_id": go_on}}));
    assert_eq!(
        of_kind(&events, "recruitment")[0]["payload"]["specialist_id"],
        "writer"
    );
    assert_eq!(
        of_kind(&events, "run_start")[0]["payload"]["continues"]["specialist_id"],
        "writer"
    );
    assert_inherits(&fx.requests(), 1, "go on");
    let inherited = messages(&fx.requests()[2]);
    assert!(
        inherited[2]["content"]
            .as_str()
            .is_some_and(|c| c.contains("<<<HANDOFF from engineering>>>")),
        "{inherited:#?}"
    );

    // Parallel: the members' conversations are separate; one must be named.
    fx.append_config("task_force_mode: parallel\n");
    let id = fabric_json(&fx, &["run", "look around", "--pack", "engineering,writer"]).await;
    let refused = fx.fabric(&["run", "go on", "--continue", &id]).await;
    refused.assert_code(2);
    assert!(
        refused
            .stderr
            .contains("was a parallel task force (engineering, writer)"),
        "{}",
        refused.stderr
    );
    let named = fabric_json(
        &fx,
        &["run", "go on", "--continue", &id, "--pack", "writer"],
    )
    .await;
    let events = fx.runlog(&json!({"_meta": {"run_id": named}}));
    assert_eq!(
        of_kind(&events, "run_start")[0]["payload"]["continues"]["specialist_id"],
        "writer"
    );
}

/// `fabric ARGS --json`, which must complete; its run's id (a completed single-specialist
/// run is replayed too).
async fn fabric_json(fx: &Fixture, args: &[&str]) -> String {
    let mut args = args.to_vec();
    args.push("--json");
    let run = fx.fabric(&args).await;
    run.assert_code(0);
    let result = run.json();
    fx.assert_replays(&result).await;
    run_id(&result)
}

#[cfg_attr(
    fabric_no_browser,
    ignore = "needs Chromium, chromedriver and Selenium: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_42_the_viewer_links_a_continued_run_to_the_run_it_continues() {
    let Some((python, _one)) = super::web_ui::browser().await else {
        return;
    };
    let served = super::serve_fixture::Served::start(two_runs()).await;
    let id = first_over_http(&served).await;
    let (code, second) = served
        .post_json(
            "/run",
            json!({"prompt": "now read it back", "continues": {"run_id": id}}),
        )
        .await;
    assert_eq!(code, 200, "{second}");
    let seen = super::web_ui::browse(
        &python,
        &served,
        "continued",
        &["--run-id", &run_id(&second)],
    )
    .await;
    assert_eq!(seen["earlier"], id.as_str(), "{seen}");
    let header = seen["header"].as_str().unwrap_or_default();
    assert!(header.contains("Continues the conversation of"), "{seen}");
    let row = seen["row"].as_str().unwrap_or_default();
    assert!(row.contains("(5 messages inherited)"), "{seen}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_42_a_continued_run_killed_and_resumed_keeps_its_inherited_conversation() {
    let mut turns = two_runs();
    // The continuation's first answer comes slowly: its process is killed meanwhile.
    turns[2].delay_ms = Some(5_000);
    turns.insert(
        3,
        Turn::tool_call("read_file", json!({"path": "hello.txt"})),
    );
    let fx = Fixture::new(turns).await;
    let first = fx.run_json("write hello.txt", &[], 0).await;
    let id = run_id(&first);
    let mut child = fx
        .command(&["run", "now read it back", "--continue", &id, "--json"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start");
    let runs = fx.workspace_root().join("runs");
    let second = wait_for_new_run(&runs, &id).await;
    child.start_kill().expect("SIGKILL");
    child.wait().await.expect("wait");
    let resumed = fx.fabric(&["resume", &second, "--json"]).await;
    resumed.assert_code(0);
    let requests = fx.requests();
    assert_inherits(&requests, 1, "now read it back");
    assert_eq!(
        serde_json::to_string(&messages(&requests[3])).expect("json"),
        serde_json::to_string(&messages(&requests[2])).expect("json"),
        "the resumed run asks with the same inherited conversation"
    );
    let events = super::fixture::read_runlog(&runs.join(&second).join("runlog.jsonl"));
    assert_eq!(of_kind(&events, "run_resumed").len(), 1);
    assert_eq!(of_kind(&events, "run_complete").len(), 1);
}

/// The same through the official Python A2A SDK: `reference_task_ids` in the task's context.
#[cfg_attr(
    fabric_no_a2a,
    ignore = "needs the Python A2A SDK: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_42_the_python_a2a_sdk_continues_a_task_by_reference() {
    use super::serve_fixture::TOKEN;
    let served = served_with_token().await;
    let output =
        super::a2a_server::python("tests/a2a/continue_task.py", &[&served.base, TOKEN]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let first = seen["first"]["id"].as_str().expect("first id");
    let second = &seen["second"];
    assert_eq!(second["status"]["state"], "TASK_STATE_COMPLETED", "{seen}");
    assert_eq!(second["contextId"], "sdk-conv", "{seen}");
    assert_inherits(&served.fx.requests(), 1, "now read it back");
    let events = served.runlog(second["id"].as_str().expect("id"));
    let start = &of_kind(&events, "run_start")[0]["payload"];
    assert_eq!(start["continues"]["run_id"], first);
}
