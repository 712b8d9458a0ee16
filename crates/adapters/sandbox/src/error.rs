//! The errors of this crate.

use thiserror::Error;

/// Why a sandbox could not be set up.
#[derive(Debug, Error)]
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
}
