//! Issue #39: nothing a run wrote configures the fabric's own git. A run makes repositories
//! inside its workspace whose configuration names a command for every kind of program git
//! runs, points `.git` files at the user's repository and at repositories it prepared, and
//! the fabric checkpoints, diffs, restores, reopens, applies and discards: no command runs,
//! the user's repository changes only by `apply`, and the nested files are kept as files.

use super::support::*;
use fabric_engine::ports::{ApplyMode, WorkspaceSpec, Workspaces};
use fabric_workspace_git::GitWorkspaces;
use std::path::{Path, PathBuf};

/// A repository at `at` (with a commit) whose configuration names a command, each writing
/// its own marker file into `marks`, for every kind of program git can be told to run
/// (filters, fsmonitor, hooks, ssh, external diff, textconv, pager, askpass, editor, an
/// alias, an included file), applied to all its files.
fn evil_repo(at: &Path, marks: &Path) {
    std::fs::create_dir_all(at).unwrap();
    git(at, &["init", "--quiet", "--initial-branch=main"]);
    write(&at.join("a.txt"), "nested\n");
    write(&at.join(".gitattributes"), "* filter=evil diff=evil\n");
    git(at, &["add", "a.txt", ".gitattributes"]);
    git(at, &["commit", "--quiet", "-m", "nested"]);
    let mark = |kind: &str| format!("touch {}/{kind}", marks.display());
    let set = |key: &str, value: String| git(at, &["config", key, &value]);
    set("filter.evil.clean", format!("{}; cat", mark("filter")));
    set("filter.evil.smudge", format!("{}; cat", mark("smudge")));
    set("filter.evil.process", mark("process"));
    set("filter.evil.required", "true".into());
    set("core.fsmonitor", mark("fsmonitor"));
    set("core.sshCommand", mark("ssh"));
    set("diff.external", mark("external"));
    set("diff.evil.textconv", format!("{}; cat", mark("textconv")));
    set("core.pager", mark("pager"));
    set("core.askPass", mark("askpass"));
    set("core.editor", mark("editor"));
    set("alias.status", format!("!{}", mark("alias")));
    let included = at.join(".git/more.cfg");
    write(
        &included,
        &format!("[core]\n\tfsmonitor = {}\n", mark("included")),
    );
    set("include.path", included.display().to_string());
    for hook in [
        "pre-commit",
        "post-checkout",
        "post-index-change",
        "reference-transaction",
    ] {
        let path = at.join(".git/hooks").join(hook);
        write(&path, &format!("#!/bin/sh\n{}\n", mark("hook")));
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    // Racy: git must read the files again (through the clean filter) to compare them.
    write(&at.join("a.txt"), "nested\n");
}

/// The marker files the evil repositories' commands wrote.
fn marks_in(marks: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(marks)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// An empty directory for the marker files, under `root`.
fn marks_dir(root: &Path) -> PathBuf {
    let marks = root.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    marks
}

/// Fails naming the commands that ran.
fn nothing_ran(marks: &Path) {
    assert_eq!(
        marks_in(marks),
        Vec::<String>::new(),
        "a run's configured command ran"
    );
}

/// The paths and modes of `rev`'s tree in the repository `git_dir`, recursively.
fn tree(git_dir: &Path, rev: &str) -> Vec<String> {
    let named = format!("--git-dir={}", git_dir.display());
    git(
        git_dir,
        &[
            &named,
            "ls-tree",
            "-r",
            "--format=%(objectmode) %(path)",
            rev,
        ],
    )
    .lines()
    .map(String::from)
    .collect()
}

/// The control: with the user's git, the same repository, recorded as a gitlink and then
/// entered by `git status`, runs its commands. Proves the payload is live on this machine.
#[test]
fn issue_39_control_an_entered_evil_repository_runs_its_commands() {
    let root = tempfile::tempdir().unwrap();
    let marks = marks_dir(root.path());
    let outer = repo(root.path());
    evil_repo(&outer.join("n1"), &marks);
    git(&outer, &["add", "--all"]);
    write(&outer.join("n1/a.txt"), "nested\n");
    // It may fail (the fsmonitor's answer is no answer); what it ran is what counts.
    let _ = std::process::Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(&outer)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    let ran = marks_in(&marks);
    assert!(
        ran.iter()
            .any(|m| m == "filter" || m == "fsmonitor" || m == "included"),
        "{ran:?}"
    );
}

/// Everything a project run's workspace can be asked for, with `make` run in its workspace
/// before the checkpoints.
async fn through_everything(
    git_dir: &Path,
    spec: &WorkspaceSpec,
    make: impl Fn(&Path),
) -> (Vec<String>, Vec<String>, String) {
    let spaces = GitWorkspaces::new();
    let ws = spaces.create(spec).await.unwrap();
    make(ws.dir());
    let first = ws.checkpoint(&note(1, &["shell"])).await.unwrap();
    let mut removed = first.removed_git.clone();
    make(ws.dir());
    write(&ws.dir().join("README.md"), "# changed\n");
    let second = ws.checkpoint(&note(2, &["shell"])).await.unwrap();
    removed.extend(second.removed_git.clone());
    ws.diff().await.unwrap();
    ws.diff_stat().await.unwrap();
    let head = ws.head().await.unwrap();
    ws.restore(first.commit.as_ref().unwrap_or(&head))
        .await
        .unwrap();
    drop(ws);
    let again = spaces.reopen(spec).await.unwrap();
    make(again.dir());
    write(&again.dir().join("README.md"), "# changed again\n");
    again.checkpoint(&note(3, &["shell"])).await.unwrap();
    let tip = again.head().await.unwrap().to_string();
    let paths = tree(git_dir, &tip);
    if let fabric_engine::ports::WorkspaceOrigin::Project { .. } = &spec.origin {
        again.apply(ApplyMode::WorkingTree).await.unwrap();
    }
    again.discard().await.unwrap();
    (removed, paths, tip)
}

#[tokio::test]
async fn issue_39_a_nested_repository_runs_nothing_and_is_recorded_as_files_in_a_project_run() {
    let root = tempfile::tempdir().unwrap();
    let marks = marks_dir(root.path());
    let repo = repo(root.path());
    let spec = project(root.path(), &repo, "n1");
    let (removed, paths, _) = through_everything(&repo.join(".git"), &spec, |dir| {
        if !dir.join("n1/.git").exists() {
            evil_repo(&dir.join("n1"), &marks);
        }
        // One level down, inside a new directory, as a `.git` file.
        write(&dir.join("deep/er/x.txt"), "x\n");
        write(
            &dir.join("deep/er/.git"),
            &format!("gitdir: {}/.git\n", dir.join("n1").display()),
        );
    })
    .await;
    nothing_ran(&marks);
    assert!(removed.contains(&"n1/.git".to_string()), "{removed:?}");
    assert!(removed.contains(&"deep/er/.git".to_string()), "{removed:?}");
    // Its files are files of the branch, not a gitlink (160000).
    assert!(paths.contains(&"100644 n1/a.txt".to_string()), "{paths:?}");
    assert!(
        paths.contains(&"100644 deep/er/x.txt".to_string()),
        "{paths:?}"
    );
    assert!(!paths.iter().any(|p| p.starts_with("160000")), "{paths:?}");
    // Applied as files into the user's working tree; nothing of git's there.
    assert_eq!(read(&repo.join("n1/a.txt")), "nested\n");
    assert!(!repo.join("n1/.git").exists());
}

#[tokio::test]
async fn issue_39_a_nested_repository_runs_nothing_in_a_scratch_history() {
    let root = tempfile::tempdir().unwrap();
    let marks = marks_dir(root.path());
    let spec = scratch(root.path(), "s1");
    let history = root.path().join("history/s1");
    let (removed, paths, _) = through_everything(&history, &spec, |dir| {
        if !dir.join("n1/.git").exists() {
            evil_repo(&dir.join("n1"), &marks);
        }
    })
    .await;
    nothing_ran(&marks);
    assert!(removed.contains(&"n1/.git".to_string()), "{removed:?}");
    assert!(paths.contains(&"100644 n1/a.txt".to_string()), "{paths:?}");
}

/// The user's index, byte for byte, and its modification time.
fn index_of(repo: &Path) -> (Vec<u8>, std::time::SystemTime) {
    let path = repo.join(".git/index");
    (
        std::fs::read(&path).unwrap(),
        std::fs::metadata(&path).unwrap().modified().unwrap(),
    )
}

#[tokio::test]
async fn issue_39_a_git_file_pointing_at_the_users_repository_never_touches_it() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    // Something in the user's index that a refresh would rewrite: a racy file.
    write(&repo.join("README.md"), "# project\n");
    let before = index_of(&repo);
    let status = git(&repo, &["status", "--porcelain"]);
    let before_after_status = index_of(&repo);
    let spec = project(root.path(), &repo, "p1");
    let user_git = repo.join(".git");
    let spaces = GitWorkspaces::new();
    let ws = spaces.create(&spec).await.unwrap();
    let mut removed = Vec::new();
    for step in 1..=3 {
        write(
            &ws.dir().join("x/.git"),
            &format!("gitdir: {}\n", user_git.display()),
        );
        write(&ws.dir().join("x/new.txt"), &format!("{step}\n"));
        write(&ws.dir().join("src/new.txt"), &format!("{step}\n"));
        let done = ws.checkpoint(&note(step, &["shell"])).await.unwrap();
        removed.extend(done.removed_git);
    }
    ws.diff().await.unwrap();
    drop(ws);
    let _ = before;
    assert_eq!(
        index_of(&repo),
        before_after_status,
        "the user's index was written"
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), status);
    // Removed while `x/` was new. Once the branch records `x/`, git lists that directory's
    // files itself and never opens a `.git` in it: it is left, and nothing reads it.
    assert_eq!(removed, ["x/.git"]);
}

/// A repository the run prepared inside its workspace, which the worktree's `.git` file is
/// pointed at (possible where namespaces are refused: the file is the run's to write).
#[tokio::test]
async fn issue_39_a_redirected_worktree_link_is_never_followed_and_is_put_back() {
    let root = tempfile::tempdir().unwrap();
    let marks = marks_dir(root.path());
    let repo = repo(root.path());
    let spec = project(root.path(), &repo, "w1");
    let spaces = GitWorkspaces::new();
    let ws = spaces.create(&spec).await.unwrap();
    let link = std::fs::read_to_string(ws.dir().join(".git")).unwrap();
    let prepared: PathBuf = root.path().join("prepared");
    evil_repo(&prepared, &marks);
    write(
        &ws.dir().join(".git"),
        &format!("gitdir: {}/.git\n", prepared.display()),
    );
    write(&ws.dir().join("a.txt"), "a\n");
    let done = ws.checkpoint(&note(1, &["shell"])).await.unwrap();
    assert_eq!(done.removed_git, [".git"]);
    let commit = done.commit.expect("the change is recorded").to_string();
    // On the run's branch of the user's repository, not in the prepared one.
    assert_eq!(git(&repo, &["rev-parse", "fabric/w1"]), commit);
    assert_eq!(
        std::fs::read_to_string(ws.dir().join(".git")).unwrap(),
        link
    );
    // A directory in its place is replaced too, and reopening does not follow it.
    std::fs::remove_file(ws.dir().join(".git")).unwrap();
    std::fs::create_dir_all(ws.dir().join(".git")).unwrap();
    std::fs::write(ws.dir().join(".git/HEAD"), "ref: refs/heads/fabric/w1\n").unwrap();
    drop(ws);
    let again = spaces.reopen(&spec).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(again.dir().join(".git")).unwrap(),
        link
    );
    again.discard().await.unwrap();
    assert_eq!(
        marks_in(&marks),
        Vec::<String>::new(),
        "the prepared repository's command ran"
    );
}
