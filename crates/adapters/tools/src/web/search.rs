//! `web_search`: one query to the configured search service, results as title, URL and
//! snippet.

use std::time::Duration;

use async_trait::async_trait;
use fabric_domain::{ToolSpec, builtin};
use fabric_engine::typed::TypedTool;
use fabric_engine::{ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    SearchProvider, WEB, WebSearchSettings, http_client, off_runtime, read_capped, require_network,
};

/// The most bytes of a search answer read: a page of results is tens of kilobytes.
const MAX_REPLY_BYTES: u64 = 4 * 1024 * 1024;

// Arguments of `web_search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchInput {
    /// What to search for, e.g. "rust async cancellation safety".
    query: String,
    /// How many results to return (1-20); the configured default when left out.
    #[schemars(range(min = 1, max = 20))]
    max_results: Option<u32>,
}

/// The `web_search` tool.
pub(crate) struct WebSearchTool {
    settings: WebSearchSettings,
}

impl WebSearchTool {
    pub(crate) fn new(settings: WebSearchSettings) -> Self {
        Self { settings }
    }
}

#[async_trait]
impl TypedTool for WebSearchTool {
    type Input = SearchInput;

    fn spec(&self) -> ToolSpec {
        let spec = ToolSpec::for_input::<SearchInput>(
            builtin::WEB_SEARCH,
            "Search the web. Returns results with title, url and snippet. Snippets are not sources: fetch_url a result before citing it.",
        )
        .example(json!({"query": "SearXNG JSON API format parameter"}))
        .example(json!({"query": "tokio cancellation safety", "max_results": 5}))
        .annotate(WEB)
        .plan(&[], &["fetch_url"]);
        crate::workflows::attach(spec)
    }

    async fn run(&self, input: SearchInput, ctx: &ToolContext) -> Result<Value, ToolError> {
        require_network(ctx, "web_search")?;
        let query = input.query.trim();
        if query.is_empty() {
            return Err(ToolError::InvalidArguments(
                "`query` is empty; say what to search for".to_owned(),
            ));
        }
        let count = input
            .max_results
            .unwrap_or(self.settings.max_results)
            .clamp(1, 20) as usize;
        let timeout = Duration::from_secs(self.settings.timeout_s);
        let search = self.search(query, count);
        let results = tokio::select! {
            r = tokio::time::timeout(timeout, search) => r.map_err(|_| ToolError::Failed(format!(
                "the search service did not answer within {} s; try again or a simpler query",
                self.settings.timeout_s
            )))??,
            () = ctx.cancel.cancelled() => return Err(ToolError::Failed("cancelled".to_owned())),
        };
        let provider = self.settings.provider.as_str();
        let mut out = json!({"query": query, "provider": provider, "results": results});
        if results_empty(&out) {
            out["note"] = json!("no results; try other words or a broader query");
        }
        Ok(out)
    }
}

fn results_empty(out: &Value) -> bool {
    out["results"].as_array().is_none_or(Vec::is_empty)
}

impl WebSearchTool {
    async fn search(&self, query: &str, count: usize) -> Result<Vec<Value>, ToolError> {
        let client = http_client()?;
        let base = &self.settings.base_url;
        let request = match self.settings.provider {
            SearchProvider::Searxng => {
                let url = parse(
                    &format!("{base}/search"),
                    &[("q", query), ("format", "json")],
                )?;
                client.get(url)
            }
            SearchProvider::Brave => {
                let name = self
                    .settings
                    .api_key_env
                    .as_deref()
                    .unwrap_or("BRAVE_SEARCH_API_KEY");
                let key = std::env::var(name).ok().filter(|k| !k.is_empty()).ok_or_else(|| {
                    ToolError::Failed(format!(
                        "web_search uses the Brave Search API, which needs its key in the environment variable {name}; it is not set (tell the user)"
                    ))
                })?;
                let n = count.to_string();
                let url = parse(
                    &format!("{base}/res/v1/web/search"),
                    &[("q", query), ("count", &n)],
                )?;
                client
                    .get(url)
                    .header("X-Subscription-Token", key)
                    .header(reqwest::header::ACCEPT, "application/json")
            }
        };
        let mut response = request.send().await.map_err(|e| {
            ToolError::Failed(format!(
                "the search service at {base} cannot be reached: {e}"
            ))
        })?;
        let status = response.status();
        if !status.is_success() {
            let hint = match (self.settings.provider, status.as_u16()) {
                (SearchProvider::Searxng, 403) => {
                    "; SearXNG refuses JSON unless `json` is in `search.formats` of its settings.yml"
                }
                (SearchProvider::Brave, 401 | 403) => "; check the Brave API key",
                (_, 429) => "; rate limited, wait before searching again",
                _ => "",
            };
            return Err(ToolError::Failed(format!(
                "the search service answered HTTP {status}{hint}"
            )));
        }
        let (bytes, cut) = read_capped(&mut response, MAX_REPLY_BYTES).await?;
        if cut {
            return Err(ToolError::Failed(format!(
                "the search service's answer is larger than {} MiB, more than a page of results; check web_search.base_url",
                MAX_REPLY_BYTES / (1024 * 1024)
            )));
        }
        let provider = self.settings.provider;
        off_runtime(move || {
            let body: Value = serde_json::from_slice(&bytes).map_err(|e| {
                ToolError::Failed(format!(
                    "the search service sent something that is not JSON: {e}"
                ))
            })?;
            Ok(results(provider, &body, count))
        })
        .await?
    }
}

fn parse(base: &str, params: &[(&str, &str)]) -> Result<reqwest::Url, ToolError> {
    reqwest::Url::parse_with_params(base, params).map_err(|e| {
        ToolError::Failed(format!(
            "the search URL `{base}` is invalid ({e}); fix web_search.base_url"
        ))
    })
}

/// `{title, url, snippet}` from either service's answer; entries without a URL are skipped.
fn results(provider: SearchProvider, body: &Value, count: usize) -> Vec<Value> {
    let (list, snippet_key) = match provider {
        SearchProvider::Searxng => (&body["results"], "content"),
        SearchProvider::Brave => (&body["web"]["results"], "description"),
    };
    list.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| {
                    let url = item["url"].as_str()?;
                    let text = |k: &str| {
                        let raw = item[k].as_str().unwrap_or_default();
                        // Brave marks matches with <strong>; the model wants plain words.
                        super::html::html_to_text(raw).0
                    };
                    Some(json!({"title": text("title"), "url": url, "snippet": text(snippet_key)}))
                })
                .take(count)
                .collect()
        })
        .unwrap_or_default()
}
