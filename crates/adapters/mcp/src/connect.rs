//! Connecting to one MCP server: a child process over stdio, or a streamable HTTP endpoint.
//!
//! A stdio server is started in its own process group, so `npx` and whatever it starts can
//! be killed together. The group is killed synchronously when the connection is dropped
//! ([`GroupGuard`]): on success, error, cancellation and during a panic's unwinding alike,
//! with or without a runtime left to run async cleanup.

use fabric_domain::{McpServerSpec, McpTransport};
use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::service::RunningService;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use crate::error::McpError;
use crate::handler::Handler;
use crate::oauth::{ChallengeSlot, Recording};
use crate::stderr::StderrTail;

/// Variables a stdio server inherits from the fabric besides those its config names: what
/// `npx`, `uvx` and most servers need to find their runtime and cache, and nothing secret.
const BASE_ENV: &[&str] = &["PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TERM"];

/// The client side of one connection.
pub(crate) type Service = RunningService<RoleClient, Handler>;

/// A live connection; dropping it ends the server.
pub(crate) struct Connection {
    /// Shared with the server's tools (weakly): a call drives the 2026-07-28 multi-round
    /// requests (SEP-2322) through the service's handler.
    pub(crate) service: Arc<RunningService<RoleClient, Handler>>,
    /// Declared after `service` so the transport closes first, then the group is killed.
    _guard: Option<GroupGuard>,
    /// The run's share of a connection other runs hold too (ADR-122); dropping it frees it.
    pub(crate) lease: Option<Arc<crate::pool::Lease>>,
}

impl Connection {
    /// A run's share of a pooled 2026-07-28 server's connection: no process or handshake of
    /// its own.
    pub(crate) fn leased(lease: Arc<crate::pool::Lease>) -> Self {
        Self {
            service: lease.process().service.clone(),
            _guard: None,
            lease: Some(lease),
        }
    }
}

/// Kills a server's process group when dropped.
pub(crate) struct GroupGuard {
    pgid: rustix::process::Pid,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        // ESRCH (already gone) is the normal case after a clean shutdown.
        let _ = rustix::process::kill_process_group(self.pgid, rustix::process::Signal::KILL);
    }
}

/// What the binary adds to the command of a stdio server before it is spawned: the
/// parent-death signal of the OS sandbox crate, so a server never outlives the fabric, not
/// even a `kill -9` (issue #26). A plain function, so this crate needs no other adapter.
pub type SpawnHook = fn(&mut std::process::Command);

/// What every connection of a run shares besides the server's spec.
#[derive(Clone, Default)]
pub(crate) struct Extras {
    /// Run on a stdio server's command before it is spawned.
    pub(crate) spawn_hook: Option<SpawnHook>,
    /// Where OAuth tokens are kept; `None`: none are used.
    pub(crate) token_dir: Option<PathBuf>,
    /// Where an HTTP server's authorization challenge is noted, for errors and logins.
    pub(crate) challenge: ChallengeSlot,
    /// Warm stdio processes of a long-lived fabric (issue #45); `None`: started per run.
    pub(crate) pool: Option<Arc<crate::McpPool>>,
}

/// Starts or reaches the server and completes the MCP handshake: `server/discover` first
/// (see [`lifecycle`]). A server that answers it with something else than a discovery (a
/// hand-written legacy server answering every request with `{}`) is started or reached
/// again and gets the `initialize` handshake: rmcp gives up on such an answer instead of
/// falling back.
pub(crate) async fn connect(
    spec: &McpServerSpec,
    handler: Handler,
    tail: Arc<StderrTail>,
    extras: &Extras,
    warm: Option<Spawned>,
) -> Result<Connection, McpError> {
    let explain = |e| crate::oauth::explain(&spec.name, &extras.challenge, e);
    let mode = match &warm {
        Some(w) if w.handshake_only => ClientLifecycleMode::Initialize,
        _ => lifecycle(),
    };
    match connect_with(spec, handler.clone(), tail.clone(), extras, mode, warm).await {
        Ok(connection) => Ok(connection),
        Err(Failed::Discovery(error)) => {
            tracing::debug!(server = %spec.name, %error, "discovery misunderstood; trying the initialize handshake");
            // A process that misunderstood discovery is spent: a fresh one gets the handshake.
            connect_with(
                spec,
                handler,
                tail,
                extras,
                ClientLifecycleMode::Initialize,
                None,
            )
            .await
            .map_err(|f| explain(f.into_error()))
        }
        Err(failed) => Err(explain(failed.into_error())),
    }
}

/// Why a connection attempt failed.
enum Failed {
    /// The server answered `server/discover` with something else than a discovery.
    Discovery(McpError),
    Other(McpError),
}

impl Failed {
    fn into_error(self) -> McpError {
        match self {
            Self::Discovery(e) | Self::Other(e) => e,
        }
    }
}

impl From<McpError> for Failed {
    fn from(error: McpError) -> Self {
        Self::Other(error)
    }
}

/// The handshake's error as [`Failed`], with `detail` added to its message.
fn handshake_failed(
    spec: &McpServerSpec,
    error: rmcp::service::ClientInitializeError,
    detail: String,
) -> Failed {
    let misunderstood = matches!(
        error,
        rmcp::service::ClientInitializeError::ExpectedInitResult(_)
    );
    let error = McpError::Initialize {
        server: spec.name.clone(),
        detail: format!("{error}{detail}"),
    };
    if misunderstood {
        Failed::Discovery(error)
    } else {
        Failed::Other(error)
    }
}

async fn connect_with(
    spec: &McpServerSpec,
    handler: Handler,
    tail: Arc<StderrTail>,
    extras: &Extras,
    lifecycle: ClientLifecycleMode,
    warm: Option<Spawned>,
) -> Result<Connection, Failed> {
    match &spec.transport {
        McpTransport::Stdio { .. } => {
            let spawned = match warm {
                Some(spawned) => spawned,
                None => spawn(spec, extras, &tail)?,
            };
            // The guard lives before the handshake, so a failed or abandoned handshake still
            // kills the group.
            let service = handler
                .serve_with_lifecycle(spawned.process, lifecycle)
                .await
                .map_err(|e| handshake_failed(spec, e, tail.describe()))?;
            Ok(Connection {
                service: Arc::new(service),
                _guard: spawned.guard,
                lease: None,
            })
        }
        McpTransport::Sse {
            url,
            headers,
            bearer_token_env,
        } => {
            let mut map = reqwest::header::HeaderMap::new();
            for (name, value) in header_pairs(spec, headers, bearer_token_env.as_deref())? {
                map.insert(name, value);
            }
            let (sink, stream) = crate::sse_legacy::open(reqwest::Client::new(), url, map)
                .await
                .map_err(|detail| McpError::Initialize {
                    server: spec.name.clone(),
                    detail: detail.to_string(),
                })?;
            let service =
                handler
                    .serve((sink, stream))
                    .await
                    .map_err(|e| McpError::Initialize {
                        server: spec.name.clone(),
                        detail: e.to_string(),
                    })?;
            Ok(Connection {
                service: Arc::new(service),
                _guard: None,
                lease: None,
            })
        }
        McpTransport::Http {
            url,
            headers,
            bearer_token_env,
            oauth,
        } => {
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            let mut custom = HashMap::new();
            for (name, value) in header_pairs(spec, headers, None)? {
                custom.insert(name, value);
            }
            if let Some(name) = bearer_token_env {
                // rmcp adds the `Bearer ` prefix itself.
                let token = std::env::var(name).map_err(|_| McpError::MissingEnv {
                    server: spec.name.clone(),
                    name: name.clone(),
                })?;
                config = config.auth_header(token);
            }
            config = config.custom_headers(custom);
            // Stored OAuth tokens are used unless the config names a token of its own.
            let authorized = match (bearer_token_env, &extras.token_dir) {
                (None, Some(dir)) => {
                    crate::oauth::authorized_client(&spec.name, url, oauth.as_ref(), dir).await?
                }
                _ => None,
            };
            let slot = extras.challenge.clone();
            let service = match authorized {
                Some(inner) => {
                    serve_http(spec, handler, Recording { inner, slot }, config, lifecycle).await?
                }
                None => {
                    let inner = reqwest::Client::new();
                    serve_http(spec, handler, Recording { inner, slot }, config, lifecycle).await?
                }
            };
            Ok(Connection {
                service: Arc::new(service),
                _guard: None,
                lease: None,
            })
        }
    }
}

/// A stdio server's process, started and not spoken to yet: started for a run, or ahead of
/// one by the [`McpPool`](crate::McpPool).
pub(crate) struct Spawned {
    pub(crate) process: TokioChildProcess,
    /// Kills the process group when dropped.
    pub(crate) guard: Option<GroupGuard>,
    /// The server refused `server/discover` when the pool asked it (ADR-117): the run goes
    /// straight to the `initialize` handshake.
    pub(crate) handshake_only: bool,
}

impl Spawned {
    /// Whether the process is still running (not exited, not a zombie); on a system
    /// without `/proc`, assumed running: a dead one then fails its handshake.
    pub(crate) fn alive(&self) -> bool {
        running(self.process.id())
    }
}

/// Whether the process `pid` is still running (not exited, not a zombie); on a system
/// without `/proc`, assumed running.
pub(crate) fn running(pid: Option<u32>) -> bool {
    let Some(pid) = pid else {
        return false;
    };
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis: `Z` zombie, `X` dead.
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next()),
            Some('Z' | 'X')
        ),
        Err(_) => !std::path::Path::new("/proc/self").exists(),
    }
}

/// Starts a stdio server in its own process group with its environment, its stderr
/// followed into `tail`.
pub(crate) fn spawn(
    spec: &McpServerSpec,
    extras: &Extras,
    tail: &Arc<StderrTail>,
) -> Result<Spawned, McpError> {
    let McpTransport::Stdio {
        command,
        args,
        env,
        pass_env,
        cwd,
    } = &spec.transport
    else {
        return Err(McpError::Spawn {
            server: spec.name.clone(),
            command: String::new(),
            detail: "not a stdio server".into(),
        });
    };
    let mut vars: Vec<(String, String)> = BASE_ENV
        .iter()
        .filter_map(|n| std::env::var(n).ok().map(|v| ((*n).to_owned(), v)))
        .collect();
    for name in pass_env {
        let value = std::env::var(name).map_err(|_| McpError::MissingEnv {
            server: spec.name.clone(),
            name: name.clone(),
        })?;
        vars.push((name.clone(), value));
    }
    vars.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut wrap = CommandWrap::with_new(command, |cmd| {
        cmd.args(args)
            .env_clear()
            .envs(vars.iter().map(|(k, v)| (k, v)));
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        if let Some(hook) = extras.spawn_hook {
            hook(cmd.as_std_mut());
        }
    });
    wrap.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    let spawn_error = |e: std::io::Error| McpError::Spawn {
        server: spec.name.clone(),
        command: command.clone(),
        detail: e.to_string(),
    };
    let (process, stderr) = TokioChildProcess::builder(wrap)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    let guard = process
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .and_then(rustix::process::Pid::from_raw)
        .map(|pgid| GroupGuard { pgid });
    if let Some(stderr) = stderr {
        let name = spec.name.clone();
        let tail = tail.clone();
        tokio::spawn(async move { tail.follow(&name, stderr).await });
    }
    Ok(Spawned {
        process,
        guard,
        handshake_only: false,
    })
}

/// The MCP handshake over streamable HTTP through `client`.
async fn serve_http<C>(
    spec: &McpServerSpec,
    handler: Handler,
    client: C,
    config: StreamableHttpClientTransportConfig,
    lifecycle: ClientLifecycleMode,
) -> Result<RunningService<RoleClient, Handler>, Failed>
where
    C: rmcp::transport::streamable_http_client::StreamableHttpClient + Sync,
{
    let transport = StreamableHttpClientTransport::with_client(client, config);
    handler
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .map_err(|e| handshake_failed(spec, e, String::new()))
}

/// The configured headers plus `Authorization: Bearer` from the token variable.
fn header_pairs(
    spec: &McpServerSpec,
    headers: &std::collections::BTreeMap<String, String>,
    bearer_token_env: Option<&str>,
) -> Result<Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)>, McpError> {
    let bad = |name: &str| McpError::BadHeader {
        server: spec.name.clone(),
        name: name.to_owned(),
    };
    let mut pairs = Vec::new();
    for (name, value) in headers {
        let header =
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad(name))?;
        let value = reqwest::header::HeaderValue::from_str(value).map_err(|_| bad(name))?;
        pairs.push((header, value));
    }
    if let Some(var) = bearer_token_env {
        let token = std::env::var(var).map_err(|_| McpError::MissingEnv {
            server: spec.name.clone(),
            name: var.to_owned(),
        })?;
        let value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| bad("authorization"))?;
        pairs.push((reqwest::header::AUTHORIZATION, value));
    }
    Ok(pairs)
}

/// How the fabric opens a connection (issue #29): it asks `server/discover` first and speaks
/// 2026-07-28 with a server that answers it, and falls back to the `initialize` handshake
/// (2025-11-25) with one that does not, as the Python SDK's default client does. The legacy
/// HTTP+SSE transport keeps the handshake only (its servers predate discovery).
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        legacy_version: Some(rmcp::model::ProtocolVersion::V_2025_11_25),
    }
}
