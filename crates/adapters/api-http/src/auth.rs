//! Bearer-token auth. It wraps the protected routes and runs before their handlers, so an
//! unauthenticated request never reaches the body limit's reading, the run limit or the
//! launcher and cannot spend anyone's budget.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use futures_util::future::Either;
use std::future::Future;

use crate::{ApiError, AppState};

pub(crate) fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> impl Future<Output = Result<Response, ApiError>> {
    let allowed = match &state.inner.config.token {
        Some(expected) => {
            let given = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| {
                    let (scheme, token) = v.trim().split_once(' ')?;
                    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
                });
            given.is_some_and(|t| same(t.as_bytes(), expected.as_bytes()))
        }
        None => true,
    };
    pass_if(
        allowed.then_some(()).ok_or(ApiError::Unauthorized),
        request,
        next,
    )
}

pub(crate) fn require_loopback_host(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> impl Future<Output = Result<Response, ApiError>> {
    let mut verdict = Ok(());
    if state.inner.config.token.is_none()
        && let Some(host) = request.headers().get(header::HOST)
    {
        let text = host.to_str().unwrap_or_default();
        if !is_loopback_name(text) {
            verdict = Err(ApiError::HostNotAllowed(text.chars().take(100).collect()));
        }
    }
    pass_if(verdict, request, next)
}

/// The request's way on once a check has judged it: the rest of the router, or the refusal.
/// Not an `async fn`: its future would keep the request beside the router's for as long as
/// the answer takes (a blocking `POST /run` for its run's life: 0.8 KiB a layer, issue #45).
fn pass_if(
    verdict: Result<(), ApiError>,
    request: Request,
    next: Next,
) -> impl Future<Output = Result<Response, ApiError>> {
    use futures_util::FutureExt;
    match verdict {
        Ok(()) => Either::Left(next.run(request).map(Ok)),
        Err(refused) => Either::Right(std::future::ready(Err(refused))),
    }
}

fn is_loopback_name(host: &str) -> bool {
    let host = host.trim();
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((inside, port)) if port.is_empty() || port.starts_with(':') => inside,
            _ => return false,
        },
        None => host.split_once(':').map_or(host, |(name, _port)| name),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Compares in time that depends only on the lengths, so the answer time does not reveal
/// how much of a guessed token was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::{is_loopback_name, same};

    #[test]
    fn only_loopback_names_pass_without_a_token() {
        for host in [
            "127.0.0.1:8787",
            "127.0.0.1",
            "127.1.2.3:80",
            "localhost:8787",
            "LOCALHOST",
            "localhost.",
            "app.localhost:1",
            "[::1]:8787",
            "[::1]",
        ] {
            assert!(is_loopback_name(host), "{host}");
        }
        for host in [
            "evil.example:8787",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "10.0.0.1:8787",
            "[::2]:8787",
            "[::1]x",
            "",
        ] {
            assert!(!is_loopback_name(host), "{host}");
        }
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }
}
