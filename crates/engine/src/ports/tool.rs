use async_trait::async_trait;
use fabric_domain::runlog::ToolErrorType;
use fabric_domain::{RunId, ToolImage, ToolSpec};
use serde_json::Value;
use std::path::PathBuf;
use thiserror::Error;
use tokio_util::sync::CancellationToken;

/// What a tool knows about the run it works for.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The run.
    pub run_id: RunId,
    /// The run's workspace; file tools never leave it.
    pub workspace: PathBuf,
    /// Whether the run may use the network.
    pub network_allowed: bool,
    /// Cancelled when the run is cancelled; long tools stop and clean up.
    pub cancel: CancellationToken,
    /// Where the run sits in its delegation tree, and the budget the tree shares.
    pub lineage: crate::budget::Lineage,
    /// The member's model, for a tool's server that asks for a completion (MCP sampling);
    /// `None` outside a member's loop.
    pub sampler: Option<std::sync::Arc<dyn crate::ports::Sampler>>,
    /// Where the tool publishes what it prints while it runs, for the run's followers
    /// (issue #42; never recorded); `None` outside a run or when nobody can follow it.
    pub live: Option<crate::live_output::LiveSink>,
    /// A person approved this call after the allowlist refused it (a specialist's
    /// `approval: {mode: on_request}`, issue #42): the allowlist lets it through once; the
    /// OS sandbox still confines it.
    pub approved: bool,
}

impl ToolContext {
    /// The context of one call: its live output named after the call, at its own rate.
    pub fn for_call(&self, step: u32, member: Option<u32>, call_id: &str, tool: &str) -> Self {
        Self {
            live: self
                .live
                .as_ref()
                .map(|live| live.for_call(step, member, call_id, tool)),
            ..self.clone()
        }
    }

    /// A splitter of `stream`'s bytes into live lines, while a call runs with followers.
    pub fn live_lines(
        &self,
        stream: fabric_domain::OutputStream,
    ) -> Option<crate::live_output::LineSplitter> {
        self.live.as_ref()?.lines(stream)
    }
}

/// Why a tool call failed. The message goes to the model as is, so it says exactly what was
/// wrong and what to do instead.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ToolError {
    /// The arguments are not what the tool takes.
    #[error("{0}")]
    InvalidArguments(String),
    /// Refused for safety; also recorded as a `security_event`.
    #[error("{message}")]
    Denied {
        /// A stable tag, e.g. `path_escape`, `command_not_allowed`.
        event_type: String,
        /// What was attempted (the path, the program).
        attempted: String,
        /// What was refused, why, and what is allowed instead.
        message: String,
    },
    /// The tool ran and failed, or timed out.
    #[error("{0}")]
    Failed(String),
    /// The call was in flight when the run's process stopped, and was not run again.
    #[error("{0}")]
    Interrupted(String),
    /// The call's answer is a person's (`ask_user`): the loop asks the run's [`Person`]
    /// this, and the answer becomes the call's result. Never recorded as an error itself.
    ///
    /// [`Person`]: crate::ports::Person
    #[error("{}", .0.question)]
    Ask(Box<fabric_domain::runlog::InputRequired>),
}

impl ToolError {
    /// The `error_type` written to the runlog.
    pub fn error_type(&self) -> ToolErrorType {
        match self {
            Self::InvalidArguments(_) => ToolErrorType::InvalidArgs,
            Self::Denied { .. } => ToolErrorType::Permission,
            Self::Failed(_) => ToolErrorType::Failed,
            Self::Interrupted(_) => ToolErrorType::Interrupted,
            // Only when no one could be asked, which the loop reports as a failure.
            Self::Ask(_) => ToolErrorType::Failed,
        }
    }
}

/// What a tool returned for a model: its result, and the images it returned besides
/// (an MCP tool's image blocks), which reach a model that reads images (ADR-087).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The result, as [`Tool::call`] returns it.
    pub result: Value,
    /// The images, in the order the tool gave them; bounded by the loop, not here.
    pub images: Vec<ToolImage>,
}

impl From<Value> for ToolOutput {
    fn from(result: Value) -> Self {
        Self {
            result,
            images: Vec::new(),
        }
    }
}

/// Anything the model can call. Built-in tools, MCP tools and other agents all come through
/// this one interface, so the loop never branches on where a tool came from.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The contract: name, description, input schema, examples, annotations.
    fn spec(&self) -> &ToolSpec;

    /// Runs the tool. `args` has already been checked against `spec().input_schema`.
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<Value, ToolError>;

    /// Runs the tool for a model's call: its result with the images it returned besides.
    /// The loop calls this; only a tool that can return images (an MCP tool) overrides it,
    /// every other one answers with [`Tool::call`]'s result and no image.
    async fn call_for_model(
        &self,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        self.call(args, ctx).await.map(ToolOutput::from)
    }

    /// Picks up a call that was in flight when the run's process stopped, for a tool that
    /// can (a delegation continues its child run) and returns its result. `None`: it cannot,
    /// and the loop applies the contract instead (a read-only tool runs again; any other is
    /// reported to the model as interrupted).
    async fn resume(&self, args: Value, ctx: &ToolContext) -> Option<Result<Value, ToolError>> {
        let _ = (args, ctx);
        None
    }

    /// Checks that the contract's examples are accepted by the handler's input type; used by
    /// the contract parity tests. Tools without a Rust input type have nothing to check.
    fn check_contract(&self) -> Result<(), fabric_domain::DomainError> {
        Ok(())
    }
}
