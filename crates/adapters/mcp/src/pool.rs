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
//!
//! A process that answered `server/discover` (the stateless 2026-07-28 revision) is not
//! handed to one run: the pool keeps one connection to it and lends it to any number of runs
//! at once, each run on its own route (its roots, answers, notifications; [`crate::mux`],
//! ADR-122), the least loaded of the definition's processes first.
//!
//! Cold arrivals coalesce (ADR-124): a run of a definition with nothing to take while the pool
//! starts a process of it, whose revision is not known yet or is 2026-07-28, waits for that
//! start (within its `startup_timeout_s`) instead of starting its own; the pool remembers each
//! definition's revision for its life, so later cold starts coalesce too.

use fabric_domain::{McpServerSpec, McpTransport};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::connect::{Extras, GroupGuard, Service, Spawned, spawn};
use crate::error::McpError;
use crate::handler::Handler;
use crate::mux::{Routed, Routes};
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

/// A process of a 2026-07-28 server with the one connection the runs share.
pub(crate) struct SharedProcess {
    id: u64,
    pub(crate) service: Arc<Service>,
    pub(crate) routes: Arc<Routes>,
    pub(crate) tail: Arc<StderrTail>,
    /// How many times a share was lent: an idle timer armed before the last loan is stale.
    lent: AtomicU64,
    /// The process's id: a killed process is dead before rmcp notices its connection closed.
    pid: Option<u32>,
    /// Declared after `service`, so the connection closes first, then the group is killed.
    _guard: Option<GroupGuard>,
}

impl SharedProcess {
    fn alive(&self) -> bool {
        !self.service.is_transport_closed() && crate::connect::running(self.pid)
    }
}

/// What a run gets from the pool.
pub(crate) enum Taken {
    /// A process of its own, not spoken to yet (ADR-117).
    Warm(Warm),
    /// A share of a connection other runs may hold at the same time (ADR-122).
    Lease(Arc<Lease>),
}

/// A run's share of a [`SharedProcess`]; dropping it frees the share. When the process
/// stops (a crash, a kill), the run's next call takes a share of another of the pool's
/// processes of the definition ([`Lease::renew`]).
pub(crate) struct Lease {
    process: Mutex<Arc<SharedProcess>>,
    /// The run's route on the connection.
    pub(crate) route: u64,
    /// How many runs held a share when this one took it, itself included.
    pub(crate) sharing: usize,
    /// The run's handler, registered on whichever process serves it.
    handler: Handler,
    spec: McpServerSpec,
    extras: Extras,
    key: String,
    pool: Weak<McpPool>,
}

impl Lease {
    /// The process serving the run now.
    pub(crate) fn process(&self) -> Arc<SharedProcess> {
        crate::source::lock(&self.process).clone()
    }

    /// The connection serving the run; if its process stopped, a share of a live one of
    /// the definition, waiting up to the server's `startup_timeout_s` for the pool to start
    /// one. `None`: none came up.
    pub(crate) async fn renew(&self) -> Option<Arc<Service>> {
        let current = self.process();
        if current.alive() {
            return Some(current.service.clone());
        }
        current.routes.remove(self.route);
        let deadline =
            tokio::time::Instant::now() + Duration::from_secs(self.spec.startup_timeout_s);
        loop {
            let pool = self.pool.upgrade()?;
            if let Some(next) = pool.relend(
                &self.key,
                &self.spec,
                &self.extras,
                &self.handler,
                self.route,
            ) {
                *crate::source::lock(&self.process) = next.clone();
                return Some(next.service.clone());
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let process = self.process();
        process.routes.remove(self.route);
        if process.routes.len() == 0
            && let Some(pool) = self.pool.upgrade()
        {
            pool.arm_idle(&self.key, process.id, process.lent.load(Ordering::Acquire));
        }
    }
}

#[derive(Default)]
struct Slot {
    spares: VecDeque<Spare>,
    /// Processes being started for this slot.
    starting: usize,
    /// Processes whose connection runs share (the definition answered `server/discover`).
    shared: Vec<Arc<SharedProcess>>,
    /// Whether the definition's processes answer `server/discover` (are shared), once one has
    /// said; kept for the pool's life.
    shareable: Option<bool>,
    /// How many starts failed: a run waiting for a start stops waiting when one fails.
    failures: u64,
}

impl Slot {
    /// A share of the least loaded live shared process, registering `handler` on it.
    fn lend(&mut self, handler: &Handler, route: u64) -> Option<(Arc<SharedProcess>, usize)> {
        self.shared.retain(|p| p.alive());
        let process = self.shared.iter().min_by_key(|p| p.routes.len())?.clone();
        process.routes.add(route, handler.clone());
        process.lent.fetch_add(1, Ordering::AcqRel);
        let sharing = process.routes.len();
        Some((process, sharing))
    }

    /// A share of a shared process, else a waiting process that still runs (one that died
    /// while it waited, a crash or a kill, is dropped here).
    fn take(&mut self, handler: &Handler, route: u64) -> Option<Turn> {
        if let Some((process, sharing)) = self.lend(handler, route) {
            return Some(Turn::Lend(process, sharing));
        }
        std::iter::from_fn(|| self.spares.pop_front())
            .find(|spare| spare.warm.spawned.alive())
            .map(|spare| Turn::Spare(spare.warm))
    }

    /// Whether a run that found nothing to take waits for a start under way: its process may
    /// be shared (the revision is 2026-07-28 or not known yet) and no start failed since the
    /// run came (`failures_seen`).
    fn waits(&self, failures_seen: u64) -> bool {
        self.starting > 0 && self.shareable != Some(false) && self.failures == failures_seen
    }

    /// How many processes to start for the definition to have `size`, counted as starting.
    fn reserve(&mut self, size: usize) -> usize {
        self.shared.retain(|p| p.alive());
        let have = self.spares.len() + self.starting + self.shared.len();
        let missing = size.saturating_sub(have);
        self.starting += missing;
        missing
    }
}

/// What a run arriving at a definition's slot does.
enum Turn {
    /// Takes a share of this process, `usize` runs holding one with it.
    Lend(Arc<SharedProcess>, usize),
    /// Takes this process.
    Spare(Warm),
    /// Waits for a start under way.
    Wait,
    /// Starts a process of its own.
    Own,
}

/// What a run got from the pool.
pub(crate) struct Took {
    pub(crate) taken: Taken,
    /// The process was up when the run came: it did not wait for its start.
    pub(crate) warm: bool,
}

/// What [`start_one`] started.
enum Started {
    /// A process for one run (it refused or ignored `server/discover`).
    Spare(Warm),
    /// A process whose connection runs share.
    Shared(Arc<SharedProcess>),
}

/// Warm stdio MCP server processes, shared by the runs of a long-lived fabric.
pub struct McpPool {
    size: usize,
    idle: Duration,
    slots: Mutex<HashMap<String, Slot>>,
    next_id: AtomicU64,
    /// Told when a start ends, for the runs waiting for one.
    started: tokio::sync::Notify,
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
            started: tokio::sync::Notify::new(),
            this: this.clone(),
        })
    }

    /// Whether runs of `spec` are served from the pool.
    pub(crate) fn pools(&self, spec: &McpServerSpec) -> bool {
        self.size > 0 && key(spec).is_some()
    }

    /// A share of a connection of `spec`'s definition where its server answered
    /// `server/discover` (`handler` answers for the run on it), else a warm process if one
    /// waits and still runs; the pool starts others in the background to stay at its size.
    /// With nothing to take while a process that may be shared is being started, waits for
    /// that start (ADR-124; the caller bounds the wait by the server's startup timeout).
    /// `None`: the run starts its own.
    pub(crate) async fn take(
        &self,
        spec: &McpServerSpec,
        extras: &Extras,
        handler: &Handler,
    ) -> Option<Took> {
        let key = key(spec).filter(|_| self.size > 0)?;
        let route = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut failures_seen = None;
        let mut waited = false;
        loop {
            // Registered before the slot is looked at, so a start ending between the look and
            // the wait is not missed.
            let started = self.started.notified();
            tokio::pin!(started);
            started.as_mut().enable();
            let taken = match self.turn(&key, spec, extras, handler, route, &mut failures_seen) {
                Turn::Lend(process, sharing) => Taken::Lease(Arc::new(Lease {
                    process: Mutex::new(process),
                    route,
                    sharing,
                    handler: handler.clone(),
                    spec: spec.clone(),
                    extras: extras.clone(),
                    key: key.clone(),
                    pool: self.this.clone(),
                })),
                Turn::Spare(warm) => Taken::Warm(warm),
                Turn::Own => return None,
                Turn::Wait => {
                    waited = true;
                    started.await;
                    continue;
                }
            };
            return Some(Took {
                taken,
                warm: !waited,
            });
        }
    }

    /// What the run on `route` does now; the pool starts what the definition misses.
    fn turn(
        &self,
        key: &str,
        spec: &McpServerSpec,
        extras: &Extras,
        handler: &Handler,
        route: u64,
        failures_seen: &mut Option<u64>,
    ) -> Turn {
        let (turn, missing) = {
            let mut slots = crate::source::lock(&self.slots);
            let slot = slots.entry(key.to_owned()).or_default();
            let failures = *failures_seen.get_or_insert(slot.failures);
            let taken = slot.take(handler, route);
            let missing = slot.reserve(self.size);
            let turn = taken.unwrap_or(if slot.waits(failures) {
                Turn::Wait
            } else {
                Turn::Own
            });
            (turn, missing)
        };
        self.start(key, spec, extras, missing);
        turn
    }

    /// A share of a live shared process of `key` for the run on `route`, whose process
    /// stopped; the pool starts processes to stay at its size.
    fn relend(
        &self,
        key: &str,
        spec: &McpServerSpec,
        extras: &Extras,
        handler: &Handler,
        route: u64,
    ) -> Option<Arc<SharedProcess>> {
        let lent = crate::source::lock(&self.slots)
            .get_mut(key)
            .and_then(|slot| slot.lend(handler, route));
        self.refill(key, spec, extras);
        lent.map(|(process, _)| process)
    }

    /// Starts processes until the definition has `size` of them, waiting or starting.
    fn refill(&self, key: &str, spec: &McpServerSpec, extras: &Extras) {
        let missing = crate::source::lock(&self.slots)
            .entry(key.to_owned())
            .or_default()
            .reserve(self.size);
        self.start(key, spec, extras, missing);
    }

    /// Starts `count` processes of `key` in the background, each within the server's
    /// startup timeout.
    fn start(&self, key: &str, spec: &McpServerSpec, extras: &Extras, count: usize) {
        for _ in 0..count {
            let pool = self.this.clone();
            let (key, spec, extras) = (key.to_owned(), spec.clone(), extras.clone());
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let started = start_one(&spec, &extras, id).await;
                if let Some(pool) = pool.upgrade() {
                    pool.keep(&key, &spec, started);
                }
            });
        }
    }

    /// Keeps a process started for `key`, notes what its revision says, arms its idle timer
    /// and tells the runs waiting for a start.
    fn keep(&self, key: &str, spec: &McpServerSpec, started: Result<Started, McpError>) {
        let id = self.keep_started(key, spec, started);
        self.started.notify_waiters();
        if let Some(id) = id {
            self.arm_idle(key, id, 0);
        }
    }

    /// Keeps a process started for `key`; its id, `None` when the start failed.
    fn keep_started(
        &self,
        key: &str,
        spec: &McpServerSpec,
        started: Result<Started, McpError>,
    ) -> Option<u64> {
        let mut slots = crate::source::lock(&self.slots);
        let slot = slots.entry(key.to_owned()).or_default();
        slot.starting = slot.starting.saturating_sub(1);
        match started {
            Ok(Started::Spare(warm)) => {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                slot.spares.push_back(Spare { id, warm });
                slot.shareable = Some(false);
                Some(id)
            }
            Ok(Started::Shared(process)) => {
                let id = process.id;
                slot.shared.push(process);
                slot.shareable = Some(true);
                Some(id)
            }
            Err(e) => {
                slot.failures += 1;
                tracing::warn!(server = %spec.name, error = %e, "a warm MCP server did not start; runs start their own");
                None
            }
        }
    }

    /// Stops the process `id` after the idle timeout if no run uses it then.
    fn arm_idle(&self, key: &str, id: u64, lent: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pool = self.this.clone();
        let (key, idle) = (key.to_owned(), self.idle);
        runtime.spawn(async move {
            tokio::time::sleep(idle).await;
            if let Some(pool) = pool.upgrade() {
                pool.retire(&key, id, lent);
            }
        });
    }

    /// Stops the warm process `id` if it still waits, or the shared one if no run holds a
    /// share of it (dropping either kills its group).
    fn retire(&self, key: &str, id: u64, lent: u64) {
        let mut slots = crate::source::lock(&self.slots);
        let Some(slot) = slots.get_mut(key) else {
            return;
        };
        let spare = slot
            .spares
            .iter()
            .position(|s| s.id == id)
            .and_then(|at| slot.spares.remove(at))
            .is_some();
        let before = slot.shared.len();
        slot.shared
            .retain(|p| p.id != id || p.routes.len() > 0 || p.lent.load(Ordering::Acquire) != lent);
        let retired = spare || slot.shared.len() < before;
        drop(slots);
        if retired {
            tracing::debug!(
                key,
                "a warm MCP server waited past its idle timeout; stopped"
            );
        }
    }
}

/// [`start_within`] the server's `startup_timeout_s`: runs may be waiting for this start.
async fn start_one(spec: &McpServerSpec, extras: &Extras, id: u64) -> Result<Started, McpError> {
    let tail = Arc::new(StderrTail::default());
    let limit = Duration::from_secs(spec.startup_timeout_s);
    tokio::time::timeout(limit, start_within(spec, extras, id, tail.clone()))
        .await
        .unwrap_or_else(|_| {
            Err(McpError::StartupTimeout {
                server: spec.name.clone(),
                seconds: spec.startup_timeout_s,
                tail: tail.describe(),
            })
        })
}

/// Starts a process of `spec` and asks it `server/discover`, which opens no session (a
/// 2026-07-28 server answers it, an older one refuses it): the run then skips the question a
/// refusing server already answered, and the server's first request is behind it.
async fn start_within(
    spec: &McpServerSpec,
    extras: &Extras,
    id: u64,
    tail: Arc<StderrTail>,
) -> Result<Started, McpError> {
    let mut spawned = spawn(spec, extras, &tail)?;
    let asked = tokio::time::timeout(DISCOVER_WAIT, discover(&mut spawned.process)).await;
    match asked {
        Ok(Some(false)) => return share(spec, spawned, tail, id).await.map(Started::Shared),
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
    Ok(Started::Spare(Warm { spawned, tail }))
}

/// The connection the runs will share to a process that answered `server/discover`: the
/// 2026-07-28 lifecycle, no session, every request carrying its own context.
async fn share(
    spec: &McpServerSpec,
    spawned: Spawned,
    tail: Arc<StderrTail>,
    id: u64,
) -> Result<Arc<SharedProcess>, McpError> {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let routes = Arc::new(Routes::default());
    let pid = spawned.process.id();
    let transport = Routed {
        inner: spawned.process,
        routes: routes.clone(),
    };
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
    };
    let service = Handler::routing(&spec.name, routes.clone())
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .map_err(|e| McpError::Initialize {
            server: spec.name.clone(),
            detail: format!("{e}{}", tail.describe()),
        })?;
    Ok(Arc::new(SharedProcess {
        id,
        service: Arc::new(service),
        routes,
        tail,
        lent: AtomicU64::new(0),
        pid,
        _guard: spawned.guard,
    }))
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

    #[test]
    fn issue_45_a_run_waits_for_a_cold_start_only_while_its_process_may_be_shared() {
        let mut slot = Slot::default();
        // Nothing being started: nothing to wait for.
        assert!(!slot.waits(0));
        slot.starting = 1;
        // The revision is not known yet: the start may serve every run.
        assert!(slot.waits(0));
        // A start failed since the run came: it starts its own.
        slot.failures = 1;
        assert!(!slot.waits(0));
        assert!(slot.waits(1));
        // A 2026-07-28 definition restarting (after an idle stop, a crash): wait.
        slot.shareable = Some(true);
        assert!(slot.waits(1));
        // A 2025-11-25 definition: each run takes a waiting process or starts its own.
        slot.shareable = Some(false);
        assert!(!slot.waits(1));
    }

    #[test]
    fn issue_45_the_pool_reserves_what_the_definition_misses() {
        let mut slot = Slot::default();
        assert_eq!(slot.reserve(2), 2);
        assert_eq!(slot.starting, 2);
        assert_eq!(slot.reserve(2), 0);
    }
}
