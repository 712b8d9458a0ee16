//! The attack suite, round three (issue #31): memory that `setrlimit` cannot see, processes
//! of the same uid reached by pid, the keyring listing, inotify outside the workspace, and
//! directory trees deep enough to overflow a recursive removal.
//!
//! Each attempt runs through the real `fabric` binary, driven by the scripted model, in
//! three columns: `strict` with namespaces, `strict` where namespaces are refused (a root
//! fabric started without `CAP_SYS_ADMIN` by `setpriv`, as in a container), and
//! `--sandbox off`. An attempt prints `ESCAPED:<id>` only after checking its own effect, and
//! the test checks the effects it can see from the host too. No attempt may succeed in
//! either strict column; every attempt must succeed with the sandbox off, so none passes
//! for a reason that proves nothing.

#![allow(clippy::print_stderr)]

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::fixture::{Fixture, of_kind};

/// Small enough that the attempts' 400 MiB are well past it, large enough for python3.
const ALLOW: &str = "shell:\n  allowed_commands: [python3]\nsandbox_limits:\n  memory_mb: 256\n  processes: 64\n  open_files: 256\n  cpu_s: 30\n  disk_mb: 128\n  files: 2000\n";

/// The three columns (shared by the suites of issue #27).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Column {
    Namespaces,
    NoNamespaces,
    Off,
}

impl Column {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Namespaces => "strict",
            Self::NoNamespaces => "strict-no-ns",
            Self::Off => "off",
        }
    }

    /// The command line the fabric is started through: without `CAP_SYS_ADMIN` for the
    /// no-namespace column, so the probe finds no namespaces, as in a container.
    pub(super) fn wrapper(self) -> &'static [&'static str] {
        match self {
            Self::NoNamespaces => &["setpriv", "--bounding-set=-sys_admin", "--"],
            _ => &[],
        }
    }

    /// The arguments the column adds to `fabric run`.
    pub(super) fn sandbox_args(self) -> &'static [&'static str] {
        match self {
            Self::Off => &["--sandbox", "off"],
            _ => &[],
        }
    }

    /// Checks that the run's `run_start` sandbox field is the column's.
    pub(super) fn assert_start(self, sandbox: &Value) {
        match self {
            Self::Namespaces => assert_eq!(sandbox["namespaces"], true, "{sandbox}"),
            Self::NoNamespaces => assert_eq!(sandbox["namespaces"], false, "{sandbox}"),
            Self::Off => assert_eq!(sandbox["mode"], "off", "{sandbox}"),
        }
    }

    /// The columns this host can run, saying why one is left out: the no-namespace column
    /// needs a root fabric to drop `CAP_SYS_ADMIN` from.
    pub(super) fn on_this_host() -> Vec<Self> {
        if is_root() {
            vec![Self::Namespaces, Self::NoNamespaces, Self::Off]
        } else {
            eprintln!(
                "SKIPPED COLUMN: the no-namespace column needs a root fabric started without CAP_SYS_ADMIN (setpriv); this test runs as a non-root user"
            );
            vec![Self::Namespaces, Self::Off]
        }
    }
}

fn escaped(id: &str) -> String {
    format!("print('ESC' + 'APED:{id}', flush=True)")
}

const CTYPES: &str =
    "import ctypes, os\nl = ctypes.CDLL(None, use_errno=True)\nl.syscall.restype = ctypes.c_long\n";

fn py(id: &str, script: String) -> (String, Value) {
    (
        id.to_owned(),
        json!({ "cmd": ["python3", "-c", script], "timeout_s": 60 }),
    )
}

/// The attempts against the process `target` (a `sleep` of the test's, same uid, no
/// capabilities) and the
/// directory `outside`.
fn attempts(target: u32, outside: &str) -> Vec<(String, Value)> {
    vec![
        // Memory: 400 MiB written to a memfd (no address space is used, so RLIMIT_AS does
        // not see it).
        py(
            "memfd_hoard",
            format!(
                "import os\nfd = os.memfd_create('hoard')\nchunk = b'x' * (1 << 20)\nfor _ in range(400): os.write(fd, chunk)\nassert os.fstat(fd).st_size == 400 << 20\n{}",
                escaped("memfd_hoard")
            ),
        ),
        // Memory: 350 MiB queued in UNIX socket buffers by 16 processes.
        py(
            "socket_buffers",
            format!(
                r#"import os, socket
r, w = os.pipe()
kids = []
for k in range(16):
    pid = os.fork()
    if pid == 0:
        total = 0
        keep = []
        try:
            for i in range(110):
                a, b = socket.socketpair()
                a.setblocking(False)
                try:
                    while True: total += a.send(b'x' * 65536)
                except BlockingIOError: pass
                keep.append((a, b))
        except OSError: pass
        os.write(w, (str(total) + '\n').encode())
        import time; time.sleep(3)
        os._exit(0)
    kids.append(pid)
os.close(w)
data = b''
while True:
    chunk = os.read(r, 4096)
    if not chunk: break
    data += chunk
total = sum(int(x) for x in data.split())
print('queued MiB', total >> 20, flush=True)
if total >= 300 << 20:
    {}
"#,
                escaped("socket_buffers")
            ),
        ),
        // Disk: 1.5 GiB and 40,000 files from one command, as the outside attack did.
        py(
            "disk_fill",
            format!(
                "import os\nos.mkdir('fill')\nchunk = b'x' * (16 << 20)\nfor i in range(96):\n    with open(f'fill/{{i}}', 'wb') as f: f.write(chunk)\n{}\nimport shutil; shutil.rmtree('fill')\n",
                escaped("disk_fill")
            ),
        ),
        py(
            "tmp_fill",
            format!(
                "import os\ntmp = os.environ.get('TMPDIR', '/tmp')\nchunk = b'x' * (16 << 20)\nfor i in range(24):\n    with open(f'{{tmp}}/fill{{i}}', 'wb') as f: f.write(chunk)\n{}\nfor i in range(24): os.remove(f'{{tmp}}/fill{{i}}')\n",
                escaped("tmp_fill")
            ),
        ),
        py(
            "inode_fill",
            format!(
                "import os\nos.mkdir('many')\nfor i in range(40000): open(f'many/{{i}}', 'w').close()\n{}\nimport shutil; shutil.rmtree('many')\n",
                escaped("inode_fill")
            ),
        ),
        // Processes: 200 at once where the limit is 64 (root is not held by RLIMIT_NPROC).
        py(
            "fork_many",
            format!(
                "import os, time\nkids = []\ntry:\n    for i in range(200):\n        pid = os.fork()\n        if pid == 0:\n            time.sleep(5)\n            os._exit(0)\n        kids.append(pid)\nexcept OSError as e:\n    print('fork refused after', len(kids), e)\nif len(kids) == 200:\n    {}\nfor k in kids: os.kill(k, 9)\n",
                escaped("fork_many")
            ),
        ),
        // Other processes of the same uid, by pid.
        py(
            "prlimit_other",
            format!(
                "{CTYPES}class R(ctypes.Structure): _fields_ = [('cur', ctypes.c_ulong), ('max', ctypes.c_ulong)]\nnew = R(77, 77)\nif l.syscall(302, {target}, 7, ctypes.byref(new), None) == 0 and 'Max open files            77' in open('/proc/{target}/limits').read():\n    {}\n",
                escaped("prlimit_other")
            ),
        ),
        py(
            "setpriority_other",
            format!(
                "import os\nos.setpriority(os.PRIO_PROCESS, {target}, 19)\nif os.getpriority(os.PRIO_PROCESS, {target}) == 19:\n    {}\n",
                escaped("setpriority_other")
            ),
        ),
        py(
            "sched_idle_other",
            format!(
                "import os\nos.sched_setscheduler({target}, os.SCHED_IDLE, os.sched_param(0))\nif os.sched_getscheduler({target}) == os.SCHED_IDLE:\n    {}\n",
                escaped("sched_idle_other")
            ),
        ),
        py(
            "affinity_other",
            format!(
                "import os\nos.sched_setaffinity({target}, {{0}})\nif os.sched_getaffinity({target}) == {{0}}:\n    {}\n",
                escaped("affinity_other")
            ),
        ),
        py(
            "ioprio_other",
            format!(
                "{CTYPES}idle = 3 << 13\nif l.syscall(251, 1, {target}, idle) == 0 and l.syscall(252, 1, {target}) == idle:\n    {}\n",
                escaped("ioprio_other")
            ),
        ),
        // The fabric's session keyring, listed: a key only its possessors may view.
        py(
            "keys_listing",
            format!(
                "if 'fabric-attack-secret' in open('/proc/keys').read():\n    {}\n",
                escaped("keys_listing")
            ),
        ),
        // Names of files made outside the workspace, live.
        py(
            "inotify_outside",
            format!(
                "{CTYPES}fd = l.syscall(294, 0)\nif fd >= 0 and l.syscall(254, fd, b'{outside}', 0x100) >= 0:\n    {}\n",
                escaped("inotify_outside")
            ),
        ),
    ]
}

/// Starts the fabric in a session keyring holding a key only possessors may view, so a
/// command that lists it has the fabric's keyring (written for `python3 -c`; the fabric's
/// command line follows).
const KEYRING_WRAPPER: &str = r#"import ctypes, os, sys
l = ctypes.CDLL(None, use_errno=True)
l.syscall.restype = ctypes.c_long
assert l.syscall(250, 1, b"fabric-attack-ses") > 0, ctypes.get_errno()
key = l.syscall(248, b"user", b"fabric-attack-secret", b"s3cret", 6, -3)
assert key > 0, ctypes.get_errno()
# Possessor: everything; user, group, other: nothing.
assert l.syscall(250, 5, key, 0x3f000000) == 0, ctypes.get_errno()
os.execvp(sys.argv[1], sys.argv[1:])
"#;

/// Held by the attempts that fill kernel memory (here `socket_buffers`, and
/// `attacks_issue_39_memory.rs`, which measures the host's kernel memory while its command
/// runs), so the one never reads the other's sockets.
pub(super) static KERNEL_MEMORY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub(super) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// What one column showed: the attempts that got through.
async fn run_column(column: Column, outside: &std::path::Path) -> BTreeSet<String> {
    // Capability-less, like another run's command: the kernel's capability checks keep
    // priority and scheduling calls off processes holding more capabilities than the caller.
    let mut target = if is_root() {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--bounding-set=-all", "--inh-caps=-all", "sleep", "300"]);
        cmd
    } else {
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("300");
        cmd
    }
    .spawn()
    .expect("target process");
    let pid = target.id();
    let list = attempts(pid, &outside.display().to_string());
    let fx = Fixture::new(super::attacks::calls_then_finish(
        list.iter()
            .map(|(id, args)| (id.as_str(), "shell", args.clone())),
    ))
    .await;
    fx.append_config(ALLOW);
    let mut args = vec![
        "run",
        "attack round three",
        "--pack",
        "engineering",
        "--json",
        "--max-steps",
        "50",
    ];
    args.extend(column.sandbox_args());
    let mut wrapper = vec!["python3", "-c", KEYRING_WRAPPER];
    wrapper.extend(column.wrapper());
    let run = {
        let _alone = KERNEL_MEMORY.lock().await;
        fx.fabric_via(&wrapper, &args, &[], 600).await
    };
    let result = run.json();
    let events = fx.runlog(&result);
    let start = &of_kind(&events, "run_start")[0]["payload"]["sandbox"];
    column.assert_start(start);
    let mut got = BTreeSet::new();
    for e in &events {
        if !matches!(e["kind"].as_str(), Some("tool_result" | "tool_error")) {
            continue;
        }
        let Some(id) = e["payload"]["call_id"].as_str() else {
            continue;
        };
        if e["payload"].to_string().contains(&format!("ESCAPED:{id}")) {
            got.insert(id.to_owned());
        }
        // Where the sandbox counted the limit, the model is told which one.
        let named = match id {
            "memfd_hoard" if start["cgroups"] == true => Some("sandbox_limits.memory_mb"),
            "disk_fill" => Some("sandbox_limits.disk_mb"),
            // With namespaces /tmp is a sized tmpfs: the kernel answers "No space left".
            "tmp_fill" if column == Column::NoNamespaces => Some("sandbox_limits.disk_mb"),
            "inode_fill" => Some("sandbox_limits.files"),
            _ => None,
        };
        if let (Some(key), true) = (named, column != Column::Off) {
            let text = e["payload"].to_string();
            assert!(text.contains(key), "{id}: {key} is not named: {text}");
        }
    }
    // What the host sees of the target.
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    if limits.contains("Max open files            77") {
        got.insert("prlimit_other".to_owned());
    }
    let _ = target.kill();
    let _ = target.wait();
    for (id, _) in &list {
        eprintln!(
            "attack3 {:<13} {:<18} {}",
            column.name(),
            id,
            if got.contains(id) {
                "ESCAPED"
            } else {
                "stopped"
            }
        );
    }
    got
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_31_round_three_attacks_fail_in_both_columns_and_succeed_unsandboxed() {
    let outside = tempfile::tempdir().expect("outside");
    let outside = outside.path().canonicalize().expect("canonical");
    let mut columns = Vec::new();
    for column in Column::on_this_host() {
        columns.push((column, run_column(column, &outside).await));
    }
    let all: Vec<String> = attempts(1, "/").into_iter().map(|(id, _)| id).collect();
    let mut failures = Vec::new();
    for id in &all {
        for (column, got) in &columns {
            match column {
                Column::Off if !got.contains(id) => failures.push(format!(
                    "{id}: did not succeed with --sandbox off, so it proves nothing"
                )),
                Column::Namespaces | Column::NoNamespaces if got.contains(id) => {
                    failures.push(format!("{id}: escaped under {}", column.name()));
                }
                _ => {}
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Trees deep enough to overflow a recursive removal (25,000 levels aborted the fabric):
/// one in the command's private `/tmp`, one as a new `.git` the shell must revert. The
/// fabric finishes the run, removes both and records the revert.
#[tokio::test(flavor = "multi_thread")]
async fn issue_31_deep_trees_do_not_take_the_fabric_down() {
    // 30 chains of 1,001 directories, each made near the top (Landlock walks a path up to
    // the root at every access, so making a 30,000-deep tree one level at a time costs
    // minutes), then moved into one another, deepest first, by descriptors kept at their
    // bottoms: a chain 30,030 levels deep named `name` in `base`.
    let deep = |base: &str, name: &str| {
        format!(
            r#"import os
base = os.open({base}, os.O_RDONLY | os.O_DIRECTORY)
bottoms = []
for k in range(30):
    os.mkdir(f'c{{k}}', dir_fd=base)
    fd = os.open(f'c{{k}}', os.O_RDONLY | os.O_DIRECTORY, dir_fd=base)
    for i in range(1000):
        os.mkdir('d', dir_fd=fd)
        deeper = os.open('d', os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    bottoms.append(fd)
for k in range(29, 0, -1):
    os.rename(f'c{{k}}', 'next', src_dir_fd=base, dst_dir_fd=bottoms[k - 1])
os.rename('c0', '{name}', src_dir_fd=base, dst_dir_fd=base)
print('built', flush=True)
"#
        )
    };
    let tmp_tree = deep("os.environ['TMPDIR']", "deep");
    let git_tree = deep("'.'", ".git");
    let list = [
        (
            "deep_tmp",
            json!({"cmd": ["python3", "-c", tmp_tree], "timeout_s": 300}),
        ),
        (
            "deep_git",
            json!({"cmd": ["python3", "-c", git_tree], "timeout_s": 300}),
        ),
    ];
    let fx = Fixture::new(super::attacks::calls_then_finish(
        list.iter().map(|(id, args)| (*id, "shell", args.clone())),
    ))
    .await;
    fx.append_config("shell:\n  allowed_commands: [python3]\n");
    let fabric_tmp = fx.dir.path().join("fabric-tmp");
    std::fs::create_dir(&fabric_tmp).expect("tmp");
    let run = fx
        .fabric_within(
            &["run", "deep trees", "--pack", "engineering", "--json"],
            &[("TMPDIR", fabric_tmp.to_str().expect("utf-8"))],
            900,
        )
        .await;
    run.assert_code(0);
    let result = run.json();
    assert_eq!(result["_meta"]["status"], "completed", "{result}");
    let events = fx.runlog(&result);
    let results: Vec<String> = events
        .iter()
        .filter(|e| matches!(e["kind"].as_str(), Some("tool_result" | "tool_error")))
        .map(|e| e["payload"].to_string())
        .collect();
    assert!(results[0].contains("built"), "{}", results[0]);
    assert!(results[1].contains("protected"), "{}", results[1]);
    let reverted = events
        .iter()
        .any(|e| e["kind"] == "security_event" && e["payload"]["event_type"] == "protected_path");
    assert!(reverted, "the revert of .git was not recorded");
    let start = &of_kind(&events, "run_start")[0]["payload"];
    let workspace = std::path::PathBuf::from(start["workspace"].as_str().expect("workspace"));
    assert!(!workspace.join(".git").exists(), ".git was left behind");
    let left: Vec<_> = std::fs::read_dir(&fabric_tmp)
        .expect("read tmp")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("fabric-tmp-"))
        .collect();
    assert!(left.is_empty(), "private temp dirs left behind: {left:?}");
}

/// `fabric doctor` says whether commands get a cgroup on this host, and what follows from
/// it; `sandbox_limits.cgroup: off` turns the line into a gap.
#[tokio::test(flavor = "multi_thread")]
async fn issue_31_doctor_says_which_limits_are_real() {
    let fx = Fixture::new(vec![]).await;
    let run = fx.fabric(&["doctor"]).await;
    let line = run
        .stdout
        .lines()
        .find(|l| l.contains("] cgroups: "))
        .unwrap_or_else(|| panic!("no cgroups line:\n{}", run.stdout));
    if line.starts_with("[ok  ]") {
        assert!(line.contains("cgroup v"), "{line}");
        assert!(
            run.stdout
                .contains("sandbox enforces: memory and processes (a cgroup per command"),
            "{}",
            run.stdout
        );
    } else {
        assert!(
            std::env::var_os("FABRIC_REQUIRE_TEST_DEPS").is_none(),
            "CI hosts give commands cgroups: {line}"
        );
        eprintln!("SKIP the cgroup half: {line}");
    }
    fx.append_config("sandbox_limits:\n  cgroup: \"off\"\n");
    let run = fx.fabric(&["doctor"]).await;
    assert!(
        run.stdout.contains(
            "sandbox does not enforce: memory the address-space limit cannot see, per command (no cgroup: sandbox_limits.cgroup is off)"
        ),
        "{}",
        run.stdout
    );
}
