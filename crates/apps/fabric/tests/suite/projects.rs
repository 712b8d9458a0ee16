//! Runs on the user's own repository (issue #25), through the real binary and real git: the
//! worktree on the run's branch, a commit after every call that may change files, the result
//! named by its branch, `fabric diff|apply|discard`, two runs on one repository at once,
//! resume to the last checkpoint, and the bad inputs' messages.

use fabric_test_support::{Scenario, Turn, TurnBy};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::fixture::{Fixture, kinds, of_kind};

/// `git ARGS` in `dir`, which must succeed; its trimmed stdout.
pub(super) fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "user")
        .env("GIT_AUTHOR_EMAIL", "user@example.com")
        .env("GIT_COMMITTER_NAME", "user")
        .env("GIT_COMMITTER_EMAIL", "user@example.com")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A repository under the fixture's directory with one commit (`README.md`, `src/lib.txt`)
/// and an uncommitted change to `README.md`, as a user's working tree often has.
pub(super) fn user_repo(fx: &Fixture) -> PathBuf {
    let repo = fx.workspace_root().with_file_name("repo");
    std::fs::create_dir_all(repo.join("src")).expect("mkdir");
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README.md"), "# app\n").expect("write");
    std::fs::write(repo.join("src/lib.txt"), "one\ntwo\n").expect("write");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "start"]);
    std::fs::write(repo.join("README.md"), "# app\nwork in progress\n").expect("write");
    repo
}

fn edit_turns() -> Vec<Turn> {
    vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "hello.txt", "content": "Hello World\n"}),
        ),
        Turn::tool_call("read_file", json!({"path": "src/lib.txt"})),
        Turn::tool_call(
            "write_file",
            json!({"path": "src/lib.txt", "content": "one\ntwo\nthree\n"}),
        ),
        Turn::tool_call(
            "finish_task",
            json!({"summary": "Added hello.txt and a third line", "artifacts": ["hello.txt", "src/lib.txt"], "next_steps": [], "notes": ""}),
        ),
    ]
}

async fn run_on(fx: &Fixture, repo: &Path, extra: &[&str]) -> Value {
    let repo = repo.to_str().expect("utf-8 path");
    let mut args = vec!["--project", repo];
    args.extend_from_slice(extra);
    fx.run_json("add hello.txt and a third line", &args, 0)
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_25_a_run_on_a_project_works_in_a_worktree_and_commits_every_change() {
    let fx = Fixture::new(edit_turns()).await;
    let repo = user_repo(&fx);
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let result = run_on(&fx, &repo, &[]).await;
    let id = result["_meta"]["run_id"]
        .as_str()
        .expect("run id")
        .to_owned();
    let branch = format!("fabric/{id}");

    // The worktree is the run's workspace, outside the user's working tree.
    let workspace = PathBuf::from(result["_meta"]["workspace"].as_str().expect("workspace"));
    assert_eq!(
        workspace,
        std::path::absolute(fx.workspace_root().join("worktrees").join(&id)).expect("abs")
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("hello.txt")).expect("hello"),
        "Hello World\n"
    );
    // The user's working tree is as they left it: their uncommitted change, no new file.
    assert!(!repo.join("hello.txt").exists());
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).expect("readme"),
        "# app\nwork in progress\n"
    );
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);

    // One commit per call that changed files (two writes; the read makes none), on the
    // run's branch from HEAD, by the fabric, with the run's trailers.
    let log = git(
        &repo,
        &["log", "--format=%an|%s", &format!("{head}..{branch}")],
    );
    let commits: Vec<&str> = log.lines().collect();
    assert_eq!(
        commits,
        vec![
            format!("agent-fabric|fabric: run {id}, step 3: write_file"),
            format!("agent-fabric|fabric: run {id}, step 1: write_file"),
        ],
        "{log}"
    );
    let body = git(&repo, &["log", "-1", "--format=%B", &branch]);
    assert!(body.contains(&format!("Fabric-Run: {id}")), "{body}");
    assert!(body.contains("Fabric-Step: 3"), "{body}");
    assert!(body.contains(&format!("Fabric-Base: {head}")), "{body}");

    // The result names the branch and what it changes.
    let changes = &result["_meta"]["changes"];
    assert_eq!(changes["branch"], branch.as_str());
    assert_eq!(changes["base"], head.as_str());
    assert_eq!(changes["files"], json!(["hello.txt", "src/lib.txt"]));
    assert_eq!(changes["added"], 2);
    assert_eq!(changes["removed"], 0);

    // The runlog: `workspace` after `run_start`, a `checkpoint` before each write's result.
    let events = fx.runlog(&result);
    let k = kinds(&events);
    assert_eq!(&k[..2], &["run_start", "workspace"]);
    let opened = &of_kind(&events, "workspace")[0]["payload"];
    assert_eq!(opened["origin"], "project");
    assert_eq!(opened["branch"], branch.as_str());
    assert_eq!(opened["base"], head.as_str());
    let checkpoints = of_kind(&events, "checkpoint");
    assert_eq!(checkpoints.len(), 2, "{k:?}");
    for checkpoint in &checkpoints {
        let at = events
            .iter()
            .position(|e| e == *checkpoint)
            .expect("in the runlog");
        assert_eq!(events[at - 1]["kind"], "tool_call");
        assert_eq!(events[at + 1]["kind"], "tool_result");
        assert_eq!(checkpoint["payload"]["tool"], "write_file");
    }
    let tip = git(&repo, &["rev-parse", &branch]);
    assert_eq!(checkpoints[1]["payload"]["commit"], tip.as_str());
    let end = &of_kind(&events, "run_complete")[0]["payload"]["workspace"];
    assert_eq!(end, changes);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_25_diff_apply_and_discard_finish_the_job() {
    let fx = Fixture::new(edit_turns()).await;
    let repo = user_repo(&fx);
    let result = run_on(&fx, &repo, &[]).await;
    let id = result["_meta"]["run_id"]
        .as_str()
        .expect("run id")
        .to_owned();

    let diff = fx.fabric(&["diff", &id]).await;
    diff.assert_code(0);
    assert!(diff.stdout.contains("+++ b/hello.txt"), "{}", diff.stdout);
    assert!(diff.stdout.contains("+three"), "{}", diff.stdout);
    let stat = fx.fabric(&["diff", &id, "--json"]).await;
    stat.assert_code(0);
    let stat = stat.json();
    assert_eq!(stat["branch"], format!("fabric/{id}"));
    assert_eq!(
        stat["files"][1],
        json!({"path": "src/lib.txt", "added": 1, "removed": 0})
    );

    // Into the working tree, uncommitted, beside the user's own change.
    let apply = fx.fabric(&["apply", &id]).await;
    apply.assert_code(0);
    assert!(
        apply.stdout.contains("applied 2 file(s)"),
        "{}",
        apply.stdout
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("hello.txt")).expect("applied"),
        "Hello World\n"
    );
    let status = git(&repo, &["status", "--short"]);
    assert!(status.contains("M README.md"), "{status}");
    assert!(status.contains(" M src/lib.txt"), "{status}");
    // Applying again would write over what is now uncommitted there: refused, naming it.
    let again = fx.fabric(&["apply", &id]).await;
    again.assert_code(2);
    assert!(
        again.stderr.contains("uncommitted changes"),
        "{}",
        again.stderr
    );
    assert!(again.stderr.contains("git stash"), "{}", again.stderr);

    let discard = fx.fabric(&["discard", &id]).await;
    discard.assert_code(0);
    let branches = git(&repo, &["branch", "--list", "fabric/*"]);
    assert!(branches.is_empty(), "{branches}");
    assert!(!fx.workspace_root().join("worktrees").join(&id).exists());
    let gone = fx.fabric(&["diff", &id]).await;
    gone.assert_code(2);
    assert!(gone.stderr.contains("discarded"), "{}", gone.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_25_apply_commit_lands_one_commit_and_a_conflict_writes_nothing() {
    let fx = Fixture::new(edit_turns()).await;
    let repo = user_repo(&fx);
    git(&repo, &["stash", "-q"]);
    let result = run_on(&fx, &repo, &[]).await;
    let id = result["_meta"]["run_id"]
        .as_str()
        .expect("run id")
        .to_owned();

    // The user changed the same line meanwhile: the run's change conflicts.
    std::fs::write(repo.join("src/lib.txt"), "one\ntwo\nTHREE\n").expect("write");
    git(&repo, &["commit", "-qam", "mine"]);
    let mine = git(&repo, &["rev-parse", "HEAD"]);
    let conflict = fx.fabric(&["apply", &id, "--commit"]).await;
    conflict.assert_code(2);
    assert!(conflict.stderr.contains("conflict"), "{}", conflict.stderr);
    assert!(
        conflict.stderr.contains("src/lib.txt"),
        "{}",
        conflict.stderr
    );
    assert!(
        conflict.stderr.contains(&format!("git merge fabric/{id}")),
        "{}",
        conflict.stderr
    );
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), mine);
    assert!(!repo.join("hello.txt").exists(), "nothing written");
    assert!(git(&repo, &["status", "--short"]).is_empty());

    // Without the conflict: one commit on the user's branch.
    git(&repo, &["reset", "-q", "--hard", "HEAD~1"]);
    let apply = fx.fabric(&["apply", &id, "--commit"]).await;
    apply.assert_code(0);
    assert!(
        apply.stdout.contains("committed 2 file(s)"),
        "{}",
        apply.stdout
    );
    assert_eq!(git(&repo, &["rev-list", "--count", "HEAD"]), "2");
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.txt")).expect("lib"),
        "one\ntwo\nthree\n"
    );
    assert!(git(&repo, &["status", "--short"]).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_25_two_runs_work_on_one_repository_at_once() {
    let a = Fixture::new(edit_turns()).await;
    let repo = user_repo(&a);
    let b = Fixture::new(vec![
        Turn::tool_call("write_file", json!({"path": "other.txt", "content": "B\n"})),
        Turn::tool_call(
            "finish_task",
            json!({"summary": "wrote other.txt", "artifacts": ["other.txt"], "next_steps": [], "notes": ""}),
        ),
    ])
    .await;
    let (ra, rb) = tokio::join!(run_on(&a, &repo, &[]), run_on(&b, &repo, &[]));
    let (ia, ib) = (
        ra["_meta"]["run_id"].as_str().expect("a"),
        rb["_meta"]["run_id"].as_str().expect("b"),
    );
    assert_ne!(ia, ib);
    let branches = git(
        &repo,
        &["branch", "--list", "fabric/*", "--format=%(refname:short)"],
    );
    let mut expected = vec![format!("fabric/{ia}"), format!("fabric/{ib}")];
    expected.sort();
    assert_eq!(branches.lines().collect::<Vec<_>>(), expected);
    assert_eq!(rb["_meta"]["changes"]["files"], json!(["other.txt"]));
    assert_eq!(
        ra["_meta"]["changes"]["files"],
        json!(["hello.txt", "src/lib.txt"])
    );
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.matches("worktree ").count(), 3, "{worktrees}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_25_a_base_other_than_head_and_the_bad_inputs_say_what_to_do() {
    let fx = Fixture::new(edit_turns()).await;
    let repo = user_repo(&fx);
    let first = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["stash", "-q"]);
    std::fs::write(repo.join("later.txt"), "later\n").expect("write");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "later"]);
    git(&repo, &["tag", "v1", &first]);
    let result = run_on(&fx, &repo, &["--base", "v1"]).await;
    assert_eq!(result["_meta"]["changes"]["base"], first.as_str());
    let workspace = PathBuf::from(result["_meta"]["workspace"].as_str().expect("ws"));
    assert!(!workspace.join("later.txt").exists(), "started from v1");

    let file = repo.join("README.md");
    let cases: [(&[&str], &str); 5] = [
        (&["--project", "/"], "too large to work on as a copy"),
        (&["--project", "//"], "the root of the file system"),
        (&["--project", "/nonexistent/repo"], "not a directory"),
        (
            &["--project", file.to_str().expect("utf-8")],
            "not a directory",
        ),
        (
            &[
                "--project",
                repo.to_str().expect("utf-8"),
                "--base",
                "no-such-ref",
            ],
            "git branch -a",
        ),
    ];
    for (extra, says) in cases {
        let mut args = vec!["run", "do it", "--pack", "engineering"];
        args.extend_from_slice(extra);
        let run = fx.fabric(&args).await;
        run.assert_code(2);
        assert!(run.stderr.contains(says), "{extra:?}: {}", run.stderr);
    }
    // No run was left behind by a refused project: only the one above exists.
    let runs = std::fs::read_dir(fx.workspace_root().join("runs"))
        .expect("runs")
        .count();
    assert_eq!(runs, 1);
    // A run without a project has no branch to diff.
    let scratch = Fixture::new(edit_turns()).await;
    let plain = scratch.run_json("add hello", &[], 0).await;
    let id = plain["_meta"]["run_id"].as_str().expect("id");
    let diff = scratch.fabric(&["diff", id]).await;
    diff.assert_code(2);
    assert!(
        diff.stderr.contains("plain scratch workspace"),
        "{}",
        diff.stderr
    );
}

/// The run is killed after its second checkpoint; a file is then written into the worktree
/// behind its back (as a command left running could). `fabric resume` puts the files back as
/// the last recorded checkpoint has them and finishes on the same branch.
#[tokio::test(flavor = "multi_thread")]
async fn issue_25_resume_restores_the_worktree_to_the_last_checkpoint() {
    let mut turns = edit_turns();
    turns.insert(
        3,
        Turn::tool_call(
            "write_file",
            json!({"path": "late.txt", "content": "late\n"}),
        ),
    );
    let mut scenario = Scenario::new(turns);
    scenario.turn_by = TurnBy::Conversation;
    scenario.latency_ms = 300;
    let fx = Fixture::with_backend(scenario, "openai").await;
    let repo = user_repo(&fx);
    let repo_arg = repo.to_str().expect("utf-8");
    let mut child = fx
        .command(&[
            "run",
            "edit",
            "--pack",
            "engineering",
            "--json",
            "--project",
            repo_arg,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("fabric run starts");
    let runs = fx.workspace_root().join("runs");
    let mut id = None;
    for _ in 0..1_000 {
        let found = std::fs::read_dir(&runs)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .and_then(|e| e.file_name().into_string().ok());
        if let Some(run) = found {
            let text =
                std::fs::read_to_string(runs.join(&run).join("runlog.jsonl")).unwrap_or_default();
            if text.matches("\"kind\":\"checkpoint\"").count() >= 2 {
                id = Some(run);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let id = id.expect("the run reached its second checkpoint");
    child.start_kill().expect("SIGKILL");
    child.wait().await.expect("wait");
    let worktree = fx.workspace_root().join("worktrees").join(&id);
    std::fs::write(worktree.join("stray.txt"), "written after the kill\n").expect("stray");
    std::fs::write(worktree.join("hello.txt"), "changed after the kill\n").expect("stray");

    let resume = fx.fabric(&["resume", &id, "--json"]).await;
    resume.assert_code(0);
    let result = resume.json();
    let events = fx.runlog(&result);
    let resumed = events
        .iter()
        .position(|e| e["kind"] == "run_resumed")
        .expect("resumed");
    assert_eq!(events[resumed + 1]["kind"], "workspace");
    let checkpoints: Vec<String> = of_kind(&events[..resumed], "checkpoint")
        .iter()
        .filter_map(|c| c["payload"]["commit"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        events[resumed + 1]["payload"]["restored_to"],
        checkpoints.last().expect("a checkpoint").as_str()
    );
    assert!(
        !worktree.join("stray.txt").exists(),
        "removed by the restore"
    );
    assert_eq!(
        std::fs::read_to_string(worktree.join("hello.txt")).expect("hello"),
        "Hello World\n"
    );
    // Each write is one commit on the branch, none twice.
    let branch = format!("fabric/{id}");
    let subjects = git(&repo, &["log", "--format=%s", &format!("main..{branch}")]);
    assert_eq!(subjects.lines().count(), 3, "{subjects}");
    assert_eq!(
        result["_meta"]["changes"]["files"],
        json!(["hello.txt", "late.txt", "src/lib.txt"])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_25_logs_prune_removes_the_worktrees_and_branches_of_pruned_runs() {
    let fx = Fixture::new(edit_turns()).await;
    let repo = user_repo(&fx);
    let result = run_on(&fx, &repo, &[]).await;
    let id = result["_meta"]["run_id"]
        .as_str()
        .expect("run id")
        .to_owned();
    assert!(fx.workspace_root().join("worktrees").join(&id).exists());
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let prune = fx.fabric(&["logs", "prune", "--older-than", "1s"]).await;
    prune.assert_code(0);
    assert!(prune.stdout.contains("deleted 1 run"), "{}", prune.stdout);
    assert!(!fx.workspace_root().join("worktrees").join(&id).exists());
    let branches = git(&repo, &["branch", "--list", "fabric/*"]);
    assert!(branches.is_empty(), "{branches}");
    assert!(
        git(&repo, &["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count()
            == 1
    );
}

/// With a critic, the member works in a staging copy of the worktree; what the critic
/// approves lands in the worktree as one checkpoint (`finish_task`), and a run the critic
/// keeps rejecting ends `quality_gate_failed` with its branch left for inspection.
#[tokio::test(flavor = "multi_thread")]
async fn issue_25_the_critic_gate_on_a_project_commits_what_it_approves() {
    let write = Turn::tool_call(
        "write_file",
        json!({"path": "hello.py", "content": "print('hello')\n"}),
    );
    let finish = Turn::tool_call(
        "finish_task",
        json!({"summary": "hello.py", "artifacts": ["hello.py"]}),
    );
    let verdict = |approved: bool| {
        let findings = if approved {
            json!([])
        } else {
            json!([{"severity": "error", "file": "hello.py", "reason": "no"}])
        };
        [
            Turn::tool_call("read_file", json!({"path": "hello.py"})),
            Turn::tool_call(
                "finish_task",
                json!({"approved": approved, "findings": findings, "summary": "verdict"}),
            ),
        ]
    };
    let gated = "specialists:\n  engineering:\n    critic: reviewer\n    max_repair_rounds: 1\n";

    let mut turns = vec![write.clone(), finish.clone()];
    turns.extend(verdict(true));
    let fx = Fixture::new(turns).await;
    fx.append_config(gated);
    let repo = user_repo(&fx);
    let result = run_on(&fx, &repo, &[]).await;
    let id = result["_meta"]["run_id"].as_str().expect("id").to_owned();
    assert_eq!(result["_meta"]["changes"]["files"], json!(["hello.py"]));
    let events = fx.runlog(&result);
    let checkpoints = of_kind(&events, "checkpoint");
    assert_eq!(checkpoints.len(), 1, "{:?}", kinds(&events));
    assert_eq!(checkpoints[0]["payload"]["tool"], "finish_task");
    let subjects = git(
        &repo,
        &["log", "--format=%s", &format!("main..fabric/{id}")],
    );
    assert_eq!(
        subjects,
        format!("fabric: run {id}, step 2: finish_task"),
        "one commit, made when the critic approved"
    );

    let mut turns = vec![write, finish];
    turns.extend(verdict(false));
    let rejecting = Fixture::new(turns).await;
    rejecting.append_config(gated);
    let repo = user_repo(&rejecting);
    let failed = rejecting
        .run_json(
            "add hello.py",
            &["--project", repo.to_str().expect("utf-8")],
            8,
        )
        .await;
    assert_eq!(failed["_meta"]["status"], "quality_gate_failed");
    let id = failed["_meta"]["run_id"].as_str().expect("id");
    assert_eq!(failed["_meta"]["changes"]["files"], json!([]));
    let diff = rejecting.fabric(&["diff", id, "--json"]).await;
    diff.assert_code(0);
    assert_eq!(
        diff.json()["branch"],
        format!("fabric/{id}"),
        "left for inspection"
    );
}

/// The worktree is the tools' to write; its `.git` file and the user's repository are not:
/// a command that tries either is refused and the repository stays as it was.
#[tokio::test(flavor = "multi_thread")]
async fn issue_25_tools_cannot_write_the_worktree_s_git_file_or_the_user_s_repository() {
    // From the worktree (`.fabric/worktrees/<id>`), the user's repository is `../../../repo`.
    let turns = vec![
        Turn::tool_call("shell", json!({"cmd": ["cp", "README.md", ".git"]})),
        Turn::tool_call(
            "shell",
            json!({"cmd": ["touch", "../../../repo/.git/evil"]}),
        ),
        Turn::tool_call(
            "write_file",
            json!({"path": ".git", "content": "gitdir: /tmp/elsewhere\n"}),
        ),
        Turn::tool_call(
            "finish_task",
            json!({"summary": "tried", "artifacts": [], "next_steps": [], "notes": ""}),
        ),
    ];
    let fx = Fixture::new(turns).await;
    let repo = user_repo(&fx);
    fx.append_config("shell:\n  allowed_commands: [cp, touch]\n");
    let result = run_on(&fx, &repo, &[]).await;
    let id = result["_meta"]["run_id"].as_str().expect("id");
    let worktree = fx.workspace_root().join("worktrees").join(id);
    let pointer = std::fs::read_to_string(worktree.join(".git")).expect(".git file");
    assert!(pointer.starts_with("gitdir: "), "{pointer}");
    assert!(!pointer.contains("elsewhere"), "{pointer}");
    assert!(!repo.join(".git").join("evil").exists());
    assert_eq!(result["_meta"]["changes"]["files"], json!([]));
    let events = fx.runlog(&result);
    let refused = of_kind(&events, "security_event").len() + of_kind(&events, "tool_error").len();
    assert!(refused >= 3, "{:?}", kinds(&events));
    let diff = fx.fabric(&["diff", id]).await;
    diff.assert_code(0);
}

/// A build directory `.gitignore` excludes is written into but never committed, and the
/// runlog says so.
#[tokio::test(flavor = "multi_thread")]
async fn issue_25_ignored_files_are_not_committed_and_are_said() {
    let fx = Fixture::new(vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "build/out.bin", "content": "artifact"}),
        ),
        Turn::tool_call("write_file", json!({"path": "src/new.txt", "content": "new\n"})),
        Turn::tool_call(
            "finish_task",
            json!({"summary": "built", "artifacts": ["src/new.txt"], "next_steps": [], "notes": ""}),
        ),
    ])
    .await;
    let repo = user_repo(&fx);
    git(&repo, &["stash", "-q"]);
    std::fs::write(repo.join(".gitignore"), "build/\n").expect("ignore");
    git(&repo, &["add", ".gitignore"]);
    git(&repo, &["commit", "-qm", "ignore build"]);
    let result = run_on(&fx, &repo, &[]).await;
    assert_eq!(result["_meta"]["changes"]["files"], json!(["src/new.txt"]));
    let events = fx.runlog(&result);
    let checkpoints = of_kind(&events, "checkpoint");
    assert_eq!(checkpoints[0]["payload"]["commit"], Value::Null);
    assert_eq!(checkpoints[0]["payload"]["ignored"], json!(["build/"]));
    // Said once: the second checkpoint has a commit and no new ignored path to tell.
    assert_eq!(checkpoints.len(), 2);
    assert!(checkpoints[1]["payload"]["commit"].is_string());
    let human = fx
        .fabric(&[
            "logs",
            "show",
            result["_meta"]["run_id"].as_str().expect("id"),
        ])
        .await;
    human.assert_code(0);
}

/// Issue #25: with `store.workspace_remote`, a remote that goes away mid-run is retried, then
/// the run ends `failed` naming it, and every commit stays on the run's branch here.
#[tokio::test(flavor = "multi_thread")]
async fn issue_25_a_remote_that_fails_mid_run_ends_it_failed_with_every_commit_kept() {
    let mut scenario = Scenario::new(vec![
        Turn::tool_call("write_file", json!({"path": "a.txt", "content": "A\n"})),
        Turn::tool_call("write_file", json!({"path": "b.txt", "content": "B\n"})),
        Turn::tool_call(
            "finish_task",
            json!({"summary": "wrote", "artifacts": [], "next_steps": [], "notes": ""}),
        ),
    ]);
    scenario.turn_by = TurnBy::Conversation;
    scenario.latency_ms = 400;
    let fx = Fixture::with_backend(scenario, "openai").await;
    let repo = user_repo(&fx);
    let remote = fx.dir.path().join("remote.git");
    git(fx.dir.path(), &["init", "-q", "--bare", "remote.git"]);
    fx.append_config(&format!(
        "store:\n  workspace_remote: {}\n",
        remote.display()
    ));
    let repo_arg = repo.to_str().expect("utf-8");
    let run = fx
        .command(&[
            "run",
            "write",
            "--pack",
            "engineering",
            "--json",
            "--project",
            repo_arg,
        ])
        .output();
    let remove = async {
        // Gone once the first checkpoint has been pushed.
        for _ in 0..500 {
            let pushed = std::process::Command::new("git")
                .arg("--git-dir")
                .arg(&remote)
                .args(["for-each-ref", "--count=1", "refs/heads/fabric/"])
                .output()
                .map(|o| !o.stdout.is_empty())
                .unwrap_or(false);
            let log = std::fs::read_dir(fx.workspace_root().join("runs"))
                .ok()
                .and_then(|mut d| d.next())
                .and_then(|e| e.ok())
                .map(|e| std::fs::read_to_string(e.path().join("runlog.jsonl")).unwrap_or_default())
                .unwrap_or_default();
            if pushed && log.contains("\"pushed\":true") {
                std::fs::remove_dir_all(&remote).expect("remove the remote");
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the first checkpoint was never pushed");
    };
    let (output, ()) = tokio::join!(run, remove);
    let output = output.expect("fabric ran");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let result: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(result["_meta"]["status"], "failed");
    let reason = result["_meta"]["reason"].as_str().expect("reason");
    assert!(reason.contains(&remote.display().to_string()), "{reason}");
    assert!(reason.contains("tried 5 times"), "{reason}");
    let id = result["_meta"]["run_id"].as_str().expect("id");
    let subjects = git(
        &repo,
        &["log", "--format=%s", &format!("main..fabric/{id}")],
    );
    assert_eq!(subjects.lines().count(), 2, "both commits kept: {subjects}");
}

/// `POST /run` with `project` (and `base`), through `fabric serve` whose config allows the
/// test's directory (`server.project_roots`, issue #39): the answer names the branch; a
/// relative path, a base without a project and a missing directory are 422 with the fix.
#[tokio::test(flavor = "multi_thread")]
async fn issue_25_post_run_takes_a_project() {
    let fx = Fixture::new(edit_turns()).await;
    allow_projects_in_test_dir(&fx);
    let served =
        super::serve_fixture::Served::on(fx, super::serve_fixture::Options::default()).await;
    let repo = user_repo(&served.fx);
    let (code, body) = served
        .post_json(
            "/run",
            json!({"prompt": "add hello", "pack": "engineering", "project": repo, "base": "main"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let id = body["_meta"]["run_id"].as_str().expect("id");
    assert_eq!(body["_meta"]["changes"]["branch"], format!("fabric/{id}"));
    assert_eq!(
        body["_meta"]["changes"]["files"],
        json!(["hello.txt", "src/lib.txt"])
    );
    let (code, body) = served
        .post_json("/run", json!({"prompt": "x", "project": "repo"}))
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_project", "{body}");
    assert!(body.to_string().contains("absolute path"), "{body}");
    let (code, body) = served
        .post_json("/run", json!({"prompt": "x", "base": "main"}))
        .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body.to_string().contains("`base` needs `project`"),
        "{body}"
    );
    let missing = served.fx.dir.path().join("nonexistent/repo");
    let (code, body) = served
        .post_json("/run", json!({"prompt": "x", "project": missing}))
        .await;
    assert_eq!(code, 422, "{body}");
    assert!(body.to_string().contains("cannot be used"), "{body}");
}

/// `server.project_roots`: the fixture's directory, where its repositories are.
fn allow_projects_in_test_dir(fx: &Fixture) {
    fx.append_config(&format!(
        "server:\n  project_roots: [{}]\n",
        fx.dir.path().display()
    ));
}

/// `fabric doctor` says whether runs on a project can work here, and what to do if not.
#[tokio::test(flavor = "multi_thread")]
async fn issue_25_doctor_checks_git() {
    let fx = Fixture::new(vec![]).await;
    let run = fx.fabric(&["doctor"]).await;
    assert!(run.stdout.contains("[ok  ] git: usable"), "{}", run.stdout);
    let without = fx
        .fabric_with(&["doctor"], &[("PATH", "/nonexistent")])
        .await;
    assert!(
        without.stdout.contains("[warn] git: cannot run `git`"),
        "{}",
        without.stdout
    );
    assert!(without.stdout.contains("install git"), "{}", without.stdout);
    let project = fx
        .fabric_with(
            &["run", "x", "--pack", "engineering", "--project", "."],
            &[("PATH", "/nonexistent")],
        )
        .await;
    project.assert_code(2);
    assert!(project.stderr.contains("install git"), "{}", project.stderr);
}

/// The MCP server's `run_task` takes `project` and `base` (over stdio, plain JSON-RPC): the
/// structured result names the branch; a relative path is refused naming the parameter.
#[tokio::test(flavor = "multi_thread")]
async fn issue_25_mcp_run_task_takes_a_project() {
    let fx = Fixture::new(edit_turns()).await;
    allow_projects_in_test_dir(&fx);
    let repo = user_repo(&fx);
    let answers = fx
        .mcp_calls(&[
            (
                "run_task",
                json!({"prompt": "add hello", "specialist": "engineering", "project": repo}),
            ),
            (
                "run_task",
                json!({"prompt": "add hello", "project": "repo"}),
            ),
        ])
        .await;
    let done = &answers[0]["structuredContent"];
    let id = done["_meta"]["run_id"].as_str().expect("run id");
    assert_eq!(done["_meta"]["changes"]["branch"], format!("fabric/{id}"));
    let refused = &answers[1];
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        refused
            .to_string()
            .contains("parameter `project` must be an absolute path"),
        "{refused}"
    );
}

/// A directory that is not a git repository: the run works in a copy of it, versioned the
/// same way; `fabric apply` copies the changed files back, refusing (writing nothing) when
/// one of them changed there since; `--commit` and `--base` say why they cannot be.
#[tokio::test(flavor = "multi_thread")]
async fn issue_25_a_directory_that_is_not_a_repository_is_worked_on_in_a_copy() {
    let fx = Fixture::new(edit_turns()).await;
    let plain = fx.workspace_root().with_file_name("plain");
    std::fs::create_dir_all(plain.join("src")).expect("mkdir");
    std::fs::write(plain.join("src/lib.txt"), "one\ntwo\n").expect("write");
    std::fs::write(plain.join("README.md"), "# notes\n").expect("write");
    let result = run_on(&fx, &plain, &[]).await;
    let id = result["_meta"]["run_id"].as_str().expect("id").to_owned();
    // The user's directory is untouched until they apply.
    assert!(!plain.join("hello.txt").exists());
    assert_eq!(
        std::fs::read_to_string(plain.join("src/lib.txt")).expect("lib"),
        "one\ntwo\n"
    );
    assert_eq!(
        result["_meta"]["changes"]["files"],
        json!(["hello.txt", "src/lib.txt"])
    );
    let events = fx.runlog(&result);
    let opened = &of_kind(&events, "workspace")[0]["payload"];
    assert_eq!(opened["origin"], "copy");
    assert_eq!(opened["source"], plain.to_str().expect("utf-8"));
    assert_eq!(of_kind(&events, "checkpoint").len(), 2);

    let diff = fx.fabric(&["diff", &id]).await;
    diff.assert_code(0);
    assert!(diff.stdout.contains("+three"), "{}", diff.stdout);
    let commit = fx.fabric(&["apply", &id, "--commit"]).await;
    commit.assert_code(2);
    assert!(
        commit.stderr.contains("not a git repository"),
        "{}",
        commit.stderr
    );

    // Changed there meanwhile: refused, nothing written.
    std::fs::write(plain.join("src/lib.txt"), "one\nTWO\n").expect("write");
    let refused = fx.fabric(&["apply", &id]).await;
    refused.assert_code(2);
    assert!(refused.stderr.contains("src/lib.txt"), "{}", refused.stderr);
    assert!(!plain.join("hello.txt").exists(), "nothing written");
    std::fs::write(plain.join("src/lib.txt"), "one\ntwo\n").expect("write");
    let apply = fx.fabric(&["apply", &id]).await;
    apply.assert_code(0);
    assert_eq!(
        std::fs::read_to_string(plain.join("hello.txt")).expect("hello"),
        "Hello World\n"
    );
    assert_eq!(
        std::fs::read_to_string(plain.join("src/lib.txt")).expect("lib"),
        "one\ntwo\nthree\n"
    );
    let discard = fx.fabric(&["discard", &id]).await;
    discard.assert_code(0);
    assert!(!fx.workspace_root().join("worktrees").join(&id).exists());
    assert!(
        plain.join("hello.txt").exists(),
        "the user's directory stays"
    );

    let base = fx
        .fabric(&[
            "run",
            "x",
            "--pack",
            "engineering",
            "--project",
            plain.to_str().expect("utf-8"),
            "--base",
            "main",
        ])
        .await;
    base.assert_code(2);
    assert!(
        base.stderr.contains("leave out `--base`"),
        "{}",
        base.stderr
    );
}
