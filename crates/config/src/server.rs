//! The `server:` section: how `fabric serve` listens and what it allows.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use crate::error::ConfigError;

/// Settings of the HTTP API (`fabric serve`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerConfig {
    /// Address to bind; a non-loopback one requires a token.
    pub host: String,
    /// Port to bind; 0 picks a free one.
    pub port: u16,
    /// Name of the environment variable holding the bearer token. The token itself never
    /// goes in the file.
    pub api_token_env: String,
    /// Runs in flight at once; one more is answered 429 with `Retry-After`.
    pub max_runs_in_flight: usize,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Continue, at start, the runs a stopped process left unfinished (docs/DURABILITY.md).
    pub resume_interrupted: bool,
    /// At shutdown, `suspend` runs in flight (stopped without an end, continued at the next
    /// start) instead of cancelling them.
    pub suspend_on_shutdown: bool,
    /// `GET /metrics` without the bearer token (for a Prometheus that cannot send one);
    /// off by default: run counts and tool names are not for anyone who can reach the port.
    pub metrics_public: bool,
    /// The directories a `project` asked for over HTTP, MCP or A2A must be inside (its real
    /// path: symbolic links and `..` resolved); none by default, which refuses every such
    /// `project`. `fabric run --project` is not bound by it. Issue #39, ADR-090.
    pub project_roots: Vec<PathBuf>,
    /// How long a run waits for a person's answer (a question or an approval) before it
    /// ends `unanswered`, in seconds; `None` (the default): as long as it takes. Issue #42.
    pub input_timeout_s: Option<u64>,
    /// How long a connection has to send a whole request head, in seconds: from its accept
    /// for the first request, from the end of the last answer for the next. A client that
    /// takes longer (one that connects and sends nothing, or a byte at a time) is
    /// disconnected, so it cannot hold a descriptor and a task for ever. Issue #45.
    pub header_timeout_s: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".to_owned(),
            port: 8787,
            api_token_env: "FABRIC_API_TOKEN".to_owned(),
            max_runs_in_flight: 64,
            max_body_bytes: 256 * 1024,
            resume_interrupted: true,
            suspend_on_shutdown: false,
            metrics_public: false,
            project_roots: Vec::new(),
            input_timeout_s: None,
            header_timeout_s: 30,
        }
    }
}

/// The section as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    pub(crate) host: Option<String>,
    pub(crate) port: Option<u16>,
    pub(crate) api_token_env: Option<String>,
    pub(crate) max_runs_in_flight: Option<u64>,
    pub(crate) max_body_bytes: Option<u64>,
    pub(crate) resume_interrupted: Option<bool>,
    pub(crate) on_shutdown: Option<String>,
    pub(crate) metrics_public: Option<bool>,
    pub(crate) project_roots: Option<Vec<String>>,
    pub(crate) input_timeout_s: Option<u64>,
    pub(crate) header_timeout_s: Option<u64>,
}

impl RawServer {
    /// Overlays the file's values on `base`, checking each; `invalid(key, detail)` builds
    /// the error naming the key.
    pub(crate) fn merge(
        self,
        base: &mut ServerConfig,
        invalid: impl Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if let Some(host) = self.host {
            let ok = !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'));
            if !ok {
                return Err(invalid(
                    "server.host",
                    format!("must be a host name or IP address such as 127.0.0.1, got `{host}`"),
                ));
            }
            base.host = host;
        }
        overlay!(base, self; port);
        if let Some(name) = self.api_token_env {
            let ok = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !ok {
                return Err(invalid(
                    "server.api_token_env",
                    format!(
                        "must be the name of an environment variable such as FABRIC_API_TOKEN (the token itself never goes in the file), got `{name}`"
                    ),
                ));
            }
            base.api_token_env = name;
        }
        if let Some(n) = self.max_runs_in_flight {
            base.max_runs_in_flight = range(&invalid, "server.max_runs_in_flight", n, 1, 100_000)?;
        }
        if let Some(n) = self.max_body_bytes {
            base.max_body_bytes =
                range(&invalid, "server.max_body_bytes", n, 1024, 64 * 1024 * 1024)?;
        }
        overlay!(base, self; resume_interrupted, metrics_public);
        if let Some(n) = self.input_timeout_s {
            let secs = range(&invalid, "server.input_timeout_s", n, 1, 30 * 86_400)?;
            base.input_timeout_s = Some(secs as u64);
        }
        if let Some(n) = self.header_timeout_s {
            base.header_timeout_s = range(&invalid, "server.header_timeout_s", n, 1, 3_600)? as u64;
        }
        if let Some(roots) = self.project_roots {
            base.project_roots = project_roots(roots, &invalid)?;
        }
        if let Some(mode) = self.on_shutdown {
            base.suspend_on_shutdown = match mode.as_str() {
                "cancel" => false,
                "suspend" => true,
                other => {
                    return Err(invalid(
                        "server.on_shutdown",
                        format!(
                            "must be `cancel` (runs in flight end `cancelled`) or `suspend` (they stop without an end and are continued at the next start), got `{other}`"
                        ),
                    ));
                }
            };
        }
        Ok(())
    }
}

/// Each root must be an absolute path; they are resolved when a request is checked, so one
/// made later counts.
fn project_roots(
    roots: Vec<String>,
    invalid: &impl Fn(&str, String) -> ConfigError,
) -> Result<Vec<PathBuf>, ConfigError> {
    roots
        .into_iter()
        .map(|root| {
            if Path::new(&root).is_absolute() {
                Ok(PathBuf::from(root))
            } else {
                Err(invalid(
                    "server.project_roots",
                    format!(
                        "must list absolute directories such as /srv/repos (the directories a `project` asked for over HTTP, MCP or A2A must be inside), got `{root}`"
                    ),
                ))
            }
        })
        .collect()
}

fn range(
    invalid: &impl Fn(&str, String) -> ConfigError,
    key: &str,
    v: u64,
    min: u64,
    max: u64,
) -> Result<usize, ConfigError> {
    if (min..=max).contains(&v) {
        Ok(usize::try_from(v).unwrap_or(usize::MAX))
    } else {
        Err(invalid(
            key,
            format!("must be between {min} and {max}, got {v}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::Settings;
    use std::path::Path;

    fn load(text: &str) -> Result<Settings, String> {
        Settings::from_text(text, Path::new("f.yaml")).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_bind_loopback_8787() {
        let s = Settings::defaults();
        assert_eq!(s.server.host, "127.0.0.1");
        assert_eq!(s.server.port, 8787);
        assert_eq!(s.server.api_token_env, "FABRIC_API_TOKEN");
        assert_eq!(s.server.max_runs_in_flight, 64);
        assert_eq!(s.server.max_body_bytes, 262_144);
        assert_eq!(s.server.header_timeout_s, 30);
    }

    #[test]
    fn the_file_sets_every_key() {
        let s = load("server:\n  host: 0.0.0.0\n  port: 9000\n  api_token_env: MY_TOKEN\n  max_runs_in_flight: 3\n  max_body_bytes: 4096\n  resume_interrupted: false\n  on_shutdown: suspend\n  metrics_public: true\n  header_timeout_s: 5\n").unwrap();
        assert_eq!(s.server.header_timeout_s, 5);
        assert!(!s.server.resume_interrupted);
        assert!(s.server.metrics_public);
        assert!(s.server.suspend_on_shutdown);
        assert_eq!(s.server.host, "0.0.0.0");
        assert_eq!(s.server.port, 9000);
        assert_eq!(s.server.api_token_env, "MY_TOKEN");
        assert_eq!(s.server.max_runs_in_flight, 3);
        assert_eq!(s.server.max_body_bytes, 4096);
    }

    #[test]
    fn issue_39_project_roots_none_by_default_absolute_directories_when_set() {
        assert!(Settings::defaults().server.project_roots.is_empty());
        let s = load("server:\n  project_roots: [/srv/repos, /home/ci/work]\n").unwrap();
        assert_eq!(
            s.server.project_roots,
            [Path::new("/srv/repos"), Path::new("/home/ci/work")]
        );
        // A key near it is refused as every unknown key is, naming it.
        for near in ["project_root", "projects_roots", "project_roots_extra"] {
            let e = load(&format!("server:\n  {near}: [/srv/repos]\n")).unwrap_err();
            assert!(e.contains(near) && e.contains("project_roots"), "{e}");
        }
    }

    #[test]
    fn bad_values_name_their_key() {
        for (text, key) in [
            (
                "server:\n  max_runs_in_flight: 0\n",
                "server.max_runs_in_flight",
            ),
            ("server:\n  max_body_bytes: 10\n", "server.max_body_bytes"),
            (
                "server:\n  header_timeout_s: 0\n",
                "server.header_timeout_s",
            ),
            (
                "server:\n  header_timeout_s: 7200\n",
                "server.header_timeout_s",
            ),
            (
                "server:\n  api_token_env: \"sk-secret value\"\n",
                "server.api_token_env",
            ),
            ("server:\n  host: \"a b\"\n", "server.host"),
            ("server:\n  port: 70000\n", "server.port"),
            ("server:\n  token: x\n", "server"),
            (
                "server:\n  project_roots: [relative/dir]\n",
                "server.project_roots",
            ),
            ("server:\n  project_roots: /srv\n", "server"),
        ] {
            let e = load(text).unwrap_err();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
