//! The OpenAPI document: generated from the handlers' annotations and the body types, so it
//! cannot drift from the code. Served at `GET /openapi.json`.

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::error::{ErrorBody, ErrorDetail};
use crate::model::EventDoc;

/// The document's fixed parts; the paths are added by the router.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "agent-fabric HTTP API",
        description = "Run tasks with specialist agents, watch them live (SSE), cancel them. See docs/HTTP.md.",
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
    }
}
