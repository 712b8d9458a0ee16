//! The public contracts against their docs (issue #26): every command and flag the binary
//! has appears in docs/CLI.md (or docs/TESTING.md, which documents the testing commands),
//! every run status and event kind in docs/RUNLOG.md and the statuses in CLI.md's exit
//! codes, every config key `config show` prints in docs/CONFIG.md; and the reverse for the
//! closed sets: every status and kind the docs list is one the code knows. And every test
//! docs/DURABILITY.md names as the proof of a claim exists (issue #27).

use fabric_domain::{EventKind, RunStatus};

fn doc(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../../../docs/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap_or_else(|e| panic!("docs/{name}: {e}"))
}

fn help(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fabric"))
        .args(args)
        .arg("--help")
        .env("NO_COLOR", "1")
        .output()
        .expect("fabric --help");
    assert!(out.status.success(), "{args:?} --help failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The names under `Commands:` in a help text (without `help`).
fn commands(help: &str) -> Vec<String> {
    let Some(section) = help.split("Commands:\n").nth(1) else {
        return Vec::new();
    };
    section
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// The long flags under `Options:` in a help text.
fn flags(help: &str) -> Vec<String> {
    let Some(section) = help.split("Options:\n").nth(1) else {
        return Vec::new();
    };
    // An option's line starts with it (`  -n, --limit <LIMIT>`, `      --json`); the lines
    // after are its description.
    section
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("--")))
        .map(|w| {
            w.split(['=', '<', '['])
                .next()
                .unwrap_or_default()
                .trim_end_matches("...")
                .to_owned()
        })
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

#[test]
fn issue_26_every_command_and_flag_is_in_the_docs() {
    let docs = format!("{}\n{}", doc("CLI.md"), doc("TESTING.md"));
    let mut missing = Vec::new();
    let mut seen = 0;
    let mut walk: Vec<Vec<String>> = commands(&help(&[])).into_iter().map(|c| vec![c]).collect();
    while let Some(path) = walk.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args);
        let subcommands = commands(&text);
        let name = format!("fabric {}", path.join(" "));
        if subcommands.is_empty() {
            seen += 1;
            if !docs.contains(&format!("`{name}")) && !docs.contains(&format!("/ `{name}")) {
                missing.push(format!("command `{name}`"));
            }
        }
        for flag in flags(&text) {
            if !docs.contains(&format!("{flag}`"))
                && !docs.contains(&format!("{flag} "))
                && !docs.contains(&format!("{flag}]"))
            {
                missing.push(format!("flag `{flag}` of `{name}`"));
            }
        }
        walk.extend(subcommands.into_iter().map(|s| {
            let mut deeper = path.clone();
            deeper.push(s);
            deeper
        }));
    }
    assert!(
        seen >= 20,
        "only {seen} commands found: the help format changed?"
    );
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "in the binary, not in docs/CLI.md or docs/TESTING.md:\n  {}",
        missing.join("\n  ")
    );
}

/// The backticked words of a text.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

#[test]
fn issue_26_every_status_is_documented_and_every_documented_status_exists() {
    let runlog = doc("RUNLOG.md");
    let ends: String = runlog
        .lines()
        .filter(|l| l.starts_with("| `run_complete`") || l.starts_with("| `run_failed`"))
        .collect();
    let cli = doc("CLI.md");
    let exit_codes = cli
        .split("### Exit codes")
        .nth(1)
        .and_then(|rest| rest.split("\n#").next())
        .expect("CLI.md has the exit codes");
    for status in RunStatus::ALL {
        if status == RunStatus::Running {
            continue;
        }
        let word = format!("`{}`", status.as_str());
        // A run waiting for a person has no end: its status is its `input_required` line.
        let recorded_by = if status == RunStatus::InputRequired {
            runlog.lines().any(|l| l.starts_with("| `input_required`"))
        } else {
            ends.contains(&word)
        };
        assert!(recorded_by, "RUNLOG.md's ends lack {word}");
        assert!(
            exit_codes.contains(&word),
            "CLI.md's exit codes lack {word}"
        );
    }
    // The reverse: every backticked word of the exit codes table that looks like a status
    // is one.
    let known: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
    for row in exit_codes.lines().filter(|l| l.starts_with("| ")) {
        let Some(first) = backticked(row).first().copied() else {
            continue;
        };
        assert!(
            known.contains(&first),
            "CLI.md names a status the code lacks: `{first}`"
        );
    }
}

#[test]
fn issue_26_every_event_kind_is_documented_and_every_documented_kind_exists() {
    let runlog = doc("RUNLOG.md");
    let table = runlog
        .split("## Kinds")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("RUNLOG.md has the Kinds section");
    let documented: Vec<&str> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    for kind in EventKind::ALL {
        assert!(
            documented.contains(&kind.as_str()),
            "RUNLOG.md lacks the kind `{}`",
            kind.as_str()
        );
    }
    let known: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
    for kind in documented {
        assert!(
            known.contains(&kind),
            "RUNLOG.md documents `{kind}`, which the code lacks"
        );
    }
}

/// `config show`'s key → the key as written in the file, where they differ.
const KEY_SPELLINGS: &[(&str, &str)] = &[
    ("sandbox.mode", "sandbox"),
    ("sandbox.limits", "sandbox_limits"),
    ("sandbox.read_paths", "sandbox_read_paths"),
    ("summarize_compaction", "context_compaction"),
    ("specialist_budgets", "budget"),
    ("server.suspend_on_shutdown", "server.on_shutdown"),
];

/// What `config show` prints that is not a key of the file: where the settings came from.
const NOT_KEYS: &[&str] = &["source", "specialist_origins"];

#[test]
fn issue_26_every_config_key_is_in_config_md() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fabric"))
        .args(["config", "show"])
        .env_remove("FABRIC_CONFIG_PATH")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("fabric config show");
    assert!(out.status.success());
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let config = doc("CONFIG.md");
    let mut keys = Vec::new();
    for (key, value) in shown.as_object().expect("an object") {
        match value {
            // Sections: their keys; maps of names (models, specialists, …): the section.
            serde_json::Value::Object(inner)
                if ![
                    "models",
                    "specialists",
                    "daily_budget",
                    "specialist_budgets",
                    "specialist_origins",
                ]
                .contains(&key.as_str()) =>
            {
                keys.extend(inner.keys().map(|k| format!("{key}.{k}")));
            }
            _ => keys.push(key.clone()),
        }
    }
    let mut missing = Vec::new();
    for key in keys {
        if NOT_KEYS.contains(&key.as_str()) {
            continue;
        }
        let written = KEY_SPELLINGS
            .iter()
            .find(|(shown, _)| *shown == key)
            .map_or(key.as_str(), |(_, written)| *written);
        if !config.contains(&format!("`{written}`")) && !config.contains(&format!("`{written}.")) {
            missing.push(written.to_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "keys `config show` prints that CONFIG.md does not document: {missing:?}"
    );
}

/// Issue #27: every test docs/DURABILITY.md's "Proven by" table names is a test function in
/// the file named in the same cell (or, after "the same", the row's earlier file), so the
/// table cannot go on naming a test that was renamed or removed.
#[test]
fn issue_27_every_test_durability_md_names_exists_in_its_file() {
    let text = doc("DURABILITY.md");
    let table = text
        .split("## Proven by")
        .nth(1)
        .expect("a `Proven by` section");
    let root = format!("{}/../../..", env!("CARGO_MANIFEST_DIR"));
    let full_path = |short: &str| -> String {
        let long = if let Some(rest) = short.strip_prefix("suite/") {
            format!("crates/apps/fabric/tests/suite/{rest}")
        } else if short.starts_with("store-sql/") || short.starts_with("store-fs/") {
            format!("crates/adapters/{short}")
        } else if short.starts_with("core/") {
            format!("crates/{short}")
        } else {
            panic!("an unknown path `{short}` in DURABILITY.md's table")
        };
        format!("{root}/{long}")
    };
    let mut checked = 0;
    for row in table.lines().filter(|l| l.starts_with("| ")) {
        let Some(cell) = row.trim_end_matches('|').rsplit(" | ").next() else {
            continue;
        };
        let mut file: Option<String> = None;
        for name in backticked(cell) {
            if name.ends_with(".rs") {
                let path = full_path(name);
                file =
                    Some(std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")));
            } else if let Some(source) = &file {
                assert!(
                    source.contains(&format!("fn {name}(")),
                    "DURABILITY.md names `{name}`, which its file does not define"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 30, "only {checked} tests named");
}
