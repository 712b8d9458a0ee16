//! `fabric mcp login`: the authorization code flow with PKCE against the server's
//! authorization server, the redirect taken on a loopback listener (RFC 8252), the tokens
//! saved in the server's token file.
//!
//! Discovery, registration and the token exchange are rmcp's (`auth`): protected-resource
//! metadata from the 401's `WWW-Authenticate` (RFC 9728) or its well-known addresses,
//! authorization-server metadata (RFC 8414, OpenID), a pre-registered client id, a client ID
//! metadata document or dynamic registration (RFC 7591), scopes from the challenge or
//! `scopes_supported`, and the `resource` parameter (RFC 8707).

use fabric_domain::McpOAuth;
use rmcp::transport::auth::{AuthError, AuthorizationRequest, OAuthState};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Challenge, TokenFile};
use crate::error::McpError;

/// How long a person has to approve in the browser.
const PERSON_WAIT: Duration = Duration::from_secs(300);
/// How long an authorization server that approves by itself has (`--no-browser`).
const UNATTENDED_WAIT: Duration = Duration::from_secs(30);
/// The name the fabric registers under (dynamic client registration).
const CLIENT_NAME: &str = "agent-fabric";

/// One login: which server, and how.
pub struct LoginRequest<'a> {
    /// The server's name (the token file's name).
    pub server: &'a str,
    /// Its streamable HTTP endpoint.
    pub url: &'a str,
    /// Its `oauth` block (or what the command line said instead).
    pub oauth: &'a McpOAuth,
    /// Where tokens are kept.
    pub token_dir: &'a Path,
    /// What the server answered without a (good enough) token, when known: its scopes and
    /// metadata address start the flow.
    pub challenge: Option<&'a Challenge>,
    /// Follow the authorization URL here instead of waiting for a person (`--no-browser`).
    pub unattended: bool,
}

/// A login that succeeded.
#[derive(Debug)]
pub struct LoggedIn {
    /// The token file written.
    pub token_file: PathBuf,
    /// The scopes granted, as the authorization server said.
    pub scopes: Vec<String>,
}

/// Runs the flow; `show` is given the authorization URL to open (it prints it).
pub async fn login(
    request: &LoginRequest<'_>,
    show: impl FnOnce(&str),
) -> Result<LoggedIn, McpError> {
    let failed = |detail: String| McpError::Login {
        server: request.server.to_owned(),
        detail,
    };
    let auth = |e: AuthError| failed(e.to_string());
    let listener = TcpListener::bind(("127.0.0.1", request.oauth.redirect_port.unwrap_or(0)))
        .await
        .map_err(|e| failed(format!("cannot listen on 127.0.0.1 for the redirect: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| failed(e.to_string()))?
        .port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");

    let file = TokenFile::new(request.token_dir, request.server, request.url);
    let mut manager = rmcp::transport::auth::AuthorizationManager::new(request.url)
        .await
        .map_err(auth)?;
    manager.set_credential_store(file.clone());
    let mut state = OAuthState::Unauthorized(manager);
    state
        .start_authorization(authorization_request(request, &redirect_uri)?)
        .await
        .map_err(auth)?;
    let url = state.get_authorization_url().await.map_err(auth)?;
    show(&url);
    let callback = if request.unattended {
        unattended(&listener, &url, &failed).await
    } else {
        tokio::time::timeout(PERSON_WAIT, wait_for_redirect(&listener, &failed))
            .await
            .map_err(|_| {
                failed(format!(
                    "no redirect came back within {} s; open the URL and approve, then try again",
                    PERSON_WAIT.as_secs()
                ))
            })
            .and_then(|r| r)
    }?;
    state.handle_callback_url(&callback).await.map_err(auth)?;
    let scopes = file
        .read()
        .ok()
        .flatten()
        .map(|c| c.granted_scopes)
        .unwrap_or_default();
    Ok(LoggedIn {
        token_file: file.path().to_path_buf(),
        scopes,
    })
}

/// Removes the server's tokens; whether there were any.
pub fn logout(server: &str, url: &str, token_dir: &Path) -> Result<bool, McpError> {
    TokenFile::new(token_dir, server, url)
        .remove()
        .map_err(|e| McpError::Login {
            server: server.to_owned(),
            detail: format!("cannot remove its tokens: {e}"),
        })
}

/// What rmcp is asked for: the client identity the config gives (pre-registered id and
/// secret, a metadata document, else registration as `agent-fabric`), its scopes if any
/// (else rmcp picks them from the challenge or `scopes_supported`), and the challenge.
fn authorization_request(
    request: &LoginRequest<'_>,
    redirect_uri: &str,
) -> Result<AuthorizationRequest, McpError> {
    let oauth = request.oauth;
    let mut out = AuthorizationRequest::new(redirect_uri).with_client_name(CLIENT_NAME);
    if !oauth.scopes.is_empty() {
        out = out.with_scopes(oauth.scopes.iter().cloned());
    }
    if let Some(id) = &oauth.client_id {
        out = out.with_preregistered_client(id);
    }
    if let Some(var) = &oauth.client_secret_env {
        let secret = std::env::var(var).map_err(|_| McpError::MissingEnv {
            server: request.server.to_owned(),
            name: var.clone(),
        })?;
        out = out.with_client_secret(secret);
    }
    if let Some(url) = &oauth.client_metadata_url {
        out = out.with_client_metadata_url(url);
    }
    if let Some(challenge) = request.challenge {
        out = out.with_challenge(challenge.header());
    }
    Ok(out)
}

/// Makes the login's error from what went wrong.
type Failed<'a> = dyn Fn(String) -> McpError + Sync + 'a;

/// `--no-browser`: fetches the authorization URL and follows its redirects as a browser
/// would, without cookies or pages: enough for an authorization server that approves at
/// once (a test server, the conformance suite's), and an error naming what it answered
/// for one that shows a login page.
async fn unattended(
    listener: &TcpListener,
    url: &str,
    failed: &Failed<'_>,
) -> Result<String, McpError> {
    let client = reqwest::Client::builder()
        .timeout(UNATTENDED_WAIT)
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let follow = async {
        let answer = client.get(url).send().await;
        // The last hop is the loopback listener: its answer means the redirect arrived.
        match answer {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(failed(format!(
                "the authorization server answered {} at {} instead of redirecting back; it needs a person: run `fabric mcp login` without --no-browser",
                r.status(),
                r.url()
            ))),
            Err(e) => Err(failed(format!("cannot follow the authorization URL: {e}"))),
        }
    };
    let wait = tokio::time::timeout(UNATTENDED_WAIT, wait_for_redirect(listener, failed));
    tokio::pin!(wait);
    let timed_out =
        || failed("the authorization URL did not redirect back to the fabric".to_owned());
    tokio::select! {
        callback = &mut wait => callback.map_err(|_| timed_out())?,
        followed = follow => {
            followed?;
            // The listener answered the last hop, so the redirect is there or nearly so.
            wait.await.map_err(|_| timed_out())?
        }
    }
}

/// Accepts connections on the loopback listener until one brings `/callback`; returns its
/// full URL (with `code` and `state`, or `error`).
async fn wait_for_redirect(
    listener: &TcpListener,
    failed: &Failed<'_>,
) -> Result<String, McpError> {
    loop {
        let (mut stream, _) = listener.accept().await.map_err(|e| failed(e.to_string()))?;
        let Some(target) = request_target(&mut stream).await else {
            continue;
        };
        if !target.starts_with("/callback") {
            let _ = answer(&mut stream, "404 Not Found", "not the fabric's redirect").await;
            continue;
        }
        let url = format!("http://127.0.0.1{target}");
        let refused = reqwest::Url::parse(&url).ok().and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "error")
                .map(|(_, v)| v.into_owned())
        });
        return match refused {
            Some(error) => {
                let _ = answer(&mut stream, "400 Bad Request", "authorization refused").await;
                Err(failed(format!("the authorization server refused: {error}")))
            }
            None => {
                let _ = answer(
                    &mut stream,
                    "200 OK",
                    "agent-fabric is authorized; you can close this page.",
                )
                .await;
                Ok(url)
            }
        };
    }
}

/// The target of an HTTP request line (`GET /callback?code=... HTTP/1.1`).
async fn request_target(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    // A redirect's request is a few hundred bytes; 16 KiB bounds a client that sends more.
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let mut parts = line.lines().next()?.split_whitespace();
    (parts.next()? == "GET").then_some(())?;
    parts.next().map(str::to_owned)
}

async fn answer(stream: &mut TcpStream, status: &str, text: &str) -> std::io::Result<()> {
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}
