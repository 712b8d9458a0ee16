//! Running the `git` program: one scrubbed environment and one set of overrides for every
//! invocation, so neither the user's global configuration nor their repository's hooks,
//! signing or filters change what the fabric does (ADR-065).

use fabric_engine::ports::WorkspaceError;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::OnceCell;

/// The identity of every commit the fabric makes.
pub const NAME: &str = "agent-fabric";
/// The e-mail of that identity.
pub const EMAIL: &str = "fabric@localhost";

/// The oldest git with everything used here: `merge-tree --write-tree --merge-base` (2.40).
const MIN_VERSION: (u32, u32) = (2, 40);

/// Settings given on every command line (`-c`), which win over the repository's own:
/// no hooks, no signing, no file-system monitor (a command the repository could name), no
/// automatic gc in the user's repository, Git LFS filters off, so LFS files stay the
/// pointers the repository holds, no recursion into submodules, and the output the adapter
/// reads back (patches fed to `git apply`, `git log` formats) in git's default shape
/// (ADR-065). These harden the user's own configuration; they are not what keeps a
/// workspace's files from configuring git (ADR-088: the repository is always named, and no
/// nested repository is left for git to enter).
const OVERRIDES: &[&str] = &[
    "core.hooksPath=/dev/null",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "core.fsmonitor=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "filter.lfs.process=",
    "filter.lfs.smudge=",
    "filter.lfs.clean=",
    "filter.lfs.required=false",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "diff.relative=false",
    "diff.srcPrefix=a/",
    "diff.dstPrefix=b/",
    "apply.whitespace=nowarn",
    "log.showSignature=false",
    "advice.detachedHead=false",
    "submodule.recurse=false",
    "diff.ignoreSubmodules=all",
    "status.submoduleSummary=false",
    "init.defaultBranch=main",
];

/// The variables passed through from the fabric's own environment: where programs are, the
/// home directory and ssh agent a push over ssh needs, and where temporary files go.
const PASSED: &[&str] = &["PATH", "HOME", "SSH_AUTH_SOCK", "TMPDIR"];

/// Where a command runs.
#[derive(Debug, Clone)]
pub(crate) enum At {
    /// In the user's own repository (its working tree's top, or a path the user named):
    /// `git -C <dir>`, where git finds the repository as it does for the user. Never a run's
    /// workspace: a `.git` there is the run's to write (ADR-088).
    User(PathBuf),
    /// A run's files with the repository named by the fabric:
    /// `git --git-dir=<git_dir> --work-tree=<work_tree>`, so nothing in the workspace (its
    /// `.git` file, a nested repository) decides which repository git opens (ADR-088).
    Split {
        /// The repository: a scratch run's history, or a worktree's administrative directory.
        git_dir: PathBuf,
        /// The files.
        work_tree: PathBuf,
    },
}

impl At {
    fn prefix(&self) -> Vec<OsString> {
        match self {
            Self::User(dir) => vec!["-C".into(), dir.into()],
            Self::Split { git_dir, work_tree } => {
                let mut gd = OsString::from("--git-dir=");
                gd.push(git_dir);
                let mut wt = OsString::from("--work-tree=");
                wt.push(work_tree);
                // `-C` too, so relative paths (pathspecs, `clean`) mean the work tree.
                vec!["-C".into(), work_tree.into(), gd, wt]
            }
        }
    }
}

/// A finished command.
#[derive(Debug)]
pub(crate) struct Ran {
    /// Whether it exited 0.
    pub(crate) ok: bool,
    /// Its exit code, if any.
    pub(crate) code: Option<i32>,
    /// Its standard output.
    pub(crate) stdout: Vec<u8>,
    /// Its error output, lossily decoded.
    pub(crate) stderr: String,
    /// The subcommand and its arguments, for messages.
    pub(crate) command: String,
}

impl Ran {
    /// The output as text, trimmed.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_string()
    }

    /// The failure as an error, classified by its words when they name a read-only disk.
    pub(crate) fn error(&self, path: &Path) -> WorkspaceError {
        if let Some(detail) = read_only(&self.stderr) {
            return WorkspaceError::ReadOnly {
                path: path.to_path_buf(),
                detail,
            };
        }
        WorkspaceError::Git {
            command: self.command.clone(),
            status: self
                .code
                .map_or_else(|| "killed".to_string(), |c| format!("exit {c}")),
            stderr: self.stderr.trim().to_string(),
        }
    }

    /// `Ok(self)` when it succeeded, else [`Ran::error`].
    pub(crate) fn checked(self, path: &Path) -> Result<Self, WorkspaceError> {
        if self.ok {
            Ok(self)
        } else {
            Err(self.error(path))
        }
    }
}

/// The words of a failure caused by a disk that refuses writes, if it is one.
fn read_only(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .find(|l| l.contains("Read-only file system") || l.contains("Permission denied"))
        .map(|l| l.trim().to_string())
}

/// The `git` program and the directory standing in for its configuration.
#[derive(Debug)]
pub(crate) struct Git {
    program: PathBuf,
    /// Checked once, at the first command.
    version: OnceCell<Result<(), WorkspaceError>>,
}

impl Git {
    pub(crate) fn new(program: PathBuf) -> Self {
        Self {
            program,
            version: OnceCell::new(),
        }
    }

    /// Fails with [`WorkspaceError::GitMissing`] or [`WorkspaceError::GitTooOld`] unless a
    /// usable git is there; asked once.
    pub(crate) async fn check(&self) -> Result<(), WorkspaceError> {
        self.version
            .get_or_init(|| async {
                let ran = self.run(None, ["version"], None).await?;
                let text = ran.text();
                let found = text
                    .strip_prefix("git version ")
                    .unwrap_or(&text)
                    .to_string();
                let mut parts = found.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
                let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
                if version < MIN_VERSION {
                    return Err(WorkspaceError::GitTooOld {
                        found,
                        need: format!("{}.{}", MIN_VERSION.0, MIN_VERSION.1),
                    });
                }
                Ok(())
            })
            .await
            .clone()
    }

    /// Runs `git <args>` at `at`, feeding `stdin` if given. Fails only when git cannot be
    /// started; a non-zero exit is in the [`Ran`].
    pub(crate) async fn run<I, S>(
        &self,
        at: Option<&At>,
        args: I,
        stdin: Option<&[u8]>,
    ) -> Result<Ran, WorkspaceError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let command = args
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let mut cmd = Command::new(&self.program);
        cmd.env_clear();
        for name in PASSED {
            if let Some(value) = std::env::var_os(name) {
                cmd.env(name, value);
            }
        }
        cmd.envs([
            ("GIT_CONFIG_NOSYSTEM", "1"),
            ("GIT_CONFIG_GLOBAL", "/dev/null"),
            ("GIT_ATTR_NOSYSTEM", "1"),
            // The global ignore and attributes files live under it: a path that cannot exist.
            ("XDG_CONFIG_HOME", "/dev/null/agent-fabric"),
            ("LC_ALL", "C"),
            ("LANG", "C"),
            ("GIT_TERMINAL_PROMPT", "0"),
            ("GIT_SSH_COMMAND", "ssh -o BatchMode=yes"),
            ("GIT_AUTHOR_NAME", NAME),
            ("GIT_AUTHOR_EMAIL", EMAIL),
            ("GIT_COMMITTER_NAME", NAME),
            ("GIT_COMMITTER_EMAIL", EMAIL),
        ]);
        for o in OVERRIDES {
            cmd.arg("-c").arg(o);
        }
        cmd.arg("-c").arg(format!("user.name={NAME}"));
        cmd.arg("-c").arg(format!("user.email={EMAIL}"));
        if let Some(at) = at {
            cmd.args(at.prefix());
        }
        cmd.args(&args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Not killed when the caller stops waiting (a cancelled run): a git killed mid-write
        // leaves its `index.lock` behind and the next command fails. Every command here is
        // short, and ends on its own.
        let missing = |e: std::io::Error| WorkspaceError::GitMissing {
            program: self.program.display().to_string(),
            detail: e.to_string(),
        };
        let mut child = cmd.spawn().map_err(missing)?;
        let output: Output = match (stdin, child.stdin.take()) {
            (Some(bytes), Some(mut pipe)) => {
                // Written beside the wait, so a full output pipe cannot stall the writer.
                let write = async move {
                    let result = pipe.write_all(bytes).await;
                    drop(pipe);
                    result
                };
                let (written, output) = tokio::join!(write, child.wait_with_output());
                let output = output.map_err(missing)?;
                if let Err(e) = written
                    && output.status.success()
                {
                    return Err(WorkspaceError::Io {
                        action: "cannot feed",
                        path: self.program.clone(),
                        detail: e.to_string(),
                    });
                }
                output
            }
            _ => child.wait_with_output().await.map_err(missing)?,
        };
        tracing::trace!(%command, status = ?output.status, "git");
        Ok(Ran {
            ok: output.status.success(),
            code: output.status.code(),
            stdout: output.stdout,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            command,
        })
    }
}

impl Git {
    /// `git diff <flags> <from> <to>` at `at` (no external diff, no colour): its output.
    pub(crate) async fn diff(
        &self,
        at: &At,
        path: &Path,
        flags: &[&str],
        from: &str,
        to: &str,
    ) -> Result<Vec<u8>, WorkspaceError> {
        let mut args = vec!["diff", "--no-ext-diff", "--no-color"];
        args.extend_from_slice(flags);
        args.extend(["--end-of-options", from, to]);
        Ok(self.run(Some(at), &args, None).await?.checked(path)?.stdout)
    }
}

pub(crate) use fabric_engine::ports::remote_shown as redact;

/// Splits `-z` output into its fields.
pub(crate) fn fields(bytes: &[u8]) -> impl Iterator<Item = String> + '_ {
    bytes
        .split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| String::from_utf8_lossy(f).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_drops_credentials_but_keeps_paths() {
        assert_eq!(
            redact("https://bob:s3cret@example.com/r.git"),
            "https://example.com/r.git"
        );
        assert_eq!(redact("/srv/remote.git"), "/srv/remote.git");
        assert_eq!(
            redact("git@example.com:team/r.git"),
            "git@example.com:team/r.git"
        );
        // The runlog's `workspace.remote` is written by the same rule (issue #25).
        assert_eq!(redact("ssh://git@host/repo"), "ssh://host/repo");
    }

    #[test]
    fn read_only_words_are_recognised() {
        assert!(
            read_only("fatal: could not create work tree dir: Read-only file system").is_some()
        );
        assert!(read_only("fatal: not a git repository").is_none());
    }
}
