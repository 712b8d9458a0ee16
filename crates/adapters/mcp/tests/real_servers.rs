//! The MCP client against real servers: `@modelcontextprotocol/server-everything` and
//! `server-filesystem` from npm (installed by `scripts/install-test-deps.sh`), a server that
//! never starts, and one that crashes mid-call. Every test also checks that no server
//! process is left behind.
// A skipped test says so on stderr, naming the script that installs what it needs.
#![allow(clippy::print_stderr)]

use fabric_core::{ToolContext, ToolError, ToolSource};
use fabric_domain::{McpServerSpec, McpTransport, RunId, SpecialistSpec};
use fabric_mcp::McpTools;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The install directory, or `None` (with a message) when the script has not run. With
/// `FABRIC_REQUIRE_TEST_DEPS=1` (set by .ci/run) a missing install fails instead.
fn deps() -> Option<PathBuf> {
    fabric_test_support::test_deps()
}

fn node_module(deps: &std::path::Path, package: &str) -> String {
    deps.join("node/node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js")
        .display()
        .to_string()
}

/// A string unique to one test, put on the server's command line to find its processes.
fn marker() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("fabric-mcp-test-{}-{nanos}-{n}", std::process::id())
}

fn stdio(name: &str, command: &str, args: Vec<String>) -> McpServerSpec {
    McpServerSpec {
        name: name.into(),
        transport: McpTransport::Stdio {
            command: command.into(),
            args,
            env: Default::default(),
            pass_env: Vec::new(),
            cwd: None,
        },
        required: false,
        startup_timeout_s: 60,
        call_timeout_s: 30,

        sampling: true,

        elicitation: fabric_domain::McpElicitation::Decline,
        pool: true,
    }
}

fn specialist(servers: Vec<McpServerSpec>, tools: &[&str]) -> SpecialistSpec {
    let mut spec = fabric_config::builtin_specialists().remove(0);
    spec.tools = tools.iter().map(|t| (*t).to_owned()).collect();
    spec.tooling.mcp_servers = servers;
    spec
}

fn ctx(dir: &std::path::Path) -> ToolContext {
    ToolContext {
        approved: false,
        sampler: None,
        live: None,
        run_id: RunId::parse("test-run").unwrap_or_else(|e| panic!("{e}")),
        workspace: dir.to_path_buf(),
        network_allowed: false,
        cancel: CancellationToken::new(),
        lineage: Default::default(),
    }
}

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(marker)
        {
            found.push(pid);
        }
    }
    found
}

async fn assert_no_process_left(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "server processes left behind: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_for_tools(source: &McpTools, at_least: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while source.tools().len() < at_least {
        assert!(
            Instant::now() < deadline,
            "tools did not arrive: {:?}",
            source.take_notices()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        source.version();
    }
}

fn statuses(notices: &[fabric_core::ToolNotice]) -> Vec<String> {
    notices
        .iter()
        .map(|n| {
            format!(
                "{}:{}",
                n.payload["server"].as_str().unwrap_or(""),
                n.payload["status"].as_str().unwrap_or("")
            )
        })
        .collect()
}

async fn call(
    source: &McpTools,
    name: &str,
    args: Value,
    ctx: &ToolContext,
) -> Result<Value, ToolError> {
    let tools = source.tools();
    let tool = tools
        .iter()
        .find(|t| t.spec().name == name)
        .unwrap_or_else(|| panic!("no tool {name}"));
    tool.call(args, ctx).await
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_server_tools_are_listed_called_and_errors_surface() {
    let Some(deps) = deps() else { return };
    let marker = marker();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let server = stdio(
        "everything",
        "node",
        vec![
            node_module(&deps, "server-everything"),
            "stdio".into(),
            marker.clone(),
        ],
    );
    let source = McpTools::new(&specialist(vec![server], &[]));
    let ctx = ctx(dir.path());
    source.start(&ctx).await.unwrap_or_else(|e| panic!("{e}"));
    wait_for_tools(&source, 2).await;
    let names: Vec<String> = source
        .tools()
        .iter()
        .map(|t| t.spec().name.clone())
        .collect();
    assert!(
        names.contains(&"mcp__everything__echo".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"mcp__everything__get-sum".to_owned()),
        "{names:?}"
    );

    let echoed = call(
        &source,
        "mcp__everything__echo",
        json!({"message": "hello fabric"}),
        &ctx,
    )
    .await;
    assert!(
        echoed
            .as_ref()
            .is_ok_and(|v| v.as_str().unwrap_or("").contains("hello fabric")),
        "{echoed:?}"
    );
    let sum = call(
        &source,
        "mcp__everything__get-sum",
        json!({"a": 2, "b": 3}),
        &ctx,
    )
    .await;
    assert!(
        sum.as_ref()
            .is_ok_and(|v| v.as_str().unwrap_or("").contains('5')),
        "{sum:?}"
    );
    // The server refuses arguments of the wrong type: an error the model can read.
    let bad = call(
        &source,
        "mcp__everything__get-sum",
        json!({"a": "two", "b": 3}),
        &ctx,
    )
    .await;
    assert!(
        matches!(&bad, Err(ToolError::Failed(m)) if m.contains("get-sum")),
        "{bad:?}"
    );

    let seen = statuses(&source.take_notices());
    assert!(
        seen.starts_with(&[
            "everything:starting".to_owned(),
            "everything:ready".to_owned()
        ]),
        "{seen:?}"
    );
    assert!(
        !processes_with(&marker).is_empty(),
        "the server should be running"
    );
    drop(source);
    assert_no_process_left(&marker).await;
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patterns_select_tools_and_the_filesystem_server_lists_a_directory() {
    let Some(deps) = deps() else { return };
    let marker = marker();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = dir.path().join(&marker);
    std::fs::create_dir(&root).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(root.join("notes.txt"), "fabric").unwrap_or_else(|e| panic!("{e}"));
    let server = stdio(
        "fs",
        "node",
        vec![
            node_module(&deps, "server-filesystem"),
            root.display().to_string(),
        ],
    );
    let source = McpTools::new(&specialist(vec![server], &["mcp__fs__list_*"]));
    let ctx = ctx(dir.path());
    source.start(&ctx).await.unwrap_or_else(|e| panic!("{e}"));
    wait_for_tools(&source, 1).await;
    let names: Vec<String> = source
        .tools()
        .iter()
        .map(|t| t.spec().name.clone())
        .collect();
    assert!(
        names.iter().all(|n| n.starts_with("mcp__fs__list_")),
        "{names:?}"
    );
    assert!(
        names.contains(&"mcp__fs__list_directory".to_owned()),
        "{names:?}"
    );
    let listing = call(
        &source,
        "mcp__fs__list_directory",
        json!({"path": root.display().to_string()}),
        &ctx,
    )
    .await;
    assert!(
        listing
            .as_ref()
            .is_ok_and(|v| v.as_str().unwrap_or("").contains("notes.txt")),
        "{listing:?}"
    );
    let outside = call(
        &source,
        "mcp__fs__list_directory",
        json!({"path": "/etc"}),
        &ctx,
    )
    .await;
    assert!(matches!(&outside, Err(ToolError::Failed(_))), "{outside:?}");
    drop(source);
    assert_no_process_left(&marker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_starts_times_out_and_is_killed() {
    let marker = marker();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut server = stdio(
        "sleepy",
        "sh",
        vec!["-c".into(), format!("sleep 300; echo {marker}")],
    );
    server.startup_timeout_s = 1;
    let source = McpTools::new(&specialist(vec![server.clone()], &[]));
    source
        .start(&ctx(dir.path()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The run did not wait for it: `start` returned before its timeout was noticed.
    let at_start = source.take_notices();
    assert_eq!(
        statuses(&at_start),
        ["sleepy:starting"],
        "an optional server must not delay the run"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let later = source.take_notices();
    let notices: Vec<_> = at_start.into_iter().chain(later).collect();
    assert_eq!(statuses(&notices), ["sleepy:starting", "sleepy:timeout"]);
    let error = notices[1].payload["error"].as_str().unwrap_or("");
    assert!(error.contains("did not start within 1 s"), "{error}");
    // Killed at the timeout, not only when the run ends.
    assert_no_process_left(&marker).await;
    assert!(source.tools().is_empty());

    server.required = true;
    let required = McpTools::new(&specialist(vec![server], &[]));
    let err = required
        .start(&ctx(dir.path()))
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("required MCP server `sleepy`") && err.contains("startup_timeout_s"),
        "{err}"
    );
    assert_no_process_left(&marker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_program_is_a_clear_failure() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let server = stdio("ghost", "fabric-no-such-program", Vec::new());
    let source = McpTools::new(&specialist(vec![server], &[]));
    source
        .start(&ctx(dir.path()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let notices = source.take_notices();
    assert_eq!(statuses(&notices), ["ghost:starting", "ghost:failed"]);
    let error = notices[1].payload["error"].as_str().unwrap_or("");
    assert!(
        error.contains("cannot start `fabric-no-such-program`") && error.contains("PATH"),
        "{error}"
    );
}

fn crash_server(marker: &str) -> McpServerSpec {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/crash_server.js");
    let mut server = stdio(
        "crashy",
        "node",
        vec![script.display().to_string(), marker.to_owned()],
    );
    server.call_timeout_s = 1;
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_is_a_tool_error_and_the_tools_go() {
    let marker = marker();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let source = McpTools::new(&specialist(vec![crash_server(&marker)], &[]));
    let ctx = ctx(dir.path());
    source.start(&ctx).await.unwrap_or_else(|e| panic!("{e}"));
    wait_for_tools(&source, 2).await;

    // Issue #29: the fabric introduces itself by its own name and version (not as
    // `rmcp`), and asks, in an `initialize`, for the newest revision that has one.
    let hello = call(&source, "mcp__crashy__hello", json!({}), &ctx)
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let text = hello.to_string();
    assert!(
        text.contains(r#"\"name\":\"agent-fabric\""#)
            && text.contains(&format!(r#"\"version\":\"{}\""#, env!("CARGO_PKG_VERSION")))
            && text.contains(r#"\"protocolVersion\":\"2025-11-25\""#),
        "{text}"
    );

    let hung = call(&source, "mcp__crashy__hang", json!({}), &ctx).await;
    assert!(
        matches!(&hung, Err(ToolError::Failed(m)) if m.contains("did not answer within 1 s")),
        "{hung:?}"
    );

    let before = source.version();
    let crashed = call(&source, "mcp__crashy__boom", json!({}), &ctx).await;
    let Err(ToolError::Failed(message)) = &crashed else {
        panic!("{crashed:?}")
    };
    assert!(
        message.contains("MCP server `crashy` stopped while running `mcp__crashy__boom`"),
        "{message}"
    );
    assert!(
        message.contains("about to crash"),
        "the server's stderr explains the crash: {message}"
    );
    assert!(source.version() > before);
    assert!(source.tools().is_empty());
    let seen = statuses(&source.take_notices());
    assert_eq!(
        seen.last().map(String::as_str),
        Some("crashy:stopped"),
        "{seen:?}"
    );
    drop(source);
    assert_no_process_left(&marker).await;
}

/// Issue #29: a server that speaks only the 2026-07-28 revision (no `initialize`) is reached:
/// the fabric asks `server/discover` first, and every request then carries the revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_29_a_server_that_speaks_only_2026_07_28_is_reached() {
    let marker = marker();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/modern_server.js");
    let server = stdio(
        "modern",
        "node",
        vec![script.display().to_string(), marker.clone()],
    );
    let source = McpTools::new(&specialist(vec![server], &[]));
    let ctx = ctx(dir.path());
    source.start(&ctx).await.unwrap_or_else(|e| panic!("{e}"));
    wait_for_tools(&source, 1).await;
    let hello = call(&source, "mcp__modern__hello", json!({}), &ctx)
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let text = hello.to_string();
    assert!(
        text.contains(r#"\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\""#)
            && text.contains(r#"\"initializeSeen\":false"#),
        "{text}"
    );
    drop(source);
    assert_no_process_left(&marker).await;
}

#[test]
fn a_panic_in_the_run_still_kills_the_server() {
    let marker = marker();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let spec = specialist(vec![crash_server(&marker)], &[]);
    let ctx = ctx(dir.path());
    let outcome = runtime.block_on(async {
        tokio::spawn(async move {
            let source = McpTools::new(&spec);
            source.start(&ctx).await.unwrap_or_else(|e| panic!("{e}"));
            wait_for_tools(&source, 2).await;
            assert!(!processes_with(&marker_of(&spec)).is_empty());
            panic!("the run panics with its server up");
        })
        .await
    });
    assert!(outcome.is_err_and(|e| e.is_panic()));
    // Shut the runtime down too: cleanup must not depend on async tasks running later.
    drop(runtime);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_with(&marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "server processes left behind after a panic"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn marker_of(spec: &SpecialistSpec) -> String {
    match &spec.tooling.mcp_servers[0].transport {
        McpTransport::Stdio { args, .. } => args[1].clone(),
        McpTransport::Http { url, .. } | McpTransport::Sse { url, .. } => url.clone(),
    }
}

/// A free port on the loopback interface.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// server-everything in one of its HTTP modes on a free port, once it listens.
async fn everything_over_http(deps: &std::path::Path, mode: &str) -> (tokio::process::Child, u16) {
    let port = free_port();
    let server = tokio::process::Command::new("node")
        .arg(node_module(deps, "server-everything"))
        .arg(mode)
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "server-everything did not listen on {port}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (server, port)
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_sse_server_is_reached_through_our_own_client() {
    let Some(deps) = deps() else { return };
    let (mut server, port) = everything_over_http(&deps, "sse").await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let spec = McpServerSpec {
        name: "old".into(),
        transport: McpTransport::Sse {
            url: format!("http://127.0.0.1:{port}/sse"),
            headers: Default::default(),
            bearer_token_env: None,
        },
        required: true,
        startup_timeout_s: 30,
        call_timeout_s: 30,

        sampling: true,

        elicitation: fabric_domain::McpElicitation::Decline,
        pool: true,
    };
    let source = McpTools::new(&specialist(vec![spec], &[]));
    let ctx = ctx(dir.path());
    source.start(&ctx).await.unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<String> = source
        .tools()
        .iter()
        .map(|t| t.spec().name.clone())
        .collect();
    assert!(names.contains(&"mcp__old__get-sum".to_owned()), "{names:?}");
    let sum = call(
        &source,
        "mcp__old__get-sum",
        json!({"a": 20, "b": 22}),
        &ctx,
    )
    .await;
    assert!(
        sum.as_ref()
            .is_ok_and(|v| v.as_str().unwrap_or("").contains("42")),
        "{sum:?}"
    );
    drop(source);
    let _ = server.kill().await;
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_is_reached_with_its_headers() {
    let Some(deps) = deps() else { return };
    let (mut server, port) = everything_over_http(&deps, "streamableHttp").await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let spec = McpServerSpec {
        name: "web".into(),
        transport: McpTransport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
            headers: [("x-fabric-test".to_owned(), "1".to_owned())].into(),
            bearer_token_env: Some("PATH".into()),
            oauth: None,
        },
        required: true,
        startup_timeout_s: 30,
        call_timeout_s: 30,

        sampling: true,

        elicitation: fabric_domain::McpElicitation::Decline,
        pool: true,
    };
    let source = McpTools::new(&specialist(vec![spec], &["mcp__web__echo"]));
    let ctx = ctx(dir.path());
    source.start(&ctx).await.unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<String> = source
        .tools()
        .iter()
        .map(|t| t.spec().name.clone())
        .collect();
    assert_eq!(names, ["mcp__web__echo"]);
    let echoed = call(
        &source,
        "mcp__web__echo",
        json!({"message": "over http"}),
        &ctx,
    )
    .await;
    assert!(
        echoed
            .as_ref()
            .is_ok_and(|v| v.as_str().unwrap_or("").contains("over http")),
        "{echoed:?}"
    );
    drop(source);
    let _ = server.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_variable_that_is_not_set_is_a_clear_failure() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let spec = McpServerSpec {
        name: "web".into(),
        transport: McpTransport::Http {
            url: "http://127.0.0.1:9/mcp".into(),
            headers: Default::default(),
            bearer_token_env: Some("FABRIC_TEST_SURELY_UNSET_TOKEN".into()),
            oauth: None,
        },
        required: true,
        startup_timeout_s: 5,
        call_timeout_s: 5,

        sampling: true,

        elicitation: fabric_domain::McpElicitation::Decline,
        pool: true,
    };
    let source = McpTools::new(&specialist(vec![spec], &[]));
    let err = source
        .start(&ctx(dir.path()))
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("`FABRIC_TEST_SURELY_UNSET_TOKEN` is not set"),
        "{err}"
    );
}
