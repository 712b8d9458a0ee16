//! A member's system prompt: the specialist's own prompt, the rules of the workspace every
//! specialist works under, and the canonical workflows that fit its tools (issue #26).
//!
//! The workflows are for small models, which plan poorly from a list of tools alone: a line
//! such as `inspect-edit-verify: list_files/read_file → write_file → shell (...)` tells them
//! an order that works. They go in only when they fit, and the rule is:
//!
//! - a workflow is offered when every one of its steps has a tool among the member's own
//!   tools (the built-in ones the run and the specialist allow, whether loaded yet or not
//!   under lazy loading), `finish_task` counting as always there;
//! - each once, in the order its tools' contracts list them, at most
//!   [`MAX_PROMPT_WORKFLOWS`] lines;
//! - with a known context window, the lines (and their header) take at most
//!   1/[`WORKFLOW_WINDOW_SHARE`] of it by the estimate of [`crate::context`]; lines that would pass
//!   that are left out, from the last. The system prompt is never compacted away, so
//!   whatever it holds is paid for at every step.

use fabric_domain::{Instructions, SpecialistSpec, Text, ToolSpec, fitting_workflows};
use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use crate::context::BYTES_PER_TOKEN;
use crate::ports::Tool;

/// Most workflow lines a system prompt holds.
pub const MAX_PROMPT_WORKFLOWS: usize = 3;
/// The workflow lines take at most this fraction (1/n) of a known context window: 128
/// tokens of a 4096-token window, two or three lines.
pub const WORKFLOW_WINDOW_SHARE: u32 = 32;
/// What introduces the workflow lines.
const WORKFLOWS_HEADER: &str = "\n\nWorkflows (usual orders of calls):";

/// Most distinct system prompts kept for sharing; past it, the ones no run holds are let go,
/// and a new one while all are held is not kept (its run has its own copy).
const SHARED_PROMPTS: usize = 256;

/// The system prompts of the runs in flight, one copy of each text (issue #45). A run's
/// prompt is built anew (its tools and instructions decide it) and then looked up here: runs
/// of one specialist with the same tools hold the same text, 1-2 KiB each run otherwise.
static PROMPTS: LazyLock<Mutex<HashSet<Arc<str>>>> = LazyLock::new(Mutex::default);

/// `text` as the copy every run with the same system prompt shares.
pub(super) fn shared_prompt(text: String) -> Text {
    // A panic while holding the set leaves it whole (inserts and retains are atomic).
    let mut prompts = PROMPTS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(kept) = prompts.get(text.as_str()) {
        return Text::from(Arc::clone(kept));
    }
    let text: Arc<str> = text.into();
    if prompts.len() >= SHARED_PROMPTS {
        // Only this set holds them: no run in flight has that prompt.
        prompts.retain(|kept| Arc::strong_count(kept) > 1);
    }
    if prompts.len() < SHARED_PROMPTS {
        prompts.insert(Arc::clone(&text));
    }
    Text::from(text)
}

/// The specialist's prompt plus the rules of the workspace every specialist works under, and
/// the workflows that fit `tools` (see the module doc). `window` is the model's context
/// window in tokens, when known.
pub(super) fn system_prompt(
    specialist: &SpecialistSpec,
    tools: &[Arc<dyn Tool>],
    window: Option<u32>,
    instructions: Option<&Instructions>,
) -> String {
    let mut prompt = format!(
        "{}\n\nYou work inside a private workspace directory. Use relative paths only; paths outside the workspace are refused. Act only through tool calls. When the task is done and checked, call finish_task exactly once with your final answer.",
        specialist.system_prompt.trim_end()
    );
    prompt.push_str(&workflow_lines(tools, window));
    // Last, and made once at the run's start: the prefix stays the same bytes at every step.
    if let Some(instructions) = instructions {
        prompt.push_str(&instructions.text);
    }
    // Kept for the whole run: without this, the growth of `format!`'s buffer left up to
    // twice its length allocated (about 0.7 KiB a run in flight; issue #14).
    prompt.shrink_to_fit();
    prompt
}

/// The workflow block of the system prompt, empty when no workflow fits.
fn workflow_lines(tools: &[Arc<dyn Tool>], window: Option<u32>) -> String {
    let specs: Vec<&ToolSpec> = tools.iter().map(|t| t.spec()).collect();
    let budget = window.map(|w| (w / WORKFLOW_WINDOW_SHARE) as usize * BYTES_PER_TOKEN);
    let mut block = String::new();
    for workflow in fitting_workflows(&specs)
        .into_iter()
        .take(MAX_PROMPT_WORKFLOWS)
    {
        let line = format!("\n- {}", workflow.summary());
        let header = if block.is_empty() {
            WORKFLOWS_HEADER
        } else {
            ""
        };
        if budget.is_some_and(|b| block.len() + header.len() + line.len() > b) {
            break;
        }
        block.push_str(header);
        block.push_str(&line);
    }
    block
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ports::{ToolContext, ToolError};
    use async_trait::async_trait;
    use fabric_domain::Workflow;
    use serde_json::{Value, json};

    /// Runs with the same system prompt hold one copy of it; another prompt is its own, and
    /// a prompt no run holds any more is let go once the set is full (issue #45).
    #[test]
    fn issue_45_runs_with_the_same_prompt_share_one_copy() {
        let text = "You are the issue_45 sharing test's specialist.".to_owned();
        let (a, b) = (shared_prompt(text.clone()), shared_prompt(text.clone()));
        assert_eq!(a, b);
        assert_eq!(a.as_str().as_ptr(), b.as_str().as_ptr(), "one copy");
        let other = shared_prompt(format!("{text} Another one."));
        assert_ne!(a.as_str().as_ptr(), other.as_str().as_ptr());
        drop(other);
        // Fill the set with prompts nobody holds: the held one stays shared.
        for i in 0..SHARED_PROMPTS {
            drop(shared_prompt(format!("issue_45 filler {i}")));
        }
        let again = shared_prompt(text);
        assert_eq!(a.as_str().as_ptr(), again.as_str().as_ptr());
        let held = PROMPTS.lock().unwrap().len();
        assert!(held <= SHARED_PROMPTS, "{held} prompts kept");
    }

    struct Named(ToolSpec);

    #[async_trait]
    impl Tool for Named {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<Value, ToolError> {
            Ok(Value::Null)
        }
    }

    fn edit() -> Workflow {
        Workflow::new(
            "inspect-edit-verify",
            "change files, then check the change",
            &[&["list_files", "read_file"], &["write_file"], &["shell"]],
        )
    }

    fn report() -> Workflow {
        Workflow::new(
            "list-read-report",
            "review files without changing them",
            &[&["list_files"], &["read_file"], &["finish_task"]],
        )
    }

    fn tools(names: &[&str]) -> Vec<Arc<dyn Tool>> {
        names
            .iter()
            .map(|name| {
                let spec = ToolSpec::with_schema(name, "d", json!({"type": "object"})).unwrap();
                let spec = [edit(), report()]
                    .into_iter()
                    .filter(|w| w.involves(name))
                    .fold(spec, ToolSpec::workflow);
                Arc::new(Named(spec)) as Arc<dyn Tool>
            })
            .collect()
    }

    fn specialist() -> SpecialistSpec {
        serde_json::from_value(json!({
            "id": "engineering", "description": "d", "system_prompt": "You build.\n",
            "tools": [], "finish_schema": {"type": "object"},
        }))
        .unwrap()
    }

    #[test]
    fn issue_26_the_prompt_offers_each_workflow_whose_every_step_has_a_tool() {
        let all = tools(&["shell", "read_file", "write_file", "list_files"]);
        let prompt = system_prompt(&specialist(), &all, None, None);
        assert!(
            prompt.starts_with("You build.\n\nYou work inside"),
            "{prompt}"
        );
        assert!(
            prompt.ends_with(&format!(
                "{WORKFLOWS_HEADER}\n- {}\n- {}",
                edit().summary(),
                report().summary()
            )),
            "{prompt}"
        );
        // A reviewer's read-only tools: no write or shell step, so only the report.
        let reader = tools(&["read_file", "list_files"]);
        let prompt = system_prompt(&specialist(), &reader, None, None);
        assert!(prompt.ends_with(&report().summary()), "{prompt}");
        assert!(!prompt.contains("inspect-edit-verify"), "{prompt}");
        // No fitting workflow, no header.
        let prompt = system_prompt(&specialist(), &tools(&["shell"]), None, None);
        assert!(!prompt.contains("Workflows"), "{prompt}");
    }

    #[test]
    fn issue_26_a_small_window_gets_fewer_workflow_lines() {
        let all = tools(&["shell", "read_file", "write_file", "list_files"]);
        let count = |window| {
            system_prompt(&specialist(), &all, window, None)
                .matches("\n- ")
                .count()
        };
        assert_eq!(count(None), 2);
        assert_eq!(count(Some(32_768)), 2);
        // 2048 tokens: 64 for workflows, 192 bytes: the header and one line.
        assert_eq!(count(Some(2_048)), 1);
        assert_eq!(count(Some(512)), 0);
    }
}
