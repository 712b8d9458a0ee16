//! The web tools against local fixture servers on 127.0.0.1, never the internet.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use fabric_core::{Tool, ToolContext, ToolError};
use fabric_domain::RunId;
use fabric_tools::{
    FetchSettings, NoOsSandbox, ProcessSandbox, SearchProvider, ToolPolicy, WebSearchSettings,
    builtin_tool,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

fn ctx(network_allowed: bool) -> ToolContext {
    ToolContext {
        approved: false,
        sampler: None,
        live: None,
        run_id: RunId::parse("test-run").unwrap(),
        workspace: std::env::temp_dir(),
        network_allowed,
        cancel: CancellationToken::new(),
        lineage: Default::default(),
    }
}

fn tool(name: &str, policy: ToolPolicy) -> Arc<dyn Tool> {
    let sandbox: Arc<dyn ProcessSandbox> = Arc::new(NoOsSandbox);
    builtin_tool(name, &Arc::new(policy), &sandbox).unwrap()
}

/// The fixtures listen on 127.0.0.1, which fetch_url refuses unless allowed: opt in.
fn loopback_fetch() -> FetchSettings {
    FetchSettings {
        addresses: fabric_tools::AddressPolicy {
            allow_private: false,
            allow_hosts: vec!["127.0.0.1".to_owned()],
        },
        ..FetchSettings::default()
    }
}

fn fetcher(fetch: FetchSettings) -> Arc<dyn Tool> {
    tool(
        "fetch_url",
        ToolPolicy {
            fetch,
            ..ToolPolicy::default()
        },
    )
}

async fn fetch(tool: &Arc<dyn Tool>, url: &str) -> Result<Value, ToolError> {
    tool.call(json!({"url": url}), &ctx(true)).await
}

fn page(content_type: &'static str, body: impl Into<String>) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body.into()).into_response()
}

fn redirect(to: String) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
}

#[tokio::test]
async fn searxng_results_are_parsed() {
    let seen = Arc::new(Mutex::new(String::new()));
    let seen2 = Arc::clone(&seen);
    let base = serve(Router::new().route(
        "/search",
        get(move |q: axum::extract::RawQuery| async move {
            *seen2.lock().unwrap() = q.0.unwrap_or_default();
            axum::Json(json!({"results": [
                {"url": "https://a.example/", "title": "A &amp; B", "content": "first"},
                {"title": "no url"},
                {"url": "https://b.example/", "title": "B", "content": "second"}
            ]}))
        }),
    ))
    .await;
    let policy = ToolPolicy {
        web_search: WebSearchSettings {
            base_url: base,
            ..WebSearchSettings::default()
        },
        ..ToolPolicy::default()
    };
    let out = tool("web_search", policy)
        .call(json!({"query": "rust tokio", "max_results": 5}), &ctx(true))
        .await
        .unwrap();
    assert_eq!(out["provider"], "searxng");
    assert_eq!(
        out["results"],
        json!([
            {"title": "A & B", "url": "https://a.example/", "snippet": "first"},
            {"title": "B", "url": "https://b.example/", "snippet": "second"}
        ])
    );
    let query = seen.lock().unwrap().clone();
    assert!(
        query.contains("q=rust+tokio") && query.contains("format=json"),
        "{query}"
    );
}

#[tokio::test]
async fn brave_sends_the_key_from_the_named_variable() {
    // Tests cannot set variables (edition 2024 makes that unsafe, and unsafe is forbidden),
    // so the key is one that is always set: `PATH`. The server accepts exactly its value.
    let expected = std::env::var("PATH").unwrap();
    let base = serve(Router::new().route(
        "/res/v1/web/search",
        get(move |headers: HeaderMap| async move {
            let token = headers.get("x-subscription-token").and_then(|v| v.to_str().ok());
            if token != Some(expected.as_str()) {
                return StatusCode::UNAUTHORIZED.into_response();
            }
            axum::Json(json!({"web": {"results": [
                {"url": "https://c.example/", "title": "C", "description": "a <strong>match</strong>"}
            ]}}))
            .into_response()
        }),
    ))
    .await;
    let settings = |env: &str| WebSearchSettings {
        provider: SearchProvider::Brave,
        base_url: base.clone(),
        api_key_env: Some(env.to_owned()),
        ..WebSearchSettings::default()
    };
    let brave = tool(
        "web_search",
        ToolPolicy {
            web_search: settings("PATH"),
            ..ToolPolicy::default()
        },
    );
    let out = brave.call(json!({"query": "x"}), &ctx(true)).await.unwrap();
    assert_eq!(out["provider"], "brave");
    assert_eq!(
        out["results"],
        json!([{"title": "C", "url": "https://c.example/", "snippet": "a match"}])
    );
    let missing = tool(
        "web_search",
        ToolPolicy {
            web_search: settings("FABRIC_TEST_NO_SUCH_KEY"),
            ..ToolPolicy::default()
        },
    );
    let e = missing
        .call(json!({"query": "x"}), &ctx(true))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("FABRIC_TEST_NO_SUCH_KEY"), "{e}");
}

#[tokio::test]
async fn html_is_fetched_as_text_with_title_and_time() {
    let base = serve(Router::new().route(
        "/doc",
        get(|| async {
            page(
                "text/html; charset=utf-8",
                "<html><head><title>Doc</title><script>x()</script></head><body><nav>menu</nav><h2>Part</h2><p>Body text.</p></body></html>",
            )
        }),
    ))
    .await;
    let out = fetch(&fetcher(loopback_fetch()), &format!("{base}/doc"))
        .await
        .unwrap();
    assert_eq!(out["title"], "Doc");
    assert_eq!(out["text"], "## Part\n\nBody text.");
    assert_eq!(out["truncated"], false);
    assert!(out["fetched_at"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn redirects_are_followed_up_to_the_limit() {
    let base = Arc::new(Mutex::new(String::new()));
    let b = Arc::clone(&base);
    let router = Router::new()
        .route(
            "/r/{n}",
            get(move |axum::extract::Path(n): axum::extract::Path<u32>| {
                let b = b.lock().unwrap().clone();
                async move {
                    if n == 0 {
                        page("text/plain", "arrived")
                    } else {
                        redirect(format!("{b}/r/{}", n - 1))
                    }
                }
            }),
        )
        .route(
            "/ftp",
            get(|| async { redirect("ftp://example.com/x".to_owned()) }),
        );
    let url = serve(router).await;
    *base.lock().unwrap() = url.clone();
    let tool = fetcher(FetchSettings {
        max_redirects: 3,
        ..loopback_fetch()
    });
    let out = fetch(&tool, &format!("{url}/r/3")).await.unwrap();
    assert_eq!(out["text"], "arrived");
    assert_eq!(out["url"], format!("{url}/r/0"));
    assert_eq!(out["requested_url"], format!("{url}/r/3"));
    let e = fetch(&tool, &format!("{url}/r/4")).await.unwrap_err();
    assert!(e.to_string().contains("redirects more than 3 times"), "{e}");
    let e = fetch(&tool, &format!("{url}/ftp")).await.unwrap_err();
    assert!(matches!(e, ToolError::Denied { .. }), "{e}");
    assert!(e.to_string().contains("http:// and https://"), "{e}");
}

#[tokio::test]
async fn binaries_are_refused() {
    let base = serve(Router::new().route(
        "/file.pdf",
        get(|| async { page("application/pdf", "%PDF-1.7") }),
    ))
    .await;
    let e = fetch(&fetcher(loopback_fetch()), &format!("{base}/file.pdf"))
        .await
        .unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains("application/pdf") && e.contains("not a text page"),
        "{e}"
    );
}

#[tokio::test]
async fn downloads_and_text_are_capped() {
    let base = serve(Router::new().route(
        "/big",
        get(|| async { page("text/plain", "x".repeat(3 * 1024 * 1024)) }),
    ))
    .await;
    let tool = fetcher(FetchSettings {
        max_download_bytes: 4096,
        max_text_chars: 1000,
        ..loopback_fetch()
    });
    let out = fetch(&tool, &format!("{base}/big")).await.unwrap();
    assert_eq!(out["truncated"], true);
    assert_eq!(out["text"].as_str().unwrap().len(), 1000);
}

#[tokio::test]
async fn slow_servers_time_out() {
    let base = serve(Router::new().route(
        "/slow",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            page("text/plain", "late")
        }),
    ))
    .await;
    let tool = fetcher(FetchSettings {
        timeout_s: 1,
        ..loopback_fetch()
    });
    let started = std::time::Instant::now();
    let e = fetch(&tool, &format!("{base}/slow")).await.unwrap_err();
    assert!(e.to_string().contains("longer than 1 s"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn without_the_network_the_tools_refuse() {
    let e = fetcher(loopback_fetch())
        .call(json!({"url": "http://127.0.0.1:9/"}), &ctx(false))
        .await
        .unwrap_err();
    assert!(
        matches!(e, ToolError::Denied { .. }) && e.to_string().contains("--network-allowed"),
        "{e}"
    );
}
