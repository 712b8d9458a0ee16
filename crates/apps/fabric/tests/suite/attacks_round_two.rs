//! The attack suite, round two (issue #15): the classes an outside red team got through,
//! each driven through the real `fabric` binary by the scripted model with a widened
//! allowlist (python3, perl, sh), each proved by an effect and by its layer.
//!
//! Every attempt prints `ESCAPED:<id>` only after checking its own effect (the mode really
//! changed, the segment really attached, …), or leaves an effect the test checks on the host
//! (a file written late, an IPC object still there, a listener reached). The same scenario
//! runs twice: under `strict`, no attempt may succeed; under `--sandbox off`, every attempt
//! counted for the OS layer must succeed, so none of them can pass for another reason
//! (a missing program, plain permissions, a typo). Attempts stopped by the fabric itself
//! whatever the mode (descriptors closed before every command, the shell's revert of
//! protected paths, `fetch_url`'s checks) are counted apart and must fail in both runs.

#![allow(clippy::print_stderr)]

use std::collections::BTreeSet;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use fabric_test_support::Turn;
use serde_json::{Value, json};

use super::attacks_round_three::Column;
use super::fixture::{Fixture, gone_within, of_kind};

/// Which layer an attempt is counted for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Layer {
    /// The OS sandbox (namespaces, seccomp, Landlock, capabilities, limits): must succeed
    /// with `--sandbox off`.
    Os,
    /// The fabric whatever the mode: must fail in both runs.
    Fabric,
}

struct Attempt {
    id: &'static str,
    layer: Layer,
    tool: &'static str,
    args: Value,
}

fn py(id: &'static str, layer: Layer, script: String) -> Attempt {
    Attempt {
        id,
        layer,
        tool: "shell",
        args: json!({ "cmd": ["python3", "-c", script], "timeout_s": 20 }),
    }
}

/// A child leaves the command's process group with `call`, then writes `file` after the
/// command has ended. The command waits until the child has left (or failed to): under
/// load a child not yet scheduled when the command exits would die in the group kill even
/// with the sandbox off, and the attempt would prove nothing.
fn escape_then_write(call: &str, file: &str) -> String {
    format!(
        "import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    os.close(r)\n    try:\n        {call}\n    except OSError:\n        os._exit(1)\n    os.write(w, b'x')\n    os.close(w)\n    time.sleep(1.5)\n    open('{file}', 'w').write('x')\n    os._exit(0)\nos.close(w)\nos.read(r, 1)\nprint('started')"
    )
}

/// The line a script prints when its attack worked (split so the source never holds it).
fn escaped(id: &str) -> String {
    format!("print('ESC' + 'APED:{id}', flush=True)")
}

const CTYPES: &str = "import ctypes, os\nl = ctypes.CDLL(None, use_errno=True)\n";

const ALLOW: &str = "shell:\n  allowed_commands: [python3, perl, sh, cat, ls, chmod]\nsandbox_limits:\n  cpu_s: 1\n  open_files: 256\n";

/// The ids of the host's SysV IPC objects of one kind (`-m` segments, `-q` queues).
fn host_ipc_ids(kind: &str) -> BTreeSet<String> {
    let out = std::process::Command::new("ipcs")
        .arg(kind)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.lines()
        .filter(|l| l.starts_with("0x"))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .collect()
}

fn remove_ipc(kind: &str, ids: impl IntoIterator<Item = String>) {
    for id in ids {
        let _ = std::process::Command::new("ipcrm")
            .args([kind, &id])
            .output();
    }
}

/// Whether the POSIX message queue `name` exists on the host (opened without creating).
fn host_mq_exists(name: &str) -> bool {
    let script = format!(
        "import ctypes\nl = ctypes.CDLL(None)\nfd = l.mq_open(b'{name}', 0)\nprint(fd >= 0)\nif fd >= 0: l.mq_unlink(b'{name}')"
    );
    std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "True")
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// What one run of the scenario showed.
struct Outcome {
    /// Attempt ids whose marker appeared.
    escaped: BTreeSet<String>,
    /// Host-side effects seen, by attempt id.
    effects: BTreeSet<String>,
    events: Vec<Value>,
}

struct Targets {
    outside: tempfile::TempDir,
    meta: PathBuf,
    shm_id: String,
    secret_arg: String,
    inherited_fd: i32,
}

fn attempts(t: &Targets) -> Vec<Attempt> {
    use Layer::{Fabric, Os};
    let meta = t.meta.display();
    let outdir = t.outside.path().display();
    // `meta_runlog_chmod` aims at the run's own runlog, beside its workspace (the command's
    // directory): a glob over every fixture's runs could race with other tests deleting
    // theirs, failing the attempt under `--sandbox off` for a reason that proves nothing.
    let mut list = vec![
        // 1. Metadata outside the workspace.
        py(
            "meta_chmod",
            Os,
            format!(
                "import os\nos.chmod('{meta}', 0o777)\nassert os.stat('{meta}').st_mode & 0o777 == 0o777\n{}",
                escaped("meta_chmod")
            ),
        ),
        py(
            "meta_utime",
            Os,
            format!(
                "import os\nos.utime('{meta}', (1, 1))\nassert os.stat('{meta}').st_mtime == 1\n{}",
                escaped("meta_utime")
            ),
        ),
        py(
            "meta_xattr_outside",
            Os,
            format!(
                "import os\nos.setxattr('{meta}', 'user.fabric', b'1')\n{}",
                escaped("meta_xattr_outside")
            ),
        ),
        py(
            "meta_xattr_workspace",
            Os,
            format!(
                "import os\nopen('x', 'w').close()\nos.setxattr('x', 'user.fabric', b'1')\nassert os.getxattr('x', 'user.fabric') == b'1'\n{}",
                escaped("meta_xattr_workspace")
            ),
        ),
        py(
            "meta_runlog_chmod",
            Os,
            format!(
                "import os\nf = os.path.realpath('../runlog.jsonl')\nos.chmod(f, 0o666)\nassert os.stat(f).st_mode & 0o777 == 0o666\n{}",
                escaped("meta_runlog_chmod")
            ),
        ),
        py(
            "stat_outside",
            Os,
            format!(
                "import os\nprint(os.stat('{meta}').st_size)\n{}",
                escaped("stat_outside")
            ),
        ),
        py(
            "list_outside",
            Os,
            format!(
                "import os\nassert 'meta.txt' in os.listdir('{outdir}')\n{}",
                escaped("list_outside")
            ),
        ),
        // 2. Descriptors the fabric inherited.
        py(
            "inherited_fd",
            Fabric,
            format!(
                "import os\nos.write({}, b'via-fd')\n{}",
                t.inherited_fd,
                escaped("inherited_fd")
            ),
        ),
        // 3. New namespaces through clone and clone3.
        py(
            "clone_newuser",
            Os,
            format!(
                "{CTYPES}r = l.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)\nif r == 0: os._exit(0)\nassert r > 0\nos.waitpid(r, 0)\n{}",
                escaped("clone_newuser")
            ),
        ),
        py(
            "clone_newnet",
            Os,
            format!(
                "{CTYPES}r = l.syscall(56, 0x40000000 | 17, 0, 0, 0, 0)\nif r == 0: os._exit(0)\nassert r > 0\nos.waitpid(r, 0)\n{}",
                escaped("clone_newnet")
            ),
        ),
        py(
            "clone3_newuser",
            Os,
            format!(
                "{CTYPES}a = (ctypes.c_uint64 * 11)(0x10000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)\nr = l.syscall(435, ctypes.byref(a), 88)\nif r == 0: os._exit(0)\nassert r > 0\nos.waitpid(r, 0)\n{}",
                escaped("clone3_newuser")
            ),
        ),
        py(
            "unshare_user",
            Os,
            format!(
                "{CTYPES}assert l.unshare(0x10000000) == 0\n{}",
                escaped("unshare_user")
            ),
        ),
        // 4. Escaping the kill: each leaves a process that writes a file after the command.
        py(
            "setsid_escape",
            Os,
            escape_then_write("os.setsid()", "late_setsid"),
        ),
        py(
            "setpgid_escape",
            Os,
            escape_then_write("os.setpgid(0, 0)", "late_setpgid"),
        ),
        // 5. IPC outside the filesystem.
        py(
            "sysv_shm_persist",
            Os,
            format!("{CTYPES}print(l.shmget(0, 4096, 0o1000 | 0o600))"),
        ),
        py(
            "sysv_msg_persist",
            Os,
            format!("{CTYPES}print(l.msgget(0, 0o1000 | 0o600))"),
        ),
        py(
            "sysv_shm_attach_host",
            Os,
            format!(
                "{CTYPES}l.shmat.restype = ctypes.c_void_p\nr = l.shmat({}, None, 0)\nassert r is not None and r != ctypes.c_void_p(-1).value\n{}",
                t.shm_id,
                escaped("sysv_shm_attach_host")
            ),
        ),
        py(
            "posix_mq_persist",
            Os,
            format!("{CTYPES}print(l.mq_open(b'/fabric-attack-mq', 0o102, 0o600, None))"),
        ),
        py(
            "abstract_socket_listen",
            Os,
            "import socket, time\ns = socket.socket(socket.AF_UNIX)\ns.bind('\\0fabric-attack-abstract')\ns.listen(4)\ns.settimeout(4)\ntry:\n    s.accept()\n    print('accepted')\nexcept OSError:\n    pass".to_owned(),
        ),
        // 7. Exposed host state.
        py(
            "proc_cmdline",
            Os,
            format!(
                "import glob\nneedle = b'{}' + b'{}'\nfor f in glob.glob('/proc/[0-9]*/cmdline'):\n    try:\n        if needle in open(f, 'rb').read(): {}\n    except OSError:\n        pass",
                &t.secret_arg[..8],
                &t.secret_arg[8..],
                escaped("proc_cmdline")
            ),
        ),
        py(
            "setuid_chmod",
            Os,
            format!(
                "import os, shutil\nshutil.copy('/bin/true', 's1')\nos.chmod('s1', 0o4755)\nassert os.stat('s1').st_mode & 0o4000\n{}",
                escaped("setuid_chmod")
            ),
        ),
        py(
            "setuid_open_creat",
            Os,
            format!(
                "import os\nos.umask(0)\nos.open('s2', os.O_CREAT | os.O_WRONLY, 0o4755)\nassert os.stat('s2').st_mode & 0o4000\n{}",
                escaped("setuid_open_creat")
            ),
        ),
        py(
            "setgid_fchmod",
            Os,
            format!(
                "import os\nfd = os.open('s3', os.O_CREAT | os.O_WRONLY, 0o644)\nos.fchmod(fd, 0o2755)\nassert os.stat('s3').st_mode & 0o2000\n{}",
                escaped("setgid_fchmod")
            ),
        ),
        // The seccomp denylist, with calls any process may make unless the filter refuses.
        py(
            "seccomp_ptrace",
            Os,
            format!(
                "{CTYPES}assert l.ptrace(0, 0, None, None) == 0\n{}",
                escaped("seccomp_ptrace")
            ),
        ),
        py(
            "seccomp_io_uring",
            Os,
            format!(
                "{CTYPES}p = (ctypes.c_uint8 * 120)()\nassert l.syscall(425, 4, p) >= 0\n{}",
                escaped("seccomp_io_uring")
            ),
        ),
        py(
            "seccomp_keyctl",
            Os,
            format!(
                "{CTYPES}assert l.syscall(248, b'user', b'fabric-attack', b'x', 1, -3) >= 0\n{}",
                escaped("seccomp_keyctl")
            ),
        ),
        py(
            "seccomp_netlink",
            Os,
            format!(
                "import socket\nsocket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)\n{}",
                escaped("seccomp_netlink")
            ),
        ),
        py(
            "seccomp_udp",
            Os,
            format!(
                "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n{}",
                escaped("seccomp_udp")
            ),
        ),
        py(
            "seccomp_perf_event",
            Os,
            format!(
                "{CTYPES}a = (ctypes.c_uint32 * 32)()\na[0] = 1\na[1] = 128\na[10] = 0b1100000\nr = l.syscall(298, a, 0, -1, -1, 0)\nassert r >= 0\n{}",
                escaped("seccomp_perf_event")
            ),
        ),
        // Resource limits (sandbox_limits: cpu_s 1, open_files 256).
        py(
            "limit_cpu",
            Os,
            format!(
                "import time\nt = time.process_time()\nwhile time.process_time() - t < 2.5: pass\n{}",
                escaped("limit_cpu")
            ),
        ),
        py(
            "limit_open_files",
            Os,
            format!(
                "fs = [open('/dev/null') for _ in range(400)]\n{}",
                escaped("limit_open_files")
            ),
        ),
        py(
            "limit_core",
            Os,
            format!(
                "import resource\nassert resource.getrlimit(resource.RLIMIT_CORE)[1] != 0\n{}",
                escaped("limit_core")
            ),
        ),
        // 8. Protected paths through the shell: reverted after the command, in every mode.
        py(
                "git_hook_via_shell",
                Fabric,
                "import os\nos.makedirs('.git/hooks', exist_ok=True)\nopen('.git/hooks/pre-commit', 'w').write('#!/bin/sh\\necho pwned\\n')".to_owned(),
            ),
        py(
                "fabric_yaml_via_shell",
                Fabric,
                "open('fabric.yaml', 'w').write('sandbox: off\\n')".to_owned(),
            ),
        // 6. fetch_url (a configured proxy, IPv6 addresses embedding a loopback IPv4 one) is
        // attacked in attacks_issue_27.rs with the research pack: this run's engineering
        // pack has no fetch_url, so the attempts here were refused as an unknown tool.
    ];
    if is_root() {
        list.push(py(
            "etc_shadow",
            Os,
            format!(
                "d = open('/etc/shadow').read()\nassert 'root:' in d\n{}",
                escaped("etc_shadow")
            ),
        ));
    } else {
        eprintln!("SKIP etc_shadow: not root, /etc/shadow is unreadable by plain permissions");
    }
    list
}

fn scenario(attempts: &[Attempt]) -> Vec<Turn> {
    super::attacks::calls_then_finish(attempts.iter().map(|a| (a.id, a.tool, a.args.clone())))
}

/// An HTTP server on `addr` answering every request with `body`; counts requests.
pub(super) fn canary_server(addr: &str, body: &'static str) -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind(addr).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hits);
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            counter.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 2048];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, hits)
}

/// What gets through in the no-namespace column, as SECURITY.md's table says ("not stopped"
/// in the "no ns" column): each must get through there (so the table's gaps are real), and
/// nothing else may.
const GAPS_WITHOUT_NAMESPACES: &[&str] = &[
    // "metadata of outside files (chmod, utimes)": files Landlock lets it reach, the user's.
    "meta_chmod",
    "meta_utime",
    "meta_runlog_chmod",
    // "names and sizes of outside files (stat)".
    "stat_outside",
    // "abstract UNIX sockets reached from the host".
    "abstract_socket_listen",
    // "other processes' command lines under /proc".
    "proc_cmdline",
    // "/etc/shadow as root".
    "etc_shadow",
];

/// One run of the scenario: under `strict` (with namespaces, or `no_namespaces`: a root
/// fabric started without `CAP_SYS_ADMIN`, so the probe finds none) or `--sandbox off`.
async fn run_once(sandbox_off: bool, no_namespaces: bool, t: &Targets) -> Outcome {
    // Whatever runs, an abstract-socket client on the host keeps trying to connect.
    let reached = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicUsize::new(0));
    let connector = {
        let (reached, stop) = (Arc::clone(&reached), Arc::clone(&stop));
        std::thread::spawn(move || {
            use std::os::linux::net::SocketAddrExt;
            let addr =
                std::os::unix::net::SocketAddr::from_abstract_name(b"fabric-attack-abstract")
                    .expect("abstract address");
            while stop.load(Ordering::SeqCst) == 0 {
                if UnixStream::connect_addr(&addr).is_ok() {
                    reached.fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    let shm_before = host_ipc_ids("-m");
    let msg_before = host_ipc_ids("-q");
    let list = attempts(t);
    let fx = Fixture::new(scenario(&list)).await;
    fx.append_config(ALLOW);
    let mut args = vec![
        "run",
        "attack round two",
        "--pack",
        "engineering",
        "--json",
        "--max-steps",
        "200",
        "--network-allowed",
    ];
    if sandbox_off {
        args.extend(["--sandbox", "off"]);
    }
    let wrapper = if no_namespaces {
        Column::NoNamespaces.wrapper()
    } else {
        &[]
    };
    let run = fx.fabric_via(wrapper, &args, &[], 60).await;
    let result = run.json();
    assert!(
        result["_meta"]["run_id"].is_string(),
        "no run: {}\n{}",
        run.stdout,
        run.stderr
    );
    let events = fx.runlog(&result);
    let start = &of_kind(&events, "run_start")[0]["payload"];
    if !sandbox_off {
        assert_eq!(start["sandbox"]["namespaces"], !no_namespaces, "{start}");
    }
    let workspace = PathBuf::from(start["workspace"].as_str().expect("workspace"));
    // Issue #27: not a fixed sleep, which a slow machine turns into a false pass. A late
    // writer holds its file's name on its command line until it has written (1.5 s after it
    // left the group, with the sandbox off); once none is left, none can write any more.
    for marker in ["late_setsid", "late_setpgid"] {
        assert!(
            gone_within(marker, std::time::Duration::from_secs(30)),
            "a late writer ({marker}) outlived the command by 30 s"
        );
    }
    stop.store(1, Ordering::SeqCst);
    connector.join().expect("connector");

    let mut escaped = BTreeSet::new();
    let mut recorded = BTreeSet::new();
    for e in &events {
        let Some(id) = e["payload"]["call_id"].as_str() else {
            continue;
        };
        if matches!(e["kind"].as_str(), Some("tool_result" | "tool_error")) {
            recorded.insert(id.to_owned());
            if e["payload"].to_string().contains(&format!("ESCAPED:{id}")) {
                escaped.insert(id.to_owned());
            }
        }
    }
    for a in &list {
        assert!(recorded.contains(a.id), "{} was not recorded", a.id);
    }
    let mut effects = BTreeSet::new();
    let meta = std::fs::metadata(&t.meta).expect("meta");
    use std::os::unix::fs::PermissionsExt;
    if meta.permissions().mode() & 0o777 == 0o777 {
        effects.insert("meta_chmod".to_owned());
    }
    for (id, file) in [
        ("setsid_escape", "late_setsid"),
        ("setpgid_escape", "late_setpgid"),
    ] {
        if workspace.join(file).exists() {
            effects.insert(id.to_owned());
        }
    }
    for (id, path) in [
        ("git_hook_via_shell", ".git"),
        ("fabric_yaml_via_shell", "fabric.yaml"),
    ] {
        if workspace.join(path).exists() {
            effects.insert(id.to_owned());
        }
    }
    let new_shm: Vec<String> = host_ipc_ids("-m")
        .difference(&shm_before)
        .cloned()
        .collect();
    if !new_shm.is_empty() {
        effects.insert("sysv_shm_persist".to_owned());
    }
    remove_ipc("-m", new_shm);
    let new_msg: Vec<String> = host_ipc_ids("-q")
        .difference(&msg_before)
        .cloned()
        .collect();
    if !new_msg.is_empty() {
        effects.insert("sysv_msg_persist".to_owned());
    }
    remove_ipc("-q", new_msg);
    if host_mq_exists("/fabric-attack-mq") {
        effects.insert("posix_mq_persist".to_owned());
    }
    if reached.load(Ordering::SeqCst) > 0 {
        effects.insert("abstract_socket_listen".to_owned());
    }
    // Restore what the off run changed.
    std::fs::set_permissions(&t.meta, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    for a in &list {
        eprintln!(
            "attack2 {:<8} {:<24} {:?} {}",
            match (sandbox_off, no_namespaces) {
                (true, _) => "off",
                (false, false) => "strict",
                (false, true) => "no-ns",
            },
            a.id,
            a.layer,
            if escaped.contains(a.id) || effects.contains(a.id) {
                "ESCAPED"
            } else {
                "stopped"
            }
        );
    }
    Outcome {
        escaped,
        effects,
        events,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_15_round_two_attacks_fail_and_each_layer_is_proved() {
    let outside = tempfile::tempdir().expect("outside");
    let meta = outside
        .path()
        .canonicalize()
        .expect("canonical")
        .join("meta.txt");
    std::fs::write(&meta, "outside").expect("meta");
    // A segment of a "host process" the tool tries to attach to.
    let shm = std::process::Command::new("ipcmk")
        .args(["-M", "64"])
        .output()
        .expect("ipcmk (util-linux)");
    let shm_id = String::from_utf8_lossy(&shm.stdout)
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(!shm_id.is_empty(), "ipcmk gave no id");
    // A host process with a secret on its command line.
    let secret_arg = "fabric-secret-arg-9c4e";
    let mut holder = std::process::Command::new("sh")
        .args(["-c", "sleep 120", secret_arg])
        .spawn()
        .expect("holder");
    // A descriptor the fabric inherits (no close-on-exec), open on an outside file.
    let target = std::fs::File::create(outside.path().join("fd-target.txt")).expect("fd target");
    let inherited = rustix::io::dup(&target).expect("dup");
    let t = Targets {
        outside,
        meta,
        shm_id: shm_id.clone(),
        secret_arg: secret_arg.to_owned(),
        inherited_fd: inherited.as_raw_fd(),
    };

    let strict = run_once(false, false, &t).await;
    let off = run_once(true, false, &t).await;
    // The no-namespace column (issue #27): a root fabric without CAP_SYS_ADMIN.
    let no_ns = if is_root() {
        Some(run_once(false, true, &t).await)
    } else {
        eprintln!(
            "SKIPPED COLUMN: the no-namespace column needs a root fabric started without CAP_SYS_ADMIN (setpriv); this test runs as a non-root user"
        );
        None
    };
    let _ = holder.kill();
    let _ = holder.wait();
    remove_ipc("-m", [shm_id]);
    drop(inherited);

    let list = attempts(&t);
    let fd_written =
        std::fs::read_to_string(t.outside.path().join("fd-target.txt")).unwrap_or_default();
    let mut failures = Vec::new();
    for a in &list {
        if let Some(no_ns) = &no_ns {
            let hit = no_ns.escaped.contains(a.id) || no_ns.effects.contains(a.id);
            let gap = GAPS_WITHOUT_NAMESPACES.contains(&a.id);
            if hit && !gap {
                failures.push(format!("{}: escaped under strict without namespaces", a.id));
            }
            if gap && !hit {
                failures.push(format!(
                    "{}: listed as a gap without namespaces (SECURITY.md) but stopped: update the table",
                    a.id
                ));
            }
        }
        let strict_hit = strict.escaped.contains(a.id) || strict.effects.contains(a.id);
        let off_hit = off.escaped.contains(a.id) || off.effects.contains(a.id);
        if strict_hit {
            failures.push(format!("{}: escaped under strict", a.id));
        }
        match a.layer {
            Layer::Os if !off_hit => failures.push(format!(
                "{}: did not succeed with --sandbox off, so it proves nothing about the OS layer",
                a.id
            )),
            Layer::Fabric if off_hit => {
                failures.push(format!("{}: escaped with --sandbox off", a.id));
            }
            _ => {}
        }
    }
    assert!(
        fd_written.is_empty(),
        "a command wrote through an inherited descriptor"
    );
    // The shell's revert of protected paths is recorded.
    for outcome in [&strict, &off] {
        let reverted = outcome
            .events
            .iter()
            .filter(|e| {
                e["kind"] == "security_event" && e["payload"]["event_type"] == "protected_path"
            })
            .count();
        assert!(
            reverted >= 2,
            "the shell's reverts were not recorded as security events"
        );
    }
    let os = list.iter().filter(|a| a.layer == Layer::Os).count();
    let fabric = list.len() - os;
    eprintln!(
        "attack suite round two: {} attempts ({os} for the OS layer, proved by --sandbox off; {fabric} stopped by the fabric in every mode)",
        list.len()
    );
    assert!(list.len() >= 30, "round two has at least 30 attempts");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
