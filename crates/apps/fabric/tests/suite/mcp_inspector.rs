//! The MCP Inspector's CLI (`@modelcontextprotocol/inspector` 2.12, a client we did not write)
//! against `fabric mcp` on stdio and `fabric serve`'s `/mcp` (issue #29): tools listed, a run
//! through `run_task`, the run read back as a resource, a specialist as a prompt. Needs
//! scripts/install-test-deps.sh (`inspector/`, on the Node 22 of `conformance/`).

use serde_json::Value;
use std::path::PathBuf;

use super::fixture::Fixture;
use super::serve::hello_turns;
use super::serve_fixture::{Options, Served};

/// Node 22 and the Inspector's entry point, or `None` when the test deps are missing.
fn inspector() -> Option<(PathBuf, PathBuf)> {
    let node = fabric_test_support::conformance_deps()?.join("node_modules/.bin/node");
    let cli = fabric_test_support::inspector_deps()?
        .join("node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");
    Some((node, cli))
}

/// Runs `mcp-inspector --cli` with `args` and reads its JSON answer.
async fn inspect(node: &PathBuf, cli: &PathBuf, fx: &Fixture, args: &[&str]) -> Value {
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        tokio::process::Command::new(node)
            .arg(cli)
            .args(args)
            .current_dir(fx.dir.path())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the Inspector answered within 120 s")
    .expect("node ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "mcp-inspector --cli {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}

/// `fabric mcp` as the Inspector starts it: this fixture's config and workspace, and the
/// test's own directories for user files.
fn stdio_target(fx: &Fixture) -> Vec<String> {
    let dir = fx.dir.path();
    vec![
        format!("-e XDG_CONFIG_HOME={}", dir.join("xdg").display()),
        format!("-e XDG_STATE_HOME={}", dir.join("xdg-state").display()),
        "--".into(),
        env!("CARGO_BIN_EXE_fabric").into(),
        "--config".into(),
        fx.config.display().to_string(),
        "--workspace".into(),
        fx.workspace_root().display().to_string(),
        "mcp".into(),
    ]
}

#[cfg_attr(
    any(fabric_no_conformance, fabric_no_inspector),
    ignore = "needs the MCP Inspector and Node 22: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_29_the_inspector_cli_lists_runs_reads_and_prompts_over_stdio() {
    let Some((node, cli)) = inspector() else {
        return;
    };
    let fx = Fixture::new(hello_turns()).await;
    let target = stdio_target(&fx);
    let with = |method: &[&str]| {
        let mut args: Vec<String> = vec!["--cli".into()];
        args.extend(method.iter().map(|s| (*s).to_owned()));
        // The Inspector reads `-e` as its own flag and value: split them.
        for t in &target {
            match t.strip_prefix("-e ") {
                Some(pair) => args.extend(["-e".to_owned(), pair.to_owned()]),
                None => args.push(t.clone()),
            }
        }
        args
    };
    let call = |method: &[&str]| {
        let args = with(method);
        let (node, cli, fx) = (&node, &cli, &fx);
        async move {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            inspect(node, cli, fx, &refs).await
        }
    };

    let tools = call(&["--method", "tools/list"]).await;
    let run_task = tools["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["name"] == "run_task")
        .cloned()
        .unwrap_or_else(|| panic!("no run_task: {tools}"));
    assert!(run_task["outputSchema"].is_object(), "{run_task}");

    let ran = call(&[
        "--method",
        "tools/call",
        "--tool-name",
        "run_task",
        "--tool-arg",
        "prompt=Create hello.txt",
    ])
    .await;
    let result = &ran["structuredContent"];
    assert_eq!(result["summary"], "Created hello.txt", "{ran}");
    assert_eq!(result["_meta"]["status"], "completed", "{ran}");
    let id = result["_meta"]["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    // Another process reads the run back from the store.
    let uri = format!("fabric://runs/{id}");
    let read = call(&["--method", "resources/read", "--uri", &uri]).await;
    let summary: Value = serde_json::from_str(read["contents"][0]["text"].as_str().unwrap_or("{}"))
        .unwrap_or_default();
    assert_eq!(summary["status"], "completed", "{read}");
    let file = call(&[
        "--method",
        "resources/read",
        "--uri",
        &format!("{uri}/files/hello.txt"),
    ])
    .await;
    assert_eq!(file["contents"][0]["text"], "Hello World", "{file}");

    let prompt = call(&[
        "--method",
        "prompts/get",
        "--prompt-name",
        "engineering",
        "--prompt-args",
        "task=Fix the build",
    ])
    .await;
    let text = prompt["messages"].to_string();
    assert!(text.contains("Fix the build"), "{prompt}");
}

#[cfg_attr(
    any(fabric_no_conformance, fabric_no_inspector),
    ignore = "needs the MCP Inspector and Node 22: run scripts/install-test-deps.sh"
)]
#[tokio::test]
async fn issue_29_the_inspector_cli_runs_a_task_over_http_with_the_token() {
    let Some((node, cli)) = inspector() else {
        return;
    };
    let served = Served::with(
        fabric_test_support::Scenario::new(hello_turns()),
        Options {
            auth: true,
            ..Options::default()
        },
    )
    .await;
    let token = served.token.unwrap_or_default();
    let url = served.url("/mcp");
    let header = format!("Authorization: Bearer {token}");
    let ran = inspect(
        &node,
        &cli,
        &served.fx,
        &[
            "--cli",
            &url,
            "--header",
            &header,
            "--method",
            "tools/call",
            "--tool-name",
            "run_task",
            "--tool-arg",
            "prompt=Create hello.txt",
        ],
    )
    .await;
    assert_eq!(
        ran["structuredContent"]["_meta"]["status"], "completed",
        "{ran}"
    );
}
