// Included by the build scripts of the crates with tests that only mean something for a root
// fabric (`include!`): marks them ignored, with the reason, when the tests are built by
// another user (issue #27: they returned as a quiet pass). Plain std: the effective uid from
// `/proc/self/status`.

/// Emits `fabric_not_root` when the build does not run as root.
fn emit_not_root_cfg() {
    println!("cargo::rustc-check-cfg=cfg(fabric_not_root)");
    // Included, so watched by name (see test-deps-probe.rs).
    println!(
        "cargo::rerun-if-changed={}",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../testing/root-probe.rs")
    );
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false);
    if !root {
        println!("cargo::rustc-cfg=fabric_not_root");
    }
}
