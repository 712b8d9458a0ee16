//! The web run viewer (issue #13): a single page, its script and its style sheet, embedded
//! in the binary and served at `/`, `/ui/app.js` and `/ui/app.css`.
//!
//! The page holds no data, so its routes need no token; every run it shows comes from the
//! API, which keeps its bearer auth (the page asks for the token on a 401 and keeps it in the
//! tab's `sessionStorage`, docs/HTTP.md). Plain hand-written files, no build step, nothing
//! loaded from anywhere else: the Content-Security-Policy below allows only this server, and
//! no inline script or style, so run data the page renders as text can never run as code
//! (ADR-054).

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::AppState;

/// Only this server, no inline code, no framing, no `<base>`, forms only to here.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// One embedded file.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

/// Every file of the viewer; the first is the page itself.
const ASSETS: [Asset; 3] = [
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_str!("../ui/index.html"),
    },
    Asset {
        path: "/ui/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../ui/app.js"),
    },
    Asset {
        path: "/ui/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../ui/app.css"),
    },
];

/// The bytes of every embedded file together (the issue's budget is 200 KB).
pub fn assets_size() -> usize {
    ASSETS.iter().map(|a| a.body.len()).sum()
}

/// The viewer's routes, without auth (see the module doc).
pub(crate) fn routes() -> Router<AppState> {
    let mut router = Router::new();
    for (index, asset) in ASSETS.iter().enumerate() {
        router = router.route(
            asset.path,
            get(move |headers: HeaderMap| async move { serve(index, &headers) }),
        );
    }
    router
}

/// The asset, or 304 when the browser's copy (`If-None-Match`) is this build's.
fn serve(index: usize, request: &HeaderMap) -> Response {
    let Some(asset) = ASSETS.get(index) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    // The files change only with the binary, so a hash of the text is a stable validator;
    // `no-cache` makes the browser ask each time, and the answer is a bodiless 304.
    let etag = format!("\"{:016x}\"", fnv1a(asset.body.as_bytes()));
    let fresh = request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| tag.trim() == etag || tag.trim() == "*");
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    for (name, value) in [
        (header::CACHE_CONTROL, "no-cache"),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// FNV-1a, 64 bits: enough to tell two builds' files apart, and no dependency.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_13_the_viewer_stays_under_200_kb() {
        let size = assets_size();
        assert!(size < 200 * 1024, "the viewer's files are {size} bytes");
    }

    #[test]
    fn the_page_loads_only_its_own_files_and_no_inline_code() {
        let page = ASSETS[0].body;
        assert!(page.contains(r#"src="/ui/app.js""#), "{page}");
        assert!(page.contains(r#"href="/ui/app.css""#), "{page}");
        // CSP refuses inline scripts, styles and handlers; the files must not need them.
        for forbidden in [
            "<style", "style=", "onclick=", "onload=", "http://", "https://",
        ] {
            assert!(!page.contains(forbidden), "index.html holds `{forbidden}`");
        }
        let script = ASSETS[1].body;
        for forbidden in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "eval(",
            "new Function",
        ] {
            assert!(!script.contains(forbidden), "app.js uses `{forbidden}`");
        }
    }
}
