//! Leftovers of a stopped run: processes its commands started that outlived the fabric
//! (issue #26). Every command `shell` starts has `HOME` set to the run's workspace, and the
//! processes it starts inherit it, so a process whose environment says so belongs to the run,
//! whatever process group or session it moved to. A command dies with the fabric (the
//! parent-death signal of the OS sandbox), but what it forked and detached does not: when the
//! run is continued, those are killed before it goes on, and the runlog says which.

use std::path::Path;

use rustix::process::{Pid, Signal};

/// Kills the processes of this user whose environment has `HOME=<workspace>`, and the process
/// groups they lead; returns their pids, sorted. Linux only (`/proc`); elsewhere nothing.
pub fn reap_leftovers(workspace: &Path) -> Vec<u32> {
    let needle = {
        let mut n = b"HOME=".to_vec();
        n.extend_from_slice(workspace.as_os_str().as_encoded_bytes());
        n.push(0);
        n
    };
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut reaped: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != own)
        .filter(|&pid| {
            // Processes of other users are unreadable: not ours to kill anyway.
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| starts_or_has(&env, &needle))
        })
        .filter(|&pid| {
            let Some(target) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
                return false;
            };
            // A group it leads goes too (the command's own group: pgid = pid).
            if rustix::process::getpgid(Some(target)).is_ok_and(|g| g == target) {
                let _ = rustix::process::kill_process_group(target, Signal::KILL);
            }
            rustix::process::kill_process(target, Signal::KILL).is_ok()
        })
        .collect();
    reaped.sort_unstable();
    if !reaped.is_empty() {
        tracing::warn!(workspace = %workspace.display(), pids = ?reaped, "killed processes a stopped run left running");
    }
    reaped
}

/// Whether the NUL-separated `env` holds the entry `needle` (which ends with its NUL).
fn starts_or_has(env: &[u8], needle: &[u8]) -> bool {
    env.starts_with(needle)
        || env
            .windows(needle.len() + 1)
            .any(|w| w[0] == 0 && &w[1..] == needle)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_entry_is_found_whole_never_as_a_prefix_of_another() {
        let env = b"PATH=/bin\0HOME=/w/run\0LANG=C\0";
        assert!(starts_or_has(env, b"HOME=/w/run\0"));
        assert!(!starts_or_has(env, b"HOME=/w/ru\0"));
        assert!(starts_or_has(b"HOME=/w/run\0X=1\0", b"HOME=/w/run\0"));
        assert!(!starts_or_has(b"XHOME=/w/run\0", b"HOME=/w/run\0"));
    }

    #[test]
    fn issue_26_a_process_with_the_workspace_as_home_is_killed_and_others_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let spawn = |home: &Path| {
            std::process::Command::new("sleep")
                .arg("30")
                .env_clear()
                .env("HOME", home)
                .spawn()
                .unwrap()
        };
        let mut ours = spawn(dir.path());
        let mut theirs = spawn(other.path());
        let reaped = reap_leftovers(dir.path());
        assert_eq!(reaped, vec![ours.id()]);
        assert!(!ours.wait().unwrap().success());
        assert!(
            theirs.try_wait().unwrap().is_none(),
            "another run's process was killed"
        );
        let _ = theirs.kill();
        let _ = theirs.wait();
    }
}
