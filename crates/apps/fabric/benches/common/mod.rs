//! What both benchmarks need: a tool that does nothing and the specialist that uses it.

use async_trait::async_trait;
use fabric_core::engine::ModelParams;
use fabric_core::execute::{Member, Roster, TaskForce};
use fabric_core::{ChatClient, Tool, ToolContext, ToolError};
use fabric_domain::{SpecialistSpec, ToolSpec};
use serde_json::{Value, json};
use std::sync::Arc;

/// A tool that answers `"ok"` at once: the loop's own cost is what is left.
pub(crate) struct Noop(ToolSpec);

#[async_trait]
impl Tool for Noop {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<Value, ToolError> {
        Ok(json!("ok"))
    }
}

/// The no-op tool, named `noop`, taking `{"n": integer}`.
pub(crate) fn noop_tool() -> Arc<dyn Tool> {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": false});
    Arc::new(Noop(
        ToolSpec::with_schema("noop", "Does nothing.", schema).unwrap(),
    ))
}

/// The engineering specialist with only `noop`, defined once and shared by every run, as
/// `fabric serve` shares the definitions it loaded from its settings.
pub(crate) fn specialist() -> Arc<SpecialistSpec> {
    static SHARED: std::sync::OnceLock<Arc<SpecialistSpec>> = std::sync::OnceLock::new();
    Arc::clone(SHARED.get_or_init(|| {
        let mut spec = fabric_config::builtin_specialists().remove(0);
        spec.tools = vec!["noop".into()];
        Arc::new(spec)
    }))
}

/// A benchmark task: the shared specialist with the no-op tool on `chat`, at most
/// `max_steps` calls.
pub(crate) fn task(chat: Arc<dyn ChatClient>, max_steps: u32) -> TaskForce {
    let member = Member::new(
        specialist(),
        vec![noop_tool()],
        chat,
        "bench",
        ModelParams::named("qwen2.5:7b"),
    );
    let recruitment = Roster::explicit(Vec::new(), "");
    TaskForce::single("benchmark", member, recruitment, max_steps)
}
