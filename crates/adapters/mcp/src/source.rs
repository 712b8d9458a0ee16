//! The MCP servers of one specialist in one run, as a growing [`ToolSource`].
//!
//! [`ToolSource::start`] spawns one task per server: connect, hand-shake and list the tools
//! within `startup_timeout_s`. The first model call waits for the servers that are
//! `required` (the run fails without them) and for those whose tools the specialist's
//! `tools` name (the run goes on without one that does not come up, recorded); the others
//! start in the background, and tools that are up later are offered from the next step. Each change (ready, failed,
//! timed out, stopped, tools changed) is an `mcp_server` notice the loop writes to the
//! runlog. Dropping [`McpTools`] (the run is over, however it ended) aborts the tasks and
//! drops every connection, which kills every server's process group.

use async_trait::async_trait;
use fabric_core::ports::SourceError;
use fabric_core::{Tool, ToolContext, ToolNotice, ToolSource};
use fabric_domain::runlog::{McpServer, McpStatus, Payload as _, SkippedTool};
use fabric_domain::{EventKind, MCP_TOOL_PREFIX, McpServerSpec, SpecialistSpec, pattern_matches};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

use crate::connect::{Connection, connect};
use crate::error::McpError;
use crate::handler::{Handler, RunLoan};
use crate::pool::{Taken, Took};
use crate::stderr::StderrTail;
use crate::tool::{Converted, McpTool, convert};

/// Notices kept before the loop reads them; older ones are dropped past this (a server
/// announcing changes in a tight loop must not grow memory without bound).
const MAX_PENDING_NOTICES: usize = 256;

/// Where a server is.
#[derive(Debug, Clone, PartialEq)]
enum Status {
    Starting,
    Ready,
    Down(String),
}

struct Entry {
    spec: McpServerSpec,
    status: watch::Sender<Status>,
    tools: Vec<Arc<dyn Tool>>,
    connection: Option<Connection>,
    tail: Arc<StderrTail>,
    /// The server's last authorization challenge (HTTP servers).
    challenge: crate::oauth::ChallengeSlot,
}

/// What the server tasks and the tools share.
pub(crate) struct Shared {
    entries: Mutex<BTreeMap<String, Entry>>,
    /// The specialist's MCP tool names and patterns (`mcp__github__get_me`, `mcp__github__get_*`).
    patterns: Vec<String>,
    version: AtomicU64,
    notices: Mutex<VecDeque<ToolNotice>>,
    started_at: Instant,
    /// The spawn hook and token directory every connection gets.
    extras: crate::connect::Extras,
    /// Woken when a notice is queued, so the loop records it while a call still runs.
    noticed: tokio::sync::Notify,
    /// The run's workspace and model, lent to the servers' requests once the run starts.
    loan: Mutex<Option<RunLoan>>,
    /// The tool each server is running now, by server: a member settles its calls one at a
    /// time, so the server's progress belongs to it.
    calling: Mutex<BTreeMap<String, String>>,
}

/// While held, `server` is running `tool`.
pub(crate) struct Calling {
    hub: Weak<Shared>,
    server: String,
}

impl Drop for Calling {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            lock(&hub.calling).remove(&self.server);
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock means a panic elsewhere mid-update; the data is still usable here.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// Queues an `mcp_server` notice of `server`, with the fields `details` sets for its
    /// status.
    fn notice(&self, server: &str, status: McpStatus, details: impl FnOnce(&mut McpServer)) {
        let elapsed_ms = u64::try_from(self.started_at.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut notice = McpServer::new(server, status, elapsed_ms);
        details(&mut notice);
        // A notice holds names and texts only, which JSON always holds.
        self.push_notice(EventKind::McpServer, notice.to_json().unwrap_or_default());
    }

    /// Queues an event for the loop to record, and wakes it.
    pub(crate) fn push_notice(&self, kind: EventKind, payload: serde_json::Value) {
        {
            let mut notices = lock(&self.notices);
            if notices.len() == MAX_PENDING_NOTICES {
                notices.pop_front();
            }
            notices.push_back(ToolNotice { kind, payload });
        }
        // A permit is kept when no one waits, so a notice queued just before the loop
        // starts waiting still wakes it.
        self.noticed.notify_one();
    }

    /// Marks `server` as running `tool` until the guard is dropped.
    pub(crate) fn calling(self: &Arc<Self>, server: &str, tool: &str) -> Calling {
        lock(&self.calling).insert(server.to_owned(), tool.to_owned());
        Calling {
            hub: Arc::downgrade(self),
            server: server.to_owned(),
        }
    }

    /// The tool `server` is running, if any.
    pub(crate) fn call_of(&self, server: &str) -> Option<String> {
        lock(&self.calling).get(server).cloned()
    }

    /// The run's workspace, once the run started its servers.
    pub(crate) fn workspace(&self) -> Option<std::path::PathBuf> {
        lock(&self.loan).as_ref().map(|l| l.workspace.clone())
    }

    /// The member's model, once the run started its servers (none outside a loop).
    pub(crate) fn sampler(&self) -> Option<Arc<dyn fabric_core::Sampler>> {
        lock(&self.loan).as_ref().and_then(|l| l.sampler.clone())
    }

    /// Whether the specialist wants this tool: every tool of its servers, unless its
    /// patterns name the server, in which case only the tools they match.
    fn wanted(&self, server: &str, name: &str) -> bool {
        let prefix = format!("{MCP_TOOL_PREFIX}{server}__");
        let mut for_server = self
            .patterns
            .iter()
            .filter(|p| p.starts_with(&prefix))
            .peekable();
        if for_server.peek().is_none() {
            return true;
        }
        for_server.any(|p| pattern_matches(p, name))
    }

    /// Whether the specialist's `tools` name this server's tools (exactly or by pattern).
    fn names_server(&self, server: &str) -> bool {
        let prefix = format!("{MCP_TOOL_PREFIX}{server}__");
        self.patterns.iter().any(|p| p.starts_with(&prefix))
    }

    /// Marks a server as stopped (it crashed or closed its connection): its tools go, and
    /// the notice says so. Returns what the server last wrote to stderr, for messages.
    pub(crate) fn server_stopped(&self, server: &str) -> String {
        let mut entries = lock(&self.entries);
        let Some(entry) = entries.get_mut(server) else {
            return String::new();
        };
        let tail = entry.tail.describe();
        if *entry.status.borrow() == Status::Ready {
            entry.tools.clear();
            entry.connection = None;
            entry.status.send_replace(Status::Down("stopped".into()));
            drop(entries);
            self.version.fetch_add(1, Ordering::AcqRel);
            self.notice(server, McpStatus::Stopped, |n| {
                n.error = Some(format!(
                    "the server closed its connection{tail}; its tools were removed"
                ));
            });
        }
        tail
    }

    /// Servers whose connection closed since the last look are marked stopped.
    fn reap(&self) {
        let closed: Vec<String> = lock(&self.entries)
            .iter()
            .filter(|(_, e)| {
                // A share of a pooled process is renewed by the next call instead.
                e.connection
                    .as_ref()
                    .is_some_and(|c| c.lease.is_none() && c.service.is_transport_closed())
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in closed {
            self.server_stopped(&name);
        }
    }

    /// Lists the server's tools and turns them into fabric tools.
    async fn list(
        self: &Arc<Self>,
        spec: &McpServerSpec,
        service: &Arc<crate::connect::Service>,
        lease: Option<&Arc<crate::pool::Lease>>,
    ) -> Result<(Vec<Arc<dyn Tool>>, Vec<SkippedTool>), McpError> {
        let listed = service
            .list_all_tools()
            .await
            .map_err(|e| McpError::ListTools {
                server: spec.name.clone(),
                detail: e.to_string(),
            })?;
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        let mut skipped = Vec::new();
        for tool in &listed {
            match convert(&spec.name, tool) {
                Converted::Tool(contract, remote) => {
                    if self.wanted(&spec.name, &contract.name) {
                        tools.push(Arc::new(
                            McpTool::new(
                                *contract,
                                &spec.name,
                                remote,
                                Arc::downgrade(service),
                                Duration::from_secs(spec.call_timeout_s),
                                Arc::downgrade(self),
                            )
                            .on_lease(lease),
                        ));
                    }
                }
                Converted::Skipped(remote, reason) => {
                    skipped.push(SkippedTool {
                        tool: remote,
                        reason,
                    });
                }
            }
        }
        Ok((tools, skipped))
    }
}

/// The MCP servers of one specialist for one run.
pub struct McpTools {
    shared: Arc<Shared>,
    started: AtomicBool,
    tasks: Mutex<Vec<AbortHandle>>,
}

impl McpTools {
    /// The servers the specialist declares, not started yet (they start with the run).
    pub fn new(specialist: &SpecialistSpec) -> Self {
        let entries = specialist
            .tooling
            .mcp_servers
            .iter()
            .map(|spec| {
                let (status, _) = watch::channel(Status::Starting);
                let entry = Entry {
                    spec: spec.clone(),
                    status,
                    tools: Vec::new(),
                    connection: None,
                    tail: Arc::new(StderrTail::default()),
                    challenge: crate::oauth::ChallengeSlot::default(),
                };
                (spec.name.clone(), entry)
            })
            .collect();
        Self {
            shared: Arc::new(Shared {
                entries: Mutex::new(entries),
                patterns: specialist
                    .tools
                    .iter()
                    .filter(|t| t.starts_with(MCP_TOOL_PREFIX))
                    .cloned()
                    .collect(),
                version: AtomicU64::new(0),
                notices: Mutex::new(VecDeque::new()),
                started_at: Instant::now(),
                extras: crate::connect::Extras::default(),
                noticed: tokio::sync::Notify::new(),
                loan: Mutex::new(None),
                calling: Mutex::new(BTreeMap::new()),
            }),
            started: AtomicBool::new(false),
            tasks: Mutex::new(Vec::new()),
        }
    }
}

impl McpTools {
    /// Runs `hook` on the command of every stdio server before it is spawned.
    pub fn with_spawn_hook(mut self, hook: crate::connect::SpawnHook) -> Self {
        // Not shared before the run starts its servers: only `new` made this `Arc`.
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.extras.spawn_hook = Some(hook);
        }
        self
    }

    /// Uses the OAuth tokens kept in `dir` (`fabric mcp login`) for the HTTP servers they
    /// were issued for.
    pub fn with_token_dir(mut self, dir: std::path::PathBuf) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.extras.token_dir = Some(dir);
        }
        self
    }

    /// Takes the stdio servers' processes from `pool` where a warm one of the same
    /// definition waits (issue #45, ADR-117); the run still does its own handshake.
    pub fn with_pool(mut self, pool: Arc<crate::McpPool>) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.extras.pool = Some(pool);
        }
        self
    }

    /// What `server` last answered when it refused a request for want of authorization.
    pub fn challenge(&self, server: &str) -> Option<crate::oauth::Challenge> {
        let slot = lock(&self.shared.entries).get(server)?.challenge.clone();
        lock(&slot).clone()
    }
}

impl Drop for McpTools {
    fn drop(&mut self) {
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
        // Dropping the connections kills the servers now, not when the aborted tasks are
        // next polled.
        for entry in lock(&self.shared.entries).values_mut() {
            entry.tools.clear();
            entry.connection = None;
        }
    }
}

/// One server's life: start within the timeout, then relist on every announcement.
async fn run_server(shared: Arc<Shared>, name: String) {
    let Some((spec, tail, challenge)) = lock(&shared.entries)
        .get(&name)
        .map(|e| (e.spec.clone(), e.tail.clone(), e.challenge.clone()))
    else {
        return;
    };
    let extras = crate::connect::Extras {
        challenge,
        ..shared.extras.clone()
    };
    let (changed_tx, mut changed_rx) = mpsc::channel(1);
    let handler = Handler {
        tools_changed: changed_tx,
        server: name.clone(),
        sampling: spec.sampling,
        elicitation: spec.elicitation,
        hub: Arc::downgrade(&shared),
        routes: None,
    };
    let pooled = extras.pool.as_ref().is_some_and(|p| p.pools(&spec));
    // Waiting for the pool's start of the server counts in the startup timeout (ADR-124).
    let started = tokio::time::timeout(Duration::from_secs(spec.startup_timeout_s), async {
        let (took, tail) = take_warm(&shared, &name, &spec, &extras, tail, &handler).await;
        let (connection, was_warm) = connect_warm(&spec, handler, &tail, &extras, took).await?;
        let listed = shared
            .list(&spec, &connection.service, connection.lease.as_ref())
            .await
            .map_err(|e| crate::oauth::explain(&spec.name, &extras.challenge, e))?;
        Ok::<_, McpError>((connection, listed, was_warm))
    })
    .await;
    let (connection, (tools, skipped), was_warm) = match started {
        Ok(Ok(up)) => up,
        Ok(Err(e)) => return fail(&shared, &name, McpStatus::Failed, e.to_string()),
        Err(_) => {
            // The entry's tail: the pooled process's if the run took one, else its own.
            let tail = lock(&shared.entries)
                .get(&name)
                .map(|e| e.tail.describe())
                .unwrap_or_default();
            let e = McpError::StartupTimeout {
                server: name.clone(),
                seconds: spec.startup_timeout_s,
                tail,
            };
            return fail(&shared, &name, McpStatus::Timeout, e.to_string());
        }
    };
    let service = connection.service.clone();
    let lease = connection.lease.clone();
    let sharing = lease.as_ref().map(|l| l.sharing);
    let names: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
    if let Some(entry) = lock(&shared.entries).get_mut(&name) {
        entry.tools = tools;
        entry.connection = Some(connection);
    }
    shared.version.fetch_add(1, Ordering::AcqRel);
    shared.notice(&name, McpStatus::Ready, |n| {
        n.tools = Some(names);
        n.skipped = Some(skipped);
        n.warm = pooled.then_some(was_warm);
        n.shared = sharing;
    });
    // Last, so a run waiting for this required server finds the notice already there.
    if let Some(entry) = lock(&shared.entries).get(&name) {
        entry.status.send_replace(Status::Ready);
    }

    while changed_rx.recv().await.is_some() {
        // A share follows its lease to a restarted process.
        let service = match &lease {
            Some(l) => l.process().service.clone(),
            None => service.clone(),
        };
        match shared.list(&spec, &service, lease.as_ref()).await {
            Ok((tools, skipped)) => {
                let names: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
                if let Some(entry) = lock(&shared.entries).get_mut(&name) {
                    entry.tools = tools;
                }
                shared.version.fetch_add(1, Ordering::AcqRel);
                shared.notice(&name, McpStatus::ToolsChanged, |n| {
                    n.tools = Some(names);
                    n.skipped = Some(skipped);
                });
            }
            Err(e) => shared.notice(&name, McpStatus::ToolsChanged, |n| {
                n.error = Some(e.to_string());
            }),
        }
    }
}

/// A share of a pooled connection or a warm process of the server from the fabric's pool,
/// if it has one (waiting for the pool's start of it, ADR-124), with the tail of the
/// server's stderr: the pooled process's, followed since it started, becomes the entry's.
async fn take_warm(
    shared: &Shared,
    name: &str,
    spec: &McpServerSpec,
    extras: &crate::connect::Extras,
    tail: Arc<StderrTail>,
    handler: &Handler,
) -> (Option<Took>, Arc<StderrTail>) {
    let took = match &extras.pool {
        Some(pool) => pool.take(spec, extras, handler).await,
        None => None,
    };
    let pooled_tail = match took.as_ref().map(|t| &t.taken) {
        Some(Taken::Warm(w)) => w.tail.clone(),
        Some(Taken::Lease(l)) => l.process().tail.clone(),
        None => return (None, tail),
    };
    if let Some(entry) = lock(&shared.entries).get_mut(name) {
        entry.tail = pooled_tail.clone();
    }
    (took, pooled_tail)
}

/// A share of a pooled connection as it is; else connects through the warm process when
/// there is one; if it fails its handshake (it died after it was taken), a process of the
/// run's own is started: a pool never takes a run down. Says whether the connection is
/// the pool's and was up when the run came (not started for it).
async fn connect_warm(
    spec: &McpServerSpec,
    handler: Handler,
    tail: &Arc<StderrTail>,
    extras: &crate::connect::Extras,
    took: Option<Took>,
) -> Result<(Connection, bool), McpError> {
    let (taken, up) = match took {
        Some(Took { taken, warm }) => (Some(taken), warm),
        None => (None, false),
    };
    let warm = match taken {
        Some(Taken::Lease(lease)) => return Ok((Connection::leased(lease), up)),
        Some(Taken::Warm(warm)) => Some(warm),
        None => None,
    };
    let Some(warm) = warm else {
        let connection = connect(spec, handler, tail.clone(), extras, None).await?;
        return Ok((connection, false));
    };
    match connect(
        spec,
        handler.clone(),
        tail.clone(),
        extras,
        Some(warm.spawned),
    )
    .await
    {
        Ok(connection) => Ok((connection, up)),
        Err(error) => {
            tracing::info!(server = %spec.name, %error, "a warm MCP server failed its handshake; starting another");
            let connection = connect(spec, handler, tail.clone(), extras, None).await?;
            Ok((connection, false))
        }
    }
}

fn fail(shared: &Shared, name: &str, status: McpStatus, error: String) {
    tracing::warn!(server = name, "{error}");
    shared.notice(name, status, |n| n.error = Some(error.clone()));
    if let Some(entry) = lock(&shared.entries).get(name) {
        entry.status.send_replace(Status::Down(error));
    }
}

#[async_trait]
impl ToolSource for McpTools {
    async fn start(&self, ctx: &ToolContext) -> Result<(), SourceError> {
        if self.started.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        *lock(&self.shared.loan) = Some(RunLoan {
            workspace: ctx.workspace.clone(),
            sampler: ctx.sampler.clone(),
        });
        // Waited for before the first model call: `required` servers (the run fails without
        // them) and servers whose tools the specialist names (the model must see them on
        // its first step; without them the run goes on, and the notice says why).
        let mut awaited = Vec::new();
        let servers: Vec<(String, McpServerSpec, watch::Receiver<Status>)> =
            lock(&self.shared.entries)
                .iter()
                .map(|(name, e)| (name.clone(), e.spec.clone(), e.status.subscribe()))
                .collect();
        for (name, spec, status) in servers {
            let named = self.shared.names_server(&name);
            self.shared.notice(&name, McpStatus::Starting, |n| {
                n.transport = Some(spec.transport.kind().to_owned());
                n.required = Some(spec.required);
                n.awaited = Some(spec.required || named);
            });
            let task = tokio::spawn(run_server(self.shared.clone(), name.clone()));
            lock(&self.tasks).push(task.abort_handle());
            if spec.required || named {
                awaited.push((name, spec.required, status));
            }
        }
        let mut errors = Vec::new();
        for (name, required, mut status) in awaited {
            // Each server's own task gives up after its `startup_timeout_s`.
            let outcome = status
                .wait_for(|s| *s != Status::Starting)
                .await
                .map(|s| s.clone());
            match outcome {
                Ok(Status::Ready) => {}
                Ok(Status::Down(why)) if required => errors.push(format!(
                    "required MCP server `{name}` is not available: {why}"
                )),
                _ if required => {
                    errors.push(format!("required MCP server `{name}` is not available"))
                }
                // Not required: its `failed`/`timeout` notice is in the runlog; the run goes
                // on with the other tools.
                _ => {}
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(SourceError::Unavailable(errors))
        }
    }

    fn version(&self) -> u64 {
        self.shared.reap();
        self.shared.version.load(Ordering::Acquire)
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        lock(&self.shared.entries)
            .values()
            .flat_map(|e| e.tools.iter().cloned())
            .collect()
    }

    fn take_notices(&self) -> Vec<ToolNotice> {
        lock(&self.shared.notices).drain(..).collect()
    }

    async fn noticed(&self) {
        self.shared.noticed.notified().await;
    }
}
