//! Issue #15: who a command runs as and what it keeps. A root fabric's commands run as
//! `nobody` on idmapped mounts (ADR-053) and keep no capability, in every mode with a
//! sandbox; `workspace-write-network` gives processes TCP but still no raw, packet or netlink
//! sockets. Each claim is checked on a real process's own view of itself and on the files it
//! leaves.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::{policy, sandbox, sh, sh_net, text};
use fabric_sandbox::{Limits, Mode, OsSandbox, probe};

/// `prctl(PR_GET_SECUREBITS)` and the capability and id lines of `/proc/self/status`.
const SELF_VIEW: &str = "python3 -c \"import ctypes; print('securebits', ctypes.CDLL(None).prctl(27, 0, 0, 0, 0))\"; \
     grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapAmb):' /proc/self/status";

fn field<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map_or("", str::trim)
}

/// The four capability sets empty and `SECBIT_NOROOT|SECBIT_NOROOT_LOCKED` set, as the
/// command saw itself through [`SELF_VIEW`].
fn assert_no_capabilities(stdout: &str, all: &str) {
    for cap in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
        assert_eq!(field(stdout, cap), "0000000000000000", "{cap} {all}");
    }
    assert_eq!(field(stdout, "securebits"), "3", "{all}");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg_attr(fabric_not_root, ignore = "needs a root fabric: run the tests as root")]
#[test]
fn issue_15_a_root_fabric_runs_commands_as_nobody_and_what_they_write_stays_root_s() {
    if !is_root() {
        eprintln!("SKIP: the fabric does not run as root here; commands keep its own ids");
        return;
    }
    let Some(sb) = sandbox(Mode::Strict) else {
        return;
    };
    assert!(
        sb.policy().unprivileged,
        "a root fabric with namespaces must run commands as nobody here: {:?}",
        probe().unprivileged
    );
    let ws = tempfile::tempdir().unwrap();
    // A file only root may read or write, made by the fabric (as the write_file tool does).
    let private = ws.path().join("private.txt");
    std::fs::write(&private, "mine").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let script = format!(
        "{SELF_VIEW}; cat private.txt; echo; echo more >> private.txt && echo APPENDED; \
         echo new > made.txt; mkdir dir; chmod 700 made.txt && echo CHMOD-OWN; \
         echo t > /tmp/t && stat -c 'tmp-owner %u' /tmp/t; \
         touch /etc/hostname 2>&1; cat /etc/shadow 2>&1; \
         python3 -c \"import os; os.chown('made.txt', 1000, 1000)\" 2>&1 | tail -n 1"
    );
    let out = sh(&sb, ws.path(), &script);
    let all = text(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The process's own view: nobody, no groups, no capability, NOROOT set and locked.
    assert!(
        field(&stdout, "Uid:")
            .split_whitespace()
            .all(|u| u == "65534"),
        "{all}"
    );
    assert!(
        field(&stdout, "Gid:")
            .split_whitespace()
            .all(|g| g == "65534"),
        "{all}"
    );
    assert_eq!(field(&stdout, "Groups:"), "", "{all}");
    assert_no_capabilities(&stdout, &all);
    // Root's files in the workspace are the command's; what it writes is stored as root's.
    assert!(stdout.contains("mine"), "{all}");
    assert!(stdout.contains("APPENDED"), "{all}");
    assert!(stdout.contains("CHMOD-OWN"), "{all}");
    assert!(stdout.contains("tmp-owner 65534"), "{all}");
    for name in ["made.txt", "dir", "private.txt"] {
        let meta = std::fs::metadata(ws.path().join(name)).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (0, 0),
            "{name} on the host: {all}"
        );
    }
    assert_eq!(
        std::fs::metadata(ws.path().join("made.txt"))
            .unwrap()
            .mode()
            & 0o777,
        0o700
    );
    // Root's ownership elsewhere gives nothing: the system is read-only and not its, the
    // masked secrets unreadable, and changing an owner needs a capability it lacks.
    assert!(
        stdout.contains("Read-only file system") || stdout.contains("Permission denied"),
        "{all}"
    );
    assert!(!stdout.contains("root:"), "{all}");
    assert!(stdout.contains("PermissionError"), "{all}");
}

#[cfg_attr(fabric_not_root, ignore = "needs a root fabric: run the tests as root")]
#[test]
fn issue_15_without_namespaces_a_root_command_keeps_no_capability() {
    if !is_root() {
        eprintln!("SKIP: the fabric does not run as root here; there is nothing to drop");
        return;
    }
    let Some(mut policy) = policy(Mode::Strict, Limits::default()) else {
        return;
    };
    // As on a host that forbids namespaces: the probe's answer, switched off.
    policy.namespaces = false;
    policy.unprivileged = false;
    let sb = OsSandbox::new(policy, vec![]).unwrap();
    let ws = tempfile::tempdir().unwrap();
    let out = sh(&sb, ws.path(), SELF_VIEW);
    let all = text(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        field(&stdout, "Uid:").split_whitespace().all(|u| u == "0"),
        "{all}"
    );
    assert_no_capabilities(&stdout, &all);
}

/// Tries a TCP connection to the test's listener, then the three socket families no mode
/// allows; prints one word per outcome.
fn network_script(port: u16) -> String {
    format!(
        "python3 -c \"
import socket
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=3).close(); print('TCP-CONNECTED')
except OSError as e:
    print('TCP-REFUSED', e)
for name, args in [('RAW', (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)), ('PACKET', (socket.AF_PACKET, socket.SOCK_RAW, 0)), ('NETLINK', (socket.AF_NETLINK, socket.SOCK_RAW, 0))]:
    try:
        socket.socket(*args).close(); print(name + '-OPENED')
    except OSError as e:
        print(name + '-REFUSED', e.errno)
\""
    )
}

#[test]
fn issue_15_workspace_write_network_gives_tcp_but_never_raw_packet_or_netlink_sockets() {
    let Some(sb) = sandbox(Mode::WorkspaceWriteNetwork) else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let ws = tempfile::tempdir().unwrap();
    let allowed = sh_net(&sb, ws.path(), &network_script(port), true);
    let all = text(&allowed);
    let stdout = String::from_utf8_lossy(&allowed.stdout);
    assert!(stdout.contains("TCP-CONNECTED"), "{all}");
    // The connection really reached this process's listener.
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_ok(), "{all}");
    for family in ["RAW", "PACKET", "NETLINK"] {
        // EPERM from seccomp (1), whatever the run allows.
        assert!(
            stdout.contains(&format!("{family}-REFUSED 1")),
            "{family}: {all}"
        );
    }
    // The same mode with a run that does not allow the network: no TCP either.
    let denied = sh_net(&sb, ws.path(), &network_script(port), false);
    let all = text(&denied);
    assert!(
        String::from_utf8_lossy(&denied.stdout).contains("TCP-REFUSED"),
        "{all}"
    );
    assert!(listener.accept().is_err(), "{all}");
}
