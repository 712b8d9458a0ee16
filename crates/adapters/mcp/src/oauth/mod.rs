//! OAuth for streamable HTTP servers (ADR-085): tokens from `fabric mcp login` are used by
//! every connection to the server they were issued for, and refreshed by rmcp's
//! `AuthClient` when they expire or are refused; a server that asks for authorization
//! without a usable token gets an error that names `fabric mcp login <server>`.

mod challenge;
mod login;
mod store;

pub use challenge::Challenge;
pub(crate) use challenge::{ChallengeSlot, Recording};
pub use login::{LoggedIn, LoginRequest, login, logout};
pub(crate) use store::TokenFile;

use fabric_domain::{McpOAuth, McpOAuthGrant};
use rmcp::transport::AuthClient;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, ClientCredentialsConfig, OAuthClientConfig, OAuthState,
};
use std::path::Path;

use crate::error::McpError;

/// The HTTP client of a connection to `url` with the tokens stored for it, or `None` when
/// none are (the connection then goes without, and a 401 says to log in).
pub(crate) async fn authorized_client(
    server: &str,
    url: &str,
    oauth: Option<&McpOAuth>,
    token_dir: &Path,
) -> Result<Option<AuthClient<reqwest::Client>>, McpError> {
    if let Some(oauth) = oauth.filter(|o| o.grant == McpOAuthGrant::ClientCredentials) {
        return client_credentials(server, url, oauth).await.map(Some);
    }
    let file = TokenFile::new(token_dir, server, url);
    let failed = |e: AuthError| McpError::TokensUnusable {
        server: server.to_owned(),
        detail: e.to_string(),
    };
    let stored = file.read().map_err(|e| McpError::TokensUnusable {
        server: server.to_owned(),
        detail: e.to_string(),
    })?;
    let Some(stored) = stored.filter(|c| c.token_response.is_some()) else {
        return Ok(None);
    };
    let mut manager = AuthorizationManager::new(url).await.map_err(failed)?;
    manager.set_credential_store(file);
    // Reads the server's metadata (for refreshing) and drops tokens of another issuer.
    if !manager.initialize_from_store().await.map_err(failed)? {
        return Ok(None);
    }
    // A confidential client refreshes with its secret, which the token file never holds.
    if let Some(var) = oauth.and_then(|o| o.client_secret_env.as_ref()) {
        let secret = std::env::var(var).map_err(|_| McpError::MissingEnv {
            server: server.to_owned(),
            name: var.clone(),
        })?;
        let config = OAuthClientConfig::new(stored.client_id, "http://127.0.0.1/callback")
            .with_client_secret(secret);
        manager.configure_client(config).map_err(failed)?;
    }
    Ok(Some(AuthClient::new(reqwest::Client::new(), manager)))
}

/// The HTTP client of a connection to a server with `grant: client_credentials`: a fresh
/// token from the client's id and secret, for this connection only (nothing is stored, and
/// no person is needed; a run longer than the token's life reconnects with a new one).
async fn client_credentials(
    server: &str,
    url: &str,
    oauth: &McpOAuth,
) -> Result<AuthClient<reqwest::Client>, McpError> {
    let failed = |detail: String| McpError::TokensUnusable {
        server: server.to_owned(),
        detail,
    };
    // The config check makes both present for this grant.
    let (Some(client_id), Some(var)) = (&oauth.client_id, &oauth.client_secret_env) else {
        return Err(failed(
            "the client credentials grant needs `oauth.client_id` and `oauth.client_secret_env`"
                .to_owned(),
        ));
    };
    let client_secret = std::env::var(var).map_err(|_| McpError::MissingEnv {
        server: server.to_owned(),
        name: var.clone(),
    })?;
    let manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let mut state = OAuthState::Unauthorized(manager);
    let config = ClientCredentialsConfig::ClientSecret {
        client_id: client_id.clone(),
        client_secret,
        scopes: oauth.scopes.clone(),
        // The MCP authorization spec names the server in every token request (RFC 8707).
        resource: Some(url.to_owned()),
    };
    state
        .authenticate_client_credentials(config)
        .await
        .map_err(|e| failed(format!("the client credentials grant failed: {e}")))?;
    let manager = state
        .into_authorization_manager()
        .ok_or_else(|| failed("no token after the client credentials grant".to_owned()))?;
    Ok(AuthClient::new(reqwest::Client::new(), manager))
}

/// `error` as the authorization failure it is when the server refused the request with a
/// challenge; otherwise unchanged.
pub(crate) fn explain(server: &str, slot: &ChallengeSlot, error: McpError) -> McpError {
    let challenge = slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    match challenge {
        Some(Challenge::Unauthorized(_)) => McpError::AuthRequired {
            server: server.to_owned(),
        },
        Some(Challenge::InsufficientScope(header)) => McpError::InsufficientScope {
            server: server.to_owned(),
            scope: scope_of(&header).unwrap_or_else(|| "(not named)".to_owned()),
        },
        None => error,
    }
}

/// The `scope` a `WWW-Authenticate` header asks for.
fn scope_of(header: &str) -> Option<String> {
    let base = reqwest::Url::parse("http://localhost/").ok()?;
    rmcp::transport::WWWAuthenticateParams::parse(header, &base).scope
}
