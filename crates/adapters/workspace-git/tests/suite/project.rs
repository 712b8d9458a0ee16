//! A run on the user's repository: its worktree, its per-step commits, restore, diff and
//! discard, with the user's own working tree left alone.

use super::support::{LIB_TWO, git, note, open, project, read, repo, step, steps, write};
use fabric_engine::ports::{StepNote, WorkspaceError, WorkspaceOrigin, Workspaces};
use fabric_workspace_git::{COMMIT_EMAIL, COMMIT_NAME, GitWorkspaces};
use std::os::unix::fs::PermissionsExt;

#[tokio::test]
async fn issue_25_a_run_gets_its_own_worktree_and_branch_and_the_dirty_user_tree_is_untouched() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    // The user's uncommitted work: a change, a staged file and an untracked one.
    write(&repo.join("README.md"), "# project (my edit)\n");
    write(&repo.join("staged.txt"), "staged\n");
    git(&repo, &["add", "staged.txt"]);
    write(&repo.join("notes.txt"), "untracked\n");
    let status_before = git(&repo, &["status", "--porcelain"]);
    let head_before = git(&repo, &["rev-parse", "HEAD"]);

    let spec = project(root.path(), &repo, "r1");
    let ws = GitWorkspaces::new().create(&spec).await.unwrap();
    assert_eq!(ws.branch(), "fabric/r1");
    assert_eq!(ws.base().as_str(), head_before);
    assert!(
        !ws.dir().starts_with(&repo),
        "the worktree is outside the user's tree"
    );
    // The run sees the committed project, not the user's uncommitted work.
    assert_eq!(read(&ws.dir().join("README.md")), "# project\n");
    assert!(!ws.dir().join("notes.txt").exists() && !ws.dir().join("staged.txt").exists());

    step(ws.as_ref(), 1, "README.md", "# project (the run's edit)\n").await;
    step(ws.as_ref(), 2, "src/new.rs", "// new\n").await;

    assert_eq!(git(&repo, &["status", "--porcelain"]), status_before);
    assert_eq!(read(&repo.join("README.md")), "# project (my edit)\n");
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head_before);
    assert_eq!(git(&repo, &["symbolic-ref", "--short", "HEAD"]), "main");
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    assert!(
        worktrees.contains("branch refs/heads/fabric/r1"),
        "{worktrees}"
    );
}

#[tokio::test]
async fn issue_25_every_step_that_changed_files_is_one_commit_by_the_fabric_with_trailers() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    // The user's repository asks for hooks and signing; neither may touch the fabric's commits.
    write(&repo.join(".git/hooks/pre-commit"), "#!/bin/sh\nexit 1\n");
    write(&repo.join(".git/hooks/commit-msg"), "#!/bin/sh\nexit 1\n");
    for hook in ["pre-commit", "commit-msg"] {
        let path = repo.join(".git/hooks").join(hook);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    git(&repo, &["config", "commit.gpgsign", "true"]);
    git(&repo, &["config", "user.signingkey", "NOKEY"]);
    // Hooks named by the repository's config, each leaving a mark if it ever runs: checking
    // out the worktree, moving a ref and committing would all call one.
    let hooks = root.path().join("hooks");
    let marks = root.path().join("marks");
    for hook in [
        "post-checkout",
        "reference-transaction",
        "pre-commit",
        "commit-msg",
        "post-commit",
        "pre-push",
    ] {
        let path = hooks.join(hook);
        write(
            &path,
            &format!(
                "#!/bin/sh\nmkdir -p {0}; touch {0}/{hook}\n",
                marks.display()
            ),
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    git(
        &repo,
        &["config", "core.hooksPath", hooks.to_str().unwrap()],
    );
    // Settings that would hide new files from `git status` or sign the log's output.
    git(&repo, &["config", "status.showUntrackedFiles", "no"]);
    git(&repo, &["config", "log.showSignature", "true"]);

    let ws = open(root.path(), &repo, "r1").await;
    let one = step(ws.as_ref(), 1, "a.txt", "a\n").await;
    // A step that changed nothing makes no commit.
    let none = ws.checkpoint(&note(2, &["read_file"])).await.unwrap();
    assert_eq!(none.commit, None);
    write(&ws.dir().join("b.txt"), "b\n");
    std::fs::remove_file(ws.dir().join("README.md")).unwrap();
    let three = ws
        .checkpoint(&StepNote {
            step: 3,
            tools: vec!["write_file".into(), "shell".into()],
            summary: Some("added b, removed the readme".into()),
        })
        .await
        .unwrap()
        .commit
        .unwrap();
    assert_eq!(ws.head().await.unwrap(), three);

    let dir = ws.dir();
    let range = format!("{}..fabric/r1", ws.base());
    assert_eq!(steps(dir, &range), ["1", "3"]);
    assert_eq!(git(dir, &["rev-parse", "HEAD~1"]), one);
    let who = git(dir, &["log", "-1", "--format=%an <%ae>|%cn <%ce>"]);
    let fabric = format!("{COMMIT_NAME} <{COMMIT_EMAIL}>");
    assert_eq!(who, format!("{fabric}|{fabric}"));
    let message = git(dir, &["log", "-1", "--format=%B"]);
    assert!(
        message.starts_with("fabric: run r1, step 3: write_file, shell"),
        "{message}"
    );
    assert!(message.contains("added b, removed the readme"), "{message}");
    for trailer in [
        "Fabric-Run: r1".to_string(),
        "Fabric-Step: 3".to_string(),
        "Fabric-Tools: write_file, shell".to_string(),
        format!("Fabric-Base: {}", ws.base()),
    ] {
        assert!(message.contains(&trailer), "{trailer} in {message}");
    }
    assert_eq!(
        git(dir, &["show", "--format=", "--name-status", "HEAD"]),
        "D\tREADME.md\nA\tb.txt"
    );
    assert_eq!(git(dir, &["status", "--porcelain"]), "");
    assert!(
        !marks.exists(),
        "a hook ran: {:?}",
        std::fs::read_dir(&marks).ok()
    );
}

#[tokio::test]
async fn issue_25_a_detached_head_or_a_named_base_is_where_the_run_starts() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let first = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["tag", "v1"]);
    write(&repo.join("later.txt"), "later\n");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "--quiet", "-m", "later"]);
    let second = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["checkout", "--quiet", "--detach", &first]);

    let spaces = GitWorkspaces::new();
    let detached = spaces
        .create(&project(root.path(), &repo, "r1"))
        .await
        .unwrap();
    assert_eq!(detached.base().as_str(), first);
    assert!(!detached.dir().join("later.txt").exists());

    let mut spec = project(root.path(), &repo, "r2");
    spec.origin = WorkspaceOrigin::Project {
        repo: repo.clone(),
        base: Some("main".into()),
    };
    let named = spaces.create(&spec).await.unwrap();
    assert_eq!(named.base().as_str(), second);
    assert!(named.dir().join("later.txt").exists());

    // A directory inside the working tree names its repository.
    let mut spec = project(root.path(), &repo.join("src"), "r3");
    spec.origin = WorkspaceOrigin::Project {
        repo: repo.join("src"),
        base: Some("v1".into()),
    };
    let tagged = spaces.create(&spec).await.unwrap();
    assert_eq!(tagged.base().as_str(), first);
    assert_eq!(
        git(&repo, &["rev-parse", "HEAD"]),
        first,
        "still detached where it was"
    );
}

#[tokio::test]
async fn issue_25_ignored_files_are_not_committed_and_are_listed() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    write(&repo.join(".gitignore"), "target/\n*.log\n");
    git(&repo, &["add", ".gitignore"]);
    git(&repo, &["commit", "--quiet", "-m", "ignore"]);
    let ws = open(root.path(), &repo, "r1").await;
    write(&ws.dir().join("target/debug/app"), "binary\n");
    write(&ws.dir().join("build.log"), "log\n");
    // Only ignored files: nothing to commit, but they are named.
    let done = ws.checkpoint(&note(1, &["shell"])).await.unwrap();
    assert_eq!(done.commit, None);
    assert_eq!(done.ignored, ["build.log", "target/"]);
    write(&ws.dir().join("src/lib.rs"), LIB_TWO);
    let done = ws.checkpoint(&note(2, &["shell"])).await.unwrap();
    assert!(done.commit.is_some());
    assert_eq!(done.ignored, ["build.log", "target/"]);
    let files = git(ws.dir(), &["ls-tree", "-r", "--name-only", "HEAD"]);
    assert!(
        !files.contains("target") && !files.contains("build.log"),
        "{files}"
    );
}

#[tokio::test]
async fn issue_25_restore_brings_back_a_checkpoint_exactly_but_what_must_stay() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    write(&repo.join(".gitignore"), "target/\ncache/\n");
    git(&repo, &["add", ".gitignore"]);
    git(&repo, &["commit", "--quiet", "-m", "ignore"]);
    let mut spec = project(root.path(), &repo, "r1");
    spec.keep = vec!["cache/".into()];
    let spaces = GitWorkspaces::new();
    let ws = spaces.create(&spec).await.unwrap();
    let one = step(ws.as_ref(), 1, "a.txt", "one\n").await;
    step(ws.as_ref(), 2, "a.txt", "two\n").await;
    // What a step the runlog never recorded (or a leftover process) did afterwards.
    write(&ws.dir().join("a.txt"), "three\n");
    write(&ws.dir().join("stray/new.txt"), "stray\n");
    write(&ws.dir().join("target/out"), "build\n");
    write(&ws.dir().join("cache/keep"), "cache\n");
    std::fs::remove_file(ws.dir().join("README.md")).unwrap();

    // A process that continues the run reopens the workspace and restores the checkpoint.
    let again = spaces.reopen(&spec).await.unwrap();
    assert_eq!(again.base(), ws.base());
    again
        .restore(&fabric_engine::ports::CommitId(one.clone()))
        .await
        .unwrap();
    assert_eq!(read(&ws.dir().join("a.txt")), "one\n");
    assert!(ws.dir().join("README.md").exists());
    assert!(!ws.dir().join("stray").exists() && !ws.dir().join("target").exists());
    assert_eq!(read(&ws.dir().join("cache/keep")), "cache\n");
    assert_eq!(git(ws.dir(), &["status", "--porcelain"]), "");
    // The next step follows the restored one: the abandoned step 2 is not in the history.
    step(again.as_ref(), 2, "a.txt", "two again\n").await;
    let range = format!("{}..fabric/r1", ws.base());
    assert_eq!(steps(ws.dir(), &range), ["1", "2"]);
    assert_eq!(git(ws.dir(), &["rev-parse", "HEAD~1"]), one);
    // Back to the base itself.
    again.restore(again.base()).await.unwrap();
    assert!(!ws.dir().join("a.txt").exists());
}

#[tokio::test]
async fn issue_25_restore_refuses_a_commit_that_is_not_the_runs() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let spaces = GitWorkspaces::new();
    let ws = spaces
        .create(&project(root.path(), &repo, "r1"))
        .await
        .unwrap();
    let other = spaces
        .create(&project(root.path(), &repo, "r2"))
        .await
        .unwrap();
    let theirs = step(other.as_ref(), 1, "x.txt", "x\n").await;
    for commit in [
        theirs.as_str(),
        "0123456789abcdef0123456789abcdef01234567",
        "--hard",
    ] {
        let err = ws
            .restore(&fabric_engine::ports::CommitId(commit.into()))
            .await
            .unwrap_err();
        assert!(
            matches!(err, WorkspaceError::CommitNotFound { .. }),
            "{err:?}"
        );
    }
}

#[tokio::test]
async fn issue_25_diff_against_the_base_as_stat_and_patch() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let ws = open(root.path(), &repo, "r1").await;
    assert!(ws.diff_stat().await.unwrap().files.is_empty());
    step(ws.as_ref(), 1, "src/lib.rs", LIB_TWO).await;
    std::fs::write(ws.dir().join("logo.bin"), [0u8, 159, 146, 150, 0, 1]).unwrap();
    write(&ws.dir().join("docs/new.md"), "a\nb\n");
    ws.checkpoint(&note(2, &["write_file"])).await.unwrap();
    let stat = ws.diff_stat().await.unwrap();
    let rows: Vec<_> = stat
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.added, f.removed))
        .collect();
    assert_eq!(
        rows,
        [
            ("docs/new.md", Some(2), Some(0)),
            ("logo.bin", None, None),
            ("src/lib.rs", Some(1), Some(1)),
        ]
    );
    assert_eq!(stat.lines(), (3, 1));
    let patch = ws.diff().await.unwrap();
    assert!(patch.contains("-    1\n+    2\n"), "{patch}");
    assert!(
        patch.contains("Binary files /dev/null and b/logo.bin differ"),
        "{patch}"
    );
}

#[tokio::test]
async fn issue_25_discard_removes_the_worktree_and_the_branch_and_is_idempotent() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let spec = project(root.path(), &repo, "r1");
    let spaces = GitWorkspaces::new();
    let ws = spaces.create(&spec).await.unwrap();
    step(ws.as_ref(), 1, "a.txt", "a\n").await;
    write(&ws.dir().join("untracked.txt"), "left over\n");
    ws.discard().await.unwrap();
    assert!(!spec.dir.exists());
    assert_eq!(git(&repo, &["branch", "--list", "fabric/*"]), "");
    assert!(!git(&repo, &["worktree", "list"]).contains("r1"));
    spaces.discard(&spec).await.unwrap();
    // A worktree whose directory someone deleted by hand is discarded too (pruned).
    let ws = spaces
        .create(&project(root.path(), &repo, "r2"))
        .await
        .unwrap();
    let dir = ws.dir().to_path_buf();
    drop(ws);
    std::fs::remove_dir_all(&dir).unwrap();
    spaces
        .discard(&project(root.path(), &repo, "r2"))
        .await
        .unwrap();
    assert_eq!(git(&repo, &["branch", "--list", "fabric/*"]), "");
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
    // Reopening what was discarded says so.
    let err = match spaces.reopen(&spec).await {
        Ok(_) => panic!("discarded"),
        Err(e) => e,
    };
    assert!(matches!(err, WorkspaceError::NotFound { .. }), "{err:?}");
    // A run whose repository was deleted since: only its directory is left to remove.
    let ws = spaces
        .create(&project(root.path(), &repo, "r3"))
        .await
        .unwrap();
    let dir = ws.dir().to_path_buf();
    drop(ws);
    std::fs::remove_dir_all(&repo).unwrap();
    spaces
        .discard(&project(root.path(), &repo, "r3"))
        .await
        .unwrap();
    assert!(!dir.exists());
}

#[tokio::test]
async fn issue_25_reopen_rebuilds_a_deleted_worktree_from_the_branch() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let spec = project(root.path(), &repo, "r1");
    let spaces = GitWorkspaces::new();
    let ws = spaces.create(&spec).await.unwrap();
    let one = step(ws.as_ref(), 1, "a.txt", "a\n").await;
    let base = ws.base().clone();
    drop(ws);
    std::fs::remove_dir_all(&spec.dir).unwrap();
    let again = spaces.reopen(&spec).await.unwrap();
    assert_eq!(again.base(), &base);
    assert_eq!(again.head().await.unwrap().as_str(), one);
    assert_eq!(read(&again.dir().join("a.txt")), "a\n");
    // A directory in its place holding something else is not taken over.
    drop(again);
    std::fs::remove_dir_all(&spec.dir).unwrap();
    write(&spec.dir.join("other.txt"), "someone else's\n");
    let err = match spaces.reopen(&spec).await {
        Ok(_) => panic!("the directory holds something else"),
        Err(e) => e,
    };
    assert!(matches!(err, WorkspaceError::DirTaken { .. }), "{err:?}");
    assert_eq!(read(&spec.dir.join("other.txt")), "someone else's\n");
}

#[tokio::test]
async fn issue_25_two_runs_work_on_one_repository_at_once() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let spaces = GitWorkspaces::new();
    let (spec_a, spec_b) = (
        project(root.path(), &repo, "ra"),
        project(root.path(), &repo, "rb"),
    );
    let (a, b) = tokio::join!(spaces.create(&spec_a), spaces.create(&spec_b));
    let (a, b) = (a.unwrap(), b.unwrap());
    for n in 1..=3 {
        let (text_a, text_b) = (format!("a{n}\n"), format!("b{n}\n"));
        let (x, y) = tokio::join!(
            step(a.as_ref(), n, "shared.txt", &text_a),
            step(b.as_ref(), n, "shared.txt", &text_b),
        );
        assert_ne!(x, y);
    }
    assert_eq!(read(&a.dir().join("shared.txt")), "a3\n");
    assert_eq!(read(&b.dir().join("shared.txt")), "b3\n");
    assert_eq!(
        steps(&repo, &format!("{}..fabric/ra", a.base())),
        ["1", "2", "3"]
    );
    assert_eq!(
        steps(&repo, &format!("{}..fabric/rb", b.base())),
        ["1", "2", "3"]
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn issue_25_submodules_stay_empty_and_lfs_pointers_stay_pointers() {
    let root = tempfile::tempdir().unwrap();
    let sub = root.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    git(&sub, &["init", "--quiet"]);
    write(&sub.join("s.txt"), "s\n");
    git(&sub, &["add", "."]);
    git(&sub, &["commit", "--quiet", "-m", "s"]);
    let repo = repo(root.path());
    git(
        &repo,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "--quiet",
            "../sub",
            "sub",
        ],
    );
    // An LFS file, with the repository set up for a git-lfs that is not installed here.
    write(
        &repo.join(".gitattributes"),
        "*.bin filter=lfs diff=lfs merge=lfs -text\n",
    );
    let pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 3\n";
    write(&repo.join("big.bin"), pointer);
    git(&repo, &["-c", "filter.lfs.clean=cat", "add", "."]);
    git(
        &repo,
        &[
            "-c",
            "filter.lfs.clean=cat",
            "commit",
            "--quiet",
            "-m",
            "sub and lfs",
        ],
    );
    git(
        &repo,
        &["config", "filter.lfs.process", "git-lfs filter-process"],
    );
    git(&repo, &["config", "filter.lfs.required", "true"]);

    let ws = open(root.path(), &repo, "r1").await;
    // The submodule is not checked out; what is written into it is not recorded.
    assert_eq!(std::fs::read_dir(ws.dir().join("sub")).unwrap().count(), 0);
    write(&ws.dir().join("sub/new.txt"), "lost\n");
    assert_eq!(
        ws.checkpoint(&note(1, &["shell"])).await.unwrap().commit,
        None
    );
    // The LFS file is its pointer; an edit to it is committed as text, no filter run.
    assert_eq!(read(&ws.dir().join("big.bin")), pointer);
    write(&ws.dir().join("big.bin"), &format!("{pointer}edited\n"));
    assert!(
        ws.checkpoint(&note(2, &["shell"]))
            .await
            .unwrap()
            .commit
            .is_some()
    );
    assert!(git(ws.dir(), &["show", "HEAD:big.bin"]).ends_with("edited"));
}

#[tokio::test]
async fn issue_25_odd_file_names_are_committed_as_named_not_as_patterns() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let ws = open(root.path(), &repo, "r1").await;
    // As a pattern `[x].md` would name `x.md`, and the file itself would not be staged.
    write(&ws.dir().join("[x].md"), "brackets\n");
    write(&ws.dir().join("a*.txt"), "star\n");
    write(&ws.dir().join("dir with space/ünï [x].md"), "odd\n");
    std::fs::rename(ws.dir().join("README.md"), ws.dir().join("-README.md")).unwrap();
    let done = ws.checkpoint(&note(1, &["shell"])).await.unwrap();
    assert!(done.commit.is_some());
    let files = git(
        ws.dir(),
        &[
            "show",
            "--format=",
            "--name-only",
            "--no-renames",
            "-z",
            "HEAD",
        ],
    );
    let mut files: Vec<&str> = files.split('\0').filter(|f| !f.is_empty()).collect();
    files.sort();
    assert_eq!(
        files,
        [
            "-README.md",
            "README.md",
            "[x].md",
            "a*.txt",
            "dir with space/ünï [x].md"
        ]
    );
    assert_eq!(git(ws.dir(), &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn issue_25_a_process_killed_mid_checkpoint_leaves_no_lock_that_stops_the_resume() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let spec = project(root.path(), &repo, "r1");
    let spaces = GitWorkspaces::new();
    let ws = spaces.create(&spec).await.unwrap();
    step(ws.as_ref(), 1, "a.txt", "a\n").await;
    // What a `git add` or `update-ref` killed with the fabric leaves behind.
    for lock in ["index.lock", "refs/heads/fabric/r1.lock"] {
        let path = git(ws.dir(), &["rev-parse", "--git-path", lock]);
        write(&ws.dir().join(path), "");
    }
    write(&ws.dir().join("b.txt"), "b\n");
    assert!(ws.checkpoint(&note(2, &["shell"])).await.is_err());
    drop(ws);
    let again = spaces.reopen(&spec).await.unwrap();
    step(again.as_ref(), 2, "b.txt", "b\n").await;
    assert_eq!(
        steps(again.dir(), &format!("{}..fabric/r1", again.base())),
        ["1", "2"]
    );
}

/// Runs on one repository started at the same moment each get their worktree: git reads
/// every worktree's records before making one, and one half-made by a neighbour failed it
/// ("failed to read .git/worktrees/<name>/commondir", seen in the two-runs test under load).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_39_worktrees_made_at_once_on_one_repository_all_succeed() {
    let root = tempfile::tempdir().unwrap();
    let repo = repo(root.path());
    let spaces = GitWorkspaces::new();
    for round in 0..3 {
        let made: Vec<_> = (0..8)
            .map(|n| {
                let spec = project(root.path(), &repo, &format!("c{round}-{n}"));
                let spaces = spaces.clone();
                tokio::spawn(async move { spaces.create(&spec).await.map(|_| ()) })
            })
            .collect();
        for made in made {
            made.await.unwrap().unwrap();
        }
    }
}
