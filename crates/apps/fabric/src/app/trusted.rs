//! What a repository ships that would run, and whether the user trusts it (issue #43,
//! ADR-116): shared by `fabric trust`, the terminal's question and the runs' wiring.

use anyhow::Context;
use fabric_config::Settings;
use fabric_config::trust::{Inventory, Trust, TrustStore, inventory};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What `path`'s repository ships that would run, its project specialists included.
pub(crate) fn inventory_of(path: &Path, settings: &Settings) -> Inventory {
    inventory(path, &specialist_files(settings))
}

/// The project specialist files that declare MCP servers.
pub(crate) fn specialist_files(settings: &Settings) -> Vec<PathBuf> {
    settings
        .project_mcp_specialists()
        .into_iter()
        .map(|(_, file)| file)
        .collect()
}

/// The user's store, or an empty one that cannot be saved when there is no home.
pub(crate) fn open_store() -> anyhow::Result<TrustStore> {
    let path = fabric_config::trust_file().context(
        "neither XDG_CONFIG_HOME nor HOME is set: there is nowhere to keep trusted repositories",
    )?;
    Ok(TrustStore::load(&path)?)
}

/// The directory whose project specialists the fabric reads: the one holding the
/// workspace (`.fabric` in the current directory by default).
pub(crate) fn workspace_owner(settings: &Settings) -> PathBuf {
    let workspace =
        std::path::absolute(&settings.workspace).unwrap_or_else(|_| settings.workspace.clone());
    workspace
        .parent()
        .map_or_else(|| workspace.clone(), Path::to_path_buf)
}

/// Whether what `path`'s repository ships may run: nothing to trust, a directory of
/// `trusted_projects`, or this version trusted with `fabric trust`; and what it ships.
pub(crate) fn trust_of(path: &Path, settings: &Settings) -> (Trust, Inventory) {
    trust_in(
        path,
        &settings.trusted_projects,
        &specialist_files(settings),
    )
}

/// [`trust_of`] from its parts: `trusted_projects` and the project's MCP specialists.
fn trust_in(path: &Path, trusted: &[PathBuf], specialists: &[PathBuf]) -> (Trust, Inventory) {
    let inventory = inventory(path, specialists);
    let trusted_dir = |dir: &PathBuf| {
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
        inventory.root.starts_with(dir)
    };
    if !inventory.is_empty() && trusted.iter().any(trusted_dir) {
        return (Trust::Trusted, inventory);
    }
    let status = match open_store() {
        Ok(store) => store.status(&inventory),
        Err(e) => {
            tracing::warn!(error = %e, "trusted repositories cannot be read; treating every repository as untrusted");
            if inventory.is_empty() {
                Trust::NothingToTrust
            } else {
                Trust::Untrusted
            }
        }
    };
    (status, inventory)
}

/// The project specialists that declare MCP servers in a repository the user has not
/// trusted in this version, each with the message its run is refused with.
pub(crate) fn untrusted_specialists(settings: &Settings) -> BTreeMap<String, String> {
    let candidates = settings.project_mcp_specialists();
    if candidates.is_empty() {
        return BTreeMap::new();
    }
    let (status, inventory) = trust_of(&workspace_owner(settings), settings);
    // Specialists that declare servers are always something to trust: should the inventory
    // miss them (a path it cannot place), they are refused, never let through.
    let status = match status {
        Trust::NothingToTrust => Trust::Untrusted,
        other => other,
    };
    if status.allows() {
        return BTreeMap::new();
    }
    let changed = match status {
        Trust::Changed { trusted_at } => {
            format!(" (you trusted an earlier version on {trusted_at}; it has changed)")
        }
        _ => String::new(),
    };
    candidates
        .into_iter()
        .map(|(id, file)| {
            let why = format!(
                "specialist `{id}` comes from {}, which declares MCP servers the fabric would start, and the repository {} is not trusted{changed}; check what it runs and `fabric trust {}` (docs/SECURITY.md)",
                file.display(),
                inventory.root.display(),
                inventory.root.display()
            );
            (id, why)
        })
        .collect()
}

/// A project's own hooks (issue #43): those of its Claude Code settings files when the
/// repository is trusted; else none, and why, for the run's `security_event`.
#[derive(Debug, Default)]
pub(crate) struct ProjectHooks {
    /// The repository's root (`CLAUDE_PROJECT_DIR`).
    pub(crate) root: Option<PathBuf>,
    /// Per settings file with hooks, what will run.
    pub(crate) read: Vec<fabric_domain::hooks::HooksConfig>,
    /// What was skipped on the way, one sentence each.
    pub(crate) warnings: Vec<String>,
    /// Why the project's hooks do not run, when it has some and is not trusted.
    pub(crate) refused: Option<String>,
}

/// The hooks `path`'s repository ships, read only when it is trusted in this version.
/// Blocking file work: called on the blocking pool.
pub(crate) fn project_hooks(
    path: &Path,
    trusted: &[PathBuf],
    specialists: &[PathBuf],
) -> ProjectHooks {
    use fabric_config::trust::HOOK_FILES;
    let (status, inventory) = trust_in(path, trusted, specialists);
    let files: Vec<&str> = inventory
        .items
        .iter()
        .map(|i| i.file.as_str())
        .filter(|f| HOOK_FILES.contains(f))
        .collect();
    let mut found = ProjectHooks {
        root: Some(inventory.root.clone()),
        ..ProjectHooks::default()
    };
    if files.is_empty() {
        return found;
    }
    if !status.allows() {
        let changed = match &status {
            Trust::Changed { trusted_at } => {
                format!(" (you trusted an earlier version on {trusted_at}; it has changed)")
            }
            _ => String::new(),
        };
        found.refused = Some(format!(
            "the project's hooks in {} were not run: the repository {} is not trusted{changed}; check what they run and `fabric trust {}` (docs/SECURITY.md)",
            files.join(" and "),
            inventory.root.display(),
            inventory.root.display()
        ));
        return found;
    }
    for file in files {
        let text = match std::fs::read_to_string(inventory.root.join(file)) {
            Ok(text) => text,
            Err(e) => {
                found.warnings.push(format!("{file}: cannot be read: {e}"));
                continue;
            }
        };
        match fabric_domain::hooks::HooksConfig::from_claude_settings(&text) {
            Ok(read) => {
                found
                    .warnings
                    .extend(read.warnings.into_iter().map(|w| format!("{file}: {w}")));
                found.read.push(read.config);
            }
            Err(e) => found
                .warnings
                .push(format!("{file}: {e}; its hooks do not run")),
        }
    }
    found
}
