//! The sandbox modes: one closed set, parsed by the config and the CLI, enforced by the
//! sandbox adapter.

use serde::Serialize;

/// How tool processes are confined (docs/SECURITY.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Read-only system, read-write workspace, no network for processes.
    #[default]
    Strict,
    /// As strict, with the network for processes when the run allows it.
    WorkspaceWriteNetwork,
    /// No OS sandbox (loudly recorded).
    Off,
}

impl SandboxMode {
    /// Parses `strict`, `workspace-write-network` or `off`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "strict" => Some(Self::Strict),
            "workspace-write-network" => Some(Self::WorkspaceWriteNetwork),
            "off" => Some(Self::Off),
            _ => None,
        }
    }
}
