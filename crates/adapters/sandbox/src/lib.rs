//! `fabric-sandbox`: the OS sandbox of agent-fabric. Every process a tool starts runs inside
//! it; the kernel, not the allowlist, is the wall.
//!
//! What it does, per command, between `fork` and `exec` (a `pre_exec` hook, prepared in the
//! parent so the child only makes syscalls):
//! - resource limits with `setrlimit`: CPU time, address space, processes, file size, no
//!   core dumps ([`Limits`]); and where the host allows it a memory and pids cgroup per
//!   command, which counts what `setrlimit` cannot see (shared memory, kernel buffers);
//! - when running as root, no capabilities: `SECBIT_NOROOT` and empty capability sets, so
//!   `exec` grants none (raw sockets, module loading and mounts need them);
//! - Landlock for the filesystem: system paths read-only, the run's workspace and a private
//!   temporary directory (`TMPDIR`) read-write, nothing else; for TCP (ABI ≥ 4): no bind or
//!   connect when the network is off; scoping (ABI ≥ 6): no signals to, and no abstract
//!   sockets of, processes outside the sandbox;
//! - seccomp: sockets other than `AF_UNIX` refused when the network is off (Landlock does not
//!   cover UDP, raw or netlink sockets), raw and packet sockets always, and the syscalls a
//!   confined process never needs (`ptrace`, `mount`, `bpf`, module loading, `io_uring`, …).
//!
//! [`probe`] says what this kernel supports; [`Policy::decide`] turns a [`Mode`] and the probe
//! into the effective policy or refuses, saying why and how to opt down: the sandbox never
//! degrades silently. [`OsSandbox`] implements `fabric-core`'s
//! [`ProcessSandbox`](fabric_engine::ProcessSandbox) port.
//!
//! This is the one crate of the workspace allowed `unsafe` (`pre_exec` and one probe
//! syscall); each block says why it is sound.
#![deny(missing_docs)]

mod cache;
mod cgroup;
mod error;
mod limits;
mod linux;
mod ns;
mod policy;
mod probe;
mod seccomp;

pub use cgroup::CgroupHost;
pub use error::SandboxError;
pub use limits::{CgroupUse, Limits};
pub use linux::{OsSandbox, dies_with_the_fabric};
pub use policy::{Mode, Policy};
pub use probe::{HostSupport, probe};
