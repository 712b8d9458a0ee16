//! The research tools: `web_search` and `fetch_url`. Both are read-only and annotated
//! `needs_network`, so the core offers them only to runs that allow the network.

mod addr;
mod fetch;
mod html;
mod search;

pub use addr::AddressPolicy;
pub(crate) use fetch::FetchUrlTool;
pub(crate) use search::WebSearchTool;

pub use fabric_domain::SearchProvider;
use fabric_domain::ToolAnnotations;
use fabric_engine::ToolError;

/// Settings of `web_search`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSearchSettings {
    /// The service.
    pub provider: SearchProvider,
    /// Its base URL, without a trailing `/`.
    pub base_url: String,
    /// The environment variable holding the API key (Brave).
    pub api_key_env: Option<String>,
    /// Seconds one search may take.
    pub timeout_s: u64,
    /// Results when the call does not say.
    pub max_results: u32,
}

impl Default for WebSearchSettings {
    fn default() -> Self {
        Self {
            provider: SearchProvider::Searxng,
            base_url: "http://localhost:8080".to_owned(),
            api_key_env: None,
            timeout_s: 20,
            max_results: 8,
        }
    }
}

/// Settings of `fetch_url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSettings {
    /// Seconds one fetch may take, all redirects and the body included.
    pub timeout_s: u64,
    /// Bytes read at most; the rest of the body is not downloaded.
    pub max_download_bytes: u64,
    /// Characters of text returned at most.
    pub max_text_chars: u64,
    /// Redirects followed at most.
    pub max_redirects: u32,
    /// Which non-public addresses it may reach (none by default).
    pub addresses: AddressPolicy,
}

impl Default for FetchSettings {
    fn default() -> Self {
        Self {
            timeout_s: 30,
            max_download_bytes: 2 * 1024 * 1024,
            max_text_chars: 20_000,
            max_redirects: 5,
            addresses: AddressPolicy::default(),
        }
    }
}

/// Both web tools only read, and only with the network.
const WEB: ToolAnnotations = ToolAnnotations {
    read_only: true,
    destructive: false,
    needs_network: true,
};

/// The user agent web servers see.
const USER_AGENT: &str = concat!("agent-fabric/", env!("CARGO_PKG_VERSION"));

/// Refuses a run without the network, in case a tool is called although not offered.
fn require_network(ctx: &fabric_engine::ToolContext, tool: &str) -> Result<(), ToolError> {
    if ctx.network_allowed {
        Ok(())
    } else {
        Err(ToolError::Denied {
            event_type: "network_denied".to_owned(),
            attempted: tool.to_owned(),
            message: format!(
                "{tool} needs the network, and this run does not allow it; rerun with --network-allowed"
            ),
        })
    }
}

/// The client of `web_search`, which talks to the search service the operator configured.
/// It follows no redirects and has no client-wide timeout (callers bound the whole
/// operation).
///
/// It keeps reqwest's default proxy handling: `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and
/// `NO_PROXY` of the fabric's environment apply, because the service's address comes from
/// the config, not from the model, and a network that allows the internet only through a
/// proxy needs it to reach a hosted service such as Brave. `fetch_url` never uses this
/// client (see [`pin`]).
///
/// One client for the process (a clone shares its connection pool and TLS setup), built on
/// first use; a failed build is not cached, so a later call tries again.
fn http_client() -> Result<reqwest::Client, ToolError> {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client.clone());
    }
    let client = client_builder()
        .build()
        .map_err(|e| ToolError::Failed(format!("cannot set up the HTTP client: {e}")))?;
    Ok(CLIENT.get_or_init(|| client).clone())
}

fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(USER_AGENT)
}

/// `fetch_url`'s client for one hop: it connects to `host` only at the checked `addrs` (DNS
/// pinning), directly, whatever proxy the environment names. Built per hop: the pinned
/// addresses are part of the client.
fn pinned_client(host: &str, addrs: &[std::net::SocketAddr]) -> Result<reqwest::Client, ToolError> {
    pin(client_builder(), host, addrs)
        .build()
        .map_err(|e| ToolError::Failed(format!("cannot set up the HTTP client: {e}")))
}

/// Makes `builder` connect to `host` at `addrs` and nowhere else.
///
/// Every proxy is dropped (issue #15): the environment's `HTTP_PROXY`, `HTTPS_PROXY` and
/// `ALL_PROXY`, which reqwest would otherwise read, and any set on `builder`. Through a
/// proxy the connection goes to the proxy, which resolves the host and connects on its own,
/// so the address check and the pinning would protect nothing: a name that resolves to a
/// public address for the check can resolve to `127.0.0.1` for the proxy, and the proxy
/// itself is often a service on the local machine or network. So `fetch_url` ignores the
/// environment's proxy and needs direct access to the sites it fetches; on a network that
/// allows the web only through a proxy it cannot fetch pages. Sending it through a proxy
/// would take a proxy that enforces the same address rules itself, which the fabric cannot
/// check, so there is no setting for it.
fn pin(
    builder: reqwest::ClientBuilder,
    host: &str,
    addrs: &[std::net::SocketAddr],
) -> reqwest::ClientBuilder {
    builder.no_proxy().resolve_to_addrs(host, addrs)
}

/// Reads a body up to `max` bytes; the rest is never downloaded. Returns whether it was cut.
async fn read_capped(
    response: &mut reqwest::Response,
    max: u64,
) -> Result<(Vec<u8>, bool), ToolError> {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| ToolError::Failed(format!("the download broke off: {}", short(&e))))?
    {
        let room = max - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// A reqwest error with its chain of causes, on one line.
fn short(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg = format!("{msg}: {s}");
        source = s.source();
    }
    msg
}

/// Runs CPU-bound text work (HTML to text) on the blocking pool, so a large or hostile page
/// never stalls a runtime worker.
async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolError::Failed(format!("converting the page to text failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An HTTP server on 127.0.0.1 that answers every request, whatever its path or
    /// method, with `body`.
    pub(super) async fn marker_server(body: &'static str) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = axum::Router::new().fallback(move || async move { body });
        tokio::spawn(async move { axum::serve(listener, router).await });
        addr
    }

    /// The body of a GET of `url`.
    async fn text_of(client: &reqwest::Client, url: &str) -> String {
        client.get(url).send().await.unwrap().text().await.unwrap()
    }

    /// Two servers on the same port at 127.0.0.2 and 127.0.0.1, answering `pinned` and
    /// `rebound`.
    async fn two_servers_one_port() -> (u16, tokio::task::JoinHandle<()>) {
        for _ in 0..20 {
            let pinned = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
            let port = pinned.local_addr().unwrap().port();
            let Ok(rebound) = tokio::net::TcpListener::bind(("127.0.0.1", port)).await else {
                continue;
            };
            let serve = |l, body: &'static str| {
                axum::serve(l, axum::Router::new().fallback(move || async move { body }))
            };
            let task = tokio::spawn(async move {
                let _ = tokio::join!(serve(pinned, "PINNED"), serve(rebound, "REBOUND"));
            });
            return (port, task);
        }
        panic!("no port free on both 127.0.0.1 and 127.0.0.2");
    }

    #[tokio::test]
    async fn issue_15_the_connection_goes_to_the_checked_address_not_a_new_lookup() {
        // DNS rebinding: the name resolves to an allowed address when it is checked and to
        // another when the connection is made. `localhost` stands for that second answer
        // (the system resolver gives 127.0.0.1); the client pinned to the checked address
        // (127.0.0.2) must connect there and never ask the resolver again.
        let (port, server) = two_servers_one_port().await;
        let checked: std::net::SocketAddr = ([127, 0, 0, 2], port).into();
        let client = pinned_client("localhost", &[checked]).unwrap();
        let body = text_of(&client, &format!("http://localhost:{port}/")).await;
        assert_eq!(body, "PINNED");
        // The resolver's own answer reaches the other server: the test can tell them apart.
        let unpinned = client_builder().no_proxy().build().unwrap();
        let body = text_of(&unpinned, &format!("http://localhost:{port}/")).await;
        assert_eq!(body, "REBOUND");
        server.abort();
    }

    #[tokio::test]
    async fn issue_15_the_pinned_client_ignores_a_configured_proxy() {
        let proxy = marker_server("PROXY ANSWER").await;
        let target = marker_server("TARGET ANSWER").await;
        // What the environment's HTTP_PROXY would add, set on the builder instead of in the
        // environment other tests share.
        let builder =
            client_builder().proxy(reqwest::Proxy::all(format!("http://{proxy}")).unwrap());
        let client = pin(builder, "issue15.example", &[target]).build().unwrap();
        let body = text_of(
            &client,
            &format!("http://issue15.example:{}/", target.port()),
        )
        .await;
        assert_eq!(body, "TARGET ANSWER");
    }
}
