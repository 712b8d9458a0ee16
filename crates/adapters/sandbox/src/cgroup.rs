//! A memory and process cgroup per command (issue #31): what `setrlimit` cannot see.
//!
//! `RLIMIT_AS` counts a process's address space, not memory: shared memory (`memfd` pages
//! once unmapped, tmpfs files) and the kernel's socket buffers escape it, and the OOM
//! killer charges them to nobody, so one command could hold gigabytes that every other run
//! of the machine needs. A memory cgroup counts all of it, page cache, shared memory and
//! kernel memory (every structure a UNIX socket costs, `sk_buff`s included: ADR-095 measured
//! what is left, a few KiB a process), and kills inside the group when the group is over its
//! limit; a pids cgroup caps the command's processes alone (`RLIMIT_NPROC` counts every
//! process of the uid, concurrent runs included, and does not apply to root).
//!
//! Each command gets a child of the fabric's own cgroup (so a limit placed on the fabric
//! still holds), `fabric-<pid>-<n>`, made before the spawn with its limits written; the
//! child joins it between `fork` and `exec` by writing `0` to a `cgroup.procs` descriptor
//! opened in the parent, before anything else, so everything it starts is counted. When the
//! command has ended the cgroup is read (did the OOM killer act? did a fork hit the cap?)
//! and removed.
//!
//! Cgroup v1 (and hybrid hosts, such as the one CI runs on) use the `memory` and `pids`
//! hierarchies: `memory.limit_in_bytes`, `memory.memsw.limit_in_bytes` (no swap beyond it,
//! where swap accounting is on) and `memory.kmem.tcp.limit_in_bytes` (TCP buffers, which v1
//! counts apart), `pids.max`. Cgroup v2 uses one directory: `memory.max` (kernel memory and
//! every socket buffer included), `memory.swap.max` 0, `pids.max`; it needs the fabric's
//! cgroup to hand the controllers down, which v2 allows only to a cgroup holding no process:
//! the fabric must be started in a delegated cgroup of its own (see SECURITY.md), and the
//! probe says so when it is not.

use crate::SandboxError;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where this host lets the fabric make its commands' cgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupHost {
    /// 1 (the `memory` and `pids` hierarchies) or 2 (the unified one).
    pub version: u8,
    /// The fabric's own cgroup in the memory hierarchy (v2: the one directory).
    memory: PathBuf,
    /// The fabric's own cgroup in the pids hierarchy (v2: the same directory).
    pids: PathBuf,
}

impl CgroupHost {
    /// Where it is, for `fabric doctor`.
    pub fn describe(&self) -> String {
        if self.version == 1 {
            format!(
                "cgroup v1: memory under {}, pids under {}",
                self.memory.display(),
                self.pids.display()
            )
        } else {
            format!("cgroup v2 under {}", self.memory.display())
        }
    }
}

/// Finds the fabric's cgroups and proves a command cgroup can be made there (one is made
/// and removed), or says why not.
pub(crate) fn probe() -> Result<CgroupHost, SandboxError> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let host = locate(&own, &mounts)?;
    // What a fabric killed with `kill -9` left: its commands died with it (the parent-death
    // signal), so their cgroups are empty and can go.
    for dir in [&host.memory, &host.pids] {
        remove_stale(dir);
    }
    // Made and removed once: creating a directory is what every command will need.
    let made = host
        .create(&crate::Limits::default())
        .map_err(|e| format!("cannot make a cgroup under the fabric's own: {e}"))?;
    drop(made);
    Ok(host)
}

/// Removes the empty `fabric-<pid>-<n>` cgroups under `dir` whose fabric is gone.
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("fabric-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            // A cgroup still holding a process is refused (EBUSY) and stays.
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// The controllers' mount points and the fabric's place in them, from `/proc/self/cgroup`
/// and `/proc/self/mountinfo`.
fn locate(own: &str, mountinfo: &str) -> Result<CgroupHost, SandboxError> {
    // v1: "4:memory:/path"; v2: "0::/path".
    let path_of = |controller: &str| {
        own.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
            list.split(',')
                .any(|c| c == controller)
                .then(|| path.to_owned())
        })
    };
    // mountinfo: "id parent maj:min root mountpoint options ... - fstype source superoptions".
    let mount_of = |fstype: &str, controller: Option<&str>| {
        mountinfo.lines().find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut right = right.split(' ');
            let (kind, _, options) = (right.next()?, right.next()?, right.next()?);
            let wanted =
                kind == fstype && controller.is_none_or(|c| options.split(',').any(|o| o == c));
            let mut left = left.split(' ');
            let root = left.nth(3)?;
            let point = left.next()?;
            // A mount of a sub-tree (a container's view) must be the root to map paths.
            (wanted && root == "/").then(|| PathBuf::from(point))
        })
    };
    let join = |mount: PathBuf, path: &str| mount.join(path.trim_start_matches('/'));
    if let (Some(memory), Some(pids)) = (path_of("memory"), path_of("pids")) {
        let (Some(m), Some(p)) = (
            mount_of("cgroup", Some("memory")),
            mount_of("cgroup", Some("pids")),
        ) else {
            return Err("cgroup v1 memory and pids controllers are not mounted".into());
        };
        return Ok(CgroupHost {
            version: 1,
            memory: join(m, &memory),
            pids: join(p, &pids),
        });
    }
    let unified = own
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or("no cgroup hierarchy holds the memory and pids controllers")?;
    let mount = mount_of("cgroup2", None).ok_or("cgroup v2 is not mounted")?;
    let dir = join(mount, unified);
    let delegated = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    let has = |c: &str| delegated.split_whitespace().any(|d| d == c);
    if !(has("memory") && has("pids")) {
        return Err(SandboxError::Unsupported(format!(
            "cgroup v2: the fabric's cgroup {} does not hand the memory and pids controllers to its children (cgroup.subtree_control: `{}`); start the fabric in a delegated cgroup of its own, e.g. `systemd-run --scope -p Delegate=yes fabric …`, whose processes sit in a child cgroup",
            dir.display(),
            delegated.trim()
        )));
    }
    Ok(CgroupHost {
        version: 2,
        memory: dir.clone(),
        pids: dir,
    })
}

/// The cgroup(s) of one command.
#[derive(Debug)]
pub(crate) struct CommandCgroup {
    version: u8,
    /// The directories made, memory first (one for v2).
    dirs: Vec<PathBuf>,
    /// `cgroup.procs` of each, open for writing: the child writes `0` to join.
    procs: Vec<OwnedFd>,
    memory_mb: u64,
    processes: u64,
}

impl CgroupHost {
    /// Makes a command's cgroup with `limits`' memory and process caps.
    pub(crate) fn create(&self, limits: &crate::Limits) -> io::Result<CommandCgroup> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "fabric-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut cgroup = CommandCgroup {
            version: self.version,
            dirs: Vec::new(),
            procs: Vec::new(),
            memory_mb: limits.memory_bytes / (1024 * 1024),
            processes: limits.processes,
        };
        let memory = limits.memory_bytes.to_string();
        let processes = limits.processes.to_string();
        if self.version == 1 {
            let dir = cgroup.make(self.memory.join(&name))?;
            write(&dir, "memory.limit_in_bytes", &memory)?;
            // Present only where swap accounting is on; no swap beyond the limit.
            write_if_present(&dir, "memory.memsw.limit_in_bytes", &memory)?;
            // v1 counts TCP buffers apart, and only once a limit is set.
            write_if_present(&dir, "memory.kmem.tcp.limit_in_bytes", &memory)?;
            let dir = cgroup.make(self.pids.join(&name))?;
            write(&dir, "pids.max", &processes)?;
        } else {
            let dir = cgroup.make(self.memory.join(&name))?;
            write(&dir, "memory.max", &memory)?;
            write_if_present(&dir, "memory.swap.max", "0")?;
            write(&dir, "pids.max", &processes)?;
        }
        for dir in &cgroup.dirs {
            let file = OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))?;
            cgroup.procs.push(OwnedFd::from(file));
        }
        Ok(cgroup)
    }
}

fn write(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    let path = dir.join(file);
    let mut f = OpenOptions::new().write(true).open(&path)?;
    f.write_all(value.as_bytes())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn write_if_present(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    match write(dir, file, value) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The number after `key ` in a flat-keyed cgroup file (`memory.events`, `pids.events`,
/// v1's `memory.oom_control`).
fn counter(path: &Path, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|rest| rest.strip_prefix(' '))
                    .and_then(|n| n.trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

impl CommandCgroup {
    fn make(&mut self, dir: PathBuf) -> io::Result<PathBuf> {
        std::fs::create_dir(&dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        self.dirs.push(dir.clone());
        Ok(dir)
    }

    /// The `cgroup.procs` descriptors the child writes `0` to.
    pub(crate) fn join_fds(&self) -> Vec<i32> {
        self.procs.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// The limits the command ran into, in words for the model and the runlog.
    pub(crate) fn limits_hit(&self) -> Option<String> {
        let oom_kills = self.dirs.first().map_or(0, |memory| {
            if self.version == 1 {
                counter(&memory.join("memory.oom_control"), "oom_kill")
            } else {
                counter(&memory.join("memory.events"), "oom_kill")
            }
        });
        let pids = self
            .dirs
            .last()
            .map_or(0, |d| counter(&d.join("pids.events"), "max"));
        let mut hit = Vec::new();
        if oom_kills > 0 {
            hit.push(format!(
                "more memory than the sandbox's limit of {} MiB, shared memory and kernel buffers included (sandbox_limits.memory_mb): the kernel killed {oom_kills} of its processes",
                self.memory_mb
            ));
        }
        if pids > 0 {
            hit.push(format!(
                "more processes than the sandbox's limit of {} (sandbox_limits.processes): {pids} forks were refused",
                self.processes
            ));
        }
        (!hit.is_empty()).then(|| hit.join("; and "))
    }
}

/// Removes the command's cgroups. Its processes are gone by now (the shell killed the
/// process group and waited; with namespaces the whole PID namespace died with its first
/// process); any straggler still counted is killed first, since a cgroup with a process
/// cannot be removed.
impl Drop for CommandCgroup {
    fn drop(&mut self) {
        self.procs.clear();
        for dir in self.dirs.iter().rev() {
            for attempt in 0..50 {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt < 49 => {
                        kill_members(dir);
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    Err(e) => {
                        tracing::warn!(cgroup = %dir.display(), error = %e, "could not remove a command's cgroup");
                        break;
                    }
                }
            }
        }
    }
}

/// SIGKILL to every process still in the cgroup `dir`: only the command's own can be there.
fn kill_members(dir: &Path) {
    let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        if pid > 1 {
            // SAFETY: kill with integer arguments.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Joins the cgroups whose `cgroup.procs` descriptors are `fds`: runs in the child between
/// fork and exec, so only `write(2)`.
pub(crate) fn join(fds: &[i32]) -> io::Result<()> {
    for fd in fds {
        // SAFETY: write of a 1-byte static buffer to a descriptor the parent opened.
        let r = unsafe { libc::write(*fd, b"0".as_ptr().cast(), 1) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_CGROUP: &str = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n0::/\n";
    const V1_MOUNTS: &str = "30 25 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n31 25 0:28 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n";

    #[test]
    fn v1_paths_come_from_each_controllers_mount_and_the_processs_place() {
        let host = locate(V1_CGROUP, V1_MOUNTS).unwrap();
        assert_eq!(host.version, 1);
        assert_eq!(
            host.memory,
            Path::new("/sys/fs/cgroup/memory/process_api/abc")
        );
        assert_eq!(host.pids, Path::new("/sys/fs/cgroup/pids"));
    }

    #[test]
    fn v1_without_a_mounted_controller_says_so() {
        let mounts = V1_MOUNTS.lines().next().unwrap();
        let err = locate(V1_CGROUP, mounts).unwrap_err();
        assert!(err.to_string().contains("not mounted"), "{err}");
    }

    #[test]
    fn v2_needs_the_controllers_handed_down() {
        let own = "0::/user.slice/fabric.scope\n";
        let mounts = "29 24 0:26 / /nonexistent-cgroup2 rw - cgroup2 cgroup2 rw\n";
        let err = locate(own, mounts).unwrap_err();
        assert!(err.to_string().contains("Delegate=yes"), "{err}");
        assert!(
            err.to_string()
                .contains("/nonexistent-cgroup2/user.slice/fabric.scope"),
            "{err}"
        );
    }

    #[test]
    fn stale_cgroups_of_gone_fabrics_are_removed_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        // No process has pid 4194305 (above the kernel's largest pid_max).
        let gone = dir.path().join("fabric-4194305-0");
        let alive = dir.path().join(format!("fabric-{}-0", std::process::id()));
        let other = dir.path().join("not-ours");
        for d in [&gone, &alive, &other] {
            std::fs::create_dir(d).unwrap();
        }
        remove_stale(dir.path());
        assert!(!gone.exists());
        assert!(alive.exists() && other.exists());
    }

    #[test]
    fn counters_are_read_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memory.oom_control");
        std::fs::write(&file, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n").unwrap();
        assert_eq!(counter(&file, "oom_kill"), 3);
        assert_eq!(counter(&file, "oom_kill_disable"), 0);
        assert_eq!(counter(&file, "absent"), 0);
    }
}
