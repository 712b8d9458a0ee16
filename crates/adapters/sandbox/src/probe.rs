//! What this host's kernel supports, asked once at startup.

use serde_json::{Value, json};

/// `LANDLOCK_CREATE_RULESET_VERSION`: asks `landlock_create_ruleset` for the ABI version.
const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;

/// The sandboxing features of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSupport {
    /// `uname -r`.
    pub kernel: String,
    /// The Landlock ABI version, or why there is none (not built in, not enabled at boot).
    pub landlock_abi: Result<i32, String>,
    /// Whether seccomp filters can be installed (and return an errno).
    pub seccomp: Result<(), String>,
    /// `user.max_user_namespaces`, if readable. Reported; not used by the sandbox.
    pub user_namespaces: Option<u64>,
    /// The fabric runs as root: `RLIMIT_NPROC` does not apply, capabilities must be dropped.
    pub root: bool,
}

impl HostSupport {
    /// What the probe found, for `run_start` and `fabric doctor`.
    pub fn to_json(&self) -> Value {
        json!({
            "kernel": self.kernel,
            "landlock_abi": self.landlock_abi.as_ref().ok(),
            "landlock_error": self.landlock_abi.as_ref().err(),
            "seccomp": self.seccomp.is_ok(),
            "seccomp_error": self.seccomp.as_ref().err(),
            "user_namespaces": self.user_namespaces,
            "root": self.root,
        })
    }
}

/// Probes the kernel: Landlock's ABI (the syscall itself, not the LSM list, so a Landlock
/// disabled at boot is seen as such), seccomp filter support, user namespaces, and whether
/// we run as root. Cheap: one syscall and a few `/proc` reads.
pub fn probe() -> HostSupport {
    HostSupport {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".to_owned()),
        landlock_abi: landlock_abi(),
        seccomp: seccomp(),
        user_namespaces: std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        root: rustix::process::geteuid().is_root(),
    }
}

fn landlock_abi() -> Result<i32, String> {
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
        return i32::try_from(abi).map_err(|_| format!("unexpected Landlock ABI {abi}"));
    }
    let errno = std::io::Error::last_os_error();
    Err(match errno.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel has no Landlock (built without CONFIG_SECURITY_LANDLOCK, or older than 5.13)".to_owned(),
        Some(libc::EOPNOTSUPP) => "Landlock is built in but not enabled at boot (add `landlock` to the `lsm=` kernel parameter)".to_owned(),
        _ => format!("the Landlock probe failed: {errno}"),
    })
}

fn seccomp() -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    if !status.lines().any(|l| l.starts_with("Seccomp:")) {
        return Err("the kernel has no seccomp (CONFIG_SECCOMP)".to_owned());
    }
    match std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail") {
        Ok(actions) if actions.split_whitespace().any(|a| a == "errno") => Ok(()),
        Ok(actions) => Err(format!(
            "seccomp filters cannot return an errno here (actions: {})",
            actions.trim()
        )),
        Err(e) => Err(format!("seccomp filter support unknown: {e}")),
    }
}
