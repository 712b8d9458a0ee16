//! `search_runs`: the one contract of a search over past runs, offered to specialists as a
//! built-in tool (the seed's `cross_run_search`: "what did we do last time?") and by the
//! fabric's MCP server.

use async_trait::async_trait;
use fabric_domain::{RunStatus, ToolAnnotations, ToolSpec, parse_since};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{RunSearch, SearchError, SearchRequest, SearchResults};
use crate::ports::{ToolContext, ToolError};
use crate::typed::TypedTool;

/// The tool's name.
pub const SEARCH_RUNS_TOOL: &str = "search_runs";

/// Most hits one call returns, so an answer stays small enough for a small model's context.
const MAX_HITS: u32 = 20;

/// The input of `search_runs`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRunsInput {
    /// What to look for, in words: it matches prompts, results, tool calls and tool results.
    pub query: String,
    /// Rank by meaning only, not by the words (needs an embedding model).
    #[serde(default)]
    pub semantic: Option<bool>,
    /// Only runs this specialist worked on.
    #[serde(default)]
    pub specialist: Option<String>,
    /// Only runs that ended this way (`completed`, `failed`, ...).
    #[serde(default)]
    pub status: Option<String>,
    /// Only runs started since: a date (`2026-11-01`) or a duration back from now (`7d`).
    #[serde(default)]
    pub since: Option<String>,
    /// How many runs (1-20, default 5).
    #[serde(default)]
    #[schemars(range(min = 1, max = 20))]
    pub limit: Option<u32>,
}

impl SearchRunsInput {
    /// The request it asks for, or [`SearchError::Invalid`] naming the wrong parameter.
    pub fn to_request(&self, now: f64) -> Result<SearchRequest, SearchError> {
        let status = self
            .status
            .as_deref()
            .map(|s| {
                serde_json::from_value::<RunStatus>(Value::String(s.to_owned())).map_err(|_| {
                    SearchError::Invalid(format!(
                        "parameter `status` must be a run status such as completed, failed or cancelled; got `{s}`"
                    ))
                })
            })
            .transpose()?;
        let since = self
            .since
            .as_deref()
            .map(|s| since_parameter(s, now))
            .transpose()?;
        let limit = self.limit.unwrap_or(5);
        if !(1..=MAX_HITS).contains(&limit) {
            return Err(SearchError::Invalid(format!(
                "parameter `limit` must be between 1 and {MAX_HITS}, got {limit}"
            )));
        }
        Ok(SearchRequest {
            text: self.query.clone(),
            semantic: self.semantic.unwrap_or(false),
            specialist: self.specialist.clone(),
            status,
            since,
            limit: limit as usize,
        })
    }
}

/// The contract of `search_runs`.
pub fn search_runs_spec() -> ToolSpec {
    ToolSpec::for_input::<SearchRunsInput>(
        SEARCH_RUNS_TOOL,
        "Search earlier runs of the fabric: what was asked, what was done (tool calls and results) and how it ended. Use it to find how a similar task was solved before.",
    )
    .example(json!({"query": "parse the CSV export"}))
    .example(json!({"query": "deploy script", "status": "completed", "since": "30d", "limit": 3}))
    .annotate(ToolAnnotations {
        read_only: true,
        ..ToolAnnotations::default()
    })
}

/// A tool's `since` parameter (`2026-11-01`, `7d`) as a time, `now` being the time now.
pub fn since_parameter(text: &str, now: f64) -> Result<f64, SearchError> {
    parse_since(text, now).map_err(|e| SearchError::Invalid(format!("parameter `since`: {e}")))
}

/// The hits as the tool and the MCP server answer them: small, one object per run.
pub fn results_json(results: &SearchResults) -> Value {
    let hits: Vec<Value> = results
        .hits
        .iter()
        .map(|hit| {
            json!({
                "run_id": hit.run.id,
                "started_at": hit.run.started_at,
                "status": hit.run.status,
                "specialist_ids": hit.run.specialist_ids,
                "prompt": hit.run.prompt,
                "summary": hit.run.summary,
                "score": hit.score,
                "snippet": hit.snippet,
            })
        })
        .collect();
    json!({"mode": results.mode, "note": results.note, "hits": hits})
}

/// The built-in tool.
pub struct SearchRunsTool {
    search: RunSearch,
}

impl SearchRunsTool {
    /// A tool searching with `search`.
    pub fn new(search: RunSearch) -> Self {
        Self { search }
    }
}

#[async_trait]
impl TypedTool for SearchRunsTool {
    type Input = SearchRunsInput;

    fn spec(&self) -> ToolSpec {
        search_runs_spec()
    }

    async fn run(&self, input: SearchRunsInput, _ctx: &ToolContext) -> Result<Value, ToolError> {
        let found = match input.to_request(crate::unix_now()) {
            Ok(request) => self.search.search(&request).await,
            Err(invalid) => Err(invalid),
        };
        match found {
            Ok(results) => Ok(results_json(&results)),
            Err(SearchError::Invalid(message)) => Err(ToolError::InvalidArguments(message)),
            Err(other) => Err(ToolError::Failed(other.to_string())),
        }
    }
}
