//! The architecture check: the hexagon's arrows, read from `cargo metadata`.
//!
//! - `fabric-domain` depends on no fabric crate.
//! - `fabric-core` and `fabric-config` depend only on `fabric-domain`.
//! - Adapters (every other `fabric-*` crate, e.g. `fabric-llm`, `fabric-tools`,
//!   `fabric-store-fs`) depend only on `fabric-core`, `fabric-domain` and `fabric-config`, never
//!   on each other.
//! - `fabric-test-support` fakes the outside world and depends on no fabric crate.
//! - The `fabric` binary wires everything together and may depend on all of them.
//!
//! Only dependencies that ship count (normal and build); dev-dependencies are free, so adapters
//! can test against `fabric-test-support`. It also checks that each crate root opens with a
//! `//!` crate doc, and that the core's loop, quality gate and runlog reader do not import each
//! other in a circle again (issue #28): what they share lives in leaf modules.

// Helpers outside #[test] functions panic too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use serde_json::Value;

const DOMAIN: &str = "fabric-domain";
const CORE: &str = "fabric-core";
const CONFIG: &str = "fabric-config";
const TEST_SUPPORT: &str = "fabric-test-support";
const APP: &str = "fabric";

fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn is_fabric(name: &str) -> bool {
    name == APP || name.starts_with("fabric-")
}

/// The fabric crates `package` may depend on, and the rule's wording for failures.
fn allowed(package: &str) -> Option<(&'static [&'static str], &'static str)> {
    match package {
        DOMAIN => Some((
            &[],
            "the domain is the centre and depends on no fabric crate",
        )),
        CORE => Some((&[DOMAIN], "the core depends only on fabric-domain")),
        CONFIG => Some((&[DOMAIN], "config depends only on fabric-domain")),
        TEST_SUPPORT => Some((
            &[],
            "test support fakes the outside world and depends on no fabric crate (dev-dependencies aside)",
        )),
        APP => None,
        // The database store indexes the file store's runlogs and keeps its run directories
        // (the runlog is the source of truth, ADR-038): the one adapter-on-adapter arrow.
        "fabric-store-sql" => Some((
            &[CORE, DOMAIN, CONFIG, "fabric-store-fs"],
            "the database store depends only on fabric-core, fabric-domain, fabric-config and fabric-store-fs",
        )),
        _ => Some((
            &[CORE, DOMAIN, CONFIG],
            "an adapter depends only on fabric-core, fabric-domain and fabric-config, never on another adapter",
        )),
    }
}

#[test]
fn dependencies_follow_the_hexagon() {
    let metadata = metadata();
    let packages = metadata["packages"].as_array().unwrap();
    let names: Vec<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    // Guard against the check passing vacuously because the metadata was not what we think.
    for expected in [DOMAIN, CORE, CONFIG, TEST_SUPPORT, APP] {
        assert!(
            names.contains(&expected),
            "workspace has no {expected}: {names:?}"
        );
    }

    let mut violations = Vec::new();
    for package in packages {
        let name = package["name"].as_str().unwrap();
        if !is_fabric(name) {
            continue;
        }
        let Some((allowed, rule)) = allowed(name) else {
            continue;
        };
        for dep in package["dependencies"].as_array().unwrap() {
            let dep_name = dep["name"].as_str().unwrap();
            if dep["kind"].as_str() == Some("dev") || !is_fabric(dep_name) {
                continue;
            }
            if !allowed.contains(&dep_name) {
                violations.push(format!("{name} -> {dep_name}: breaks the rule: {rule}"));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "dependency arrows that break the hexagon (see docs/ARCHITECTURE.md):\n  {}",
        violations.join("\n  ")
    );
}

#[test]
fn every_crate_root_has_a_crate_doc() {
    let metadata = metadata();
    let mut missing = Vec::new();
    for package in metadata["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap();
        for target in package["targets"].as_array().unwrap() {
            let is_root = target["kind"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| matches!(k.as_str(), Some("lib" | "rlib" | "bin" | "proc-macro")));
            if !is_root {
                continue;
            }
            let path = target["src_path"].as_str().unwrap();
            let text = std::fs::read_to_string(path).unwrap();
            if !text.trim_start().starts_with("//!") {
                missing.push(format!("{name}: {path}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "crate roots that do not start with a `//!` crate doc:\n  {}",
        missing.join("\n  ")
    );
}

/// Modules of `fabric-core` (paths under `crates/core/src`) and the core modules each must not
/// import, with the reason: the loop uses the gate and replays recorded steps; the gate and the
/// runlog's reader never reach back into the loop, and the leaves they share reach none of them.
const CORE_FORBIDDEN: &[(&str, &[&str], &str)] = &[
    (
        "gate.rs",
        &["engine", "history"],
        "the gate takes the model and fallback from the leaves `params` and `fallback`",
    ),
    (
        "history.rs",
        &["engine", "gate"],
        "the runlog's reader builds `LoopOutcome` and `RecordedStep` from the leaves `outcome` and `recorded`",
    ),
    (
        "engine",
        &["history"],
        "the loop replays `RecordedStep` from the leaf `recorded`",
    ),
];

/// The leaves those modules share (`ModelParams`, the cloud fallback, `LoopOutcome`,
/// `RecordedStep`): each imports none of the modules that share it.
const CORE_LEAVES: &[&str] = &["params.rs", "fallback.rs", "outcome.rs", "recorded.rs"];
const LEAF_FORBIDDEN: &[&str] = &["engine", "gate", "history", "execute"];

/// The Rust files of a module: the file itself, or every file under its folder.
fn module_files(path: &std::path::Path) -> Vec<std::path::PathBuf> {
    if path.is_file() {
        return vec![path.to_owned()];
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).unwrap() {
        files.extend(module_files(&entry.unwrap().path()));
    }
    files.retain(|f| f.extension().is_some_and(|e| e == "rs"));
    files
}

#[test]
fn core_loop_gate_and_history_import_no_circle() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../core/src");
    let mut violations = Vec::new();
    let leaves = CORE_LEAVES.iter().map(|leaf| {
        (
            *leaf,
            LEAF_FORBIDDEN,
            "a leaf imports none of the modules that share it",
        )
    });
    for (module, forbidden, rule) in CORE_FORBIDDEN.iter().copied().chain(leaves) {
        let files = module_files(&src.join(module));
        // Guard against passing vacuously because a module moved.
        assert!(!files.is_empty(), "no fabric-core module {module}");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            // Doc comments may name a module to link it; only code counts.
            let code = text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim_start().starts_with("//"));
            for (n, line) in code {
                for target in forbidden {
                    if line.contains(&format!("crate::{target}::"))
                        || line.contains(&format!("crate::{target};"))
                    {
                        violations.push(format!(
                            "{}:{} uses crate::{target}: {rule}",
                            file.display(),
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports that bring back the engine/gate/history circle (issue #28):\n  {}",
        violations.join("\n  ")
    );
}
