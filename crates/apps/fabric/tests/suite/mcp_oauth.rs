//! OAuth for a remote MCP server end to end, without the conformance suite (issue #29): a
//! test authorization server (protected-resource and authorization-server metadata, dynamic
//! registration, an authorize endpoint that approves at once, a token endpoint that checks
//! PKCE and refreshes) in front of a real MCP server (rmcp's streamable HTTP service) that
//! accepts only the tokens it issued last. A run without a token fails naming
//! `fabric mcp login`; after `fabric mcp login --no-browser` a run's model calls the
//! protected tool; an expired token is refreshed; the tokens never reach the runlog.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use fabric_test_support::Turn;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};
use sha2::Digest as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::fixture::{Fixture, tool_messages};

const WORD: &str = "plover";

/// What the authorization server has issued and seen.
#[derive(Default)]
struct Issued {
    challenge: Option<String>,
    /// The one access token accepted now; a refresh replaces it.
    access: Option<String>,
    refresh: Option<String>,
    count: u32,
    refreshes: u32,
    /// Every bearer token the MCP endpoint received.
    seen: Vec<String>,
}

#[derive(Clone)]
struct Shared {
    base: String,
    issued: Arc<Mutex<Issued>>,
}

impl Shared {
    fn issued(&self) -> std::sync::MutexGuard<'_, Issued> {
        self.issued.lock().expect("lock")
    }
}

/// The protected MCP server: one tool.
#[derive(Clone)]
struct Vault;

impl ServerHandler for Vault {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("vault", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {}});
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "secret_word",
            "The secret word, for authorized clients only.",
            schema,
        )]))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("the word is {WORD}"))]).into())
    }
}

fn query(text: &str) -> HashMap<String, String> {
    reqwest::Url::parse(&format!("http://x/?{text}"))
        .map(|u| u.query_pairs().into_owned().collect())
        .unwrap_or_default()
}

async fn resource_metadata(State(s): State<Shared>) -> Json<Value> {
    Json(json!({"resource": format!("{}/mcp", s.base), "authorization_servers": [s.base]}))
}

async fn server_metadata(State(s): State<Shared>) -> Json<Value> {
    let b = &s.base;
    Json(json!({
        "issuer": b,
        "authorization_endpoint": format!("{b}/authorize"),
        "token_endpoint": format!("{b}/token"),
        "registration_endpoint": format!("{b}/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
    }))
}

async fn register(body: String) -> Response {
    let asked: Value = serde_json::from_str(&body).unwrap_or_default();
    let answer = json!({
        "client_id": "fabric-e2e",
        "redirect_uris": asked["redirect_uris"],
        "token_endpoint_auth_method": "none",
    });
    (StatusCode::CREATED, Json(answer)).into_response()
}

/// Approves at once: no person, no page.
async fn authorize(State(s): State<Shared>, request: Request) -> Response {
    let q = query(request.uri().query().unwrap_or_default());
    if q.get("code_challenge_method").map(String::as_str) != Some("S256") {
        return (StatusCode::BAD_REQUEST, "PKCE S256 required").into_response();
    }
    s.issued().challenge = q.get("code_challenge").cloned();
    let mut to = reqwest::Url::parse(&q["redirect_uri"]).expect("redirect_uri");
    to.query_pairs_mut()
        .append_pair("code", "code-1")
        .append_pair("state", &q["state"]);
    (StatusCode::FOUND, [(header::LOCATION, to.to_string())]).into_response()
}

async fn token(State(s): State<Shared>, body: String) -> Response {
    let form = query(&body);
    let mut issued = s.issued();
    let granted = match form.get("grant_type").map(String::as_str) {
        Some("authorization_code") => {
            let verifier = form.get("code_verifier").cloned().unwrap_or_default();
            let digest = sha2::Sha256::digest(verifier.as_bytes());
            let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
            form.get("code").map(String::as_str) == Some("code-1")
                && issued.challenge.as_deref() == Some(computed.as_str())
        }
        Some("refresh_token") => {
            let ok =
                issued.refresh.is_some() && form.get("refresh_token") == issued.refresh.as_ref();
            issued.refreshes += u32::from(ok);
            ok
        }
        _ => false,
    };
    if !granted {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_grant"})),
        )
            .into_response();
    }
    issued.count += 1;
    let n = issued.count;
    issued.access = Some(format!("access-{n}"));
    issued.refresh = Some(format!("refresh-{n}"));
    Json(json!({
        "access_token": format!("access-{n}"),
        "refresh_token": format!("refresh-{n}"),
        "token_type": "Bearer",
        "expires_in": 3600,
    }))
    .into_response()
}

/// The MCP endpoint's guard: the current token, else 401 pointing at the metadata.
async fn guard(State(s): State<Shared>, request: Request, next: Next) -> Response {
    let sent = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let accepted = {
        let mut issued = s.issued();
        if let Some(token) = &sent {
            issued.seen.push(token.clone());
        }
        sent.is_some() && sent == issued.access
    };
    if accepted {
        return next.run(request).await;
    }
    let challenge = format!(
        "Bearer error=\"invalid_token\", resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
        s.base
    );
    Response::builder()
        .status(StatusCode::UNAUTHORIZED)
        .header(header::WWW_AUTHENTICATE, challenge)
        .body(Body::from("unauthorized"))
        .expect("response")
}

async fn start() -> Shared {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!(
        "http://127.0.0.1:{}",
        listener.local_addr().expect("addr").port()
    );
    let shared = Shared {
        base,
        issued: Arc::default(),
    };
    let mcp = rmcp::transport::StreamableHttpService::new(
        || Ok(Vault),
        Arc::new(
            rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default(),
        ),
        rmcp::transport::StreamableHttpServerConfig::default(),
    );
    let protected = Router::new()
        .fallback_service(mcp)
        .layer(axum::middleware::from_fn_with_state(shared.clone(), guard));
    let app = Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(server_metadata),
        )
        .route("/register", post(register))
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .nest_service("/mcp", protected)
        .with_state(shared.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    shared
}

fn token_files(fx: &Fixture) -> Vec<std::path::PathBuf> {
    let dir = fx.dir.path().join("xdg-state/agent-fabric/mcp-oauth");
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_29_oauth_login_then_a_run_uses_the_protected_server_and_refreshes() {
    use std::os::unix::fs::PermissionsExt;
    let vault = start().await;
    let fx = Fixture::new(vec![
        Turn::tool_call("mcp__vault__secret_word", json!({})),
        Turn::tool_call("finish_task", json!({"summary": "got the word"})),
    ])
    .await;
    fx.trust_own_files();
    let dir = fx.workspace_root().join("specialists");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("vault_user.md"),
        format!(
            "---\nname: vault_user\ndescription: Reads the vault.\ntools: [mcp__vault__secret_word]\nmcp_servers:\n  - name: vault\n    url: {}/mcp\n    required: true\n    startup_timeout_s: 20\n---\nRead the word.\n",
            vault.base
        ),
    )
    .expect("write specialist");

    // No token yet: the required server fails the run, and the reason says what to do.
    let run = fx
        .fabric(&["run", "what is the word", "--pack", "vault_user", "--json"])
        .await;
    assert_ne!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let said = format!("{}{}", run.stdout, run.stderr);
    assert!(said.contains("fabric mcp login vault"), "{said}");
    assert!(said.contains("requires authorization"), "{said}");

    // Log in without a person: discovery, registration, PKCE, the redirect on 127.0.0.1.
    let login = fx.fabric(&["mcp", "login", "vault", "--no-browser"]).await;
    login.assert_code(0);
    assert!(
        login.stdout.contains("logged in to MCP server `vault`"),
        "{}",
        login.stdout
    );
    let files = token_files(&fx);
    assert_eq!(files.len(), 1, "{files:?}");
    let mode = std::fs::metadata(&files[0])
        .expect("token file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(vault.issued().count, 1);

    // A run's model calls the protected tool with the stored token.
    let run = fx
        .fabric(&["run", "what is the word", "--pack", "vault_user", "--json"])
        .await;
    run.assert_code(0);
    let result = run.json();
    assert_eq!(result["summary"], "got the word");
    let requests = fx.requests();
    let answered = requests
        .iter()
        .flat_map(tool_messages)
        .any(|m| m.contains(WORD));
    assert!(answered, "the model never saw the tool's answer");
    let runlog = std::fs::read_to_string(
        fx.workspace_root()
            .join("runs")
            .join(result["_meta"]["run_id"].as_str().expect("run id"))
            .join("runlog.jsonl"),
    )
    .expect("runlog");
    assert!(
        !runlog.contains("access-1") && !runlog.contains("refresh-1"),
        "a token in the runlog"
    );
    assert!(vault.issued().seen.iter().any(|t| t == "access-1"));

    // The token has expired (received long ago): it is refreshed before use, and the
    // server, which now accepts only the new one, answers.
    let text = std::fs::read_to_string(&files[0]).expect("token file");
    let mut stored: Value = serde_json::from_str(&text).expect("token JSON");
    stored["credentials"]["token_received_at"] = json!(1);
    std::fs::write(&files[0], stored.to_string()).expect("age the token");
    let call = fx.fabric(&["mcp", "call", "vault", "secret_word"]).await;
    call.assert_code(0);
    assert!(call.stdout.contains(WORD), "{}", call.stdout);
    assert_eq!(vault.issued().refreshes, 1);
    assert_eq!(
        vault.issued().seen.last().map(String::as_str),
        Some("access-2")
    );

    // Logged out, the clear error again.
    fx.fabric(&["mcp", "logout", "vault"]).await.assert_code(0);
    assert!(token_files(&fx).is_empty());
    let call = fx.fabric(&["mcp", "tools", "vault"]).await;
    assert_ne!(call.code(), 0);
    assert!(
        call.stderr.contains("run `fabric mcp login vault`"),
        "{}",
        call.stderr
    );
}
