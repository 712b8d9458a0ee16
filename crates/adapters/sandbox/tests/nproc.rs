//! Issue #15: the process-count limit is reached, not only set; issue #31: with a cgroup per
//! command it counts that command's processes alone. Alone in its test binary because
//! without a cgroup `RLIMIT_NPROC` counts every process of the command's user, so a fork
//! bomb at the limit would make other tests' commands fail to fork.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use common::{policy, sh, text};
use fabric_sandbox::{Limits, Mode, OsSandbox};

#[test]
fn issue_15_a_fork_bomb_stops_at_the_process_limit() {
    let limits = Limits {
        processes: 24,
        ..Limits::default()
    };
    let Some(policy) = policy(Mode::Strict, limits) else {
        return;
    };
    if policy.host.root && !policy.unprivileged {
        eprintln!(
            "SKIP: commands run as root here ({:?}) and the kernel does not apply RLIMIT_NPROC to root",
            policy.host.unprivileged
        );
        assert!(std::env::var_os("FABRIC_REQUIRE_TEST_DEPS").is_none());
        return;
    }
    let sb = OsSandbox::new(policy, vec![]).unwrap();
    let ws = tempfile::tempdir().unwrap();
    let bomb = "python3 -c \"
import os, time
n = 0
for i in range(200):
    try:
        pid = os.fork()
    except OSError as e:
        print('refused-after', n, e.errno, flush=True)
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
else:
    print('forked-all', n, flush=True)
\"";
    let started = std::time::Instant::now();
    let out = sh(&sb, ws.path(), bomb);
    let all = text(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // "refused-after <forks> <errno>".
    let refused: Vec<u64> = stdout
        .split_whitespace()
        .skip_while(|w| *w != "refused-after")
        .skip(1)
        .take(2)
        .filter_map(|n| n.parse().ok())
        .collect();
    let [refused_after, errno] = refused[..] else {
        panic!("the bomb was never refused: {all}");
    };
    // EAGAIN at the wall (issue #27: the errno itself, not " 11" anywhere), well before 200
    // and no later than the limit allows.
    assert_eq!(errno, 11, "EAGAIN: {all}");
    assert!(refused_after < 24, "{all}");
    // The sleeping children died with the command (its PID namespace), not after 30 s.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{all}"
    );
}

/// Issue #31: with a cgroup per command, `processes` counts that command's processes alone,
/// so one command near its limit does not make another command's forks fail (with
/// `RLIMIT_NPROC` both would share one count for `nobody`).
#[test]
fn issue_31_with_a_cgroup_each_command_counts_its_own_processes() {
    let limits = Limits {
        processes: 24,
        ..Limits::default()
    };
    let Some(policy) = policy(Mode::Strict, limits) else {
        return;
    };
    if !policy.cgroups {
        eprintln!(
            "SKIP: this host gives commands no cgroup: {:?}",
            policy.host.cgroups
        );
        assert!(std::env::var_os("FABRIC_REQUIRE_TEST_DEPS").is_none());
        return;
    }
    let sb = std::sync::Arc::new(OsSandbox::new(policy, vec![]).unwrap());
    let forks = |hold: f64| {
        format!(
            "python3 -c \"
import os, time
kids = []
for i in range(18):
    pid = os.fork()
    if pid == 0:
        time.sleep({hold})
        os._exit(0)
    kids.append(pid)
print('forked', len(kids), flush=True)
for k in kids: os.waitpid(k, 0)
\""
        )
    };
    let holder = {
        let (sb, script) = (std::sync::Arc::clone(&sb), forks(4.0));
        std::thread::spawn(move || {
            let ws = tempfile::tempdir().unwrap();
            text(&sh(&sb, ws.path(), &script))
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let ws = tempfile::tempdir().unwrap();
    let second = text(&sh(&sb, ws.path(), &forks(0.1)));
    let first = holder.join().unwrap();
    assert!(first.contains("forked 18"), "{first}");
    assert!(second.contains("forked 18"), "{second}");
}
