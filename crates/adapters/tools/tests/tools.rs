//! The built-in tools against real files in temporary directories and real processes.
// Helpers outside `#[test]` functions are test code too.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric_core::{Tool, ToolContext, ToolError};
use fabric_domain::RunId;
use fabric_tools::{
    BUILTIN_TOOLS, NoOsSandbox, ProcessSandbox, ToolPolicy, builtin_tool, engineering_tools,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn ctx(workspace: &Path) -> ToolContext {
    ToolContext {
        approved: false,
        sampler: None,
        live: None,
        run_id: RunId::parse("test-run").unwrap(),
        workspace: workspace.to_path_buf(),
        network_allowed: false,
        cancel: CancellationToken::new(),
        lineage: Default::default(),
    }
}

fn sandbox() -> Arc<dyn ProcessSandbox> {
    Arc::new(NoOsSandbox)
}

fn tool_with(name: &str, policy: ToolPolicy) -> Arc<dyn Tool> {
    builtin_tool(name, &Arc::new(policy), &sandbox()).unwrap()
}

fn tool(name: &str) -> Arc<dyn Tool> {
    tool_with(name, ToolPolicy::default())
}

/// The default policy plus the programs the tests need (a shell among them, which the
/// default rightly refuses).
fn test_policy() -> ToolPolicy {
    let mut policy = ToolPolicy::default();
    for extra in ["sh", "env", "sleep"] {
        policy.allowed_commands.push(extra.to_owned());
    }
    policy
}

fn event_type(err: &ToolError) -> &str {
    match err {
        ToolError::Denied { event_type, .. } => event_type,
        other => panic!("expected Denied, got {other:?}"),
    }
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap()
}

/// Whether a process is gone (or a zombie waiting for a reaper that may not exist in a
/// container).
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

async fn wait_dead(pid: u32) -> bool {
    for _ in 0..40 {
        if is_dead(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

async fn read_pid(file: &Path) -> u32 {
    for _ in 0..40 {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no pid in {}", file.display());
}

// --- Contracts ---------------------------------------------------------------------------

#[test]
fn every_tool_keeps_its_contract() {
    let tools = engineering_tools(&Arc::new(ToolPolicy::default()), &sandbox());
    let names: Vec<&str> = tools.iter().map(|t| t.spec().name.as_str()).collect();
    assert_eq!(names, BUILTIN_TOOLS);
    for tool in &tools {
        let spec = tool.spec();
        tool.check_contract().unwrap();
        assert_eq!(
            spec.tool_def().parameters,
            spec.input_schema,
            "{}",
            spec.name
        );
        assert_eq!(
            spec.input_schema["additionalProperties"], false,
            "{}",
            spec.name
        );
        let web = ["web_search", "fetch_url"].contains(&spec.name.as_str());
        assert_eq!(spec.annotations.needs_network, web, "{}", spec.name);
    }
    assert!(builtin_tool("nope", &Arc::new(ToolPolicy::default()), &sandbox()).is_none());
}

#[test]
fn annotations_say_what_each_tool_does() {
    assert!(tool("read_file").spec().annotations.read_only);
    assert!(tool("list_files").spec().annotations.read_only);
    assert!(tool("write_file").spec().annotations.destructive);
    assert!(tool("shell").spec().annotations.destructive);
    assert!(!tool("shell").spec().annotations.read_only);
    assert!(!tool("write_file").spec().annotations.read_only);
    for web in ["web_search", "fetch_url"] {
        let a = tool(web).spec().annotations;
        assert!(a.read_only && a.needs_network && !a.destructive, "{web}");
    }
}

#[test]
fn schemas_bound_what_they_can() {
    let shell = tool("shell");
    let schema = &shell.spec().input_schema;
    assert_eq!(schema["properties"]["cmd"]["minItems"], 1);
    assert_eq!(schema["required"], json!(["cmd"]));
    assert!(shell.spec().description.contains("cargo"));
}

#[tokio::test]
async fn unknown_fields_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = tool("read_file")
        .call(json!({"path": "a", "lines": 3}), &ctx(dir.path()))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments(_)), "{err:?}");
}

// --- Path confinement --------------------------------------------------------------------

#[tokio::test]
async fn escapes_are_denied_for_every_file_tool() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    for raw in ["../x", "a/../../x", "/etc/passwd", ".."] {
        let err = tool("read_file")
            .call(json!({"path": raw}), &c)
            .await
            .unwrap_err();
        assert_eq!(event_type(&err), "path_escape", "read {raw}");
        let err = tool("write_file")
            .call(json!({"path": raw, "content": "x"}), &c)
            .await
            .unwrap_err();
        assert_eq!(event_type(&err), "path_escape", "write {raw}");
        let err = tool("list_files")
            .call(json!({"path": raw}), &c)
            .await
            .unwrap_err();
        assert_eq!(event_type(&err), "path_escape", "list {raw}");
    }
    let err = tool("read_file")
        .call(json!({"path": "../x"}), &c)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "path `../x` is outside the workspace; use a path relative to the workspace, most likely `x`"
    );
    match err {
        ToolError::Denied { attempted, .. } => assert_eq!(attempted, "../x"),
        other => panic!("{other:?}"),
    }
}

/// Issue #24: a small model that writes an absolute path is told the workspace path it
/// most likely meant, and nothing is written outside.
#[tokio::test]
async fn issue_24_an_outside_path_is_answered_with_the_path_meant_inside() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/main.rs"), "fn main() {}").unwrap();
    let c = ctx(dir.path());
    let workspace = dir.path().canonicalize().unwrap();
    let cases = [
        ("write_file", "/Users/x/hello.txt".to_owned(), "hello.txt"),
        (
            "read_file",
            "/home/u/project/src/main.rs".to_owned(),
            "src/main.rs",
        ),
        (
            "write_file",
            "/home/u/project/src/lib.rs".to_owned(),
            "src/lib.rs",
        ),
        (
            "read_file",
            format!("{}/src/main.rs", workspace.display()),
            "src/main.rs",
        ),
        ("list_files", workspace.display().to_string(), "."),
        ("read_file", "../../etc/passwd".to_owned(), "passwd"),
    ];
    for (name, raw, meant) in cases {
        let args = if name == "write_file" {
            json!({"path": raw, "content": "x"})
        } else {
            json!({"path": raw})
        };
        let err = tool(name).call(args, &c).await.unwrap_err();
        assert_eq!(event_type(&err), "path_escape", "{name} {raw}");
        assert_eq!(
            err.to_string(),
            format!(
                "path `{raw}` is outside the workspace; use a path relative to the workspace, most likely `{meant}`"
            ),
            "{name} {raw}"
        );
    }
    assert!(!Path::new("/Users/x/hello.txt").exists());
    assert!(!dir.path().join("hello.txt").exists());
}

#[tokio::test]
async fn symlink_to_etc_is_denied() {
    let dir = tempfile::tempdir().unwrap();
    symlink("/etc", dir.path().join("etc")).unwrap();
    let c = ctx(dir.path());
    let err = tool("read_file")
        .call(json!({"path": "etc/passwd"}), &c)
        .await
        .unwrap_err();
    assert_eq!(event_type(&err), "path_escape");
    let err = tool("list_files")
        .call(json!({"path": "etc"}), &c)
        .await
        .unwrap_err();
    assert_eq!(event_type(&err), "path_escape");
}

#[tokio::test]
async fn write_through_symlinked_dir_is_denied_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    symlink(outside.path(), dir.path().join("out")).unwrap();
    symlink(outside.path().join("new.txt"), dir.path().join("link.txt")).unwrap();
    let c = ctx(dir.path());
    for raw in ["out/new.txt", "out/deep/new.txt", "link.txt"] {
        let err = tool("write_file")
            .call(json!({"path": raw, "content": "pwned"}), &c)
            .await
            .unwrap_err();
        assert_eq!(event_type(&err), "path_escape", "{raw}");
    }
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn nested_paths_inside_work() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let out = tool("write_file")
        .call(json!({"path": "a/b/c.txt", "content": "héllo\n"}), &c)
        .await
        .unwrap();
    assert_eq!(out, json!({"path": "a/b/c.txt", "bytes": 7}));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
        "héllo\n"
    );
    let read = tool("read_file")
        .call(json!({"path": "a/x/../b/./c.txt"}), &c)
        .await
        .unwrap();
    assert_eq!(text(&read), "héllo\n");
    // A symlink that stays inside is fine.
    symlink("a/b", dir.path().join("alias")).unwrap();
    let read = tool("read_file")
        .call(json!({"path": "alias/c.txt"}), &c)
        .await
        .unwrap();
    assert_eq!(text(&read), "héllo\n");
}

// --- read_file ---------------------------------------------------------------------------

#[tokio::test]
async fn read_is_capped_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.txt"), "x".repeat(1_000)).unwrap();
    let policy = ToolPolicy {
        max_read_bytes: 100,
        ..ToolPolicy::default()
    };
    let out = tool_with("read_file", policy)
        .call(json!({"path": "big.txt"}), &ctx(dir.path()))
        .await
        .unwrap();
    let out = text(&out);
    assert!(out.starts_with(&"x".repeat(100)), "{out}");
    assert!(
        out.ends_with("\n[the first 100 bytes of line 1 of 1 (1000 bytes): the line is 1000 bytes long and read_file returns at most 100 bytes at once, so the rest of it cannot be read with read_file; the end of the file]"),
        "{out}"
    );
}

/// A file bigger than one answer comes in whole lines that fit the engine's cap on a tool
/// result, with the file's true size and the exact call that reads on; following the notes
/// reads the whole file (issue #40: it was cut at 16,000 characters with
/// `[truncated: 24500 more characters]` and no way to read the rest).
#[tokio::test]
async fn issue_40_a_big_file_says_its_size_and_the_call_that_reads_on() {
    let dir = tempfile::tempdir().unwrap();
    let file: String = (1..=500)
        .map(|n| {
            format!(
                "line {n:03}: {:<70}\n",
                "the river runs to the sea, and the sea is not full"
            )
        })
        .collect();
    assert_eq!(file.len(), 40_500);
    std::fs::write(dir.path().join("big.txt"), &file).unwrap();
    let read = tool("read_file");
    let c = ctx(dir.path());
    let mut args = json!({"path": "big.txt"});
    let mut whole = String::new();
    for _ in 0..10 {
        let out = read.call(args.clone(), &c).await.unwrap();
        let out = text(&out);
        assert!(
            out.chars().count() <= fabric_core::engine::MAX_TOOL_RESULT_CHARS,
            "{} characters",
            out.len()
        );
        let (lines, note) = out.rsplit_once('\n').unwrap();
        whole.push_str(lines);
        whole.push('\n');
        if note.ends_with(": the end of the file]") {
            break;
        }
        let first = args["offset"].as_u64().unwrap_or(1);
        let last = first + lines.lines().count() as u64 - 1;
        assert!(
            note.starts_with(&format!(
                "[lines {first}–{last} of 500 (40500 bytes); read_file with {{"
            )),
            "{note}"
        );
        let call = note
            .split_once("read_file with ")
            .unwrap()
            .1
            .strip_suffix(" reads the next part]")
            .unwrap();
        args = serde_json::from_str(call).unwrap();
        assert_eq!(args["offset"], last + 1, "{note}");
    }
    assert_eq!(whole, file);
}

#[tokio::test]
async fn read_reports_missing_files_directories_and_bad_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let err = tool("read_file")
        .call(json!({"path": "x"}), &c)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ToolError::Failed("no file `x` in the workspace; list_files shows what exists".into())
    );
    std::fs::create_dir(dir.path().join("d")).unwrap();
    let err = tool("read_file")
        .call(json!({"path": "d"}), &c)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is a directory"), "{err}");
    std::fs::write(dir.path().join("bin"), b"ok\xff").unwrap();
    let out = tool("read_file")
        .call(json!({"path": "bin"}), &c)
        .await
        .unwrap();
    assert!(text(&out).starts_with("ok\u{FFFD}"), "{out}");
    assert!(text(&out).contains("not valid UTF-8"), "{out}");
}

// --- write_file --------------------------------------------------------------------------

#[tokio::test]
async fn write_refuses_the_workspace_and_directories() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let err = tool("write_file")
        .call(json!({"path": ".", "content": "x"}), &c)
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments(_)), "{err:?}");
    std::fs::create_dir(dir.path().join("d")).unwrap();
    let err = tool("write_file")
        .call(json!({"path": "d", "content": "x"}), &c)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is a directory"), "{err}");
}

// --- list_files --------------------------------------------------------------------------

#[tokio::test]
async fn list_is_recursive_sorted_and_relative() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("src/bin")).unwrap();
    std::fs::write(root.join("src/lib.rs"), "").unwrap();
    std::fs::write(root.join("src/bin/main.rs"), "").unwrap();
    std::fs::write(root.join("Cargo.toml"), "").unwrap();
    std::fs::write(root.join("src.txt"), "").unwrap();
    symlink("/etc", root.join("etc")).unwrap();
    let c = ctx(root);
    let out = tool("list_files").call(json!({}), &c).await.unwrap();
    assert_eq!(
        text(&out),
        "Cargo.toml\netc\nsrc/\nsrc/bin/\nsrc/bin/main.rs\nsrc/lib.rs\nsrc.txt"
    );
    let out = tool("list_files")
        .call(json!({"path": "src"}), &c)
        .await
        .unwrap();
    assert_eq!(text(&out), "src/bin/\nsrc/bin/main.rs\nsrc/lib.rs");
    let err = tool("list_files")
        .call(json!({"path": "nope"}), &c)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no folder `nope`"), "{err}");
}

#[tokio::test]
async fn list_stops_at_the_cap_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..20 {
        std::fs::write(dir.path().join(format!("f{i:02}")), "").unwrap();
    }
    std::fs::create_dir(dir.path().join("deep")).unwrap();
    for i in 0..20 {
        std::fs::write(dir.path().join(format!("deep/g{i:02}")), "").unwrap();
    }
    let policy = ToolPolicy {
        max_list_entries: 10,
        ..ToolPolicy::default()
    };
    let list = tool_with("list_files", policy);
    let c = ctx(dir.path());
    let out = list.call(json!({}), &c).await.unwrap();
    let lines: Vec<&str> = text(&out).lines().collect();
    assert_eq!(lines.len(), 11, "{out}");
    assert_eq!(
        lines[0], "deep/",
        "breadth first keeps top-level entries: {out}"
    );
    assert!(
        lines[10].starts_with("[listing stopped at 10 entries"),
        "{out}"
    );
    // A smaller cap from the call is honoured; a larger one is clamped to the policy.
    let out = list.call(json!({"max_entries": 3}), &c).await.unwrap();
    assert_eq!(text(&out).lines().count(), 4, "{out}");
    let out = list.call(json!({"max_entries": 10_000}), &c).await.unwrap();
    assert_eq!(text(&out).lines().count(), 11, "{out}");
}

// --- shell -------------------------------------------------------------------------------

#[tokio::test]
async fn shell_runs_allowed_program_in_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "hi").unwrap();
    let c = ctx(dir.path());
    let out = tool("shell")
        .call(json!({"cmd": ["pwd"]}), &c)
        .await
        .unwrap();
    assert_eq!(out["exit_code"], 0);
    assert_eq!(out["timed_out"], false);
    let cwd = dir.path().canonicalize().unwrap();
    assert_eq!(
        out["stdout"].as_str().unwrap().trim(),
        cwd.to_str().unwrap()
    );
    let out = tool("shell")
        .call(json!({"cmd": ["ls"]}), &c)
        .await
        .unwrap();
    assert_eq!(out["stdout"], "hello.txt\n");
}

#[tokio::test]
async fn shell_nonzero_exit_is_a_result() {
    let dir = tempfile::tempdir().unwrap();
    let out = tool("shell")
        .call(json!({"cmd": ["ls", "missing-file"]}), &ctx(dir.path()))
        .await
        .unwrap();
    assert_ne!(out["exit_code"], 0);
    assert!(
        out["stderr"].as_str().unwrap().contains("missing-file"),
        "{out}"
    );
}

#[tokio::test]
async fn shell_refuses_programs_off_the_allowlist() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    for program in ["bash", "/bin/ls", "./x", "sh", "python3", "env"] {
        let err = tool("shell")
            .call(json!({"cmd": [program, "-c", "true"]}), &c)
            .await
            .unwrap_err();
        assert_eq!(event_type(&err), "command_not_allowed", "{program}");
        assert!(
            err.to_string().contains("allowed programs: ls, cat"),
            "{err}"
        );
        match &err {
            ToolError::Denied { attempted, .. } => assert_eq!(attempted, program),
            other => panic!("{other:?}"),
        }
    }
    // The whole command line in one string gets a hint, not a refusal.
    let err = tool("shell")
        .call(json!({"cmd": ["ls -la"]}), &c)
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments(_)), "{err:?}");
    assert!(err.to_string().contains(r#"["ls","-la"]"#), "{err}");
}

#[tokio::test]
async fn shell_timeout_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let err = tool("shell")
        .call(json!({"cmd": ["true"], "timeout_s": 601}), &ctx(dir.path()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("between 1 and 600"), "{err}");
}

#[tokio::test]
async fn shell_missing_program_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let mut policy = ToolPolicy::default();
    policy.allowed_commands.push("no-such-program-xyz".into());
    let err = tool_with("shell", policy)
        .call(json!({"cmd": ["no-such-program-xyz"]}), &ctx(dir.path()))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Failed(_)), "{err:?}");
    assert!(err.to_string().contains("not found on PATH"), "{err}");
}

#[tokio::test]
async fn shell_environment_is_scrubbed() {
    let dir = tempfile::tempdir().unwrap();
    let mut policy = test_policy();
    policy
        .extra_env
        .push(("FABRIC_EXTRA".into(), "visible".into()));
    let out = tool_with("shell", policy)
        .call(json!({"cmd": ["env"]}), &ctx(dir.path()))
        .await
        .unwrap();
    let stdout = out["stdout"].as_str().unwrap();
    let keys: BTreeSet<&str> = stdout
        .lines()
        .filter_map(|line| line.split_once('=').map(|(k, _)| k))
        .collect();
    let expected: BTreeSet<&str> = ["FABRIC_EXTRA", "HOME", "LANG", "PATH"].into();
    assert_eq!(keys, expected, "{stdout}");
    assert!(
        stdout.contains("PATH=/usr/local/bin:/usr/bin:/bin\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("HOME={}\n", dir.path().display())),
        "{stdout}"
    );
    // Whatever this test process has in its environment (cargo sets plenty), none of it
    // reaches the command.
    for (key, _) in std::env::vars() {
        if !expected.contains(key.as_str()) {
            assert!(!stdout.contains(&format!("{key}=")), "{key} leaked");
        }
    }
}

#[tokio::test]
async fn shell_timeout_kills_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let err = tool_with("shell", test_policy())
        .call(
            json!({"cmd": ["sh", "-c", "sleep 30 & echo $! > bg.pid; echo started; sleep 30"], "timeout_s": 1}),
            &ctx(dir.path()),
        )
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let message = err.to_string();
    assert!(matches!(err, ToolError::Failed(_)), "{err:?}");
    assert!(message.contains("timed out after 1 s"), "{message}");
    assert!(message.contains("stdout so far:\nstarted"), "{message}");
    let pid = read_pid(&dir.path().join("bg.pid")).await;
    assert!(
        wait_dead(pid).await,
        "background sleep {pid} survived the timeout"
    );
}

#[tokio::test]
async fn shell_background_processes_die_with_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = tool_with("shell", test_policy())
        .call(
            json!({"cmd": ["sh", "-c", "sleep 30 & echo $! > bg.pid; echo done"], "timeout_s": 10}),
            &ctx(dir.path()),
        )
        .await
        .unwrap();
    assert_eq!(out["stdout"], "done\n");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let pid = read_pid(&dir.path().join("bg.pid")).await;
    assert!(
        wait_dead(pid).await,
        "background sleep {pid} outlived the command"
    );
}

#[tokio::test]
async fn shell_cancellation_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let cancel = c.cancel.clone();
    let shell = tool_with("shell", test_policy());
    let call = tokio::spawn(async move {
        shell
            .call(
                json!({"cmd": ["sh", "-c", "sleep 30 & echo $! > bg.pid; sleep 30"]}),
                &c,
            )
            .await
    });
    let pid = read_pid(&dir.path().join("bg.pid")).await;
    let started = Instant::now();
    cancel.cancel();
    let err = call.await.unwrap().unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("cancelled"), "{err}");
    assert!(
        wait_dead(pid).await,
        "background sleep {pid} survived cancellation"
    );
}

#[tokio::test]
async fn dropping_the_call_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let shell = tool_with("shell", test_policy());
    let call = shell.call(
        json!({"cmd": ["sh", "-c", "sleep 30 & echo $! > bg.pid; sleep 30"]}),
        &c,
    );
    // Poll the call until the background pid shows up, then drop it mid-run.
    let pid_file = dir.path().join("bg.pid");
    let outcome = tokio::time::timeout(Duration::from_secs(2), call).await;
    assert!(outcome.is_err(), "the call should still be running");
    let pid = read_pid(&pid_file).await;
    assert!(
        wait_dead(pid).await,
        "background sleep {pid} survived the dropped call"
    );
}

#[tokio::test]
async fn shell_output_is_capped_per_stream() {
    let dir = tempfile::tempdir().unwrap();
    let policy = ToolPolicy {
        max_output_chars: 1_000,
        ..test_policy()
    };
    let out = tool_with("shell", policy)
        .call(
            json!({"cmd": ["head", "-c", "1000000", "/dev/zero"]}),
            &ctx(dir.path()),
        )
        .await
        .unwrap();
    assert_eq!(out["exit_code"], 0);
    let stdout = out["stdout"].as_str().unwrap();
    assert!(
        stdout.ends_with("\n[output truncated: 999000 more bytes]"),
        "{}",
        &stdout[stdout.len() - 60..]
    );
    assert_eq!(
        stdout.len(),
        1_000 + "\n[output truncated: 999000 more bytes]".len()
    );
    assert_eq!(out["stderr"], "");
}

#[tokio::test]
async fn shell_does_not_start_in_a_cancelled_run() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    c.cancel.cancel();
    let err = tool("shell")
        .call(json!({"cmd": ["touch", "made"]}), &c)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cancelled"), "{err}");
    assert!(!dir.path().join("made").exists());
}

// --- races and hard links (ADR-026) -------------------------------------------------------

/// A background thread flips `d` between a real folder and a symbolic link to a folder
/// outside, with atomic renames, while the tools read and write through `d` many times: no
/// read returns the outside file and no write lands outside.
#[tokio::test]
async fn a_folder_swapped_for_a_link_mid_call_never_leads_out() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let ws = dir.path().to_path_buf();
    std::fs::create_dir(ws.join("d")).unwrap();
    std::fs::write(ws.join("d/f.txt"), "inside").unwrap();
    std::fs::write(outside.path().join("f.txt"), "OUTSIDE-SECRET").unwrap();
    symlink(outside.path(), ws.join("link")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = Arc::clone(&stop);
        let ws = ws.clone();
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // d = folder, link = link  ->  d = link, real = folder  -> back.
                let _ = std::fs::rename(ws.join("d"), ws.join("real"));
                let _ = std::fs::rename(ws.join("link"), ws.join("d"));
                std::thread::sleep(Duration::from_micros(200));
                let _ = std::fs::rename(ws.join("d"), ws.join("link"));
                let _ = std::fs::rename(ws.join("real"), ws.join("d"));
                std::thread::sleep(Duration::from_micros(200));
                flips += 1;
            }
            flips
        })
    };
    let c = ctx(&ws);
    let (read, write) = (tool("read_file"), tool("write_file"));
    let mut read_inside = 0;
    for i in 0..400 {
        if let Ok(out) = read.call(json!({"path": "d/f.txt"}), &c).await {
            assert_eq!(text(&out), "inside", "read {i} returned another file");
            read_inside += 1;
        }
        let path = if i % 2 == 0 {
            "d/new.txt"
        } else {
            "d/sub/new.txt"
        };
        let _ = write
            .call(json!({"path": path, "content": "pwned"}), &c)
            .await;
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    let names: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("f.txt")],
        "a write landed outside"
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("f.txt")).unwrap(),
        "OUTSIDE-SECRET"
    );
    assert!(flips > 0, "the flipper never ran");
    eprintln!("{flips} flips, {read_inside} reads of the inside file");
}

#[tokio::test]
async fn a_hard_link_to_an_outside_file_is_neither_read_nor_written() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir_in(dir.path().parent().unwrap()).unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "OUTSIDE-SECRET").unwrap();
    if std::fs::hard_link(&secret, dir.path().join("hard")).is_err() {
        eprintln!("SKIP hard link test: cannot link across these folders");
        return;
    }
    let c = ctx(dir.path());
    let err = tool("read_file")
        .call(json!({"path": "hard"}), &c)
        .await
        .unwrap_err();
    assert_eq!(event_type(&err), "hard_link");
    assert_eq!(
        err.to_string(),
        "`hard` is a hard link (2 names for one file, and another name may be outside the workspace), so read_file does not read it. Use another file, or ask the user to copy it into the workspace"
    );
    assert!(!err.to_string().contains("OUTSIDE-SECRET"));
    let err = tool("write_file")
        .call(json!({"path": "hard", "content": "pwned"}), &c)
        .await
        .unwrap_err();
    assert_eq!(event_type(&err), "hard_link");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "OUTSIDE-SECRET");
}

#[tokio::test]
async fn a_link_as_the_last_component_of_a_write_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("target.txt"), "old").unwrap();
    symlink("target.txt", dir.path().join("alias.txt")).unwrap();
    let c = ctx(dir.path());
    let err = tool("write_file")
        .call(json!({"path": "alias.txt", "content": "new"}), &c)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "`alias.txt` is a symbolic link to `target.txt`; write_file does not write through a link. Write `target.txt` instead"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("target.txt")).unwrap(),
        "old"
    );
    // Reads follow links that stay inside.
    let out = tool("read_file")
        .call(json!({"path": "alias.txt"}), &c)
        .await
        .unwrap();
    assert_eq!(text(&out), "old");
}
