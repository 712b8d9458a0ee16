//! The runner of lifecycle hooks (issue #43, docs/HOOKS.md): each hook's `command` run by
//! `sh -c` as the user, outside the OS sandbox (they are the user's own commands, from the
//! user's config or a project they trusted), in the run's workspace, with the fabric's
//! scrubbed environment plus `CLAUDE_PROJECT_DIR` and `FABRIC_RUN_ID`, the event's JSON on
//! stdin. The hooks an event applies to run in parallel; each is killed with its process
//! group at its timeout, its output read up to a cap, and what it came to is a
//! [`HookRun`] record (ADR-110).

use async_trait::async_trait;
use fabric_domain::hooks::{
    Applicable, HookAnswer, HookEvent, HookExit, HookInput, MAX_HOOK_OUTPUT_BYTES,
};
use fabric_domain::runlog::HookRun;
use fabric_engine::ports::{HookPlace, HookSource, Hooks};
use rustix::process::{Pid, Signal, kill_process_group};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The variables of the fabric's own environment a hook keeps: what a user's command needs
/// to find its programs and speak their locale; no token, key or proxy setting.
const KEPT_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    "TERM",
];

/// A run's hooks, run as processes.
pub struct CommandHooks {
    sources: Vec<HookSource>,
    place: HookPlace,
    /// Where runlogs are: `<runs_dir>/<run id>/runlog.jsonl` is a hook's `transcript_path`.
    runs_dir: PathBuf,
}

impl CommandHooks {
    /// The hooks of `sources`, for a run at `place` whose runlog is under `runs_dir`.
    pub fn new(sources: Vec<HookSource>, place: HookPlace, runs_dir: PathBuf) -> Self {
        Self {
            sources,
            place,
            runs_dir,
        }
    }

    fn applicable(
        &self,
        event: HookEvent,
        target: Option<&str>,
    ) -> impl Iterator<Item = (&'static str, Applicable<'_>)> {
        self.sources.iter().flat_map(move |s| {
            s.config
                .applicable(event, target)
                .into_iter()
                .map(move |a| (s.name, a))
        })
    }

    /// Runs one hook and reads its answer.
    async fn run(
        &self,
        source: &str,
        hook: Applicable<'_>,
        stdin: &[u8],
        input: &HookInput,
    ) -> HookRun {
        let started = Instant::now();
        let exit = self.exit_of(hook, stdin, input).await;
        let answer = HookAnswer::read(input.hook_event_name, &exit);
        HookRun {
            event: input.hook_event_name.as_str().to_owned(),
            source: source.to_owned(),
            matcher: hook.matcher.map(str::to_owned),
            command: hook.hook.command.clone(),
            tool: input.tool_name.clone(),
            call_id: input.tool_use_id.clone(),
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            exit_code: match exit {
                HookExit::Exited { code, .. } => Some(code),
                _ => None,
            },
            outcome: answer.outcome,
            message: answer.message,
            updated_input: answer.updated_input,
            detail: answer.detail,
            stop_reason: answer.stop_reason,
            system_message: answer.system_message,
        }
    }

    /// How the hook's process ended: killed with its group at its timeout.
    async fn exit_of(&self, hook: Applicable<'_>, stdin: &[u8], input: &HookInput) -> HookExit {
        let project = self
            .place
            .project
            .as_ref()
            .map_or_else(|| input.cwd.clone(), |p| p.display().to_string());
        let mut command = tokio::process::Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(&hook.hook.command)
            .current_dir(&input.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0)
            .env_clear()
            .envs(
                KEPT_ENV
                    .iter()
                    .filter_map(|k| std::env::var_os(k).map(|v| (k, v))),
            )
            .env("CLAUDE_PROJECT_DIR", project)
            .env("FABRIC_RUN_ID", &input.session_id);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => return HookExit::NotStarted(format!("cannot start `/bin/sh -c`: {e}")),
        };
        let group = Group(
            child
                .id()
                .and_then(|p| i32::try_from(p).ok())
                .and_then(Pid::from_raw),
        );
        let (Some(mut to), Some(out), Some(err)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return HookExit::Crashed("its standard streams could not be opened".to_owned());
        };
        let seconds = hook.hook.timeout_s();
        let work = async {
            let feed = async {
                // A hook that does not read its stdin closes it: not an error.
                let _ = to.write_all(stdin).await;
                drop(to);
            };
            let ((), stdout, stderr, status) =
                tokio::join!(feed, capped(out), capped(err), child.wait());
            (stdout, stderr, status)
        };
        match tokio::time::timeout(Duration::from_secs(seconds), work).await {
            Err(_) => {
                group.kill();
                HookExit::TimedOut(seconds)
            }
            Ok((stdout, stderr, Ok(status))) => {
                // What it left running in its group goes with it.
                group.kill();
                match status.code() {
                    Some(code) => HookExit::Exited {
                        code,
                        stdout,
                        stderr,
                    },
                    None => HookExit::Crashed(format!("it was killed by a signal ({status})")),
                }
            }
            Ok((_, _, Err(e))) => {
                group.kill();
                HookExit::Crashed(format!("cannot wait for it: {e}"))
            }
        }
    }
}

#[async_trait]
impl Hooks for CommandHooks {
    fn wants(&self, event: HookEvent, target: Option<&str>) -> bool {
        event.fires() && self.applicable(event, target).next().is_some()
    }

    async fn fire(&self, input: &HookInput) -> Vec<HookRun> {
        let mut input = input.clone();
        input.transcript_path = self
            .runs_dir
            .join(&input.session_id)
            .join("runlog.jsonl")
            .display()
            .to_string();
        // A struct of strings and JSON values: it always serialises.
        let stdin = serde_json::to_vec(&input).unwrap_or_default();
        let runs = self
            .applicable(input.hook_event_name, input.target())
            .map(|(source, hook)| self.run(source, hook, &stdin, &input));
        futures_util::future::join_all(runs).await
    }
}

/// A hook's process group, killed when it is done or out of time (ESRCH: none left).
struct Group(Option<Pid>);

impl Group {
    fn kill(&self) {
        if let Some(group) = self.0.filter(|p| !p.is_init()) {
            let _ = kill_process_group(group, Signal::KILL);
        }
    }
}

/// Reads a stream to its end, keeping its first [`MAX_HOOK_OUTPUT_BYTES`].
async fn capped(mut stream: impl AsyncRead + Unpin) -> String {
    let mut kept = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_HOOK_OUTPUT_BYTES.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}
