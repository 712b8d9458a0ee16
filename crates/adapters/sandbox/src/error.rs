//! The errors of this crate.

use thiserror::Error;

/// Why a sandbox could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SandboxError {
    /// The configured mode needs something this host does not offer.
    #[error(
        "the `{mode}` sandbox cannot be enforced on this host: {why}. Run `fabric doctor` for details. To run tools without an OS sandbox anyway, say so explicitly with `--sandbox off` or `sandbox: off` in the config (tools then run with your user's rights)"
    )]
    Unenforceable {
        /// The mode asked for.
        mode: String,
        /// What is missing.
        why: String,
    },
    /// `sandbox_limits.cgroup: required` on a host that cannot give commands a cgroup.
    #[error(
        "`sandbox_limits.cgroup` is `required` but this host cannot give commands a memory and pids cgroup: {0}. Run `fabric doctor` for details; with `sandbox_limits.cgroup: auto` commands run with the setrlimit limits alone"
    )]
    CgroupsRequired(String),
    /// Building the Landlock ruleset or the seccomp filter failed.
    #[error("cannot build the sandbox: {0}")]
    Build(String),
    /// This host lacks a feature, or refused it (`fabric doctor`'s and `run_start`'s
    /// `*_error` fields): the probe's or the kernel's words, shown as they are.
    #[error("{0}")]
    Unsupported(String),
}

impl SandboxError {
    /// What the caller must do: change the configuration (`--sandbox off`, `cgroup: auto`),
    /// or report what this host lacks.
    pub fn remedy(&self) -> fabric_engine::Remedy {
        match self {
            Self::Unenforceable { .. } | Self::CgroupsRequired(_) => {
                fabric_engine::Remedy::FixInput
            }
            Self::Build(_) | Self::Unsupported(_) => fabric_engine::Remedy::Report,
        }
    }
}

impl From<String> for SandboxError {
    /// A probe's or the kernel's words: what this host lacks.
    fn from(why: String) -> Self {
        Self::Unsupported(why)
    }
}

impl From<&str> for SandboxError {
    /// A probe's words: what this host lacks.
    fn from(why: &str) -> Self {
        Self::Unsupported(why.to_owned())
    }
}
