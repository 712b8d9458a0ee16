//! Issue #15: the process-count limit is reached, not only set. Alone in its test binary
//! because `RLIMIT_NPROC` counts every process of the command's user, so a fork bomb at the
//! limit would make other tests' commands fail to fork.

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
    let refused_after: u64 = stdout
        .split_whitespace()
        .skip_while(|w| *w != "refused-after")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the bomb was never refused: {all}"));
    // EAGAIN at the wall, well before 200 and no later than the limit allows.
    assert!(stdout.contains(" 11"), "EAGAIN: {all}");
    assert!(refused_after < 24, "{all}");
    // The sleeping children died with the command (its PID namespace), not after 30 s.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{all}"
    );
}
