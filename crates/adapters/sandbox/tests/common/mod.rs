//! What the sandbox's integration tests share: a tool context, the sandbox of a mode (or a
//! loud skip where the host has no namespaces), and running `sh -c` through it.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr
)]

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

use fabric_domain::RunId;
use fabric_engine::{ProcessSandbox, ToolContext};
use fabric_sandbox::{Limits, Mode, OsSandbox, Policy, probe};
use tokio_util::sync::CancellationToken;

pub(crate) fn ctx(workspace: &Path, network: bool) -> ToolContext {
    ToolContext {
        approved: false,
        sampler: None,
        live: None,
        run_id: RunId::parse("ns-test").unwrap(),
        workspace: workspace.to_path_buf(),
        network_allowed: network,
        cancel: CancellationToken::new(),
        lineage: Default::default(),
    }
}

/// The policy of `mode` with namespaces, or `None` (after saying why) where the host has
/// none; under `FABRIC_REQUIRE_TEST_DEPS` (CI) their absence fails the test instead.
pub(crate) fn policy(mode: Mode, limits: Limits) -> Option<Policy> {
    let policy = Policy::decide(mode, probe(), limits, vec![]).unwrap();
    if !policy.namespaces {
        let why = format!("{:?}", probe().namespaces);
        assert!(
            std::env::var_os("FABRIC_REQUIRE_TEST_DEPS").is_none(),
            "namespaces are required here (FABRIC_REQUIRE_TEST_DEPS) but unavailable: {why}"
        );
        eprintln!("SKIP namespaces test: this host gives commands no namespaces: {why}");
        return None;
    }
    Some(policy)
}

/// The sandbox of `mode` with namespaces and `.git`/`.fabric` protected, or `None`.
pub(crate) fn sandbox(mode: Mode) -> Option<OsSandbox> {
    let policy = policy(mode, Limits::default())?;
    Some(OsSandbox::new(policy, vec![".git".to_owned(), ".fabric".to_owned()]).unwrap())
}

/// Runs `sh -c script` in `workspace` inside `sandbox`, the run allowing the network or not.
pub(crate) fn sh_net(sandbox: &OsSandbox, workspace: &Path, script: &str, network: bool) -> Output {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(script)
        .current_dir(workspace)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .process_group(0);
    let guard = sandbox.prepare(&mut cmd, &ctx(workspace, network)).unwrap();
    let out = cmd.output().unwrap();
    drop(guard);
    out
}

/// [`sh_net`] without the network.
pub(crate) fn sh(sandbox: &OsSandbox, workspace: &Path, script: &str) -> Output {
    sh_net(sandbox, workspace, script, false)
}

pub(crate) fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Whether, within `limit`, no process on the host holds `marker` on its command line (the
/// positive signal that a window in which such a process could still act has passed).
#[allow(dead_code)] // Not every test binary that includes this module waits for processes.
pub(crate) fn gone_within(marker: &str, limit: std::time::Duration) -> bool {
    let holds_marker = |entry: std::fs::DirEntry| {
        std::fs::read(entry.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
    };
    let start = std::time::Instant::now();
    loop {
        let present = std::fs::read_dir("/proc")
            .map(|dir| dir.flatten().any(holds_marker))
            .unwrap_or(false);
        if !present {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
