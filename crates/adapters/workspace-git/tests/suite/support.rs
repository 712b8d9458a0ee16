//! Real repositories for the tests, made with the `git` program in a scrubbed environment.

use fabric_engine::ports::{StepNote, Workspace, WorkspaceOrigin, WorkspaceSpec, Workspaces};
use fabric_workspace_git::GitWorkspaces;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// Runs git in `dir` as a user would (their own identity), panicking on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Some User")
        .env("GIT_AUTHOR_EMAIL", "user@example.com")
        .env("GIT_COMMITTER_NAME", "Some User")
        .env("GIT_COMMITTER_EMAIL", "user@example.com")
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// A repository at `<root>/repo` with `README.md` and `src/lib.rs` committed on `main`.
pub fn repo(root: &Path) -> PathBuf {
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "--quiet", "--initial-branch=main"]);
    write(&repo.join("README.md"), "# project\n");
    write(
        &repo.join("src/lib.rs"),
        "pub fn one() -> u32 {\n    1\n}\n",
    );
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "--quiet", "-m", "initial"]);
    repo
}

/// The spec of run `run_id` on `repo`, its worktree under `<root>/worktrees`.
pub fn project(root: &Path, repo: &Path, run_id: &str) -> WorkspaceSpec {
    WorkspaceSpec {
        run_id: run_id.to_string(),
        origin: WorkspaceOrigin::Project {
            repo: repo.to_path_buf(),
            base: None,
        },
        dir: root.join("worktrees").join(run_id),
        remote: None,
        keep: Vec::new(),
    }
}

/// The spec of scratch run `run_id` under `root` (files in `runs/<id>/workspace`, history
/// in `history/<id>`).
pub fn scratch(root: &Path, run_id: &str) -> WorkspaceSpec {
    WorkspaceSpec {
        run_id: run_id.to_string(),
        origin: WorkspaceOrigin::Scratch {
            git_dir: root.join("history").join(run_id),
        },
        dir: root.join("runs").join(run_id).join("workspace"),
        remote: None,
        keep: Vec::new(),
    }
}

pub fn note(step: u32, tools: &[&str]) -> StepNote {
    StepNote {
        step,
        tools: tools.iter().map(|t| t.to_string()).collect(),
        summary: None,
    }
}

/// Writes `text` to `path` in the workspace and checkpoints it as `step`.
pub async fn step(ws: &dyn Workspace, step: u32, path: &str, text: &str) -> String {
    write(&ws.dir().join(path), text);
    let done = ws.checkpoint(&note(step, &["write_file"])).await.unwrap();
    done.commit.expect("a change makes a commit").to_string()
}

/// The `Fabric-Step` trailers of `rev`'s history since the run's base, oldest first.
pub fn steps(dir: &Path, range: &str) -> Vec<String> {
    git(
        dir,
        &[
            "log",
            "--reverse",
            "--format=%(trailers:key=Fabric-Step,valueonly)",
            range,
        ],
    )
    .lines()
    .map(str::trim)
    .filter(|l| !l.is_empty())
    .map(String::from)
    .collect()
}

/// `src/lib.rs` as a run edits it.
pub const LIB_TWO: &str = "pub fn one() -> u32 {\n    2\n}\n";

/// A new run `run_id`'s workspace on `repo`.
pub async fn open(root: &Path, repo: &Path, run_id: &str) -> Arc<dyn Workspace> {
    GitWorkspaces::new()
        .create(&project(root, repo, run_id))
        .await
        .unwrap()
}
