//! The server's last word on authorization: the `WWW-Authenticate` of a 401 (no or a bad
//! token) or of a 403 (`insufficient_scope`), kept per connection so errors can say what
//! the server asked for and `fabric mcp login` can start from it (the scopes it names, the
//! protected-resource metadata it points at).

use futures_util::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What a server answered when it refused a request for want of authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    /// 401: no token, or one it does not accept.
    Unauthorized(String),
    /// 403 `insufficient_scope`: a token without the scopes this request needs.
    InsufficientScope(String),
}

impl Challenge {
    /// The `WWW-Authenticate` header as sent.
    pub fn header(&self) -> &str {
        match self {
            Self::Unauthorized(h) | Self::InsufficientScope(h) => h,
        }
    }
}

/// Where a connection's last challenge is kept; shared with whoever explains its errors.
pub(crate) type ChallengeSlot = Arc<Mutex<Option<Challenge>>>;

/// A streamable HTTP client that notes every authorization challenge its inner client
/// reports, and otherwise changes nothing.
#[derive(Clone)]
pub(crate) struct Recording<C> {
    pub(crate) inner: C,
    pub(crate) slot: ChallengeSlot,
}

impl<C: StreamableHttpClient> Recording<C> {
    fn note<T>(
        &self,
        result: Result<T, StreamableHttpError<C::Error>>,
    ) -> Result<T, StreamableHttpError<C::Error>> {
        let seen = match &result {
            Err(StreamableHttpError::AuthRequired(e)) => {
                Some(Challenge::Unauthorized(e.www_authenticate_header.clone()))
            }
            Err(StreamableHttpError::InsufficientScope(e)) => Some(Challenge::InsufficientScope(
                e.www_authenticate_header.clone(),
            )),
            _ => None,
        };
        if let Some(challenge) = seen {
            *self
                .slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(challenge);
        }
        result
    }
}

type SseStream = BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>;

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for Recording<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let result = self
            .inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        self.note(result)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let result = self
            .inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.note(result)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        let result = self
            .inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await;
        self.note(result)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        let result = self
            .inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await;
        self.note(result)
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        let result = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.note(result)
    }
}
