//! A client for legacy HTTP+SSE MCP servers (protocol 2024-11-05), which rmcp dropped in
//! 0.11. The protocol is small: a `GET` opens an SSE stream whose first `endpoint` event
//! names where to `POST` messages; answers come back as `message` events on the stream.
//! We hand rmcp the two halves as a `(Sink, Stream)` pair and it does the rest.

use futures_util::{Sink, Stream, StreamExt};
use reqwest::header::{ACCEPT, HeaderMap};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use sse_stream::SseStream;
use std::pin::Pin;

/// Why a message could not be posted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LegacySseError {
    /// The stream could not be opened, or ended before naming its message endpoint: the
    /// detail of the server's `Initialize` failure.
    #[error("{0}")]
    Open(String),
    /// A message could not be posted.
    #[error("posting to the MCP server's message endpoint failed: {0}")]
    Post(String),
}

/// The outgoing half.
pub(crate) type MessageSink =
    Pin<Box<dyn Sink<TxJsonRpcMessage<RoleClient>, Error = LegacySseError> + Send>>;
/// The incoming half.
pub(crate) type MessageStream = Pin<Box<dyn Stream<Item = RxJsonRpcMessage<RoleClient>> + Send>>;

/// Opens the SSE stream at `url`, waits for its `endpoint` event, and returns the pair.
pub(crate) async fn open(
    client: reqwest::Client,
    url: &str,
    headers: HeaderMap,
) -> Result<(MessageSink, MessageStream), LegacySseError> {
    let response = client
        .get(url)
        .headers(headers.clone())
        .header(ACCEPT, "text/event-stream")
        .send()
        .await
        .map_err(|e| LegacySseError::Open(format!("cannot open the SSE stream at {url}: {e}")))?;
    if !response.status().is_success() {
        return Err(LegacySseError::Open(format!(
            "the SSE stream at {url} answered {}",
            response.status()
        )));
    }
    let base = response.url().clone();
    let mut events = SseStream::from_bytes_stream(response.bytes_stream());
    let endpoint = loop {
        match events.next().await {
            Some(Ok(event)) if event.event.as_deref() == Some("endpoint") => {
                let data = event.data.unwrap_or_default();
                break base.join(data.trim()).map_err(|e| {
                    LegacySseError::Open(format!(
                        "the server's endpoint `{data}` is not a URL: {e}"
                    ))
                })?;
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                return Err(LegacySseError::Open(format!(
                    "the SSE stream at {url} broke: {e}"
                )));
            }
            None => {
                return Err(LegacySseError::Open(format!(
                    "the SSE stream at {url} ended before naming its message endpoint"
                )));
            }
        }
    };
    let incoming = events.filter_map(|event| async move {
        let event = event.ok()?;
        // Events other than `message` (and keep-alive comments) carry no JSON-RPC.
        if event.event.as_deref().is_some_and(|e| e != "message") {
            return None;
        }
        match serde_json::from_str(event.data.as_deref()?) {
            Ok(message) => Some(message),
            Err(e) => {
                tracing::warn!("ignoring an SSE message that is not JSON-RPC: {e}");
                None
            }
        }
    });
    let outgoing = futures_util::sink::unfold(
        (client, endpoint, headers),
        |(client, endpoint, headers), message: TxJsonRpcMessage<RoleClient>| async move {
            let response = client
                .post(endpoint.clone())
                .headers(headers.clone())
                .json(&message)
                .send()
                .await
                .map_err(|e| LegacySseError::Post(e.to_string()))?;
            if !response.status().is_success() {
                return Err(LegacySseError::Post(format!(
                    "{} answered {}",
                    endpoint,
                    response.status()
                )));
            }
            Ok((client, endpoint, headers))
        },
    );
    Ok((Box::pin(outgoing), Box::pin(incoming)))
}
