//! Warm MCP server processes for a long-lived fabric (issue #45, ADR-117).
//!
//! The pool keeps stdio server processes started **ahead** of the runs that will use them,
//! per identical definition (command, arguments, environment with the values of `pass_env`,
//! working directory). A process in the pool has never been spoken to: the run that takes
//! it does its own handshake (`server/discover` or `initialize`), so it has its own session,
//! roots, sampling and elicitation answers and notifications, and the process ends with the
//! run as before. The pool hands out processes, never sessions: nothing one run does to a
//! server is seen by another (seed 002: "pool connections, not state").
//!
//! Bounded: at most `size` warm processes per definition; each one unused for
//! `idle_timeout_s` is stopped; one that died while it waited is dropped at the next take,
//! and a run whose warm process fails its handshake starts one of its own.

use fabric_domain::{McpServerSpec, McpTransport};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::connect::{Extras, Spawned, spawn};
use crate::error::McpError;
use crate::stderr::StderrTail;

/// A process started ahead of a run, with the tail of its stderr.
pub(crate) struct Warm {
    pub(crate) spawned: Spawned,
    pub(crate) tail: Arc<StderrTail>,
}

struct Spare {
    id: u64,
    warm: Warm,
}

#[derive(Default)]
struct Slot {
    spares: VecDeque<Spare>,
    /// Processes being started for this slot.
    starting: usize,
}

/// Warm stdio MCP server processes, shared by the runs of a long-lived fabric.
pub struct McpPool {
    size: usize,
    idle: Duration,
    slots: Mutex<HashMap<String, Slot>>,
    next_id: AtomicU64,
    this: Weak<McpPool>,
}

impl McpPool {
    /// A pool keeping at most `size` warm processes per server definition, each stopped
    /// after `idle` unused.
    pub fn new(size: usize, idle: Duration) -> Arc<Self> {
        Arc::new_cyclic(|this| Self {
            size,
            idle,
            slots: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            this: this.clone(),
        })
    }

    /// Whether runs of `spec` are served from the pool.
    pub(crate) fn pools(&self, spec: &McpServerSpec) -> bool {
        self.size > 0 && key(spec).is_some()
    }

    /// A warm process of `spec`'s definition, if one waits and still runs; the pool starts
    /// another in the background to stay at its size.
    pub(crate) fn take(&self, spec: &McpServerSpec, extras: &Extras) -> Option<Warm> {
        let key = key(spec).filter(|_| self.size > 0)?;
        let warm = {
            let mut slots = crate::source::lock(&self.slots);
            let slot = slots.entry(key.clone()).or_default();
            // A process that died while it waited (a crash, a kill) is dropped here; the
            // run gets another or starts its own.
            std::iter::from_fn(|| slot.spares.pop_front())
                .find(|spare| spare.warm.spawned.alive())
                .map(|spare| spare.warm)
        };
        self.refill(&key, spec, extras);
        warm
    }

    /// Starts processes until the definition has `size` of them, waiting or starting.
    fn refill(&self, key: &str, spec: &McpServerSpec, extras: &Extras) {
        let missing = {
            let mut slots = crate::source::lock(&self.slots);
            let slot = slots.entry(key.to_owned()).or_default();
            let missing = self.size.saturating_sub(slot.spares.len() + slot.starting);
            slot.starting += missing;
            missing
        };
        for _ in 0..missing {
            let pool = self.this.clone();
            let (key, spec, extras) = (key.to_owned(), spec.clone(), extras.clone());
            tokio::spawn(async move {
                let started = start_one(&spec, &extras).await;
                if let Some(pool) = pool.upgrade() {
                    pool.keep(&key, &spec, started);
                }
            });
        }
    }

    /// Keeps a process started for `key` and arms its idle timer.
    fn keep(&self, key: &str, spec: &McpServerSpec, started: Result<Warm, McpError>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut slots = crate::source::lock(&self.slots);
            let slot = slots.entry(key.to_owned()).or_default();
            slot.starting = slot.starting.saturating_sub(1);
            match started {
                Ok(warm) => slot.spares.push_back(Spare { id, warm }),
                Err(e) => {
                    tracing::warn!(server = %spec.name, error = %e, "a warm MCP server did not start; runs start their own");
                    return;
                }
            }
        }
        let pool = self.this.clone();
        let (key, idle) = (key.to_owned(), self.idle);
        tokio::spawn(async move {
            tokio::time::sleep(idle).await;
            if let Some(pool) = pool.upgrade() {
                pool.retire(&key, id);
            }
        });
    }

    /// Stops the warm process `id` if it still waits (dropping it kills its group).
    fn retire(&self, key: &str, id: u64) {
        let retired = crate::source::lock(&self.slots)
            .get_mut(key)
            .and_then(|slot| {
                let at = slot.spares.iter().position(|s| s.id == id)?;
                slot.spares.remove(at)
            });
        if retired.is_some() {
            tracing::debug!(
                key,
                "a warm MCP server waited past its idle timeout; stopped"
            );
        }
    }
}

/// Starts a process of `spec` and asks it `server/discover`, which opens no session (a
/// 2026-07-28 server answers it, an older one refuses it): the run then skips the question a
/// refusing server already answered, and the server's first request is behind it.
async fn start_one(spec: &McpServerSpec, extras: &Extras) -> Result<Warm, McpError> {
    let tail = Arc::new(StderrTail::default());
    let mut spawned = spawn(spec, extras, &tail)?;
    let asked = tokio::time::timeout(DISCOVER_WAIT, discover(&mut spawned.process)).await;
    match asked {
        Ok(Some(refused)) => spawned.handshake_only = refused,
        // No answer: a server that ignores what it does not know, as the run would find
        // after its own 10 s; it gets the handshake.
        Err(_) => spawned.handshake_only = true,
        Ok(None) => {
            return Err(McpError::Initialize {
                server: spec.name.clone(),
                detail: format!("it closed its connection{}", tail.describe()),
            });
        }
    }
    Ok(Warm { spawned, tail })
}

/// How long a warm process may take to answer `server/discover`.
const DISCOVER_WAIT: Duration = Duration::from_secs(10);

/// Sends `server/discover` with the fabric's identity and waits for its answer: `Some(true)`
/// refused, `Some(false)` answered, `None` the connection closed.
async fn discover(process: &mut rmcp::transport::TokioChildProcess) -> Option<bool> {
    use rmcp::model::{
        ClientJsonRpcMessage, ClientRequest, DiscoverRequest, DiscoverRequestParams,
        NumberOrString, ProtocolVersion, RequestMetaObject, ServerJsonRpcMessage,
    };
    use rmcp::transport::Transport;
    let info = crate::handler::client_info();
    let meta = RequestMetaObject::with_client_context(
        ProtocolVersion::V_2026_07_28,
        info.client_info,
        info.capabilities,
    );
    let mut request = DiscoverRequest::new(DiscoverRequestParams {});
    request.extensions.insert(meta);
    let id = NumberOrString::String("fabric-pool-discover".into());
    let message =
        ClientJsonRpcMessage::request(ClientRequest::DiscoverRequest(request), id.clone());
    process.send(message).await.ok()?;
    loop {
        match process.receive().await? {
            ServerJsonRpcMessage::Response(r) if r.id == id => return Some(false),
            ServerJsonRpcMessage::Error(e) if e.id.as_ref() == Some(&id) => return Some(true),
            // Notifications and requests before the answer (a log line at start) are not
            // this question's; a request would wait for the run, which never sees it.
            _ => {}
        }
    }
}

/// The definition a warm process must match: a stdio server that allows pooling, with its
/// command, arguments, environment (`pass_env` by value, as the process would get it) and
/// working directory. `None`: not pooled (`pool: false`, HTTP, a `pass_env` variable unset).
fn key(spec: &McpServerSpec) -> Option<String> {
    let McpTransport::Stdio {
        command,
        args,
        env,
        pass_env,
        cwd,
    } = &spec.transport
    else {
        return None;
    };
    if !spec.pool {
        return None;
    }
    let passed: Option<Vec<(&String, String)>> = pass_env
        .iter()
        .map(|name| std::env::var(name).ok().map(|v| (name, v)))
        .collect();
    serde_json::to_string(&(command, args, env, passed?, cwd)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(command: &str, pool: bool) -> McpServerSpec {
        McpServerSpec {
            name: "s".into(),
            transport: McpTransport::Stdio {
                command: command.into(),
                args: vec!["a".into()],
                env: Default::default(),
                pass_env: Vec::new(),
                cwd: None,
            },
            required: false,
            startup_timeout_s: 30,
            call_timeout_s: 120,
            sampling: true,
            elicitation: Default::default(),
            pool,
        }
    }

    #[test]
    fn issue_45_the_key_is_the_definition_not_the_name() {
        let mut other_name = stdio("node", true);
        other_name.name = "t".into();
        assert_eq!(key(&stdio("node", true)), key(&other_name));
        assert_ne!(key(&stdio("node", true)), key(&stdio("python3", true)));
        assert_eq!(key(&stdio("node", false)), None);
    }
}
