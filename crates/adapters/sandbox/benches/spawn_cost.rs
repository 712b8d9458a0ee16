//! What the sandbox costs per command (issue #15): `true` spawned and waited for, N times,
//! with no sandbox, with Landlock + seccomp only, with the namespaces too, and (a root
//! fabric) with the idmapped mounts and the switch to `nobody` as well.
//!
//! `cargo bench -p fabric-sandbox --bench spawn_cost` (env `FABRIC_BENCH_SPAWNS`, default
//! 300). Prints the mean wall time per command in each setting.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::process::{Command, Stdio};
use std::time::Instant;

use fabric_domain::RunId;
use fabric_engine::{ProcessSandbox, ToolContext};
use fabric_sandbox::{Limits, Mode, OsSandbox, Policy, probe};
use tokio_util::sync::CancellationToken;

fn per_command(sandbox: Option<&OsSandbox>, ws: &std::path::Path, n: u32) -> f64 {
    let ctx = ToolContext {
        approved: false,
        sampler: None,
        live: None,
        run_id: RunId::parse("bench").unwrap(),
        workspace: ws.to_path_buf(),
        network_allowed: false,
        cancel: CancellationToken::new(),
        lineage: Default::default(),
    };
    let start = Instant::now();
    for _ in 0..n {
        let mut cmd = Command::new("/bin/true");
        cmd.current_dir(ws)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let guard = sandbox.map(|s| s.prepare(&mut cmd, &ctx).unwrap());
        assert!(cmd.status().unwrap().success());
        drop(guard);
    }
    start.elapsed().as_secs_f64() * 1000.0 / f64::from(n)
}

fn main() {
    let n: u32 = std::env::var("FABRIC_BENCH_SPAWNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let ws = tempfile::tempdir().unwrap();
    let protected = vec![".git".to_owned()];
    std::fs::create_dir(ws.path().join(".git")).unwrap();
    let with_ns = Policy::decide(Mode::Strict, probe(), Limits::default(), vec![]).unwrap();
    let mut without_ns = with_ns.clone();
    without_ns.namespaces = false;
    let mut as_root = with_ns.clone();
    as_root.unprivileged = false;
    let plain = OsSandbox::new(without_ns, protected.clone()).unwrap();
    let ns_root = OsSandbox::new(as_root, protected.clone()).unwrap();
    let full = OsSandbox::new(with_ns.clone(), protected).unwrap();
    // Warm up the page cache and the allocator.
    per_command(Some(&full), ws.path(), 20);
    let none = per_command(None, ws.path(), n);
    let landlock = per_command(Some(&plain), ws.path(), n);
    let ns_only = per_command(Some(&ns_root), ws.path(), n);
    let ns = per_command(Some(&full), ws.path(), n);
    println!("spawn_cost: {n} runs of /bin/true each, mean wall time per command");
    println!("  no sandbox:                  {none:.3} ms");
    println!("  Landlock + seccomp + limits: {landlock:.3} ms");
    if with_ns.namespaces {
        println!(
            "  + namespaces:                {ns_only:.3} ms  (namespaces add {:.3} ms)",
            ns_only - landlock
        );
        if with_ns.unprivileged {
            println!(
                "  + as nobody, idmapped:       {ns:.3} ms  (idmapped mounts and the switch add {:.3} ms)",
                ns - ns_only
            );
        }
    } else {
        println!("  namespaces unavailable here: {:?}", probe().namespaces);
    }
}
