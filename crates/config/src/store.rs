//! The `store:` and `run_index:` sections: where runs are catalogued, and which model embeds
//! them for semantic search (issue #9).

use serde::{Deserialize, Serialize, Serializer};

use crate::error::ConfigError;

/// The environment variable that names the store; it wins over `store.url` in the file, as
/// `FABRIC_WORKSPACE` wins over `workspace:`.
pub const STORE_URL_ENV: &str = "FABRIC_STORE_URL";

/// The embedding model asked for when `run_index.embedding_model` is not set: Ollama's
/// usual one (`ollama pull nomic-embed-text`).
pub const DEFAULT_EMBEDDING_MODEL: &str = "nomic-embed-text";

/// Where the run catalogue lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreConfig {
    /// `postgres://…` (or `postgresql://…`), or `sqlite:PATH`; `None`: a SQLite file under the
    /// workspace root. Checked to have one of these schemes; a password in it is shown as
    /// `***` whenever the settings are printed.
    #[serde(serialize_with = "serialize_redacted")]
    pub url: Option<String>,
    /// `fabric serve` enqueues runs for `fabric worker` processes instead of running them
    /// itself (PostgreSQL only; docs/DURABILITY.md).
    pub queue: bool,
    /// How long a worker's claim on a run holds without renewal, in seconds: a worker that
    /// stops renewing loses its runs after this, and another continues them.
    pub lease_s: u64,
    /// With `queue`: most runs queued or running across every worker; one more is refused
    /// (429). `None`: no limit besides each worker's `--concurrency`.
    pub max_runs_in_flight: Option<u64>,
    /// With `queue`: takeovers in a row of a run whose workers stopped while holding it with
    /// no work recorded in between, after which it is ended `failed` instead of claimed
    /// again (issue #40: a run that kills its worker).
    pub max_worker_deaths: u32,
    /// Where every checkpoint of a versioned workspace is pushed (any URL or path git can
    /// push to), so a worker without this disk can take a run over (issue #25; implies
    /// `workspace_history`). A password in it is shown as `***`.
    #[serde(serialize_with = "serialize_redacted")]
    pub workspace_remote: Option<String>,
    /// Whether scratch workspaces are versioned too: a commit after every tool call that
    /// may change files, kept in `runs/<id>/history`, so `fabric resume` restores exactly
    /// what the runlog describes. Project runs always are.
    pub workspace_history: bool,
}

/// [`StoreConfig::lease_s`] when the file does not say.
pub(crate) const DEFAULT_LEASE_S: u64 = 30;

/// [`StoreConfig::max_worker_deaths`] when the file does not say.
pub(crate) const DEFAULT_MAX_WORKER_DEATHS: u32 = 3;

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: None,
            queue: false,
            lease_s: DEFAULT_LEASE_S,
            max_runs_in_flight: None,
            max_worker_deaths: DEFAULT_MAX_WORKER_DEATHS,
            workspace_remote: None,
            workspace_history: false,
        }
    }
}

impl StoreConfig {
    /// The URL with any password replaced by `***`, safe to print and log.
    pub fn redacted_url(&self) -> Option<String> {
        self.url.as_deref().map(redact)
    }
}

/// The similarity below which a run is no match by meaning, unless set
/// (`run_index.min_similarity`; docs/STORE.md says how to choose it for a model).
pub(crate) const DEFAULT_MIN_SIMILARITY: f64 = 0.3;

/// Semantic search over past runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunIndexConfig {
    /// The key in `models:` whose server makes the embeddings (its `base_url`, `backend`,
    /// `api_key_env`, `timeout_s`, `max_retries`); `None`: no semantic search, text search
    /// only.
    pub embedding_model_key: Option<String>,
    /// The embedding model's name on that server, e.g. `nomic-embed-text`.
    pub embedding_model: String,
    /// The cosine similarity (−1 to 1) a run needs to count as a match by meaning; a run
    /// below it is found only by its words.
    pub min_similarity: f64,
}

impl Default for RunIndexConfig {
    fn default() -> Self {
        Self {
            embedding_model_key: None,
            embedding_model: DEFAULT_EMBEDDING_MODEL.to_owned(),
            min_similarity: DEFAULT_MIN_SIMILARITY,
        }
    }
}

/// The `store:` section as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    pub(crate) url: Option<String>,
    pub(crate) queue: Option<bool>,
    pub(crate) lease_s: Option<u64>,
    pub(crate) max_runs_in_flight: Option<u64>,
    pub(crate) max_worker_deaths: Option<u32>,
    pub(crate) workspace_remote: Option<String>,
    pub(crate) workspace_history: Option<bool>,
}

/// The `run_index:` section as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRunIndex {
    pub(crate) embedding_model_key: Option<String>,
    pub(crate) embedding_model: Option<String>,
    pub(crate) min_similarity: Option<f64>,
}

impl RawStore {
    /// Overlays the file's values on `base`; `invalid(key, detail)` builds the error.
    pub(crate) fn merge(
        self,
        base: &mut StoreConfig,
        invalid: impl Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if let Some(url) = self.url {
            base.url = Some(check_url(&url, |detail| invalid("store.url", detail))?);
        }
        overlay!(base, self; queue);
        if let Some(lease) = self.lease_s {
            if !(2..=3_600).contains(&lease) {
                return Err(invalid(
                    "store.lease_s",
                    format!("must be between 2 and 3600 seconds, got {lease}"),
                ));
            }
            base.lease_s = lease;
        }
        if let Some(limit) = self.max_runs_in_flight {
            if !(1..=10_000_000).contains(&limit) {
                return Err(invalid(
                    "store.max_runs_in_flight",
                    format!("must be between 1 and 10000000, got {limit}"),
                ));
            }
            base.max_runs_in_flight = Some(limit);
        }
        if let Some(deaths) = self.max_worker_deaths {
            if !(1..=100).contains(&deaths) {
                return Err(invalid(
                    "store.max_worker_deaths",
                    format!("must be between 1 and 100, got {deaths}"),
                ));
            }
            base.max_worker_deaths = deaths;
        }
        if let Some(remote) = self.workspace_remote {
            let remote = remote.trim();
            if remote.is_empty() || remote.starts_with('-') {
                return Err(invalid(
                    "store.workspace_remote",
                    "must be a URL or path git can push to (a bare repository such as `/srv/fabric-workspaces.git`, or `ssh://host/repo.git`); leave it out to keep workspaces on this disk".to_owned(),
                ));
            }
            base.workspace_remote = Some(remote.to_owned());
        }
        overlay!(base, self; workspace_history);
        Ok(())
    }
}

impl RawRunIndex {
    /// Overlays the file's values on `base`. Whether the model key exists is checked once
    /// every section is merged (`cross_check`), since `models:` may add it.
    pub(crate) fn merge(
        self,
        base: &mut RunIndexConfig,
        invalid: impl Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if let Some(key) = self.embedding_model_key {
            if key.trim().is_empty() {
                return Err(invalid(
                    "run_index.embedding_model_key",
                    "must name a key of `models:`; leave it out for no semantic search".to_owned(),
                ));
            }
            base.embedding_model_key = Some(key);
        }
        if let Some(model) = self.embedding_model {
            if model.trim().is_empty() {
                return Err(invalid(
                    "run_index.embedding_model",
                    format!(
                        "must be the embedding model's name on the server, such as `{DEFAULT_EMBEDDING_MODEL}`"
                    ),
                ));
            }
            base.embedding_model = model;
        }
        if let Some(floor) = self.min_similarity {
            if !(-1.0..=1.0).contains(&floor) {
                return Err(invalid(
                    "run_index.min_similarity",
                    format!("must be a cosine similarity between -1 and 1, got {floor}"),
                ));
            }
            base.min_similarity = floor;
        }
        Ok(())
    }
}

/// Checks a store URL (from the file or `FABRIC_STORE_URL`) and returns it trimmed;
/// `invalid(detail)` builds the error, which never repeats the URL: it may hold a password.
pub(crate) fn check_url(
    url: &str,
    invalid: impl Fn(String) -> ConfigError,
) -> Result<String, ConfigError> {
    let url = url.trim();
    const WHICH: &str = "a `postgres://USER@HOST/DB` URL or `sqlite:PATH` (leave it out for a SQLite file under the workspace root)";
    if let Some(rest) = url.strip_prefix("sqlite:") {
        // `sqlite://PATH` is the form some tools write; both name a file.
        if rest.trim_start_matches("//").is_empty() {
            return Err(invalid(format!(
                "`sqlite:` needs the database file's path, e.g. `sqlite:/var/lib/fabric/runs.db`; expected {WHICH}"
            )));
        }
        return Ok(url.to_owned());
    }
    for scheme in ["postgres://", "postgresql://"] {
        if let Some(rest) = url.strip_prefix(scheme) {
            if rest.is_empty() || rest.starts_with('/') {
                return Err(invalid(format!(
                    "the PostgreSQL URL names no host; expected {WHICH}"
                )));
            }
            return Ok(url.to_owned());
        }
    }
    let scheme = url.split_once(':').map(|(scheme, _)| scheme).filter(|s| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    Err(invalid(match scheme {
        Some(scheme) => format!("`{scheme}` stores are not supported; expected {WHICH}"),
        None => format!("not a store URL; expected {WHICH}"),
    }))
}

/// `scheme://user:password@host/…` → `scheme://user:***@host/…`; anything else unchanged.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
        None => url.to_owned(),
    }
}

fn serialize_redacted<S: Serializer>(url: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    url.as_deref().map(redact).serialize(s)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{LoadOptions, Settings};
    use std::path::Path;

    fn load(text: &str) -> Result<Settings, String> {
        Settings::from_text(text, Path::new("f.yaml")).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_have_no_semantic_search_and_the_workspace_store() {
        let s = Settings::defaults();
        assert_eq!(s.store.url, None);
        assert_eq!(s.run_index.embedding_model_key, None);
        assert_eq!(s.run_index.embedding_model, "nomic-embed-text");
    }

    #[test]
    fn the_file_sets_every_key() {
        let s = load(
            "models:\n  embed:\n    model: nomic-embed-text\nrun_index:\n  embedding_model_key: embed\n  embedding_model: mxbai-embed-large\nstore:\n  url: postgres://fabric@db.internal/runs\n",
        )
        .unwrap();
        assert_eq!(s.run_index.embedding_model_key.as_deref(), Some("embed"));
        assert_eq!(s.run_index.embedding_model, "mxbai-embed-large");
        assert_eq!(
            s.store.url.as_deref(),
            Some("postgres://fabric@db.internal/runs")
        );
        for url in [
            "sqlite:runs.db",
            "sqlite:///abs/runs.db",
            "postgresql://h/db",
        ] {
            let s = load(&format!("store:\n  url: \"{url}\"\n")).unwrap();
            assert_eq!(s.store.url.as_deref(), Some(url));
        }
    }

    #[test]
    fn issue_40_max_worker_deaths_defaults_to_three_and_is_read() {
        assert_eq!(load("").unwrap().store.max_worker_deaths, 3);
        let s = load("store:\n  max_worker_deaths: 5\n").unwrap();
        assert_eq!(s.store.max_worker_deaths, 5);
    }

    #[test]
    fn an_unknown_model_key_names_the_configured_keys() {
        let e = load("run_index:\n  embedding_model_key: embed\n").unwrap_err();
        assert_eq!(
            e,
            "f.yaml: `run_index.embedding_model_key`: no model `embed`; the model keys are: fast, quality"
        );
    }

    #[test]
    fn bad_values_and_unknown_keys_name_their_key() {
        for (text, expected) in [
            (
                "run_index:\n  embeding_model: x\n",
                "`run_index.embeding_model`: unknown field `embeding_model`, expected one of `embedding_model_key`, `embedding_model`, `min_similarity`",
            ),
            (
                "store:\n  path: x\n",
                "`store.path`: unknown field `path`, expected one of `url`, `queue`, `lease_s`, `max_runs_in_flight`, `max_worker_deaths`",
            ),
            (
                "store:\n  lease_s: 1\n",
                "`store.lease_s`: must be between 2 and 3600 seconds, got 1",
            ),
            (
                "store:\n  max_worker_deaths: 0\n",
                "`store.max_worker_deaths`: must be between 1 and 100, got 0",
            ),
            (
                "run_index:\n  embedding_model: \" \"\n",
                "`run_index.embedding_model`: must be",
            ),
            (
                "run_index:\n  embedding_model_key: \"\"\n",
                "`run_index.embedding_model_key`",
            ),
            (
                "run_index:\n  min_similarity: 2\n",
                "`run_index.min_similarity`: must be a cosine similarity between -1 and 1, got 2",
            ),
            (
                "store:\n  url: \"mysql://root:hunter2@h/db\"\n",
                "`store.url`: `mysql` stores are not supported; expected a `postgres://",
            ),
            (
                "store:\n  url: \"sqlite:\"\n",
                "`store.url`: `sqlite:` needs the database file's path",
            ),
            (
                "store:\n  url: \"postgres://\"\n",
                "`store.url`: the PostgreSQL URL names no host",
            ),
            ("store:\n  url: runs.db\n", "`store.url`: not a store URL"),
        ] {
            let e = load(text).unwrap_err();
            assert!(e.contains(expected), "{text}: {e}");
            assert!(!e.contains("hunter2"), "the password leaked: {e}");
        }
    }

    #[test]
    fn the_environment_wins_over_the_file_and_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("fabric.yaml");
        std::fs::write(&config, "store:\n  url: sqlite:from-file.db\n").unwrap();
        let options = |env: Option<&str>| LoadOptions {
            config: Some(config.clone()),
            workspace: Some(dir.path().to_path_buf()),
            user_dir: None,
            store_url: env.map(str::to_owned),
        };
        let s = Settings::load_with(&options(None)).unwrap();
        assert_eq!(s.store.url.as_deref(), Some("sqlite:from-file.db"));
        let s = Settings::load_with(&options(Some("postgres://u@h/db"))).unwrap();
        assert_eq!(s.store.url.as_deref(), Some("postgres://u@h/db"));
        let e = Settings::load_with(&options(Some("redis://h")))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("environment variable FABRIC_STORE_URL: `store.url`: `redis` stores are not supported"),
            "{e}"
        );
    }

    #[test]
    fn passwords_are_redacted_when_printed() {
        let s = load("store:\n  url: \"postgres://fabric:s3cret@db:5432/runs?sslmode=require\"\n")
            .unwrap();
        let expected = "postgres://fabric:***@db:5432/runs?sslmode=require";
        assert_eq!(s.store.redacted_url().as_deref(), Some(expected));
        let json = serde_json::to_string(&s).unwrap();
        assert!(
            !json.contains("s3cret") && json.contains(expected),
            "{json}"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("sqlite:/a@b:c"), "sqlite:/a@b:c");
    }
}
