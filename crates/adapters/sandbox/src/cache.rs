//! The namespace probe's good verdict, kept between processes (issue #26). The probe sets up
//! a command's namespaces twice on `true` (about a third of a cold one-step `fabric run`);
//! its answer changes only with the kernel, the boot, the user, a few sysctls and the
//! process's own confinement (capabilities, seccomp filters, LSM label), which make the key. Only a working setup is kept: a host where namespaces fail is probed again each
//! time, so a fix is seen at once, and a stale "works" heals itself (a command whose
//! namespaces fail to set up removes the file, see [`forget`]).
//!
//! The file is `$XDG_CACHE_HOME/agent-fabric/sandbox-probe.json` (else under `~/.cache`),
//! read only when this user owns it and nobody else may write it: a planted file could only
//! claim that namespaces work, which the first command would disprove, but it is refused
//! anyway.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

fn path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("agent-fabric").join("sandbox-probe.json"))
}

/// What the verdict depends on.
fn key(root: bool) -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    [
        env!("CARGO_PKG_VERSION").to_owned(),
        read("/proc/sys/kernel/random/boot_id"),
        read("/proc/sys/kernel/osrelease"),
        rustix::process::geteuid().as_raw().to_string(),
        root.to_string(),
        // A root fabric started without CAP_SYS_ADMIN (`setpriv --bounding-set
        // -sys_admin`, a container's defaults) cannot make namespaces (issue #31).
        capabilities(),
        read("/proc/sys/user/max_user_namespaces"),
        read("/proc/sys/kernel/unprivileged_userns_clone"),
        read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        // A seccomp filter (a container runtime's default profile, systemd's
        // `RestrictNamespaces=`) may refuse `unshare`/`clone3`, and an LSM profile may
        // refuse user namespaces: a verdict kept outside them does not hold inside (issue
        // #40).
        status_lines(&["Seccomp:", "Seccomp_filters:", "NoNewPrivs:"]),
        read("/proc/self/attr/current"),
    ]
    .join("|")
}

/// This process's effective capabilities, as `/proc/self/status` shows them.
fn capabilities() -> String {
    status_lines(&["CapEff:"])
}

/// The values of the `/proc/self/status` lines named by `prefixes`, in their order there.
fn status_lines(prefixes: &[&str]) -> String {
    std::fs::read_to_string("/proc/self/status")
        .map(|status| {
            status
                .lines()
                .filter_map(|l| {
                    prefixes
                        .iter()
                        .find_map(|p| l.strip_prefix(p).map(|v| v.trim().to_owned()))
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Whether a kept verdict says the whole setup works here.
pub(crate) fn works(root: bool) -> bool {
    path().is_some_and(|path| works_at(&path, root))
}

fn works_at(path: &std::path::Path, root: bool) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if meta.uid() != rustix::process::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
        tracing::debug!(path = %path.display(), "ignoring a sandbox probe cache this user does not own alone");
        return false;
    }
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|v| v["key"].as_str() == Some(key(root).as_str()) && v["works"] == true)
}

/// Keeps the verdict that the whole setup works here; a failure to write is only logged.
pub(crate) fn remember(root: bool) {
    if let Some(path) = path() {
        remember_at(&path, root);
    }
}

fn remember_at(path: &std::path::Path, root: bool) {
    let text = serde_json::json!({"key": key(root), "works": true}).to_string();
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            // Written beside, then renamed: a reader never sees half a file.
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, text)?;
            std::fs::rename(&tmp, path)
        });
    if let Err(e) = written {
        tracing::debug!(path = %path.display(), error = %e, "cannot keep the sandbox probe's verdict");
    }
}

/// Drops the kept verdict: a command's namespaces just failed to set up.
pub(crate) fn forget() {
    if let Some(path) = path() {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn issue_26_a_kept_verdict_is_read_only_when_it_fits_and_is_the_users_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent-fabric").join("sandbox-probe.json");
        assert!(!works_at(&path, false), "nothing kept yet");
        remember_at(&path, false);
        assert!(works_at(&path, false));
        // Another key (root, here) does not read it.
        assert!(!works_at(&path, true));
        // Writable by others: refused.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(!works_at(&path, false));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        // A verdict from another boot or version: refused.
        std::fs::write(&path, r#"{"key": "0.0.0|old-boot", "works": true}"#).unwrap();
        assert!(!works_at(&path, false));
    }
}
