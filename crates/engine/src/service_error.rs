//! Why the service could not run a request, typed, so each front end maps it once: the CLI
//! to an exit code, the HTTP API to a status, the MCP server to a tool error.

use thiserror::Error;

/// Why a request did not become a run, or a run ended inside the fabric rather than with a
/// status of its own. Every message names the problem and the fix.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ServiceError {
    /// The request is wrong as given (an empty prompt, a pack naming a specialist twice, a
    /// sandbox this host cannot enforce): the caller can fix it.
    #[error("{0}")]
    Invalid(String),
    /// The run to continue has already ended: there is nothing to continue.
    #[error("{0}")]
    AlreadyEnded(String),
    /// No specialist with that id.
    #[error("{0}")]
    UnknownSpecialist(String),
    /// No model key with that name.
    #[error("{0}")]
    UnknownModelKey(String),
    /// The project a run was asked to work on cannot be used (no repository there, no
    /// commit, a base that names nothing, a taken branch, no git): the caller can fix it.
    #[error("{0}")]
    InvalidProject(String),
    /// The request asks for more than the configuration allows.
    #[error("{0}")]
    NotPermitted(String),
    /// The configuration lacks what the request needs, fixed in the config or the
    /// environment: a model key whose API key variable is unset.
    #[error("{0}")]
    Misconfigured(String),
    /// The model a request needs cannot be used now (server down, no tool-capable model,
    /// a failed pull).
    #[error("{0}")]
    ModelUnavailable(String),
    /// Every model key the run could use has spent its daily budget (`daily_budget`).
    #[error("{0}")]
    BudgetSpent(String),
    /// The service has as many runs in flight as it may.
    #[error("{limit} runs are in flight, the most this server runs at once; try again shortly")]
    TooManyRuns {
        /// The limit.
        limit: usize,
    },
    /// The service is shutting down and starts no new runs.
    #[error("the fabric is shutting down and starts no new runs")]
    ShuttingDown,
    /// The run was cancelled while it was being prepared.
    #[error("the run was cancelled before it started")]
    Cancelled,
    /// The run store failed.
    #[error("{0}")]
    Store(String),
    /// The run's own code panicked; it was ended `failed`.
    #[error("the run panicked: {0}")]
    Panicked(String),
    /// Anything else inside the fabric.
    #[error("{0}")]
    Internal(String),
}

impl ServiceError {
    /// What the caller must do: fix the request, try again shortly (the service is full or
    /// a model is down), or report it.
    pub fn remedy(&self) -> crate::Remedy {
        match self {
            Self::Invalid(_)
            | Self::AlreadyEnded(_)
            | Self::UnknownSpecialist(_)
            | Self::UnknownModelKey(_)
            | Self::InvalidProject(_)
            | Self::NotPermitted(_) => crate::Remedy::FixInput,
            Self::ModelUnavailable(_) | Self::TooManyRuns { .. } => crate::Remedy::Retry,
            // The operator's to fix, in the server's config or environment.
            Self::Misconfigured(_)
            | Self::BudgetSpent(_)
            | Self::ShuttingDown
            | Self::Cancelled
            | Self::Store(_)
            | Self::Panicked(_)
            | Self::Internal(_) => crate::Remedy::Report,
        }
    }
}

impl From<crate::CoreError> for ServiceError {
    fn from(error: crate::CoreError) -> Self {
        match error {
            crate::CoreError::Store(e) => Self::Store(e.to_string()),
            crate::CoreError::InvalidTask(e) => Self::Invalid(e),
            crate::CoreError::Domain(e) => Self::Invalid(e.to_string()),
        }
    }
}
