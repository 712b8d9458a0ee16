//! The security keys: `sandbox`, `sandbox_limits`, `sandbox_read_paths`, `protected_paths`
//! and `network`.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use crate::error::ConfigError;

pub use fabric_domain::SandboxMode;

/// Resource limits of every tool process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SandboxLimits {
    /// CPU seconds.
    pub cpu_s: u64,
    /// Address space, MiB.
    pub memory_mb: u64,
    /// Processes of the user (not applied by the kernel to root).
    pub processes: u64,
    /// Largest file a process may write, MiB.
    pub file_size_mb: u64,
    /// Open files per process.
    pub open_files: u64,
    /// Whether each command also gets a memory and pids cgroup.
    pub cgroup: SandboxCgroup,
    /// MiB one command may add to its workspace and temp directory.
    pub disk_mb: u64,
    /// Files and directories one command may add there.
    pub files: u64,
}

/// `sandbox_limits.cgroup`: a memory and pids cgroup per command (issue #31).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxCgroup {
    /// Where the host allows it (`fabric doctor` says whether it does).
    #[default]
    Auto,
    /// Always; a host that cannot refuses to run commands.
    Required,
    /// Never: `setrlimit` alone.
    Off,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            cpu_s: 900,
            memory_mb: 8192,
            processes: 1024,
            file_size_mb: 1024,
            open_files: 1024,
            cgroup: SandboxCgroup::Auto,
            disk_mb: 8192,
            files: 100_000,
        }
    }
}

/// The OS sandbox settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct SandboxConfig {
    /// The mode (`--sandbox` overrides it).
    pub mode: SandboxMode,
    /// Resource limits.
    pub limits: SandboxLimits,
    /// Absolute directories processes may read and execute besides the system ones (a
    /// toolchain outside `/usr`, such as `~/.cargo`).
    pub read_paths: Vec<PathBuf>,
}

/// What the network tools may reach.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct NetworkConfig {
    /// Let `fetch_url` and `web_search` reach private, loopback, link-local and metadata
    /// addresses. Off by default (SSRF).
    pub allow_private: bool,
    /// Hosts (`localhost`, `searx.lan`) and addresses or CIDR ranges (`10.1.2.3`,
    /// `192.168.0.0/16`) allowed even though private.
    pub allow_hosts: Vec<String>,
}

/// The default `protected_paths`: the repository's metadata and the fabric's own config and
/// state, which a run must never rewrite.
pub(crate) fn default_protected_paths() -> Vec<String> {
    [
        ".git",
        ".fabric",
        "fabric.yaml",
        "fabric.yml",
        "fabric.json",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// `sandbox_limits` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub(crate) cpu_s: Option<u64>,
    pub(crate) memory_mb: Option<u64>,
    pub(crate) processes: Option<u64>,
    pub(crate) file_size_mb: Option<u64>,
    pub(crate) open_files: Option<u64>,
    #[serde(default, deserialize_with = "crate::switch::optional")]
    pub(crate) cgroup: Option<SandboxCgroup>,
    pub(crate) disk_mb: Option<u64>,
    pub(crate) files: Option<u64>,
}

/// `network` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNetwork {
    pub(crate) allow_private: Option<bool>,
    pub(crate) allow_hosts: Option<Vec<String>>,
}

impl RawLimits {
    /// Overlays the file's values; `range(key, value, min, max)` checks each.
    pub(crate) fn merge(
        self,
        base: &mut SandboxLimits,
        range: impl Fn(&str, u64, u64, u64) -> Result<u64, ConfigError>,
    ) -> Result<(), ConfigError> {
        if let Some(v) = self.cpu_s {
            base.cpu_s = range("sandbox_limits.cpu_s", v, 1, 86_400)?;
        }
        if let Some(v) = self.memory_mb {
            base.memory_mb = range("sandbox_limits.memory_mb", v, 64, 1 << 24)?;
        }
        if let Some(v) = self.processes {
            base.processes = range("sandbox_limits.processes", v, 1, 1 << 22)?;
        }
        if let Some(v) = self.file_size_mb {
            base.file_size_mb = range("sandbox_limits.file_size_mb", v, 1, 1 << 24)?;
        }
        if let Some(v) = self.open_files {
            base.open_files = range("sandbox_limits.open_files", v, 16, 1 << 20)?;
        }
        overlay!(base, self; cgroup);
        if let Some(v) = self.disk_mb {
            base.disk_mb = range("sandbox_limits.disk_mb", v, 1, 1 << 24)?;
        }
        if let Some(v) = self.files {
            base.files = range("sandbox_limits.files", v, 16, 1 << 32)?;
        }
        Ok(())
    }
}
