//! Where markdown specialists live, and reading them (the only I/O besides the config file).

use std::path::{Path, PathBuf};

use crate::error::ConfigError;

/// What to load: the config file, the workspace root (which holds the project's
/// `specialists/` directory) and the user-level specialists directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// The config file (`--config`, `FABRIC_CONFIG_PATH`); built-in defaults without one.
    pub config: Option<PathBuf>,
    /// The workspace root (`--workspace`, `FABRIC_WORKSPACE`), which overrides `workspace:`
    /// from the file; the project's specialists are in `<workspace>/specialists`.
    pub workspace: Option<PathBuf>,
    /// The user's specialists directory; see [`user_specialist_dir`].
    pub user_dir: Option<PathBuf>,
    /// The store URL from `FABRIC_STORE_URL`, which overrides `store.url` from the file; it
    /// is checked like the file's.
    pub store_url: Option<String>,
}

impl LoadOptions {
    /// Options for `config`, with the user directory and the store URL from the
    /// environment.
    pub fn new(config: Option<PathBuf>) -> Self {
        Self {
            config,
            workspace: None,
            user_dir: user_specialist_dir(),
            store_url: store_url_from_env(),
        }
    }
}

/// `FABRIC_STORE_URL`, when set to something other than blanks.
fn store_url_from_env() -> Option<String> {
    std::env::var(crate::STORE_URL_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
}

/// `$XDG_CONFIG_HOME/agent-fabric/specialists`, else `~/.config/agent-fabric/specialists`
/// (`None` when neither variable is set).
pub fn user_specialist_dir() -> Option<PathBuf> {
    config_dir().map(|dir| dir.join("specialists"))
}

/// The user's own instructions for every project run (issue #43):
/// `$XDG_CONFIG_HOME/agent-fabric/AGENTS.md`, else `~/.config/agent-fabric/AGENTS.md`.
pub fn user_instructions_file() -> Option<PathBuf> {
    config_dir().map(|dir| dir.join("AGENTS.md"))
}

/// The user's trusted repositories (issue #43): `$XDG_CONFIG_HOME/agent-fabric/trusted.json`,
/// else `~/.config/agent-fabric/trusted.json`.
pub fn trust_file() -> Option<PathBuf> {
    config_dir().map(|dir| dir.join("trusted.json"))
}

/// The user's configuration directory of the fabric: `$XDG_CONFIG_HOME/agent-fabric`, else
/// `~/.config/agent-fabric`.
fn config_dir() -> Option<PathBuf> {
    absolute_var("XDG_CONFIG_HOME")
        .or_else(|| absolute_var("HOME").map(|home| home.join(".config")))
        .map(|base| base.join("agent-fabric"))
}

/// Where `fabric mcp login` keeps OAuth tokens, one file per server (ADR-085):
/// `$XDG_STATE_HOME/agent-fabric/mcp-oauth`, else `~/.local/state/agent-fabric/mcp-oauth`
/// (`None` when neither variable is set). Outside the workspace root, so tokens are never
/// in a project's files or a run's copy of them.
pub fn mcp_token_dir() -> Option<PathBuf> {
    state_dir().map(|dir| dir.join("mcp-oauth"))
}

/// The file of `fabric chat`'s line history (ADR-107):
/// `$XDG_STATE_HOME/agent-fabric/chat_history`, else
/// `~/.local/state/agent-fabric/chat_history` (`None` when neither variable is set).
pub fn chat_history_file() -> Option<PathBuf> {
    state_dir().map(|dir| dir.join("chat_history"))
}

/// The user's state directory of the fabric: `$XDG_STATE_HOME/agent-fabric`, else
/// `~/.local/state/agent-fabric`.
fn state_dir() -> Option<PathBuf> {
    absolute_var("XDG_STATE_HOME")
        .or_else(|| absolute_var("HOME").map(|home| home.join(".local").join("state")))
        .map(|base| base.join("agent-fabric"))
}

/// The directory a variable names, when it is set to an absolute path (the XDG rule: a
/// relative one is ignored).
fn absolute_var(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// Expands a leading `~/` with `$HOME`, as users write directories in config files.
pub(crate) fn expand_home(dir: &str) -> PathBuf {
    match (dir.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(dir),
    }
}

/// The `*.md` files of `dir`, sorted by name, with their text. A directory that does not
/// exist is empty unless `required` (one the user named explicitly).
pub(crate) fn read_specialist_dir(
    dir: &Path,
    required: bool,
) -> Result<Vec<(PathBuf, String)>, ConfigError> {
    let dir_error = |detail: String| ConfigError::SpecialistDir {
        path: dir.to_path_buf(),
        detail,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => return Ok(Vec::new()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(dir_error(
                "it does not exist; create it or fix `specialist_dirs` in the config".to_owned(),
            ));
        }
        Err(e) => return Err(dir_error(e.to_string())),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| dir_error(e.to_string()))?.path();
        if path.extension().is_some_and(|e| e == "md") && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|path| match std::fs::read_to_string(&path) {
            Ok(text) => Ok((path, text)),
            Err(e) => Err(ConfigError::SpecialistFile {
                path,
                line: None,
                detail: format!("cannot read it: {e}"),
            }),
        })
        .collect()
}
