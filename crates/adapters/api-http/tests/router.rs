//! The router without a socket: auth, errors and the OpenAPI document, through
//! `tower::ServiceExt::oneshot`. Runs end to end are tested in the `fabric` crate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use fabric_api_http::{ApiConfig, AppState, router};
use fabric_core::service::{
    PrepareContext, Preparer, RunService, Runnable, ServiceConfig, ServiceError, TaskRequest,
};
use fabric_core::{NewRun, RunStore, StoreError};
use fabric_domain::{RunEvent, RunId};
use serde_json::{Value, json};
use std::sync::Arc;
use tower::ServiceExt;

struct EmptyStore;

#[async_trait]
impl RunStore for EmptyStore {
    async fn create_run(&self, _id: RunId) -> Result<NewRun, StoreError> {
        Err(StoreError::Io {
            action: "cannot create",
            path: "/nowhere".into(),
            detail: "read-only".into(),
        })
    }
    async fn list_runs(
        &self,
        _query: &fabric_core::RunQuery,
    ) -> Result<Vec<fabric_domain::RunSummary>, StoreError> {
        Ok(Vec::new())
    }
    async fn read_events(&self, id: &RunId) -> Result<Vec<RunEvent>, StoreError> {
        Err(StoreError::NotFound(id.clone()))
    }
}

/// Refuses every pack but `known`, and has no model to offer.
struct Launcher;

#[async_trait::async_trait]
impl Preparer for Launcher {
    async fn prepare(
        &self,
        request: TaskRequest,
        _context: &PrepareContext,
    ) -> Result<Box<dyn Runnable>, ServiceError> {
        Err(ServiceError::UnknownSpecialist(format!(
            "no specialist `{}`",
            request.pack.join(",")
        )))
    }
}

fn state(preparer: Arc<dyn Preparer>, config: ApiConfig) -> AppState {
    AppState::new(
        RunService::new(Arc::new(EmptyStore), preparer, ServiceConfig::default()),
        config,
    )
}

fn app(token: Option<&str>) -> axum::Router {
    let config = ApiConfig {
        token: token.map(str::to_owned),
        max_body_bytes: 1024,
        ..ApiConfig::default()
    };
    router(state(Arc::new(Launcher), config))
}

async fn call(app: axum::Router, request: Request<Body>) -> (StatusCode, Value) {
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
    for (request, status, code) in cases {
        let label = format!("{} {}", request.method(), request.uri());
        let (got, body) = call(app(None), request).await;
        assert_eq!(got, status, "{label}: {body}");
        assert_eq!(body["error"]["code"], code, "{label}: {body}");
    }
}

#[tokio::test]
async fn the_store_failing_is_a_500_that_hides_its_details() {
    struct Ready;
    #[async_trait::async_trait]
    impl Preparer for Ready {
        async fn prepare(
            &self,
            _request: TaskRequest,
            _context: &PrepareContext,
        ) -> Result<Box<dyn Runnable>, ServiceError> {
            Err(ServiceError::Internal("secret path /home/x".into()))
        }
    }
    let app = router(state(Arc::new(Ready), ApiConfig::default()));
    let (status, body) = call(app, post("/runs", r#"{"prompt": "x"}"#)).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["error"]["code"], "internal");
    assert!(!body.to_string().contains("/home/x"), "{body}");
}

#[test]
fn the_openapi_document_names_every_error_code_it_can_answer() {
    let doc = serde_json::to_value(fabric_api_http::openapi()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    assert_eq!(paths.len(), 13, "{:?}", paths.keys());
    assert!(doc["paths"]["/openapi.json"]["get"].is_object());
    // The router's own answers, and the statuses a filter may name.
    for name in ["NotFound", "MethodNotAllowed"] {
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
