//! Bearer-token auth. It wraps the protected routes and runs before their handlers, so an
//! unauthenticated request never reaches the body limit's reading, the run limit or the
//! launcher and cannot spend anyone's budget.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::task::{Context, Poll};

use axum::http::{HeaderMap, Request, header};
use axum::response::{IntoResponse, Response};
use futures_util::future::Either;
use tower::{Layer, Service};

use crate::{ApiError, AppState};

/// A check every request of the routes it wraps must pass before it reaches them; a refused
/// one is answered with the check's error. A tower layer rather than `from_fn` middleware:
/// the request goes on to the route's own future, with no future of the check's kept beside
/// it (`from_fn` boxed one per layer, 1.1 KiB each, for as long as the answer takes: a
/// blocking `POST /run`'s whole run, issue #45).
#[derive(Clone)]
pub(crate) struct Guard {
    state: AppState,
    check: fn(&AppState, &HeaderMap) -> Result<(), ApiError>,
}

impl Guard {
    /// The bearer token, when the server has one.
    pub(crate) fn token(state: AppState) -> Self {
        Self {
            state,
            check: require_token,
        }
    }

    /// Without a token, only loopback `Host` names.
    pub(crate) fn loopback_host(state: AppState) -> Self {
        Self {
            state,
            check: require_loopback_host,
        }
    }
}

impl<S> Layer<S> for Guard {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            inner,
            guard: self.clone(),
        }
    }
}

/// A service behind a check: the routes of [`crate::App`] behind a server's auth.
#[derive(Clone)]
pub struct Guarded<S> {
    inner: S,
    guard: Guard,
}

impl<S, B> Service<Request<B>> for Guarded<S>
where
    S: Service<Request<B>, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<Ready<Result<Response, Infallible>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        match (self.guard.check)(&self.guard.state, request.headers()) {
            Ok(()) => Either::Right(self.inner.call(request)),
            Err(refused) => Either::Left(ready(Ok(refused.into_response()))),
        }
    }
}

fn require_token(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = &state.inner.config.token else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    if given.is_some_and(|t| same(t.as_bytes(), expected.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::Unauthorized)
    }
}

fn require_loopback_host(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    if state.inner.config.token.is_none()
        && let Some(host) = headers.get(header::HOST)
    {
        let text = host.to_str().unwrap_or_default();
        if !is_loopback_name(text) {
            return Err(ApiError::HostNotAllowed(text.chars().take(100).collect()));
        }
    }
    Ok(())
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
