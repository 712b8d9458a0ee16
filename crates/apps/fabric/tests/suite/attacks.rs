//! The attack suite (issue #5): attempts to leave the sandbox, each driven through the real
//! `fabric` binary by the scripted model, each asserted to have FAILED and to be RECORDED in
//! the runlog (a `tool_error`, usually with a `security_event`, or a recorded call whose
//! effect is verifiably absent).
//!
//! The shell allowlist of these runs deliberately includes the escape hatches the default
//! list leaves out (`sh`, `python3`, `find`, `git`, `env`, `xargs`, `tar`, ...): the point
//! is that the OS layer holds when the allowlist is bypassed. Where this host cannot enforce
//! a layer, the test prints a `SKIP` line with the reason and checks that the run's
//! `run_start` reported the gap.

// The suite reports each attempt and every SKIP on stderr, by design.
#![allow(clippy::print_stderr)]

use std::collections::HashMap;
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use fabric_test_support::{ScriptedCall, Turn};
use serde_json::{Value, json};

use super::attacks_round_three::Column;
use super::fixture::{Fixture, of_kind};

const SECRET: &str = "TOP-SECRET-d41d8cd9";
const CANARY: &str = "canary-6f1c2e-must-not-leak";
const MARKER: &str = "fabric-forkbomb-marker-5e3a";

/// What must be true of one attempt.
enum Expect {
    /// A tool error with this security `event_type` (and the matching `security_event`).
    Refused(&'static str),
    /// Any tool error (the call failed), e.g. a timeout or invalid arguments.
    Failed,
    /// Whatever the tool said, this path must not exist afterwards.
    Absent(PathBuf),
    /// Neither the result nor the error may contain this text.
    Lacks(&'static str),
    /// The outcome must say this (e.g. that output was cut).
    Shows(&'static str),
    /// The outcome must say what the wall of the column says (issue #27: not any error):
    /// `ns` with namespaces (where the outside is absent), `no_ns` without (Landlock).
    Wall {
        ns: &'static str,
        no_ns: &'static str,
    },
    /// A tool error of this `error_type`, raised before any process.
    ErrorType(&'static str),
}

struct Attack {
    id: &'static str,
    tool: &'static str,
    args: Value,
    expect: Vec<Expect>,
}

fn attack(id: &'static str, tool: &'static str, args: Value, expect: Vec<Expect>) -> Attack {
    Attack {
        id,
        tool,
        args,
        expect,
    }
}

/// A step that prepares an attack (a link, a folder): not an attack, not counted, no
/// expectation.
fn setup(id: &'static str, tool: &'static str, args: Value) -> Attack {
    assert!(
        id.starts_with("setup_"),
        "setup ids start with `setup_`: {id}"
    );
    attack(id, tool, args, vec![])
}

fn sh(args: &[&str]) -> Value {
    json!({ "cmd": args })
}

/// Everything recorded about one call, by call id.
#[derive(Default, Debug)]
struct Seen {
    called: bool,
    result: Option<String>,
    error: Option<Value>,
    security: Vec<Value>,
}

fn seen_by_call(events: &[Value]) -> HashMap<String, Seen> {
    let mut seen: HashMap<String, Seen> = HashMap::new();
    for e in events {
        let Some(id) = e["payload"]["call_id"].as_str() else {
            continue;
        };
        let entry = seen.entry(id.to_owned()).or_default();
        match e["kind"].as_str() {
            Some("tool_call") => entry.called = true,
            Some("tool_result") => entry.result = Some(e["payload"]["result"].to_string()),
            Some("tool_error") => entry.error = Some(e["payload"].clone()),
            Some("security_event") => entry.security.push(e["payload"].clone()),
            _ => {}
        }
    }
    seen
}

/// Runs the attacks in one run and checks each; returns the runlog.
async fn run_attacks(
    fx: &Fixture,
    column: Column,
    extra: &[&str],
    attacks: &[Attack],
) -> Vec<Value> {
    let mut args = vec![
        "run",
        "attack",
        "--pack",
        "engineering",
        "--json",
        "--max-steps",
        "400",
    ];
    args.extend_from_slice(extra);
    let run = fx
        .fabric_via(
            column.wrapper(),
            &args,
            &[("FABRIC_ATTACK_CANARY", CANARY)],
            60,
        )
        .await;
    let result = run.json();
    assert!(
        result["_meta"]["run_id"].is_string(),
        "no run: {}\n{}",
        run.stdout,
        run.stderr
    );
    let events = fx.runlog(&result);
    let seen = seen_by_call(&events);
    // With namespaces (issue #15) the outside does not exist for a command: an attempt to
    // reach it fails with "No such file or directory" and nothing is refused, so there is
    // no security_event; the effect checks (`Lacks`, `Absent`) still apply.
    let namespaces = events
        .iter()
        .find(|e| e["kind"] == "run_start")
        .is_some_and(|e| e["payload"]["sandbox"]["namespaces"] == true);
    let mut failures = Vec::new();
    for a in attacks {
        let Some(s) = seen.get(a.id) else {
            failures.push(format!("{}: not recorded at all", a.id));
            continue;
        };
        if !s.called || (s.result.is_none() && s.error.is_none()) {
            failures.push(format!("{}: no tool_call/outcome recorded: {s:?}", a.id));
        }
        for expect in &a.expect {
            match expect {
                Expect::Refused(kind) => {
                    let error_ok = s
                        .error
                        .as_ref()
                        .is_some_and(|e| e["error_type"] == "permission");
                    let event_ok = s.security.iter().any(|e| e["event_type"] == *kind);
                    let hidden_ok = *kind == "sandbox_denied" && namespaces && hidden(s);
                    if !(hidden_ok || (error_ok && event_ok)) {
                        failures.push(format!("{}: expected refusal `{kind}`, got {s:?}", a.id));
                    }
                }
                Expect::Failed => {
                    if s.error.is_none() && !(namespaces && hidden(s)) {
                        failures.push(format!("{}: expected a tool_error, got {s:?}", a.id));
                    }
                }
                Expect::Absent(path) => {
                    if path.exists() {
                        failures.push(format!("{}: {} exists: {s:?}", a.id, path.display()));
                    }
                }
                Expect::Shows(text) => {
                    let all = format!("{:?}{:?}", s.result, s.error);
                    if !all.contains(text) {
                        failures.push(format!("{}: does not show `{text}`: {all}", a.id));
                    }
                }
                Expect::Wall { ns, no_ns } => {
                    let all = format!("{:?}{:?}", s.result, s.error);
                    let text = if namespaces { ns } else { no_ns };
                    if !all.contains(text) {
                        failures.push(format!(
                            "{}: does not show the wall's `{text}`: {all}",
                            a.id
                        ));
                    }
                }
                Expect::ErrorType(kind) => {
                    let got = s.error.as_ref().map(|e| e["error_type"].clone());
                    if got.as_ref().and_then(Value::as_str) != Some(kind) {
                        failures.push(format!("{}: expected a `{kind}` error, got {s:?}", a.id));
                    }
                }
                Expect::Lacks(text) => {
                    let all = format!("{:?}{:?}", s.result, s.error);
                    if all.contains(text) {
                        failures.push(format!("{}: leaked `{text}`: {all}", a.id));
                    }
                }
            }
        }
        eprintln!(
            "attack {:<32} {}",
            a.id,
            match (&s.error, s.security.first()) {
                (_, Some(sec)) => format!("refused: {}", sec["event_type"]),
                (Some(e), None) => format!("failed: {}", e["error_type"]),
                (None, None) if namespaces && hidden(s) => "hidden by the namespaces".to_owned(),
                (None, None) => "ran; effect absent".to_owned(),
            }
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} attacks not stopped or not recorded:\n{}\nstderr:\n{}",
        failures.len(),
        attacks.len(),
        failures.join("\n"),
        run.stderr
    );
    events
}

/// The command failed because what it reached for does not exist in its namespaces.
fn hidden(s: &Seen) -> bool {
    s.result.as_deref().is_some_and(|r| {
        ["No such file or directory", "Directory nonexistent"]
            .iter()
            .any(|m| r.contains(m))
    })
}

fn scenario(attacks: &[Attack]) -> Vec<Turn> {
    calls_then_finish(attacks.iter().map(|a| (a.id, a.tool, a.args.clone())))
}

/// One turn per `(call id, tool, arguments)`, then `finish_task`: an attack scenario.
pub(super) fn calls_then_finish<'a>(
    calls: impl Iterator<Item = (&'a str, &'a str, Value)>,
) -> Vec<Turn> {
    let mut turns: Vec<Turn> = calls
        .map(|(id, tool, args)| {
            let mut call = ScriptedCall::new(tool, args);
            call.id = Some(id.to_owned());
            Turn {
                tool_calls: vec![call],
                ..Turn::default()
            }
        })
        .collect();
    turns.push(Turn::tool_call("finish_task", json!({"summary": "done"})));
    turns
}

const ALLOW: &str = "shell:\n  allowed_commands: [ls, cat, echo, touch, cp, mv, mkdir, ln, python3, find, git, env, xargs, tar, sh, bash, perl, head, dd, curl, \"true\", sleep, chmod, printenv]\nsandbox_limits:\n  file_size_mb: 8\n  memory_mb: 1024\n";

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .is_some_and(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// The first folder under `root` (at most `depth` levels down) holding a file `name`.
fn find_dir_with(root: &std::path::Path, name: &str, depth: usize) -> Option<PathBuf> {
    if root.join(name).is_file() {
        return Some(root.to_path_buf());
    }
    if depth == 0 {
        return None;
    }
    std::fs::read_dir(root)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .find_map(|e| find_dir_with(&e.path(), name, depth - 1))
}

fn marker_processes() -> usize {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .map(|c| String::from_utf8_lossy(&c).contains(MARKER))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

/// Round one in both strict columns (issue #27): with namespaces, and on a root fabric
/// started without `CAP_SYS_ADMIN`, where the probe finds none. No round-one attack is a
/// known gap without namespaces (unlike round two's `GAPS_WITHOUT_NAMESPACES`): every one
/// must fail in both, each showing its column's wall.
#[tokio::test(flavor = "multi_thread")]
async fn the_sandbox_stops_file_process_and_network_attacks() {
    for column in Column::on_this_host() {
        if column != Column::Off {
            eprintln!("round one, column {}", column.name());
            round_one(column).await;
        }
    }
}

async fn round_one(column: Column) {
    // An attack through a missing program would fail for the wrong reason.
    for program in [
        "python3", "perl", "git", "tar", "curl", "find", "xargs", "dd",
    ] {
        assert!(
            std::process::Command::new("sh")
                .args(["-c", &format!("command -v {program}")])
                .output()
                .is_ok_and(|o| o.status.success()),
            "the attack suite needs `{program}` on PATH (apt-get install {program})"
        );
    }
    let outside = tempfile::tempdir().expect("outside dir");
    let out = outside.path().canonicalize().expect("canonical");
    std::fs::write(out.join("secret.txt"), SECRET).expect("secret");
    let o = |name: &str| out.join(name).display().to_string();
    let secret = o("secret.txt");

    // A TCP and a UDP listener the sandboxed processes try to reach.
    let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp");
    let tcp_port = tcp.local_addr().expect("addr").port();
    tcp.set_nonblocking(true).expect("nonblocking");
    let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
    let udp_port = udp.local_addr().expect("addr").port();
    udp.set_nonblocking(true).expect("nonblocking");
    let accepted = Arc::new(AtomicUsize::new(0));

    let py_connect = format!(
        "import socket; s=socket.socket(); s.settimeout(3); s.connect(('127.0.0.1',{tcp_port})); print('CONN' + 'ECTED')"
    );
    let py_udp = format!(
        "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x',('127.0.0.1',{udp_port})); print('SE' + 'NT-OK')"
    );
    let py_read = format!("print(open('{secret}').read())");
    let py_write = format!("open('{}','w').write('x')", o("py_written"));
    let py_environ =
        "import os; print(open('/proc/%d/environ' % os.getppid(), 'rb').read())".to_owned();
    let py_bomb = format!(
        "# {MARKER}\nimport os, time\nn = 0\nfor i in range(48):\n    try:\n        pid = os.fork()\n    except OSError as e:\n        print('fork refused after', n, e)\n        break\n    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n    n += 1\nprint('forked', n, flush=True)\ntime.sleep(60)\n"
    );
    let perl_read = format!("open F, '<', '{secret}' or die \"$!\"; print <F>;");
    let curl_local = format!("http://127.0.0.1:{tcp_port}/");
    let git_alias = format!("alias.pwn=!cat {secret}");
    let tar_cmd = format!("--to-command=cat {secret}");
    let sh_write = format!("echo pwned > {}", o("sh_written"));
    let swap_cmd = format!("mv swap swap_real && ln -s {} swap", out.display());

    use Expect::{Absent, ErrorType, Failed, Lacks, Refused, Shows};
    // What reaching for the outside meets: absent inside the namespaces, Landlock without.
    let wall = || Expect::Wall {
        ns: "No such file or directory",
        no_ns: "Permission denied",
    };
    let attacks = vec![
        // Path traversal through the file tools, in every spelling.
        attack(
            "read_dotdot",
            "read_file",
            json!({"path": "../../../../etc/passwd"}),
            vec![Refused("path_escape")],
        ),
        attack(
            "read_dotdot_inner",
            "read_file",
            json!({"path": "a/b/../../../runlog.jsonl"}),
            vec![Refused("path_escape")],
        ),
        attack(
            "read_dot_dotdot",
            "read_file",
            json!({"path": "./../runlog.jsonl"}),
            vec![Refused("path_escape")],
        ),
        attack(
            "read_absolute",
            "read_file",
            json!({"path": "/etc/passwd"}),
            vec![Refused("path_escape")],
        ),
        attack(
            "read_double_slash",
            "read_file",
            json!({"path": "//etc//passwd"}),
            vec![Refused("path_escape")],
        ),
        attack(
            "read_absolute_secret",
            "read_file",
            json!({"path": secret}),
            vec![Refused("path_escape"), Lacks(SECRET)],
        ),
        attack(
            "read_encoded_dotdot",
            "read_file",
            json!({"path": "%2e%2e/%2e%2e/etc/passwd"}),
            vec![Shows("no file `%2e%2e/%2e%2e/etc/passwd` in the workspace")],
        ),
        attack(
            "read_proc_self_root",
            "read_file",
            json!({"path": "/proc/self/root/etc/passwd"}),
            vec![Refused("path_escape")],
        ),
        attack(
            "read_proc_self_cwd",
            "read_file",
            json!({"path": "/proc/self/cwd/../runlog.jsonl"}),
            vec![Refused("path_escape")],
        ),
        attack(
            "list_parent",
            "list_files",
            json!({"path": ".."}),
            vec![Refused("path_escape")],
        ),
        attack(
            "list_root",
            "list_files",
            json!({"path": "/"}),
            vec![Refused("path_escape")],
        ),
        attack(
            "write_dotdot",
            "write_file",
            json!({"path": "../escape.txt", "content": "x"}),
            vec![Refused("path_escape")],
        ),
        attack(
            "write_absolute",
            "write_file",
            json!({"path": o("abs_written"), "content": "x"}),
            vec![Refused("path_escape"), Absent(out.join("abs_written"))],
        ),
        // Symbolic and hard links. The links are made with the shell (allowed inside the
        // workspace); the file tools must not follow them out.
        setup(
            "setup_symlink_dir",
            "shell",
            sh(&["ln", "-s", &out.display().to_string(), "link_out"]),
        ),
        attack(
            "read_via_symlink",
            "read_file",
            json!({"path": "link_out/secret.txt"}),
            vec![Refused("path_escape"), Lacks(SECRET)],
        ),
        attack(
            "write_via_symlink",
            "write_file",
            json!({"path": "link_out/via_link.txt", "content": "x"}),
            vec![Refused("path_escape"), Absent(out.join("via_link.txt"))],
        ),
        setup(
            "setup_dangling",
            "shell",
            sh(&["ln", "-s", &o("dangling_target"), "dangling"]),
        ),
        attack(
            "write_via_dangling",
            "write_file",
            json!({"path": "dangling", "content": "x"}),
            vec![Refused("path_escape"), Absent(out.join("dangling_target"))],
        ),
        attack(
            "list_via_symlink",
            "list_files",
            json!({"path": "link_out"}),
            vec![Refused("path_escape"), Lacks("secret.txt")],
        ),
        attack(
            "shell_cat_via_symlink",
            "shell",
            sh(&["cat", "link_out/secret.txt"]),
            vec![Refused("sandbox_denied"), Lacks(SECRET)],
        ),
        attack(
            "hardlink_out",
            "shell",
            sh(&["ln", &secret, "hard"]),
            vec![
                Refused("sandbox_denied"),
                Expect::Wall {
                    ns: "No such file or directory",
                    no_ns: "refused a link or move",
                },
                Lacks(SECRET),
            ],
        ),
        attack(
            "read_hardlink",
            "read_file",
            json!({"path": "hard"}),
            vec![Shows("no file `hard`"), Lacks(SECRET)],
        ),
        // A folder swapped for a symlink to the outside between two calls: the file tools
        // open beneath the workspace descriptor, so the swap cannot lead out (ADR-026).
        setup(
            "setup_swap_dir",
            "write_file",
            json!({"path": "swap/secret.txt", "content": "inside"}),
        ),
        setup("setup_swap_flip", "shell", sh(&["sh", "-c", &swap_cmd])),
        attack(
            "read_swapped_dir",
            "read_file",
            json!({"path": "swap/secret.txt"}),
            vec![Refused("path_escape"), Lacks(SECRET)],
        ),
        attack(
            "write_swapped_dir",
            "write_file",
            json!({"path": "swap/deep/new.txt", "content": "x"}),
            vec![Refused("path_escape"), Absent(out.join("deep"))],
        ),
        attack(
            "list_swapped_dir",
            "list_files",
            json!({"path": "swap"}),
            vec![Refused("path_escape"), Lacks("secret.txt")],
        ),
        // A hard link placed in the workspace from outside (by the test, while the run
        // sleeps): its other name is outside, so the file tools refuse it.
        setup(
            "setup_hardlink_marker",
            "write_file",
            json!({"path": "hardlink_here.txt", "content": "x"}),
        ),
        setup("setup_hardlink_wait", "shell", sh(&["sleep", "3"])),
        attack(
            "read_outside_hardlink",
            "read_file",
            json!({"path": "outside_hard"}),
            vec![Refused("hard_link"), Lacks(SECRET)],
        ),
        attack(
            "write_outside_hardlink",
            "write_file",
            json!({"path": "outside_hard", "content": "pwned"}),
            vec![Refused("hard_link")],
        ),
        attack(
            "shell_proc_self_root",
            "shell",
            sh(&["cat", &format!("/proc/self/root{secret}")]),
            vec![Refused("sandbox_denied"), Lacks(SECRET)],
        ),
        attack(
            "shell_proc_self_cwd",
            "shell",
            sh(&["cat", "/proc/self/cwd/../runlog.jsonl"]),
            vec![Refused("sandbox_denied"), Lacks("run_start")],
        ),
        // Protected paths.
        setup("setup_git_dir", "shell", sh(&["mkdir", "-p", ".git/hooks"])),
        attack(
            "write_git_hook",
            "write_file",
            json!({"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\ntouch /tmp/pwned\n"}),
            vec![Refused("protected_path")],
        ),
        attack(
            "write_git_hook_dotted",
            "write_file",
            json!({"path": "./src/../.git/hooks/post-checkout", "content": "x"}),
            vec![Refused("protected_path")],
        ),
        setup("setup_git_link", "shell", sh(&["ln", "-s", ".git", "g"])),
        // Since issue #15 the shell removes a `.git` the run itself made (the setup above), so
        // the link dangles; the write must still fail, refused or not found.
        attack(
            "write_git_via_link",
            "write_file",
            json!({"path": "g/hooks/pre-push", "content": "x"}),
            vec![Failed, Shows("No such file or directory")],
        ),
        attack(
            "write_git_config",
            "write_file",
            json!({"path": ".git/config", "content": "[core]\n\tfsmonitor = touch /tmp/pwned\n"}),
            vec![Refused("protected_path")],
        ),
        // Shell metacharacters reach the program as plain text.
        attack(
            "meta_semicolon",
            "shell",
            sh(&["echo", "hi; touch pwned_semicolon"]),
            vec![Absent(PathBuf::from("pwned_semicolon"))],
        ),
        attack(
            "meta_subst",
            "shell",
            sh(&["ls", "$(touch pwned_subst)"]),
            vec![Shows("No such file")],
        ),
        attack(
            "meta_whole_line",
            "shell",
            sh(&["echo hi && touch pwned"]),
            vec![ErrorType("invalid_args")],
        ),
        attack(
            "program_path",
            "shell",
            sh(&["/bin/sh", "-c", "id"]),
            vec![Refused("command_not_allowed")],
        ),
        // Allowlisted programs as escape hatches: the OS layer holds.
        attack(
            "find_exec",
            "shell",
            sh(&["find", ".", "-maxdepth", "0", "-exec", "cat", &secret, ";"]),
            vec![wall(), Lacks(SECRET)],
        ),
        attack(
            "git_alias",
            "shell",
            sh(&["git", "-c", &git_alias, "pwn"]),
            vec![Refused("sandbox_denied"), wall(), Lacks(SECRET)],
        ),
        attack(
            "env_cat",
            "shell",
            sh(&["env", "cat", &secret]),
            vec![Refused("sandbox_denied"), Lacks(SECRET)],
        ),
        attack(
            "python_read",
            "shell",
            sh(&["python3", "-c", &py_read]),
            vec![Refused("sandbox_denied"), Lacks(SECRET)],
        ),
        attack(
            "python_write",
            "shell",
            sh(&["python3", "-c", &py_write]),
            vec![Refused("sandbox_denied"), Absent(out.join("py_written"))],
        ),
        attack(
            "sh_write",
            "shell",
            sh(&["sh", "-c", &sh_write]),
            vec![
                Refused("sandbox_denied"),
                Expect::Wall {
                    ns: "Directory nonexistent",
                    no_ns: "Permission denied",
                },
                Absent(out.join("sh_written")),
            ],
        ),
        attack(
            "bash_read",
            "shell",
            sh(&["bash", "-c", &format!("cat {secret}")]),
            vec![Refused("sandbox_denied"), Lacks(SECRET)],
        ),
        attack(
            "perl_read",
            "shell",
            sh(&["perl", "-e", &perl_read]),
            vec![Refused("sandbox_denied"), wall(), Lacks(SECRET)],
        ),
        // A real member, so `--to-command` runs (an empty archive never runs it).
        setup(
            "setup_tar_member",
            "write_file",
            json!({"path": "member.txt", "content": "member"}),
        ),
        setup(
            "setup_tar",
            "shell",
            sh(&["tar", "-cf", "a.tar", "member.txt"]),
        ),
        attack(
            "tar_to_command",
            "shell",
            sh(&["tar", "-xf", "a.tar", &tar_cmd]),
            vec![Refused("sandbox_denied"), wall(), Lacks(SECRET)],
        ),
        attack(
            "tar_write_out",
            "shell",
            sh(&["tar", "-cf", &o("stolen.tar"), "."]),
            vec![
                Refused("sandbox_denied"),
                wall(),
                Absent(out.join("stolen.tar")),
            ],
        ),
        attack(
            "xargs_read",
            "shell",
            sh(&["xargs", "-a", &secret, "echo"]),
            vec![Refused("sandbox_denied"), Lacks(SECRET)],
        ),
        attack(
            "cp_out",
            "shell",
            sh(&["cp", "a.tar", &o("copied")]),
            vec![Refused("sandbox_denied"), Absent(out.join("copied"))],
        ),
        attack(
            "touch_etc",
            "shell",
            sh(&["touch", "/etc/fabric-pwned"]),
            vec![
                Refused("sandbox_denied"),
                Absent(PathBuf::from("/etc/fabric-pwned")),
            ],
        ),
        attack(
            "read_home",
            "shell",
            sh(&["ls", "/root", "/home"]),
            vec![Refused("sandbox_denied")],
        ),
        // Environment injection and the parent's environment.
        attack(
            "env_param",
            "shell",
            json!({"cmd": ["true"], "env": {"LD_PRELOAD": "/tmp/evil.so"}}),
            vec![ErrorType("invalid_args")],
        ),
        setup(
            "setup_fake_ls",
            "write_file",
            json!({"path": "ls", "content": "#!/bin/sh\ntouch pwned_path\n"}),
        ),
        setup("setup_fake_ls_exec", "shell", sh(&["chmod", "+x", "ls"])),
        attack(
            "path_shadow",
            "shell",
            sh(&["ls"]),
            vec![Lacks("pwned_path")],
        ),
        attack("printenv", "shell", sh(&["printenv"]), vec![Lacks(CANARY)]),
        attack(
            "parent_environ",
            "shell",
            sh(&["python3", "-c", &py_environ]),
            vec![Refused("sandbox_denied"), Lacks(CANARY)],
        ),
        attack(
            "setsid_escape",
            "shell",
            sh(&["python3", "-c", "import os; os.setsid()"]),
            vec![Refused("sandbox_denied")],
        ),
        // Resource limits.
        attack(
            "fork_bomb",
            "shell",
            json!({"cmd": ["python3", "-c", py_bomb], "timeout_s": 3}),
            vec![Shows(
                "timed out after 3 s and was killed with everything it started",
            )],
        ),
        attack(
            "giant_output",
            "shell",
            sh(&["head", "-c", "50000000", "/dev/zero"]),
            vec![Shows("truncated")],
        ),
        attack(
            "giant_file",
            "shell",
            sh(&["dd", "if=/dev/zero", "of=big.bin", "bs=1M", "count=64"]),
            vec![Refused("sandbox_denied")],
        ),
        attack(
            "giant_memory",
            "shell",
            sh(&["python3", "-c", "x = bytearray(4 * 1024 ** 3)"]),
            vec![Refused("sandbox_denied")],
        ),
        // The network is off for processes.
        attack(
            "curl_local",
            "shell",
            sh(&["curl", "-sS", "--max-time", "3", &curl_local]),
            vec![Shows("Couldn't connect")],
        ),
        attack(
            "curl_metadata",
            "shell",
            sh(&[
                "curl",
                "-sS",
                "--max-time",
                "3",
                "http://169.254.169.254/latest/meta-data/",
            ]),
            vec![Shows("Couldn't connect")],
        ),
        attack(
            "python_tcp",
            "shell",
            sh(&["python3", "-c", &py_connect]),
            vec![Refused("sandbox_denied"), Lacks("CONNECTED")],
        ),
        attack(
            "python_udp",
            "shell",
            sh(&["python3", "-c", &py_udp]),
            vec![Refused("sandbox_denied"), Lacks("SENT-OK")],
        ),
        attack(
            "python_raw",
            "shell",
            sh(&[
                "python3",
                "-c",
                "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)",
            ]),
            vec![Refused("sandbox_denied")],
        ),
        attack(
            "python_packet",
            "shell",
            sh(&[
                "python3",
                "-c",
                "import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)",
            ]),
            vec![Refused("sandbox_denied")],
        ),
        attack(
            "python_netlink",
            "shell",
            sh(&[
                "python3",
                "-c",
                "import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)",
            ]),
            vec![Refused("sandbox_denied")],
        ),
        attack(
            "python_ipv6",
            "shell",
            sh(&[
                "python3",
                "-c",
                "import socket; socket.socket(socket.AF_INET6).connect(('::1', 9))",
            ]),
            vec![Refused("sandbox_denied")],
        ),
    ];

    let fx = Fixture::new(scenario(&attacks)).await;
    fx.append_config(ALLOW);
    // The outside file for the hard link: next to the workspace root, so on the same file
    // system; a thread links it into the run's workspace once the marker appears.
    let fx_dir = fx
        .workspace_root()
        .parent()
        .expect("fixture dir")
        .to_path_buf();
    let hl_secret = fx_dir.join("hardlink_secret.txt");
    std::fs::write(&hl_secret, SECRET).expect("hard link secret");
    let hl_placed = Arc::new(AtomicUsize::new(0));
    let hl_linker = {
        let (root, secret, placed) = (
            fx.workspace_root(),
            hl_secret.clone(),
            Arc::clone(&hl_placed),
        );
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(50);
            while std::time::Instant::now() < deadline && placed.load(Ordering::SeqCst) == 0 {
                if let Some(dir) = find_dir_with(&root, "hardlink_here.txt", 4)
                    && std::fs::hard_link(&secret, dir.join("outside_hard")).is_ok()
                {
                    placed.fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    let accept_counter = Arc::clone(&accepted);
    let watcher = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(50);
        let mut buf = [0u8; 16];
        while std::time::Instant::now() < deadline {
            if tcp.accept().is_ok() || udp.recv_from(&mut buf).is_ok() {
                accept_counter.fetch_add(1, Ordering::SeqCst);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    });
    // The attacks whose target is relative to the run's workspace are checked below.
    let events = run_attacks(&fx, column, &[], &attacks).await;
    drop(watcher);
    hl_linker.join().expect("linker");
    assert_eq!(
        hl_placed.load(Ordering::SeqCst),
        1,
        "the hard link was never placed"
    );
    assert_eq!(
        std::fs::read_to_string(&hl_secret).expect("hard link secret"),
        SECRET
    );
    assert!(!out.join("deep").exists());
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "a sandboxed process reached the test's listeners"
    );

    let start = &of_kind(&events, "run_start")[0]["payload"];
    assert_eq!(start["sandbox"]["mode"], "strict", "{start}");
    let workspace = PathBuf::from(start["workspace"].as_str().expect("workspace"));
    for name in [
        "pwned_semicolon",
        "pwned_subst",
        "pwned",
        "pwned_path",
        "hard",
    ] {
        assert!(
            !workspace.join(name).exists(),
            "{name} exists in the workspace"
        );
    }
    let big = workspace.join("big.bin");
    let size = std::fs::metadata(&big).map(|m| m.len()).unwrap_or(0);
    assert!(
        size <= 8 * 1024 * 1024,
        "big.bin grew to {size} bytes past RLIMIT_FSIZE"
    );
    assert!(std::fs::read_to_string(out.join("secret.txt")).is_ok_and(|s| s == SECRET));
    // Killed processes take a moment to be reaped on a loaded machine: wait up to 10 s.
    let mut left = marker_processes();
    for _ in 0..100 {
        if left == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = marker_processes();
    }
    assert_eq!(left, 0, "fork-bomb processes outlived the command");
    let gaps = start["sandbox"]["not_enforced"].to_string();
    // Where commands get a cgroup its pids.max holds root too (round three's fork_many), so
    // only a root fabric whose commands stay root and get no cgroup reports the gap.
    let cgroups = start["sandbox"]["cgroups"] == true;
    if is_root() && start["sandbox"]["unprivileged"] != true && !cgroups {
        eprintln!(
            "SKIP RLIMIT_NPROC layer: commands run as root here, and the kernel exempts uid 0; the fork bomb was stopped by the timeout's process-group kill (verified: no survivors)"
        );
        assert!(
            gaps.contains("RLIMIT_NPROC"),
            "the probe must report the gap: {gaps}"
        );
    } else {
        // The wall itself is reached in the sandbox crate's own test (tests/nproc.rs),
        // alone in its binary: a bomb at the limit here would starve the other tests'
        // commands, which run as the same user.
        assert!(!gaps.contains("RLIMIT_NPROC"), "{gaps}");
    }
    // Setup steps prepare attacks; only the attacks themselves count, and those the fabric
    // stops before any process exists (the file tools' path checks, the argument schema,
    // the allowlist) are counted apart from those the OS layer stops.
    let (mut os, mut fabric) = (0, 0);
    for a in attacks.iter().filter(|a| !a.id.starts_with("setup_")) {
        assert!(!a.expect.is_empty(), "{} checks nothing", a.id);
        let before_process = a.tool != "shell"
            || a.expect
                .iter()
                .any(|e| matches!(e, Expect::Refused(kind) if *kind != "sandbox_denied"))
            || matches!(a.id, "meta_whole_line" | "env_param");
        if before_process {
            fabric += 1;
        } else {
            os += 1;
        }
    }
    eprintln!(
        "{} attacks stopped and recorded: {os} by the OS layer, {fabric} by the fabric before any process ({} setup steps not counted)",
        os + fabric,
        attacks.len() - os - fabric
    );
    assert!(os + fabric >= 40, "only {} attacks", os + fabric);
    assert!(os >= 30, "only {os} attacks reach the OS layer");
}

#[tokio::test(flavor = "multi_thread")]
async fn fetch_url_refuses_private_addresses_and_redirects_to_them() {
    // A "public" server (allowed by the config) that redirects to private places, and a
    // private one that must never be reached.
    let hits = Arc::new(AtomicUsize::new(0));
    let private = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let private_port = private.local_addr().expect("addr").port();
    let counter = Arc::clone(&hits);
    let private_app = axum::Router::new().fallback(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async { "private data" }
    });
    tokio::spawn(async move { axum::serve(private, private_app).await });
    let public = tokio::net::TcpListener::bind("127.0.0.2:0")
        .await
        .expect("bind 127.0.0.2");
    let public_port = public.local_addr().expect("addr").port();
    let to_private = format!("http://127.0.0.1:{private_port}/secret");
    let target = to_private.clone();
    let public_app = axum::Router::new()
        .route(
            "/to-private",
            axum::routing::get(move || {
                let t = target.clone();
                async move { axum::response::Redirect::temporary(&t) }
            }),
        )
        .route(
            "/to-metadata",
            axum::routing::get(|| async {
                axum::response::Redirect::temporary("http://169.254.169.254/latest/meta-data/")
            }),
        )
        .route(
            "/to-localhost",
            axum::routing::get(|| async {
                axum::response::Redirect::temporary("http://localhost:9/")
            }),
        );
    tokio::spawn(async move { axum::serve(public, public_app).await });
    let public_url = |path: &str| format!("http://127.0.0.2:{public_port}{path}");

    use Expect::{Lacks, Refused};
    let f = |id, url: String| {
        attack(
            id,
            "fetch_url",
            json!({"url": url}),
            vec![Refused("address_denied"), Lacks("private data")],
        )
    };
    let attacks = vec![
        f("fetch_loopback", to_private.clone()),
        f(
            "fetch_localhost",
            format!("http://localhost:{private_port}/"),
        ),
        f(
            "fetch_ipv6_loopback",
            format!("http://[::1]:{private_port}/"),
        ),
        f(
            "fetch_mapped_v6",
            format!("http://[::ffff:127.0.0.1]:{private_port}/"),
        ),
        f("fetch_hex_ip", format!("http://0x7f000001:{private_port}/")),
        f(
            "fetch_decimal_ip",
            format!("http://2130706433:{private_port}/"),
        ),
        f(
            "fetch_metadata",
            "http://169.254.169.254/latest/meta-data/".to_owned(),
        ),
        f("fetch_private_10", "http://10.0.0.1/".to_owned()),
        f("fetch_zero", format!("http://0.0.0.0:{private_port}/")),
        f("redirect_to_loopback", public_url("/to-private")),
        f("redirect_to_metadata", public_url("/to-metadata")),
        f("redirect_to_localhost", public_url("/to-localhost")),
        attack(
            "fetch_file_scheme",
            "fetch_url",
            json!({"url": "file:///etc/passwd"}),
            vec![Refused("url_scheme_denied")],
        ),
    ];
    let mut turns = scenario(&attacks);
    turns.pop();
    turns.push(Turn::tool_call(
        "finish_task",
        json!({"executive_summary": "x", "key_findings": ["x"], "citations": []}),
    ));
    let fx = Fixture::new(turns).await;
    // Only the "public" stand-in is allowed; 127.0.0.1 stays forbidden.
    fx.append_config("network:\n  allow_hosts: [\"127.0.0.2\"]\n");
    let run = fx
        .fabric(&[
            "run",
            "attack",
            "--pack",
            "research",
            "--json",
            "--network-allowed",
            "--max-steps",
            "100",
        ])
        .await;
    let result = run.json();
    let events = fx.runlog(&result);
    let seen = seen_by_call(&events);
    for a in &attacks {
        let s = seen
            .get(a.id)
            .unwrap_or_else(|| panic!("{} not recorded", a.id));
        let Expect::Refused(kind) = a.expect[0] else {
            unreachable!()
        };
        assert!(
            s.security.iter().any(|e| e["event_type"] == kind),
            "{}: {s:?}",
            a.id
        );
        assert!(
            !format!("{s:?}").contains("private data"),
            "{}: leaked",
            a.id
        );
        eprintln!("attack {:<32} refused: {kind}", a.id);
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the private server was reached"
    );
}
