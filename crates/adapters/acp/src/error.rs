//! What can end `fabric acp`.

/// Why serving ACP stopped.
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
}
