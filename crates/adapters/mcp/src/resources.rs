//! Runs as MCP resources (issue #29): `resources/list` pages through the runs, newest first;
//! `resources/templates/list` names the URIs under a run ([`crate::uri::TEMPLATES`]);
//! `resources/read` answers a run's summary, its runlog, the list of its workspace's files,
//! or one file. A run is read as the HTTP API reads it: the live run first (its window has
//! the latest events), else the store. Files are read through the core's
//! [`WorkspaceFiles`] port, whose adapter is the file tools' own confinement, so a path that
//! leads out of the workspace is refused there, not by a second check here.

use std::sync::Arc;

use base64::Engine;
use fabric_core::service::RunService;
use fabric_core::{RunQuery, WorkspaceFiles};
use fabric_domain::{EventPayload, RunEvent, RunId, RunSummary};
use rmcp::ErrorData;
use rmcp::model::{
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate,
};
use serde_json::json;

use crate::McpError;
use crate::uri::{self, Target};

/// Runs per `resources/list` page.
const PAGE: usize = 20;
/// The largest file a resource answers whole.
pub(crate) const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// The most entries the workspace listing walks.
const MAX_LISTED: usize = 2000;
/// How many of the newest runs a run id is completed from.
pub(crate) const COMPLETION_WINDOW: usize = 500;

/// Reads runs and their files for the MCP server.
#[derive(Clone)]
pub(crate) struct RunResources {
    service: RunService,
    files: Arc<dyn WorkspaceFiles>,
}

impl RunResources {
    pub(crate) fn new(service: RunService, files: Arc<dyn WorkspaceFiles>) -> Self {
        Self { service, files }
    }

    /// A page of runs, newest first, after the run `cursor` names.
    pub(crate) async fn list(
        &self,
        cursor: Option<&str>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let before = cursor
            .map(|c| {
                RunId::parse(c).map_err(|_| {
                    ErrorData::invalid_params(
                        format!(
                            "cursor `{c}` is not one this server gave; list again without a cursor"
                        ),
                        None,
                    )
                })
            })
            .transpose()?;
        let query = RunQuery {
            limit: PAGE + 1,
            before,
            ..RunQuery::default()
        };
        let mut runs = self
            .service
            .store()
            .list_runs(&query)
            .await
            .map_err(|e| internal(&McpError::Store(e)))?;
        let more = runs.len() > PAGE;
        runs.truncate(PAGE);
        let mut page = ListResourcesResult::with_all_items(runs.iter().map(listed).collect());
        if more {
            page.next_cursor = runs.last().map(|r| r.id.to_string());
        }
        Ok(page)
    }

    /// `resources/read` of `uri`.
    pub(crate) async fn read(&self, uri: &str) -> Result<ReadResourceResult, ErrorData> {
        let target = uri::parse(uri)?;
        let events = self.events(target.run(), uri).await?;
        let contents = match &target {
            Target::Run(id) => {
                let summary = RunSummary::from_events(id.clone(), &events);
                json_contents(uri, &json!(summary))
            }
            Target::Runlog(_) => {
                let mut text = String::new();
                for event in &events {
                    // A runlog event always serialises: its payload is JSON already.
                    text.push_str(&serde_json::to_string(event).unwrap_or_default());
                    text.push('\n');
                }
                ResourceContents::text(text, uri).with_mime_type("application/jsonl")
            }
            Target::Files(_) => {
                let workspace = workspace_of(uri, &events)?;
                let (files, truncated) = self
                    .files
                    .list(&workspace, MAX_LISTED)
                    .await
                    .map_err(|e| refused(uri, &e))?;
                json_contents(uri, &json!({"files": files, "truncated": truncated}))
            }
            Target::File(_, path) => {
                let workspace = workspace_of(uri, &events)?;
                let bytes = self
                    .files
                    .read(&workspace, path, MAX_FILE_BYTES)
                    .await
                    .map_err(|e| refused(uri, &e))?;
                file_contents(uri, path, bytes)
            }
        };
        Ok(ReadResourceResult::new(vec![contents]))
    }

    /// The ids among the newest [`COMPLETION_WINDOW`] runs that start with `prefix`, newest
    /// first.
    pub(crate) async fn run_ids(&self, prefix: &str) -> Result<Vec<String>, ErrorData> {
        let query = RunQuery {
            limit: COMPLETION_WINDOW,
            ..RunQuery::default()
        };
        let runs = self
            .service
            .store()
            .list_runs(&query)
            .await
            .map_err(|e| internal(&McpError::Store(e)))?;
        Ok(runs
            .into_iter()
            .map(|r| r.id.to_string())
            .filter(|id| id.starts_with(prefix))
            .collect())
    }

    /// The paths of run `id`'s workspace files that start with `prefix`.
    pub(crate) async fn file_paths(
        &self,
        id: &RunId,
        prefix: &str,
    ) -> Result<Vec<String>, ErrorData> {
        let uri = format!("{}/files", uri::of_run(id));
        let events = self.events(id, &uri).await?;
        let workspace = workspace_of(&uri, &events)?;
        let (files, _) = self
            .files
            .list(&workspace, MAX_LISTED)
            .await
            .map_err(|e| refused(&uri, &e))?;
        Ok(files
            .into_iter()
            .filter(|f| f.starts_with(prefix))
            .collect())
    }

    /// The events of run `id`: the live run's, else the store's.
    pub(crate) async fn events(&self, id: &RunId, uri: &str) -> Result<Vec<RunEvent>, ErrorData> {
        if let Some(run) = self.service.follow(id).await {
            return Ok(run.events().await);
        }
        match self.service.store().read_events(id).await {
            Ok(events) => Ok(events),
            Err(fabric_core::StoreError::NotFound(_)) => Err(ErrorData::resource_not_found(
                format!(
                    "resource `{uri}`: no run `{id}`; resources/list names the runs that exist"
                ),
                crate::uri::not_found_data(uri),
            )),
            Err(e) => Err(internal(&McpError::Store(e))),
        }
    }
}

/// The templates of the URIs under a run.
pub(crate) fn templates() -> ListResourceTemplatesResult {
    ListResourceTemplatesResult::with_all_items(
        uri::TEMPLATES
            .iter()
            .map(|(template, name, description, mime)| {
                ResourceTemplate::new(*template, *name)
                    .with_description(*description)
                    .with_mime_type(*mime)
            })
            .collect(),
    )
}

/// A run as `resources/list` shows it.
fn listed(run: &RunSummary) -> Resource {
    let mut title: String = run.prompt.chars().take(80).collect();
    if title.len() < run.prompt.len() {
        title.push('…');
    }
    let description = match &run.summary {
        Some(summary) => format!("{}: {summary}", run.status),
        None => run.status.to_string(),
    };
    Resource::new(uri::of_run(&run.id), run.id.to_string())
        .with_title(title)
        .with_description(description)
        .with_mime_type("application/json")
}

fn json_contents(uri: &str, value: &serde_json::Value) -> ResourceContents {
    ResourceContents::text(value.to_string(), uri).with_mime_type("application/json")
}

/// A file's bytes: text when they are UTF-8, else base64.
fn file_contents(uri: &str, path: &str, bytes: Vec<u8>) -> ResourceContents {
    match String::from_utf8(bytes) {
        Ok(text) => ResourceContents::text(text, uri).with_mime_type(text_mime(path)),
        Err(e) => {
            let blob = base64::engine::general_purpose::STANDARD.encode(e.as_bytes());
            ResourceContents::blob(blob, uri).with_mime_type("application/octet-stream")
        }
    }
}

/// The MIME type of a text file, by its extension.
fn text_mime(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("json") => "application/json",
        Some("md") => "text/markdown",
        Some("html" | "htm") => "text/html",
        Some("csv") => "text/csv",
        _ => "text/plain",
    }
}

/// Where run's workspace is, from its `run_start` event.
fn workspace_of(uri: &str, events: &[RunEvent]) -> Result<std::path::PathBuf, ErrorData> {
    events
        .iter()
        .find_map(|e| match &e.payload {
            EventPayload::RunStart(start) => Some(start.workspace.clone()),
            _ => None,
        })
        .ok_or_else(|| {
            ErrorData::resource_not_found(
                format!("resource `{uri}`: the run has not recorded its start yet, so it has no workspace; read it again in a moment"),
                crate::uri::not_found_data(uri),
            )
        })
}

/// A workspace read refused or failed, as "invalid params" with the reader's words (a path
/// out of the workspace, no such file, too large).
fn refused(uri: &str, error: &fabric_core::ToolError) -> ErrorData {
    ErrorData::invalid_params(format!("resource `{uri}`: {error}"), None)
}

fn internal(error: &McpError) -> ErrorData {
    ErrorData::internal_error(error.to_string(), None)
}
