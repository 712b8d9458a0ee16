//! The router without a socket: auth, errors and the OpenAPI document, through
//! `tower::ServiceExt::oneshot`. Runs end to end are tested in the `fabric` crate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use fabric_api_http::{ApiConfig, AppState, router};
use fabric_core::service::{Preparer, RunService, ServiceConfig, ServiceError};
use fabric_fakes::{FakePreparer, MemStore};
use serde_json::{Value, json};
use std::sync::Arc;
use tower::ServiceExt;

/// Refuses every pack, and has no model to offer.
fn launcher() -> FakePreparer {
    FakePreparer::failing(|request| ServiceError::UnknownSpecialist {
        id: request.specialists.join(","),
        known: "engineering".to_owned(),
    })
}

fn state(preparer: Arc<dyn Preparer>, config: ApiConfig) -> AppState {
    AppState::new(
        RunService::new(
            Arc::new(MemStore::refusing()),
            preparer,
            ServiceConfig::default(),
        ),
        config,
    )
}

fn app(token: Option<&str>) -> fabric_api_http::App {
    let config = ApiConfig {
        token: token.map(str::to_owned),
        max_body_bytes: 1024,
        ..ApiConfig::default()
    };
    router(state(Arc::new(launcher()), config))
}

async fn call(app: fabric_api_http::App, request: Request<Body>) -> (StatusCode, Value) {
    let response = app.oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Each request, sent to a server without a token, answers this status and error code.
async fn expect_errors(cases: impl IntoIterator<Item = (Request<Body>, StatusCode, &str)>) {
    for (request, status, code) in cases {
        let label = format!("{} {}", request.method(), request.uri());
        let (got, body) = call(app(None), request).await;
        assert_eq!(got, status, "{label}: {body}");
        assert_eq!(body["error"]["code"], code, "{label}: {body}");
    }
}

fn post(path: &str, body: &str) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

#[tokio::test]
async fn health_is_open_and_everything_else_needs_the_token() {
    let (status, body) = call(
        app(Some("s3cret")),
        Request::get("/health").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ok");
    let (status, body) = call(
        app(Some("s3cret")),
        Request::get("/runs").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        body,
        json!({"error": {"code": "unauthorized", "message": body["error"]["message"]}})
    );
    let request = Request::get("/runs")
        .header(header::AUTHORIZATION, "Bearer s3cret")
        .body(Body::empty())
        .unwrap();
    let (status, body) = call(app(Some("s3cret")), request).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"runs": [], "next_before": null}));
    let request = Request::get("/runs")
        .header(header::AUTHORIZATION, "Basic s3cret")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        call(app(Some("s3cret")), request).await.0,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn bad_requests_map_to_their_codes() {
    let cases = [
        (post("/run", "{"), StatusCode::BAD_REQUEST, "invalid_json"),
        (
            post("/run", r#"{"prompt": "x", "extra": 1}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            post("/run", r#"{"prompt": "x", "pack": "nobody"}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_specialist",
        ),
        (
            post("/run", &format!(r#"{{"prompt": "{}"}}"#, "x".repeat(2000))),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        (
            Request::post("/run").body(Body::from("{}")).unwrap(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        (
            Request::get("/runs/..%2Fx").body(Body::empty()).unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_run_id",
        ),
        (
            Request::get("/runs/20200101-000000-000-00000000/status")
                .body(Body::empty())
                .unwrap(),
            StatusCode::NOT_FOUND,
            "run_not_found",
        ),
        (
            Request::get("/runs?limit=1000")
                .body(Body::empty())
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
        ),
        (
            Request::get("/nope").body(Body::empty()).unwrap(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Request::put("/health").body(Body::empty()).unwrap(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
    ];
    expect_errors(cases).await;
}

#[tokio::test]
async fn the_store_failing_is_a_500_that_hides_its_details() {
    let ready = FakePreparer::failing(|_| {
        fabric_core::service::Fault::Setup(fabric_core::ports::SetupError::Internal(
            "secret path /home/x".into(),
        ))
        .into()
    });
    let app = router(state(Arc::new(ready), ApiConfig::default()));
    let (status, body) = call(app, post("/runs", r#"{"prompt": "x"}"#)).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["error"]["code"], "internal");
    assert!(!body.to_string().contains("/home/x"), "{body}");
}

/// The server serves `openapi.json` rather than building the document (ADR-126); this keeps
/// the file equal to the document the handlers' annotations make.
#[test]
fn issue_45_the_served_openapi_file_is_the_generated_document() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");
    let generated = serde_json::to_string_pretty(&fabric_api_http::openapi()).unwrap() + "\n";
    if std::env::var_os("FABRIC_UPDATE_GOLDEN").is_some() {
        std::fs::write(file, &generated).unwrap();
    }
    let served = std::fs::read_to_string(file).unwrap_or_default();
    assert!(
        served == generated,
        "crates/adapters/api-http/openapi.json is not the document the handlers describe; \
         regenerate it with `FABRIC_UPDATE_GOLDEN=1 cargo test -p fabric-api-http --test router \
         issue_45` and review the diff"
    );
}

#[tokio::test]
async fn issue_45_the_openapi_endpoint_serves_that_file() {
    let request = Request::get("/openapi.json").body(Body::empty()).unwrap();
    let (status, body) = call(app(None), request).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        serde_json::to_value(fabric_api_http::openapi()).unwrap()
    );
}

#[test]
fn the_openapi_document_names_every_error_code_it_can_answer() {
    let doc = serde_json::to_value(fabric_api_http::openapi()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    assert_eq!(paths.len(), 19, "{:?}", paths.keys());
    assert!(doc["paths"]["/openapi.json"]["get"].is_object());
    // The router's own answers, and the statuses a filter may name.
    for name in ["NotFound", "MethodNotAllowed", "HostNotAllowed"] {
        assert_eq!(
            doc["components"]["responses"][name]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ErrorBody"
        );
    }
    let status = doc["paths"]["/runs"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "status")
        .unwrap();
    let pattern = status["schema"]["pattern"].as_str().unwrap();
    for name in fabric_api_http::STATUSES {
        assert!(
            pattern.contains(&format!("|{name}|"))
                || pattern.contains(&format!("({name}|"))
                || pattern.contains(&format!("|{name})")),
            "{name} in {pattern}"
        );
    }
    for path in ["/run", "/run/stream", "/runs"] {
        let responses = &doc["paths"][path]["post"]["responses"];
        assert!(
            responses["429"]["headers"]["Retry-After"].is_object(),
            "{path}"
        );
        assert!(
            responses["503"]["headers"]["Retry-After"].is_object(),
            "{path}"
        );
        assert!(responses["403"].is_object(), "{path}");
    }
    for op in paths.values().flat_map(|p| p.as_object().unwrap().values()) {
        for (status, response) in op["responses"].as_object().unwrap() {
            if status.starts_with('4') || status.starts_with('5') {
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody"
                );
            }
        }
    }
    assert_eq!(
        doc["paths"]["/runs/{id}/cancel"]["post"]["security"],
        json!([{"bearer": []}])
    );
}

#[tokio::test]
async fn issue_13_the_web_viewer_is_served_without_the_token_with_strict_headers() {
    assert!(
        fabric_api_http::assets_size() < 200 * 1024,
        "the viewer's files are {} bytes",
        fabric_api_http::assets_size()
    );
    for (path, content_type) in [
        ("/", "text/html; charset=utf-8"),
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/app.css", "text/css; charset=utf-8"),
    ] {
        // The server has a token, and the page is still served without one: it holds no data.
        let response = app(Some("s3cret"))
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let headers = response.headers();
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
        };
        assert_eq!(header("content-type"), content_type, "{path}");
        assert_eq!(
            header("content-security-policy"),
            fabric_api_http::CONTENT_SECURITY_POLICY
        );
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(
                header("content-security-policy").contains(directive),
                "{directive}"
            );
        }
        assert!(!header("content-security-policy").contains("unsafe"));
        assert_eq!(header("x-content-type-options"), "nosniff");
        assert_eq!(header("referrer-policy"), "no-referrer");
        assert_eq!(header("cache-control"), "no-cache");
        let etag = header("etag").to_owned();
        assert!(etag.starts_with('"') && etag.len() > 2, "{etag}");
        // The browser's copy is current: 304 without a body, still with the policy.
        let again = app(Some("s3cret"))
            .oneshot(
                Request::get(path)
                    .header(header::IF_NONE_MATCH, &etag)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}");
        assert!(again.headers().contains_key("content-security-policy"));
        let body = axum::body::to_bytes(again.into_body(), 1 << 20)
            .await
            .unwrap();
        assert!(body.is_empty());
    }
    let page = app(None)
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let text = axum::body::to_bytes(page.into_body(), 1 << 20)
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&text).contains("/ui/app.js"));
    // Not a way around the token: the API behind the page still wants it.
    let (status, _) = call(
        app(Some("s3cret")),
        Request::get("/runs").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn issue_13_without_a_token_only_loopback_names_are_answered() {
    let request = |host: &str, path: &str| {
        Request::get(path)
            .header(header::HOST, host)
            .body(Body::empty())
            .unwrap()
    };
    for host in ["127.0.0.1:8787", "localhost:8787", "[::1]:8787"] {
        let (status, body) = call(app(None), request(host, "/runs")).await;
        assert_eq!(status, StatusCode::OK, "{host}: {body}");
    }
    // A page of another site whose name resolves to 127.0.0.1 (DNS rebinding) reaches the
    // same socket with its own name: refused, for the API and for the viewer alike.
    for path in ["/runs", "/", "/health"] {
        let (status, body) = call(app(None), request("rebind.example:8787", path)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        assert_eq!(body["error"]["code"], "host_not_allowed", "{body}");
    }
    // With a token the name does not matter (a server off loopback has one): the token does.
    let authed = Request::get("/runs")
        .header(header::HOST, "fabric.example:8787")
        .header(header::AUTHORIZATION, "Bearer s3cret")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(app(Some("s3cret")), authed).await.0, StatusCode::OK);
}

/// What schemathesis found against the document (issue #14), each held here: a value the
/// document allows is taken, one it does not allow is refused.
#[tokio::test]
async fn issue_14_the_server_takes_exactly_what_the_document_allows() {
    let get = |uri: &str| Request::get(uri).body(Body::empty()).unwrap();
    let events = |last_event_id: &str| {
        Request::get("/runs/20200101-000000-000-00000000/events")
            .header("last-event-id", last_event_id)
            .body(Body::empty())
            .unwrap()
    };
    let cases = [
        // `max_steps: 260.0` is an integer to JSON Schema: the body is taken (and the pack
        // then refused by this test's launcher, which refuses every pack).
        (
            post("/runs", r#"{"prompt": "x", "max_steps": 2.0, "pack": "a"}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_specialist",
        ),
        (
            post("/runs", r#"{"prompt": "x", "max_steps": 2.5, "pack": "a"}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            post(
                "/runs",
                r#"{"prompt": "x", "max_steps": 1e10, "pack": "a"}"#,
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        // Blank is blank in every dialect of `\s`: U+0085 (Rust's, not ECMA's) and U+FEFF
        // (ECMA's, not Rust's) alone are blank; beside a letter they are text.
        (
            post("/runs", "{\"prompt\": \"x\", \"pack\": \"\u{85}\"}"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            post("/runs", "{\"prompt\": \"\u{feff}\"}"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            post("/runs", "{\"prompt\": \"\u{85}x\", \"pack\": \"a\"}"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_specialist",
        ),
        (
            get("/runs?specialist=%C2%85"),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
        ),
        // `Last-Event-ID` is decimal digits; one beyond every `seq` is taken (the run is
        // then looked up, and this store has none).
        (events("null"), StatusCode::BAD_REQUEST, "invalid_parameter"),
        (events("+1"), StatusCode::BAD_REQUEST, "invalid_parameter"),
        (
            events("99999999999999999999999"),
            StatusCode::NOT_FOUND,
            "run_not_found",
        ),
        // `since` and `older_than` follow their patterns: `parse_since` alone took ` 7d`.
        (
            get("/runs/search?q=x&since="),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
        ),
        (
            get("/stats?since=%207d"),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
        ),
        (
            post("/runs/prune", r#"{"older_than": ""}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            post("/runs/prune", r#"{"older_than": "7 d"}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
    ];
    expect_errors(cases).await;
}

/// The document says what the server does (issue #14): an SSE stream's items are frames
/// whose `data` is the runlog line as JSON, `q` is required, and a header is never null.
#[test]
fn issue_14_the_document_describes_sse_frames_a_required_q_and_a_text_header() {
    let doc = serde_json::to_value(fabric_api_http::openapi()).unwrap();
    let frame_ref = json!({"$ref": "#/components/schemas/SseFrameDoc"});
    assert_eq!(
        doc["paths"]["/run/stream"]["post"]["responses"]["200"]["content"]["text/event-stream"]["schema"],
        frame_ref
    );
    assert_eq!(
        doc["paths"]["/runs/{id}/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
            ["schema"],
        frame_ref
    );
    let frame = &doc["components"]["schemas"]["SseFrameDoc"];
    assert_eq!(frame["required"], json!(["id", "event", "data"]));
    assert_eq!(frame["properties"]["data"]["type"], "string");
    assert_eq!(
        frame["properties"]["data"]["contentMediaType"],
        "application/json"
    );
    assert_eq!(
        frame["properties"]["data"]["contentSchema"],
        json!({"$ref": "#/components/schemas/EventDoc"})
    );
    assert!(doc["components"]["schemas"]["EventDoc"].is_object());
    let param = |path: &str, name: &str| {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(param("/runs/search", "q")["required"], true);
    let last_event_id = param("/runs/{id}/events", "Last-Event-ID");
    assert_eq!(last_event_id["in"], "header");
    assert_eq!(last_event_id["required"], false);
    assert_eq!(last_event_id["schema"]["type"], "string");
}
