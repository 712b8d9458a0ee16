//! A tool whose behaviour a test chooses, and the specialist and task force of a test.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fabric_core::engine::ModelParams;
use fabric_core::execute::{Member, Roster, RunOutcome, TaskForce, execute_task_force};
use fabric_core::{ChatClient, CoreError, NoopObserver, RunStore, Tool, ToolContext, ToolError};
use fabric_domain::{SpecialistSpec, ToolAnnotations, ToolSpec};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A tool whose behaviour a test chooses.
pub struct FakeTool {
    /// Its contract.
    pub spec: ToolSpec,
    /// What a call answers.
    pub behaviour: fn(&Value) -> Result<Value, ToolError>,
    /// How long a call takes.
    pub delay: Duration,
    /// Set when a call's future is dropped before it ends.
    pub dropped_early: Arc<AtomicBool>,
}

/// A tool `name` taking an optional string `path` and nothing else.
pub fn tool(
    name: &str,
    annotations: ToolAnnotations,
    behaviour: fn(&Value) -> Result<Value, ToolError>,
) -> FakeTool {
    let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false});
    FakeTool {
        spec: ToolSpec::with_schema(name, "fake", schema)
            .unwrap()
            .annotate(annotations),
        behaviour,
        delay: Duration::ZERO,
        dropped_early: Arc::default(),
    }
}

/// A tool `name` that answers `"fine"`.
pub fn ok_tool(name: &str) -> Arc<dyn Tool> {
    Arc::new(tool(name, ToolAnnotations::default(), |_| {
        Ok(json!("fine"))
    }))
}

/// Sets the flag unless disarmed: tells whether a tool future was dropped mid-way.
struct DropFlag(Arc<AtomicBool>, bool);

impl Drop for DropFlag {
    fn drop(&mut self) {
        if self.1 {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl Tool for FakeTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<Value, ToolError> {
        let mut flag = DropFlag(Arc::clone(&self.dropped_early), true);
        tokio::time::sleep(self.delay).await;
        flag.1 = false;
        (self.behaviour)(&args)
    }
}

/// The test specialist `eng` ("You build."), with no tools of its own.
pub fn specialist(may_write: bool) -> SpecialistSpec {
    let mut spec = specialist_as("eng", "You build.", &[]);
    spec.may_write = may_write;
    spec
}

/// Specialist `id` with `system_prompt` and `tools`, which may write and finishes with a
/// `summary`.
pub fn specialist_as(id: &str, system_prompt: &str, tools: &[&str]) -> SpecialistSpec {
    SpecialistSpec {
        container_image: None,
        id: id.into(),
        description: "d".into(),
        keywords: vec![],
        capabilities: vec![],
        system_prompt: system_prompt.into(),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        finish_schema: json!({"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}),
        model_key: None,
        may_write: true,
        needs_network: false,
        limitations: vec![],
        tooling: Default::default(),
        loop_aids: Default::default(),
        approval: Default::default(),
        project_instructions: true,
    }
}

/// A task force of one: the test specialist with `tools` on `chat`, 10 steps at most.
pub fn task(
    chat: Arc<dyn ChatClient>,
    tools: Vec<Arc<dyn Tool>>,
    may_write: bool,
    network_allowed: bool,
) -> TaskForce {
    let member = Member::new(
        specialist(may_write).into(),
        tools,
        chat,
        "k",
        ModelParams::named("m"),
    );
    let recruitment = Roster::explicit(Vec::new(), "test");
    let mut force = TaskForce::single("do it", member, recruitment, 10);
    force.network_allowed = network_allowed;
    force
}

/// Runs `force` in a new run of `store`.
pub async fn run(store: &dyn RunStore, force: TaskForce) -> Result<RunOutcome, CoreError> {
    execute_task_force(store, force, &NoopObserver, CancellationToken::new()).await
}
