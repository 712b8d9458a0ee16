//! What the built-in tools may do: the shell allowlist, the size and time limits, the
//! container settings and the `PATH` commands see. A leaf: `shell` and `container` both read
//! it, and it reads neither.

use crate::web::{FetchSettings, WebSearchSettings};

pub use fabric_domain::DEFAULT_ALLOWED_COMMANDS;
use fabric_engine::engine::MAX_TOOL_RESULT_CHARS;

/// Characters kept free for `read_file`'s notes (which lines, the call that reads on, the
/// note on invalid UTF-8) within the engine's cap on one tool result.
const READ_NOTE_ROOM: usize = 1_000;

/// Limits and allowlist of the built-in tools, shared by all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPolicy {
    /// Programs `shell` may run, as bare names looked up on the fixed `PATH`.
    pub allowed_commands: Vec<String>,
    /// Seconds a shell command may run when the call gives no `timeout_s`.
    pub shell_timeout_s: u64,
    /// The largest `timeout_s` a call may ask for.
    pub max_shell_timeout_s: u64,
    /// Characters of stdout and of stderr kept per command (each stream separately); the rest
    /// is drained and counted, not stored.
    pub max_output_chars: usize,
    /// Bytes of a file `read_file` returns at most in one call, in whole lines. The default
    /// leaves room for its note in the engine's cap on one tool result, so a big file is never
    /// cut there, where no note could say how to read on (issue #40).
    pub max_read_bytes: u64,
    /// Entries `list_files` returns at most.
    pub max_list_entries: usize,
    /// Variables added to the otherwise empty environment of shell commands, e.g.
    /// `("CARGO_HOME", "/opt/cargo")`. They override the defaults (`PATH`, `HOME`, `LANG`).
    pub extra_env: Vec<(String, String)>,
    /// The `web_search` tool's service.
    pub web_search: WebSearchSettings,
    /// The `fetch_url` tool's limits.
    pub fetch: FetchSettings,
    /// Workspace-relative paths `write_file` refuses, with everything below them (`.git`).
    pub protected_paths: Vec<String>,
    /// When set, `shell` runs its commands in this container through Podman instead of on
    /// the host (a specialist's `container_image`).
    pub container: Option<ContainerSettings>,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self {
            allowed_commands: DEFAULT_ALLOWED_COMMANDS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            shell_timeout_s: 120,
            max_shell_timeout_s: 600,
            // Two streams of 7 000 fit in the engine's 16 000-character cap on one tool
            // result, so the model never gets JSON cut in the middle.
            max_output_chars: 7_000,
            max_read_bytes: (MAX_TOOL_RESULT_CHARS - READ_NOTE_ROOM) as u64,
            max_list_entries: 500,
            extra_env: Vec::new(),
            web_search: WebSearchSettings::default(),
            fetch: FetchSettings::default(),
            protected_paths: [
                ".git",
                ".fabric",
                "fabric.yaml",
                "fabric.yml",
                "fabric.json",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
            container: None,
        }
    }
}

impl ToolPolicy {
    /// The protected path `relative` (a normalised workspace path) is or lies under, if any.
    pub fn protected(&self, relative: &std::path::Path) -> Option<&str> {
        self.protected_paths
            .iter()
            .find(|p| relative.starts_with(std::path::Path::new(p.as_str())))
            .map(String::as_str)
    }

    /// Whether `program` (a bare name) is on the allowlist.
    pub fn allows(&self, program: &str) -> bool {
        self.allowed_commands.iter().any(|c| c == program)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_allowlist_has_no_escape_hatches() {
        let policy = ToolPolicy::default();
        for banned in [
            "sh", "bash", "zsh", "dash", "python3", "python", "perl", "node", "awk", "env",
            "xargs", "find", "git", "sed", "sort", "tar", "rg", "make", "rm", "timeout",
        ] {
            assert!(
                !policy.allows(banned),
                "{banned} must not be allowed by default"
            );
        }
        for needed in ["ls", "cat", "grep", "cargo", "mkdir"] {
            assert!(policy.allows(needed), "{needed}");
        }
        assert!(policy.allowed_commands.iter().all(|c| !c.contains('/')));
    }
}

/// The only directories programs are looked up in: system locations, never the workspace or
/// the fabric's own `PATH`.
pub(crate) const SAFE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Where and how a specialist's `shell` commands run in a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSettings {
    /// The image, e.g. `docker.io/library/rust:1.95`; it must be present locally.
    pub image: String,
    /// Podman's `--memory` value.
    pub memory: String,
    /// Podman's `--pids-limit` value.
    pub pids_limit: u32,
    /// Podman's `--cpus` value.
    pub cpus: String,
}

impl ContainerSettings {
    /// Settings for `image` with the default limits (2 GiB, 256 processes, 1 CPU).
    pub fn new(image: impl Into<String>) -> Self {
        Self {
            image: image.into(),
            memory: "2g".to_owned(),
            pids_limit: 256,
            cpus: "1".to_owned(),
        }
    }
}
