//! `fabric mcp` (stdio) and the `/mcp` endpoint of `fabric serve`: the fabric as an MCP
//! server (docs/MCP.md). Runs go through the same application function as `fabric run`.

use async_trait::async_trait;
use fabric_config::Settings;
use fabric_core::execute::execute_task_force;
use fabric_core::{ChatObserver, RunObserver, RunStore};
use fabric_domain::{EventKind, RunEvent, RunId, RunSummary, runlog};
use fabric_mcp::{FabricMcpServer, FabricService, RunTaskInput};
use fabric_store_fs::FsRunStore;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::app::{self, TaskRequest};
use crate::cli::Cli;
use crate::wiring;

/// `fabric mcp`: serve MCP on stdin/stdout until the client closes it.
pub(crate) async fn mcp(cli: &Cli) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    fabric_mcp::serve_stdio(server(settings))
        .await
        .map_err(anyhow::Error::msg)?;
    Ok(0)
}

/// The MCP server over these settings.
pub(crate) fn server(settings: Settings) -> FabricMcpServer {
    let store = wiring::store(&settings);
    FabricMcpServer::new(Arc::new(McpApp { settings, store }))
}

struct McpApp {
    settings: Settings,
    store: FsRunStore,
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
    ) -> Result<Value, String> {
        let request = TaskRequest {
            prompt: input.prompt,
            pack: input.specialist.into_iter().collect(),
            network_allowed: input.network_allowed,
            ..TaskRequest::default()
        };
        let prepared = app::prepare(&self.settings, request)
            .await
            .map_err(|e| format!("{e:#}"))?;
        let outcome =
            execute_task_force(&self.store, prepared.task_force(), &Forward(events), cancel)
                .await
                .map_err(|e| e.to_string())?;
        Ok(app::result_object(&outcome, &self.settings))
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
            .store
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
}
