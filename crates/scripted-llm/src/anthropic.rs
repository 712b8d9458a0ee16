//! The Anthropic wire: `POST /v1/messages`, whole or streamed as SSE events
//! (`message_start`, `content_block_start`/`_delta`/`_stop`, `message_delta`,
//! `message_stop`), with tool inputs split across `input_json_delta`s. Requests without the
//! `anthropic-version` header or an `x-api-key` are refused as the API refuses them.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use crate::server::{
    Scripted, Shared, Wire, fragments, json_reply, named_model, next_turn, streaming_reply,
    turn_usage,
};

/// `POST /v1/messages`: answers with the next turn.
pub(crate) async fn messages(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.trim().is_empty())
    };
    if header("anthropic-version").is_none() {
        return json_reply(
            StatusCode::BAD_REQUEST,
            &error_body(
                "invalid_request_error",
                "anthropic-version: header is required",
            ),
        );
    }
    if header("x-api-key").is_none() {
        return json_reply(
            StatusCode::UNAUTHORIZED,
            &error_body("authentication_error", "x-api-key header is required"),
        );
    }
    let scripted = match next_turn(&shared, Wire::Anthropic, "/v1/messages", &body).await {
        Ok(scripted) => scripted,
        Err(reply) => return reply,
    };
    let reply = Reply::new(&shared, &scripted);
    if scripted.request.stream == Some(true) {
        streaming_reply(
            "text/event-stream",
            reply.sse_events(),
            shared.scenario.stream_delay_ms,
        )
    } else {
        json_reply(StatusCode::OK, &reply.message())
    }
}

/// An error object as the API writes it.
pub(crate) fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The error type the API uses for an HTTP status.
pub(crate) fn error_kind(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

struct Reply<'a> {
    scripted: &'a Scripted,
    id: String,
    model: String,
    stop_reason: String,
    usage: Option<(u64, u64)>,
}

impl<'a> Reply<'a> {
    fn new(shared: &Shared, scripted: &'a Scripted) -> Self {
        let turn = &scripted.turn;
        let stop_reason = match turn.finish_reason.as_deref() {
            Some("length") => "max_tokens".to_owned(),
            Some("stop") => "end_turn".to_owned(),
            Some(other) => other.to_owned(),
            None if turn.tool_calls.is_empty() => "end_turn".to_owned(),
            None => "tool_use".to_owned(),
        };
        Self {
            scripted,
            id: format!("msg_scripted_{}", scripted.number),
            model: named_model(shared, scripted.request.model.as_deref()),
            stop_reason,
            usage: turn_usage(scripted),
        }
    }

    fn call_id(&self, n: usize) -> String {
        self.scripted.turn.tool_calls[n]
            .id
            .clone()
            .unwrap_or_else(|| format!("toolu_{}_{n}", self.scripted.number))
    }

    fn text(&self) -> &str {
        self.scripted.turn.content.as_deref().unwrap_or_default()
    }

    /// The whole `message` object.
    fn message(&self) -> Value {
        let mut content = Vec::new();
        if !self.text().is_empty() {
            content.push(json!({"type": "text", "text": self.text()}));
        }
        for (n, call) in self.scripted.turn.tool_calls.iter().enumerate() {
            content.push(json!({"type": "tool_use", "id": self.call_id(n), "name": call.name, "input": call.arguments}));
        }
        let mut message = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self.stop_reason,
            "stop_sequence": null,
        });
        if let (Some((input, output)), Some(object)) = (self.usage, message.as_object_mut()) {
            object.insert(
                "usage".into(),
                json!({"input_tokens": input, "output_tokens": output}),
            );
        }
        message
    }

    /// The events of a streamed reply, in the order the API sends them.
    fn sse_events(&self) -> Vec<String> {
        let event = |value: Value| {
            let kind = value["type"].as_str().unwrap_or("unknown").to_owned();
            format!("event: {kind}\ndata: {value}\n\n")
        };
        let (input, output) = self.usage.unwrap_or((0, 0));
        let mut events = vec![event(json!({
            "type": "message_start",
            "message": {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                        "content": [], "stop_reason": null,
                        "usage": {"input_tokens": input, "output_tokens": 1}},
        }))];
        let mut index = 0;
        if !self.text().is_empty() {
            events.push(event(json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
            events.push(event(json!({"type": "ping"})));
            for piece in fragments(self.text()) {
                events.push(event(json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}})));
            }
            events.push(event(json!({"type": "content_block_stop", "index": index})));
            index += 1;
        }
        for (n, call) in self.scripted.turn.tool_calls.iter().enumerate() {
            events.push(event(json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": self.call_id(n), "name": call.name, "input": {}}})));
            for piece in fragments(&call.arguments.to_string()) {
                events.push(event(json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}})));
            }
            events.push(event(json!({"type": "content_block_stop", "index": index})));
            index += 1;
        }
        let mut delta = json!({"type": "message_delta", "delta": {"stop_reason": self.stop_reason, "stop_sequence": null}});
        if self.usage.is_some() {
            delta["usage"] = json!({"output_tokens": output});
        }
        events.push(event(delta));
        events.push(event(json!({"type": "message_stop"})));
        events
    }
}
