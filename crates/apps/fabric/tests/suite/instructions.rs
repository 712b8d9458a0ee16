//! A project's own instructions (issue #43): the repository's `AGENTS.md` files (and
//! `CLAUDE.md` where a directory has none) and the user's own file, in the system prompt of a
//! project run, the same bytes at every step, recorded in `run_start` by path and digest;
//! through the real binary, on a real git repository.

use fabric_test_support::Turn;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

use super::fixture::{Fixture, of_kind};
use super::projects::git;

/// A repository with nested instruction files, committed: the root's `AGENTS.md`, `src`'s
/// `AGENTS.md`, `docs`' `CLAUDE.md` (no `AGENTS.md` there), and nine files to read.
fn repo_with_rules(fx: &Fixture) -> PathBuf {
    let repo = fx.workspace_root().with_file_name("repo");
    for (path, text) in [
        (
            "AGENTS.md",
            "ROOT RULE: run `make check` before you finish.\n",
        ),
        ("src/AGENTS.md", "SRC RULE: never panic in library code.\n"),
        ("docs/CLAUDE.md", "DOCS RULE: one sentence per line.\n"),
        ("vendor/.hidden/AGENTS.md", "HIDDEN RULE\n"),
    ] {
        let file = repo.join(path);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(file, text).expect("write");
    }
    for i in 0..9 {
        std::fs::write(repo.join(format!("f{i}.txt")), format!("file {i}\n")).expect("write");
    }
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "start"]);
    repo
}

/// Nine reads of different files, then the end: ten model requests.
fn ten_steps() -> Vec<Turn> {
    let mut turns: Vec<Turn> = (0..9)
        .map(|i| Turn::tool_call("read_file", json!({"path": format!("f{i}.txt")})))
        .collect();
    turns.push(Turn::tool_call(
        "finish_task",
        json!({"summary": "read them", "artifacts": [], "next_steps": [], "notes": ""}),
    ));
    turns
}

fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .expect("a system message")
        .to_owned()
}

fn sha256(path: &Path) -> String {
    Sha256::digest(std::fs::read(path).expect("read"))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn run_on(fx: &Fixture, repo: &Path) -> Value {
    let repo = repo.to_str().expect("utf-8");
    fx.run_json("read the files", &["--project", repo], 0).await
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_nested_agents_md_files_are_in_the_system_prompt_the_same_bytes_at_every_step() {
    let fx = Fixture::new(ten_steps()).await;
    let repo = repo_with_rules(&fx);
    let user = fx.dir.path().join("xdg/agent-fabric/AGENTS.md");
    std::fs::create_dir_all(user.parent().expect("parent")).expect("mkdir");
    std::fs::write(&user, "USER RULE: answer briefly.\n").expect("write");
    let result = run_on(&fx, &repo).await;

    let requests = fx.requests();
    assert_eq!(requests.len(), 10, "one request a step");
    let first = system_prompt(&requests[0]);
    for (i, request) in requests.iter().enumerate() {
        assert_eq!(
            system_prompt(request),
            first,
            "step {i}: the prefix changed"
        );
    }
    let at = |needle: &str| {
        first
            .find(needle)
            .unwrap_or_else(|| panic!("{needle} not in the system prompt:\n{first}"))
    };
    // The user's file, the root's, then deeper: the nearest speaks last.
    assert!(at("USER RULE") < at("ROOT RULE"));
    assert!(at("ROOT RULE") < at("DOCS RULE") && at("ROOT RULE") < at("SRC RULE"));
    assert!(
        first.contains("--- src/AGENTS.md (files under src/)"),
        "{first}"
    );
    assert!(
        first.contains("--- docs/CLAUDE.md (files under docs/)"),
        "{first}"
    );
    assert!(
        !first.contains("HIDDEN RULE"),
        "hidden directories are not read"
    );

    let events = fx.runlog(&result);
    let start = of_kind(&events, "run_start")[0];
    let files = start["payload"]["instructions"]
        .as_array()
        .expect("run_start.instructions");
    let paths: Vec<&str> = files.iter().filter_map(|f| f["path"].as_str()).collect();
    // The fixture's XDG_CONFIG_HOME is not under $HOME: the user's file is shown whole.
    let user = user.to_str().expect("utf-8");
    assert_eq!(
        paths,
        [user, "AGENTS.md", "docs/CLAUDE.md", "src/AGENTS.md"]
    );
    assert_eq!(files[1]["sha256"], json!(sha256(&repo.join("AGENTS.md"))));
    assert_eq!(files[3]["bytes"], json!(39));
    assert!(files.iter().all(|f| f["included"] == json!(true)));
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_what_does_not_fit_the_budget_is_named_and_a_specialist_may_opt_out() {
    let fx = Fixture::new(ten_steps()).await;
    let repo = repo_with_rules(&fx);
    fx.append_config("instructions:\n  max_bytes: 60\n");
    let result = run_on(&fx, &repo).await;
    let first = system_prompt(&fx.requests()[0]);
    assert!(first.contains("ROOT RULE"), "{first}");
    assert!(
        first.contains(
            "Left out, over the 60-byte budget of instructions: docs/CLAUDE.md, src/AGENTS.md"
        ),
        "{first}"
    );
    let events = fx.runlog(&result);
    let included: Vec<bool> = of_kind(&events, "run_start")[0]["payload"]["instructions"]
        .as_array()
        .expect("instructions")
        .iter()
        .map(|f| f["included"] == json!(true))
        .collect();
    assert_eq!(included, [true, false, false]);

    // The terminal says what the run was given, and what did not fit.
    let fx = Fixture::new(ten_steps()).await;
    let repo = repo_with_rules(&fx);
    fx.append_config("instructions:\n  max_bytes: 60\n");
    let run = fx
        .fabric(&[
            "run",
            "read the files",
            "--pack",
            "engineering",
            "--project",
            repo.to_str().expect("utf-8"),
        ])
        .await;
    run.assert_code(0);
    let screen = format!("{}{}", run.stdout, run.stderr);
    assert!(
        screen.contains(
            "· instructions AGENTS.md (left out, over the budget: docs/CLAUDE.md, src/AGENTS.md)"
        ),
        "{screen}"
    );

    let fx = Fixture::new(ten_steps()).await;
    let repo = repo_with_rules(&fx);
    fx.append_config("specialists:\n  engineering:\n    project_instructions: false\n");
    run_on(&fx, &repo).await;
    let first = system_prompt(&fx.requests()[0]);
    assert!(!first.contains("ROOT RULE"), "{first}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_run_without_a_project_and_a_linked_agents_md_get_no_instructions() {
    let fx = Fixture::new(ten_steps()).await;
    let repo = repo_with_rules(&fx);
    // A link to a file outside is never followed: its text would reach the model.
    let secret = fx.dir.path().join("secret.txt");
    std::fs::write(&secret, "SECRET KEY\n").expect("write");
    std::fs::remove_file(repo.join("src/AGENTS.md")).expect("rm");
    std::os::unix::fs::symlink(&secret, repo.join("src/AGENTS.md")).expect("symlink");
    run_on(&fx, &repo).await;
    let first = system_prompt(&fx.requests()[0]);
    assert!(
        first.contains("ROOT RULE") && !first.contains("SECRET KEY"),
        "{first}"
    );

    let fx = Fixture::new(ten_steps()).await;
    fx.run_json("nothing to read", &[], 0).await;
    let first = system_prompt(&fx.requests()[0]);
    assert!(!first.contains("Project instructions"), "{first}");
}
