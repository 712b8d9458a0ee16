//! `fetch_url`: one page as readable text, within size and time limits, following redirects
//! one hop at a time so each hop is checked.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use fabric_domain::{ToolSpec, UtcTime, builtin};
use fabric_engine::typed::TypedTool;
use fabric_engine::{ToolContext, ToolError};
use reqwest::Url;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::html::html_to_text;
use super::{FetchSettings, WEB, off_runtime, pinned_client, read_capped, require_network, short};
use crate::text::decode;

// Arguments of `fetch_url`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FetchInput {
    /// The http:// or https:// URL of the page, e.g. from a web_search result.
    url: String,
}

/// The `fetch_url` tool.
pub(crate) struct FetchUrlTool {
    settings: FetchSettings,
}

impl FetchUrlTool {
    pub(crate) fn new(settings: FetchSettings) -> Self {
        Self { settings }
    }
}

/// What kind of text a response holds, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Html,
    Text,
}

#[async_trait]
impl TypedTool for FetchUrlTool {
    type Input = FetchInput;

    fn spec(&self) -> ToolSpec {
        let description = format!(
            "Fetch a web page and return its readable text (HTML is converted; plain text, JSON and XML are returned as they are), with the final url, title and fetched_at time to cite. Binary files such as PDFs and images are refused. Text longer than {} characters is cut, with truncated: true.",
            self.settings.max_text_chars
        );
        let spec = ToolSpec::for_input::<FetchInput>(builtin::FETCH_URL, &description)
            .example(json!({"url": "https://www.rust-lang.org/"}))
            .annotate(WEB)
            .plan(&["web_search"], &["write_file"]);
        crate::workflows::attach(spec)
    }

    async fn run(&self, input: FetchInput, ctx: &ToolContext) -> Result<Value, ToolError> {
        require_network(ctx, "fetch_url")?;
        let url = parse_url(input.url.trim())?;
        let limit = self.settings.timeout_s;
        tokio::select! {
            r = tokio::time::timeout(Duration::from_secs(limit), self.fetch(url.clone())) => {
                r.map_err(|_| ToolError::Failed(format!(
                    "fetching {url} took longer than {limit} s and was stopped; try another source"
                )))?
            }
            () = ctx.cancel.cancelled() => Err(ToolError::Failed("cancelled".to_owned())),
        }
    }
}

impl FetchUrlTool {
    async fn fetch(&self, requested: Url) -> Result<Value, ToolError> {
        let mut url = requested.clone();
        let mut hops = 0;
        let mut response = loop {
            check_destination(&url)?;
            let client = self.checked_client(&url).await?;
            let response = client
                .get(url.clone())
                .header(
                    reqwest::header::ACCEPT,
                    "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.1",
                )
                .send()
                .await
                .map_err(|e| ToolError::Failed(format!("cannot fetch {url}: {}", short(&e))))?;
            if !response.status().is_redirection() {
                break response;
            }
            if hops == self.settings.max_redirects {
                return Err(ToolError::Failed(format!(
                    "{requested} redirects more than {} times (last hop: {url}); try the final address directly or another source",
                    self.settings.max_redirects
                )));
            }
            hops += 1;
            url = next_hop(&url, &response)?;
        };
        let status = response.status();
        if !status.is_success() {
            return Err(ToolError::Failed(format!(
                "{url} answered HTTP {status}; try another source"
            )));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let declared = kind_of(&content_type, &url)?;
        let (bytes, cut) = read_capped(&mut response, self.settings.max_download_bytes).await?;
        let kind = match declared {
            Some(kind) => kind,
            // No Content-Type: text if it looks like text.
            None if bytes.iter().take(1024).any(|b| *b == 0) => {
                return Err(binary(&url, "an undeclared binary type"));
            }
            None => Kind::Text,
        };
        let max_chars = usize::try_from(self.settings.max_text_chars).unwrap_or(usize::MAX);
        let (text, title, text_cut) = off_runtime(move || {
            let (raw, _) = decode(&bytes, cut);
            let (text, title) = match kind {
                Kind::Html => html_to_text(&raw),
                Kind::Text => (raw, None),
            };
            let (text, text_cut) = cap_chars(text, max_chars);
            (text, title, text_cut)
        })
        .await?;
        Ok(json!({
            "url": url.as_str(),
            "requested_url": requested.as_str(),
            "status": status.as_u16(),
            "content_type": content_type,
            "title": title,
            "text": text,
            "truncated": cut || text_cut,
            "fetched_at": now_rfc3339(),
        }))
    }
}

fn parse_url(raw: &str) -> Result<Url, ToolError> {
    let url = Url::parse(raw).map_err(|e| {
        ToolError::InvalidArguments(format!(
            "`{raw}` is not a URL ({e}); give a full http:// or https:// address"
        ))
    })?;
    check_destination(&url)?;
    Ok(url)
}

/// The checks every hop passes before it is requested: http or https, and a host.
fn check_destination(url: &Url) -> Result<(), ToolError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ToolError::Denied {
            event_type: "url_scheme_denied".to_owned(),
            attempted: url.to_string(),
            message: format!(
                "fetch_url reads only http:// and https:// URLs, not `{}:`",
                url.scheme()
            ),
        });
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(ToolError::InvalidArguments(format!("`{url}` has no host")));
    }
    Ok(())
}

impl FetchUrlTool {
    /// Resolves the hop's host, refuses non-public addresses (unless allowed) and returns a
    /// client that connects only to the addresses checked.
    async fn checked_client(&self, url: &Url) -> Result<reqwest::Client, ToolError> {
        let host = url.host_str().unwrap_or_default();
        let port = url.port_or_known_default().unwrap_or(80);
        let addrs = self
            .settings
            .addresses
            .check("fetch_url", url.as_str(), host, port)
            .await?;
        pinned_client(host.trim_start_matches('[').trim_end_matches(']'), &addrs)
    }
}

/// The next URL of a redirect, resolved against the current one.
fn next_hop(url: &Url, response: &reqwest::Response) -> Result<Url, ToolError> {
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            ToolError::Failed(format!(
                "{url} answered HTTP {} without a usable Location header",
                response.status()
            ))
        })?;
    url.join(location).map_err(|e| {
        ToolError::Failed(format!(
            "{url} redirects to `{location}`, which is not a URL ({e})"
        ))
    })
}

/// The kind of text a Content-Type declares; `None` when none is declared; an error for
/// anything that is not text.
fn kind_of(content_type: &str, url: &Url) -> Result<Option<Kind>, ToolError> {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if mime.is_empty() {
        return Ok(None);
    }
    let kind = match mime.as_str() {
        "text/html" | "application/xhtml+xml" => Kind::Html,
        "application/json" | "application/xml" | "application/javascript" => Kind::Text,
        m if m.starts_with("text/") || m.ends_with("+json") || m.ends_with("+xml") => Kind::Text,
        m => return Err(binary(url, m)),
    };
    Ok(Some(kind))
}

fn binary(url: &Url, what: &str) -> ToolError {
    ToolError::Failed(format!(
        "{url} is {what}, not a text page; fetch_url reads HTML, plain text, JSON and XML only. Look for an HTML version of this source"
    ))
}

/// At most `max` characters, cut at a character boundary.
fn cap_chars(text: String, max: usize) -> (String, bool) {
    match text.char_indices().nth(max) {
        Some((at, _)) => (text[..at].to_owned(), true),
        None => (text, false),
    }
}

fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let t = UtcTime::from_unix(secs);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::AddressPolicy;
    use crate::web::tests::marker_server;

    /// Set (to the URL to fetch) only in the child process of the proxy test.
    const CHILD_URL: &str = "FABRIC_TEST_ISSUE_15_FETCH_URL";

    /// The proxy variables reqwest reads, upper and lower case.
    const PROXY_VARS: [&str; 6] = [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ];

    fn ctx() -> ToolContext {
        ToolContext {
            approved: false,
            sampler: None,
            live: None,
            run_id: fabric_domain::RunId::parse("issue-15").unwrap(),
            workspace: std::env::temp_dir(),
            network_allowed: true,
            cancel: tokio_util::sync::CancellationToken::new(),
            lineage: Default::default(),
        }
    }

    /// The environment's proxy must not carry `fetch_url` past its address checks, on the
    /// first request nor on a redirect hop. Setting `HTTP_PROXY` in this process would leak
    /// into every test running beside it, so the test runs itself again as a child process
    /// with the proxy variables set, and the child does the fetch.
    #[tokio::test]
    async fn issue_15_fetch_url_ignores_the_environment_proxy() {
        if let Ok(url) = std::env::var(CHILD_URL) {
            let tool = FetchUrlTool::new(FetchSettings {
                addresses: AddressPolicy {
                    allow_private: false,
                    allow_hosts: vec!["127.0.0.1".to_owned()],
                },
                ..FetchSettings::default()
            });
            let out = tool.run(FetchInput { url }, &ctx()).await.unwrap();
            assert_eq!(out["text"], "TARGET ANSWER", "{out}");
            return;
        }
        let proxy = marker_server("PROXY ANSWER").await;
        let end = marker_server("TARGET ANSWER").await;
        let start = {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let to = format!("http://{end}/end");
            let router = axum::Router::new().fallback(move || async move {
                (
                    axum::http::StatusCode::FOUND,
                    [(axum::http::header::LOCATION, to)],
                )
            });
            tokio::spawn(async move { axum::serve(listener, router).await });
            addr
        };
        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap());
        child
            .args([
                "--exact",
                "web::fetch::tests::issue_15_fetch_url_ignores_the_environment_proxy",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_URL, format!("http://{start}/start"))
            .env_remove("NO_PROXY")
            .env_remove("no_proxy");
        for var in PROXY_VARS {
            child.env(var, format!("http://{proxy}"));
        }
        let output = child.output().await.unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "the child fetch failed:\n{stdout}\n{stderr}"
        );
    }
}
