//! What the handlers share: the run service and the server's own limits.

use fabric_core::RunStore;
use fabric_core::search::RunSearch;
use fabric_core::service::RunService;
use std::sync::Arc;
use std::time::Duration;

/// Limits and credentials of one server.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The bearer token every endpoint but `/health` and `/openapi.json` requires; `None`
    /// turns auth off (the binary allows that only on loopback addresses).
    pub token: Option<String>,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// `Retry-After` of a 429, in seconds.
    pub retry_after_s: u64,
    /// The most a request may ask for: a request may only narrow the server's permissions.
    pub ceiling: RequestCeiling,
    /// `GET /metrics` answers without the token (`server.metrics_public`).
    pub metrics_public: bool,
    /// How long a run waits for a person's answer before it ends `unanswered`
    /// (`server.input_timeout_s`); `None`: as long as it takes.
    pub input_timeout: Option<std::time::Duration>,
    /// How long a connection has to send a whole request head (`server.header_timeout_s`):
    /// from its accept for its first request, from the end of the last answer for the next.
    pub header_timeout: std::time::Duration,
}

/// What the server's configuration allows a request to ask for.
#[derive(Debug, Clone, Copy)]
pub struct RequestCeiling {
    /// Whether a request may ask for the network (the config's `network_allowed`).
    pub network_allowed: bool,
    /// The most steps a request may ask for (the config's `max_steps`); `None`: no ceiling.
    pub max_steps: Option<u32>,
}

impl Default for RequestCeiling {
    fn default() -> Self {
        Self {
            network_allowed: true,
            max_steps: None,
        }
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            token: None,
            max_body_bytes: 256 * 1024,
            retry_after_s: 2,
            ceiling: RequestCeiling::default(),
            metrics_public: false,
            input_timeout: None,
            header_timeout: std::time::Duration::from_secs(30),
        }
    }
}

/// The state every handler gets: cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Clone)]
pub(crate) struct Inner {
    pub(crate) service: RunService,
    pub(crate) config: ApiConfig,
    /// Search, stats and pruning over the store's index, when the store has one.
    pub(crate) search: Option<RunSearch>,
    /// Today's spend per model key (`GET /budget`), when the binary provides it.
    pub(crate) budget: Option<Arc<dyn crate::BudgetSource>>,
    /// What the A2A agent card says about this fabric (`/.well-known/agent-card.json`).
    pub(crate) a2a: Option<crate::AgentCardInfo>,
}

impl AppState {
    /// A server's state over the run service.
    pub fn new(service: RunService, config: ApiConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                service,
                config,
                search: None,
                budget: None,
                a2a: None,
            }),
        }
    }

    /// A server's state with search, stats and pruning over the store's index.
    pub fn with_search(service: RunService, search: RunSearch, config: ApiConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                service,
                config,
                search: Some(search),
                budget: None,
                a2a: None,
            }),
        }
    }

    /// With `GET /budget` answered by `source`. Call before the state is shared.
    pub fn with_budget(self, source: Arc<dyn crate::BudgetSource>) -> Self {
        self.edit(|inner| inner.budget = Some(source))
    }

    /// With the A2A agent card saying `info` (its skills: the specialists).
    pub fn with_agent_card(self, info: crate::AgentCardInfo) -> Self {
        self.edit(|inner| inner.a2a = Some(info))
    }

    fn edit(self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| (*shared).clone());
        change(&mut inner);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The run service.
    pub fn service(&self) -> &RunService {
        &self.inner.service
    }

    pub(crate) fn store(&self) -> &Arc<dyn RunStore> {
        self.inner.service.store()
    }

    /// Stops starting runs, cancels those in flight and waits up to `grace` for them to
    /// record their end (`run_failed` / `cancelled`). Returns whether all of them did.
    pub async fn shutdown_runs(&self, grace: Duration) -> bool {
        self.inner.service.shutdown(grace).await
    }

    /// Stops starting runs, abandons the preparations in flight and cancels the runs in
    /// flight (and any started later), without waiting for them.
    pub fn begin_shutdown(&self) {
        self.inner.service.begin_shutdown();
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.inner.service.is_shutting_down()
    }
}
