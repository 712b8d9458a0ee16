//! What a project workspace costs (issue #25), the adapter alone: creating a run's worktree
//! on a generated repository of 50,000 files, and a checkpoint per step over a 10-step run
//! with small edits (one to three files changed per step), on that repository and on a small
//! one. Also: a checkpoint with nothing changed, a restore, and a push per step to a bare
//! remote; the object store's size before and after the worktrees, to show none is
//! copied; and, as the floor, what starting one git process costs.
//!
//! Run: `cargo bench -p fabric-workspace-git --bench worktree` (`BENCH_FILES`, 50000;
//! `BENCH_REPS`, 5 worktrees and 5 runs of 10 steps per repository).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use fabric_engine::ports::{StepNote, Workspace, WorkspaceOrigin, WorkspaceSpec, Workspaces};
use fabric_workspace_git::GitWorkspaces;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@b")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@b")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository of `files` source-like files of about 300 bytes, 100 to a directory.
fn generate(dir: &Path, files: usize) -> Duration {
    let start = Instant::now();
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "--quiet", "--initial-branch=main"]);
    for i in 0..files {
        let sub = dir.join(format!("src/m{:03}", i / 100));
        if i.is_multiple_of(100) {
            std::fs::create_dir_all(&sub).unwrap();
        }
        let body = format!(
            "// file {i}\npub fn f{i}(x: u64) -> u64 {{\n    x.wrapping_mul({i}).rotate_left(7) ^ 0x9e37_79b9\n}}\n\n#[cfg(test)]\nmod tests {{\n    #[test]\n    fn t() {{ assert_eq!(super::f{i}(0), 0x9e37_79b9); }}\n}}\n"
        );
        std::fs::write(sub.join(format!("f{i}.rs")), body).unwrap();
    }
    git(dir, &["add", "."]);
    git(
        dir,
        &["-c", "gc.auto=0", "commit", "--quiet", "-m", "generated"],
    );
    // Packed, as a real repository's history is (and so no background gc runs mid-bench).
    git(dir, &["gc", "--quiet"]);
    start.elapsed()
}

fn du(path: &Path) -> u64 {
    let out = Command::new("du").args(["-sk"]).arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn stats(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let n = samples.len();
    let mean = samples.iter().sum::<Duration>() / n as u32;
    println!(
        "{name:<44} n={n:<3} median {:>8.1} ms  mean {:>8.1} ms  min {:>8.1} ms  max {:>8.1} ms",
        ms(samples[n / 2]),
        ms(mean),
        ms(samples[0]),
        ms(samples[n - 1])
    );
}

fn spec(root: &Path, repo: &Path, id: &str, remote: Option<String>) -> WorkspaceSpec {
    WorkspaceSpec {
        run_id: id.to_string(),
        origin: WorkspaceOrigin::Project {
            repo: repo.to_path_buf(),
            base: None,
        },
        dir: root.join("worktrees").join(id),
        remote,
        keep: Vec::new(),
    }
}

/// One step's small edit: one to three files changed (the third step a new file).
fn edit(ws: &dyn Workspace, step: u32, files: usize) {
    for k in 0..(1 + step as usize % 3) {
        let i = (step as usize * 7919 + k * 104_729) % files;
        let path = ws.dir().join(format!("src/m{:03}/f{i}.rs", i / 100));
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&format!("// step {step}\n"));
        std::fs::write(path, text).unwrap();
    }
    if step.is_multiple_of(3) {
        std::fs::write(ws.dir().join(format!("NEW{step}.md")), "new\n").unwrap();
    }
}

async fn measure(label: &str, files: usize, reps: usize, spaces: &GitWorkspaces) {
    let root = tempfile::tempdir().unwrap();
    let repo = root.path().join("repo");
    let made = generate(&repo, files);
    println!(
        "\n== {label}: {files} files (generated and committed in {:.1} s)",
        made.as_secs_f64()
    );
    let objects = repo.join(".git/objects");
    let before = du(&objects);
    let remote = root.path().join("remote.git");
    std::fs::create_dir_all(&remote).unwrap();
    git(&remote, &["init", "--quiet", "--bare"]);

    let (mut create, mut step, mut unchanged, mut restore, mut push) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut worktree_kib = 0;
    for r in 0..reps {
        let id = format!("run-{r}");
        let t = Instant::now();
        let ws = spaces
            .create(&spec(root.path(), &repo, &id, None))
            .await
            .unwrap();
        create.push(t.elapsed());
        worktree_kib = du(ws.dir());
        for n in 1..=10u32 {
            edit(ws.as_ref(), n, files);
            let note = StepNote {
                step: n,
                tools: vec!["write_file".into()],
                summary: None,
            };
            let t = Instant::now();
            let done = ws.checkpoint(&note).await.unwrap();
            step.push(t.elapsed());
            assert!(done.commit.is_some());
            let t = Instant::now();
            assert!(ws.checkpoint(&note).await.unwrap().commit.is_none());
            unchanged.push(t.elapsed());
        }
        let t = Instant::now();
        ws.restore(ws.base()).await.unwrap();
        restore.push(t.elapsed());
    }
    let after = du(&objects);
    // A run whose every checkpoint is pushed to a bare remote.
    let ws = spaces
        .create(&spec(
            root.path(),
            &repo,
            "pushed",
            Some(remote.display().to_string()),
        ))
        .await
        .unwrap();
    let t = Instant::now();
    ws.push().await.unwrap();
    let first_push = t.elapsed();
    for n in 1..=10u32 {
        edit(ws.as_ref(), n, files);
        let note = StepNote {
            step: n,
            tools: vec![],
            summary: None,
        };
        ws.checkpoint(&note).await.unwrap();
        let t = Instant::now();
        ws.push().await.unwrap();
        push.push(t.elapsed());
    }
    stats("create a worktree (git worktree add)", create);
    stats("checkpoint a step with 1-3 small edits", step);
    stats("checkpoint a step that changed nothing", unchanged);
    stats("restore to the base after 10 steps", restore);
    println!(
        "{:<44} {:>8.1} ms (the base's whole history)",
        "first push to a bare remote",
        ms(first_push)
    );
    stats("push one step's checkpoint", push);
    println!(
        "object store {before} KiB before {reps} worktrees and {} step commits, {after} KiB after; one worktree's files {worktree_kib} KiB",
        reps * 10
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let files = std::env::var("BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let reps = std::env::var("BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    println!("{}", git(Path::new("."), &["version"]));
    // The floor: what starting one git process costs on this machine.
    let spawns = (0..20)
        .map(|_| {
            let t = Instant::now();
            git(Path::new("."), &["version"]);
            t.elapsed()
        })
        .collect();
    stats("one git process (`git version`)", spawns);
    let spaces = GitWorkspaces::new();
    measure("small repository", 100, reps, &spaces).await;
    measure("large repository", files, reps, &spaces).await;
}
