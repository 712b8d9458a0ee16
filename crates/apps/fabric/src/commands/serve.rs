//! `fabric serve`: the HTTP API (docs/HTTP.md) and `/mcp`, over the same run service as
//! `fabric run`.

use anyhow::Context;
use fabric_api_http::{ApiConfig, AppState, RequestCeiling};
use fabric_core::service::ServiceConfig;
use std::io::Write;
use std::net::SocketAddr;

use crate::cli::{Cli, ServeArgs};
use crate::errors::UsageError;
use crate::wiring;

pub(crate) async fn serve(cli: &Cli, args: &ServeArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    crate::app::tools::keep_mcp_servers_warm(&settings);
    let (listener, token) = listen(&settings, args).await?;
    let addr = listener.local_addr().context("reading the bound address")?;
    let config = ApiConfig {
        token,
        max_body_bytes: settings.server.max_body_bytes,
        ceiling: RequestCeiling {
            network_allowed: settings.network_allowed,
            max_steps: Some(settings.max_steps),
        },
        metrics_public: settings.server.metrics_public,
        input_timeout: settings
            .server
            .input_timeout_s
            .map(std::time::Duration::from_secs),
        header_timeout: std::time::Duration::from_secs(settings.server.header_timeout_s),
        ..ApiConfig::default()
    };
    let fabric = served_fabric(&settings).await?;
    // Runs a stopped process left unfinished go on here (their clients find them by id).
    // (With a queue, workers continue runs; this node runs none.)
    if settings.server.resume_interrupted && !settings.store.queue {
        continue_interrupted(&fabric).await;
    }
    embed_in_background(fabric.search.clone());
    if let Some(timeout) = settings.server.input_timeout_s {
        end_expired_waits(fabric.service.clone(), timeout);
    }
    // MCP over streamable HTTP at /mcp, behind the same bearer token.
    let mcp_cancel = tokio_util::sync::CancellationToken::new();
    // Off loopback a token is required (checked in `listen`), so any Host header may reach
    // /mcp.
    let any_host = !addr.ip().is_loopback();
    let mcp = fabric_mcp::http_service(
        super::mcp::server(&settings, &fabric),
        mcp_cancel.clone(),
        any_host,
    );
    let extra = axum::Router::new().nest_service("/mcp", mcp);
    let state = AppState::with_search(fabric.service.clone(), fabric.search.clone(), config)
        .with_budget(std::sync::Arc::new(crate::daily::Reports(
            fabric.daily.clone(),
        )))
        .with_agent_card(agent_card(&settings));
    let shutdown = async move {
        shutdown_signal().await;
        mcp_cancel.cancel();
    };
    fabric_api_http::serve_with(listener, state, extra, shutdown).await?;
    fabric.flush_telemetry().await;
    eprintln!("stopped");
    Ok(0)
}

/// Ends, every half of `timeout_s` (at most every 30 s), the runs whose wait for a person's
/// answer has expired (`server.input_timeout_s`, issue #42): an unanswered run ends
/// `unanswered` without waiting for someone to try to answer it.
fn end_expired_waits(service: fabric_core::service::RunService, timeout_s: u64) {
    let every = std::time::Duration::from_millis((timeout_s * 500).clamp(500, 30_000));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            if service.is_shutting_down() {
                return;
            }
            let ended = service.expire_waits().await;
            if ended > 0 {
                tracing::info!(ended, "ended runs whose wait for an answer expired");
            }
        }
    });
}

/// The bound listener and the API token, after refusing to listen off loopback without one.
/// The first line on stdout is the address, so scripts and tests can use `--port 0`.
async fn listen(
    settings: &fabric_config::Settings,
    args: &ServeArgs,
) -> anyhow::Result<(tokio::net::TcpListener, Option<String>)> {
    let host = args.host.as_deref().unwrap_or(&settings.server.host);
    let port = args.port.unwrap_or(settings.server.port);
    let token_env = args
        .token_env
        .as_deref()
        .unwrap_or(&settings.server.api_token_env);
    let token = read_token(token_env)?;
    let addr = resolve(host, port).await?;
    if token.is_none() && !addr.ip().is_loopback() {
        return Err(UsageError(format!(
            "refusing to listen on {addr} without a token: anyone who can reach it could run commands; set the environment variable {token_env} (or name another with --token-env), or listen on 127.0.0.1"
        ))
        .into());
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr().context("reading the bound address")?;
    println!("listening on http://{bound}");
    let _ = std::io::stdout().flush();
    if token.is_none() {
        eprintln!("note: no token in {token_env}; every local user can call this API");
    }
    // With a queue the workers hold the runs; here only their callers.
    if !settings.store.queue {
        let runs = settings.server.max_runs_in_flight as u64;
        if let Some(said) = crate::open_files::warning(runs, "server.max_runs_in_flight") {
            eprintln!("{said}");
        }
    }
    Ok((listener, token))
}

/// One service for HTTP and /mcp (the same in-flight limit and shutdown drain for both); with
/// `store.queue`, runs go to the workers (`fabric worker`) and this process enqueues and
/// follows them.
async fn served_fabric(settings: &fabric_config::Settings) -> anyhow::Result<wiring::Fabric> {
    if settings.store.queue {
        wiring::require_postgres(
            settings,
            "`store.queue: true` needs a shared PostgreSQL store that workers take runs from",
            "or leave `store.queue` out to run tasks in this process",
        )?;
    }
    let mut fabric = wiring::fabric(
        settings,
        ServiceConfig {
            max_runs_in_flight: Some(settings.server.max_runs_in_flight),
            suspend_on_shutdown: settings.server.suspend_on_shutdown,
            ..wiring::served(settings)
        },
    )
    .await?;
    if settings.store.queue {
        let queue: std::sync::Arc<dyn fabric_core::RunQueue> = fabric.store.clone();
        fabric.service = fabric
            .service
            .enqueue_to(queue, settings.store.max_runs_in_flight)
            // A run not claimed within a lease: any live worker with a free slot looks
            // every second, so none is running or all are busy.
            .say_unclaimed_after(std::time::Duration::from_secs(settings.store.lease_s));
    }
    Ok(fabric)
}

/// Continues the runs a stopped process left unfinished, saying which stay interrupted.
async fn continue_interrupted(fabric: &wiring::Fabric) {
    match fabric.service.resume_interrupted(None).await {
        Ok((handles, refused)) => {
            if !handles.is_empty() {
                eprintln!("continuing {} interrupted run(s)", handles.len());
            }
            for (id, error) in refused {
                eprintln!("run {id} stays interrupted for now: {error}");
            }
        }
        Err(error) => eprintln!("warning: cannot look for interrupted runs: {error}"),
    }
}

/// Embeds, in the background, the runs that ended while no embedding server answered;
/// search finds them by text meanwhile.
fn embed_in_background(search: fabric_core::search::RunSearch) {
    tokio::spawn(async move {
        match search.embed_missing(usize::MAX).await {
            Ok(report) if report.stopped.is_some() => tracing::warn!(
                embedded = report.embedded,
                stopped = report.stopped.as_deref().unwrap_or_default(),
                "embedding past runs stopped early; `fabric index rebuild` retries"
            ),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "cannot embed past runs"),
        }
    });
}

/// The token from the named variable; unset means no auth, set but blank is a mistake.
fn read_token(name: &str) -> anyhow::Result<Option<String>> {
    match std::env::var(name) {
        Ok(token) if token.trim().is_empty() => Err(UsageError(format!(
            "the environment variable {name} is set but empty; set a token or unset it"
        ))
        .into()),
        Ok(token) => Ok(Some(token.trim().to_owned())),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(UsageError(format!(
            "the environment variable {name} is not valid UTF-8"
        ))
        .into()),
    }
}

async fn resolve(host: &str, port: u16) -> anyhow::Result<SocketAddr> {
    let mut addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| UsageError(format!("cannot resolve host `{host}`: {e}")))?;
    addrs
        .next()
        .ok_or_else(|| UsageError(format!("host `{host}` has no address")).into())
}

/// SIGTERM or Ctrl-C starts the graceful shutdown.
async fn shutdown_signal() {
    terminated().await;
    eprintln!("shutting down: no new requests; cancelling runs in flight");
}

/// Waits for SIGTERM or Ctrl-C (only Ctrl-C when SIGTERM cannot be listened for).
pub(super) async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(e) => {
            tracing::warn!(%e, "cannot listen for SIGTERM; only Ctrl-C stops this process");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The A2A agent card: one skill per specialist, its keywords as tags.
fn agent_card(settings: &fabric_config::Settings) -> fabric_api_http::AgentCardInfo {
    fabric_api_http::AgentCardInfo {
        name: "agent-fabric".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        description: "Runs tasks with specialist agents on local models: each skill is a specialist; name one in the message's `metadata.specialist`, or leave it to routing.".to_owned(),
        skills: settings
            .specialists
            .iter()
            .map(|s| fabric_api_http::A2aSkill {
                id: s.id.clone(),
                description: s.description.clone(),
                tags: s.keywords.clone(),
                examples: Vec::new(),
            })
            .collect(),
    }
}
