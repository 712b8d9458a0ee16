//! The tool-calling loop of one specialist.
//!
//! Each step: ask the model, then run the tool calls it made, in order, feeding every result
//! (or an exact error) back as a `tool` message. The loop ends when the model calls
//! `finish_task` with a payload that fits the specialist's finish schema, when it keeps
//! answering in plain text, when `max_steps` runs out, when the model server fails, or when
//! the run is cancelled. It never branches on where a tool came from.
//!
//! The loop is a small state machine: a `Loop` holds what the run has said and spent so
//! far, and each step makes three moves over it (issue #28). It *answers* (`answer.rs`: one
//! `Answer` whose source is the runlog, the member's model or the cloud model), *settles
//! each call* of the answer (`settle.rs`: replayed, refused, resumed, interrupted or
//! dispatched), and *finishes* when `finish_task` passes the gate. Anything that ends the
//! loop is a `Stop`, which `Loop::outcome` turns into the [`LoopOutcome`], in one place.

use fabric_domain::{Message, RunStatus, SpecialistSpec, Usage};
use serde_json::Value;
use std::collections::VecDeque;

use crate::gate::GateState;
use crate::ports::{ChatClient, StoreError, ToolContext, ToolSource};
use crate::recorded::RecordedStep;
use crate::recorder::Recorder;

mod answer;
mod ask;
mod calls;
mod hooks;
mod person;
mod repeats;
mod settle;
mod window;

use calls::Catalogue;
use repeats::Repeats;

// The loop's inputs and outputs, defined in leaf modules so the gate and the runlog's reader
// share them without importing the loop; named here, where callers meet them.
pub use crate::fallback::Fallback;
pub use crate::outcome::LoopOutcome;
pub use crate::params::ModelParams;

/// Most characters of a tool result sent to the model and written to the runlog.
pub const MAX_TOOL_RESULT_CHARS: usize = 16_000;
/// Most characters of model text written to the runlog per response.
pub(crate) const MAX_LLM_CONTENT_IN_RUNLOG_CHARS: usize = 2_000;
/// Plain-text replies in a row answered with a corrective message before giving up.
pub(crate) const MAX_CORRECTIVE_REPROMPTS: u32 = 1;

/// What the loop needs besides the model and the tools.
pub(crate) struct LoopInput<'a> {
    /// Who works.
    pub specialist: &'a SpecialistSpec,
    /// The tools it may call (without `finish_task`, which the loop adds), re-read between
    /// steps so tools that arrive late become callable on the next one.
    pub tools: &'a dyn ToolSource,
    /// The conversation to start from: system prompt, task, hand-over context.
    pub messages: Vec<Message>,
    /// The model.
    pub model: &'a ModelParams,
    /// Step limit.
    pub max_steps: u32,
    /// The run the tools work for.
    pub ctx: &'a ToolContext,
    /// Steps recorded before the run's process stopped, replayed instead of asking the
    /// model again (empty for a new run).
    pub replay: VecDeque<RecordedStep>,
    /// The cloud model to fall back to, if the run has one.
    pub fallback: Option<&'a Fallback>,
    /// The critic that reviews the work before the run may complete, if the specialist has
    /// one.
    pub gate: Option<GateState<'a>>,
    /// The run's versioned workspace: committed after each call that may change it.
    pub versioned: Option<&'a crate::versioned::RunWorkspace>,
    /// The run reviews work its task already holds (a critic, whose task has the diff):
    /// `finish_task` is accepted before any other tool was used (issue #40).
    pub reviewing: bool,
    /// Whoever started the run, asked questions and approvals (issue #42); `None`: no one.
    pub person: Option<&'a dyn crate::ports::Person>,
    /// The calls a person was asked about before the run's process stopped.
    pub asked: std::collections::HashSet<String>,
    /// A person's answers recorded before the stop, by call id.
    pub answers: std::collections::HashMap<String, fabric_domain::runlog::InputAnswered>,
    /// The run's lifecycle hooks (issue #43); `None`: none.
    pub hooks: Option<&'a dyn crate::ports::Hooks>,
    /// The hooks a resumed loop ran at its start before the stop, their context given
    /// again (ADR-125); empty for a new run.
    pub start_hooks: crate::recorded::StartHooks,
}

/// Runs one specialist's loop to its end, recording every step.
///
/// Returns `Err` only when the runlog itself cannot be written; every other failure is a
/// [`LoopOutcome`] with a typed status.
///
/// The input comes boxed: each level of an async fn keeps its arguments for its whole life,
/// so inline the input was in this future and `run_started`'s beside the loop's state made
/// of it, 0.6 KiB of every run in flight (issue #45).
pub(crate) async fn run_loop(
    chat: &dyn ChatClient,
    input: Box<LoopInput<'_>>,
    rec: Recorder<'_>,
) -> Result<LoopOutcome, StoreError> {
    let source = input.tools;
    let ctx = input.ctx;
    let started = tokio::select! {
        biased;
        () = ctx.cancel.cancelled() => Err(crate::ports::SourceError::Cancelled),
        started = source.start(ctx) => started,
    };
    let outcome = match started {
        Ok(()) => run_started(chat, input, rec).await,
        Err(reason) => {
            let status = if ctx.cancel.is_cancelled() {
                RunStatus::Cancelled
            } else {
                RunStatus::Failed
            };
            Ok(LoopOutcome::failed(
                status,
                reason.to_string(),
                0,
                Usage::default(),
            ))
        }
    };
    // What the tool source noticed during the last step still belongs in the runlog.
    record_notices(source, &rec, None).await?;
    outcome
}

/// The loop over a started tool source. The loop's state is moved out of `Loop::new`'s
/// result before the run is awaited: kept in a `match` on it, the result was held beside the
/// state for the whole run (616 bytes of every run's future, issue #45).
async fn run_started(
    chat: &dyn ChatClient,
    input: Box<LoopInput<'_>>,
    rec: Recorder<'_>,
) -> Result<LoopOutcome, StoreError> {
    let mut state = match Loop::new(chat, *input, rec) {
        Ok(state) => state,
        Err(outcome) => return Ok(outcome),
    };
    state.run().await
}

async fn record_notices(
    source: &dyn ToolSource,
    rec: &Recorder<'_>,
    step: Option<u32>,
) -> Result<(), StoreError> {
    for notice in source.take_notices() {
        // A notice arrives as JSON from its adapter; it is read once, here, into its struct.
        let payload = fabric_domain::EventPayload::from_wire(notice.kind.as_str(), notice.payload);
        rec.record(step, payload).await?;
    }
    Ok(())
}

/// Why the loop does not go on to its next move.
enum Stop {
    /// `finish_task` was accepted (and passed the gate, if any) with this payload.
    Finished(Value),
    /// The model kept answering in plain text: the payload built from its reply, and why
    /// the run did not finish.
    Unfinished(Value, &'static str),
    /// The run ends with this status, for this reason.
    Ended(RunStatus, String),
    /// The run waits for a person's answer to this question (`input_required` recorded);
    /// the answer continues it.
    Waiting(String),
    /// The runlog cannot be written: the one failure [`run_loop`] returns as an error.
    Store(StoreError),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<crate::versioned::CheckpointStop> for Stop {
    fn from(stop: crate::versioned::CheckpointStop) -> Self {
        match stop {
            crate::versioned::CheckpointStop::Ended(status, reason) => Self::Ended(status, reason),
            crate::versioned::CheckpointStop::Store(e) => Self::Store(e),
        }
    }
}

/// One specialist's loop between its moves: what it works with, and what it has said and
/// spent so far.
struct Loop<'a, 'r> {
    chat: &'a dyn ChatClient,
    specialist: &'a SpecialistSpec,
    source: &'a dyn ToolSource,
    model: &'a ModelParams,
    max_steps: u32,
    ctx: &'a ToolContext,
    fallback: Option<&'a Fallback>,
    gate: Option<GateState<'a>>,
    versioned: Option<&'a crate::versioned::RunWorkspace>,
    rec: Recorder<'r>,
    /// Recorded steps not replayed yet, in order.
    replay: VecDeque<RecordedStep>,
    /// The conversation so far.
    messages: Vec<Message>,
    /// What the model may call: rebuilt between steps when the tool source changed.
    catalogue: Catalogue<'a>,
    /// Tokens used.
    usage: Usage,
    /// Model calls counted in the outcome: the current step's once it is answered.
    steps: u32,
    /// Whether a known tool other than `finish_task` was called (`finish_task` is refused
    /// before).
    attempted_work: bool,
    /// Plain-text replies in a row.
    plain_replies: u32,
    /// Steps in a row whose calls had invalid arguments (for the `malformed_args` fallback).
    invalid_streak: u32,
    /// The repetition breaker.
    repeats: Repeats,
    /// Whoever started the run, if anyone can answer.
    person: Option<&'a dyn crate::ports::Person>,
    /// Calls asked about before the stop (their request is recorded).
    asked: std::collections::HashSet<String>,
    /// Answers recorded before the stop and not used yet, by call id.
    answered: std::collections::HashMap<String, fabric_domain::runlog::InputAnswered>,
    /// What a person approved for the rest of the run (approval scopes).
    approved: std::collections::HashSet<String>,
    /// The scope of each approval asked and not answered yet, by call id.
    scopes: std::collections::HashMap<String, String>,
    /// The run's lifecycle hooks, if any.
    hooks: Option<&'a dyn crate::ports::Hooks>,
    /// The run reviews work its task holds (a critic's).
    reviewing: bool,
    /// A Stop hook kept the run going (`stop_hook_active` on the next Stop).
    stop_hook_active: bool,
    /// What the PostToolUse hooks of the call being settled said, for beside its result.
    hook_note: Option<String>,
    /// The hooks this loop ran at its start before the stop, if it is resumed.
    start_hooks: crate::recorded::StartHooks,
    /// A PostToolUse hook answered `continue: false`: the run ends once the call's result
    /// is recorded, for this reason (ADR-125).
    hook_stop: Option<String>,
}

impl<'a, 'r> Loop<'a, 'r> {
    /// The loop before its first step; `Err`: the outcome of a loop that cannot start.
    fn new(
        chat: &'a dyn ChatClient,
        input: LoopInput<'a>,
        rec: Recorder<'r>,
    ) -> Result<Self, LoopOutcome> {
        let specialist = input.specialist;
        // The `finish_task` definition is built when the catalogue is, and not kept: the
        // catalogue's definitions hold it (interned per tool set), and arguments are checked
        // against `specialist.finish_schema`. A copy kept through the run cost every run in
        // flight its own kilobyte or more (issue #14).
        let catalogue = match specialist.finish_tool() {
            Ok(finish) => {
                Catalogue::build(input.tools, finish.tool_def(), &specialist.finish_schema)
            }
            Err(e) => {
                let reason = e.to_string();
                return Err(LoopOutcome::failed(
                    RunStatus::Failed,
                    reason,
                    0,
                    Usage::default(),
                ));
            }
        };
        Ok(Self {
            chat,
            specialist,
            source: input.tools,
            model: input.model,
            max_steps: input.max_steps,
            ctx: input.ctx,
            fallback: input.fallback,
            gate: input.gate,
            versioned: input.versioned,
            rec,
            replay: input.replay,
            messages: input.messages,
            // With no tool to work with, or the work in the task (a critic's review), there
            // is no work to require before finish_task.
            attempted_work: catalogue.tools.is_empty() || input.reviewing,
            catalogue,
            usage: Usage::default(),
            steps: 0,
            plain_replies: 0,
            invalid_streak: 0,
            repeats: Repeats::new(specialist.loop_aids.repeat_limit),
            person: input.person,
            asked: input.asked,
            answered: input.answers,
            approved: Default::default(),
            scopes: Default::default(),
            hooks: input.hooks,
            reviewing: input.reviewing,
            stop_hook_active: false,
            hook_note: None,
            hook_stop: None,
            start_hooks: input.start_hooks,
        })
    }

    /// Runs the loop between its `SessionStart` and `SessionEnd` hooks (issue #43).
    ///
    /// What happens once or seldom is boxed here and in [`Loop::step`]: inline, its state
    /// would size every run's future for the whole of its life, which it spends waiting for
    /// its model (issue #45, `-Zprint-type-sizes` in docs/BENCHMARKS.md).
    async fn run(&mut self) -> Result<LoopOutcome, StoreError> {
        let outcome = match Box::pin(self.session_start()).await {
            Ok(()) => self.steps().await?,
            Err(stop) => self.outcome(stop)?,
        };
        match Box::pin(self.session_end(outcome.status)).await {
            Err(Stop::Store(e)) => Err(e),
            _ => Ok(outcome),
        }
    }

    /// Runs the steps until one stops the loop, or `max_steps` runs out.
    async fn steps(&mut self) -> Result<LoopOutcome, StoreError> {
        for step in 0..self.max_steps {
            if let Err(stop) = self.step(step).await {
                return self.outcome(stop);
            }
        }
        let max_steps = self.max_steps;
        self.steps = max_steps;
        self.outcome(Stop::Ended(
            RunStatus::MaxStepsExceeded,
            format!(
                "reached max_steps ({max_steps}) without finish_task; raise it with `--max-steps` or `max_steps` in the config, or simplify the task"
            ),
        ))
    }

    /// One step: the model's answer, then each of its calls settled in order.
    async fn step(&mut self, step: u32) -> Result<(), Stop> {
        self.steps = step;
        record_notices(self.source, &self.rec, Some(step)).await?;
        self.refresh_catalogue();
        // Every model call is paid from the budget the whole delegation tree shares.
        if let Err(reason) = self.ctx.lineage.budget.take_step() {
            return Err(Stop::Ended(RunStatus::BudgetExceeded, reason.to_string()));
        }
        Box::pin(self.hear(step)).await?;
        Box::pin(self.fit_window(step)).await?;
        let answer = self.answer(step).await?;
        self.steps = step + 1;
        if answer.response.tool_calls.is_empty() {
            return self.plain_reply(step, answer).await;
        }
        self.plain_replies = 0;
        Box::pin(self.settle_calls(step, answer)).await
    }

    /// Tools that arrived since the last step (a late MCP server, a loaded schema) are
    /// offered from this step on; the definitions are rebuilt only when the set changed.
    fn refresh_catalogue(&mut self) {
        if self.source.version() != self.catalogue.version
            // The specialist did not change since the first build, so its finish tool
            // builds again; were it ever to fail, the tools of the last build stay.
            && let Ok(finish) = self.specialist.finish_tool()
        {
            self.catalogue = Catalogue::build(
                self.source,
                finish.tool_def(),
                &self.specialist.finish_schema,
            );
        }
    }

    /// How the loop ended, from what stopped it and what it counted.
    fn outcome(&self, stop: Stop) -> Result<LoopOutcome, StoreError> {
        let (steps, usage) = (self.steps, self.usage);
        Ok(match stop {
            Stop::Finished(payload) => LoopOutcome::completed(payload, steps, usage),
            Stop::Unfinished(payload, reason) => LoopOutcome {
                status: RunStatus::CompletedWithoutFinish,
                payload,
                steps,
                usage,
                reason: Some(reason.into()),
            },
            Stop::Ended(status, reason) => LoopOutcome::failed(status, reason, steps, usage),
            Stop::Waiting(question) => LoopOutcome::failed(
                RunStatus::InputRequired,
                format!("waiting for an answer: {question}"),
                steps,
                usage,
            ),
            Stop::Store(e) => return Err(e),
        })
    }
}
