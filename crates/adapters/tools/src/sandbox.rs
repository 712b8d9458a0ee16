//! The seam where an OS sandbox (Landlock, seccomp, namespaces) confines shell commands.

use fabric_core::{ToolContext, ToolError};

/// Confines a command before `shell` spawns it.
///
/// `shell` always clears the environment, sets the working directory and puts the command
/// in its own process group; a sandbox adds what only the kernel can enforce (which files
/// and syscalls the process may use). It is called once per command, after the tool's own
/// setup, and may refuse the command with [`ToolError::Denied`].
pub trait ProcessSandbox: Send + Sync {
    /// Adds the confinement to `cmd` (e.g. a `pre_exec` hook) for a command of the run in
    /// `ctx`.
    fn prepare(
        &self,
        cmd: &mut tokio::process::Command,
        ctx: &ToolContext,
    ) -> Result<(), ToolError>;

    /// One line saying what the sandbox enforces, for logs and diagnostics.
    fn describe(&self) -> String;
}

/// No OS confinement: commands run with the fabric's own user rights, limited only by the
/// allowlist, the scrubbed environment and the process group.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoOsSandbox;

impl ProcessSandbox for NoOsSandbox {
    fn prepare(
        &self,
        _cmd: &mut tokio::process::Command,
        _ctx: &ToolContext,
    ) -> Result<(), ToolError> {
        Ok(())
    }

    fn describe(&self) -> String {
        "no OS sandbox: shell commands run with the user's rights; only the allowlist, a scrubbed environment and process-group cleanup apply".to_owned()
    }
}
