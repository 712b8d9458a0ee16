//! The architecture check: the hexagon's arrows, read from `cargo metadata`.
//!
//! - `fabric-domain` depends on no fabric crate.
//! - `fabric-engine` (the loop, the task force, the ports) and `fabric-config` depend only on
//!   `fabric-domain`; `fabric-core` (the run service) only on `fabric-engine` and
//!   `fabric-domain`: the engine never knows how runs are submitted or shown (issue #41).
//! - Adapters (every other `fabric-*` crate, e.g. `fabric-llm`, `fabric-tools`,
//!   `fabric-store-fs`) depend only on `fabric-core`, `fabric-engine`, `fabric-domain` and
//!   `fabric-config`, never on each other.
//! - `fabric-scripted-llm` fakes the outside world (a model server) and depends on no fabric
//!   crate; `fabric-test-support` depends only on it.
//! - `fabric-fakes` fakes the engine's and the service's ports, so it depends only on
//!   `fabric-core`, `fabric-engine` and `fabric-domain`.
//! - No crate ships test code: `fabric-test-support` and `fabric-fakes` are dev-dependencies
//!   only (issue #41; the binary ships `fabric-scripted-llm` alone as `fabric mock-llm`).
//! - The `fabric` binary wires everything together and may depend on all of them.
//!
//! Only dependencies that ship count (normal and build); dev-dependencies are free, so adapters
//! can test against `fabric-test-support`. It also checks that each crate root opens with a
//! `//!` crate doc, and that the core's loop, quality gate and runlog reader do not import each
//! other in a circle again (issue #28): what they share lives in leaf modules; that preparing
//! a run stays in the core, the binary only wiring its ports (issue #28, step 2); and that
//! library source keeps at most 20 `Result<_, String>` (issue #28: errors are typed at the ports).

// Helpers outside #[test] functions panic too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use serde_json::Value;

const DOMAIN: &str = "fabric-domain";
const ENGINE: &str = "fabric-engine";
const CORE: &str = "fabric-core";
const CONFIG: &str = "fabric-config";
const TEST_SUPPORT: &str = "fabric-test-support";
const SCRIPTED_LLM: &str = "fabric-scripted-llm";
const FAKES: &str = "fabric-fakes";
/// The crates that are test code: taken as dev-dependencies only.
const TEST_ONLY: [&str; 2] = [TEST_SUPPORT, FAKES];
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

/// Every dependency that ships (normal and build; dev-dependencies are free), as
/// (package, dependency).
fn shipped_edges(metadata: &Value) -> Vec<(&str, &str)> {
    let mut edges = Vec::new();
    for package in metadata["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap();
        for dep in package["dependencies"].as_array().unwrap() {
            if dep["kind"].as_str() != Some("dev") {
                edges.push((name, dep["name"].as_str().unwrap()));
            }
        }
    }
    edges
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
        ENGINE => Some((&[DOMAIN], "the engine depends only on fabric-domain")),
        CORE => Some((
            &[ENGINE, DOMAIN],
            "the run service depends only on fabric-engine and fabric-domain",
        )),
        CONFIG => Some((&[DOMAIN], "config depends only on fabric-domain")),
        TEST_SUPPORT => Some((
            &[SCRIPTED_LLM],
            "test support depends on no fabric crate but the scripted model server (dev-dependencies aside)",
        )),
        SCRIPTED_LLM => Some((
            &[],
            "the scripted model server fakes the outside world and depends on no fabric crate",
        )),
        FAKES => Some((
            &[CORE, ENGINE, DOMAIN],
            "the fakes fake the ports and depend only on fabric-core, fabric-engine and fabric-domain",
        )),
        APP => None,
        // The database store indexes the file store's runlogs and keeps its run directories
        // (the runlog is the source of truth, ADR-038): the one adapter-on-adapter arrow.
        "fabric-store-sql" => Some((
            &[CORE, ENGINE, DOMAIN, CONFIG, "fabric-store-fs"],
            "the database store depends only on fabric-core, fabric-engine, fabric-domain, fabric-config and fabric-store-fs",
        )),
        _ => Some((
            &[CORE, ENGINE, DOMAIN, CONFIG],
            "an adapter depends only on fabric-core, fabric-engine, fabric-domain and fabric-config, never on another adapter",
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
    for expected in [
        DOMAIN,
        ENGINE,
        CORE,
        CONFIG,
        TEST_SUPPORT,
        SCRIPTED_LLM,
        FAKES,
        APP,
    ] {
        assert!(
            names.contains(&expected),
            "workspace has no {expected}: {names:?}"
        );
    }

    let mut violations = Vec::new();
    for (name, dep_name) in shipped_edges(&metadata) {
        if !is_fabric(name) || !is_fabric(dep_name) {
            continue;
        }
        let Some((allowed, rule)) = allowed(name) else {
            continue;
        };
        if !allowed.contains(&dep_name) {
            violations.push(format!("{name} -> {dep_name}: breaks the rule: {rule}"));
        }
    }
    assert!(
        violations.is_empty(),
        "dependency arrows that break the hexagon (see docs/ARCHITECTURE.md):\n  {}",
        violations.join("\n  ")
    );
}

/// Issue #41: the release binary depended on `fabric-test-support` (test deps, PostgreSQL,
/// llama.cpp helpers) to ship `fabric mock-llm`. No crate ships test code now: the test crates
/// are dev-dependencies only, everywhere.
#[test]
fn issue_41_test_code_ships_in_no_crate() {
    let metadata = metadata();
    let shipped: Vec<String> = shipped_edges(&metadata)
        .into_iter()
        .filter(|(_, dep)| TEST_ONLY.contains(dep))
        .map(|(name, dep)| format!("{name} -> {dep}"))
        .collect();
    assert!(
        shipped.is_empty(),
        "test code taken as a shipped dependency (make it a dev-dependency; `fabric mock-llm` needs only fabric-scripted-llm):\n  {}",
        shipped.join("\n  ")
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

/// Module circles untangled by a leaf module (issue #28) must not come back. Per group, the
/// modules (files under a crate directory) and which of them each one names (`crate::m`,
/// `super::m`, or `m` in a `use crate::{…}` list) must form no cycle.
const UNTANGLED: &[(&str, &[&str])] = &[
    // `policy` holds the container settings and the `PATH`; `shell` and `container` read it.
    ("adapters/tools/src", &["shell", "container", "policy"]),
    // `filters` (search's conditions) and `ivf` (vector bytes, trained lists) are the leaves.
    (
        "adapters/store-sql/src",
        &["search", "vectors", "vindex", "vlists", "filters", "ivf"],
    ),
    // The binary's preparation adapters (`app`) know nothing of the wiring that builds them
    // (issue #28, step 2): `wiring` builds the store and the service over `app`'s ports.
    // (The model servers left the binary for `fabric_llm::ModelServers`, issue #41.)
    ("apps/fabric/src", &["app", "wiring", "offline", "daily"]),
    // `follow` is what `run` and `resume` share.
    ("apps/fabric/src/commands", &["run", "resume", "follow"]),
    // The loop uses the gate and replays recorded steps, one way: what they share is in the
    // leaves `params`, `fallback`, `outcome` and `recorded` (issue #28, step 1).
    (
        "engine/src",
        &[
            "engine", "gate", "history", "params", "fallback", "outcome", "recorded",
        ],
    ),
    // The run service's modules (issue #41): search and the views sit on the service, the
    // service on the live registry and the metrics, none of them the other way.
    (
        "core/src",
        &["service", "live", "metrics", "search", "views"],
    ),
];

/// The code of module `name` under `dir` (`name.rs`, or every file under `name/`), without
/// comment lines: a doc may name a module to link it.
fn module_text(dir: &std::path::Path, name: &str) -> String {
    module_source(dir, name)
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn module_source(dir: &std::path::Path, name: &str) -> String {
    let file = dir.join(format!("{name}.rs"));
    if file.is_file() {
        return std::fs::read_to_string(file).unwrap();
    }
    let mut text = String::new();
    let mut stack = vec![dir.join(name)];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                text.push_str(&std::fs::read_to_string(path).unwrap());
            }
        }
    }
    text
}

/// Whether `text` names the sibling module `other`.
fn names_module(text: &str, other: &str) -> bool {
    let word = |s: &str| {
        s.chars()
            .next()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
    };
    for prefix in ["crate::", "super::"] {
        let needle = format!("{prefix}{other}");
        if text
            .match_indices(&needle)
            .any(|(at, _)| word(&text[at + needle.len()..]))
        {
            return true;
        }
    }
    // `use crate::{SqlStore, filters, vindex};`
    text.match_indices("use crate::{").any(|(at, found)| {
        let list = &text[at + found.len()..];
        let list = &list[..list.find('}').unwrap_or(list.len())];
        list.split(',').any(|item| {
            let item = item.trim();
            item == other
                || item.starts_with(&format!("{other}::"))
                || item == format!("{other}::*")
        })
    })
}

#[test]
fn issue_28_untangled_module_circles_stay_untangled() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (dir, modules) in UNTANGLED {
        let dir = crates.join(dir);
        let texts: Vec<String> = modules.iter().map(|m| module_text(&dir, m)).collect();
        let edges: Vec<Vec<usize>> = texts
            .iter()
            .enumerate()
            .map(|(from, text)| {
                (0..modules.len())
                    .filter(|&to| to != from && names_module(text, modules[to]))
                    .collect()
            })
            .collect();
        // Not vacuous: the leaves are read by someone.
        assert!(
            edges.iter().any(|e| !e.is_empty()),
            "no module of {} names another: the check reads nothing",
            dir.display()
        );
        // Depth-first search for a cycle, reported as its path.
        fn visit(
            node: usize,
            edges: &[Vec<usize>],
            path: &mut Vec<usize>,
            done: &mut [bool],
        ) -> Option<Vec<usize>> {
            if let Some(at) = path.iter().position(|&n| n == node) {
                let mut cycle = path[at..].to_vec();
                cycle.push(node);
                return Some(cycle);
            }
            if done[node] {
                return None;
            }
            path.push(node);
            for &next in &edges[node] {
                if let Some(cycle) = visit(next, edges, path, done) {
                    return Some(cycle);
                }
            }
            path.pop();
            done[node] = true;
            None
        }
        let mut done = vec![false; modules.len()];
        for start in 0..modules.len() {
            if let Some(cycle) = visit(start, &edges, &mut Vec::new(), &mut done) {
                let names: Vec<&str> = cycle.iter().map(|&i| modules[i]).collect();
                panic!(
                    "a module circle came back in {}: {} (move what they share to a leaf module)",
                    dir.display(),
                    names.join(" -> ")
                );
            }
        }
    }
}

/// The lines of `text`, up to its `#[cfg(test)]` module, naming a `Result` whose error type
/// is `String`: the brackets of the `Ok` type matched, so `Result<HashMap<String, String>, E>`
/// is not one and `Result<Vec<Option<u8>>, String>` is.
fn string_error_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .take_while(|line| line.trim() != "#[cfg(test)]")
        .enumerate()
        .filter(|(_, line)| {
            line.match_indices("Result<")
                .any(|(at, _)| error_type(&line[at + "Result<".len()..]) == Some("String"))
        })
}

/// The second type argument of the generic list that `rest` opens (what follows `Result<`),
/// when it closes on the same line.
fn error_type(rest: &str) -> Option<&str> {
    let (mut depth, mut comma) = (0usize, None);
    for (i, c) in rest.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            '>' if depth == 0 => return comma.map(|at: usize| rest[at + 1..i].trim()),
            '>' => depth -= 1,
            ',' if depth == 0 => comma = Some(i),
            _ => {}
        }
    }
    None
}

/// Every `.rs` file under `dir`, but those under a `tests` directory.
fn library_sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n != "tests" && n != "target")
            {
                library_sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// No `Result<_, String>` in library source (issue #28, step 5: errors are typed at the
/// ports, each enum saying what the caller must do). Issue #41 counts them properly (the
/// type's own brackets matched, test modules, `tests/` and the test helpers' crate left out)
/// and brought them from 13 to none: each function returns its crate's error (ADR-097).
#[test]
fn issue_28_errors_at_the_ports_stay_typed() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    library_sources(&crates, &mut files);
    files.sort();
    // The test helpers' crate and test files are not library code.
    files.retain(|f| !f.starts_with(crates.join("testing")) && !f.ends_with("tests.rs"));
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (line, code) in string_error_lines(&text) {
            let shown = file.strip_prefix(&crates).unwrap_or(file).display();
            found.push(format!("{shown}:{}: {}", line + 1, code.trim()));
        }
    }
    assert!(
        files.len() > 100,
        "the check reads nothing: {}",
        crates.display()
    );
    assert!(
        found.is_empty(),
        "{} lines of library source return `Result<_, String>`: give the function its crate's error enum, one that says what the caller must do (see `fabric_core::Remedy`), keeping the message text:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The code of every `.rs` file under `dir`, without comment lines.
fn tree_text(dir: &std::path::Path) -> String {
    let name = dir.file_name().unwrap().to_str().unwrap().to_owned();
    module_text(dir.parent().unwrap(), &name)
}

/// Preparing a run is the core's (issue #28, step 2): the policy (routing, complexity, the
/// choice of a model, the daily fallback, budgets) is decided in `service::prepare` over
/// ports, and neither the binary calls what only that policy should call, nor does the
/// core's preparation name the configuration or an adapter.
#[test]
fn issue_28_preparing_a_run_stays_in_the_core() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let prepare = tree_text(&crates.join("core/src/service/prepare"));
    assert!(
        prepare.contains("pub struct Preparation"),
        "the check reads nothing: no `Preparation` in core/src/service/prepare"
    );
    for outside in [
        "fabric_config",
        "fabric_llm",
        "fabric_tools",
        "fabric_mcp",
        "fabric_sandbox",
    ] {
        assert!(
            !prepare.contains(outside),
            "core's preparation names `{outside}`: reach the outside through a port in engine/src/ports/prepare.rs"
        );
    }
    let binary = tree_text(&crates.join("apps/fabric/src"));
    for policy in [
        "recruit::route",
        "complexity::score",
        "RunBudget::new",
        "impl Preparer for AppPreparer",
        "fn daily_choice",
    ] {
        assert!(
            !binary.contains(policy),
            "the binary calls `{policy}`: preparation policy belongs in fabric_core::service::prepare"
        );
    }
}

/// The public functions of `text` (code, not comments) whose names say they run a task.
fn task_entrances(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.strip_prefix("pub fn ")
                .or_else(|| l.strip_prefix("pub async fn "))
        })
        .filter_map(|rest| rest.split(['<', '(']).next())
        .filter(|name| name.contains("_task"))
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

/// One entrance runs a task (issue #28, step 3): the task-force path, a single specialist
/// being a task force of one (`TaskForce::single`), with no `execute_task`-style twin beside
/// it; and one run view (step 4), `fabric_core::views::RunView`, which the HTTP API serves
/// and the MCP server's `RunRecord` takes its fields from, rather than each building its own.
#[test]
fn issue_28_one_entrance_runs_a_task_and_one_view_shows_a_run() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let execute = tree_text(&crates.join("engine/src/execute"));
    assert_eq!(
        task_entrances(&execute),
        ["execute_task_force", "resume_task_force", "run_task_force"],
        "a task is run through the task-force path; make a single specialist with `TaskForce::single`, not a second entry function"
    );
    assert!(
        !execute.contains("pub struct Task "),
        "a task for one specialist is a `TaskForce` of one, not a type of its own"
    );
    for front in ["adapters/api-http/src", "adapters/mcp/src"] {
        let text = tree_text(&crates.join(front));
        for view in ["struct RunView", "struct RunRecord"] {
            assert!(
                !text.contains(view),
                "{front} defines `{view}`: a run's view is projected from its `RunSummary` once, in fabric_core::views"
            );
        }
    }
}

/// The most lines a function of the core or the binary may span (issue #41: orchestration
/// reads as named moves, as the engine does).
const MAX_FUNCTION_LINES: usize = 100;

/// The functions longer than that when the gauge came in, each to be split (issue #41);
/// the list only shrinks: a function that fits is taken off, and no other may join it.
const LONG_FUNCTIONS_LEFT: &[&str] = &[];

/// The functions in `text` (up to its `#[cfg(test)]` module) longer than the limit, as
/// `name` and line count: from the `fn` line to the closing brace at its indentation, as
/// rustfmt lays them out.
fn long_functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .iter()
        .position(|l| l.trim() == "#[cfg(test)]")
        .unwrap_or(lines.len());
    let mut found = Vec::new();
    for (i, line) in lines[..end].iter().enumerate() {
        let code = line.trim_start();
        let indent = line.len() - code.len();
        let Some(name) = function_name(code) else {
            continue;
        };
        if line.trim_end().ends_with(';') {
            continue;
        }
        let close = format!("{}}}", " ".repeat(indent));
        if let Some(last) = lines[i + 1..end].iter().position(|l| *l == close) {
            let span = last + 2;
            if span > MAX_FUNCTION_LINES {
                found.push((name, span));
            }
        }
    }
    found
}

/// The name of the function `code` (a trimmed line) declares, if it declares one.
fn function_name(code: &str) -> Option<String> {
    let mut rest = code;
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("async ").unwrap_or(rest);
    let name = rest.strip_prefix("fn ")?;
    let end = name.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(name[..end].to_owned())
}

#[test]
fn issue_41_functions_of_the_core_and_the_binary_stay_readable() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    library_sources(&crates.join("core/src"), &mut files);
    library_sources(&crates.join("engine/src"), &mut files);
    library_sources(&crates.join("apps/fabric/src"), &mut files);
    files.sort();
    assert!(
        files.len() > 50,
        "the check reads nothing: {}",
        crates.display()
    );
    let mut long = Vec::new();
    for file in &files {
        let shown = file
            .strip_prefix(&crates)
            .unwrap_or(file)
            .display()
            .to_string();
        if shown.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (name, span) in long_functions(&text) {
            long.push((format!("{shown}: {name}"), span));
        }
    }
    let new: Vec<String> = long
        .iter()
        .filter(|(f, _)| !LONG_FUNCTIONS_LEFT.contains(&f.as_str()))
        .map(|(f, span)| format!("{f} ({span} lines)"))
        .collect();
    assert!(
        new.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines in the core or the binary: split each into named moves (issue #41):\n{}",
        new.join("\n")
    );
    let fitted: Vec<&&str> = LONG_FUNCTIONS_LEFT
        .iter()
        .filter(|f| !long.iter().any(|(l, _)| l == **f))
        .collect();
    assert!(
        fitted.is_empty(),
        "these now fit in {MAX_FUNCTION_LINES} lines: take them off LONG_FUNCTIONS_LEFT: {fitted:?}"
    );
}

#[test]
fn issue_41_the_long_function_gauge_sees_a_long_function() {
    let body = "    let x = 1;\n".repeat(MAX_FUNCTION_LINES);
    let text = format!("pub(crate) async fn long(a: u32) -> u32 {{\n{body}}}\n\nfn short() {{}}\n");
    assert_eq!(
        long_functions(&text),
        [("long".to_owned(), MAX_FUNCTION_LINES + 2)]
    );
}

#[test]
fn issue_41_the_string_error_gauge_reads_types_whole() {
    let count = |line: &str| string_error_lines(line).count();
    assert_eq!(count("fn a() -> Result<(), String> {"), 1);
    assert_eq!(count("fn a() -> Result<Vec<Option<u8>>, String> {"), 1);
    assert_eq!(
        count("fn a() -> Result<HashMap<String, String>, Error> {"),
        0
    );
    assert_eq!(count("fn a() -> Result<(u8, String), Error> {"), 0);
    assert_eq!(count("fn a() -> Result<String, Error> {"), 0);
    assert_eq!(count("x\n#[cfg(test)]\nfn a() -> Result<(), String> {"), 0);
}

/// The runlog's edge (issue #41): the only modules where an event's payload is JSON. The
/// kinds and their structs are one table in `event.rs`; `runlog/wire.rs` writes an event as
/// its line and reads a line back (ADR-096).
const EVENT_EDGE: &[&str] = &["domain/src/event.rs", "domain/src/runlog/wire.rs"];

/// Ways of reading an event's payload as JSON instead of matching its struct.
const PAYLOAD_BY_KEY: &[&str] = &["payload_as", ".payload.get(", "payload[\""];

/// The lines of `text`, up to its `#[cfg(test)]` module, that read a payload by key.
fn payload_reads(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .take_while(|line| line.trim() != "#[cfg(test)]")
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .filter(|(_, line)| PAYLOAD_BY_KEY.iter().any(|p| line.contains(p)))
}

/// Events are typed end to end (issue #41): library and binary source outside the runlog's
/// edge matches `EventPayload` and never reads a payload by key.
#[test]
fn issue_41_event_payloads_are_read_as_structs_outside_the_runlog_edge() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    library_sources(&crates, &mut files);
    files.sort();
    files.retain(|f| !f.starts_with(crates.join("testing")) && !f.ends_with("tests.rs"));
    assert!(
        files.len() > 100,
        "the check reads nothing: {}",
        crates.display()
    );
    let mut found = Vec::new();
    for file in &files {
        let shown = file
            .strip_prefix(&crates)
            .unwrap_or(file)
            .display()
            .to_string();
        if EVENT_EDGE.contains(&shown.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (line, code) in payload_reads(&text) {
            found.push(format!("{shown}:{}: {}", line + 1, code.trim()));
        }
    }
    assert!(
        found.is_empty(),
        "{} lines read an event's payload as JSON outside the runlog's edge ({EVENT_EDGE:?}): match `fabric_domain::EventPayload` instead (a finish payload or a model's answer is not an event's: name it so):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn issue_41_the_payload_gauge_sees_reads_by_key() {
    let count = |text: &str| payload_reads(text).count();
    assert_eq!(count("let p = event.payload_as::<RunStart>()?;"), 1);
    assert_eq!(count("e.payload.get(\"tool\")"), 1);
    assert_eq!(count("e.payload[\"tool\"]"), 1);
    assert_eq!(count("match &event.payload {"), 0);
    assert_eq!(count("// payload_as is gone"), 0);
    assert_eq!(count("x\n#[cfg(test)]\ne.payload[\"tool\"]"), 0);
}
