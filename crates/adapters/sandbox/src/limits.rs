//! Resource limits applied to every sandboxed process with `setrlimit`.

use serde_json::{Value, json};

/// Per-process limits. The kernel enforces them on the command and on everything it starts
/// (they are inherited), so a runaway build or a fork bomb stops at a wall, not at the
/// timeout alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Seconds of CPU time (`RLIMIT_CPU`; `SIGXCPU`, then `SIGKILL`).
    pub cpu_s: u64,
    /// Bytes of address space (`RLIMIT_AS`): allocations beyond fail.
    pub memory_bytes: u64,
    /// Processes and threads of the user (`RLIMIT_NPROC`). The kernel does not apply it to
    /// root; the probe reports that.
    pub processes: u64,
    /// Bytes one file may grow to (`RLIMIT_FSIZE`; `SIGXFSZ`).
    pub file_size_bytes: u64,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub open_files: u64,
    /// Whether memory and processes are also capped by a cgroup per command.
    pub cgroup: CgroupUse,
    /// Bytes one command may add to its workspace and private temp directory, watched while
    /// it runs.
    pub disk_bytes: u64,
    /// Files and directories one command may add there.
    pub files: u64,
}

/// `sandbox_limits.cgroup`: whether each command gets a memory and pids cgroup (issue #31).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CgroupUse {
    /// Where the host allows it; recorded either way.
    #[default]
    Auto,
    /// Always: a host without cgroups refuses to run commands (fails closed).
    Required,
    /// Never: only `setrlimit`.
    Off,
}

impl CgroupUse {
    /// The name used in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Required => "required",
            Self::Off => "off",
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        const MIB: u64 = 1024 * 1024;
        Self {
            // Above the longest shell timeout (600 s): the timeout is the usual end; this
            // catches what escapes it.
            cpu_s: 900,
            // rustc and linkers reserve a lot of address space; 8 GiB leaves them room.
            memory_bytes: 8 * 1024 * MIB,
            processes: 1024,
            file_size_bytes: 1024 * MIB,
            open_files: 1024,
            cgroup: CgroupUse::Auto,
            disk_bytes: 8 * 1024 * MIB,
            files: 100_000,
        }
    }
}

impl Limits {
    /// The limits as recorded in the runlog and printed by `fabric doctor`.
    pub fn to_json(&self) -> Value {
        json!({
            "cpu_s": self.cpu_s,
            "memory_bytes": self.memory_bytes,
            "processes": self.processes,
            "file_size_bytes": self.file_size_bytes,
            "open_files": self.open_files,
            "cgroup": self.cgroup.as_str(),
            "disk_bytes": self.disk_bytes,
            "files": self.files,
        })
    }
}
