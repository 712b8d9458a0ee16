//! The sandbox modes and the effective policy decided from a mode and the probe.

use std::path::PathBuf;

use fabric_engine::SecurityNotice;
use serde_json::{Value, json};

use crate::{CgroupUse, HostSupport, Limits, SandboxError};

/// The Landlock ABI that brought TCP rules.
pub(crate) const ABI_TCP: i32 = 4;
/// The Landlock ABI that brought signal and abstract-socket scoping.
const ABI_SCOPE: i32 = 6;

/// How tool processes are confined: the domain's one closed set of modes.
pub use fabric_domain::SandboxMode as Mode;

/// The effective sandbox policy of this process: what every tool command gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The mode.
    pub mode: Mode,
    /// What the host supports.
    pub host: HostSupport,
    /// The Landlock ABI in use (0 when off).
    pub landlock_abi: i32,
    /// Resource limits.
    pub limits: Limits,
    /// Directories readable (and executable) besides the system ones, e.g. a toolchain.
    pub read_paths: Vec<PathBuf>,
    /// Every command gets its own namespaces (the host allows them and the sandbox is on).
    pub namespaces: bool,
    /// A root fabric's commands run as `nobody` on idmapped mounts (namespaces, and the host
    /// allows idmapped mounts).
    pub unprivileged: bool,
    /// Every command gets a memory and pids cgroup (the host allows it, the sandbox is on
    /// and `sandbox_limits.cgroup` is not `off`).
    pub cgroups: bool,
}

impl Policy {
    /// Decides the effective policy, or refuses when `mode` cannot be enforced here. Off is
    /// always possible; strict and workspace-write-network need Landlock (any ABI) and
    /// seccomp. Features of newer ABIs that are missing are listed in the policy's
    /// `not_enforced`, never dropped silently.
    pub fn decide(
        mode: Mode,
        host: HostSupport,
        limits: Limits,
        read_paths: Vec<PathBuf>,
    ) -> Result<Self, SandboxError> {
        let landlock_abi = match mode {
            Mode::Off => 0,
            _ => {
                let abi = host
                    .landlock_abi
                    .clone()
                    .map_err(|why| SandboxError::Unenforceable {
                        mode: mode.as_str().to_owned(),
                        why: why.to_string(),
                    })?;
                host.seccomp
                    .clone()
                    .map_err(|why| SandboxError::Unenforceable {
                        mode: mode.as_str().to_owned(),
                        why: why.to_string(),
                    })?;
                abi
            }
        };
        let namespaces = mode != Mode::Off && host.namespaces.is_ok();
        let unprivileged = namespaces && host.root && host.unprivileged.is_ok();
        let cgroups = mode != Mode::Off && limits.cgroup != CgroupUse::Off && host.cgroups.is_ok();
        if mode != Mode::Off
            && limits.cgroup == CgroupUse::Required
            && let Err(why) = &host.cgroups
        {
            return Err(SandboxError::CgroupsRequired(why.to_string()));
        }
        Ok(Self {
            cgroups,
            unprivileged,
            mode,
            host,
            landlock_abi,
            limits,
            read_paths,
            namespaces,
        })
    }

    /// Whether processes of a run get the network.
    pub fn process_network(&self, run_allows: bool) -> bool {
        match self.mode {
            Mode::Strict => false,
            Mode::WorkspaceWriteNetwork | Mode::Off => run_allows,
        }
    }

    /// What is enforced, one line each.
    pub fn enforced(&self) -> Vec<String> {
        if self.mode == Mode::Off {
            return vec![
                "nothing by the kernel: the sandbox is off; only the allowlist, a scrubbed environment and process-group cleanup apply".to_owned(),
            ];
        }
        let abi = self.landlock_abi;
        let mut lines = vec![
            format!("filesystem (Landlock ABI {abi}): system paths read-only, the run's workspace and a private TMPDIR read-write, everything else invisible"),
            match self.mode {
                Mode::Strict => "network: processes get none (seccomp refuses every non-unix socket; Landlock refuses TCP bind/connect where ABI >= 4); the web tools follow --network-allowed".to_owned(),
                _ => "network: processes get TCP/UDP when the run allows the network, none otherwise; raw, packet and netlink sockets never".to_owned(),
            },
            "syscalls (seccomp): ptrace, mount, bpf, module loading, io_uring, keyrings, new namespaces (unshare, setns, clone flags; clone3 answers ENOSYS) and similar refused; no setuid or setgid mode bits; no extended attributes or ACLs (EOPNOTSUPP)".to_owned(),
            format!(
                "limits (setrlimit): cpu {} s, address space {} MiB, {}files up to {} MiB, {} open files, no core dumps",
                self.limits.cpu_s,
                self.limits.memory_bytes / (1024 * 1024),
                // With a cgroup, the processes are counted there, per command.
                if self.cgroups {
                    String::new()
                } else {
                    format!("{} processes, ", self.limits.processes)
                },
                self.limits.file_size_bytes / (1024 * 1024),
                self.limits.open_files
            ),
        ];
        if self.namespaces {
            lines.push("namespaces: every command sees a new root holding only the system directories, the read paths, its workspace and a private /tmp, all read-only and nosuid but the workspace and /tmp; protected paths read-only over the workspace; its own PID namespace and /proc (host processes invisible, every descendant ends with the command), IPC namespace, and network namespace when the network is off".to_owned());
            if self.unprivileged {
                lines.push(format!("user: commands run as nobody ({0}:{0}), not root; the workspace and /tmp are idmapped mounts, so root's files there appear as nobody's and what a command writes is stored as root's", crate::ns::NOBODY));
            }
            if self.host.root {
                lines.push("root-only files: files and folders under /etc that only root may read (/etc/shadow, host keys) are masked".to_owned());
            } else {
                lines.push(
                    "user namespace: the command's ids map only to the fabric's own".to_owned(),
                );
            }
        } else {
            lines.push("without namespaces: new process groups, SysV and POSIX IPC refused by seccomp, so the group kill reaches every descendant and nothing outlives the command".to_owned());
        }
        lines.push(
            "descriptors: every descriptor above 2 is closed when the command starts".to_owned(),
        );
        if self.host.root {
            lines.push("capabilities: all dropped (running as root; SECBIT_NOROOT keeps exec from granting them back)".to_owned());
        }
        lines.push(format!(
            "disk (watched while the command runs): it may add {} MiB and {} files and directories to its workspace and temp directory, or it is killed with everything it started",
            self.limits.disk_bytes / (1024 * 1024),
            self.limits.files
        ));
        if let (true, Ok(cgroups)) = (self.cgroups, &self.host.cgroups) {
            lines.push(format!(
                "memory and processes (a cgroup per command, v{}): {} MiB of memory, shared memory, tmpfs files and kernel buffers included (the kernel kills inside the group beyond it), and {} processes and threads of this command alone",
                cgroups.version,
                self.limits.memory_bytes / (1024 * 1024),
                self.limits.processes
            ));
        } else if self.unprivileged {
            lines.push(format!("process count: RLIMIT_NPROC applies to nobody; it counts every process uid {} has on the host, the commands of concurrent runs included", crate::ns::NOBODY));
        }
        if abi >= ABI_SCOPE {
            lines.push("scoping (Landlock ABI >= 6): no signals to and no abstract sockets of processes outside the sandbox".to_owned());
        }
        lines
    }

    /// What is not enforced on this host or by design, one line each.
    pub fn not_enforced(&self) -> Vec<String> {
        if self.mode == Mode::Off {
            return vec![
                "everything the sandbox would enforce: files, network, syscalls, resource limits"
                    .to_owned(),
            ];
        }
        let abi = self.landlock_abi;
        let mut lines = Vec::new();
        if !self.cgroups {
            let why = match (&self.host.cgroups, self.limits.cgroup) {
                (_, CgroupUse::Off) => "sandbox_limits.cgroup is off".to_owned(),
                (Err(why), _) => why.to_string(),
                (Ok(_), _) => "off".to_owned(),
            };
            lines.push(format!("memory the address-space limit cannot see, per command (no cgroup: {why}): shared memory (memfd, tmpfs files) and kernel buffers (sockets) are not capped"));
        }
        if self.host.root && !self.unprivileged && !self.cgroups {
            lines.push("process count: the kernel does not apply RLIMIT_NPROC to root; fork bombs are stopped by the timeout and the process-group kill".to_owned());
        }
        if self.host.root && !self.unprivileged {
            let why = self
                .host
                .unprivileged
                .as_ref()
                .err()
                .map_or("namespaces are off".to_owned(), ToString::to_string);
            lines.push(format!("unprivileged user ({why}): commands run as root without capabilities, so files root owns stay theirs to read where Landlock allows and, without namespaces, to chmod"));
        }
        lines.push("an exact disk quota: the disk cap is a count taken every 0.1 s or more (ten times what a count costs), so what a command writes between two counts passes before it is stopped, and what it wrote stays".to_owned());
        if abi < ABI_TCP {
            lines.push(format!(
                "TCP rules in Landlock (ABI {abi} < 4): seccomp alone refuses network sockets"
            ));
        }
        if abi < ABI_SCOPE {
            lines.push(format!(
                "signal and abstract-socket scoping (Landlock ABI {abi} < 6)"
            ));
        }
        if abi < 2 {
            lines.push("refusing links and renames across directories (Landlock ABI 1)".to_owned());
        }
        if self.namespaces {
            lines.push("connecting to UNIX socket files under the system directories or the read paths (e.g. /var/run is not mounted, but a socket under /etc would be reachable)".to_owned());
            if self.mode == Mode::WorkspaceWriteNetwork {
                lines.push("abstract UNIX sockets when the run allows the network: the command shares the host's network namespace, and Landlock's scoping only stops it from reaching out, not others from reaching in".to_owned());
            }
            lines.push("protected paths that do not exist yet (a new .git/): the shell removes them after the command and records a security_event".to_owned());
        } else {
            let why = self
                .host
                .namespaces
                .as_ref()
                .err()
                .map_or("off".to_owned(), ToString::to_string);
            lines.push(format!("namespaces ({why}): metadata of files outside the workspace (chmod, utimes), names and sizes of outside files (stat), other processes' command lines under /proc, and abstract UNIX sockets bound by a command are not hidden"));
            lines.push("connecting to UNIX socket files (e.g. /var/run/docker.sock): Landlock cannot refuse that on this ABI and seccomp keeps AF_UNIX for local IPC".to_owned());
            lines.push("protected paths inside the workspace (.git/): the file tools refuse them; the shell reverts what a command created there and records a security_event, but cannot undo a change to what existed".to_owned());
        }
        lines
    }

    /// The policy as recorded in `run_start` and printed by `fabric doctor --json`.
    pub fn to_json(&self) -> Value {
        json!({
            "mode": self.mode.as_str(),
            "enforced_by_kernel": self.mode != Mode::Off,
            "landlock_abi": self.landlock_abi,
            "namespaces": self.namespaces,
            "unprivileged": self.unprivileged,
            "cgroups": self.cgroups,
            "enforced": self.enforced(),
            "not_enforced": self.not_enforced(),
            "limits": self.limits.to_json(),
            "read_paths": self.read_paths,
            "host": self.host.to_json(),
        })
    }

    /// What a run must record as `security_event`s at its start.
    pub fn notices(&self) -> Vec<SecurityNotice> {
        match self.mode {
            Mode::Off => vec![SecurityNotice {
                event_type: "sandbox_off".to_owned(),
                message: "the OS sandbox is OFF (--sandbox off or `sandbox: off`): tool processes run with the user's full rights, including files outside the workspace and the network".to_owned(),
            }],
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(abi: Result<i32, SandboxError>) -> HostSupport {
        HostSupport {
            kernel: "test".to_owned(),
            landlock_abi: abi,
            seccomp: Ok(()),
            user_namespaces: Some(1),
            root: false,
            namespaces: Ok(()),
            unprivileged: Err(SandboxError::Unsupported("not root".to_owned())),
            cgroups: Err(SandboxError::Unsupported("no cgroups in tests".to_owned())),
        }
    }

    #[test]
    fn strict_without_landlock_refuses_and_says_how_to_opt_down() {
        let err = Policy::decide(
            Mode::Strict,
            host(Err(SandboxError::Unsupported("no landlock".to_owned()))),
            Limits::default(),
            vec![],
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("`strict` sandbox cannot be enforced"),
            "{text}"
        );
        assert!(text.contains("no landlock"), "{text}");
        assert!(text.contains("--sandbox off"), "{text}");
    }

    #[test]
    fn off_is_always_possible_and_noisy() {
        let policy = Policy::decide(
            Mode::Off,
            host(Err(SandboxError::Unsupported("x".to_owned()))),
            Limits::default(),
            vec![],
        )
        .unwrap();
        assert_eq!(policy.notices()[0].event_type, "sandbox_off");
        assert_eq!(policy.to_json()["enforced_by_kernel"], false);
    }

    #[test]
    fn old_abis_are_reported_not_hidden() {
        let policy = Policy::decide(Mode::Strict, host(Ok(3)), Limits::default(), vec![]).unwrap();
        let missing = policy.not_enforced().join("\n");
        assert!(missing.contains("ABI 3 < 4"), "{missing}");
        assert!(missing.contains("ABI 3 < 6"), "{missing}");
        assert!(!policy.process_network(true));
    }

    #[test]
    fn issue_31_required_cgroups_fail_closed_and_auto_reports_the_gap() {
        let limits = Limits {
            cgroup: CgroupUse::Required,
            ..Limits::default()
        };
        let err = Policy::decide(Mode::Strict, host(Ok(6)), limits, vec![]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("no cgroups in tests"), "{text}");
        assert!(text.contains("sandbox_limits.cgroup: auto"), "{text}");
        // Off needs nothing from the host.
        assert!(Policy::decide(Mode::Off, host(Ok(6)), limits, vec![]).is_ok());
        let policy = Policy::decide(Mode::Strict, host(Ok(6)), Limits::default(), vec![]).unwrap();
        assert!(!policy.cgroups);
        let gaps = policy.not_enforced().join("\n");
        assert!(gaps.contains("no cgroup: no cgroups in tests"), "{gaps}");
    }
}
