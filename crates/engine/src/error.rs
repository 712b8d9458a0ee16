use thiserror::Error;

use crate::ports::StoreError;

/// What stops a run before it can start, or breaks the fabric itself.
///
/// Failures of the model or of tools inside a run are not errors: they end the run with a
/// typed [`fabric_domain::RunStatus`] and are recorded in its runlog.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CoreError {
    /// The run store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A specialist or tool definition is unusable.
    #[error(transparent)]
    Domain(#[from] fabric_domain::DomainError),
    /// The task is not runnable as given.
    #[error("{0}")]
    InvalidTask(String),
}

/// What the caller of a port must do about one of its errors (issue #28, goose's
/// classification): each port's error enum answers it with a `remedy()` method, so callers
/// decide by kind, never by reading the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remedy {
    /// Nothing is wrong with the request: the same call may succeed later (a busy service, a
    /// model or store that is down for now).
    Retry,
    /// The request is wrong as given: the caller fixes it (the message says how) and asks
    /// again.
    FixInput,
    /// It will not work by asking again: report it (a broken store, a bug, a panic, a host
    /// that cannot do it).
    Report,
}

impl CoreError {
    /// What the caller must do.
    pub fn remedy(&self) -> Remedy {
        match self {
            Self::Store(e) => e.remedy(),
            Self::Domain(_) | Self::InvalidTask(_) => Remedy::FixInput,
        }
    }
}
