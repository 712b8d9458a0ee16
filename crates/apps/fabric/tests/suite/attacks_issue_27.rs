//! The sandbox's guarantees that had no attack (issue #27): every call of the seccomp
//! denylist, Landlock's scoping of signals and abstract UNIX sockets, and what
//! `workspace-write-network` gives a command, each through the real `fabric` binary.
//!
//! Each attempt prints `PROBE:<id>:<answer>`, the answer being `OK` or the errno's name, so
//! the test asserts the exact refusal and from it the layer: seccomp answers `EPERM` (or
//! `ENOSYS`), Landlock `EACCES` for files and `EPERM` for its scopes, the namespaces
//! `ENOENT`, `ESRCH` or `ECONNREFUSED` (what is refused does not exist there). With
//! `--sandbox off` every attempt must get past seccomp, so none passes for a reason that
//! proves nothing.

#![allow(clippy::print_stderr)]

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::attacks_round_three::{Column, is_root};
use super::fixture::{Fixture, of_kind};

/// What stands behind seccomp's `EPERM` for one call, as the kernel alone (no seccomp, no
/// capabilities) answers the attempt.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Wall {
    /// The kernel alone answers something else (the arguments are checked before any
    /// privilege), so `EPERM` under `strict` can only be seccomp's.
    Seccomp,
    /// The kernel alone answers `EPERM` too: it checks the capability first, so the
    /// capability-less command meets two walls and the errno cannot tell them apart.
    SeccompThenCapabilities,
    /// Depends on the kernel's build: here module loading and kexec are not built in
    /// (`ENOSYS`, so `EPERM` is seccomp's); where they are, the capability check comes first.
    KernelBuild,
}

/// The answer an attempt must get.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Is(&'static str),
    /// Anything but this errno (the kernel's answer depends on its build).
    Not(&'static str),
}

impl Answer {
    fn matches(self, got: &str) -> bool {
        match self {
            Self::Is(want) => got == want,
            Self::Not(refused) => got != refused && got != "missing",
        }
    }
}

/// One call of the denylist: the Python expression making it, the answer with the sandbox
/// off (as root), the wall, and seccomp's answer under `strict`.
struct Denial {
    id: &'static str,
    call: &'static str,
    off: Answer,
    wall: Wall,
    strict: &'static str,
}

const fn denial(
    id: &'static str,
    call: &'static str,
    off: Answer,
    wall: Wall,
    strict: &'static str,
) -> Denial {
    Denial {
        id,
        call,
        off,
        wall,
        strict,
    }
}

/// What every probe script starts with: raw system calls by number (x86_64) through
/// `ctypes`, answered `OK` or by the errno's name.
const PRELUDE: &str = r#"import ctypes, errno, os
l = ctypes.CDLL(None, use_errno=True)
l.syscall.restype = ctypes.c_long
def sc(*a):
    r = l.syscall(*[ctypes.c_long(x) if isinstance(x, int) else x for x in a])
    return 'OK' if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
def setid(r, path):
    # A call that answered OK must have left the bit, or it proves nothing.
    if r != 'OK': return r
    return 'OK' if os.stat(path).st_mode & 0o6000 else 'NOBIT'
def probe(id, f):
    try:
        answer = f()
    except OSError as e:
        answer = errno.errorcode.get(e.errno, str(e.errno))
    print(f'PROBE:{id}:{answer or "OK"}', flush=True)
class IOV(ctypes.Structure): _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
src = ctypes.create_string_buffer(b'fabric27')
dst = ctypes.create_string_buffer(8)
here = IOV(ctypes.addressof(dst), 8)
there = IOV(ctypes.addressof(src), 8)
zeros = ctypes.create_string_buffer(144)
how = (ctypes.c_uint64 * 3)()
os.umask(0)
os.makedirs('p27', exist_ok=True)
for name in ('chmod', 'fchmodat', 'fchmodat2'): open('p27/' + name, 'w').close()
"#;

/// Every call of `DENIED` in `fabric-sandbox`'s seccomp filter not attacked elsewhere
/// (round two has `ptrace`, `io_uring_setup`, `add_key`, `perf_event_open`, sockets,
/// `clone`/`clone3`/`unshare` and the set-id bits through `openat` and `fchmod`), each with
/// arguments a process without capabilities may pass: where the kernel checks them before
/// any privilege it answers another errno than seccomp's `EPERM`. `reboot` is left out: a
/// mistake in its arguments as root with the sandbox off is not worth the row.
const DENIALS: &[Denial] = &[
    // Another process's memory: here the command's own, which any process may read.
    denial(
        "process_vm_readv",
        "sc(310, os.getpid(), ctypes.byref(here), 1, ctypes.byref(there), 1, 0)",
        Answer::Is("OK"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "process_vm_writev",
        "sc(311, os.getpid(), ctypes.byref(there), 1, ctypes.byref(here), 1, 0)",
        Answer::Is("OK"),
        Wall::Seccomp,
        "EPERM",
    ),
    // Mounts: the path is looked up before the capability is checked.
    denial(
        "mount",
        "sc(165, b'none', b'/nonexistent-fabric-27', b'tmpfs', 0, None)",
        Answer::Is("ENOENT"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "umount2",
        "sc(166, b'/', 0x100)",
        Answer::Is("EINVAL"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "pivot_root",
        "sc(155, b'/nonexistent-fabric-27', b'/nonexistent-fabric-27')",
        Answer::Is("ENOENT"),
        Wall::SeccompThenCapabilities,
        "EPERM",
    ),
    // The new mount API.
    denial(
        "fsopen",
        "sc(430, b'tmpfs', 0)",
        Answer::Is("OK"),
        Wall::SeccompThenCapabilities,
        "EPERM",
    ),
    denial(
        "fsconfig",
        "sc(431, -1, 0, None, None, 0)",
        Answer::Is("EINVAL"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "fsmount",
        "sc(432, -1, 0, 0)",
        Answer::Is("EBADF"),
        Wall::SeccompThenCapabilities,
        "EPERM",
    ),
    // Without OPEN_TREE_CLONE, open_tree is an O_PATH open any process may make.
    denial(
        "open_tree",
        "sc(428, -100, b'.', 0)",
        Answer::Is("OK"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "move_mount",
        "sc(429, -100, b'.', -100, b'.', 0x10000000)",
        Answer::Is("EINVAL"),
        Wall::SeccompThenCapabilities,
        "EPERM",
    ),
    denial(
        "mount_setattr",
        "sc(442, -100, b'.', 0x10000000, None, 0)",
        Answer::Is("EINVAL"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "setns",
        "sc(308, -1, 0)",
        Answer::Is("EBADF"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "chroot",
        "sc(161, b'/nonexistent-fabric-27')",
        Answer::Is("ENOENT"),
        Wall::Seccomp,
        "EPERM",
    ),
    // An unknown command: the attributes are copied and checked before any privilege.
    denial(
        "bpf",
        "sc(321, 9999, zeros, 144)",
        Answer::Is("EINVAL"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "init_module",
        "sc(175, None, 0, b'')",
        Answer::Not("EPERM"),
        Wall::KernelBuild,
        "EPERM",
    ),
    denial(
        "finit_module",
        "sc(313, -1, b'', 0)",
        Answer::Not("EPERM"),
        Wall::KernelBuild,
        "EPERM",
    ),
    denial(
        "delete_module",
        "sc(176, b'fabric-none-27', 0)",
        Answer::Not("EPERM"),
        Wall::KernelBuild,
        "EPERM",
    ),
    // More segments than the kernel takes: refused before anything is loaded.
    denial(
        "kexec_load",
        "sc(246, 0, 1000, None, 0)",
        Answer::Not("EPERM"),
        Wall::KernelBuild,
        "EPERM",
    ),
    denial(
        "kexec_file_load",
        "sc(320, -1, -1, 0, None, 0xffff)",
        Answer::Not("EPERM"),
        Wall::KernelBuild,
        "EPERM",
    ),
    denial(
        "open_by_handle_at",
        "sc(304, -1, None, 0)",
        Answer::Is("EFAULT"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "name_to_handle_at",
        "sc(303, -100, b'.', None, None, 0x10000000)",
        Answer::Is("EINVAL"),
        Wall::Seccomp,
        "EPERM",
    ),
    // UFFD_USER_MODE_ONLY: allowed to any process by the kernel.
    denial(
        "userfaultfd",
        "sc(323, 1)",
        Answer::Is("OK"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "acct",
        "sc(163, b'/nonexistent-fabric-27')",
        Answer::Is("ENOENT"),
        Wall::SeccompThenCapabilities,
        "EPERM",
    ),
    denial(
        "swapon",
        "sc(167, b'/nonexistent-fabric-27', 0)",
        Answer::Is("ENOENT"),
        Wall::SeccompThenCapabilities,
        "EPERM",
    ),
    denial(
        "quotactl",
        "sc(179, 0, None, 0, None)",
        Answer::Is("ENODEV"),
        Wall::Seccomp,
        "EPERM",
    ),
    // Set-id bits in the workspace (a regular file through mknod needs no capability).
    denial(
        "mknod_setuid",
        "setid(sc(133, b'p27/mknod', 0o104755, 0), 'p27/mknod')",
        Answer::Is("OK"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "mknodat_setuid",
        "setid(sc(259, -100, b'p27/mknodat', 0o104755, 0), 'p27/mknodat')",
        Answer::Is("OK"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "creat_setuid",
        "setid(sc(85, b'p27/creat', 0o4755), 'p27/creat')",
        Answer::Is("OK"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "open_setgid",
        "setid(sc(2, b'p27/open', 0o101, 0o2755), 'p27/open')",
        Answer::Is("OK"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "chmod_setuid",
        "setid(sc(90, b'p27/chmod', 0o4755), 'p27/chmod')",
        Answer::Is("OK"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "fchmodat_setgid",
        "setid(sc(268, -100, b'p27/fchmodat', 0o2755), 'p27/fchmodat')",
        Answer::Is("OK"),
        Wall::Seccomp,
        "EPERM",
    ),
    denial(
        "fchmodat2_setuid",
        "setid(sc(452, -100, b'p27/fchmodat2', 0o4755, 0), 'p27/fchmodat2')",
        Answer::Is("OK"),
        Wall::Seccomp,
        "EPERM",
    ),
    // Its mode sits behind a pointer seccomp cannot read: "not implemented", so callers
    // fall back to openat.
    denial(
        "openat2",
        "sc(437, -100, b'.', ctypes.byref(how), 24)",
        Answer::Is("OK"),
        Wall::Seccomp,
        "ENOSYS",
    ),
];

fn denials_script() -> String {
    let mut script = PRELUDE.to_owned();
    for d in DENIALS {
        script.push_str(&format!("probe('{}', lambda: {})\n", d.id, d.call));
    }
    script
}

/// The `PROBE:<id>:<answer>` lines of a run's tool results and errors.
fn answers(events: &[Value]) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for e in events {
        if !matches!(e["kind"].as_str(), Some("tool_result" | "tool_error")) {
            continue;
        }
        let text = e["payload"].to_string();
        for piece in text.split("PROBE:").skip(1) {
            let Some((id, rest)) = piece.split_once(':') else {
                continue;
            };
            let answer: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            found.insert(id.to_owned(), answer);
        }
    }
    found
}

/// Runs `script` as one `python3` command through the binary in `column`, with `extra`
/// arguments to `fabric run`; returns the answers and the run's `sandbox` field.
async fn probe_run(
    column: Column,
    extra: &[&str],
    script: String,
) -> (BTreeMap<String, String>, Value) {
    let fx = Fixture::new(super::attacks::calls_then_finish(std::iter::once((
        "probe",
        "shell",
        json!({ "cmd": ["python3", "-c", script], "timeout_s": 60 }),
    ))))
    .await;
    fx.append_config("shell:\n  allowed_commands: [python3]\n");
    let mut args = vec!["run", "issue 27", "--pack", "engineering", "--json"];
    args.extend(column.sandbox_args());
    args.extend(extra);
    let run = fx.fabric_via(column.wrapper(), &args, &[], 120).await;
    let result = run.json();
    let events = fx.runlog(&result);
    let sandbox = of_kind(&events, "run_start")[0]["payload"]["sandbox"].clone();
    column.assert_start(&sandbox);
    (answers(&events), sandbox)
}

/// The kernel's own answers, without seccomp and without capabilities (a root test drops
/// them with `setpriv`, as the no-namespace column's commands have none), in `dir`.
fn kernel_answers(script: &str, dir: &std::path::Path) -> BTreeMap<String, String> {
    let mut cmd = if is_root() {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--bounding-set=-all", "--inh-caps=-all", "python3"]);
        cmd
    } else {
        std::process::Command::new("python3")
    };
    let out = cmd
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout);
    answers(&[json!({"kind": "tool_result", "payload": text})])
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_27_every_seccomp_denial_is_attacked_and_refused_by_seccomp() {
    let script = denials_script();
    let scratch = tempfile::tempdir().expect("tempdir");
    let kernel = kernel_answers(&script, scratch.path());
    let mut failures = Vec::new();
    let got = |answers: &BTreeMap<String, String>, id: &str| {
        answers
            .get(id)
            .cloned()
            .unwrap_or_else(|| "missing".to_owned())
    };
    for d in DENIALS {
        let answer = got(&kernel, d.id);
        let consistent = match d.wall {
            Wall::Seccomp => answer != "EPERM" && answer != "missing",
            Wall::SeccompThenCapabilities => answer == "EPERM",
            Wall::KernelBuild => answer != "missing",
        };
        if !consistent {
            failures.push(format!(
                "{}: the kernel without seccomp or capabilities answers {answer}, not what {:?} says",
                d.id, d.wall
            ));
        }
    }
    for column in Column::on_this_host() {
        let (answers, _) = probe_run(column, &[], script.clone()).await;
        for d in DENIALS {
            let answer = got(&answers, d.id);
            eprintln!(
                "seccomp27 {:<13} {:<18} {:<7} (kernel alone: {}, {:?})",
                column.name(),
                d.id,
                answer,
                got(&kernel, d.id),
                d.wall
            );
            match column {
                Column::Off => {
                    // Without root the capability-gated calls are refused by the kernel
                    // with the sandbox off too; their strict answer is still checked.
                    let gated = d.wall != Wall::Seccomp && !is_root();
                    if !gated && !d.off.matches(&answer) {
                        failures.push(format!(
                            "{}: answered {answer} with --sandbox off, expected {:?}: it proves nothing",
                            d.id, d.off
                        ));
                    }
                }
                Column::Namespaces | Column::NoNamespaces => {
                    if answer != d.strict {
                        failures.push(format!(
                            "{}: answered {answer} under {}, expected seccomp's {}",
                            d.id,
                            column.name(),
                            d.strict
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What the host offers a command to reach: a process of the test's (same uid, so only a
/// layer of the sandbox can refuse the signal), an abstract UNIX socket, a UDP and a TCP
/// listener on loopback.
struct Outside {
    target: std::process::Child,
    abstract_name: String,
    abstract_listener: std::os::unix::net::UnixListener,
    udp: std::net::UdpSocket,
    tcp: std::net::TcpListener,
}

impl Outside {
    fn new(tag: &str) -> Self {
        use std::os::linux::net::SocketAddrExt;
        let abstract_name = format!("fabric-issue-27-{}-{tag}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
            .expect("abstract address");
        let abstract_listener =
            std::os::unix::net::UnixListener::bind_addr(&addr).expect("abstract listener");
        abstract_listener
            .set_nonblocking(true)
            .expect("nonblocking");
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
        udp.set_nonblocking(true).expect("nonblocking");
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp");
        tcp.set_nonblocking(true).expect("nonblocking");
        let target = std::process::Command::new("sleep")
            .arg("300")
            .spawn()
            .expect("target process");
        Self {
            target,
            abstract_name,
            abstract_listener,
            udp,
            tcp,
        }
    }

    /// The attempts on each, in one script.
    fn script(&self) -> String {
        format!(
            r#"{PRELUDE}import socket
def abstract():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect('\0{name}')
def udp():
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'fabric27', ('127.0.0.1', {udp}))
def tcp():
    s = socket.socket()
    s.settimeout(5)
    s.connect(('127.0.0.1', {tcp}))
probe('signal', lambda: os.kill({pid}, 15))
probe('abstract', abstract)
probe('udp', udp)
probe('tcp', tcp)
"#,
            name = self.abstract_name,
            udp = self.udp.local_addr().expect("addr").port(),
            tcp = self.tcp.local_addr().expect("addr").port(),
            pid = self.target.id(),
        )
    }

    /// What the host saw, by attempt: `OK` where it was reached. The run has ended, so
    /// whatever reached it is queued by now.
    fn reached(&mut self) -> BTreeMap<&'static str, bool> {
        // A target that is still running answers `None`; one the command killed, its status.
        let killed = self.target.try_wait().expect("wait").is_some_and(
            |status: std::process::ExitStatus| {
                use std::os::unix::process::ExitStatusExt;
                status.signal() == Some(15)
            },
        );
        let mut buf = [0u8; 16];
        BTreeMap::from([
            ("signal", killed),
            ("abstract", self.abstract_listener.accept().is_ok()),
            ("udp", self.udp.recv_from(&mut buf).is_ok()),
            ("tcp", self.tcp.accept().is_ok()),
        ])
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.target.kill();
        let _ = self.target.wait();
    }
}

/// Signals and abstract UNIX sockets outside the sandbox (Landlock's scoping, ABI >= 6),
/// and the network `workspace-write-network` gives a command, by column, mode and whether
/// the run allows the network. The expected answers name the layer: `ESRCH` and
/// `ECONNREFUSED` are the namespaces (the process or the socket's name is not there),
/// `EPERM` on a signal or an abstract socket is Landlock's scope (the test's process has the
/// command's uid where there are no namespaces, so plain permissions allow it), `EPERM` on
/// `socket()` is seccomp's socket rule, `EACCES` would be Landlock's TCP rule.
#[tokio::test(flavor = "multi_thread")]
async fn issue_27_landlock_scoping_and_workspace_write_network_through_the_binary() {
    // (column, mode, --network-allowed, expected answers: signal, abstract, udp, tcp)
    type Case = (Column, &'static str, bool, [&'static str; 4]);
    let cases: &[Case] = &[
        // strict: the network namespace and seccomp; the PID namespace.
        (
            Column::Namespaces,
            "strict",
            true,
            ["ESRCH", "ECONNREFUSED", "EPERM", "EPERM"],
        ),
        // Without namespaces only Landlock's scope stands between the command and the
        // host's processes and abstract sockets.
        (
            Column::NoNamespaces,
            "strict",
            true,
            ["EPERM", "EPERM", "EPERM", "EPERM"],
        ),
        // workspace-write-network with the network: TCP and UDP reach the host; the command
        // shares the host's network namespace, so Landlock alone refuses its abstract sockets.
        (
            Column::Namespaces,
            "workspace-write-network",
            true,
            ["ESRCH", "EPERM", "OK", "OK"],
        ),
        (
            Column::NoNamespaces,
            "workspace-write-network",
            true,
            ["EPERM", "EPERM", "OK", "OK"],
        ),
        // workspace-write-network in a run without the network: nothing but AF_UNIX.
        (
            Column::Namespaces,
            "workspace-write-network",
            false,
            ["ESRCH", "ECONNREFUSED", "EPERM", "EPERM"],
        ),
        (
            Column::NoNamespaces,
            "workspace-write-network",
            false,
            ["EPERM", "EPERM", "EPERM", "EPERM"],
        ),
        // With the sandbox off every attempt reaches its target, so none proves nothing.
        (Column::Off, "off", true, ["OK", "OK", "OK", "OK"]),
    ];
    let columns = Column::on_this_host();
    let mut failures = Vec::new();
    for (n, (column, mode, network, expected)) in cases.iter().enumerate() {
        if !columns.contains(column) {
            continue;
        }
        let mut outside = Outside::new(&n.to_string());
        let mut extra = Vec::new();
        if *column != Column::Off {
            extra.extend(["--sandbox", mode]);
        }
        if *network {
            extra.push("--network-allowed");
        }
        let (answers, sandbox) = probe_run(*column, &extra, outside.script()).await;
        if *column != Column::Off {
            assert_eq!(sandbox["mode"], *mode, "{sandbox}");
        }
        let reached = outside.reached();
        for (id, want) in ["signal", "abstract", "udp", "tcp"].iter().zip(expected) {
            let answer = answers.get(*id).map_or("missing", String::as_str);
            let seen = reached[id];
            eprintln!(
                "scope27 {:<13} {mode:<24} network={network:<5} {id:<9} {answer:<13} host reached: {seen}",
                column.name()
            );
            if answer != *want {
                failures.push(format!(
                    "{id} ({}, {mode}, network {network}): answered {answer}, expected {want}",
                    column.name()
                ));
            }
            // The host's side agrees with the command's: reached exactly when it said OK.
            if seen != (*want == "OK") {
                failures.push(format!(
                    "{id} ({}, {mode}, network {network}): the host saw reached={seen}",
                    column.name()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// IPv6 spellings of 127.0.0.1 that `fetch_url` must judge by the IPv4 address they carry:
/// (call id, host in the URL, address, the refusal's words).
const EMBEDDINGS: &[(&str, &str, &str, &str)] = &[
    (
        "fetch_ipv4_compatible",
        "[::127.0.0.1]",
        "::7f00:1",
        "IPv4-compatible address embedding a loopback IPv4",
    ),
    (
        "fetch_nat64",
        "[64:ff9b::7f00:1]",
        "64:ff9b::7f00:1",
        "NAT64 address embedding a loopback IPv4",
    ),
    (
        "fetch_6to4",
        "[2002:7f00:1::1]",
        "2002:7f00:1::1",
        "6to4 address embedding a loopback IPv4",
    ),
];

/// `local` routes on the loopback device for the [`EMBEDDINGS`]' addresses: with them the
/// host's own stack accepts connections to those addresses, like 127.0.0.0/8, without their
/// being interface addresses (which `fetch_url` refuses as the machine's own, for another
/// reason). Removed again when dropped, also when the test fails.
struct LocalRoutes;

impl LocalRoutes {
    fn add() -> Self {
        for out in Self::each("replace") {
            assert!(out.status.success(), "ip -6 route replace: {out:?}");
        }
        Self
    }

    /// `ip -6 route <verb> local <address>/128 dev lo` for each address.
    fn each(verb: &str) -> Vec<std::process::Output> {
        EMBEDDINGS
            .iter()
            .map(|(_, _, addr, _)| {
                std::process::Command::new("ip")
                    .args(["-6", "route", verb, "local", &format!("{addr}/128")])
                    .args(["dev", "lo"])
                    .output()
                    .expect("ip (iproute2)")
            })
            .collect()
    }
}

impl Drop for LocalRoutes {
    fn drop(&mut self) {
        Self::each("del");
    }
}

/// `fetch_url` to IPv6 addresses that carry 127.0.0.1 (IPv4-compatible, NAT64, 6to4), made
/// reachable: a listener on `[::]` behind local routes. The test reaches it at each address
/// itself, a run whose config allows the three addresses fetches the listener's page
/// through each, and a run without that must refuse each (`address_denied`, naming the
/// embedding) with the listener seeing no connection. The same run has the fabric's
/// environment name a proxy (a listener of the test's) that `fetch_url` must not use.
///
/// The research pack: round two's engineering pack has no `fetch_url`, so these attempts
/// there were refused as an unknown tool and proved nothing.
#[cfg_attr(
    fabric_not_root,
    ignore = "needs root: the test adds local routes for the IPv6 addresses (ip -6 route)"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_27_fetch_url_refuses_ipv6_spellings_of_a_reachable_loopback_listener() {
    const PAGE: &str = "issue-27-loopback-page-3f8a";
    const PROXIED: &str = "issue-27-proxied-page-9d2c";
    let _routes = LocalRoutes::add();
    let (port, hits) = super::attacks_round_two::canary_server("[::]:0", PAGE);
    for (_, _, addr, _) in EMBEDDINGS {
        let ip: std::net::Ipv6Addr = addr.parse().expect("address");
        std::net::TcpStream::connect((ip, port))
            .unwrap_or_else(|e| panic!("the listener is not reachable at [{addr}]:{port}: {e}"));
    }
    // The server thread counts a connection once it accepts it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while hits.load(std::sync::atomic::Ordering::SeqCst) < EMBEDDINGS.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "the listener saw {hits:?} connections"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (proxy_port, proxy_hits) = super::attacks_round_two::canary_server("127.0.0.1:0", PROXIED);
    let proxy = format!("http://127.0.0.1:{proxy_port}");
    let proxy_env = [
        ("HTTP_PROXY", proxy.as_str()),
        ("http_proxy", proxy.as_str()),
        ("ALL_PROXY", proxy.as_str()),
        // The model server is on loopback: its client may use the proxy for the rest.
        ("NO_PROXY", "127.0.0.1,localhost"),
        ("no_proxy", "127.0.0.1,localhost"),
    ];
    // A public address: through the proxy the page would come back; directly, this host
    // has no route to it.
    let via_proxy = (
        "fetch_via_proxy",
        "fetch_url",
        json!({"url": "http://93.184.216.34/"}),
    );
    let calls = || {
        let mut turns = super::attacks::calls_then_finish(
            EMBEDDINGS
                .iter()
                .map(|(id, host, _, _)| {
                    (
                        *id,
                        "fetch_url",
                        json!({ "url": format!("http://{host}:{port}/") }),
                    )
                })
                .chain(std::iter::once(via_proxy.clone())),
        );
        turns.pop();
        turns.push(fabric_test_support::Turn::tool_call(
            "finish_task",
            json!({"executive_summary": "x", "key_findings": ["x"], "citations": []}),
        ));
        turns
    };
    let args = [
        "run",
        "issue 27",
        "--pack",
        "research",
        "--json",
        "--network-allowed",
    ];
    // Allowed by the operator: each address reaches the page.
    let allowed = Fixture::new(calls()).await;
    let list: Vec<&str> = EMBEDDINGS.iter().map(|(_, _, addr, _)| *addr).collect();
    allowed.append_config(&format!("network:\n  allow_hosts: {list:?}\n"));
    let before = hits.load(std::sync::atomic::Ordering::SeqCst);
    let events = allowed.runlog(&allowed.fabric_with(&args, &proxy_env).await.json());
    for (id, ..) in EMBEDDINGS {
        let result = events
            .iter()
            .find(|e| e["kind"] == "tool_result" && e["payload"]["call_id"] == *id)
            .unwrap_or_else(|| panic!("{id}: no result when allowed: {events:?}"));
        assert!(
            result["payload"].to_string().contains(PAGE),
            "{id}: {result}"
        );
    }
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst) - before,
        EMBEDDINGS.len()
    );
    // Not allowed: each refused by the address check, nothing reaches the listener.
    let denied = Fixture::new(calls()).await;
    let before = hits.load(std::sync::atomic::Ordering::SeqCst);
    let events = denied.runlog(&denied.fabric_with(&args, &proxy_env).await.json());
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        before,
        "fetch_url reached the loopback listener"
    );
    for (id, _, _, words) in EMBEDDINGS {
        let of_call = |kind: &str| {
            events
                .iter()
                .find(|e| e["kind"] == kind && e["payload"]["call_id"] == *id)
                .unwrap_or_else(|| panic!("{id}: no {kind}: {events:?}"))
        };
        assert_eq!(
            of_call("security_event")["payload"]["event_type"],
            "address_denied"
        );
        let error = of_call("tool_error")["payload"].to_string();
        assert!(error.contains(words), "{id}: {error}");
        assert!(!error.contains(PAGE), "{id}: {error}");
    }
    let proxied = events
        .iter()
        .find(|e| e["kind"] == "tool_error" && e["payload"]["call_id"] == "fetch_via_proxy")
        .unwrap_or_else(|| panic!("fetch_via_proxy: no tool_error: {events:?}"));
    assert_eq!(proxied["payload"]["tool"], "fetch_url", "{proxied}");
    assert!(!proxied.to_string().contains(PROXIED), "{proxied}");
    assert_eq!(
        proxy_hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "fetch_url went through the environment's proxy"
    );
}
