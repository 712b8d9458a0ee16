//! Bad input and faults: each a typed error whose message names the problem and the fix.

use super::support::{git, project, repo, write};
use fabric_engine::ports::{WorkspaceError, WorkspaceOrigin, Workspaces};
use fabric_workspace_git::GitWorkspaces;
use std::path::Path;
use std::process::Command;

async fn create_err(spec: &fabric_engine::ports::WorkspaceSpec) -> WorkspaceError {
    match GitWorkspaces::new().create(spec).await {
        Ok(_) => panic!("creating {:?} should fail", spec.origin),
        Err(e) => e,
    }
}

#[tokio::test]
async fn issue_25_a_path_that_is_not_a_directory_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("file.txt");
    write(&file, "not a repository");
    let err = create_err(&project(root.path(), &file, "r1")).await;
    assert!(
        matches!(err, WorkspaceError::NotADirectory { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("is not a directory"), "{err}");
    let missing = create_err(&project(root.path(), &root.path().join("nope"), "r1")).await;
    assert!(
        matches!(missing, WorkspaceError::NotADirectory { .. }),
        "{missing:?}"
    );
}

#[tokio::test]
async fn issue_25_a_directory_outside_any_repository_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let plain = root.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let err = create_err(&project(root.path(), &plain, "r1")).await;
    assert!(
        matches!(err, WorkspaceError::NotARepository { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("git init"), "{err}");
    assert!(err.is_user_fixable() && !err.is_retryable());
    assert_eq!(err.kind_tag(), "not_a_repository");
}

#[tokio::test]
async fn issue_25_a_repository_without_commits_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let empty = root.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    git(&empty, &["init", "--quiet"]);
    let err = create_err(&project(root.path(), &empty, "r1")).await;
    assert!(matches!(err, WorkspaceError::NoCommits { .. }), "{err:?}");
    assert!(err.to_string().contains("commit something first"), "{err}");
    // Also when a base is named: there is nothing it could name.
    let mut spec = project(root.path(), &empty, "r2");
    spec.origin = WorkspaceOrigin::Project {
        repo: empty.clone(),
        base: Some("main".into()),
    };
    let err = create_err(&spec).await;
    assert!(matches!(err, WorkspaceError::NoCommits { .. }), "{err:?}");
    assert!(!root.path().join("worktrees").join("r1").exists());
}

#[tokio::test]
async fn issue_25_a_base_that_does_not_exist_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let mut spec = project(root.path(), &repo, "r1");
    spec.origin = WorkspaceOrigin::Project {
        repo: repo.clone(),
        base: Some("no-such-branch".into()),
    };
    let err = create_err(&spec).await;
    assert_eq!(
        err,
        WorkspaceError::BaseNotFound {
            base: "no-such-branch".into()
        }
    );
    assert!(err.to_string().contains("git branch -a"), "{err}");
    // An option-like base is a name, not an option.
    spec.origin = WorkspaceOrigin::Project {
        repo: repo.clone(),
        base: Some("--all".into()),
    };
    assert!(matches!(
        create_err(&spec).await,
        WorkspaceError::BaseNotFound { .. }
    ));
    assert!(!spec.dir.exists());
}

#[tokio::test]
async fn issue_25_a_branch_name_taken_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    git(&repo, &["branch", "fabric/r1"]);
    let err = create_err(&project(root.path(), &repo, "r1")).await;
    assert_eq!(
        err,
        WorkspaceError::BranchTaken {
            branch: "fabric/r1".into()
        }
    );
    assert!(err.to_string().contains("git branch -D fabric/r1"), "{err}");
}

#[tokio::test]
async fn issue_25_a_workspace_directory_that_exists_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let spec = project(root.path(), &repo, "r1");
    std::fs::create_dir_all(&spec.dir).unwrap();
    let err = create_err(&spec).await;
    assert!(matches!(err, WorkspaceError::DirTaken { .. }), "{err:?}");
    // Nothing was made: the branch is free.
    assert_eq!(git(&repo, &["branch", "--list", "fabric/*"]), "");
}

#[tokio::test]
async fn issue_25_git_missing_is_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let spec = project(root.path(), &repo, "r1");
    let err = match GitWorkspaces::with_program("/nonexistent/bin/git")
        .create(&spec)
        .await
    {
        Ok(_) => panic!("no git, no workspace"),
        Err(e) => e,
    };
    assert!(matches!(err, WorkspaceError::GitMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("install git"), "{err}");
    assert_eq!(err.kind_tag(), "git_missing");
}

/// A read-only bind mount over a directory, undone on drop.
struct ReadOnly<'a>(&'a Path);

impl<'a> ReadOnly<'a> {
    fn mount(dir: &'a Path) -> Option<Self> {
        let ok = |args: &[&str]| {
            Command::new("mount")
                .args(args)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        let d = dir.to_str()?;
        if !ok(&["--bind", d, d]) {
            return None;
        }
        let guard = Self(dir);
        ok(&["-o", "remount,bind,ro", d]).then_some(guard)
    }
}

impl Drop for ReadOnly<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).output();
    }
}

#[tokio::test]
async fn issue_25_a_repository_on_a_read_only_disk_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let spec = project(root.path(), &repo, "r1");
    let Some(_ro) = ReadOnly::mount(&repo) else {
        // Mounting needs privileges this host does not give; the words are checked in the
        // crate's unit tests.
        return;
    };
    let err = create_err(&spec).await;
    assert!(matches!(err, WorkspaceError::ReadOnly { .. }), "{err:?}");
    assert!(err.to_string().contains("writable disk"), "{err}");
}

#[tokio::test]
async fn issue_25_a_git_too_old_is_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let old = root.path().join("old-git");
    write(&old, "#!/bin/sh\necho 'git version 2.30.2'\n");
    std::fs::set_permissions(&old, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // A process another test forks while this file is open for writing keeps it open until
    // it execs; running the script meanwhile fails with ETXTBSY ("Text file busy"). Wait for
    // it to run before the code under test does.
    for _ in 0..100 {
        match std::process::Command::new(&old).output() {
            Err(e) if e.raw_os_error() == Some(26) => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            _ => break,
        }
    }
    let err = match GitWorkspaces::with_program(&old)
        .create(&project(root.path(), &repo, "r1"))
        .await
    {
        Ok(_) => panic!("too old"),
        Err(e) => e,
    };
    assert_eq!(
        err,
        WorkspaceError::GitTooOld {
            found: "2.30.2".into(),
            need: "2.40".into()
        }
    );
    assert!(err.to_string().contains("needs git 2.40 or newer"), "{err}");
}
