//! The runlog's edge: an event as its line, `{"seq", "ts", "kind", "step", "payload"}`, and
//! a line back as an event. The one place a payload is JSON (ADR-096).
//!
//! Writing: the envelope's fields in that order, the payload as its struct writes it with
//! its keys sorted (a `serde_json::Value`'s map is a `BTreeMap`) and a member's `pack_index`
//! added to it, byte for byte the lines the fabric always wrote
//! (crates/core/tests/golden/runlog.jsonl).
//!
//! Reading is tolerant, as docs/RUNLOG.md promises: an unknown kind keeps its name and
//! payload ([`EventPayload::Unknown`]), a payload that does not fit its struct is kept as
//! [`EventPayload::Unreadable`] for sinks to skip, never an error of the whole runlog; only
//! a line whose envelope is not one fails.

use serde::ser::{Error as _, SerializeStruct};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::{EventPayload, RunEvent};

impl RunEvent {
    /// The event a line's parts make: `kind` as written, `payload` decoded into its struct
    /// ([`EventPayload`]), its `pack_index` read into the envelope.
    pub fn from_wire(seq: u64, ts: f64, kind: &str, step: Option<u32>, payload: Value) -> Self {
        let pack_index = payload
            .get("pack_index")
            .and_then(Value::as_u64)
            .and_then(|i| u32::try_from(i).ok());
        Self {
            seq,
            ts,
            step,
            member: pack_index,
            payload: EventPayload::from_wire(kind, payload),
        }
    }

    /// The payload object as the line holds it: the struct's fields (keys sorted) and a
    /// member's `pack_index`; an unknown or unreadable payload as it was read.
    ///
    /// Fails only for what JSON cannot hold, e.g. a workspace path that is not UTF-8.
    pub fn payload_json(&self) -> Result<Value, crate::DomainError> {
        let mut value = self.payload.to_json()?;
        if let (Some(index), Value::Object(map)) = (self.member, &mut value) {
            map.insert("pack_index".to_owned(), Value::from(index));
        }
        Ok(value)
    }
}

impl EventPayload {
    /// The payload of an event of `kind` (as written) from its JSON: the runlog's reading,
    /// for a payload that arrives as JSON from outside (a tool source's notice). Never fails:
    /// see [`EventPayload::Unreadable`].
    pub fn from_wire(kind: &str, payload: Value) -> Self {
        Self::decode(kind, payload)
    }
}

impl Serialize for RunEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut line = serializer.serialize_struct("RunEvent", 5)?;
        line.serialize_field("seq", &self.seq)?;
        line.serialize_field("ts", &self.ts)?;
        line.serialize_field("kind", self.kind_text())?;
        line.serialize_field("step", &self.step)?;
        match &self.payload {
            // Written back as read, without a copy.
            EventPayload::Unknown { payload, .. } | EventPayload::Unreadable { payload, .. } => {
                line.serialize_field("payload", payload)?;
            }
            _ => {
                line.serialize_field("payload", &self.payload_json().map_err(S::Error::custom)?)?
            }
        }
        line.end()
    }
}

impl<'de> Deserialize<'de> for RunEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Line {
            seq: u64,
            ts: f64,
            kind: String,
            #[serde(default)]
            step: Option<u32>,
            payload: Value,
        }
        let line = Line::deserialize(deserializer)?;
        Ok(Self::from_wire(
            line.seq,
            line.ts,
            &line.kind,
            line.step,
            line.payload,
        ))
    }
}
