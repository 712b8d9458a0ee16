//! Tools whose input is a Rust type: the contract's schema is derived from the type, and the
//! handler receives the type, so the two cannot disagree.

use async_trait::async_trait;
use fabric_domain::{ToolSpec, schema};
use schemars::JsonSchema;
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
        let input: T::Input = serde_json::from_value(args)
            .map_err(|e| ToolError::InvalidArguments(format!("invalid arguments: {e}")))?;
        self.inner.run(input, ctx).await
    }

    async fn resume(&self, args: Value, ctx: &ToolContext) -> Option<Result<Value, ToolError>> {
        let input: T::Input = serde_json::from_value(args).ok()?;
        self.inner.resume(input, ctx).await
    }

    fn check_contract(&self) -> Result<(), String> {
        let derived = fabric_domain::schema_for::<T::Input>();
        if derived != self.spec.input_schema {
            return Err(format!(
                "tool `{}`: input_schema differs from the schema of its input type",
                self.spec.name
            ));
        }
        if self.spec.examples.is_empty() {
            return Err(format!("tool `{}` has no example", self.spec.name));
        }
        for example in &self.spec.examples {
            schema::validate(&self.spec.input_schema, example).map_err(|e| {
                format!(
                    "tool `{}`: example {example} breaks the schema: {e}",
                    self.spec.name
                )
            })?;
            serde_json::from_value::<T::Input>(example.clone()).map_err(|e| {
                format!(
                    "tool `{}`: example {example} is refused by the handler: {e}",
                    self.spec.name
                )
            })?;
        }
        Ok(())
    }
}
