//! A run's result brought into the user's working tree, or refused before anything is
//! written.

use super::support::{LIB_TWO, git, open, read, repo, scratch, step, write};
use fabric_engine::ports::{ApplyMode, WorkspaceError, Workspaces};
use fabric_workspace_git::GitWorkspaces;

#[tokio::test]
async fn issue_25_apply_brings_the_changes_into_a_clean_working_tree_uncommitted() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let ws = open(root.path(), &repo, "r1").await;
    step(ws.as_ref(), 1, "src/lib.rs", LIB_TWO).await;
    step(ws.as_ref(), 2, "src/two.rs", "// two\n").await;
    std::fs::remove_file(ws.dir().join("README.md")).unwrap();
    ws.checkpoint(&super::support::note(3, &["shell"]))
        .await
        .unwrap();
    let head = git(&repo, &["rev-parse", "HEAD"]);
    // Settings that would change the patch the adapter hands to `git apply`.
    git(&repo, &["config", "diff.noprefix", "true"]);
    git(&repo, &["config", "diff.mnemonicPrefix", "true"]);
    git(&repo, &["config", "apply.whitespace", "error"]);

    let applied = ws.apply(ApplyMode::WorkingTree).await.unwrap();
    assert_eq!(applied.files, ["README.md", "src/lib.rs", "src/two.rs"]);
    assert_eq!(applied.commit, None);
    assert_eq!(read(&repo.join("src/lib.rs")), LIB_TWO);
    assert_eq!(read(&repo.join("src/two.rs")), "// two\n");
    assert!(!repo.join("README.md").exists());
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head, "no commit");
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        "D README.md\n M src/lib.rs\n?? src/two.rs"
    );
}

#[tokio::test]
async fn issue_25_apply_merges_past_the_users_commits_to_other_files() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let ws = open(root.path(), &repo, "r1").await;
    step(ws.as_ref(), 1, "src/lib.rs", LIB_TWO).await;
    // Meanwhile the user committed elsewhere and has uncommitted work in another file.
    write(&repo.join("README.md"), "# project, renamed\n");
    git(&repo, &["commit", "--quiet", "-am", "readme"]);
    write(&repo.join("README.md"), "# project, renamed (draft)\n");

    let applied = ws.apply(ApplyMode::WorkingTree).await.unwrap();
    assert_eq!(applied.files, ["src/lib.rs"]);
    assert_eq!(read(&repo.join("src/lib.rs")), LIB_TWO);
    assert_eq!(
        read(&repo.join("README.md")),
        "# project, renamed (draft)\n"
    );
}

#[tokio::test]
async fn issue_25_apply_refuses_a_conflict_naming_the_files_and_writes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let ws = open(root.path(), &repo, "r1").await;
    step(ws.as_ref(), 1, "src/lib.rs", LIB_TWO).await;
    step(ws.as_ref(), 2, "fresh.txt", "new\n").await;
    write(
        &repo.join("src/lib.rs"),
        "pub fn one() -> u32 {\n    3\n}\n",
    );
    git(&repo, &["commit", "--quiet", "-am", "mine"]);
    let head = git(&repo, &["rev-parse", "HEAD"]);

    for mode in [ApplyMode::WorkingTree, ApplyMode::Commit] {
        let err = ws.apply(mode).await.unwrap_err();
        assert_eq!(
            err,
            WorkspaceError::Conflict {
                branch: "fabric/r1".into(),
                files: vec!["src/lib.rs".into()],
            }
        );
        let text = err.to_string();
        assert!(
            text.contains("src/lib.rs") && text.contains("git merge fabric/r1"),
            "{text}"
        );
    }
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert!(!repo.join("fresh.txt").exists());
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);
}

#[tokio::test]
async fn issue_25_apply_refuses_to_write_over_uncommitted_changes() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let ws = open(root.path(), &repo, "r1").await;
    step(ws.as_ref(), 1, "src/lib.rs", LIB_TWO).await;
    step(ws.as_ref(), 2, "notes.txt", "run's notes\n").await;
    write(&repo.join("src/lib.rs"), "// my draft\n");
    write(&repo.join("notes.txt"), "my notes\n");
    let err = ws.apply(ApplyMode::WorkingTree).await.unwrap_err();
    assert_eq!(
        err,
        WorkspaceError::Uncommitted {
            files: vec!["notes.txt".into(), "src/lib.rs".into()]
        }
    );
    assert!(err.to_string().contains("git stash"), "{err}");
    assert_eq!(read(&repo.join("src/lib.rs")), "// my draft\n");
    assert_eq!(read(&repo.join("notes.txt")), "my notes\n");
}

#[tokio::test]
async fn issue_25_apply_commit_puts_one_commit_on_the_current_branch() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let ws = open(root.path(), &repo, "r1").await;
    step(ws.as_ref(), 1, "src/lib.rs", LIB_TWO).await;
    step(ws.as_ref(), 2, "src/two.rs", "// two\n").await;
    // The user has something staged of their own: it stays staged, out of the commit.
    write(&repo.join("mine.txt"), "mine\n");
    git(&repo, &["add", "mine.txt"]);
    let before = git(&repo, &["rev-parse", "HEAD"]);

    let applied = ws.apply(ApplyMode::Commit).await.unwrap();
    let commit = applied.commit.unwrap();
    assert_eq!(git(&repo, &["rev-parse", "main"]), commit.as_str());
    assert_eq!(git(&repo, &["rev-parse", "HEAD~1"]), before);
    assert_eq!(
        git(&repo, &["show", "--format=", "--name-only", "HEAD"]),
        "src/lib.rs\nsrc/two.rs"
    );
    assert!(git(&repo, &["log", "-1", "--format=%B"]).contains("Fabric-Run: r1"));
    assert_eq!(git(&repo, &["status", "--porcelain"]), "A  mine.txt");
    assert_eq!(read(&repo.join("src/two.rs")), "// two\n");
    // Applying again finds nothing left to bring.
    let again = ws.apply(ApplyMode::Commit).await.unwrap();
    assert!(again.files.is_empty() && again.commit.is_none());
}

#[tokio::test]
async fn issue_25_a_scratch_run_has_no_project_to_apply_to() {
    let root = tempfile::tempdir().unwrap();
    let ws = GitWorkspaces::new()
        .create(&scratch(root.path(), "r1"))
        .await
        .unwrap();
    step(ws.as_ref(), 1, "a.txt", "a\n").await;
    let err = ws.apply(ApplyMode::WorkingTree).await.unwrap_err();
    assert_eq!(
        err,
        WorkspaceError::NoProject {
            run_id: "r1".into()
        }
    );
}
