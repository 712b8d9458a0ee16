//! Normalising tool calls the way the engine wants them, whatever the server sent: every
//! call has an id, and arguments are raw JSON text.

use std::sync::atomic::{AtomicU64, Ordering};

use fabric_domain::ToolCall;
use serde_json::Value;

/// Process-wide, so generated ids never repeat across the turns of one conversation (the
/// engine and Ollama's tool-name lookup match results to calls by id).
static NEXT_CALL_ID: AtomicU64 = AtomicU64::new(1);

/// An id for a call the server sent without one.
pub(crate) fn generate_call_id() -> String {
    format!("call_{}", NEXT_CALL_ID.fetch_add(1, Ordering::Relaxed))
}

/// Keeps the server's id when it gave one, else generates one.
pub(crate) fn call_id_or_generate(id: Option<String>) -> String {
    match id {
        Some(id) if !id.trim().is_empty() => id,
        _ => generate_call_id(),
    }
}

/// Arguments as the raw JSON text. A string is kept byte for byte (even if it is not valid
/// JSON, so the engine can tell the model exactly what was wrong); an object (Ollama, some
/// OpenAI-compatible servers) is serialised. No arguments at all means an empty object.
pub(crate) fn arguments_text(arguments: Option<Value>) -> String {
    match arguments {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(Value::String(text)) if text.trim().is_empty() => "{}".to_owned(),
        Some(Value::String(text)) => text,
        Some(other) => other.to_string(),
    }
}

/// One tool call delta as OpenAI-style streams send it.
#[derive(Debug, Default)]
pub(crate) struct CallDelta {
    /// The call's slot, when the server numbers them.
    pub(crate) index: Option<u64>,
    /// The call's id, usually only in its first delta.
    pub(crate) id: Option<String>,
    /// The tool name, usually only in its first delta.
    pub(crate) name: Option<String>,
    /// A fragment of the arguments text, or the whole arguments as an object.
    pub(crate) arguments: Option<Value>,
}

#[derive(Debug, Default)]
struct Slot {
    index: Option<u64>,
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Reassembles streamed tool calls from their deltas.
#[derive(Debug, Default)]
pub(crate) struct CallAssembler {
    slots: Vec<Slot>,
}

impl CallAssembler {
    /// Adds one delta; `position` is its place in the chunk's `tool_calls` list, the last
    /// resort for servers that send neither `index` nor `id`.
    pub(crate) fn push(&mut self, position: usize, delta: CallDelta) {
        let id = delta.id.filter(|id| !id.trim().is_empty());
        let slot = self.slot_for(delta.index, id.as_deref(), position);
        if slot.id.is_none() {
            slot.id = id;
        }
        if let Some(name) = delta.name.filter(|n| !n.is_empty()) {
            // Most servers send the name once; some repeat it whole in every delta, a few
            // split it. Repeats are ignored, anything else is a fragment.
            if slot.name.is_empty() {
                slot.name = name;
            } else if slot.name != name {
                slot.name.push_str(&name);
            }
        }
        match delta.arguments {
            None | Some(Value::Null) => {}
            Some(Value::String(fragment)) => slot.arguments.push_str(&fragment),
            // An object is the complete arguments, not a fragment.
            Some(object) => slot.arguments = object.to_string(),
        }
    }

    fn slot_for(&mut self, index: Option<u64>, id: Option<&str>, position: usize) -> &mut Slot {
        let found = if let Some(index) = index {
            self.slots.iter().position(|s| s.index == Some(index))
        } else if let Some(id) = id {
            self.slots.iter().position(|s| s.id.as_deref() == Some(id))
        } else if position < self.slots.len() {
            Some(position)
        } else {
            None
        };
        let at = match found {
            Some(at) => at,
            None => {
                self.slots.push(Slot {
                    index,
                    ..Slot::default()
                });
                self.slots.len() - 1
            }
        };
        &mut self.slots[at]
    }

    /// The finished calls in the order they were started; empty slots are dropped.
    pub(crate) fn finish(self) -> Vec<ToolCall> {
        self.slots
            .into_iter()
            .filter(|s| !s.name.is_empty() || !s.arguments.is_empty())
            .map(|s| ToolCall {
                id: call_id_or_generate(s.id),
                name: s.name,
                arguments: arguments_text(Some(Value::String(s.arguments))),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn delta(index: Option<u64>, id: Option<&str>, name: Option<&str>, args: Value) -> CallDelta {
        CallDelta {
            index,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            arguments: Some(args),
        }
    }

    #[test]
    fn arguments_keep_invalid_text_and_serialise_objects() {
        assert_eq!(arguments_text(Some(json!("{bad"))), "{bad");
        assert_eq!(arguments_text(Some(json!({"a": 1}))), r#"{"a":1}"#);
        assert_eq!(arguments_text(None), "{}");
        assert_eq!(arguments_text(Some(json!(""))), "{}");
    }

    #[test]
    fn generated_ids_are_unique() {
        assert_ne!(generate_call_id(), generate_call_id());
        assert_eq!(call_id_or_generate(Some("abc".into())), "abc");
        assert!(call_id_or_generate(Some(" ".into())).starts_with("call_"));
    }

    #[test]
    fn deltas_by_index_interleave() {
        let mut a = CallAssembler::default();
        a.push(0, delta(Some(0), Some("c1"), Some("read"), json!("{\"pa")));
        a.push(0, delta(Some(1), Some("c2"), Some("list"), json!("")));
        a.push(0, delta(Some(0), None, None, json!("th\":1}")));
        a.push(0, delta(Some(1), None, None, json!("{}")));
        let calls = a.finish();
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].name.as_str()),
            ("c1", "read")
        );
        assert_eq!(calls[0].arguments, r#"{"path":1}"#);
        assert_eq!(
            (calls[1].id.as_str(), calls[1].arguments.as_str()),
            ("c2", "{}")
        );
    }

    #[test]
    fn deltas_without_index_use_id_then_position() {
        let mut a = CallAssembler::default();
        a.push(0, delta(None, Some("x"), Some("f"), json!("{\"a\"")));
        a.push(1, delta(None, Some("y"), Some("g"), json!("{}")));
        a.push(0, delta(None, Some("x"), None, json!(":2}")));
        let calls = a.finish();
        assert_eq!(calls[0].arguments, r#"{"a":2}"#);
        assert_eq!(calls[1].name, "g");

        let mut b = CallAssembler::default();
        b.push(0, delta(None, None, Some("f"), json!("{\"a\"")));
        b.push(0, delta(None, None, Some("f"), json!(":3}")));
        let calls = b.finish();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "f");
        assert_eq!(calls[0].arguments, r#"{"a":3}"#);
        assert!(calls[0].id.starts_with("call_"));
    }

    #[test]
    fn object_arguments_replace_and_empty_slots_drop() {
        let mut a = CallAssembler::default();
        a.push(0, delta(Some(0), None, Some("f"), json!({"k": "v"})));
        a.push(0, CallDelta::default());
        let calls = a.finish();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].arguments, r#"{"k":"v"}"#);
    }
}
