//! `fabric trust [PATH] | --list | --revoke [PATH]`, and the question a terminal is asked at
//! the first run on a repository that ships something that would run (issue #43, ADR-116).
//! What a repository wrote is shown through [`visible_text`]: a hook's command is hostile
//! text, and must not drive the user's terminal.

use anyhow::Context;
use fabric_config::Settings;
use fabric_config::trust::{Inventory, Trust, TrustStore, repository_root};
use fabric_domain::{UtcTime, visible_text};
use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use crate::app::trusted::{inventory_of, open_store, trust_of, workspace_owner};
use crate::cli::{Cli, TrustArgs};
use crate::wiring;

pub(crate) fn trust(cli: &Cli, args: &TrustArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    let mut store = open_store()?;
    if args.list {
        return list(&store, &settings);
    }
    let path = match &args.path {
        Some(path) => path.clone(),
        None => std::env::current_dir().context("the current directory")?,
    };
    let inventory = inventory_of(&path, &settings);
    if args.revoke {
        let root = repository_root(&path);
        if store.revoke(&root) {
            store.save()?;
            println!(
                "{}: no longer trusted; what it ships will not run",
                root.display()
            );
        } else {
            println!("{}: was not trusted", root.display());
        }
        return Ok(0);
    }
    if inventory.is_empty() {
        println!(
            "{}: ships nothing that would run (no hooks in {}, no project specialist with MCP servers); nothing to trust",
            inventory.root.display(),
            fabric_config::trust::HOOK_FILES.join(" or ")
        );
        return Ok(0);
    }
    print!("{}", describe(&inventory));
    store.trust(&inventory, &now());
    store.save()?;
    println!(
        "trusted this version ({}); a change to any of it asks again. `fabric trust --revoke {}` undoes it.",
        &inventory.digest[..12],
        inventory.root.display()
    );
    Ok(0)
}

fn list(store: &TrustStore, settings: &Settings) -> anyhow::Result<u8> {
    if store.entries().is_empty() {
        println!("no trusted repositories");
    }
    for entry in store.entries() {
        let now = match store.status(&inventory_of(&entry.path, settings)) {
            Trust::Trusted => "trusted",
            Trust::Changed { .. } => "changed since: not trusted until you trust it again",
            Trust::NothingToTrust => "ships nothing that runs now",
            Trust::Untrusted => "not trusted",
        };
        println!(
            "{}  trusted {}  {}  [{}]",
            entry.path.display(),
            entry.trusted_at,
            now,
            visible_text(&entry.files.join(", "))
        );
    }
    Ok(0)
}

/// The inventory in words, one file and what it runs a line.
fn describe(inventory: &Inventory) -> String {
    let mut text = format!(
        "{} ships what would run as you, outside the sandbox:\n",
        inventory.root.display()
    );
    for item in &inventory.items {
        text.push_str(&format!("  {}\n", visible_text(&item.file)));
        for line in &item.runs {
            text.push_str(&format!("    {}\n", visible_text(line)));
        }
    }
    text
}

/// [`ask_on_terminal`] on the blocking pool (it reads the terminal).
pub(crate) async fn ask_before(settings: &Settings, project: Option<&Path>) -> anyhow::Result<()> {
    let (settings, project) = (settings.clone(), project.map(Path::to_path_buf));
    tokio::task::spawn_blocking(move || ask_on_terminal(&settings, project.as_deref())).await?
}

/// Before a run from a terminal: a repository that ships something that would run and is
/// not trusted in this version is shown, and the user asked. Yes trusts it; anything else
/// leaves it untrusted (the run goes on without it). Off a terminal nothing is asked.
fn ask_on_terminal(settings: &Settings, project: Option<&Path>) -> anyhow::Result<()> {
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Ok(());
    }
    let mut roots: BTreeMap<PathBuf, Inventory> = BTreeMap::new();
    let here = workspace_owner(settings);
    for path in project.into_iter().chain([here.as_path()]) {
        let inv = inventory_of(path, settings);
        roots.entry(inv.root.clone()).or_insert(inv);
    }
    for inventory in roots.into_values() {
        let (status, inventory) = trust_of(&inventory.root, settings);
        if status.allows() {
            continue;
        }
        let mut err = std::io::stderr();
        let changed = matches!(status, Trust::Changed { .. })
            .then_some(" (changed since you trusted it)")
            .unwrap_or("");
        write!(
            err,
            "{}Trust it{changed}? Untrusted, none of it runs. [y/N] ",
            describe(&inventory)
        )?;
        err.flush()?;
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        if matches!(line.trim(), "y" | "Y" | "yes") {
            let mut store = open_store()?;
            store.trust(&inventory, &now());
            store.save()?;
            eprintln!(
                "trusted; `fabric trust --revoke {}` undoes it",
                inventory.root.display()
            );
        } else {
            eprintln!("not trusted: it will not run (`fabric trust` when you have checked it)");
        }
    }
    Ok(())
}

fn now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    UtcTime::from_unix(secs).to_string()
}
