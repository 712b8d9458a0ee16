//! `fabric mcp` (stdio) and the `/mcp` endpoint of `fabric serve`: the fabric as an MCP
//! server (docs/MCP.md). Runs go through the same application function as `fabric run`.

use async_trait::async_trait;
use fabric_config::Settings;
use fabric_core::search::{RunSearch, SearchRunsInput, results_json};
use fabric_core::service::{RunService, ServiceConfig, Submission, TaskRequest};
use fabric_core::{ChatObserver, RunObserver, StatsGroup, StatsQuery};
use fabric_domain::{EventKind, RunEvent, RunId, RunSummary, parse_duration, parse_since, runlog};
use fabric_mcp::{FabricMcpServer, FabricService, PruneRunsInput, RunStatsInput, RunTaskInput};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::cli::Cli;
use crate::wiring;

/// `fabric mcp`: serve MCP on stdin/stdout until the client closes it.
pub(crate) async fn mcp(cli: &Cli) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    let fabric = wiring::fabric(&settings, ServiceConfig::default()).await?;
    let service = fabric.service.clone();
    let served = fabric_mcp::serve_stdio(server(settings, &fabric)).await;
    // The client closed the connection: runs it started still record their end.
    service.shutdown(std::time::Duration::from_secs(10)).await;
    fabric.flush_telemetry().await;
    served.map_err(anyhow::Error::msg)?;
    Ok(0)
}

/// The MCP server over these settings, starting runs through `service` (shared with
/// `fabric serve`, so its limits and shutdown drain cover MCP runs too).
pub(crate) fn server(settings: Settings, fabric: &wiring::Fabric) -> FabricMcpServer {
    FabricMcpServer::new(Arc::new(McpApp {
        settings,
        service: fabric.service.clone(),
        search: fabric.search.clone(),
    }))
}

struct McpApp {
    settings: Settings,
    service: RunService,
    search: RunSearch,
}

/// Hands every event of a run to the MCP server's progress notifications.
struct Forward(mpsc::Sender<RunEvent>);

impl ChatObserver for Forward {
    fn on_text_delta(&self, _delta: &str) {}
}

#[async_trait]
impl RunObserver for Forward {
    async fn on_event(&self, event: &RunEvent) {
        // Awaited: the run waits for a slow client instead of dropping events; a client
        // that went away closes the channel and the run goes on.
        let _ = self.0.send(event.clone()).await;
    }
}

#[async_trait]
impl FabricService for McpApp {
    async fn run_task(
        &self,
        input: RunTaskInput,
        events: mpsc::Sender<RunEvent>,
        cancel: CancellationToken,
        traceparent: Option<String>,
    ) -> Result<Value, String> {
        let request = TaskRequest {
            prompt: input.prompt,
            pack: input.specialist.into_iter().collect(),
            network_allowed: input.network_allowed,
            ..TaskRequest::default()
        };
        let submission = Submission::new(request)
            .observed(Arc::new(Forward(events)))
            .traced(traceparent);
        let handle = self.service.submit(submission).map_err(|e| e.to_string())?;
        // The client cancelling the request cancels the run by id.
        let (service, id) = (self.service.clone(), handle.id().clone());
        let watcher = tokio::spawn(async move {
            cancel.cancelled().await;
            service.cancel(&id);
        });
        let outcome = handle.outcome().await;
        watcher.abort();
        let outcome = outcome.map_err(|e| e.to_string())?;
        Ok(self.service.result_object(&outcome))
    }

    async fn list_specialists(&self) -> Result<Value, String> {
        let list: Vec<Value> = self
            .settings
            .specialists
            .iter()
            .map(|s| {
                json!({
                    "id": s.id,
                    "description": s.description,
                    "tools": s.tools,
                    "mcp_servers": s.tooling.mcp_servers.iter().map(|m| &m.name).collect::<Vec<_>>(),
                    "delegates": s.tooling.delegates,
                })
            })
            .collect();
        Ok(json!({"specialists": list, "default": self.settings.default_specialist}))
    }

    async fn get_run(&self, run_id: &str) -> Result<Value, String> {
        let id = RunId::parse(run_id).map_err(|e| e.to_string())?;
        let events = self
            .service
            .store()
            .read_events(&id)
            .await
            .map_err(|e| e.to_string())?;
        let summary = RunSummary::from_events(id.clone(), &events);
        let started = events.iter().any(|e| e.kind == EventKind::RunStart);
        // Steps and usage only once the run has ended with a full `RunEnd`, as before.
        let end = events
            .iter()
            .rev()
            .find(|e| e.kind.is_terminal())
            .and_then(|e| e.payload_as::<runlog::RunEnd>().ok());
        Ok(json!({
            "run_id": id,
            "status": summary.status,
            "prompt": started.then_some(&summary.prompt),
            "result": summary.result,
            "reason": summary.reason,
            "steps": end.as_ref().map(|e| e.steps),
            "usage": end.map(|e| e.usage),
            "events": events,
        }))
    }

    async fn search_runs(&self, input: SearchRunsInput) -> Result<Value, String> {
        let request = input.to_request(fabric_core::unix_now())?;
        let results = self
            .search
            .search(&request)
            .await
            .map_err(|e| e.to_string())?;
        Ok(results_json(&results))
    }

    async fn run_stats(&self, input: RunStatsInput) -> Result<Value, String> {
        let by = match input.by.as_deref() {
            None => StatsGroup::default(),
            Some(word) => StatsGroup::parse(word).ok_or_else(|| {
                format!("parameter `by` must be specialist, model or tool; got `{word}`")
            })?,
        };
        let since = input
            .since
            .as_deref()
            .map(|s| {
                parse_since(s, fabric_core::unix_now())
                    .map_err(|e| format!("parameter `since`: {e}"))
            })
            .transpose()?;
        let rows = self
            .search
            .catalog()
            .stats(&StatsQuery {
                by,
                since,
                all: false,
            })
            .await
            .map_err(|e| e.to_string())?;
        Ok(json!({"by": by, "rows": rows}))
    }

    async fn prune_runs(&self, input: PruneRunsInput) -> Result<Value, String> {
        let age = parse_duration(&input.older_than)
            .map_err(|e| format!("parameter `older_than`: {e}"))?;
        let deleted = self
            .search
            .catalog()
            .prune(fabric_core::unix_now() - age)
            .await
            .map_err(|e| e.to_string())?;
        Ok(json!({"deleted": deleted.len(), "run_ids": deleted}))
    }
}
