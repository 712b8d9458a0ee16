//! Making the configured model usable before a run: start the local server when it is down,
//! ask the server which models it has, choose one (`fabric_core::models`), pull one when none
//! fits. Answers are cached per endpoint for the life of the process.

use anyhow::{Context, bail};
use fabric_config::{Backend, ModelConfig, Settings};
use fabric_core::models::{ModelCandidate, ModelChoice, choose_model};
use fabric_llm::{HttpSettings, OllamaClient, OpenAiClient, PullProgress};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// The models each endpoint listed, fetched once per process.
type Listing = Arc<Vec<ModelCandidate>>;

fn cache() -> &'static Mutex<HashMap<String, Listing>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Listing>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
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
    let cmd = &settings.local_llm_start_cmd;
    let Some((program, args)) = cmd.split_first() else {
        bail!("`local_llm_start_cmd` is empty; set it to the command that starts the model server");
    };
    eprintln!(
        "no model server answers at {}; starting `{}`",
        model.base_url,
        cmd.join(" ")
    );
    // Detached: its own process group, no stdio tied to ours, so it outlives this run and a
    // Ctrl-C here does not kill it. The child handle is dropped without waiting on purpose.
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(false);
    command.spawn().with_context(|| {
        format!(
            "cannot start `{}` (local_llm_start_cmd); install it or start the model server yourself",
            cmd.join(" ")
        )
    })?;
    let timeout = Duration::from_secs(settings.local_llm_start_timeout_s);
    let started = Instant::now();
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
    }
    bail!(
        "started `{}` but nothing answered at {} within {} s; check that the command starts the server on that address, or raise `local_llm_start_timeout_s`",
        cmd.join(" "),
        model.base_url,
        settings.local_llm_start_timeout_s
    )
}

/// The models an endpoint offers, with capabilities where the server reports them.
pub(crate) async fn list(model: &ModelConfig) -> anyhow::Result<Listing> {
    let key = format!("{:?} {}", model.backend, model.base_url);
    if let Some(hit) = cache().lock().await.get(&key) {
        return Ok(Arc::clone(hit));
    }
    let mut http = HttpSettings::new(model.base_url.clone());
    http.api_key_env = model.api_key_env.clone();
    http.timeout_s = model.timeout_s.min(30);
    http.max_retries = 0;
    let listed: Vec<ModelCandidate> = match model.backend {
        Backend::Ollama => {
            let client = OllamaClient::new(&http, None)?;
            let mut out = Vec::new();
            for m in client.list_models().await? {
                let capabilities = client
                    .capabilities(&m.name)
                    .await
                    .ok()
                    .filter(|c| !c.is_empty());
                out.push(ModelCandidate {
                    name: m.name,
                    parameter_size: m.parameter_size,
                    family: m.family,
                    capabilities,
                });
            }
            out
        }
        Backend::Openai => OpenAiClient::new(&http)?
            .list_models()
            .await?
            .into_iter()
            .map(|name| ModelCandidate {
                name,
                ..ModelCandidate::default()
            })
            .collect(),
    };
    let listed = Arc::new(listed);
    cache().lock().await.insert(key, Arc::clone(&listed));
    Ok(listed)
}

/// Resolves the model name for a configured model: discovery, and a pull when allowed and
/// nothing fits. A server that cannot be asked is not an error here: the run then fails
/// with `llm_error` and a complete runlog, as without discovery.
pub(crate) async fn resolve(
    settings: &Settings,
    model: &ModelConfig,
) -> anyhow::Result<ModelChoice> {
    ensure_available(settings, model).await?;
    let listed = match list(model).await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!("model discovery at {} failed: {e:#}", model.base_url);
            return Ok(ModelChoice {
                model: model.model.clone(),
                reason: format!(
                    "`{}` as configured (the server did not list its models)",
                    model.model
                ),
                substituted: false,
            });
        }
    };
    if model.backend == Backend::Openai {
        // OpenAI-compatible servers do not say which models call tools, and cloud lists are
        // long: never swap a configured model there, only say when it is not listed.
        let listed_here = listed.iter().any(|m| m.name == model.model);
        return Ok(ModelChoice {
            model: model.model.clone(),
            reason: if listed_here || listed.is_empty() {
                format!("`{}` as configured", model.model)
            } else {
                format!(
                    "`{}` as configured (not in the server's model list; it may still answer)",
                    model.model
                )
            },
            substituted: false,
        });
    }
    match choose_model(&model.model, &listed) {
        Ok(choice) => Ok(choice),
        Err(why) if settings.auto_pull_if_missing => {
            let target = settings.auto_pull_model.clone();
            pull(model, &target).await?;
            Ok(ModelChoice {
                reason: format!("{why}; pulled `{target}` (auto_pull_model)"),
                model: target,
                substituted: true,
            })
        }
        Err(why) => bail!("{why}"),
    }
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
    let mut on_line = |p: &PullProgress| {
        if let (Some(total), Some(done)) = (p.total, p.completed) {
            bar.set_length(total);
            bar.set_position(done);
        }
        bar.set_message(format!("{name}: {}", p.status));
        // When stderr is not a terminal indicatif draws nothing; say each status once there.
        if bar.is_hidden() {
            eprintln!(
                "pull {name}: {}{}",
                p.status,
                match (p.completed, p.total) {
                    (Some(c), Some(t)) if t > 0 => format!(" {}%", c * 100 / t),
                    _ => String::new(),
                }
            );
        }
    };
    let result = client.pull(name, &mut on_line).await;
    bar.finish_and_clear();
    result.with_context(|| format!("pulling `{name}`"))?;
    eprintln!("pulled `{name}`");
    cache().lock().await.clear();
    Ok(())
}
