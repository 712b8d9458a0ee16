//! A scratch workspace: the same checkpoints and restore, with the history outside it.

use super::support::{git, note, read, scratch, step, steps, write};
use fabric_engine::ports::{CommitId, WorkspaceError, WorkspaceOrigin, Workspaces};
use fabric_workspace_git::GitWorkspaces;

#[tokio::test]
async fn issue_25_a_scratch_workspace_keeps_its_history_outside_with_checkpoints_and_restore() {
    let root = tempfile::tempdir().unwrap();
    let spec = scratch(root.path(), "r1");
    let spaces = GitWorkspaces::new();
    let ws = spaces.create(&spec).await.unwrap();
    assert_eq!(ws.branch(), "fabric/r1");
    // Nothing of git is in the workspace for the tools to see or change.
    assert_eq!(std::fs::read_dir(ws.dir()).unwrap().count(), 0);
    let one = step(ws.as_ref(), 1, "a.txt", "one\n").await;
    assert_eq!(
        ws.checkpoint(&note(2, &["read_file"]))
            .await
            .unwrap()
            .commit,
        None
    );
    step(ws.as_ref(), 3, "sub/b.txt", "b\n").await;
    // A `.git` the agent makes in the workspace is not where the history is.
    write(&ws.dir().join(".git/HEAD"), "ref: refs/heads/evil\n");
    write(&ws.dir().join("junk.txt"), "junk\n");
    ws.restore(&CommitId(one.clone())).await.unwrap();
    assert_eq!(read(&ws.dir().join("a.txt")), "one\n");
    assert!(!ws.dir().join("sub").exists() && !ws.dir().join("junk.txt").exists());
    assert!(!ws.dir().join(".git").exists());

    let git_dir = root.path().join("history/r1");
    let range = format!("{}..fabric/r1", ws.base());
    assert_eq!(steps(&git_dir, &range), ["1"]);
    // Reopened by a continued run: the same base, the same head.
    let again = spaces.reopen(&spec).await.unwrap();
    assert_eq!(again.base(), ws.base());
    assert_eq!(again.head().await.unwrap().as_str(), one);
    assert_eq!(git(&git_dir, &["rev-list", "--count", "fabric/r1"]), "2");
    // Discard removes the history; the directory is the run store's.
    again.discard().await.unwrap();
    assert!(!git_dir.exists() && spec.dir.exists());
}

#[tokio::test]
async fn issue_25_a_scratch_history_inside_its_workspace_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let mut spec = scratch(root.path(), "r1");
    spec.origin = WorkspaceOrigin::Scratch {
        git_dir: spec.dir.join(".history"),
    };
    let err = match GitWorkspaces::new().create(&spec).await {
        Ok(_) => panic!("inside"),
        Err(e) => e,
    };
    assert!(matches!(err, WorkspaceError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("outside the workspace"), "{err}");
}

#[tokio::test]
async fn issue_25_a_scratch_workspace_starts_from_what_its_directory_holds() {
    let root = tempfile::tempdir().unwrap();
    let spec = scratch(root.path(), "r1");
    write(&spec.dir.join("given.txt"), "given\n");
    let ws = GitWorkspaces::new().create(&spec).await.unwrap();
    write(&ws.dir().join("given.txt"), "changed\n");
    ws.checkpoint(&note(1, &["write_file"])).await.unwrap();
    ws.restore(ws.base()).await.unwrap();
    assert_eq!(read(&ws.dir().join("given.txt")), "given\n");
}
