//! The Responses wire: `POST /v1/responses`, a whole response object or the same streamed
//! as semantic SSE events (`response.created`, `response.output_item.added`,
//! `response.output_text.delta`, `response.function_call_arguments.delta`,
//! `response.output_item.done`, `response.completed`), each with its `sequence_number`.
//! Answers are kept by id, so a request chained by `previous_response_id` continues its
//! conversation, and an unknown id is refused as the API refuses it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::server::{
    Scripted, Shared, Wire, fragments, json_reply, named_model, next_turn, streaming_reply,
    turn_usage, unix_now,
};

/// Ids are unique across conversations (turn numbers repeat when turns go by conversation).
static NEXT_RESPONSE: AtomicU64 = AtomicU64::new(1);

/// `POST /v1/responses`: answers with the next turn.
pub(crate) async fn create(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let scripted = match next_turn(&shared, Wire::Responses, "/v1/responses", &body).await {
        Ok(scripted) => scripted,
        Err(reply) => return reply,
    };
    let reply = Reply::new(&shared, &scripted);
    // The steps through this answer: those it was asked after (the chain's included), and
    // itself.
    shared.remember_response(reply.id.clone(), scripted.request.steps + 1);
    if scripted.request.stream == Some(true) {
        streaming_reply(
            "text/event-stream",
            reply.sse_events(),
            shared.scenario.stream_delay_ms,
        )
    } else {
        json_reply(StatusCode::OK, &reply.response("completed"))
    }
}

struct Reply<'a> {
    scripted: &'a Scripted,
    id: String,
    model: String,
    usage: Option<(u64, u64)>,
}

impl<'a> Reply<'a> {
    fn new(shared: &Shared, scripted: &'a Scripted) -> Self {
        Self {
            scripted,
            id: format!(
                "resp_scripted_{}",
                NEXT_RESPONSE.fetch_add(1, Ordering::Relaxed)
            ),
            model: named_model(shared, scripted.request.model.as_deref()),
            usage: turn_usage(scripted),
        }
    }

    fn text(&self) -> &str {
        self.scripted.turn.content.as_deref().unwrap_or_default()
    }

    /// The output items, in order: the text as one message, then each call.
    fn output(&self) -> Vec<Value> {
        let mut items = Vec::new();
        if !self.text().is_empty() {
            items.push(json!({
                "type": "message", "id": format!("msg_{}", self.id), "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": self.text(), "annotations": []}],
            }));
        }
        for (n, call) in self.scripted.turn.tool_calls.iter().enumerate() {
            let call_id = call
                .id
                .clone()
                .unwrap_or_else(|| format!("call_{}_{n}", self.id));
            items.push(json!({
                "type": "function_call", "id": format!("fc_{}_{n}", self.id), "status": "completed",
                "call_id": call_id, "name": call.name,
                "arguments": call.arguments.to_string(),
            }));
        }
        items
    }

    /// The response object with `status`; the scripted `length` finish is an incomplete one.
    fn response(&self, status: &str) -> Value {
        let length = self.scripted.turn.finish_reason.as_deref() == Some("length");
        let (status, details) = match (status, length) {
            ("completed", true) => ("incomplete", json!({"reason": "max_output_tokens"})),
            (status, _) => (status, Value::Null),
        };
        let mut response = json!({
            "id": self.id, "object": "response", "created_at": unix_now(),
            "status": status, "error": null, "incomplete_details": details,
            "model": self.model,
            "output": if status == "in_progress" { json!([]) } else { json!(self.output()) },
            "previous_response_id": self.scripted.request.previous_response_id,
        });
        if let (Some((input, output)), "completed" | "incomplete") = (self.usage, status) {
            response["usage"] = json!({
                "input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input + output,
            });
        }
        response
    }

    /// The events of a streamed reply, in the order the API sends them.
    fn sse_events(&self) -> Vec<String> {
        let mut sequence = 0u64;
        let mut event = |mut value: Value| {
            value["sequence_number"] = json!(sequence);
            sequence += 1;
            let kind = value["type"].as_str().unwrap_or("unknown").to_owned();
            format!("event: {kind}\ndata: {value}\n\n")
        };
        let mut events = vec![
            event(json!({"type": "response.created", "response": self.response("in_progress")})),
            event(
                json!({"type": "response.in_progress", "response": self.response("in_progress")}),
            ),
        ];
        for (index, item) in self.output().into_iter().enumerate() {
            let item_id = item["id"].clone();
            let mut opened = item.clone();
            match item["type"].as_str() {
                Some("message") => {
                    opened["content"] = json!([]);
                    events.push(event(json!({"type": "response.output_item.added", "output_index": index, "item": opened})));
                    for piece in fragments(self.text()) {
                        events.push(event(json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": index, "content_index": 0, "delta": piece})));
                    }
                    events.push(event(json!({"type": "response.output_text.done", "item_id": item_id, "output_index": index, "content_index": 0, "text": self.text()})));
                }
                _ => {
                    opened["arguments"] = json!("");
                    events.push(event(json!({"type": "response.output_item.added", "output_index": index, "item": opened})));
                    let arguments = item["arguments"].as_str().unwrap_or_default().to_owned();
                    for piece in fragments(&arguments) {
                        events.push(event(json!({"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": index, "delta": piece})));
                    }
                    events.push(event(json!({"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": index, "arguments": arguments})));
                }
            }
            events.push(event(
                json!({"type": "response.output_item.done", "output_index": index, "item": item}),
            ));
        }
        let last = self.response("completed");
        let kind = if last["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        events.push(event(json!({"type": kind, "response": last})));
        events
    }
}
