//! The OpenAI wire: `POST /v1/chat/completions` (plain JSON or SSE) and `GET /v1/models`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::scenario::ScriptedCall;
use crate::server::{
    Scripted, Shared, Wire, fragments, json_reply, named_model, next_turn, streaming_reply,
    unix_now, usage,
};

/// `GET /v1/models`.
pub(crate) async fn models(State(shared): State<Arc<Shared>>) -> Response {
    let created = unix_now();
    let data: Vec<Value> = shared
        .scenario
        .models
        .iter()
        .map(|m| json!({ "id": m.name, "object": "model", "created": created, "owned_by": "scripted" }))
        .collect();
    json_reply(StatusCode::OK, &json!({ "object": "list", "data": data }))
}

/// `GET /props`, as llama.cpp's server answers it: the window of one slot, from the first
/// model's `context_length`, and whether its chat template can call tools (its
/// `capabilities` name `tools`); 404 without a window, as servers without `/props` answer.
pub(crate) async fn props(State(shared): State<Arc<Shared>>) -> Response {
    let first = shared.scenario.models.first();
    match first.and_then(|m| m.context_length.map(|n| (m, n))) {
        Some((model, n_ctx)) => json_reply(
            StatusCode::OK,
            &json!({
                "default_generation_settings": {"n_ctx": n_ctx, "params": {"n_predict": -1}},
                "total_slots": 1,
                "model_path": "scripted.gguf",
                "chat_template_caps": {"supports_tools": model.capabilities.iter().any(|c| c == "tools")},
            }),
        ),
        None => json_reply(
            StatusCode::NOT_FOUND,
            &json!({"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}),
        ),
    }
}

/// `POST /v1/chat/completions`: answers with the next turn.
pub(crate) async fn chat(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let scripted = match next_turn(&shared, Wire::OpenAi, "/v1/chat/completions", &body).await {
        Ok(scripted) => scripted,
        Err(reply) => return reply,
    };
    let reply = Reply::new(&shared, &scripted);
    if scripted.request.stream == Some(true) {
        streaming_reply(
            "text/event-stream",
            reply.sse_events(scripted.request.include_usage),
            shared.scenario.stream_delay_ms,
        )
    } else {
        json_reply(StatusCode::OK, &reply.completion())
    }
}

/// Everything one reply needs, computed once for either shape.
struct Reply<'a> {
    scripted: &'a Scripted,
    id: String,
    model: String,
    created: u64,
    /// The wire form of each call's arguments: a JSON string, or an object.
    arguments: Vec<Value>,
    finish_reason: String,
    usage: Option<Value>,
}

impl<'a> Reply<'a> {
    fn new(shared: &Shared, scripted: &'a Scripted) -> Self {
        let turn = &scripted.turn;
        let arguments: Vec<Value> = turn.tool_calls.iter().map(wire_arguments).collect();
        let output_chars = turn.content.as_deref().map_or(0, str::len)
            + arguments.iter().map(|a| a.to_string().len()).sum::<usize>();
        let usage = (!turn.omit_usage).then(|| {
            let (prompt, completion) = usage(scripted, output_chars);
            json!({
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            })
        });
        let finish_reason = turn.finish_reason.clone().unwrap_or_else(|| {
            if turn.tool_calls.is_empty() {
                "stop".to_owned()
            } else {
                "tool_calls".to_owned()
            }
        });
        Self {
            scripted,
            id: format!("chatcmpl-scripted-{}", scripted.number),
            model: named_model(shared, scripted.request.model.as_deref()),
            created: unix_now(),
            arguments,
            finish_reason,
            usage,
        }
    }

    fn content(&self) -> Value {
        let turn = &self.scripted.turn;
        if turn.content_null {
            Value::Null
        } else {
            Value::String(turn.content.clone().unwrap_or_default())
        }
    }

    fn call_id(&self, n: usize, call: &ScriptedCall) -> Option<String> {
        if call.omit_id {
            return None;
        }
        Some(
            call.id
                .clone()
                .unwrap_or_else(|| format!("call_{}_{n}", self.scripted.number)),
        )
    }

    /// The non-streaming `chat.completion` object.
    fn completion(&self) -> Value {
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert("content".into(), self.content());
        let calls = &self.scripted.turn.tool_calls;
        if !calls.is_empty() {
            let wire: Vec<Value> = calls
                .iter()
                .zip(&self.arguments)
                .enumerate()
                .map(|(n, (call, arguments))| {
                    let mut c = Map::new();
                    if let Some(id) = self.call_id(n, call) {
                        c.insert("id".into(), json!(id));
                    }
                    c.insert("type".into(), json!("function"));
                    c.insert(
                        "function".into(),
                        json!({ "name": call.name, "arguments": arguments }),
                    );
                    Value::Object(c)
                })
                .collect();
            message.insert("tool_calls".into(), Value::Array(wire));
        }
        let mut completion = json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": message,
                "finish_reason": self.finish_reason,
            }],
        });
        if let (Some(usage), Some(object)) = (&self.usage, completion.as_object_mut()) {
            object.insert("usage".into(), usage.clone());
        }
        completion
    }

    fn chunk(&self, choices: Value) -> String {
        let chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        format!("data: {chunk}\n\n")
    }

    fn delta(&self, delta: Value) -> String {
        self.chunk(json!([{ "index": 0, "delta": delta, "finish_reason": null }]))
    }

    /// The SSE events of a streamed reply, in the order OpenAI sends them.
    fn sse_events(&self, include_usage: bool) -> Vec<String> {
        let turn = &self.scripted.turn;
        let mut events = Vec::new();
        // The first chunk names the role; content follows in deltas.
        let opening_content = if turn.content_null {
            Value::Null
        } else {
            json!("")
        };
        events.push(self.delta(json!({ "role": "assistant", "content": opening_content })));
        if !turn.content_null {
            for piece in fragments(turn.content.as_deref().unwrap_or_default()) {
                events.push(self.delta(json!({ "content": piece })));
            }
        }
        for (n, (call, arguments)) in turn.tool_calls.iter().zip(&self.arguments).enumerate() {
            // The header of each call carries the id and name with empty arguments; the
            // arguments string follows in fragments the client must concatenate by `index`.
            let mut header = Map::new();
            header.insert("index".into(), json!(n));
            if let Some(id) = self.call_id(n, call) {
                header.insert("id".into(), json!(id));
            }
            header.insert("type".into(), json!("function"));
            let (opening_args, rest) = match arguments {
                Value::String(text) => (json!(""), fragments(text)),
                // An object cannot be split: it rides whole in the header.
                object => (object.clone(), Vec::new()),
            };
            header.insert(
                "function".into(),
                json!({ "name": call.name, "arguments": opening_args }),
            );
            events.push(self.delta(json!({ "tool_calls": [Value::Object(header)] })));
            for piece in rest {
                events.push(self.delta(json!({
                    "tool_calls": [{ "index": n, "function": { "arguments": piece } }]
                })));
            }
        }
        events.push(self.chunk(json!([{
            "index": 0,
            "delta": {},
            "finish_reason": self.finish_reason,
        }])));
        if include_usage && let Some(usage) = &self.usage {
            let chunk = json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage,
            });
            events.push(format!("data: {chunk}\n\n"));
        }
        events.push("data: [DONE]\n\n".to_owned());
        events
    }
}

/// The arguments as the OpenAI wire carries them: a JSON string, unless scripted otherwise.
fn wire_arguments(call: &ScriptedCall) -> Value {
    if let Some(raw) = &call.arguments_raw {
        Value::String(raw.clone())
    } else if call.arguments_as_object {
        call.arguments.clone()
    } else {
        Value::String(call.arguments.to_string())
    }
}
