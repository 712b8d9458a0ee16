use thiserror::Error;

use crate::ports::StoreError;

/// What stops a run before it can start, or breaks the fabric itself.
///
/// Failures of the model or of tools inside a run are not errors: they end the run with a
/// typed [`fabric_domain::RunStatus`] and are recorded in its runlog.
#[derive(Debug, Error)]
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
