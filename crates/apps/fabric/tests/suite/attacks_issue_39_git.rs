//! Issue #39: the fabric's own git, which runs outside the sandbox with the fabric's
//! privileges, never runs what a run wrote, and never writes the user's repository but by
//! `fabric apply`.
//!
//! A run (the scripted model, `python3` through `shell`) unpacks a repository into its
//! workspace whose configuration names a command for every program git runs (filters,
//! fsmonitor, hooks, ssh, external diff, textconv, pager, askpass, editor, an alias, an
//! included file), adds a `.git` file pointing at the user's repository, and points the
//! worktree's own `.git` at the nested repository (read-only with namespaces; the run's to
//! write without them). Then the fabric checkpoints, diffs, applies and discards, in a
//! project run, a copy run and a scratch run with `store.workspace_history`, in the suite's
//! three columns. The host's evidence: no marker file written by any of those commands, the
//! user's index byte-identical until `apply`, the nested files in the branch as plain files,
//! and each removal recorded as a `security_event`. The control, that the payload does run
//! when a git enters it, is `issue_39_control_an_entered_evil_repository_runs_its_commands`
//! in fabric-workspace-git, with the same configuration.

#![allow(clippy::print_stderr)]

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

use super::attacks_round_three::Column;
use super::fixture::{Fixture, of_kind};
use super::projects::git;

/// A repository in `at` whose configuration names, for every program git can be told to
/// run, a command writing its own marker into `marks`; returned as a base64 tarball of its
/// directory, for the run to unpack.
fn evil_tarball(at: &Path, marks: &Path) -> String {
    std::fs::create_dir_all(at).expect("mkdir");
    git(at, &["init", "-q", "-b", "main", "--template="]);
    std::fs::write(at.join("a.txt"), "nested\n").expect("write");
    std::fs::write(at.join(".gitattributes"), "* filter=evil diff=evil\n").expect("write");
    git(at, &["add", "a.txt", ".gitattributes"]);
    git(at, &["commit", "-qm", "nested"]);
    let mark = |kind: &str| format!("touch {}/{kind}", marks.display());
    for (key, value) in [
        ("filter.evil.clean", format!("{}; cat", mark("filter"))),
        ("filter.evil.smudge", format!("{}; cat", mark("smudge"))),
        ("filter.evil.process", mark("process")),
        ("filter.evil.required", "true".to_owned()),
        ("core.fsmonitor", mark("fsmonitor")),
        ("core.sshCommand", mark("ssh")),
        ("diff.external", mark("external")),
        ("diff.evil.textconv", format!("{}; cat", mark("textconv"))),
        ("core.pager", mark("pager")),
        ("core.askPass", mark("askpass")),
        ("core.editor", mark("editor")),
        ("alias.status", format!("!{}", mark("alias"))),
        ("include.path", "more.cfg".to_owned()),
    ] {
        git(at, &["config", key, &value]);
    }
    std::fs::write(
        at.join(".git/more.cfg"),
        format!("[core]\n\tfsmonitor = {}\n", mark("included")),
    )
    .expect("write");
    let hooks = at.join(".git/hooks");
    std::fs::create_dir_all(&hooks).expect("mkdir");
    for hook in [
        "pre-commit",
        "post-checkout",
        "post-index-change",
        "reference-transaction",
    ] {
        let path = hooks.join(hook);
        std::fs::write(&path, format!("#!/bin/sh\n{}\n", mark("hook"))).expect("write");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    let tar = std::process::Command::new("tar")
        .args(["-C", &at.display().to_string(), "-czf", "-", "."])
        .output()
        .expect("tar");
    assert!(tar.status.success());
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(tar.stdout)
}

/// Where the attacked run works.
#[derive(Clone, Copy, Debug)]
enum Origin {
    /// `--project` on a repository: a worktree.
    Project,
    /// `--project` on a plain directory: a copy with its history outside.
    Copy,
    /// A scratch workspace with `store.workspace_history: true`.
    ScratchHistory,
}

/// The run's two commands: unpack the evil repository as `n1/`, add a `.git` file pointing
/// at `user_git` below a new directory, point the workspace's own `.git` at `n1`; then make
/// `n1`'s files racy and change a file, so the second checkpoint looks again.
fn attack_turns(tarball: &str, user_git: &Path) -> Vec<fabric_test_support::Turn> {
    let first = format!(
        r#"import base64, io, os, tarfile
os.makedirs('n1', exist_ok=True)
tarfile.open(fileobj=io.BytesIO(base64.b64decode('{tarball}'))).extractall('n1')
os.makedirs('deep/er', exist_ok=True)
open('deep/er/.git', 'w').write('gitdir: {user}\n')
open('deep/er/x.txt', 'w').write('x\n')
try:
    open('.git', 'w').write('gitdir: ' + os.getcwd() + '/n1/.git\n')
    print('redirected the worktree link')
except OSError as e:
    print('could not redirect the worktree link:', e)
print('planted', flush=True)
"#,
        user = user_git.display()
    );
    let second = r#"import os
open('n1/a.txt', 'w').write('nested\n')
open('n1/b.txt', 'w').write('b\n')
open('README.md', 'a').write('more\n')
print('touched', flush=True)
"#;
    super::attacks::calls_then_finish(
        [
            ("plant", "shell", json!({"cmd": ["python3", "-c", first]})),
            ("touch", "shell", json!({"cmd": ["python3", "-c", second]})),
        ]
        .into_iter(),
    )
}

/// The user's index file: its bytes and modification time.
fn index_of(repo: &Path) -> Option<(Vec<u8>, std::time::SystemTime)> {
    let path = repo.join(".git/index");
    Some((
        std::fs::read(&path).ok()?,
        std::fs::metadata(&path).ok()?.modified().ok()?,
    ))
}

fn marks_in(marks: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(marks)
        .expect("marks")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    found
}

/// Under `home`: the marker directory, the user's repository (or plain directory, for a
/// copy) with a racy file in its index, and a fixture whose model plants the attack.
async fn set_up(home: &Path, origin: Origin) -> (Fixture, PathBuf, PathBuf) {
    let marks = home.join("marks");
    std::fs::create_dir_all(&marks).expect("mkdir");
    let tarball = evil_tarball(&home.join("evil"), &marks);
    let user = home.join("user");
    std::fs::create_dir_all(&user).expect("mkdir");
    std::fs::write(user.join("README.md"), "# app\n").expect("write");
    if !matches!(origin, Origin::Copy) {
        git(&user, &["init", "-q", "-b", "main"]);
        git(&user, &["add", "."]);
        git(&user, &["commit", "-qm", "start"]);
        git(&user, &["status", "--porcelain"]);
    }
    let fx = Fixture::new(attack_turns(&tarball, &user.join(".git"))).await;
    fx.append_config("shell:\n  allowed_commands: [python3]\n");
    (fx, marks, user)
}

/// One attack in one column from one origin, through run, diff, apply and discard.
async fn attack(column: Column, origin: Origin) {
    let home = tempfile::tempdir().expect("tempdir");
    let (fx, marks, user) = set_up(home.path(), origin).await;
    if matches!(origin, Origin::ScratchHistory) {
        fx.append_config("store:\n  workspace_history: true\n");
    }
    let index_before = index_of(&user);
    let user_arg = user.display().to_string();
    let mut args = vec!["run", "plant", "--pack", "engineering", "--json"];
    if !matches!(origin, Origin::ScratchHistory) {
        args.extend(["--project", &user_arg]);
    }
    args.extend(column.sandbox_args());
    let run = fx.fabric_via(column.wrapper(), &args, &[], 180).await;
    run.assert_code(0);
    let result = run.json();
    let id = result["_meta"]["run_id"]
        .as_str()
        .expect("run id")
        .to_owned();
    let events = fx.runlog(&result);
    column.assert_start(&of_kind(&events, "run_start")[0]["payload"]["sandbox"]);
    // The plant ran in every column: the checkpoint found what it made.
    let removed: Vec<Value> = of_kind(&events, "checkpoint")
        .iter()
        .flat_map(|c| {
            c["payload"]["removed_git"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    assert!(
        removed.contains(&json!("n1/.git")) && removed.contains(&json!("deep/er/.git")),
        "{column:?} {origin:?}: {removed:?}"
    );
    let said = of_kind(&events, "security_event").iter().any(|e| {
        e["payload"]["attempted"]
            .as_str()
            .is_some_and(|a| a.contains("n1/.git"))
    });
    assert!(
        said,
        "{column:?} {origin:?}: no security_event names n1/.git"
    );
    if !matches!(origin, Origin::ScratchHistory) {
        fx.fabric(&["diff", &id]).await.assert_code(0);
        fx.fabric(&["diff", &id, "--stat"]).await.assert_code(0);
    }
    assert_eq!(
        index_of(&user),
        index_before,
        "{column:?} {origin:?}: the user's index was written before apply"
    );
    if !matches!(origin, Origin::ScratchHistory) {
        fx.fabric(&["apply", &id]).await.assert_code(0);
        // The nested files arrive as files; nothing of git's with them.
        assert_eq!(
            std::fs::read_to_string(user.join("n1/b.txt")).expect("applied"),
            "b\n"
        );
        assert!(!user.join("n1/.git").exists());
        assert!(!user.join("deep/er/.git").exists());
        fx.fabric(&["discard", &id]).await.assert_code(0);
    }
    if matches!(origin, Origin::Project) {
        let tree = git(
            &user,
            &["ls-tree", "-r", "--format=%(objectmode) %(path)", "HEAD"],
        );
        assert!(
            !tree.contains("160000"),
            "a gitlink reached the user's HEAD: {tree}"
        );
    }
    assert_eq!(
        marks_in(&marks),
        Vec::<String>::new(),
        "{column:?} {origin:?}: a command the run configured ran outside the sandbox"
    );
    eprintln!("attack39 {:<13} {origin:?}: nothing ran", column.name());
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_39_nested_repositories_configure_nothing_the_fabric_runs_in_a_project_run() {
    for column in Column::on_this_host() {
        attack(column, Origin::Project).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_39_nested_repositories_configure_nothing_the_fabric_runs_in_a_copy_run() {
    for column in Column::on_this_host() {
        attack(column, Origin::Copy).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_39_nested_repositories_configure_nothing_the_fabric_runs_with_scratch_history() {
    for column in Column::on_this_host() {
        attack(column, Origin::ScratchHistory).await;
    }
}

/// The worktree's `.git` file after a run that tried to point it elsewhere: back at the
/// user's repository where the run could write it, untouched where it could not.
#[tokio::test(flavor = "multi_thread")]
async fn issue_39_the_worktree_link_cannot_be_redirected_from_inside_a_run() {
    for column in Column::on_this_host() {
        let home = tempfile::tempdir().expect("tempdir");
        let (fx, marks, user) = set_up(home.path(), Origin::Project).await;
        let user_arg = user.display().to_string();
        let mut args = vec![
            "run",
            "plant",
            "--pack",
            "engineering",
            "--json",
            "--project",
            &user_arg,
        ];
        args.extend(column.sandbox_args());
        let run = fx.fabric_via(column.wrapper(), &args, &[], 180).await;
        run.assert_code(0);
        let result = run.json();
        let id = result["_meta"]["run_id"]
            .as_str()
            .expect("run id")
            .to_owned();
        let workspace = PathBuf::from(result["_meta"]["workspace"].as_str().expect("workspace"));
        let link = std::fs::read_to_string(workspace.join(".git")).expect("the link");
        assert!(
            link.contains(&format!(
                "{}/.git/worktrees/",
                user.canonicalize().expect("real").display()
            )),
            "{column:?}: {link}"
        );
        // Every checkpoint landed on the run's branch of the user's repository.
        let events = fx.runlog(&result);
        let last = of_kind(&events, "checkpoint")
            .iter()
            .filter_map(|c| c["payload"]["commit"].as_str().map(str::to_owned))
            .next_back()
            .expect("a checkpoint");
        assert_eq!(git(&user, &["rev-parse", &format!("fabric/{id}")]), last);
        assert_eq!(marks_in(&marks), Vec::<String>::new(), "{column:?}");
    }
}
