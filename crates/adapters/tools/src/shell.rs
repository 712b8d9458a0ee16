//! `shell`: runs one allowlisted program in the workspace and returns its exit code and
//! output.
//!
//! Decisions:
//! - No implicit `sh -c`. The model passes argv; the program must be a bare name on the
//!   allowlist, looked up on a fixed `PATH`. A shell would make the allowlist meaningless.
//! - The environment is cleared and rebuilt from a short list plus the policy's
//!   `extra_env`, so no secret of the fabric's own environment (API keys, tokens) reaches a
//!   command. `TMPDIR` is set by the OS sandbox to a private directory per command (not the
//!   workspace, which would litter the model's file listings).
//! - The OS sandbox ([`ProcessSandbox`]) confines the child; a command that fails because it
//!   refused something becomes a `sandbox_denied` refusal (see `denial`).
//! - Every command runs in its own process group. Timeout, cancellation, dropping the call
//!   and even a normal exit kill the whole group, so nothing a command starts outlives it
//!   (background processes would otherwise also hold the output pipes open).
//! - Output is read concurrently from both pipes and only the first `max_output_chars`
//!   bytes of each are stored; the rest is drained and counted, so a command printing
//!   gigabytes cannot exhaust memory nor block on a full pipe.
//! - While it runs, each line of either stream also goes to the run's followers through
//!   `ToolContext::live_lines` (issue #42, ADR-106), bounded in size and rate by the engine;
//!   the result above is the same with or without followers.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fabric_domain::{OutputStream, ToolAnnotations, ToolSpec, builtin};
use fabric_engine::live_output::LineSplitter;
use fabric_engine::typed::TypedTool;
use fabric_engine::{SandboxGuard, ToolContext, ToolError};
use rustix::process::{Pid, Signal, kill_process_group};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::container::{ContainerGuard, did_not_start, podman_args, podman_path};
use crate::denial;
use crate::policy::{ContainerSettings, SAFE_PATH, ToolPolicy};
use crate::text::decode;
use fabric_engine::ProcessSandbox;

/// The `event_type` of a refused program.
pub(crate) const COMMAND_NOT_ALLOWED: &str = "command_not_allowed";

/// How long to wait for a killed command's pipes to close before giving up on its output.
/// Only a process that left the group (e.g. with `setsid`) can keep them open.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// Characters of partial output quoted in a timeout message, per stream.
const PARTIAL_OUTPUT_CHARS: usize = 2_000;

// Arguments of `shell`. Field docs are what the model reads (the type's own doc would only
// add noise to the schema), so each is one short line.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShellInput {
    /// The program and its arguments, one string each, e.g. ["ls", "-la", "src"]. There is no shell: `|`, `&&`, `>`, `*` and `$VAR` are passed to the program as plain text.
    #[schemars(length(min = 1))]
    cmd: Vec<String>,
    /// Optional. Seconds before the command is killed. Default 120.
    #[schemars(range(min = 1))]
    timeout_s: Option<u64>,
}

/// The `shell` tool.
pub(crate) struct ShellTool {
    policy: Arc<ToolPolicy>,
    sandbox: Arc<dyn ProcessSandbox>,
}

impl ShellTool {
    pub(crate) fn new(policy: Arc<ToolPolicy>, sandbox: Arc<dyn ProcessSandbox>) -> Self {
        Self { policy, sandbox }
    }

    fn allowed_list(&self) -> String {
        self.policy.allowed_commands.join(", ")
    }

    fn refuse(&self, program: &str, why: &str) -> ToolError {
        ToolError::Denied {
            event_type: COMMAND_NOT_ALLOWED.to_owned(),
            attempted: program.to_owned(),
            message: format!(
                "program `{program}` {why}; allowed programs: {}",
                self.allowed_list()
            ),
        }
    }

    /// Checks argv and returns the program name.
    /// The program of `cmd`, checked; `approved`: a person approved this call after the
    /// allowlist refused it (`on_request`), so the allowlist lets it through.
    fn check_program<'a>(&self, cmd: &'a [String], approved: bool) -> Result<&'a str, ToolError> {
        let Some(program) = cmd.first() else {
            return Err(ToolError::InvalidArguments(
                "`cmd` needs at least the program name, e.g. [\"ls\", \"-la\"]".to_owned(),
            ));
        };
        if cmd.iter().any(|arg| arg.contains('\0')) {
            return Err(ToolError::InvalidArguments(
                "an item of `cmd` contains a NUL byte, which no program can receive".to_owned(),
            ));
        }
        if program.trim().is_empty() {
            return Err(ToolError::InvalidArguments(
                "`cmd[0]` is empty; it must be the program name, e.g. \"ls\"".to_owned(),
            ));
        }
        if program.contains('/') {
            return Err(self.refuse(
                program,
                "must be a bare name without `/` (it is looked up on the system PATH)",
            ));
        }
        if program.contains(char::is_whitespace) {
            // A small model's favourite mistake: the whole command line in one string.
            let words: Vec<&str> = program.split_whitespace().collect();
            if words.first().is_some_and(|first| self.policy.allows(first)) {
                return Err(ToolError::InvalidArguments(format!(
                    "`cmd[0]` is `{program}`, but it must be the program name alone; put each argument in its own item: {}",
                    json!(words)
                )));
            }
            return Err(self.refuse(program, "is not allowed"));
        }
        if !approved && !self.policy.allows(program) {
            return Err(self.refuse(
                program,
                "is not allowed (there is no shell; run one program per call)",
            ));
        }
        Ok(program)
    }

    fn timeout(&self, asked: Option<u64>) -> Result<Duration, ToolError> {
        let max = self.policy.max_shell_timeout_s;
        let secs = asked.unwrap_or(self.policy.shell_timeout_s.min(max));
        if secs == 0 || secs > max {
            return Err(ToolError::InvalidArguments(format!(
                "parameter `timeout_s` must be an integer between 1 and {max}, got {secs}"
            )));
        }
        Ok(Duration::from_secs(secs))
    }

    fn command(
        &self,
        program: &str,
        args: &[String],
        ctx: &ToolContext,
    ) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .current_dir(&ctx.workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own group (pgid = pid), so one signal reaches everything it starts.
            .process_group(0)
            .env_clear()
            // std looks the program up on the child's PATH when it is set, so this also
            // decides which binary runs.
            .env("PATH", SAFE_PATH)
            .env("HOME", &ctx.workspace)
            .env("LANG", "C.UTF-8");
        for (key, value) in &self.policy.extra_env {
            if key == "PATH" {
                // A relative entry would let a program the model wrote into the workspace
                // (`cp /bin/sh ./ls`) shadow an allowed name; only absolute entries pass.
                command.env(key, absolute_entries(value));
            } else {
                command.env(key, value);
            }
        }
        command
    }
}

impl ShellTool {
    /// `podman run ...` for a specialist whose shell runs in a container, and the guard that
    /// removes the container if the command does not end on its own.
    fn container_command(
        &self,
        container: &ContainerSettings,
        program: &str,
        args: &[String],
        ctx: &ToolContext,
    ) -> Result<(tokio::process::Command, ContainerGuard), ToolError> {
        let podman = podman_path().ok_or_else(|| {
            ToolError::Failed(format!(
                "this specialist runs `shell` in the container image `{}`, but Podman is not installed on this host, so no command can run; finish with what the other tools allow and say so in your answer",
                container.image
            ))
        })?;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let name = format!(
            "fabric-{}-{}",
            ctx.run_id.as_str(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let argv = podman_args(
            container,
            &name,
            &ctx.workspace,
            ctx.network_allowed,
            &self.policy.extra_env,
            program,
            args,
        );
        let mut command = tokio::process::Command::new(&podman);
        command
            .args(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0)
            // The client needs only where to find its helpers and its own state; what the
            // command inside sees is set with `--env` above.
            .env_clear()
            .env("PATH", SAFE_PATH);
        // `CONTAINERS_CONF`: the operator's choice of runtime and limits for Podman (the
        // fabric's own environment, never the model's).
        for key in [
            "HOME",
            "XDG_RUNTIME_DIR",
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
            "CONTAINERS_CONF",
        ] {
            if let Some(value) = std::env::var_os(key) {
                command.env(key, value);
            }
        }
        Ok((command, ContainerGuard::new(podman, name)))
    }
}

/// The absolute entries of a `PATH` value, in order.
fn absolute_entries(path: &str) -> String {
    path.split(':')
        .filter(|entry| entry.starts_with('/'))
        .collect::<Vec<_>>()
        .join(":")
}

#[async_trait]
impl TypedTool for ShellTool {
    type Input = ShellInput;

    fn spec(&self) -> ToolSpec {
        let description = format!(
            "Run one program in the workspace and get its exit code, stdout and stderr. `cmd` is the program and its arguments as separate strings. There is no shell: no pipes, `&&`, redirects, globs or variables. A non-zero exit code is a normal result. Allowed programs: {}.",
            self.allowed_list()
        );
        let mut spec = ToolSpec::for_input::<ShellInput>(builtin::SHELL, &description)
            .example(json!({"cmd": ["ls", "-la"]}))
            .example(json!({"cmd": ["cargo", "test", "--quiet"], "timeout_s": 300}))
            .annotate(ToolAnnotations {
                read_only: false,
                destructive: true,
                needs_network: false,
            })
            .plan(&["write_file"], &[]);
        // The largest `timeout_s` is configured, so the type cannot declare it; the schema
        // does, so the model reads the range and a call outside it is refused naming it
        // (issue #15). `Typed::check_contract` allows a schema to narrow numeric bounds.
        if let Some(timeout) = spec.input_schema.pointer_mut("/properties/timeout_s") {
            timeout["maximum"] = json!(self.policy.max_shell_timeout_s);
        }
        crate::workflows::attach(spec)
    }

    async fn run(&self, input: ShellInput, ctx: &ToolContext) -> Result<Value, ToolError> {
        // Protected paths a command creates are removed after it (where namespaces mount
        // the existing ones read-only, only new ones can appear), whatever it returned.
        let absent = self.absent_protected(&ctx.workspace);
        let outcome: Result<Value, ToolError> = async {
            let program = self.check_program(&input.cmd, ctx.approved)?;
            let timeout = self.timeout(input.timeout_s)?;
            if ctx.cancel.is_cancelled() {
                return Err(ToolError::Failed(format!(
                    "command `{program}` was not started because the run was cancelled"
                )));
            }
            let args = &input.cmd[1..];
            let mut container_guard = None;
            let (mut command, sandbox_guard) = match &self.policy.container {
                Some(container) => {
                    let (command, guard) = self.container_command(container, program, args, ctx)?;
                    container_guard = Some(guard);
                    (command, None)
                }
                None => {
                    let mut command = self.command(program, args, ctx);
                    // Held until the command has ended: the sandbox's private temp directory
                    // lives in it.
                    let guard = self.sandbox.prepare(command.as_std_mut(), ctx)?;
                    (command, Some(guard))
                }
            };
            tracing::debug!(run_id = %ctx.run_id.as_str(), program, ?args, timeout_s = timeout.as_secs(), "shell command");

            let mut child = command.spawn().map_err(|e| {
                match self.sandbox.explain_spawn_error(&e) {
                    Some(why) => ToolError::Failed(format!("program `{program}` was not started: {why}")),
                    None => spawn_error(program, &e),
                }
            })?;
            let group = GroupGuard::new(child.id());
            let stdout = child.stdout.take();
            let stderr = child.stderr.take();
            let cap = self.policy.max_output_chars;

            let work = async {
                tokio::join!(
                    async {
                        let status = child.wait().await;
                        // Whatever the command left running in the background dies with it; that
                        // also closes the pipes so the readers below finish.
                        group.kill();
                        status
                    },
                    capture(stdout, cap, ctx.live_lines(OutputStream::Stdout)),
                    capture(stderr, cap, ctx.live_lines(OutputStream::Stderr)),
                )
            };
            tokio::pin!(work);
            // What the command may add to the disk, watched while it runs (issue #31).
            let disk = sandbox_guard.as_ref().and_then(SandboxGuard::disk_watch);
            let over_disk = async move {
                match disk {
                    Some(watch) => watch.exceeded().await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(over_disk);

            let ended = tokio::select! {
                done = &mut work => Ended::Exited(done),
                () = tokio::time::sleep(timeout) => Ended::TimedOut,
                () = ctx.cancel.cancelled() => Ended::Cancelled,
                why = &mut over_disk => Ended::OverDisk(why),
            };
            let result = match ended {
                Ended::Exited((status, out, err)) => {
                    group.disarm();
                    if let Some(guard) = container_guard.as_mut() {
                        guard.disarm();
                    }
                    let status = status.map_err(|e| {
                        ToolError::Failed(format!("waiting for `{program}` failed: {e}"))
                    })?;
                    tracing::debug!(program, ?status, "shell command finished");
                    if let Some(container) = &self.policy.container
                        && let Some(error) =
                            did_not_start(&container.image, status.code(), &err.render())
                    {
                        return Err(error);
                    }
                    let mut result = json!({
                        "exit_code": status.code(),
                        "stdout": out.render(),
                        "stderr": err.render(),
                        "timed_out": false,
                    });
                    if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
                        result["signal"] = json!(signal);
                    }
                    // What the sandbox counted (a cgroup's OOM kills, refused forks) names the
                    // limit better than the command's own words.
                    let limits_hit = sandbox_guard.as_ref().and_then(SandboxGuard::limits_hit);
                    if self.sandbox.enforcing()
                        && !status.success()
                        && let Some(refusal) = denial::detect(&input.cmd, &result, limits_hit)
                    {
                        Err(refusal)
                    } else {
                        Ok(result)
                    }
                }
                Ended::TimedOut => {
                    group.kill();
                    let secs = timeout.as_secs();
                    tracing::info!(
                        program,
                        secs,
                        "shell command timed out; process group killed"
                    );
                    let partial = match tokio::time::timeout(KILL_GRACE, &mut work).await {
                        Ok((_, out, err)) => partial_output(&out, &err),
                        Err(_) => String::new(),
                    };
                    Err(ToolError::Failed(format!(
                        "command `{}` timed out after {secs} s and was killed with everything it started; pass a larger `timeout_s` (at most {}) or run something shorter{partial}",
                        input.cmd.join(" "),
                        self.policy.max_shell_timeout_s
                    )))
                }
                Ended::OverDisk(why) => {
                    group.kill();
                    tracing::info!(program, why, "shell command over its disk cap; process group killed");
                    let partial = match tokio::time::timeout(KILL_GRACE, &mut work).await {
                        Ok((_, out, err)) => partial_output(&out, &err),
                        Err(_) => String::new(),
                    };
                    let command = input.cmd.join(" ");
                    Err(ToolError::Denied {
                        event_type: denial::SANDBOX_DENIED.to_owned(),
                        attempted: command.clone(),
                        message: format!(
                            "command `{command}` was stopped by the OS sandbox: {why}. It was killed with everything it started; what it wrote is still there. Remove what is not needed, or write less at a time{partial}"
                        ),
                    })
                }
                Ended::Cancelled => {
                    group.kill();
                    tracing::info!(program, "run cancelled; shell process group killed");
                    // Reap the killed leader; bounded, in case something escaped the group.
                    let _ = tokio::time::timeout(KILL_GRACE, &mut work).await;
                    Err(ToolError::Failed(format!(
                        "command `{program}` was stopped because the run was cancelled"
                    )))
                }
            };
            // The command's resources (its cgroup, its private temp directory, which may hold
            // a tree of any size) are released off the async threads.
            if let Some(guard) = sandbox_guard {
                let _ = tokio::task::spawn_blocking(move || drop(guard)).await;
            }
            result
        }
        .await;
        self.revert_protected(absent, &input.cmd, ctx, outcome)
            .await
    }
}

/// How a command's wait ended.
enum Ended<T> {
    Exited(T),
    TimedOut,
    Cancelled,
    /// The command added more to the disk than it may; why, in words.
    OverDisk(String),
}

impl ShellTool {
    /// The protected paths that do not exist in `workspace` now.
    fn absent_protected(&self, workspace: &std::path::Path) -> Vec<String> {
        self.policy
            .protected_paths
            .iter()
            .filter(|p| std::fs::symlink_metadata(workspace.join(p)).is_err())
            .cloned()
            .collect()
    }

    /// Removes the protected paths among `absent` that the command created, and turns the
    /// outcome into a `protected_path` refusal saying so (recorded as a `security_event`).
    async fn revert_protected(
        &self,
        absent: Vec<String>,
        cmd: &[String],
        ctx: &ToolContext,
        outcome: Result<Value, ToolError>,
    ) -> Result<Value, ToolError> {
        if absent.is_empty() {
            return outcome;
        }
        let workspace = ctx.workspace.clone();
        // Off the async threads: a tree the command made may be large or deep.
        let removed = tokio::task::spawn_blocking(move || {
            let mut removed = Vec::new();
            for name in absent {
                let path = workspace.join(&name);
                // Never follows a link (a link is removed as a link) and survives any depth
                // (issue #31: a 25,000-deep `.git` overflowed the recursive removal's stack).
                match fabric_engine::fs::remove_tree(&path) {
                    Ok(()) => removed.push(name),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "could not remove a protected path a command created")
                    }
                }
            }
            removed
        })
        .await
        .unwrap_or_default();
        if removed.is_empty() {
            return outcome;
        }
        let what = match &outcome {
            Ok(result) => format!("exit code {}", result["exit_code"]),
            Err(e) => format!("it failed: {e}"),
        };
        let names = removed.join("`, `");
        Err(ToolError::Denied {
            event_type: "protected_path".to_owned(),
            attempted: format!("{} (created `{names}`)", cmd.join(" ")),
            message: format!(
                "command `{}` ran ({what}) but created `{names}`, which is protected (protected_paths); it was removed. Leave `{names}` alone and write your changes elsewhere in the workspace",
                cmd.join(" ")
            ),
        })
    }
}

fn spawn_error(program: &str, error: &std::io::Error) -> ToolError {
    match error.kind() {
        std::io::ErrorKind::NotFound => ToolError::Failed(format!(
            "program `{program}` is allowed but was not found on PATH ({SAFE_PATH}), or the workspace directory is missing"
        )),
        std::io::ErrorKind::PermissionDenied => ToolError::Failed(format!(
            "program `{program}` could not be started: permission denied"
        )),
        _ => ToolError::Failed(format!("program `{program}` could not be started: {error}")),
    }
}

fn partial_output(out: &Captured, err: &Captured) -> String {
    let mut text = String::new();
    for (name, captured) in [("stdout", out), ("stderr", err)] {
        if captured.total == 0 {
            continue;
        }
        let shown = captured.render();
        let tail: String = if shown.chars().count() > PARTIAL_OUTPUT_CHARS {
            let skip = shown.chars().count() - PARTIAL_OUTPUT_CHARS;
            format!("…{}", shown.chars().skip(skip).collect::<String>())
        } else {
            shown
        };
        text.push_str(&format!("\n{name} so far:\n{tail}"));
    }
    text
}

/// Kills a command's process group when asked, and when dropped unless disarmed, so the
/// group dies even if the call's future is dropped mid-run.
struct GroupGuard {
    group: Option<Pid>,
    armed: AtomicBool,
}

impl GroupGuard {
    fn new(pid: Option<u32>) -> Self {
        // Never signal group 1 or 0: `kill(-1)` reaches every process we may signal.
        let group = pid
            .and_then(|p| i32::try_from(p).ok())
            .and_then(Pid::from_raw)
            .filter(|p| !p.is_init());
        Self {
            group,
            armed: AtomicBool::new(true),
        }
    }

    fn kill(&self) {
        // ESRCH (nobody left) is the normal case after a clean exit.
        if let Some(group) = self.group
            && let Err(e) = kill_process_group(group, Signal::KILL)
            && e != rustix::io::Errno::SRCH
        {
            tracing::warn!(pgid = group.as_raw_pid(), error = %e, "could not kill process group");
        }
    }

    /// The group was killed and its pipes closed (so every member is gone): its id may be
    /// reused, so it must not be signalled again.
    fn disarm(&self) {
        self.armed.store(false, Ordering::Relaxed);
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed.load(Ordering::Relaxed) {
            self.kill();
        }
    }
}

/// The stored start of one output stream and how long it really was.
#[derive(Debug, Default)]
struct Captured {
    kept: Vec<u8>,
    total: u64,
}

impl Captured {
    fn render(&self) -> String {
        let cut = self.total > self.kept.len() as u64;
        let (mut text, _) = decode(&self.kept, cut);
        if cut {
            let more = self.total - self.kept.len() as u64;
            text.push_str(&format!("\n[output truncated: {more} more bytes]"));
        }
        text
    }
}

/// Reads a stream to its end, keeping at most `cap` bytes. Reading on after the cap keeps
/// the pipe drained, so the command never blocks on a full pipe. With `live`, every line is
/// also handed to the run's followers as it comes (issue #42; bounded by the engine, never
/// stored).
async fn capture<R: AsyncRead + Unpin>(
    reader: Option<R>,
    cap: usize,
    mut live: Option<LineSplitter>,
) -> Captured {
    let mut captured = Captured::default();
    let Some(mut reader) = reader else {
        return captured;
    };
    let mut buf = vec![0u8; 8 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                if let Some(lines) = live.as_mut() {
                    lines.push(&buf[..n]);
                }
                captured.total += n as u64;
                let room = cap.saturating_sub(captured.kept.len());
                captured.kept.extend_from_slice(&buf[..n.min(room)]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "reading command output failed");
                break;
            }
        }
    }
    if let Some(lines) = live {
        lines.finish();
    }
    captured
}

#[cfg(test)]
mod path_tests {
    #[test]
    fn relative_path_entries_are_dropped() {
        assert_eq!(
            super::absolute_entries(".:/usr/bin::bin:/root/.cargo/bin"),
            "/usr/bin:/root/.cargo/bin"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn capture_keeps_the_cap_and_counts_the_rest() {
        let data = vec![b'x'; 100_000];
        let captured = capture(Some(&data[..]), 1_000, None).await;
        assert_eq!(captured.kept.len(), 1_000);
        assert_eq!(captured.total, 100_000);
        let text = captured.render();
        assert!(
            text.ends_with("\n[output truncated: 99000 more bytes]"),
            "{text}"
        );
    }

    /// `shell` as the engine holds it, with `max` as the largest timeout.
    fn shell_tool(max: u64) -> fabric_engine::typed::Typed<ShellTool> {
        let policy = ToolPolicy {
            max_shell_timeout_s: max,
            ..ToolPolicy::default()
        };
        fabric_engine::typed::Typed::new(ShellTool::new(
            Arc::new(policy),
            Arc::new(fabric_engine::NoOsSandbox),
        ))
    }

    /// A `timeout_s` out of range, too large for any integer type, or of the wrong type is
    /// refused naming `timeout_s` and its range: by the schema check the engine (and the MCP
    /// server) runs before the call, and by the tool itself when called directly.
    #[tokio::test]
    async fn issue_15_a_bad_timeout_names_timeout_s_and_its_range() {
        use fabric_engine::Tool;
        let ctx = ToolContext {
            approved: false,
            sampler: None,
            live: None,
            run_id: fabric_domain::RunId::parse("issue-15").unwrap(),
            workspace: std::env::temp_dir(),
            network_allowed: false,
            cancel: tokio_util::sync::CancellationToken::new(),
            lineage: Default::default(),
        };
        for (max, raw, expected) in [
            (
                600,
                r#"{"cmd":["ls"],"timeout_s":-1}"#,
                "parameter `timeout_s` must be an integer between 1 and 600, got -1",
            ),
            (
                600,
                r#"{"cmd":["ls"],"timeout_s":99999999999999999999}"#,
                "parameter `timeout_s` must be an integer between 1 and 600, got 1e+20",
            ),
            (
                600,
                r#"{"cmd":["ls"],"timeout_s":"10"}"#,
                "parameter `timeout_s` must be an integer between 1 and 600 or null, got \"10\"",
            ),
            (
                600,
                r#"{"cmd":["ls"],"timeout_s":0}"#,
                "parameter `timeout_s` must be an integer between 1 and 600, got 0",
            ),
            (
                900,
                r#"{"cmd":["ls"],"timeout_s":901}"#,
                "parameter `timeout_s` must be an integer between 1 and 900, got 901",
            ),
        ] {
            let tool = shell_tool(max);
            tool.check_contract().unwrap();
            let args: Value = serde_json::from_str(raw).unwrap();
            let checked = fabric_domain::schema::validate(&tool.spec().input_schema, &args);
            assert_eq!(checked.unwrap_err().to_string(), expected, "{raw}");
            match tool.call(args, &ctx).await {
                // From the schema when the value does not fit the type, else from the tool.
                Err(ToolError::InvalidArguments(message)) => assert!(
                    message == expected || message == format!("invalid arguments: {expected}"),
                    "{raw}: {message}"
                ),
                other => panic!("{raw}: {other:?}"),
            }
        }
    }

    #[test]
    fn issue_15_the_tool_itself_names_timeout_s_and_its_range() {
        let tool = ShellTool::new(
            Arc::new(ToolPolicy::default()),
            Arc::new(fabric_engine::NoOsSandbox),
        );
        for asked in [0, 601] {
            match tool.timeout(Some(asked)) {
                Err(ToolError::InvalidArguments(message)) => assert_eq!(
                    message,
                    format!(
                        "parameter `timeout_s` must be an integer between 1 and 600, got {asked}"
                    )
                ),
                other => panic!("{asked}: {other:?}"),
            }
        }
        assert_eq!(tool.timeout(Some(600)).unwrap(), Duration::from_secs(600));
    }

    #[test]
    fn group_guard_never_targets_init_or_zero() {
        assert!(GroupGuard::new(Some(1)).group.is_none());
        assert!(GroupGuard::new(Some(0)).group.is_none());
        assert!(GroupGuard::new(None).group.is_none());
    }
}
