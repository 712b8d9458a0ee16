//! The OpenAPI document: generated from the handlers' annotations and the body types, so it
//! cannot drift from the code. Served at `GET /openapi.json`.

use utoipa::openapi::schema::{Schema, SchemaType, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::error::{ErrorBody, ErrorDetail};
use crate::formats;
use crate::model::EventDoc;

/// The document's fixed parts; the paths are added by the router.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "agent-fabric HTTP API",
        description = "Run tasks with specialist agents, watch them live (SSE), cancel them. See docs/HTTP.md. Every error is an `ErrorBody` with a stable `code`. Besides the answers listed per operation, any path the API does not have answers 404 `not_found` (the `NotFound` response), and a known path called with a method it does not take answers 405 `method_not_allowed` (the `MethodNotAllowed` response). A server started without a token answers only requests addressed to a loopback name; any other `Host` gets 403 `host_not_allowed` (the `HostNotAllowed` response). The web run viewer at `/` is not described here: it is HTML for people.",
    ),
    components(schemas(ErrorBody, ErrorDetail, EventDoc)),
    modifiers(&BearerAuth),
    tags(
        (name = "runs", description = "Start, follow and cancel runs"),
        (name = "server", description = "The server itself"),
    )
)]
pub(crate) struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
        // Answers of the router itself, for every path and method it has no operation for.
        for (name, description) in [
            ("NotFound", "`not_found`: no endpoint at this path"),
            (
                "MethodNotAllowed",
                "`method_not_allowed`: the endpoint does not take this method",
            ),
            (
                "HostNotAllowed",
                "`host_not_allowed`: the server has no token and the request's `Host` is not a loopback name (DNS-rebinding protection)",
            ),
        ] {
            let response = ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build();
            components
                .responses
                .insert(name.to_owned(), response.into());
        }
    }
}

/// Sets the `pattern` of each value the server checks with a pattern of `formats`, from the
/// same constant, so the document allows exactly what the server takes (issue #14). The
/// derive macros take only literals, hence this pass over the finished document.
pub(crate) fn publish_formats(doc: &mut utoipa::openapi::OpenApi) {
    for (path, name, pattern) in [
        ("/runs/search", "q", formats::NOT_BLANK_PATTERN),
        ("/runs/search", "since", formats::SINCE_PATTERN),
        ("/stats", "since", formats::SINCE_PATTERN),
        ("/runs", "specialist", formats::NOT_BLANK_PATTERN),
        (
            "/runs/{id}/events",
            "Last-Event-ID",
            formats::EVENT_ID_PATTERN,
        ),
    ] {
        let schema = doc
            .paths
            .paths
            .get_mut(path)
            .and_then(|item| item.get.as_mut())
            .and_then(|operation| operation.parameters.as_mut())
            .into_iter()
            .flatten()
            .find_map(|parameter| match parameter {
                RefOr::T(parameter) if parameter.name == name => parameter.schema.as_mut(),
                _ => None,
            });
        if let Some(RefOr::T(Schema::Object(object))) = schema {
            object.pattern = Some(pattern.to_owned());
            // A parameter is left out or sent as text, never null (a header `Option` comes
            // out nullable, and schemathesis then sent `Last-Event-ID: null`).
            object.schema_type = SchemaType::Type(Type::String);
        }
    }
    for (component, field, pattern) in [
        ("RunRequest", "prompt", formats::NOT_BLANK_PATTERN),
        ("RunRequest", "pack", formats::NOT_BLANK_PATTERN),
        ("RunRequest", "model_key", formats::NOT_BLANK_PATTERN),
        ("PruneRequest", "older_than", formats::DURATION_PATTERN),
        ("InputRequest", "answer", formats::NOT_BLANK_PATTERN),
        ("MessageRequest", "text", formats::NOT_BLANK_PATTERN),
    ] {
        let schema = doc
            .components
            .as_mut()
            .and_then(|components| components.schemas.get_mut(component))
            .and_then(|schema| match schema {
                RefOr::T(Schema::Object(object)) => object.properties.get_mut(field),
                _ => None,
            });
        if let Some(RefOr::T(Schema::Object(object))) = schema {
            object.pattern = Some(pattern.to_owned());
        }
    }
}
