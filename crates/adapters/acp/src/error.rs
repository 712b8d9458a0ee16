//! What can go wrong in `fabric acp`.

use fabric_core::ports::WorkspaceError;
use fabric_core::service::ServiceError;
use fabric_domain::RunId;

/// Why serving ACP stopped, or why a session's command (`/diff`, `/apply`, `/discard`)
/// could not be done (said to the person as the agent's message).
#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    /// Reading the client's messages failed.
    #[error("could not read the ACP client's messages from stdin: {0}")]
    Read(std::io::Error),
    /// Writing to the client failed (it closed stdout).
    #[error("could not write to the ACP client on stdout: {0}")]
    Write(std::io::Error),
    /// The task writing to the client panicked.
    #[error("the task writing to the ACP client stopped unexpectedly (a bug: please report it)")]
    WriterPanicked,
    /// The run service refused or failed.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// The session's worktree could not be read or applied.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// The session's last turn worked in a scratch workspace: no branch.
    #[error("run {0} worked in a plain scratch workspace: there is no branch to diff or apply")]
    NoBranch(RunId),
}
