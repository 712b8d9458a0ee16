//! Tool calls a server failed to parse (issue #12): a tool-capable model wrote its call in
//! its own format, and the server handed it back as text. The seed's ADR-007 stands (a model
//! that cannot call tools is refused), but such a call is repaired, not failed, when it is
//! unmistakable: the text holds a call in one of the known formats, the named tool exists,
//! and its arguments are a JSON object. Prose that merely mentions JSON never becomes a call.
//!
//! Formats: Hermes/Qwen `<tool_call>{…}</tool_call>`, Llama 3.x `<|python_tag|>{…}`,
//! Mistral `[TOOL_CALLS][…]`, a bare JSON call (the whole text), and fenced JSON blocks
//! naming a known tool. A call is `{"name", "arguments"|"parameters"}` (arguments as an
//! object, or as a string holding one), or `{"function": {"name", "arguments"}}`.

use fabric_domain::ToolCall;
use serde_json::{Map, Value};

/// The format a repaired call was written in, as recorded in `tool_call_repaired`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `<tool_call>{…}</tool_call>` (Hermes, Qwen 2.5, many fine-tunes).
    Hermes,
    /// `<|python_tag|>{…}` (Llama 3.1–3.3).
    PythonTag,
    /// `[TOOL_CALLS][…]` (Mistral).
    Mistral,
    /// The whole text is a call, or a list of calls.
    BareJson,
    /// A fenced JSON block holding a call.
    FencedJson,
}

impl Format {
    /// The word written in the runlog.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hermes => "hermes",
            Self::PythonTag => "python_tag",
            Self::Mistral => "mistral",
            Self::BareJson => "bare_json",
            Self::FencedJson => "fenced_json",
        }
    }
}

/// Calls recovered from a text answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Repaired {
    /// The format they were written in.
    pub format: Format,
    /// The calls, in order, with ids `repaired_<step>_<n>` (deterministic, so a continued
    /// run replays them under the same ids).
    pub calls: Vec<ToolCall>,
    /// The text outside the calls, if any remains.
    pub rest: Option<String>,
}

/// The calls `text` holds, when it holds some in a known format and every one names a tool in
/// `known` with object arguments; `None` otherwise (the text stays a text answer).
pub fn repair(text: &str, known: &[String], step: u32) -> Option<Repaired> {
    let found = tagged(text, "<tool_call>", "</tool_call>", Format::Hermes)
        .or_else(|| python_tag(text))
        .or_else(|| mistral(text))
        .or_else(|| bare(text))
        .or_else(|| fenced(text, known))?;
    let (format, values, rest) = found;
    let mut calls = Vec::with_capacity(values.len());
    for (n, value) in values.iter().enumerate() {
        let (name, arguments) = call_of(value)?;
        if !known.iter().any(|k| k == name) {
            return None;
        }
        calls.push(ToolCall {
            id: format!("repaired_{step}_{n}"),
            name: name.to_owned(),
            arguments: Value::Object(arguments).to_string(),
        });
    }
    if calls.is_empty() {
        return None;
    }
    let rest = rest.trim();
    Some(Repaired {
        format,
        calls,
        rest: (!rest.is_empty()).then(|| rest.to_owned()),
    })
}

type Found = (Format, Vec<Value>, String);

/// Every `open … close` section (the last may lack its `close`, as generation often stops
/// there), each one JSON call.
fn tagged(text: &str, open: &str, close: &str, format: Format) -> Option<Found> {
    if !text.contains(open) {
        return None;
    }
    let mut values = Vec::new();
    let mut rest = String::new();
    let mut remaining = text;
    while let Some(at) = remaining.find(open) {
        rest.push_str(&remaining[..at]);
        let after = &remaining[at + open.len()..];
        let (inner, next) = match after.find(close) {
            Some(end) => (&after[..end], &after[end + close.len()..]),
            None => (after, ""),
        };
        values.extend(json_calls(inner.trim())?);
        remaining = next;
    }
    rest.push_str(remaining);
    Some((format, values, rest))
}

/// `<|python_tag|>` then one call, or several separated by `;`, up to an end token.
fn python_tag(text: &str) -> Option<Found> {
    const TAG: &str = "<|python_tag|>";
    let at = text.find(TAG)?;
    let mut body = &text[at + TAG.len()..];
    for end in ["<|eom_id|>", "<|eot_id|>"] {
        if let Some(cut) = body.find(end) {
            body = &body[..cut];
        }
    }
    let body = body.trim();
    let values = match json_calls(body) {
        Some(values) => values,
        None => body
            .split(';')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(|part| serde_json::from_str::<Value>(part).ok())
            .collect::<Option<Vec<_>>>()?,
    };
    Some((Format::PythonTag, values, text[..at].to_owned()))
}

/// `[TOOL_CALLS]` then a JSON list of calls.
fn mistral(text: &str) -> Option<Found> {
    const TAG: &str = "[TOOL_CALLS]";
    let at = text.find(TAG)?;
    let body = text[at + TAG.len()..].trim();
    let body = body.strip_suffix("</s>").unwrap_or(body).trim();
    Some((Format::Mistral, json_calls(body)?, text[..at].to_owned()))
}

/// The whole text is one call or a list of calls.
fn bare(text: &str) -> Option<Found> {
    let body = text.trim();
    if !(body.starts_with('{') || body.starts_with('[')) {
        return None;
    }
    Some((Format::BareJson, json_calls(body)?, String::new()))
}

/// Fenced blocks (```json, ```tool_call or bare ```) that are calls of known tools; other
/// blocks (a `package.json` shown beside a call) and the prose around them stay text.
fn fenced(text: &str, known: &[String]) -> Option<Found> {
    let mut values = Vec::new();
    let mut rest = String::new();
    let mut remaining = text;
    while let Some(at) = remaining.find("```") {
        let after = &remaining[at + 3..];
        let Some(line_end) = after.find('\n') else {
            break;
        };
        let info = after[..line_end].trim();
        let body = &after[line_end + 1..];
        let Some(end) = body.find("```") else {
            break;
        };
        let inner = body[..end].trim();
        let is_json = matches!(info, "" | "json" | "tool_call" | "tool_code" | "JSON");
        match json_calls(inner).filter(|_| is_json) {
            Some(calls)
                if calls.iter().all(|c| {
                    call_of(c).is_some_and(|(name, _)| known.iter().any(|k| k == name))
                }) =>
            {
                rest.push_str(&remaining[..at]);
                values.extend(calls);
            }
            _ => rest.push_str(&remaining[..at + 3 + line_end + 1 + end + 3]),
        }
        remaining = &body[end + 3..];
    }
    rest.push_str(remaining);
    (!values.is_empty()).then_some((Format::FencedJson, values, rest))
}

/// One JSON call, or a list of them; `None` when the text is not JSON.
fn json_calls(text: &str) -> Option<Vec<Value>> {
    match serde_json::from_str::<Value>(text).ok()? {
        Value::Array(items) if !items.is_empty() => Some(items),
        object @ Value::Object(_) => Some(vec![object]),
        _ => None,
    }
}

/// The name and object arguments of one call, in any of the shapes models write.
fn call_of(value: &Value) -> Option<(&str, Map<String, Value>)> {
    /// The keys a call object may have; any other (`version`, `results`, …) means the
    /// object is data that happens to have a `name`, not a call.
    const CALL_KEYS: &[&str] = &["name", "arguments", "parameters", "function", "id", "type"];
    let object = value.as_object()?;
    if object.keys().any(|k| !CALL_KEYS.contains(&k.as_str())) {
        return None;
    }
    let (name, arguments) = match object.get("function") {
        Some(Value::Object(function)) => (function.get("name")?, function.get("arguments")),
        _ => (
            object.get("name")?,
            object.get("arguments").or_else(|| object.get("parameters")),
        ),
    };
    let name = name.as_str()?;
    let arguments = match arguments {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        // Some formats carry the arguments as a JSON string.
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text).ok()? {
            Value::Object(map) => map,
            _ => return None,
        },
        Some(_) => return None,
    };
    Some((name, arguments))
}

#[cfg(test)]
mod tests;
