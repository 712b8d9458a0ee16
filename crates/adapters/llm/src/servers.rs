//! The model servers of a configuration as one adapter (issue #41, ADR-099):
//! [`ModelServers`] implements core's [`ModelResolver`] (start the local server when it is
//! down, ask a server which models it has, pull one; core's `service::prepare` decides
//! which, and when) and [`ChatFactory`] (one client per model key). Its caches are its own
//! fields, for the life of the value (the binary builds one per process).
//!
//! Single flight: concurrent requests (`fabric serve`) share each piece of work. Starting a
//! server is serialised per base URL, so a burst of requests against a downed server starts
//! the command once and the others wait for it to answer; and the first listing of an
//! endpoint is fetched once while the others wait for it (concurrent pulls are serialised by
//! core's preparation).
//!
//! A library never prints: what a person is told while a server starts or a model is pulled
//! goes to the [`ServerNotices`] the binary hands in (stderr and a progress bar there).

use async_trait::async_trait;
use fabric_config::Settings;
use fabric_domain::{Backend, ModelConfig};
use fabric_engine::models::Flights;
use fabric_engine::models::ModelCandidate;
use fabric_engine::ports::{ChatFactory, ModelResolver, SetupError};
use fabric_engine::{ChatClient, EmbeddingClient};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

use crate::discover::{PullProgress, probe};
use crate::{AnthropicClient, HttpSettings, OllamaClient, OpenAiClient};

/// The models an endpoint listed.
type Listing = Arc<Vec<ModelCandidate>>;

/// One cell per endpoint: the first caller fills it while the others wait on it. A failed
/// listing leaves the cell empty, so the next caller asks again.
type ListingCell = Arc<OnceCell<Listing>>;

/// What a person is told while model servers are started and models pulled.
pub trait ServerNotices: Send + Sync {
    /// One line: a server started, still awaited, up; a pull begun or done.
    fn notice(&self, line: &str);
    /// Shows the progress of pulling `name`, line by line, until it ends.
    fn pulling(&self, name: &str) -> Box<dyn PullShow>;
}

/// The progress of one pull, as a person sees it.
pub trait PullShow: Send {
    /// One line of the server's progress.
    fn progress(&mut self, line: &PullProgress);
    /// The pull ended, well or not.
    fn finish(self: Box<Self>);
}

/// Notices that only go to the log (tests, and front ends with no person at a terminal).
pub struct LoggedNotices;

impl ServerNotices for LoggedNotices {
    fn notice(&self, line: &str) {
        tracing::info!("{line}");
    }

    fn pulling(&self, _name: &str) -> Box<dyn PullShow> {
        Box::new(LoggedNotices)
    }
}

impl PullShow for LoggedNotices {
    fn progress(&mut self, line: &PullProgress) {
        tracing::debug!(status = %line.status, "pull");
    }

    fn finish(self: Box<Self>) {}
}

/// How the local model server is started when it does not answer
/// (`local_llm_ensure_available`, `local_llm_start_cmd`, `local_llm_start_timeout_s`).
struct LocalStart {
    enabled: bool,
    cmd: Vec<String>,
    timeout: Duration,
}

/// The model servers of the configured model keys, and a chat client per key.
pub struct ModelServers {
    models: BTreeMap<String, ModelConfig>,
    local: LocalStart,
    notices: Arc<dyn ServerNotices>,
    /// The listing of each endpoint (backend and base URL), asked once.
    listings: Mutex<HashMap<String, ListingCell>>,
    /// One start at a time per base URL.
    starts: Flights,
    /// One client per key, made when a run first needs it and shared by every run after: a
    /// client holds the connection pool and the TLS roots (about 90 KiB), so a client per
    /// run cost that much memory per run in flight and a new connection to the model server
    /// per run (issue #14).
    chats: Mutex<HashMap<String, Arc<dyn ChatClient>>>,
}

impl ModelServers {
    /// The servers of `settings`' model keys; `notices` shows a person what starting and
    /// pulling do.
    pub fn new(settings: &Settings, notices: Arc<dyn ServerNotices>) -> Self {
        Self {
            models: settings.models.clone(),
            local: LocalStart {
                enabled: settings.local_llm_ensure_available,
                cmd: settings.local_llm_start_cmd.clone(),
                timeout: Duration::from_secs(settings.local_llm_start_timeout_s),
            },
            notices,
            listings: Mutex::default(),
            starts: Flights::default(),
            chats: Mutex::default(),
        }
    }

    fn model(&self, key: &str) -> Result<&ModelConfig, SetupError> {
        self.models
            .get(key)
            .ok_or_else(|| SetupError::Internal(format!("no model key `{key}`")))
    }

    /// Starts `key`'s local server when it does not answer (`local_llm_ensure_available`,
    /// Ollama backends on this machine only), and waits until it does or the timeout
    /// passes. One caller at a time per base URL: the others wait, then find the server up.
    async fn ensure_available(&self, key: &str, model: &ModelConfig) -> Result<(), SetupError> {
        if !self.local.enabled || model.backend != Backend::Ollama || !is_local(&model.base_url) {
            return Ok(());
        }
        if answers(&model.base_url, 2).await {
            return Ok(());
        }
        let lock = self.starts.lock_for(format!("start {}", model.base_url));
        let _starting = lock.lock().await;
        // Another request may have started it while this one waited.
        if answers(&model.base_url, 2).await {
            return Ok(());
        }
        let child = self.start_server(key, model)?;
        self.await_server(model, child).await
    }

    /// Waits for a started server to answer; one that never does is stopped again.
    async fn await_server(
        &self,
        model: &ModelConfig,
        mut child: tokio::process::Child,
    ) -> Result<(), SetupError> {
        let (cmd, timeout) = (self.local.cmd.join(" "), self.local.timeout);
        self.notices.notice(&format!(
            "no model server answers at {}; started `{cmd}`, waiting up to {} s for it",
            model.base_url,
            timeout.as_secs()
        ));
        let started = Instant::now();
        let mut told = Duration::ZERO;
        while started.elapsed() < timeout {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if answers(&model.base_url, 1).await {
                self.notices.notice(&format!(
                    "model server is up at {} after {:.1} s",
                    model.base_url,
                    started.elapsed().as_secs_f64()
                ));
                return Ok(());
            }
            // A server that takes long is not silence: say how long, every five seconds.
            if started.elapsed() >= told + Duration::from_secs(5) {
                told = started.elapsed();
                self.notices.notice(&format!(
                    "still waiting for `{cmd}` at {}: {} s of {} s",
                    model.base_url,
                    told.as_secs(),
                    timeout.as_secs()
                ));
            }
        }
        // One last look, so a server that came up at the deadline is not stopped.
        if answers(&model.base_url, 1).await {
            return Ok(());
        }
        // It never answered: it is not left running behind the error, nor what it started
        // (a wrapper script's children share its process group).
        stop_group(&mut child).await;
        Err(SetupError::ModelUnavailable(format!(
            "started `{cmd}` but nothing answered at {} within {} s, so it was stopped again; check that the command starts the server on that address, or raise `local_llm_start_timeout_s`",
            model.base_url,
            timeout.as_secs()
        )))
    }

    /// Starts `local_llm_start_cmd` for `key`'s server, in its own process group with no
    /// stdio tied to ours; the error says how to get a server when it cannot start.
    fn start_server(
        &self,
        key: &str,
        model: &ModelConfig,
    ) -> Result<tokio::process::Child, SetupError> {
        let cmd = &self.local.cmd;
        let Some((program, args)) = cmd.split_first() else {
            return Err(SetupError::ModelUnavailable(
                "`local_llm_start_cmd` is empty; set it to the command that starts the model server".to_owned(),
            ));
        };
        // Its own process group, no stdio tied to ours, so a server that comes up outlives
        // this run and a Ctrl-C here does not kill it; one that never answers is stopped.
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .kill_on_drop(false);
        command.spawn().map_err(|e| {
            SetupError::ModelUnavailable(if e.kind() == std::io::ErrorKind::NotFound && program == "ollama" {
                format!(
                    "no model server answers at {}, and Ollama is not installed (`ollama` is not on PATH). Either install Ollama (https://ollama.com/download) and pull a tool-capable model (`ollama pull qwen2.5:7b`); or point `models.{key}.base_url` in the config at a server that runs (any OpenAI-compatible one with `backend: openai`); or try the fabric with no model at all through the scripted server, as the README shows under \"No model at hand?\"",
                    model.base_url
                )
            } else {
                format!(
                    "cannot start `{}` (local_llm_start_cmd): {e}; install it, start the model server yourself, or change `local_llm_start_cmd`",
                    cmd.join(" ")
                )
            })
        })
    }

    /// The models `model`'s endpoint offers, with capabilities where the server reports
    /// them. Asked once per endpoint; concurrent first callers share one request.
    pub async fn models_of(&self, model: &ModelConfig) -> Result<Listing, SetupError> {
        let key = format!("{:?} {}", model.backend, model.base_url);
        let cell = Arc::clone(
            self.listings
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(key)
                .or_default(),
        );
        let listing = cell.get_or_try_init(|| fetch_listing(model)).await?;
        Ok(Arc::clone(listing))
    }

    /// Pulls `name` onto `model`'s Ollama server, its progress shown through the notices.
    async fn pull_onto(&self, model: &ModelConfig, name: &str) -> Result<(), SetupError> {
        let mut http = HttpSettings::new(model.base_url.clone());
        http.max_retries = 0;
        let client = OllamaClient::new(&http, None).map_err(unavailable)?;
        self.notices
            .notice(&format!("pulling `{name}` from {}", client.root()));
        let mut show = self.notices.pulling(name);
        let result = client.pull(name, &mut |p| show.progress(p)).await;
        show.finish();
        result.map_err(|e| SetupError::ModelUnavailable(format!("pulling `{name}`: {e}")))?;
        self.notices.notice(&format!("pulled `{name}`"));
        self.listings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        Ok(())
    }
}

/// Whether anything answers at `base_url` within `seconds`.
async fn answers(base_url: &str, seconds: u64) -> bool {
    probe(base_url, Duration::from_secs(seconds)).await.is_ok()
}

/// A model server that cannot be used now.
fn unavailable(error: impl std::fmt::Display) -> SetupError {
    SetupError::ModelUnavailable(error.to_string())
}

/// Whether the base URL points at this machine: only then may the fabric start a server.
pub fn is_local(base_url: &str) -> bool {
    let rest = base_url
        .trim_start_matches("http://")
        .trim_start_matches("https://");
    let host = rest.split(['/', ':']).next().unwrap_or_default();
    matches!(host, "localhost" | "127.0.0.1") || rest.starts_with("[::1]")
}

/// Stops a started command and its process group: SIGTERM, a moment's grace, SIGKILL.
async fn stop_group(child: &mut tokio::process::Child) {
    if let Some(pid) = child
        .id()
        .and_then(|id| rustix::process::Pid::from_raw(id as i32))
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::TERM);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
}

async fn fetch_listing(model: &ModelConfig) -> Result<Listing, SetupError> {
    let mut http = HttpSettings::of(model);
    http.timeout_s = model.timeout_s.min(30);
    http.max_retries = 0;
    http.max_concurrent = None;
    let listed: Vec<ModelCandidate> = match model.backend {
        Backend::Ollama => ollama_listing(&OllamaClient::new(&http, None).map_err(unavailable)?)
            .await
            .map_err(unavailable)?,
        // A Responses API server lists its models as any OpenAI-compatible one does.
        Backend::OpenAi | Backend::OpenAiResponses => {
            let client = OpenAiClient::new(&http).map_err(unavailable)?;
            let mut listed = named(client.list_models().await.map_err(unavailable)?);
            // llama.cpp's server reports the window it gives a request; it serves one model
            // (issue #24).
            if let Some(window) = client.context_window().await {
                for m in &mut listed {
                    m.context_length = Some(window);
                }
            }
            listed
        }
        Backend::Anthropic => named(
            AnthropicClient::new(&http)
                .map_err(unavailable)?
                .list_models()
                .await
                .map_err(unavailable)?,
        ),
    };
    Ok(Arc::new(listed))
}

/// An Ollama server's models, each with what `/api/show` says of it.
async fn ollama_listing(
    client: &OllamaClient,
) -> Result<Vec<ModelCandidate>, fabric_engine::ChatError> {
    let mut out = Vec::new();
    for m in client.list_models().await? {
        let (capabilities, context_length) = client.describe(&m.name).await.unwrap_or_default();
        out.push(ModelCandidate {
            name: m.name,
            parameter_size: m.parameter_size,
            family: m.family,
            capabilities: capabilities.filter(|c| !c.is_empty()),
            context_length,
        });
    }
    Ok(out)
}

/// Candidates known only by name (servers that list no details).
fn named(names: Vec<String>) -> Vec<ModelCandidate> {
    names
        .into_iter()
        .map(|name| ModelCandidate {
            name,
            ..ModelCandidate::default()
        })
        .collect()
}

#[async_trait]
impl ModelResolver for ModelServers {
    async fn start(&self, key: &str) -> Result<(), SetupError> {
        self.ensure_available(key, self.model(key)?).await
    }

    async fn list(&self, key: &str) -> Result<Listing, SetupError> {
        self.models_of(self.model(key)?).await
    }

    async fn pull(&self, key: &str, model: &str) -> Result<(), SetupError> {
        self.pull_onto(self.model(key)?, model).await
    }
}

impl ChatFactory for ModelServers {
    fn chat(&self, key: &str) -> Result<Arc<dyn ChatClient>, SetupError> {
        let model = self.model(key)?;
        let mut chats = self.chats.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(chat) = chats.get(key) {
            return Ok(Arc::clone(chat));
        }
        let chat = chat_client(model).map_err(|e| {
            SetupError::Internal(format!("setting up the client for {}: {e}", model.base_url))
        })?;
        chats.insert(key.to_owned(), Arc::clone(&chat));
        Ok(chat)
    }

    fn missing_api_key(&self, key: &str) -> Option<String> {
        let model = self.models.get(key)?;
        let var = model.missing_api_key()?;
        Some(model.missing_api_key_fix(key, var))
    }
}

/// The chat client of one model key.
pub fn chat_client(model: &ModelConfig) -> Result<Arc<dyn ChatClient>, crate::ClientBuildError> {
    crate::build_client(model.backend, &HttpSettings::of(model), Some(model.num_ctx))
}

/// The embedding client of one model key's server.
pub fn embedding_client(
    model: &ModelConfig,
) -> Result<Arc<dyn EmbeddingClient>, crate::ClientBuildError> {
    crate::build_embedder(model.backend, &HttpSettings::of(model))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use fabric_test_support::{Scenario, ScriptedServer};
    use std::path::Path;

    fn free_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }

    fn servers(yaml: &str) -> ModelServers {
        let settings = Settings::from_text(yaml, Path::new("test.yaml")).unwrap();
        ModelServers::new(&settings, Arc::new(LoggedNotices))
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn issue_41_concurrent_requests_start_a_down_server_once() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("starts");
        let port = free_port();
        let servers = servers(&format!(
            "models:\n  m:\n    base_url: http://127.0.0.1:{port}\n    model: x\n    backend: ollama\ndefault_model_key: m\nrouting_model_key: m\nlocal_llm_start_cmd: [sh, -c, 'echo started >> {}']\nlocal_llm_start_timeout_s: 20\n",
            marker.display()
        ));
        // The fake start command only appends to the marker; the server comes up a moment
        // later, as `ollama serve` would.
        let watched = marker.clone();
        let server = tokio::spawn(async move {
            while !watched.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            ScriptedServer::start_on(Scenario::new(vec![]), ("127.0.0.1", port))
                .await
                .unwrap()
        });
        let start = || servers.start("m");
        let (a, b, c, d) = tokio::join!(start(), start(), start(), start());
        let _server = server.await.unwrap();
        for r in [a, b, c, d] {
            r.unwrap();
        }
        let starts = std::fs::read_to_string(&marker).unwrap();
        assert_eq!(starts.lines().count(), 1, "{starts}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn issue_41_the_listing_is_asked_once_per_endpoint() {
        let server = ScriptedServer::start(Scenario::new(vec![])).await.unwrap();
        let servers = servers(&format!(
            "models:\n  m:\n    base_url: {}\n    model: x\n    backend: ollama\ndefault_model_key: m\nrouting_model_key: m\n",
            server.root_url()
        ));
        let (a, b) = tokio::join!(servers.list("m"), servers.list("m"));
        let c = servers.list("m").await.unwrap();
        assert_eq!(a.unwrap().len(), c.len());
        assert_eq!(b.unwrap().len(), c.len());
        assert_eq!(server.hits("/api/tags"), 1);
    }

    /// Issue #14: runs share their model key's client (its connection pool and TLS roots)
    /// instead of building one each.
    #[test]
    fn issue_14_runs_share_one_client_per_model_key() {
        let servers = servers(
            "models:\n  a:\n    base_url: http://127.0.0.1:9/v1\n    model: m\n    backend: openai\n  b:\n    base_url: http://127.0.0.1:9/v1\n    model: m\n    backend: openai\ndefault_model_key: a\nrouting_model_key: a\n",
        );
        let first = servers.chat("a").unwrap();
        assert!(Arc::ptr_eq(&first, &servers.chat("a").unwrap()));
        assert!(!Arc::ptr_eq(&first, &servers.chat("b").unwrap()));
    }
}
