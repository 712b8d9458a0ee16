//! The `outputSchema` of each tool the server offers (issue #29): the shape of its
//! `structuredContent`, which clients check the answer against. Written out rather than
//! derived: the answers are projections of core types that carry no JSON Schema, and a
//! schema says what a client may rely on (the keys below), not every field the answer holds.
//! The Python SDK's client validates every answer of the suite against these.

use serde_json::{Value, json};

fn object(required: &[&str], properties: Value) -> Value {
    json!({"type": "object", "required": required, "properties": properties})
}

fn maybe(kind: &str) -> Value {
    json!({"type": [kind, "null"]})
}

fn strings() -> Value {
    json!({"type": "array", "items": {"type": "string"}})
}

/// `run_task`: the specialist's finish payload (its own keys) and `_meta`.
pub(crate) fn run_task() -> Value {
    let meta = object(
        &["run_id", "status"],
        json!({
            "run_id": {"type": "string"},
            "status": {"type": "string"},
            "reason": maybe("string"),
            "steps": {"type": "integer"},
            "usage": {"type": "object"},
            "specialist_ids": strings(),
        }),
    );
    object(&["_meta"], json!({"_meta": meta}))
}

/// `list_specialists`.
pub(crate) fn list_specialists() -> Value {
    let entry = object(
        &["id", "description", "tools"],
        json!({
            "id": {"type": "string"},
            "description": {"type": "string"},
            "tools": strings(),
            "mcp_servers": strings(),
            "delegates": strings(),
        }),
    );
    object(
        &["specialists", "default"],
        json!({"specialists": {"type": "array", "items": entry}, "default": {"type": "string"}}),
    )
}

/// `get_run`.
pub(crate) fn get_run() -> Value {
    object(
        &["run_id", "status", "events"],
        json!({
            "run_id": {"type": "string"},
            "status": {"type": "string"},
            "prompt": maybe("string"),
            "result": {},
            "reason": maybe("string"),
            "steps": maybe("integer"),
            "usage": maybe("object"),
            "resumable": {"type": "boolean"},
            "queued": {"type": "boolean"},
            "events": {"type": "array", "items": object(&["seq", "kind"], json!({
                "seq": {"type": "integer"}, "kind": {"type": "string"},
            }))},
        }),
    )
}

/// `search_runs`.
pub(crate) fn search_runs() -> Value {
    let hit = object(
        &["run_id", "status"],
        json!({
            "run_id": {"type": "string"},
            "status": {"type": "string"},
            "started_at": {"type": "number"},
            "specialist_ids": strings(),
            "score": {"type": "number"},
        }),
    );
    object(
        &["mode", "hits"],
        json!({"mode": {"type": "string"}, "note": maybe("string"), "hits": {"type": "array", "items": hit}}),
    )
}

/// `run_stats`.
pub(crate) fn run_stats() -> Value {
    object(
        &["by", "rows"],
        json!({"by": {"type": "string"}, "rows": {"type": "array", "items": {"type": "object"}}}),
    )
}

/// `prune_runs`.
pub(crate) fn prune_runs() -> Value {
    object(
        &["deleted", "run_ids"],
        json!({"deleted": {"type": "integer"}, "run_ids": strings()}),
    )
}
