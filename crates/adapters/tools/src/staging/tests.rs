use super::*;
use std::fs;

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let ws = root.path().join("workspace");
    fs::create_dir_all(ws.join("src")).unwrap_or_else(|e| panic!("{e}"));
    fs::write(ws.join("src/main.py"), "print('hi')\n").unwrap_or_else(|e| panic!("{e}"));
    fs::write(ws.join("old.txt"), "old\n").unwrap_or_else(|e| panic!("{e}"));
    (root, ws)
}

fn stager() -> CopyStager {
    CopyStager::new(vec![".git".to_owned()])
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn staged_changes_reach_the_workspace_only_when_applied() {
    let (_root, ws) = workspace();
    let staged = stager()
        .stage(&ws, "run-0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = staged.dir().to_path_buf();
    assert_ne!(dir, ws);
    assert!(staged.diff().await.unwrap_or_default().changes.is_empty());

    fs::write(dir.join("src/main.py"), "print('hello')\n").unwrap_or_else(|e| panic!("{e}"));
    fs::write(dir.join("new.txt"), "new\n").unwrap_or_else(|e| panic!("{e}"));
    fs::remove_file(dir.join("old.txt")).unwrap_or_else(|e| panic!("{e}"));
    let diff = staged.diff().await.unwrap_or_else(|e| panic!("{e}"));
    let kinds: Vec<(&str, ChangeKind)> = diff
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("new.txt", ChangeKind::Added),
            ("old.txt", ChangeKind::Deleted),
            ("src/main.py", ChangeKind::Modified)
        ]
    );
    assert!(
        diff.text.contains(
            "--- a/src/main.py\n+++ b/src/main.py\n@@ -1,1 +1,1 @@\n-print('hi')\n+print('hello')\n"
        ),
        "{}",
        diff.text
    );
    // Nothing reached the workspace yet.
    assert_eq!(read(&ws.join("src/main.py")), "print('hi')\n");
    assert!(ws.join("old.txt").exists() && !ws.join("new.txt").exists());

    // Reopened (a continued run): the same area and the same changes.
    let again = stager()
        .stage(&ws, "run-0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.diff().await.unwrap_or_default().changes, diff.changes);

    let applied = staged.apply().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(applied.applied, ["new.txt", "old.txt", "src/main.py"]);
    assert_eq!(read(&ws.join("src/main.py")), "print('hello')\n");
    assert_eq!(read(&ws.join("new.txt")), "new\n");
    assert!(!ws.join("old.txt").exists());
    // Applying twice changes nothing more, and leaves no temporary file behind.
    staged.apply().await.unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<String> = fs::read_dir(&ws)
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with(".fabric-staged")),
        "{names:?}"
    );
}

#[tokio::test]
async fn a_file_written_back_unchanged_is_no_change() {
    let (_root, ws) = workspace();
    let staged = stager()
        .stage(&ws, "r-1")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    fs::write(staged.dir().join("old.txt"), "old\n").unwrap_or_else(|e| panic!("{e}"));
    assert!(staged.diff().await.unwrap_or_default().changes.is_empty());
}

#[tokio::test]
async fn protected_paths_are_shown_but_never_applied() {
    let (_root, ws) = workspace();
    let staged = stager()
        .stage(&ws, "r-0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    fs::create_dir_all(staged.dir().join(".git/hooks")).unwrap_or_else(|e| panic!("{e}"));
    fs::write(
        staged.dir().join(".git/hooks/pre-commit"),
        "#!/bin/sh\nevil\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    fs::write(staged.dir().join("ok.txt"), "ok\n").unwrap_or_else(|e| panic!("{e}"));
    let diff = staged.diff().await.unwrap_or_default();
    assert!(diff.text.contains("will NOT be applied"), "{}", diff.text);
    let applied = staged.apply().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(applied.applied, ["ok.txt"]);
    assert_eq!(applied.refused, [".git/hooks/pre-commit"]);
    assert!(!ws.join(".git").exists());
}

#[tokio::test]
async fn applying_never_follows_a_symlink_out_of_the_workspace() {
    let (root, ws) = workspace();
    let outside = root.path().join("outside");
    fs::create_dir(&outside).unwrap_or_else(|e| panic!("{e}"));
    let staged = stager()
        .stage(&ws, "r-0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    fs::create_dir(staged.dir().join("d")).unwrap_or_else(|e| panic!("{e}"));
    fs::write(staged.dir().join("d/f.txt"), "x\n").unwrap_or_else(|e| panic!("{e}"));
    fs::write(staged.dir().join("a.txt"), "a\n").unwrap_or_else(|e| panic!("{e}"));
    // Meanwhile the workspace got `d` as a link to a directory outside it.
    std::os::unix::fs::symlink(&outside, ws.join("d")).unwrap_or_else(|e| panic!("{e}"));
    let e = staged.apply().await.unwrap_err().to_string();
    assert!(e.contains("symbolic link"), "{e}");
    assert!(!outside.join("f.txt").exists());
    assert!(
        !ws.join("a.txt").exists(),
        "nothing is applied when one change cannot be"
    );
}

#[tokio::test]
async fn names_that_could_leave_the_staging_root_are_refused() {
    let (_root, ws) = workspace();
    for bad in ["", "../x", "a/b", "a b"] {
        assert!(stager().stage(&ws, bad).await.is_err(), "{bad}");
    }
}

#[tokio::test]
async fn a_workspace_file_changed_since_staging_is_not_overwritten() {
    let (_root, ws) = workspace();
    let staged = stager()
        .stage(&ws, "r-0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    fs::write(staged.dir().join("old.txt"), "staged\n").unwrap_or_else(|e| panic!("{e}"));
    fs::write(staged.dir().join("new.txt"), "new\n").unwrap_or_else(|e| panic!("{e}"));
    // Another member changed the same file in the workspace meanwhile.
    fs::write(ws.join("old.txt"), "theirs\n").unwrap_or_else(|e| panic!("{e}"));
    let e = staged.apply().await.unwrap_err().to_string();
    assert!(
        e.starts_with("nothing was applied") && e.contains("`old.txt` in the workspace changed"),
        "{e}"
    );
    assert_eq!(read(&ws.join("old.txt")), "theirs\n");
    assert!(!ws.join("new.txt").exists());
    // Issue #27: `new.txt` sorts first, so its new content was written beside it before
    // `old.txt` was found changed; applying all or nothing removes it again.
    let mut names: Vec<String> = fs::read_dir(&ws)
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|e| {
            e.unwrap_or_else(|e| panic!("{e}"))
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["old.txt", "src"],
        "nothing half-applied is left behind"
    );
}

/// Issue #27: the staging area's size limits hold. At a small scale: the same code counts
/// toward [`MAX_STAGED_BYTES`] and [`MAX_STAGED_ENTRIES`]. The workspace holds 3 entries
/// (`src`, `src/main.py`, `old.txt`) and 16 bytes.
#[tokio::test]
async fn issue_27_a_workspace_over_the_staging_limits_is_refused_and_not_copied() {
    let (root, ws) = workspace();
    let limited = |bytes, entries| CopyStager {
        protected: Arc::new(Vec::new()),
        limits: (bytes, entries),
    };
    let staged_root = root.path().join("staged");
    let left = || {
        fs::read_dir(&staged_root)
            .map(|d| d.count())
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let Err(e) = limited(1 << 20, 2).stage(&ws, "r-0").await else {
        panic!("3 entries were staged under a limit of 2");
    };
    // Issue #28: a workspace too large is refused (the work must change), not an I/O error.
    assert_eq!(e.remedy(), fabric_engine::Remedy::FixInput, "{e}");
    let e = e.to_string();
    assert!(
        e.contains("more than 2 files") && e.contains("refuses"),
        "{e}"
    );
    assert_eq!(left(), 0, "a refused copy is removed");
    let Err(e) = limited(15, 100).stage(&ws, "r-1").await else {
        panic!("16 bytes were staged under a limit of 15");
    };
    let e = e.to_string();
    assert!(e.contains("more than 15 bytes"), "{e}");
    assert_eq!(left(), 0, "a refused copy is removed");
    // Exactly at both limits it is staged.
    limited(16, 3)
        .stage(&ws, "r-2")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn an_edit_that_keeps_size_and_mtime_is_still_seen() {
    let (_root, ws) = workspace();
    let staged = stager()
        .stage(&ws, "r-0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let path = staged.dir().join("old.txt");
    let before = fs::metadata(&path).unwrap_or_else(|e| panic!("{e}"));
    fs::write(&path, "OLD\n").unwrap_or_else(|e| panic!("{e}"));
    // As `touch -r` or `cp -p` would: the modification time put back.
    let file = fs::File::options()
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{e}"));
    file.set_modified(before.modified().unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    let diff = staged.diff().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(diff.changes.len(), 1, "{:?}", diff.changes);
    assert_eq!(diff.changes[0].kind, ChangeKind::Modified);
}

#[tokio::test]
async fn names_that_are_not_utf8_are_refused_not_lost() {
    use std::os::unix::ffi::OsStrExt;
    let (_root, ws) = workspace();
    let staged = stager()
        .stage(&ws, "r-0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let name = std::ffi::OsStr::from_bytes(b"bad-\xff.txt");
    fs::write(staged.dir().join(name), "x").unwrap_or_else(|e| panic!("{e}"));
    let e = staged.diff().await.unwrap_err().to_string();
    assert!(e.contains("not UTF-8"), "{e}");
}

#[tokio::test]
async fn file_names_cannot_forge_diff_lines_and_discard_removes_the_area() {
    let (_root, ws) = workspace();
    let staged = stager()
        .stage(&ws, "r-0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    fs::write(staged.dir().join("a\n+++ evil"), "x\n").unwrap_or_else(|e| panic!("{e}"));
    let diff = staged.diff().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(diff.text.contains("+++ b/a\\n+++ evil\n"), "{}", diff.text);
    let dir = staged.dir().to_path_buf();
    staged.discard().await;
    assert!(!dir.exists());
    assert!(!dir.with_extension("manifest.json").exists());
}
