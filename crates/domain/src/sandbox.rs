//! The sandbox modes: one closed set, parsed by the config and the CLI, enforced by the
//! sandbox adapter.

use crate::words::closed_set;

closed_set! {
    /// How tool processes are confined (docs/SECURITY.md), as chosen by `--sandbox` or
    /// `sandbox:`.
    pub enum SandboxMode {
        /// Read-only system, read-write workspace and private temp, no network for processes
        /// (even when the run allows the network: that is for the web tools).
        #[default]
        Strict = "strict",
        /// As strict, but processes may use TCP/UDP when the run allows the network.
        WorkspaceWriteNetwork = "workspace-write-network",
        /// No OS sandbox: loudly recorded, never the default.
        Off = "off",
    }
}
