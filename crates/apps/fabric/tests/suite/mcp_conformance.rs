//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, server scenarios)
//! against `fabric serve`'s `/mcp` (issue #29), on the Node 22 that scripts/install-test-deps.sh
//! installs beside it. `tests/mcp/conformance-expected-failures.yaml` names each scenario
//! expected to fail, with the reason; the suite itself compares (its `--expected-failures`
//! baseline): the test fails when a scenario outside the file fails, and also when one in
//! the file passes, so the file stays true.

use std::path::Path;
use std::time::Duration;

use fabric_test_support::{Scenario, TurnBy};

use super::serve::hello_turns;
use super::serve_fixture::{Options, Served};

#[cfg_attr(
    fabric_no_conformance,
    ignore = "needs the MCP conformance suite and Node 22: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_29_the_official_conformance_suite_fails_only_where_expected() {
    let Some(dir) = fabric_test_support::conformance_deps() else {
        return;
    };
    server_suite(&dir, &dir, &[], "conformance-expected-failures.yaml").await;
}

#[cfg_attr(
    any(fabric_no_conformance, fabric_no_conformance_next),
    ignore = "needs the newest MCP conformance suite and Node 22: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_29_the_newest_conformance_suite_at_2025_11_25_fails_only_where_expected() {
    let (Some(node), Some(next)) = (
        fabric_test_support::conformance_deps(),
        fabric_test_support::conformance_next_deps(),
    ) else {
        return;
    };
    let args = ["--requirements", "2025-11-25"];
    server_suite(&node, &next, &args, "conformance-next-2025-11-25.yaml").await;
}

#[cfg_attr(
    any(fabric_no_conformance, fabric_no_conformance_next),
    ignore = "needs the newest MCP conformance suite and Node 22: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_29_the_newest_conformance_suite_at_2026_07_28_fails_only_where_expected() {
    let (Some(node), Some(next)) = (
        fabric_test_support::conformance_deps(),
        fabric_test_support::conformance_next_deps(),
    ) else {
        return;
    };
    let args = ["--requirements", "2026-07-28"];
    server_suite(&node, &next, &args, "conformance-next-2026-07-28.yaml").await;
}

/// Runs the server scenarios of the suite in `suite_dir` (with `args`) against a fresh
/// `fabric serve`, on the Node 22 in `node_dir`, and asserts the suite found exactly the
/// failures `baseline` (under `tests/mcp/`) names.
async fn server_suite(node_dir: &Path, suite_dir: &Path, args: &[&str], baseline: &str) {
    // Any number of runs, each the same conversation (a scenario may start one).
    let scenario = Scenario {
        turn_by: TurnBy::Conversation,
        ..Scenario::new(hello_turns())
    };
    let served = Served::with(scenario, Options::default()).await;
    let baseline = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp")
        .join(baseline);
    let suite = suite_dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let output = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::process::Command::new(node_dir.join("node_modules/.bin/node"))
            .arg(suite)
            .args(["server", "--url", &served.url("/mcp")])
            .args(args)
            .arg("--expected-failures")
            .arg(&baseline)
            .current_dir(served.fx.dir.path())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the conformance suite finished within 300 s")
    .expect("node ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary = stdout
        .find("=== SUMMARY ===")
        .map_or(stdout.as_ref(), |at| &stdout[at..]);
    assert!(
        output.status.success(),
        "the conformance suite disagrees with {}:\n{summary}\n{}",
        baseline.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    // The suite ran its scenarios (not an empty run that compares nothing).
    assert!(summary.contains("Baseline check passed"), "{summary}");
}

#[cfg_attr(
    fabric_no_conformance,
    ignore = "needs the MCP conformance suite and Node 22: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_29_the_fabric_as_a_client_fails_only_where_expected() {
    let Some(dir) = fabric_test_support::conformance_deps() else {
        return;
    };
    // All of the pinned suite's client scenarios (26 in 0.1.16), not an empty list.
    let stdout = client_suite(&dir, false).await;
    assert_ran(&stdout, 26);
}

#[cfg_attr(
    any(fabric_no_conformance, fabric_no_conformance_next),
    ignore = "needs the newest MCP conformance suite and Node 22: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_29_the_fabric_as_a_client_of_the_newest_suite_fails_only_where_expected() {
    let (Some(dir), Some(_)) = (
        fabric_test_support::conformance_deps(),
        fabric_test_support::conformance_next_deps(),
    ) else {
        return;
    };
    // 48 client scenarios in 0.2.0-alpha.12, the 2026-07-28 ones among them.
    let stdout = client_suite(&dir, true).await;
    assert_ran(&stdout, 48);
    assert!(
        stdout.contains("as expected: sep-2322-client-request-state"),
        "{stdout}"
    );
}

/// Runs `scripts/mcp-conformance.sh client` (with `NEXT=1` for the newest suite) with the
/// fabric built for these tests, asserts it agreed with its baseline, and gives its report.
async fn client_suite(dir: &Path, next: bool) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let deps = dir.parent().expect("the test deps directory");
    let mut command = tokio::process::Command::new("bash");
    command
        .arg(root.join("scripts/mcp-conformance.sh"))
        .args(["client", env!("CARGO_BIN_EXE_fabric")])
        .env("FABRIC_TEST_DEPS", deps)
        .env_remove("FABRIC_CONFIG_PATH")
        .env_remove("FABRIC_WORKSPACE")
        .env_remove("NEXT")
        .current_dir(&root)
        .kill_on_drop(true);
    if next {
        command.env("NEXT", "1");
    }
    let output = tokio::time::timeout(Duration::from_secs(600), command.output())
        .await
        .expect("the client scenarios finished within 600 s")
        .expect("bash ran");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the fabric as a client disagrees with the baseline's `client:` list:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// At least `least` scenarios ran, the step-up among them.
fn assert_ran(stdout: &str, least: usize) {
    let ran = stdout
        .lines()
        .filter(|l| l.starts_with("as expected: "))
        .count();
    assert!(ran >= least, "only {ran} scenarios ran:\n{stdout}");
    assert!(
        stdout.contains("as expected: auth/scope-step-up"),
        "{stdout}"
    );
}
