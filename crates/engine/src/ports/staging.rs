//! Staged writes (the critic gate; docs/QUALITY.md): a specialist whose work a critic checks
//! writes into a staging area instead of the workspace, and the changes reach the workspace
//! only when the critic approves them.

use async_trait::async_trait;
use std::path::Path;
use std::sync::Arc;
use thiserror::Error;

/// How a staged file differs from the workspace it was staged from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// New in the staging area.
    Added,
    /// Changed in the staging area.
    Modified,
    /// Removed in the staging area.
    Deleted,
}

impl ChangeKind {
    /// The word used in diffs and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Modified => "modified",
            Self::Deleted => "deleted",
        }
    }
}

/// One staged change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedChange {
    /// The file, relative to the workspace, with `/` separators.
    pub path: String,
    /// How it changed.
    pub kind: ChangeKind,
    /// The protected path it lies under (it will not be applied), if any.
    pub protected: Option<String>,
}

/// What a staging area changes, for the critic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StagedDiff {
    /// The changes, by path.
    pub changes: Vec<StagedChange>,
    /// A unified diff of them (capped; a note says where it was cut).
    pub text: String,
}

/// What applying a staging area did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The files now in the workspace as staged (written or deleted).
    pub applied: Vec<String>,
    /// Staged files left out because the workspace protects them.
    pub refused: Vec<String>,
}

/// Why a staging area could not be made, read or applied. The message names the file and
/// says whether anything was applied; it becomes the run's reason, so it stays exact.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum StagingError {
    /// The workspace cannot be staged or applied as it is (too large, a name that is not
    /// UTF-8, a path that leaves the workspace, an invalid area name): the work must change.
    #[error("{0}")]
    Refused(String),
    /// A workspace file changed since it was staged: applying would overwrite that change.
    #[error("{0}")]
    Conflict(String),
    /// The file system failed, or applying stopped part-way (the message says how far).
    #[error("{0}")]
    Io(String),
}

impl StagingError {
    /// What the caller must do: change the work, or report what the file system said.
    pub fn remedy(&self) -> crate::Remedy {
        match self {
            Self::Refused(_) => crate::Remedy::FixInput,
            Self::Conflict(_) | Self::Io(_) => crate::Remedy::Report,
        }
    }

    /// The same error, its message led by `what` (`"{what}: {message}"`).
    #[must_use]
    pub fn context(self, what: &str) -> Self {
        let lead = |message: String| format!("{what}: {message}");
        match self {
            Self::Refused(m) => Self::Refused(lead(m)),
            Self::Conflict(m) => Self::Conflict(lead(m)),
            Self::Io(m) => Self::Io(lead(m)),
        }
    }
}

/// Makes staging areas over workspaces.
#[async_trait]
pub trait Stager: Send + Sync {
    /// The staging area `name` over `workspace`: a copy of it when new, or the area as it
    /// was left when it exists (a run continued after its process stopped).
    async fn stage(&self, workspace: &Path, name: &str) -> Result<Arc<dyn Staged>, StagingError>;
}

/// One staging area.
#[async_trait]
pub trait Staged: Send + Sync {
    /// The directory the specialist's tools work in instead of the workspace.
    fn dir(&self) -> &Path;

    /// The staged changes against the workspace as it was staged.
    async fn diff(&self) -> Result<StagedDiff, StagingError>;

    /// Applies the changes to the workspace: every new content is written beside its
    /// target first and then renamed over it, so a failure before the renames leaves the
    /// workspace untouched (the error says whether any change was applied). Applying
    /// twice is harmless.
    async fn apply(&self) -> Result<Applied, StagingError>;

    /// Removes the staging area once its changes are applied and recorded.
    async fn discard(&self);
}
