//! Workers without a shared disk: each checkpoint pushed to a bare remote, a run taken over
//! by a worker with another root, and a push that fails.

use super::support::{git, project, read, repo, scratch, step, steps, write};
use fabric_engine::ports::{CommitId, WorkspaceError, WorkspaceOrigin, Workspaces};
use fabric_workspace_git::GitWorkspaces;
use std::path::Path;

fn bare(root: &Path) -> String {
    let remote = root.join("remote.git");
    std::fs::create_dir_all(&remote).unwrap();
    git(&remote, &["init", "--quiet", "--bare"]);
    remote.display().to_string()
}

#[tokio::test]
async fn issue_25_a_takeover_through_a_bare_remote_continues_from_the_last_recorded_commit() {
    let root = tempfile::tempdir().unwrap();
    let origin = repo(root.path());
    let remote = bare(root.path());
    // Two workers, each with its own clone of the project and its own workspace root.
    let (one, two) = (root.path().join("w1"), root.path().join("w2"));
    for w in [&one, &two] {
        std::fs::create_dir_all(w).unwrap();
        git(w, &["clone", "--quiet", origin.to_str().unwrap(), "repo"]);
    }
    let spec_for = |w: &Path| {
        let mut spec = project(w, &w.join("repo"), "run-7");
        spec.remote = Some(remote.clone());
        spec
    };

    // The first worker writes steps 1-3, pushing each; then step 4, pushed, is lost with the
    // worker before its runlog records it.
    let first = GitWorkspaces::new().create(&spec_for(&one)).await.unwrap();
    first.push().await.unwrap();
    let mut recorded = Vec::new();
    for n in 1..=3 {
        recorded.push(
            step(
                first.as_ref(),
                n,
                &format!("step{n}.txt"),
                &format!("{n}\n"),
            )
            .await,
        );
        first.push().await.unwrap();
    }
    step(first.as_ref(), 4, "step4.txt", "unrecorded\n").await;
    first.push().await.unwrap();

    // The second worker has no worktree, no branch, nothing of the first one's disk.
    let second = GitWorkspaces::new().reopen(&spec_for(&two)).await.unwrap();
    assert_eq!(second.base(), first.base());
    assert!(second.dir().starts_with(&two));
    second
        .restore(&CommitId(recorded[2].clone()))
        .await
        .unwrap();
    for n in 1..=3 {
        assert_eq!(
            read(&second.dir().join(format!("step{n}.txt"))),
            format!("{n}\n")
        );
    }
    assert!(!second.dir().join("step4.txt").exists());
    step(second.as_ref(), 4, "step4.txt", "4\n").await;
    second.push().await.unwrap();
    step(second.as_ref(), 5, "step5.txt", "5\n").await;
    second.push().await.unwrap();

    // One commit per step on the remote's branch, none twice, the first worker's in it.
    let range = format!("{}..fabric/run-7", first.base());
    let remote_dir = Path::new(&remote);
    assert_eq!(steps(remote_dir, &range), ["1", "2", "3", "4", "5"]);
    assert_eq!(git(remote_dir, &["show", "fabric/run-7:step4.txt"]), "4");
    assert_eq!(
        git(remote_dir, &["rev-parse", "fabric/run-7~2"]),
        recorded[2]
    );

    // The first worker, back from a stall, may not push over its successor.
    step(first.as_ref(), 5, "late.txt", "late\n").await;
    let err = first.push().await.unwrap_err();
    assert!(matches!(err, WorkspaceError::RemoteMoved { .. }), "{err:?}");
    assert!(!err.is_retryable());
    assert_eq!(steps(remote_dir, &range), ["1", "2", "3", "4", "5"]);
}

#[tokio::test]
async fn issue_25_a_scratch_run_is_taken_over_through_the_remote_too() {
    let root = tempfile::tempdir().unwrap();
    let remote = bare(root.path());
    let mut spec1 = scratch(&root.path().join("w1"), "run-8");
    spec1.remote = Some(remote.clone());
    let first = GitWorkspaces::new().create(&spec1).await.unwrap();
    first.push().await.unwrap();
    let last = step(first.as_ref(), 1, "a.txt", "a\n").await;
    first.push().await.unwrap();

    let mut spec2 = scratch(&root.path().join("w2"), "run-8");
    spec2.remote = Some(remote.clone());
    let second = GitWorkspaces::new().reopen(&spec2).await.unwrap();
    assert_eq!(second.base(), first.base());
    assert_eq!(second.head().await.unwrap().as_str(), last);
    assert_eq!(read(&second.dir().join("a.txt")), "a\n");
    step(second.as_ref(), 2, "b.txt", "b\n").await;
    second.push().await.unwrap();
    let range = format!("{}..fabric/run-8", first.base());
    assert_eq!(steps(Path::new(&remote), &range), ["1", "2"]);
}

#[tokio::test]
async fn issue_25_a_failed_push_is_retryable_and_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let remote = root.path().join("later.git");
    let mut spec = project(root.path(), &repo, "run-9");
    spec.remote = Some(remote.display().to_string());
    let ws = GitWorkspaces::new().create(&spec).await.unwrap();
    step(ws.as_ref(), 1, "a.txt", "a\n").await;
    let err = ws.push().await.unwrap_err();
    assert!(
        matches!(err, WorkspaceError::RemoteUnavailable { .. }),
        "{err:?}"
    );
    assert!(err.is_retryable() && err.kind_tag() == "remote_unavailable");
    step(ws.as_ref(), 2, "b.txt", "b\n").await;
    // The remote comes back: the next push carries every step.
    std::fs::create_dir_all(&remote).unwrap();
    git(&remote, &["init", "--quiet", "--bare"]);
    ws.push().await.unwrap();
    assert_eq!(
        steps(&remote, &format!("{}..fabric/run-9", ws.base())),
        ["1", "2"]
    );
    assert_eq!(
        ws.fetch_branch().await.unwrap(),
        Some(ws.head().await.unwrap())
    );
}

#[tokio::test]
async fn issue_25_reopening_with_nothing_here_or_on_the_remote_is_not_found() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let remote = bare(root.path());
    let mut spec = project(root.path(), &repo, "ghost");
    spec.remote = Some(remote);
    let err = match GitWorkspaces::new().reopen(&spec).await {
        Ok(_) => panic!("nothing to reopen"),
        Err(e) => e,
    };
    assert!(matches!(err, WorkspaceError::NotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("nor on the remote"), "{err}");
    let mut spec = scratch(root.path(), "ghost");
    spec.origin = WorkspaceOrigin::Scratch {
        git_dir: root.path().join("h"),
    };
    write(&root.path().join("unused"), "");
    assert!(GitWorkspaces::new().reopen(&spec).await.is_err());
}
