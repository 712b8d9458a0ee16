//! `fabric serve`: the HTTP API (docs/HTTP.md), with the same application function behind
//! it as `fabric run`.

use anyhow::Context;
use fabric_api_http::{ApiConfig, ApiError, AppState, PreparedRun, RunLauncher, RunRequest};
use fabric_config::Settings;
use fabric_core::execute::RunOutcome;
use serde_json::Value;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::app::{self, TaskRequest};
use crate::cli::{Cli, ServeArgs};
use crate::errors::{ModelUnavailable, UsageError};
use crate::wiring;

pub(crate) async fn serve(cli: &Cli, args: &ServeArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
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
    // The first line on stdout is the address, so scripts and tests can use `--port 0`.
    println!("listening on http://{bound}");
    let _ = std::io::stdout().flush();
    if token.is_none() {
        eprintln!("note: no token in {token_env}; every local user can call this API");
    }

    let config = ApiConfig {
        token,
        max_runs_in_flight: settings.server.max_runs_in_flight,
        max_body_bytes: settings.server.max_body_bytes,
        ..ApiConfig::default()
    };
    let store = Arc::new(wiring::store(&settings));
    // MCP over streamable HTTP at /mcp, behind the same bearer token.
    let mcp_cancel = tokio_util::sync::CancellationToken::new();
    // Off loopback a token is required (checked above), so any Host header may reach /mcp.
    let any_host = !addr.ip().is_loopback();
    let mcp = fabric_mcp::http_service(
        super::mcp::server(settings.clone()),
        mcp_cancel.clone(),
        any_host,
    );
    let extra = axum::Router::new().nest_service("/mcp", mcp);
    let launcher = Arc::new(CliLauncher { settings });
    let state = AppState::new(store, launcher, config);
    let shutdown = async move {
        shutdown_signal().await;
        mcp_cancel.cancel();
    };
    fabric_api_http::serve_with(listener, state, extra, shutdown).await?;
    eprintln!("stopped");
    Ok(0)
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
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(e) => {
            tracing::warn!(%e, "cannot listen for SIGTERM; only Ctrl-C stops the server");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    eprintln!("shutting down: no new requests; cancelling runs in flight");
}

/// `pack` may name a task force as on the command line: `a,b`.
fn pack_ids(request: &RunRequest) -> Vec<String> {
    request
        .pack
        .as_deref()
        .map(|p| p.split(',').map(|id| id.trim().to_owned()).collect())
        .unwrap_or_default()
}

/// Prepares HTTP requests with the CLI's own application function.
struct CliLauncher {
    settings: Settings,
}

#[async_trait::async_trait]
impl RunLauncher for CliLauncher {
    fn check(&self, request: &RunRequest) -> Result<(), ApiError> {
        let s = &self.settings;
        if let Some(unknown) = pack_ids(request)
            .iter()
            .find(|id| s.specialist(id).is_none())
        {
            return Err(ApiError::UnknownSpecialist(format!(
                "no specialist `{unknown}`; the specialists are: {}",
                s.specialist_ids().join(", ")
            )));
        }
        if let Some(key) = &request.model_key
            && s.model(key).is_none()
        {
            return Err(ApiError::UnknownModelKey(format!(
                "no model key `{key}`; the configured keys are: {}",
                s.model_keys().join(", ")
            )));
        }
        // A request may narrow the server's permissions, never widen them.
        if request.network_allowed == Some(true) && !s.network_allowed {
            return Err(ApiError::NotPermitted(
                "`network_allowed: true` is refused: this server's config has `network_allowed: false`, and a request may only narrow the server's permissions".to_owned(),
            ));
        }
        if let Some(asked) = request.max_steps
            && asked > s.max_steps
        {
            return Err(ApiError::NotPermitted(format!(
                "`max_steps` {asked} is more than this server allows ({}, its config's `max_steps`); ask for at most {} or leave it out",
                s.max_steps, s.max_steps
            )));
        }
        Ok(())
    }

    async fn prepare(&self, request: RunRequest) -> Result<PreparedRun, ApiError> {
        // `check` has run: the specialists and the model key exist, nothing is widened.
        let pack = pack_ids(&request);
        let prepared = app::prepare(
            &self.settings,
            TaskRequest {
                prompt: request.prompt,
                pack,
                model_key: request.model_key,
                model: None,
                network_allowed: request.network_allowed,
                max_steps: request.max_steps,
                stream: false,
                sandbox: None,
            },
        )
        .await
        .map_err(|e| {
            if let Some(usage) = e.downcast_ref::<UsageError>() {
                ApiError::InvalidRequest(usage.to_string())
            } else if let Some(model) = e.downcast_ref::<ModelUnavailable>() {
                ApiError::ModelUnavailable(model.to_string())
            } else {
                ApiError::Internal(format!("{e:#}"))
            }
        })?;
        Ok(Box::new(prepared))
    }

    fn result_object(&self, outcome: &RunOutcome) -> Value {
        app::result_object(outcome, &self.settings)
    }
}
