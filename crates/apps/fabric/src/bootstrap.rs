//! The model servers behind core's `ModelResolver` port: start the local server when it is
//! down, ask a server which models it has, pull one (core's `service::prepare` decides which,
//! and when). Answers are cached per endpoint for the life of the process.
//!
//! Single flight: concurrent requests (`fabric serve`) share each piece of work. Starting a
//! server is serialised per base URL, so a burst of requests against a downed server starts
//! the command once and the others wait for it to answer; and the first listing of an
//! endpoint is fetched once while the others wait for it (concurrent pulls are serialised by
//! core's preparation).

use anyhow::{Context, bail};
use fabric_config::{Backend, ModelConfig, Settings};
use fabric_core::models::ModelCandidate;
use fabric_core::service::prepare::Flights;
use fabric_llm::{HttpSettings, OllamaClient, OpenAiClient, PullProgress};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, OnceCell};

/// The models each endpoint listed, fetched once per process.
type Listing = Arc<Vec<ModelCandidate>>;

/// One cell per endpoint: the first caller fills it while the others wait on it. A failed
/// listing leaves the cell empty, so the next caller asks again.
type ListingCell = Arc<OnceCell<Listing>>;

fn cache() -> &'static std::sync::Mutex<HashMap<String, ListingCell>> {
    static CACHE: OnceLock<std::sync::Mutex<HashMap<String, ListingCell>>> = OnceLock::new();
    CACHE.get_or_init(|| std::sync::Mutex::new(HashMap::new()))
}

/// The cache map; a panic while it was held leaves plain data behind, still usable.
fn cache_map() -> std::sync::MutexGuard<'static, HashMap<String, ListingCell>> {
    cache()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The lock that serialises one kind of work (`start URL`) across the process.
fn flight(key: String) -> Arc<Mutex<()>> {
    static FLIGHTS: OnceLock<Flights> = OnceLock::new();
    FLIGHTS.get_or_init(Flights::default).lock_for(key)
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

/// The model key `model` is configured under, for messages (`quality` when it cannot tell).
fn key_of(settings: &Settings, model: &ModelConfig) -> String {
    settings
        .models
        .iter()
        .find(|(_, m)| *m == model)
        .map_or_else(|| settings.default_model_key.clone(), |(k, _)| k.clone())
}

/// Whether the base URL points at this machine: only then may the fabric start a server.
pub(crate) fn is_local(base_url: &str) -> bool {
    let rest = base_url
        .trim_start_matches("http://")
        .trim_start_matches("https://");
    let host = rest.split(['/', ':']).next().unwrap_or_default();
    matches!(host, "localhost" | "127.0.0.1") || rest.starts_with("[::1]")
}

/// Starts the local model server when it does not answer (`local_llm_ensure_available`,
/// Ollama backends on this machine only), and waits until it does or the timeout passes.
/// One caller at a time per base URL: the others wait, then find the server up.
pub(crate) async fn ensure_available(
    settings: &Settings,
    model: &ModelConfig,
) -> anyhow::Result<()> {
    if !settings.local_llm_ensure_available
        || model.backend != Backend::Ollama
        || !is_local(&model.base_url)
    {
        return Ok(());
    }
    if fabric_llm::probe(&model.base_url, Duration::from_secs(2))
        .await
        .is_ok()
    {
        return Ok(());
    }
    let lock = flight(format!("start {}", model.base_url));
    let _starting = lock.lock().await;
    // Another request may have started it while this one waited.
    if fabric_llm::probe(&model.base_url, Duration::from_secs(2))
        .await
        .is_ok()
    {
        return Ok(());
    }
    let cmd = &settings.local_llm_start_cmd;
    let mut child = start_server(settings, model)?;
    let timeout = Duration::from_secs(settings.local_llm_start_timeout_s);
    eprintln!(
        "no model server answers at {}; started `{}`, waiting up to {} s for it",
        model.base_url,
        cmd.join(" "),
        timeout.as_secs()
    );
    let started = Instant::now();
    let mut told = Duration::ZERO;
    while started.elapsed() < timeout {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if fabric_llm::probe(&model.base_url, Duration::from_secs(1))
            .await
            .is_ok()
        {
            eprintln!(
                "model server is up at {} after {:.1} s",
                model.base_url,
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        // A server that takes long is not silence: say how long, every five seconds.
        if started.elapsed() >= told + Duration::from_secs(5) {
            told = started.elapsed();
            eprintln!(
                "still waiting for `{}` at {}: {} s of {} s",
                cmd.join(" "),
                model.base_url,
                told.as_secs(),
                timeout.as_secs()
            );
        }
    }
    // One last look, so a server that came up at the deadline is not stopped.
    if fabric_llm::probe(&model.base_url, Duration::from_secs(1))
        .await
        .is_ok()
    {
        return Ok(());
    }
    // It never answered: it is not left running behind the error, nor what it started (a
    // wrapper script's children share its process group).
    stop_group(&mut child).await;
    bail!(
        "started `{}` but nothing answered at {} within {} s, so it was stopped again; check that the command starts the server on that address, or raise `local_llm_start_timeout_s`",
        cmd.join(" "),
        model.base_url,
        settings.local_llm_start_timeout_s
    )
}

/// Starts `local_llm_start_cmd` for `model`'s server, in its own process group with no
/// stdio tied to ours; the error says how to get a server when it cannot start.
fn start_server(settings: &Settings, model: &ModelConfig) -> anyhow::Result<tokio::process::Child> {
    let cmd = &settings.local_llm_start_cmd;
    let Some((program, args)) = cmd.split_first() else {
        bail!("`local_llm_start_cmd` is empty; set it to the command that starts the model server");
    };
    // Its own process group, no stdio tied to ours, so a server that comes up outlives this
    // run and a Ctrl-C here does not kill it; one that never answers is stopped by the caller.
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(false);
    match command.spawn() {
        Ok(child) => Ok(child),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && program == "ollama" => {
            bail!(
                "no model server answers at {}, and Ollama is not installed (`ollama` is not on PATH). Either install Ollama (https://ollama.com/download) and pull a tool-capable model (`ollama pull qwen2.5:7b`); or point `models.{}.base_url` in the config at a server that runs (any OpenAI-compatible one with `backend: openai`); or try the fabric with no model at all through the scripted server, as the README shows under \"No model at hand?\"",
                model.base_url,
                key_of(settings, model)
            );
        }
        Err(e) => bail!(
            "cannot start `{}` (local_llm_start_cmd): {e}; install it, start the model server yourself, or change `local_llm_start_cmd`",
            cmd.join(" ")
        ),
    }
}

/// The models an endpoint offers, with capabilities where the server reports them. Asked
/// once per endpoint and process; concurrent first callers share one request.
pub(crate) async fn list(model: &ModelConfig) -> anyhow::Result<Listing> {
    let key = format!("{:?} {}", model.backend, model.base_url);
    let cell = Arc::clone(cache_map().entry(key).or_default());
    let listing = cell.get_or_try_init(|| fetch_listing(model)).await?;
    Ok(Arc::clone(listing))
}

async fn fetch_listing(model: &ModelConfig) -> anyhow::Result<Listing> {
    let mut http = HttpSettings::new(model.base_url.clone());
    http.api_key_env = model.api_key_env.clone();
    http.timeout_s = model.timeout_s.min(30);
    http.max_retries = 0;
    let listed: Vec<ModelCandidate> = match model.backend {
        Backend::Ollama => {
            let client = OllamaClient::new(&http, None)?;
            let mut out = Vec::new();
            for m in client.list_models().await? {
                let (capabilities, context_length) =
                    client.describe(&m.name).await.unwrap_or_default();
                out.push(ModelCandidate {
                    name: m.name,
                    parameter_size: m.parameter_size,
                    family: m.family,
                    capabilities: capabilities.filter(|c| !c.is_empty()),
                    context_length,
                });
            }
            out
        }
        // A Responses API server lists its models as any OpenAI-compatible one does.
        Backend::OpenAi | Backend::OpenAiResponses => {
            let client = OpenAiClient::new(&http)?;
            let mut listed = named(client.list_models().await?);
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
            fabric_llm::AnthropicClient::new(&http)?
                .list_models()
                .await?,
        ),
    };
    Ok(Arc::new(listed))
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

/// Pulls a model with a live progress bar on stderr.
pub(crate) async fn pull(model: &ModelConfig, name: &str) -> anyhow::Result<()> {
    let mut http = HttpSettings::new(model.base_url.clone());
    http.max_retries = 0;
    let client = OllamaClient::new(&http, None)?;
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    eprintln!("pulling `{name}` from {}", client.root());
    let mut last_status = String::new();
    let mut on_line = |p: &PullProgress| {
        if let (Some(total), Some(done)) = (p.total, p.completed) {
            bar.set_length(total);
            bar.set_position(done);
        }
        bar.set_message(format!("{name}: {}", p.status));
        // When stderr is not a terminal indicatif draws nothing; say each status once there
        // (a layer's download sends hundreds of lines with the same status).
        if bar.is_hidden() && p.status != last_status {
            eprintln!("pull {name}: {}", p.status);
            last_status.clone_from(&p.status);
        }
    };
    let result = client.pull(name, &mut on_line).await;
    bar.finish_and_clear();
    result.with_context(|| format!("pulling `{name}`"))?;
    eprintln!("pulled `{name}`");
    cache_map().clear();
    Ok(())
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

    fn settings(yaml: &str) -> Settings {
        Settings::from_text(yaml, Path::new("test.yaml")).unwrap()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn concurrent_requests_start_a_down_server_once() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("starts");
        let port = free_port();
        let settings = settings(&format!(
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
        let model = settings.model("m").unwrap();
        let start = || ensure_available(&settings, model);
        let (a, b, c, d) = tokio::join!(start(), start(), start(), start());
        let _server = server.await.unwrap();
        for r in [a, b, c, d] {
            r.unwrap();
        }
        let starts = std::fs::read_to_string(&marker).unwrap();
        assert_eq!(starts.lines().count(), 1, "{starts}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_listing_is_asked_once_per_endpoint() {
        let server = ScriptedServer::start(Scenario::new(vec![])).await.unwrap();
        let settings = settings(&format!(
            "models:\n  m:\n    base_url: {}\n    model: x\n    backend: ollama\ndefault_model_key: m\nrouting_model_key: m\n",
            server.root_url()
        ));
        let model = settings.model("m").unwrap();
        let (a, b) = tokio::join!(list(model), list(model));
        let c = list(model).await.unwrap();
        assert_eq!(a.unwrap().len(), c.len());
        assert_eq!(b.unwrap().len(), c.len());
        assert_eq!(server.hits("/api/tags"), 1);
    }
}
