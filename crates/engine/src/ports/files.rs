//! A run's workspace read from outside the run: the MCP server's file resources (issue #29).
//! Confined to the workspace exactly as the file tools are, by the same code behind it
//! (`fabric-tools`' path confinement, ADR-026): a path that leads out is refused with the
//! tools' own `path_escape` refusal.

use async_trait::async_trait;
use std::path::Path;

use super::ToolError;

/// The files of a workspace, as a run's tools see them.
#[async_trait]
pub trait WorkspaceFiles: Send + Sync {
    /// The files (not folders) under `workspace`, as relative paths in tree order, at most
    /// `cap` entries walked; `true` with them when the cap cut the walk. Symbolic links are
    /// listed, never followed.
    async fn list(&self, workspace: &Path, cap: usize) -> Result<(Vec<String>, bool), ToolError>;

    /// The whole content of the regular file `path` (relative to `workspace`; `..` above it,
    /// absolute paths and links out of it are refused), refused when larger than `max`
    /// bytes.
    async fn read(&self, workspace: &Path, path: &str, max: u64) -> Result<Vec<u8>, ToolError>;
}
