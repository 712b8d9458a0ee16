//! Ollama's native wire: `POST /api/chat` (JSON or NDJSON), `/api/tags`, `/api/show`,
//! `/api/version`, `POST /api/pull`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::scenario::{ModelInfo, ScriptedCall};
use crate::server::{
    Shared, Wire, fragments, json_reply, named_model, next_turn, rfc3339_now, streaming_reply,
    usage,
};

/// The version `/api/version` reports: recent enough that clients enable tool calling and
/// `/api/show` capabilities, which arrived in 0.6.x.
const OLLAMA_VERSION: &str = "0.12.6";

/// `GET /api/version`.
pub(crate) async fn version() -> Response {
    json_reply(StatusCode::OK, &json!({ "version": OLLAMA_VERSION }))
}

/// `GET /api/tags`: the scripted models as Ollama lists local models.
pub(crate) async fn tags(State(shared): State<Arc<Shared>>) -> Response {
    let modified = rfc3339_now();
    let models: Vec<Value> = shared
        .scenario
        .models
        .iter()
        .map(|m| {
            json!({
                "name": m.name,
                "model": m.name,
                "modified_at": modified,
                "size": approximate_size(&m.parameter_size),
                "digest": "0000000000000000000000000000000000000000000000000000000000000000",
                "details": details(m),
            })
        })
        .collect();
    json_reply(StatusCode::OK, &json!({ "models": models }))
}

/// `POST /api/show {"model": ...}` (older clients send `"name"`).
pub(crate) async fn show(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(name) = request
        .get("model")
        .or_else(|| request.get("name"))
        .and_then(Value::as_str)
    else {
        return json_reply(
            StatusCode::BAD_REQUEST,
            &json!({ "error": "model is required" }),
        );
    };
    // Ollama treats `name` and `name:latest` as the same model.
    let found = shared.scenario.models.iter().find(|m| {
        m.name == name || m.name == format!("{name}:latest") || name == format!("{}:latest", m.name)
    });
    match found {
        Some(m) => json_reply(
            StatusCode::OK,
            &json!({
                "license": "",
                "modelfile": "",
                "parameters": "",
                "template": "",
                "details": details(m),
                "model_info": match m.context_length {
                    Some(n) => json!({
                        "general.architecture": m.family,
                        format!("{}.context_length", m.family): n,
                    }),
                    None => json!({}),
                },
                "capabilities": m.capabilities,
                "modified_at": rfc3339_now(),
            }),
        ),
        None => json_reply(
            StatusCode::NOT_FOUND,
            &json!({ "error": format!("model '{name}' not found") }),
        ),
    }
}

/// `POST /api/chat`: answers with the next turn; streams unless `"stream": false`, as Ollama.
pub(crate) async fn chat(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let scripted = match next_turn(&shared, Wire::Ollama, "/api/chat", &body).await {
        Ok(scripted) => scripted,
        Err(reply) => return reply,
    };
    let turn = &scripted.turn;
    let model = named_model(&shared, scripted.request.model.as_deref());
    let calls: Vec<Value> = turn.tool_calls.iter().map(wire_call).collect();
    let content = if turn.content_null {
        Value::Null
    } else {
        Value::String(turn.content.clone().unwrap_or_default())
    };
    let output_chars = turn.content.as_deref().map_or(0, str::len)
        + calls.iter().map(|c| c.to_string().len()).sum::<usize>();
    let done_reason = turn
        .finish_reason
        .clone()
        .unwrap_or_else(|| "stop".to_owned());

    let mut last = json!({
        "model": model,
        "created_at": rfc3339_now(),
        "message": { "role": "assistant", "content": "" },
        "done": true,
        "done_reason": done_reason,
    });
    if !turn.omit_usage
        && let Some(object) = last.as_object_mut()
    {
        let (prompt, completion) = usage(&scripted, output_chars);
        // Durations in nanoseconds, as Ollama reports them; plausible, not measured.
        object.insert(
            "total_duration".into(),
            json!(1_000_000 * (prompt + completion)),
        );
        object.insert("load_duration".into(), json!(1_000_000));
        object.insert("prompt_eval_count".into(), json!(prompt));
        object.insert("prompt_eval_duration".into(), json!(100_000 * prompt));
        object.insert("eval_count".into(), json!(completion));
        object.insert("eval_duration".into(), json!(1_000_000 * completion));
    }

    let stream = scripted.request.stream != Some(false);
    if !stream {
        // One object: the final line with the whole message in it.
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert("content".into(), content);
        if !calls.is_empty() {
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        if let Some(object) = last.as_object_mut() {
            object.insert("message".into(), Value::Object(message));
        }
        return json_reply(StatusCode::OK, &last);
    }

    let line = |message: Value| {
        let mut line = json!({
            "model": model,
            "created_at": rfc3339_now(),
            "message": message,
            "done": false,
        })
        .to_string();
        line.push('\n');
        line
    };
    let mut events = Vec::new();
    if turn.content_null {
        events.push(line(json!({ "role": "assistant", "content": null })));
    } else {
        for piece in fragments(turn.content.as_deref().unwrap_or_default()) {
            events.push(line(json!({ "role": "assistant", "content": piece })));
        }
    }
    // Ollama sends all tool calls of a turn together, in one line.
    if !calls.is_empty() {
        events.push(line(
            json!({ "role": "assistant", "content": "", "tool_calls": calls }),
        ));
    }
    events.push(format!("{last}\n"));
    streaming_reply(
        "application/x-ndjson",
        events,
        shared.scenario.stream_delay_ms,
    )
}

/// A native tool call: arguments as an object (or the raw string when scripted), no id unless
/// the scenario gives one (Ollama added ids only in later versions).
fn wire_call(call: &ScriptedCall) -> Value {
    let arguments = match &call.arguments_raw {
        Some(raw) => Value::String(raw.clone()),
        None => call.arguments.clone(),
    };
    let mut wire = Map::new();
    if let Some(id) = &call.id {
        wire.insert("id".into(), json!(id));
    }
    wire.insert(
        "function".into(),
        json!({ "name": call.name, "arguments": arguments }),
    );
    Value::Object(wire)
}

fn details(m: &ModelInfo) -> Value {
    json!({
        "parent_model": "",
        "format": "gguf",
        "family": m.family,
        "families": [m.family],
        "parameter_size": m.parameter_size,
        "quantization_level": "Q4_K_M",
    })
}

/// Bytes on disk of a Q4_K_M model of this many parameters (about 0.6 byte each), so that
/// clients that show or sort by size see something plausible.
fn approximate_size(parameter_size: &str) -> u64 {
    let text = parameter_size.trim();
    let (number, scale) = match text.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('B') => (&text[..text.len() - 1], 1e9),
        Some('M') => (&text[..text.len() - 1], 1e6),
        Some('K') => (&text[..text.len() - 1], 1e3),
        _ => (text, 1.0),
    };
    let params = number.trim().parse::<f64>().unwrap_or(0.0) * scale;
    (params * 0.6) as u64
}

/// `POST /api/pull {"model": ...}`: streams NDJSON progress lines as Ollama does
/// (`pulling manifest`, a layer downloading in steps with `total`/`completed`, `verifying
/// sha256 digest`, `success`), spaced by `stream_delay_ms`. Every pull succeeds.
pub(crate) async fn pull(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(name) = request
        .get("model")
        .or_else(|| request.get("name"))
        .and_then(Value::as_str)
    else {
        return json_reply(
            StatusCode::BAD_REQUEST,
            &json!({ "error": "model is required" }),
        );
    };
    tracing::debug!("scripted LLM server: pulling {name}");
    const TOTAL: u64 = 4_000_000;
    let digest = "sha256:0000000000000000000000000000000000000000000000000000000000000001";
    let mut lines = vec![json!({"status": "pulling manifest"})];
    for step in 1..=4u64 {
        lines.push(json!({
            "status": format!("pulling {}", &digest[7..19]),
            "digest": digest,
            "total": TOTAL,
            "completed": TOTAL * step / 4,
        }));
    }
    lines.push(json!({"status": "verifying sha256 digest"}));
    lines.push(json!({"status": "writing manifest"}));
    lines.push(json!({"status": "success"}));
    let events = lines.iter().map(|l| format!("{l}\n")).collect();
    streaming_reply(
        "application/x-ndjson",
        events,
        shared.scenario.stream_delay_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::approximate_size;

    #[test]
    fn sizes_are_plausible() {
        assert_eq!(approximate_size("7.6B"), 4_560_000_000);
        assert_eq!(approximate_size("135M"), 81_000_000);
        assert_eq!(approximate_size("nonsense"), 0);
    }
}
