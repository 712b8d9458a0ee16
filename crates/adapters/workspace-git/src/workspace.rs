//! One run's workspace: checkpoints, restore and diffs. Making and finding it again is in
//! `open.rs`, applying the result in `apply.rs`, the remote in `remote.rs`.

use crate::git::{At, Git, fields};
use crate::guard;
use crate::open::remove_tree;
use async_trait::async_trait;
use fabric_engine::ports::{
    AppliedRun, ApplyMode, Checkpointed, CommitId, DiffStat, FileDiff, FileStat, StepNote,
    Workspace, WorkspaceError, WorkspaceSpec,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::Mutex;

/// The branch of run `run_id`.
pub fn branch_name(run_id: &str) -> String {
    format!("fabric/{run_id}")
}

/// Where the last fetched tip of a run's branch on the remote is kept, beside the branch.
pub(crate) fn remote_ref(run_id: &str) -> String {
    format!("refs/fabric/remote/{run_id}")
}

/// Whether the workspace is a project's worktree or a scratch directory.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// A worktree of the repository whose working tree's top is `top`, whose
    /// administrative directory (`<common dir>/worktrees/<name>`) is `admin`.
    Project { top: PathBuf, admin: PathBuf },
    /// A directory versioned by the repository at `git_dir`; a copy of the user's
    /// directory `source` when it has one.
    Scratch {
        git_dir: PathBuf,
        source: Option<PathBuf>,
    },
}

/// One run's workspace on git.
#[derive(Debug)]
pub(crate) struct GitWorkspace {
    pub(crate) git: Arc<Git>,
    pub(crate) spec: WorkspaceSpec,
    pub(crate) dir: PathBuf,
    pub(crate) branch: String,
    pub(crate) base: CommitId,
    pub(crate) kind: Kind,
    /// Where the workspace's own commands run.
    pub(crate) at: At,
    /// The branch's tip on the remote as this worker last pushed or fetched it (empty when
    /// it is not there): the lease of the next push, so a worker whose run was taken over
    /// cannot push over its successor's steps. Held across a push, so pushes go one at a time.
    pub(crate) leased: Mutex<String>,
    /// The last checkpoint this object made and its tree, so the next one needs no
    /// `rev-parse` (a process start is most of a checkpoint on a small tree). Safe to trust:
    /// the branch is moved only with the old value expected, so a stale entry fails the
    /// update instead of forking the branch. Cleared by a restore.
    last: Mutex<Option<(CommitId, String)>>,
}

/// The commit `name` names at `at`, if any.
pub(crate) async fn commit_of(
    git: &Git,
    at: &At,
    name: &str,
) -> Result<Option<CommitId>, WorkspaceError> {
    let ran = git
        .run(
            Some(at),
            [
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &format!("{name}^{{commit}}"),
            ],
            None,
        )
        .await?;
    Ok(ran.ok.then(|| CommitId(ran.text())))
}

impl GitWorkspace {
    pub(crate) fn assemble(
        git: Arc<Git>,
        spec: &WorkspaceSpec,
        dir: PathBuf,
        kind: Kind,
        base: CommitId,
    ) -> Self {
        let git_dir = match &kind {
            Kind::Project { admin, .. } => admin,
            Kind::Scratch { git_dir, .. } => git_dir,
        };
        let at = At::Split {
            git_dir: git_dir.clone(),
            work_tree: dir.clone(),
        };
        Self {
            git,
            spec: spec.clone(),
            dir,
            branch: branch_name(&spec.run_id),
            base,
            kind,
            at,
            leased: Mutex::new(String::new()),
            last: Mutex::new(None),
        }
    }

    /// Stages `changed` (the paths `git status` named; everything when `None`), and commits
    /// the result as `message` on the branch when the tree differs from `parent`'s (a commit
    /// and its tree; or always, without a parent). Returns the new commit, or `parent`.
    pub(crate) async fn commit_all(
        &self,
        message: &str,
        parent: Option<(&CommitId, &str)>,
        changed: Option<&[String]>,
    ) -> Result<(CommitId, String), WorkspaceError> {
        let git = &self.git;
        match changed {
            // Only the changed paths: a second scan of a large tree would double the
            // checkpoint's cost (docs/BENCHMARKS.md, "#25"). Literal, so a name with `*` in it
            // is that name, not a pattern.
            Some(paths) => {
                let mut list = Vec::new();
                for path in paths {
                    list.extend_from_slice(path.as_bytes());
                    list.push(0);
                }
                let args = [
                    "--literal-pathspecs",
                    "add",
                    "--all",
                    "--pathspec-from-file=-",
                    "--pathspec-file-nul",
                ];
                git.run(Some(&self.at), args, Some(&list))
                    .await?
                    .checked(&self.dir)?;
            }
            None => {
                git.run(Some(&self.at), ["add", "--all"], None)
                    .await?
                    .checked(&self.dir)?;
            }
        }
        let tree = git
            .run(Some(&self.at), ["write-tree"], None)
            .await?
            .checked(&self.dir)?
            .text();
        let mut args = vec!["commit-tree".to_string(), tree.clone()];
        if let Some((parent, parent_tree)) = parent {
            if *parent_tree == tree {
                return Ok((parent.clone(), tree));
            }
            args.extend(["-p".to_string(), parent.to_string()]);
        }
        args.extend(["-F".to_string(), "-".to_string()]);
        let commit = git
            .run(Some(&self.at), &args, Some(message.as_bytes()))
            .await?
            .checked(&self.dir)?
            .text();
        // The old value guards against a second writer: the update fails if the branch moved.
        let old = parent.map(|(p, _)| p.to_string()).unwrap_or_default();
        git.run(
            Some(&self.at),
            [
                "update-ref",
                "-m",
                "fabric: checkpoint",
                &format!("refs/heads/{}", self.branch),
                &commit,
                &old,
            ],
            None,
        )
        .await?
        .checked(&self.dir)?;
        Ok((CommitId(commit), tree))
    }

    fn message(&self, note: &StepNote) -> String {
        let tools = if note.tools.is_empty() {
            "no tool".to_string()
        } else {
            note.tools.join(", ")
        };
        let mut message = format!(
            "fabric: run {}, step {}: {tools}\n\n",
            self.spec.run_id, note.step
        );
        if let Some(summary) = note.summary.as_deref().map(str::trim)
            && !summary.is_empty()
        {
            message.push_str(summary);
            message.push_str("\n\n");
        }
        message.push_str(&format!(
            "Fabric-Run: {}\nFabric-Step: {}\n",
            self.spec.run_id, note.step
        ));
        if !note.tools.is_empty() {
            message.push_str(&format!("Fabric-Tools: {tools}\n"));
        }
        message.push_str(&format!("Fabric-Base: {}\n", self.base));
        message
    }

    /// Puts a project worktree's `.git` file back when the run changed it: `[".git"]` then
    /// (the fabric's git never reads it, but the user's git in that directory does).
    pub(crate) async fn guard_link(&self) -> Result<Vec<String>, WorkspaceError> {
        match &self.kind {
            Kind::Project { admin, .. } if guard::restore_link(&self.dir, admin).await? => {
                tracing::warn!(dir = %self.dir.display(), "a run changed its worktree's .git; put back");
                Ok(vec![".git".to_owned()])
            }
            _ => Ok(Vec::new()),
        }
    }

    pub(crate) fn project_top(&self) -> Result<&Path, WorkspaceError> {
        match &self.kind {
            Kind::Project { top, .. } => Ok(top),
            Kind::Scratch { .. } => Err(WorkspaceError::NoProject {
                run_id: self.spec.run_id.clone(),
            }),
        }
    }

    /// The files changed from `from` to `to`, with their lines counted.
    async fn numstat(
        &self,
        from: &CommitId,
        to: &CommitId,
    ) -> Result<Vec<FileStat>, WorkspaceError> {
        let flags = ["--numstat", "-z", "--no-renames"];
        let out = self
            .git
            .diff(&self.at, &self.dir, &flags, from.as_str(), to.as_str())
            .await?;
        Ok(fields(&out)
            .filter_map(|line| {
                let mut parts = line.splitn(3, '\t');
                let added = parts.next()?.parse().ok();
                let removed = parts.next()?.parse().ok();
                let path = parts.next()?.to_string();
                Some(FileStat {
                    path,
                    added,
                    removed,
                })
            })
            .collect())
    }
}

/// A unified diff cut into its files' parts, each from its `diff --git` line (a line of a
/// file's content always starts with ` `, `+` or `-`, so this line is never content).
pub(crate) fn split_per_file(diff: &str) -> Vec<&str> {
    let mut starts: Vec<usize> = Vec::new();
    let mut at = 0;
    for line in diff.split_inclusive('\n') {
        if line.starts_with("diff --git ") {
            starts.push(at);
        }
        at += line.len();
    }
    starts
        .iter()
        .enumerate()
        .map(|(i, &start)| &diff[start..starts.get(i + 1).copied().unwrap_or(diff.len())])
        .collect()
}

/// What `git status --porcelain -z` says.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Status {
    /// The changed paths (new directories as one path ending with `/`).
    pub(crate) changed: Vec<String>,
    /// The ignored paths.
    pub(crate) ignored: Vec<String>,
    /// The new directories among `changed`: where a nested repository could be.
    pub(crate) new_dirs: Vec<String>,
}

/// Reads `git status --porcelain=v1 -z` output.
pub(crate) fn parse_status(bytes: &[u8]) -> Status {
    let mut status = Status::default();
    for field in fields(bytes) {
        let (Some(xy), Some(path)) = (field.get(..2), field.get(3..)) else {
            continue;
        };
        if xy == "!!" {
            status.ignored.push(path.to_string());
            continue;
        }
        if xy == "??" && path.ends_with('/') {
            status.new_dirs.push(path.to_string());
        }
        status.changed.push(path.to_string());
    }
    status
}

#[async_trait]
impl Workspace for GitWorkspace {
    fn dir(&self) -> &Path {
        &self.dir
    }

    fn branch(&self) -> &str {
        &self.branch
    }

    fn base(&self) -> &CommitId {
        &self.base
    }

    async fn head(&self) -> Result<CommitId, WorkspaceError> {
        commit_of(&self.git, &self.at, "HEAD")
            .await?
            .ok_or_else(|| WorkspaceError::NotFound {
                run_id: self.spec.run_id.clone(),
                where_: String::new(),
            })
    }

    async fn checkpoint(&self, note: &StepNote) -> Result<Checkpointed, WorkspaceError> {
        let mut removed_git = self.guard_link().await?;
        let status = self
            .git
            .run(
                Some(&self.at),
                [
                    "status",
                    "--porcelain=v1",
                    "-z",
                    "--no-renames",
                    "--ignored=traditional",
                    "--untracked-files=normal",
                    // Never into a submodule of the user's, populated or not (ADR-088).
                    "--ignore-submodules=all",
                ],
                None,
            )
            .await?
            .checked(&self.dir)?;
        let Status {
            changed,
            ignored,
            new_dirs,
        } = parse_status(&status.stdout);
        // Before `add` sees them: a nested `.git` would be recorded as a gitlink and entered
        // by every later command (ADR-088).
        removed_git.extend(guard::remove_nested(&self.dir, new_dirs).await?);
        if changed.is_empty() {
            return Ok(Checkpointed {
                commit: None,
                ignored,
                removed_git,
            });
        }
        let mut last = self.last.lock().await;
        let (head, tree) = match last.take() {
            Some(known) => known,
            None => {
                // The last checkpoint and its tree, in one process.
                let ran = self
                    .git
                    .run(Some(&self.at), ["rev-parse", "HEAD", "HEAD^{tree}"], None)
                    .await?
                    .checked(&self.dir)?;
                let text = ran.text();
                let mut lines = text.lines();
                let (Some(head), Some(tree)) = (lines.next(), lines.next()) else {
                    return Err(ran.error(&self.dir));
                };
                (CommitId(head.to_string()), tree.to_string())
            }
        };
        let (commit, new_tree) = self
            .commit_all(&self.message(note), Some((&head, &tree)), Some(&changed))
            .await?;
        *last = Some((commit.clone(), new_tree));
        Ok(Checkpointed {
            commit: (commit != head).then_some(commit),
            ignored,
            removed_git,
        })
    }

    async fn restore(&self, commit: &CommitId) -> Result<(), WorkspaceError> {
        let not_found = || WorkspaceError::CommitNotFound {
            commit: commit.clone(),
        };
        // Held to the end, so no checkpoint runs while the files and the branch move.
        let mut last = self.last.lock().await;
        *last = None;
        let Some(found) = commit_of(&self.git, &self.at, commit.as_str()).await? else {
            return Err(not_found());
        };
        // A checkpoint of this run is in its branch's history here or on the remote (a
        // recorded step is never ahead of both).
        let mut ours = false;
        for tip in [
            format!("refs/heads/{}", self.branch),
            remote_ref(&self.spec.run_id),
        ] {
            let ran = self
                .git
                .run(
                    Some(&self.at),
                    ["merge-base", "--is-ancestor", found.as_str(), &tip],
                    None,
                )
                .await?;
            if ran.ok {
                ours = true;
                break;
            }
        }
        if !ours {
            return Err(not_found());
        }
        self.guard_link().await?;
        self.git
            .run(
                Some(&self.at),
                [
                    "reset",
                    "--hard",
                    "--quiet",
                    "--no-recurse-submodules",
                    found.as_str(),
                ],
                None,
            )
            .await?
            .checked(&self.dir)?;
        let mut clean = vec!["clean", "-ffdxq"];
        for keep in &self.spec.keep {
            clean.extend(["-e", keep.as_str()]);
        }
        self.git
            .run(Some(&self.at), &clean, None)
            .await?
            .checked(&self.dir)?;
        if let Kind::Scratch { .. } = self.kind {
            // git never looks at a `.git` at the top of a work tree, so `clean` leaves one the
            // tools made; no checkpoint holds it.
            remove_tree(&self.dir.join(".git")).await?;
        }
        Ok(())
    }

    async fn diff_stat(&self) -> Result<DiffStat, WorkspaceError> {
        let head = self.head().await?;
        let files = self.numstat(&self.base, &head).await?;
        Ok(DiffStat { files })
    }

    async fn diff(&self) -> Result<String, WorkspaceError> {
        let head = self.head().await?;
        let out = self
            .git
            .diff(&self.at, &self.dir, &[], self.base.as_str(), head.as_str())
            .await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    async fn diff_files(
        &self,
        from: &CommitId,
        to: &CommitId,
    ) -> Result<Vec<FileDiff>, WorkspaceError> {
        let stats = self.numstat(from, to).await?;
        let out = self
            .git
            .diff(
                &self.at,
                &self.dir,
                &["--no-renames"],
                from.as_str(),
                to.as_str(),
            )
            .await?;
        let text = String::from_utf8_lossy(&out);
        // Both list the files in the same order, one `diff --git` part each.
        let parts = split_per_file(&text);
        Ok(stats
            .into_iter()
            .enumerate()
            .map(|(i, stat)| FileDiff {
                stat,
                diff: parts.get(i).map(|p| (*p).to_owned()).unwrap_or_default(),
            })
            .collect())
    }

    async fn apply(&self, mode: ApplyMode) -> Result<AppliedRun, WorkspaceError> {
        match &self.kind {
            Kind::Scratch {
                source: Some(source),
                ..
            } => crate::copy::apply(self, source, mode).await,
            _ => crate::apply::apply(self, mode).await,
        }
    }

    async fn push(&self) -> Result<(), WorkspaceError> {
        crate::remote::push(self).await
    }

    async fn fetch_branch(&self) -> Result<Option<CommitId>, WorkspaceError> {
        crate::remote::fetch_branch(self).await
    }

    async fn discard(&self) -> Result<(), WorkspaceError> {
        crate::open::discard(&self.git, &self.spec).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_separates_changes_from_ignored_paths() {
        let out = b" M a.txt\0?? new/\0!! target/\0D  gone\0?? file\0";
        let status = parse_status(out);
        assert_eq!(status.changed, ["a.txt", "new/", "gone", "file"]);
        assert_eq!(status.ignored, ["target/"]);
        assert_eq!(status.new_dirs, ["new/"]);
    }

    #[test]
    fn issue_42_a_diff_is_cut_into_its_files() {
        let diff = "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-diff --git x\n+y\ndiff --git a/b b/b\nBinary files differ\n";
        let parts = split_per_file(diff);
        assert_eq!(parts.len(), 2);
        assert!(parts[0].ends_with("+y\n"));
        assert_eq!(parts[1], "diff --git a/b b/b\nBinary files differ\n");
        assert!(split_per_file("").is_empty());
    }
}
