//! The sandbox port: what confines the processes a tool starts, and what a run records
//! about it.
//!
//! The trait lives in the core (not in the tools adapter) so that the OS sandbox can be its
//! own adapter crate, the only one allowed `unsafe`, without one adapter depending on
//! another.

use serde_json::Value;
use std::sync::Arc;

use super::tool::{ToolContext, ToolError};

/// What a sandbox can tell about a command once it has ended.
pub trait CommandWatch: Send + Sync {
    /// The resource limits the command ran into ("more memory than the sandbox's limit of
    /// 1024 MiB …"), in words for the model; `None` when it ran into none.
    fn limits_hit(&self) -> Option<String>;

    /// What the command may add to the disk while it runs, where the sandbox caps it.
    fn disk_watch(&self) -> Option<crate::fs::DiskWatch> {
        None
    }
}

/// Keeps what a sandboxed command needs (e.g. its private temporary directory, its cgroup)
/// alive until the command has ended; dropping it releases them.
#[derive(Default)]
pub struct SandboxGuard(Option<Box<dyn CommandWatch>>);

/// A held resource with nothing to tell.
struct Held<T>(T);

impl<T: Send + Sync> CommandWatch for Held<T> {
    fn limits_hit(&self) -> Option<String> {
        None
    }
}

impl SandboxGuard {
    /// A guard holding `resource` until it is dropped.
    pub fn holding(resource: impl Send + Sync + 'static) -> Self {
        Self(Some(Box::new(Held(resource))))
    }

    /// A guard holding `resource`, which can say what limits the command ran into.
    pub fn watching(resource: impl CommandWatch + 'static) -> Self {
        Self(Some(Box::new(resource)))
    }

    /// The resource limits the command ran into, if the sandbox counts them.
    pub fn limits_hit(&self) -> Option<String> {
        self.0.as_ref().and_then(|w| w.limits_hit())
    }

    /// What the command may add to the disk while it runs, if the sandbox caps it.
    pub fn disk_watch(&self) -> Option<crate::fs::DiskWatch> {
        self.0.as_ref().and_then(|w| w.disk_watch())
    }
}

impl std::fmt::Debug for SandboxGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "SandboxGuard(holding)"
        } else {
            "SandboxGuard(empty)"
        })
    }
}

/// Confines a command before a tool spawns it.
///
/// The tool always clears the environment, sets the working directory and puts the command
/// in its own process group; a sandbox adds what only the kernel can enforce (which files,
/// sockets and syscalls the process may use, resource limits). It is called once per
/// command, after the tool's own setup, and may refuse the command with
/// [`ToolError::Denied`].
pub trait ProcessSandbox: Send + Sync {
    /// Adds the confinement to `cmd` (a `pre_exec` hook, environment such as `TMPDIR`) for a
    /// command of the run in `ctx`. The returned guard must live until the command ends.
    fn prepare(
        &self,
        cmd: &mut std::process::Command,
        ctx: &ToolContext,
    ) -> Result<SandboxGuard, ToolError>;

    /// One line saying what the sandbox enforces, for logs and diagnostics.
    fn describe(&self) -> String;

    /// Whether the kernel enforces anything: a failed command's "permission denied" is then
    /// most likely the sandbox, and tools say so.
    fn enforcing(&self) -> bool;

    /// What went wrong when spawning a prepared command failed because of the sandbox's own
    /// setup (its namespaces), in words; `None` for every other spawn error.
    fn explain_spawn_error(&self, _error: &std::io::Error) -> Option<String> {
        None
    }
}

/// No OS confinement: commands run with the fabric's own user rights, limited only by the
/// allowlist, the scrubbed environment and the process group.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoOsSandbox;

impl ProcessSandbox for NoOsSandbox {
    fn prepare(
        &self,
        _cmd: &mut std::process::Command,
        _ctx: &ToolContext,
    ) -> Result<SandboxGuard, ToolError> {
        Ok(SandboxGuard::default())
    }

    fn describe(&self) -> String {
        "no OS sandbox: shell commands run with the user's rights; only the allowlist, a scrubbed environment and process-group cleanup apply".to_owned()
    }

    fn enforcing(&self) -> bool {
        false
    }
}

/// Something about a run's safety the runlog must show at its start, as a `security_event`
/// (e.g. the OS sandbox was turned off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityNotice {
    /// A stable tag, e.g. `sandbox_off`.
    pub event_type: String,
    /// What it means, in words.
    pub message: String,
}

/// What a run records about its sandbox: the effective policy (in `run_start`'s `sandbox`
/// field) and the notices to record right after it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSandbox {
    /// The effective policy as decided at startup; `null` when the caller did not say.
    /// Shared: every run of a sandbox mode records the same policy, and a copy per run in
    /// flight cost each run kilobytes (issue #14).
    pub policy: Arc<Value>,
    /// Recorded as `security_event`s right after `run_start`.
    pub notices: Vec<SecurityNotice>,
}
