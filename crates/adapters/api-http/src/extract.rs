//! Extractors whose rejections are [`ApiError`]s, so a bad body, id or query gets the same
//! JSON error shape and a stable code like every other error.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use fabric_domain::RunId;
use serde::de::DeserializeOwned;

use crate::{ApiError, AppState};

/// A JSON body, parsed with the exact serde error as the message.
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        if !is_json(req.headers()) {
            return Err(ApiError::UnsupportedMediaType);
        }
        let limit = state.inner.config.max_body_bytes;
        // Boxed: inline, the body's reading sized the future of every handler that takes a
        // JSON body, a blocking `POST /run`'s for its run's life (issue #45).
        let bytes =
            Box::pin(Bytes::from_request(req, state))
                .await
                .map_err(|e: BytesRejection| match e.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(limit),
                    _ => ApiError::InvalidJson(e.body_text()),
                })?;
        let mut de = serde_json::Deserializer::from_slice(&bytes);
        let value = T::deserialize(&mut de)
            .and_then(|v| de.end().map(|()| v))
            .map_err(|e| match e.classify() {
                serde_json::error::Category::Data => ApiError::InvalidRequest(e.to_string()),
                _ => ApiError::InvalidJson(e.to_string()),
            })?;
        Ok(Self(value))
    }
}

/// `application/json`, with or without parameters (`; charset=utf-8`), or `+json` types.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|mime| {
            let mime = mime.trim().to_ascii_lowercase();
            mime == "application/json"
                || (mime.starts_with("application/") && mime.ends_with("+json"))
        })
        .unwrap_or(false)
}

/// The `{id}` of a run path, checked to be a run id (so `../x` never reaches the store).
pub(crate) struct RunIdPath(pub(crate) RunId);

impl FromRequestParts<AppState> for RunIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Path(text) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::InvalidRunId(e.body_text()))?;
        RunId::parse(&text)
            .map(Self)
            .map_err(|_| ApiError::InvalidRunId(text))
    }
}

/// A query string parsed into `T`, unknown parameters refused.
pub(crate) struct QueryOf<T>(pub(crate) T);

impl<T: DeserializeOwned + Default> FromRequestParts<AppState> for QueryOf<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &AppState) -> Result<Self, ApiError> {
        match parts.uri.query() {
            None | Some("") => Ok(Self(T::default())),
            Some(_) => axum::extract::Query::<T>::try_from_uri(&parts.uri)
                .map(|q| Self(q.0))
                .map_err(|e| ApiError::InvalidParameter(e.body_text())),
        }
    }
}
