//! `project` from outside the machine (issue #39, ADR-090): a token holder could name any
//! directory the server can read (its own secrets, `/etc`) as `project` over HTTP, the MCP
//! server's `run_task` or A2A, and read it back from the run's copy. Now a `project` is taken
//! only inside `server.project_roots`, its real path resolved (symbolic links, `..`), and
//! refused with 422 `invalid_project` (MCP: a tool error; A2A: invalid params) otherwise;
//! none is allowed by default. `fabric run --project` keeps taking any directory.

use fabric_test_support::Turn;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

use super::a2a_server::{rpc, wait_ended};
use super::fixture::Fixture;
use super::projects::git;
use super::serve_fixture::{Options, Served};

fn turns() -> Vec<Turn> {
    let one = || {
        [
            Turn::tool_call(
                "write_file",
                json!({"path": "hello.txt", "content": "Hello\n"}),
            ),
            Turn::tool_call(
                "finish_task",
                json!({"summary": "Added hello.txt", "artifacts": ["hello.txt"]}),
            ),
        ]
    };
    one().into_iter().chain(one()).collect()
}

/// The fixture's directories: `allowed/repo` (a repository), `secrets/` (a file the server
/// can read), `allowed/link` → `secrets`.
struct Dirs {
    allowed: PathBuf,
    repo: PathBuf,
    secrets: PathBuf,
    link: PathBuf,
}

fn dirs(fx: &Fixture) -> Dirs {
    let allowed = fx.dir.path().join("allowed");
    let repo = allowed.join("repo");
    let secrets = fx.dir.path().join("secrets");
    std::fs::create_dir_all(&repo).expect("mkdir");
    std::fs::create_dir_all(&secrets).expect("mkdir");
    std::fs::write(secrets.join("token.txt"), "SECRET-TOKEN\n").expect("write");
    let link = allowed.join("link");
    std::os::unix::fs::symlink(&secrets, &link).expect("symlink");
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["commit", "-qm", "start", "--allow-empty"]);
    Dirs {
        allowed,
        repo,
        secrets,
        link,
    }
}

/// Every way out of `allowed/`: a directory outside, `..` from the root and from inside
/// it, a symbolic link inside it leading out, `/etc`.
fn ways_out(d: &Dirs) -> Vec<String> {
    [
        d.secrets.clone(),
        d.allowed.join("../secrets"),
        d.repo.join("../../secrets"),
        d.link.clone(),
        PathBuf::from("/etc"),
    ]
    .iter()
    .map(|p| p.display().to_string())
    .collect()
}

/// A fixture whose config allows `allowed/` (or nothing, with `roots: false`), and its dirs.
async fn fixture(roots: bool) -> (Fixture, Dirs) {
    let fx = Fixture::new(turns()).await;
    let d = dirs(&fx);
    if roots {
        fx.append_config(&format!(
            "server:\n  project_roots: [{}]\n",
            d.allowed.display()
        ));
    }
    (fx, d)
}

/// No file of `secrets/` reached any run's workspace.
fn assert_nothing_copied(fx: &Fixture) {
    let mut stack = vec![fx.workspace_root()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            assert_ne!(
                entry.file_name(),
                "token.txt",
                "the server's secret was copied into {}",
                path.display()
            );
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
}

fn refusal_of(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_39_http_takes_a_project_only_inside_the_roots() {
    let (fx, d) = fixture(true).await;
    let served = Served::on(fx, Options::default()).await;
    for path in ways_out(&d) {
        for endpoint in ["/run", "/runs"] {
            let (code, body) = served
                .post_json(
                    endpoint,
                    json!({"prompt": "copy it", "pack": "engineering", "project": path}),
                )
                .await;
            assert_eq!(code, 422, "{endpoint} {path}: {body}");
            assert_eq!(body["error"]["code"], "invalid_project", "{body}");
            let message = refusal_of(&body);
            assert!(
                message.contains("outside") && message.contains("server.project_roots"),
                "{message}"
            );
        }
    }
    assert_nothing_copied(&served.fx);
    // Inside: accepted, on the repository's real path.
    let (code, body) = served
        .post_json(
            "/run",
            json!({"prompt": "add hello", "pack": "engineering", "project": d.repo.join("../repo")}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["_meta"]["changes"]["files"], json!(["hello.txt"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_39_by_default_no_project_is_taken_over_http() {
    let (fx, d) = fixture(false).await;
    let served = Served::on(fx, Options::default()).await;
    let (code, body) = served
        .post_json(
            "/runs",
            json!({"prompt": "add hello", "pack": "engineering", "project": d.repo}),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_project");
    let message = refusal_of(&body);
    assert!(
        message.contains("`server.project_roots` is empty"),
        "{message}"
    );
    // The command line is not bound by it.
    let run = served
        .fx
        .fabric(&[
            "run",
            "add hello",
            "--pack",
            "engineering",
            "--json",
            "--project",
            d.secrets.to_str().expect("utf-8"),
        ])
        .await;
    run.assert_code(0);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_39_a2a_takes_a_project_only_inside_the_roots() {
    let (fx, d) = fixture(true).await;
    let served = Served::on(
        fx,
        Options {
            auth: true,
            ..Options::default()
        },
    )
    .await;
    let send = |project: String| {
        json!({
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "copy it"}],
                        "metadata": {"specialist": "engineering", "project": project}},
            "configuration": {"returnImmediately": true},
        })
    };
    for path in ways_out(&d) {
        let answer = rpc(&served, "SendMessage", send(path.clone())).await;
        assert_eq!(answer["error"]["code"], -32602, "{path}: {answer}");
        let message = refusal_of(&answer);
        assert!(
            message.contains("outside") && message.contains("server.project_roots"),
            "{message}"
        );
    }
    assert_nothing_copied(&served.fx);
    let answer = rpc(&served, "SendMessage", send(d.repo.display().to_string())).await;
    let id = answer["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned();
    let ended = wait_ended(&served, &id).await;
    assert_eq!(ended["status"]["state"], "TASK_STATE_COMPLETED", "{ended}");
    // It worked in a worktree of the repository.
    let worktree = served.fx.workspace_root().join("worktrees").join(&id);
    assert!(worktree.join("hello.txt").is_file(), "{ended}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_39_mcp_run_task_takes_a_project_only_inside_the_roots() {
    let (fx, d) = fixture(true).await;
    let mut calls: Vec<Value> = ways_out(&d)
        .into_iter()
        .map(|p| json!({"prompt": "copy it", "specialist": "engineering", "project": p}))
        .collect();
    calls.push(json!({"prompt": "add hello", "specialist": "engineering", "project": d.repo}));
    let named: Vec<(&str, Value)> = calls.iter().map(|c| ("run_task", c.clone())).collect();
    let answers = fx.mcp_calls(&named).await;
    let inside = calls.len() - 1;
    for (n, answer) in answers.iter().enumerate() {
        if n == inside {
            let done = &answer["structuredContent"];
            assert_eq!(done["_meta"]["status"], "completed", "{answer}");
            continue;
        }
        assert_eq!(answer["isError"], true, "{}: {answer}", calls[n]);
        let text = answer.to_string();
        assert!(
            text.contains("outside") && text.contains("server.project_roots"),
            "{text}"
        );
    }
    assert_nothing_copied(&fx);
}

/// The roots are resolved as the project is: a root named through a link allows what is
/// under its target.
#[tokio::test(flavor = "multi_thread")]
async fn issue_39_a_root_named_through_a_link_allows_its_real_directory() {
    let fx = Fixture::new(turns()).await;
    let d = dirs(&fx);
    let via = fx.dir.path().join("via");
    std::os::unix::fs::symlink(&d.allowed, &via).expect("symlink");
    fx.append_config(&format!("server:\n  project_roots: [{}]\n", via.display()));
    let served = Served::on(fx, Options::default()).await;
    let (code, body) = served
        .post_json(
            "/run",
            json!({"prompt": "add hello", "pack": "engineering", "project": d.repo}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = served
        .post_json(
            "/run",
            json!({"prompt": "x", "pack": "engineering", "project": Path::new(&via).join("link")}),
        )
        .await;
    assert_eq!(code, 422, "{body}");
}
