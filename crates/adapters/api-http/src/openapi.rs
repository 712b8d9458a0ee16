//! The OpenAPI document: generated from the handlers' annotations and the body types, so it
//! cannot drift from the code. Served at `GET /openapi.json`.

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::error::{ErrorBody, ErrorDetail};
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
