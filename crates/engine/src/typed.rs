//! Tools whose input is a Rust type: the contract's schema is derived from the type, and the
//! handler receives the type, so the two cannot disagree.

use async_trait::async_trait;
use fabric_domain::{DomainError, ToolSpec, schema};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ports::{Tool, ToolContext, ToolError};

/// A tool handler with a typed input.
#[async_trait]
pub trait TypedTool: Send + Sync + 'static {
    /// The input the model sends, deserialised.
    type Input: DeserializeOwned + JsonSchema + Send;

    /// The contract, whose `input_schema` must come from [`ToolSpec::for_input`] with
    /// `Self::Input` (the parity test checks this).
    fn spec(&self) -> ToolSpec;

    /// Runs the tool.
    async fn run(&self, input: Self::Input, ctx: &ToolContext) -> Result<Value, ToolError>;

    /// Picks up a call in flight when the run's process stopped ([`Tool::resume`]).
    async fn resume(
        &self,
        input: Self::Input,
        ctx: &ToolContext,
    ) -> Option<Result<Value, ToolError>> {
        let _ = (input, ctx);
        None
    }
}

/// Makes a [`TypedTool`] a [`Tool`].
pub struct Typed<T: TypedTool> {
    spec: ToolSpec,
    inner: T,
}

impl<T: TypedTool> Typed<T> {
    /// Wraps a handler, computing its contract once.
    pub fn new(inner: T) -> Self {
        Self {
            spec: inner.spec(),
            inner,
        }
    }
}

#[async_trait]
impl<T: TypedTool> Tool for Typed<T> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        let input = T::Input::deserialize(&args).map_err(|e| {
            // serde's message names neither the parameter nor what it accepts ("invalid type:
            // floating point `1e+20`, expected u64"); the schema check does. The engine runs
            // that check before the call, but not every caller does.
            let found = schema::violations(&self.spec.input_schema, &args);
            ToolError::InvalidArguments(if found.is_empty() {
                format!("invalid arguments: {e}")
            } else {
                format!("invalid arguments: {}", found.join("; "))
            })
        })?;
        self.inner.run(input, ctx).await
    }

    async fn resume(&self, args: Value, ctx: &ToolContext) -> Option<Result<Value, ToolError>> {
        let input: T::Input = serde_json::from_value(args).ok()?;
        self.inner.resume(input, ctx).await
    }

    fn check_contract(&self) -> Result<(), DomainError> {
        let invalid = |reason: String| DomainError::InvalidToolSchema {
            tool: self.spec.name.clone(),
            reason,
        };
        let derived = fabric_domain::schema_for::<T::Input>();
        if !narrows(&derived, &self.spec.input_schema) {
            return Err(invalid(
                "input_schema differs from the schema of its input type".to_owned(),
            ));
        }
        if self.spec.examples.is_empty() {
            return Err(invalid("has no example".to_owned()));
        }
        for example in &self.spec.examples {
            schema::validate(&self.spec.input_schema, example)
                .map_err(|e| invalid(format!("example {example} breaks the schema: {e}")))?;
            serde_json::from_value::<T::Input>(example.clone()).map_err(|e| {
                invalid(format!("example {example} is refused by the handler: {e}"))
            })?;
        }
        Ok(())
    }
}

/// Whether `spec` is `derived`, or `derived` with numeric bounds narrowed: a tool may state a
/// configured limit in the schema the model reads (shell's `timeout_s` maximum), so a call
/// beyond it is refused with the range before it runs. Nothing else may differ.
fn narrows(derived: &Value, spec: &Value) -> bool {
    match (derived, spec) {
        (Value::Object(d), Value::Object(s)) => {
            d.keys().all(|k| s.contains_key(k))
                && s.iter()
                    .all(|(key, s)| match (key.as_str(), d.get(key), s) {
                        ("minimum", None, Value::Number(_))
                        | ("maximum", None, Value::Number(_)) => true,
                        ("minimum", Some(Value::Number(d)), Value::Number(s)) => {
                            s.as_f64() >= d.as_f64()
                        }
                        ("maximum", Some(Value::Number(d)), Value::Number(s)) => {
                            s.as_f64() <= d.as_f64()
                        }
                        (_, Some(d), s) => narrows(d, s),
                        (_, None, _) => false,
                    })
        }
        (Value::Array(d), Value::Array(s)) => {
            d.len() == s.len() && d.iter().zip(s).all(|(d, s)| narrows(d, s))
        }
        _ => derived == spec,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn issue_15_a_spec_may_narrow_numeric_bounds_and_nothing_else() {
        let derived = json!({"type": "object", "properties": {
            "timeout_s": {"type": ["integer", "null"], "format": "uint64", "minimum": 1},
            "maximum": {"type": "string"}
        }});
        let narrowed = json!({"type": "object", "properties": {
            "timeout_s": {"type": ["integer", "null"], "format": "uint64", "minimum": 2, "maximum": 600},
            "maximum": {"type": "string"}
        }});
        assert!(narrows(&derived, &derived));
        assert!(narrows(&derived, &narrowed));
        let widened = json!({"type": "object", "properties": {
            "timeout_s": {"type": ["integer", "null"], "format": "uint64", "minimum": 0},
            "maximum": {"type": "string"}
        }});
        assert!(!narrows(&derived, &widened));
        let retyped = json!({"type": "object", "properties": {
            "timeout_s": {"type": "string", "format": "uint64", "minimum": 1},
            "maximum": {"type": "string"}
        }});
        assert!(!narrows(&derived, &retyped));
        let dropped = json!({"type": "object", "properties": {
            "timeout_s": {"type": ["integer", "null"], "format": "uint64", "minimum": 1}
        }});
        assert!(!narrows(&derived, &dropped));
        let added = json!({"type": "object", "properties": {
            "timeout_s": {"type": ["integer", "null"], "format": "uint64", "minimum": 1},
            "maximum": {"type": "string"},
            "minimum": {"type": "string"}
        }});
        assert!(!narrows(&derived, &added));
    }
}
