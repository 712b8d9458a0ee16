//! One step of a member's loop as its runlog recorded it: a leaf, built by [`crate::history`]
//! when it reads a runlog back and replayed by the loop ([`crate::engine`]), so neither
//! imports the other for it.

use fabric_domain::Usage;
use fabric_domain::hooks::{HookEvent, HookVerdict};
use fabric_domain::runlog::HookRun;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

use crate::ports::ChatResponse;

/// One step of a member's loop as recorded.
#[derive(Debug, Clone)]
pub struct RecordedStep {
    /// The step number.
    pub step: u32,
    /// The model's answer; `None` when the call was in flight when the process stopped.
    pub response: Option<ChatResponse>,
    /// Tokens of earlier answers to the same step that a cloud fallback replaced.
    pub replaced_usage: Usage,
    /// The calls whose `tool_call` was written (they were started).
    pub started: HashSet<String>,
    /// The settled calls, by call id.
    pub outcomes: HashMap<String, RecordedOutcome>,
    /// The tools a repair recovered from the answer's text (`tool_call_repaired`), if any.
    pub repaired_tools: Option<Vec<String>>,
    /// The model's summary a compaction before this step used (`context_compacted`).
    pub summary: Option<String>,
    /// What a person said to the run before this step's model call (`user_message`).
    pub said: Vec<String>,
}

/// How a recorded call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordedOutcome {
    /// `tool_result`: the text the model was given, or the `finish_task` payload.
    Result(Value),
    /// `tool_error`: exactly what the model was told.
    Error(String),
}

impl RecordedStep {
    /// A step whose answer is not recorded (yet).
    pub(crate) fn new(step: u32) -> Self {
        Self {
            step,
            response: None,
            replaced_usage: Usage::default(),
            started: HashSet::new(),
            outcomes: HashMap::new(),
            repaired_tools: None,
            summary: None,
            said: Vec::new(),
        }
    }
}

/// The hooks a member's loop ran at its start, as recorded (`hook_run` lines without a
/// step): each `SessionStart` fire, and the task's `UserPromptSubmit`. A resumed loop gives
/// the model their context again where it was, rebuilt from these lines as Claude Code's
/// transcript keeps it, before its own `SessionStart` (`source: resume`) fires (ADR-125).
#[derive(Debug, Clone, Default)]
pub struct StartHooks {
    /// Each fire: the loop run it belongs to (its resumption), its event, its hooks' runs.
    fires: Vec<(u32, String, Vec<HookRun>)>,
}

impl StartHooks {
    /// Takes one recorded `hook_run` without a step, of the loop run after `resumption`
    /// resumptions; the runs of one fire are one loop run's lines of one event.
    pub(crate) fn add(&mut self, resumption: u32, run: HookRun) {
        let event = run.event.as_str();
        if event != HookEvent::SessionStart.as_str()
            && event != HookEvent::UserPromptSubmit.as_str()
        {
            return;
        }
        match self.fires.last_mut() {
            Some((r, e, runs)) if *r == resumption && *e == run.event => runs.push(run),
            _ => self.fires.push((resumption, run.event.clone(), vec![run])),
        }
    }

    /// The context each recorded fire of `event` gave the model, in order.
    pub(crate) fn contexts(&self, event: HookEvent) -> Vec<String> {
        self.fires
            .iter()
            .filter(|(_, e, _)| e == event.as_str())
            .filter_map(|(_, _, runs)| HookVerdict::of(runs).context_text())
            .collect()
    }
}
