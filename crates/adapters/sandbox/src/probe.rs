//! What this host's kernel supports, asked once at startup.

use crate::SandboxError;
use std::sync::RwLock;

use serde_json::{Value, json};

/// `LANDLOCK_CREATE_RULESET_VERSION`: asks `landlock_create_ruleset` for the ABI version.
const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;

/// The sandboxing features of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSupport {
    /// `uname -r`.
    pub kernel: String,
    /// The Landlock ABI version, or why there is none (not built in, not enabled at boot).
    pub landlock_abi: Result<i32, SandboxError>,
    /// Whether seccomp filters can be installed (and return an errno).
    pub seccomp: Result<(), SandboxError>,
    /// `user.max_user_namespaces`, if readable. Reported.
    pub user_namespaces: Option<u64>,
    /// Whether a command can get its own mount, PID, IPC and network namespaces (and a user
    /// namespace when not root) here: the whole setup tried once on `true`, or why not.
    pub namespaces: Result<(), SandboxError>,
    /// Root only: whether commands can run as `nobody` on idmapped mounts (the whole setup
    /// tried once on `true`), or why not; for a non-root fabric, why it does not apply.
    pub unprivileged: Result<(), SandboxError>,
    /// The fabric runs as root: `RLIMIT_NPROC` does not apply, capabilities must be dropped.
    pub root: bool,
    /// Where commands' memory and pids cgroups are made, or why they cannot be.
    pub cgroups: Result<crate::CgroupHost, SandboxError>,
}

impl HostSupport {
    /// What the probe found, for `run_start` and `fabric doctor`.
    pub fn to_json(&self) -> Value {
        json!({
            "kernel": self.kernel,
            "landlock_abi": self.landlock_abi.as_ref().ok(),
            "landlock_error": self.landlock_abi.as_ref().err().map(ToString::to_string),
            "seccomp": self.seccomp.is_ok(),
            "seccomp_error": self.seccomp.as_ref().err().map(ToString::to_string),
            "user_namespaces": self.user_namespaces,
            "namespaces": self.namespaces.is_ok(),
            "namespaces_error": self.namespaces.as_ref().err().map(ToString::to_string),
            "unprivileged": self.unprivileged.is_ok(),
            "unprivileged_error": self.unprivileged.as_ref().err().map(ToString::to_string),
            "root": self.root,
            "cgroups": self.cgroups.as_ref().ok().map(|c| c.describe()),
            "cgroups_error": self.cgroups.as_ref().err().map(ToString::to_string),
        })
    }
}

/// Probes the kernel: Landlock's ABI (the syscall itself, not the LSM list, so a Landlock
/// disabled at boot is seen as such), seccomp filter support, namespaces (by setting them up
/// for one `true`), and whether we run as root. Done once per process (about a millisecond);
/// later calls return the same answer (or a fresh probe's, see `reprobe`).
pub fn probe() -> HostSupport {
    let probed = PROBED
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    match probed {
        Some(host) => host,
        None => PROBED
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_or_insert_with(|| probe_now(true))
            .clone(),
    }
}

/// This process's probe's answer, once made.
static PROBED: RwLock<Option<HostSupport>> = RwLock::new(None);

/// Probes the host afresh, not trusting a kept verdict, after a command's namespaces failed
/// to set up (issue #40); later [`probe`]s answer the same.
pub(crate) fn reprobe() -> HostSupport {
    let host = probe_now(false);
    *PROBED
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(host.clone());
    host
}

/// The probe; with `trust_kept`, a verdict kept by an earlier process (see `cache`) stands
/// for the namespace setup.
fn probe_now(trust_kept: bool) -> HostSupport {
    let root = rustix::process::geteuid().is_root();
    let not_root = || Err("not running as root: commands keep the fabric's own ids".into());
    let kept = trust_kept && crate::cache::works(root);
    let (namespaces, unprivileged) = if kept {
        // The whole setup worked here before, on this boot, kernel and user.
        (Ok(()), if root { Ok(()) } else { not_root() })
    } else if root {
        match namespaces(true) {
            Ok(()) => (Ok(()), Ok(())),
            Err(why) => (namespaces(false), Err(why)),
        }
    } else {
        (namespaces(false), not_root())
    };
    if !kept && namespaces.is_ok() && (!root || unprivileged.is_ok()) {
        crate::cache::remember(root);
    }
    HostSupport {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".to_owned()),
        landlock_abi: landlock_abi(),
        seccomp: seccomp(),
        user_namespaces: std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        root,
        namespaces,
        unprivileged,
        cgroups: crate::cgroup::probe(),
    }
}

/// Sets up the namespaces of a command (without Landlock and seccomp) for `true`, for a
/// root fabric with `unprivileged` also the idmapped mounts and the switch to `nobody`.
fn namespaces(unprivileged: bool) -> Result<(), SandboxError> {
    use std::os::unix::process::CommandExt;
    let program = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .ok_or("no `true` program to try them on")?;
    let dirs = |what: &str| {
        tempfile::Builder::new()
            .prefix("fabric-probe-")
            .tempdir()
            .map_err(|e| format!("{what}: {e}"))
    };
    let workspace = dirs("a probe workspace")?;
    let root = rustix::process::geteuid().is_root();
    let plan = crate::ns::Plan::new(
        &["/usr", "/bin", "/lib", "/lib64", "/etc", "/proc", "/dev"],
        &[],
        root,
        unprivileged,
    )
    .map_err(|e| format!("preparing the probe: {e}"))?;
    let steps = plan
        .steps(&crate::ns::Command {
            workspace: workspace.path(),
            tmp_bytes: 1 << 20,
            tmp_files: 64,
            network: false,
            protected: &[],
        })
        .map_err(|e| format!("preparing the probe: {e}"))?;
    if unprivileged && !crate::ns::drops_root(&steps) {
        return Err("idmapped mounts do not work on the temporary directory's file system".into());
    }
    let mut cmd = std::process::Command::new(program);
    cmd.current_dir(workspace.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: the hook only makes syscalls on data prepared above (see `ns::apply`).
    unsafe {
        cmd.pre_exec(move || crate::ns::apply(&steps));
    }
    let status = cmd.status().map_err(|e| {
        crate::ns::explain(&e).unwrap_or_else(|| format!("the namespace probe did not start: {e}"))
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(SandboxError::Unsupported(format!(
            "the namespace probe ended with {status}"
        )))
    }
}

fn landlock_abi() -> Result<i32, SandboxError> {
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the syscall reads
    // no memory and only returns the ABI version (or -1 and errno); no fd is created.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0_usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi >= 1 {
        return i32::try_from(abi).map_err(|_| format!("unexpected Landlock ABI {abi}").into());
    }
    let errno = std::io::Error::last_os_error();
    Err(SandboxError::Unsupported(match errno.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel has no Landlock (built without CONFIG_SECURITY_LANDLOCK, or older than 5.13)".to_owned(),
        Some(libc::EOPNOTSUPP) => "Landlock is built in but not enabled at boot (add `landlock` to the `lsm=` kernel parameter)".to_owned(),
        _ => format!("the Landlock probe failed: {errno}"),
    }))
}

fn seccomp() -> Result<(), SandboxError> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    if !status.lines().any(|l| l.starts_with("Seccomp:")) {
        return Err("the kernel has no seccomp (CONFIG_SECCOMP)".into());
    }
    match std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail") {
        Ok(actions) if actions.split_whitespace().any(|a| a == "errno") => Ok(()),
        Ok(actions) => Err(SandboxError::Unsupported(format!(
            "seccomp filters cannot return an errno here (actions: {})",
            actions.trim()
        ))),
        Err(e) => Err(SandboxError::Unsupported(format!(
            "seccomp filter support unknown: {e}"
        ))),
    }
}
