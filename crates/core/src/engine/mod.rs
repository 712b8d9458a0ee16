//! The tool-calling loop of one specialist.
//!
//! Each step: ask the model, then run the tool calls it made, in order, feeding every result
//! (or an exact error) back as a `tool` message. The loop ends when the model calls
//! `finish_task` with a payload that fits the specialist's finish schema, when it keeps
//! answering in plain text, when `max_steps` runs out, when the model server fails, or when
//! the run is cancelled. It never branches on where a tool came from.

use fabric_domain::{FINISH_TOOL, Message, RunStatus, SpecialistSpec, Usage, runlog};
use serde_json::{Value, json};
use std::collections::VecDeque;

use crate::fallback::record_fallback;
use crate::gate::Passage;
use crate::ports::{ChatClient, StoreError, ToolContext, ToolError, ToolSource};
use crate::recorded::{RecordedOutcome, RecordedStep};
use crate::recorder::{Recorder, truncate};

mod ask;
mod calls;
mod repeats;
mod window;

use ask::{ask, until};
use calls::{
    Catalogue, Dispatch, corrective_message, dispatch, fallback_payload, parse_arguments,
    render_result,
};
use repeats::{Repeats, Verdict};
use window::fit_window;

// The loop's inputs and outputs, defined in leaf modules so the gate and the runlog's reader
// share them without importing the loop; named here, where callers meet them.
pub use crate::fallback::{Fallback, FallbackPolicy};
pub use crate::outcome::LoopOutcome;
pub use crate::params::ModelParams;

/// Most characters of a tool result sent to the model and written to the runlog.
pub const MAX_TOOL_RESULT_CHARS: usize = 16_000;
/// Most characters of model text written to the runlog per response.
pub const MAX_LLM_CONTENT_IN_RUNLOG_CHARS: usize = 2_000;
/// Plain-text replies in a row answered with a corrective message before giving up.
pub const MAX_CORRECTIVE_REPROMPTS: u32 = 1;

/// What the loop needs besides the model and the tools.
pub struct LoopInput<'a> {
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
    pub fallback: Option<&'a Fallback<'a>>,
    /// The critic that reviews the work before the run may complete, if the specialist has
    /// one.
    pub gate: Option<crate::gate::GateState<'a>>,
}

/// Runs one specialist's loop to its end, recording every step.
///
/// Returns `Err` only when the runlog itself cannot be written; every other failure is a
/// [`LoopOutcome`] with a typed status.
pub(crate) async fn run_loop(
    chat: &dyn ChatClient,
    input: LoopInput<'_>,
    rec: Recorder<'_>,
) -> Result<LoopOutcome, StoreError> {
    let source = input.tools;
    let ctx = input.ctx;
    let started = tokio::select! {
        biased;
        () = ctx.cancel.cancelled() => Err("the run was cancelled".to_owned()),
        started = source.start(ctx) => started,
    };
    let outcome = match started {
        Ok(()) => run_steps(chat, input, rec).await,
        Err(reason) => {
            let status = if ctx.cancel.is_cancelled() {
                RunStatus::Cancelled
            } else {
                RunStatus::Failed
            };
            Ok(LoopOutcome::failed(status, reason, 0, Usage::default()))
        }
    };
    // What the tool source noticed during the last step still belongs in the runlog.
    record_notices(source, &rec, None).await?;
    outcome
}

async fn record_notices(
    source: &dyn ToolSource,
    rec: &Recorder<'_>,
    step: Option<u32>,
) -> Result<(), StoreError> {
    for notice in source.take_notices() {
        rec.emit(notice.kind, step, notice.payload).await?;
    }
    Ok(())
}

async fn run_steps(
    chat: &dyn ChatClient,
    input: LoopInput<'_>,
    rec: Recorder<'_>,
) -> Result<LoopOutcome, StoreError> {
    let LoopInput {
        specialist,
        tools: source,
        mut messages,
        model,
        max_steps,
        ctx,
        mut replay,
        fallback,
        mut gate,
    } = input;

    // The `finish_task` definition is built when the catalogue is, and not kept: the
    // catalogue's definitions hold it (interned per tool set), and arguments are checked
    // against `specialist.finish_schema`. A copy kept through the run cost every run in
    // flight its own kilobyte or more (issue #14).
    let mut catalogue = match specialist.finish_tool() {
        Ok(finish) => Catalogue::build(
            source,
            finish.openai_definition(),
            &specialist.finish_schema,
        ),
        Err(e) => {
            return Ok(LoopOutcome::failed(
                RunStatus::Failed,
                e.to_string(),
                0,
                Usage::default(),
            ));
        }
    };
    let mut usage = Usage::default();
    // With no tool to work with, there is no work to require before finish_task.
    let mut attempted_work = catalogue.tools.is_empty();
    let mut plain_replies = 0u32;
    // Steps in a row whose calls had invalid arguments (for the `malformed_args` fallback).
    let mut invalid_streak = 0u32;
    let aids = specialist.loop_aids;
    let mut repeats = Repeats::new(aids.repeat_limit);

    for step in 0..max_steps {
        record_notices(source, &rec, Some(step)).await?;
        // Tools that arrived since the last step (a late MCP server, a loaded schema) are
        // offered from this step on; the definitions are rebuilt only when the set changed.
        if source.version() != catalogue.version
            // The specialist did not change since the first build, so its finish tool
            // builds again; were it ever to fail, the tools of the last build stay.
            && let Ok(finish) = specialist.finish_tool()
        {
            catalogue = Catalogue::build(
                source,
                finish.openai_definition(),
                &specialist.finish_schema,
            );
        }
        let definitions = &catalogue.definitions;
        // Every model call is paid from the budget the whole delegation tree shares.
        if let Err(reason) = ctx.lineage.budget.take_step() {
            return Ok(LoopOutcome::failed(
                RunStatus::BudgetExceeded,
                reason,
                step,
                usage,
            ));
        }
        // The conversation must fit the model's window; compacting is deterministic, so a
        // replayed step compacts as the live one did (and records nothing again).
        let replaying_step = replay
            .front()
            .filter(|r| r.step == step && r.response.is_some())
            .map(|r| r.summary.clone());
        if let Err(reason) = fit_window(
            chat,
            &mut messages,
            definitions,
            model,
            ctx,
            rec,
            step,
            replaying_step,
            &mut usage,
        )
        .await?
        {
            return Ok(LoopOutcome::failed(
                RunStatus::ContextWindowExceeded,
                reason,
                step,
                usage,
            ));
        }
        // A recorded answer is replayed, not asked for again; its events are in the runlog.
        let recorded = match replay.front() {
            Some(r) if r.step == step => replay.pop_front(),
            _ => None,
        };
        // A replayed step is repaired exactly as it was (or not at all), whatever today's
        // tools and configuration say; `None`: a live step.
        let mut replayed_repair: Option<Option<Vec<String>>> = None;
        let (response, mut recorded, price) = match recorded {
            Some(RecordedStep {
                response: Some(response),
                started,
                outcomes,
                replaced_usage,
                repaired_tools,
                ..
            }) => {
                // A local answer a cloud fallback replaced was paid for too.
                usage.add(replaced_usage);
                ctx.lineage.budget.charge(replaced_usage, model.price);
                replayed_repair = Some(repaired_tools);
                (response, Some((started, outcomes)), model.price)
            }
            // The call was in flight when the process stopped: ask again.
            _ => {
                let cloud = match fallback {
                    // The repair of rejected work runs on the cloud model (`critic_rejected`).
                    Some(f) if repairing_on_cloud(&gate) => Some(f),
                    // Invalid arguments twice running: this step goes to the cloud model.
                    Some(f) if f.policy.malformed_args && invalid_streak >= 2 && f.take() => {
                        record_fallback(rec, step, "malformed_args", model, f).await?;
                        invalid_streak = 0;
                        Some(f)
                    }
                    _ => None,
                };
                let (asked, asked_model) = match cloud {
                    Some(f) => (f.chat, f.model),
                    None => (chat, model),
                };
                match ask(asked, &messages, definitions, asked_model, ctx, rec, step).await? {
                    Ok(response) => (response, None, asked_model.price),
                    Err((status, reason, spent)) => {
                        if let Some(u) = spent {
                            usage.add(u);
                        }
                        return Ok(LoopOutcome::failed(status, reason, step, usage));
                    }
                }
            }
        };
        let replaying = recorded.is_some();
        // A call the server failed to parse, written in the model's own format, is repaired
        // (deterministically, so a replayed step repairs the same way under the same ids).
        let response = match repaired_calls(&response, model, &catalogue, step, replayed_repair) {
            Some(repaired) => {
                if !replaying {
                    rec.record(
                        Some(step),
                        &runlog::ToolCallRepaired {
                            format: repaired.format.as_str().to_owned(),
                            tools: repaired.calls.iter().map(|c| c.name.clone()).collect(),
                            call_ids: repaired.calls.iter().map(|c| c.id.clone()).collect(),
                        },
                    )
                    .await?;
                }
                crate::ports::ChatResponse {
                    content: repaired.rest,
                    tool_calls: repaired.calls,
                    ..response
                }
            }
            None => response,
        };
        if let Some(u) = response.usage {
            usage.add(u);
            ctx.lineage.budget.charge(u, price);
        }
        // No tool call where one is needed: the same step is asked of the cloud model, and
        // its answer is the step's.
        let response = match fallback {
            Some(f)
                if !replaying
                    && !repairing_on_cloud(&gate)
                    && response.tool_calls.is_empty()
                    && f.policy.no_tool_calls
                    && f.take() =>
            {
                record_fallback(rec, step, "no_tool_calls", model, f).await?;
                match ask(f.chat, &messages, definitions, f.model, ctx, rec, step).await? {
                    Ok(cloud) => {
                        if let Some(u) = cloud.usage {
                            usage.add(u);
                            ctx.lineage.budget.charge(u, f.model.price);
                        }
                        cloud
                    }
                    Err((status, reason, spent)) => {
                        if let Some(u) = spent {
                            usage.add(u);
                        }
                        return Ok(LoopOutcome::failed(status, reason, step, usage));
                    }
                }
            }
            _ => response,
        };

        if response.tool_calls.is_empty() {
            let text = response.content.unwrap_or_default();
            // `require_finish`: asked again until it calls finish_task or max_steps runs out.
            let max_retries = if aids.require_finish {
                max_steps
            } else {
                MAX_CORRECTIVE_REPROMPTS
            };
            if plain_replies < max_retries {
                plain_replies += 1;
                if !replaying {
                    rec.record(
                        Some(step),
                        &runlog::CorrectiveReprompt {
                            reason: "plain_text_response".to_owned(),
                            attempt: plain_replies,
                            max_retries,
                        },
                    )
                    .await?;
                }
                messages.push(Message::assistant(Some(text), Vec::new()));
                messages.push(Message::user(corrective_message(
                    &catalogue.available,
                    &specialist.finish_schema,
                )));
                continue;
            }
            let payload = fallback_payload(&specialist.finish_schema, &text);
            // Said plainly when nothing was done, so nobody takes it for a success (#24).
            let reason = if attempted_work {
                "the model answered in plain text instead of calling finish_task; the payload was built from its reply"
            } else {
                "the model answered in plain text and never called a tool or finish_task, so nothing was done; the payload is its reply (give the specialist `require_finish: true` to keep asking for finish_task)"
            };
            return Ok(LoopOutcome {
                status: RunStatus::CompletedWithoutFinish,
                payload,
                steps: step + 1,
                usage,
                reason: Some(reason.into()),
            });
        }
        plain_replies = 0;

        let calls = response.tool_calls;
        messages.push(Message::assistant(response.content, calls.clone()));
        let mut invalid_here = false;
        for call in &calls {
            let args = parse_arguments(&call.arguments);
            // Settled before the stop: replayed as recorded. Started but not settled: in
            // flight at the stop, run again only when the tool only reads (at-least-once for
            // those, at-most-once for every other tool; docs/DURABILITY.md).
            let (settled, in_flight) = match recorded.as_mut() {
                Some((started, outcomes)) => {
                    (outcomes.remove(&call.id), started.contains(&call.id))
                }
                None => (None, false),
            };
            // The repetition breaker judges every call but finish_task, replayed or live,
            // so a continued run reaches the same verdicts at the same calls.
            let key = match call.name == FINISH_TOOL {
                true => None,
                false => repeats.key(&call.name, &args, &call.arguments),
            };
            let verdict = repeats.before(&call.name, key);
            let refused = verdict.refusal().is_some();
            let outcome = if let Some(settled) = settled {
                if let (RecordedOutcome::Result(_), Ok(args)) = (&settled, &args) {
                    source.replayed(&call.name, args);
                }
                let known = call.name != FINISH_TOOL
                    && (catalogue.tool(&call.name).is_some()
                        || matches!(settled, RecordedOutcome::Result(_)));
                attempted_work |= known;
                let text = match settled {
                    RecordedOutcome::Result(payload) if call.name == FINISH_TOOL => {
                        return Ok(LoopOutcome::completed(payload, step + 1, usage));
                    }
                    RecordedOutcome::Result(result) => render_result(&result),
                    RecordedOutcome::Error(message) => json!({"error": message}).to_string(),
                };
                // Its `loop_detected` is in the runlog already.
                let note = match refused {
                    true => None,
                    false => repeats.after(&call.name, key, &text, &catalogue.available),
                };
                messages.push(Message::tool_result(&call.id, with_note(text, note)));
                continue;
            } else if let Some((action, message)) = verdict.refusal() {
                if !in_flight {
                    record_call(rec, step, call, &args).await?;
                }
                let repeated = repeats.count() + repeats.refused();
                let shown = shown_args(call, &args);
                record_loop(rec, step, call, shown, repeated, action, message).await?;
                if let Verdict::Stop(reason) = verdict {
                    return Ok(LoopOutcome::failed(
                        RunStatus::Stalled,
                        reason,
                        step + 1,
                        usage,
                    ));
                }
                Err(ToolError::Failed(message.to_owned()))
            } else if let Some(resumed) = match (in_flight, catalogue.tool(&call.name), &args) {
                (true, Some(tool), Ok(args)) if !tool.spec().annotations.read_only => {
                    tool.resume(args.clone(), ctx).await
                }
                _ => None,
            } {
                resumed.map(Dispatch::Done)
            } else if in_flight && !reads_only(&catalogue, &call.name) {
                Err(ToolError::Interrupted(format!(
                    "this call of `{}` was interrupted: the fabric process running it stopped before it returned, and it was not run again because it may change things. Its effect is unknown: check what it would have changed (for example read the files) before calling it again",
                    call.name
                )))
            } else {
                if !in_flight {
                    record_call(rec, step, call, &args).await?;
                }
                tokio::select! {
                    biased;
                    () = ctx.cancel.cancelled() => {
                        return Ok(LoopOutcome::failed(RunStatus::Cancelled, "the run was cancelled".into(), step + 1, usage));
                    }
                    () = until(ctx.lineage.budget.deadline()) => {
                        let reason = ctx.lineage.budget.time_reason(&format!("the tool `{}`", call.name));
                        return Ok(LoopOutcome::failed(RunStatus::BudgetExceeded, reason, step + 1, usage));
                    }
                    outcome = dispatch(call, args, &catalogue, attempted_work, ctx) => outcome,
                }
            };
            if call.name != FINISH_TOOL && catalogue.tool(&call.name).is_some() {
                attempted_work = true;
            }
            match outcome {
                Ok(Dispatch::Finished(payload)) => {
                    // A critic reviews the work first: the run completes only when it
                    // approves (and the staged changes are applied).
                    if let Some(g) = gate.as_mut() {
                        match g.pass(&payload, ctx, rec, step).await? {
                            Passage::Complete => {}
                            Passage::End(status, reason) => {
                                return Ok(LoopOutcome::failed(status, reason, step + 1, usage));
                            }
                            Passage::Repair(message) => {
                                rec.record(
                                    Some(step),
                                    &runlog::ToolError {
                                        tool: FINISH_TOOL.to_owned(),
                                        call_id: call.id.clone(),
                                        error_type: runlog::ToolErrorType::Rejected,
                                        error_message: message.clone(),
                                    },
                                )
                                .await?;
                                messages.push(Message::tool_result(
                                    &call.id,
                                    json!({"error": message}).to_string(),
                                ));
                                g.begin_repair(rec, step, model, fallback).await?;
                                invalid_streak = 0;
                                continue;
                            }
                        }
                    }
                    rec.record(
                        Some(step),
                        &runlog::ToolResult {
                            tool: FINISH_TOOL.to_owned(),
                            call_id: call.id.clone(),
                            result: payload.clone(),
                        },
                    )
                    .await?;
                    if let Some(g) = &gate {
                        g.discard().await;
                    }
                    return Ok(LoopOutcome::completed(payload, step + 1, usage));
                }
                Ok(Dispatch::Done(result)) => {
                    let text = truncate(&render_result(&result), MAX_TOOL_RESULT_CHARS);
                    rec.record(
                        Some(step),
                        &runlog::ToolResult {
                            tool: call.name.clone(),
                            call_id: call.id.clone(),
                            result: Value::String(text.clone()),
                        },
                    )
                    .await?;
                    let text = nudge(rec, step, call, key, text, &mut repeats, &catalogue).await?;
                    messages.push(Message::tool_result(&call.id, text));
                }
                Err(error) => {
                    invalid_here |= matches!(error, ToolError::InvalidArguments(_));
                    let message = error.to_string();
                    rec.record(
                        Some(step),
                        &runlog::ToolError {
                            tool: call.name.clone(),
                            call_id: call.id.clone(),
                            error_type: error.error_type(),
                            error_message: message.clone(),
                        },
                    )
                    .await?;
                    if let ToolError::Denied {
                        event_type,
                        attempted,
                        ..
                    } = &error
                    {
                        rec.record(
                            Some(step),
                            &runlog::SecurityEvent {
                                event_type: event_type.as_str().into(),
                                tool: Some(call.name.clone()),
                                call_id: Some(call.id.clone()),
                                attempted: attempted.clone(),
                                error_message: message.clone(),
                            },
                        )
                        .await?;
                    }
                    let text = json!({"error": message}).to_string();
                    let text = match refused {
                        true => text,
                        false => {
                            nudge(rec, step, call, key, text, &mut repeats, &catalogue).await?
                        }
                    };
                    messages.push(Message::tool_result(&call.id, text));
                }
            }
        }
        invalid_streak = if invalid_here { invalid_streak + 1 } else { 0 };
    }
    Ok(LoopOutcome::failed(
        RunStatus::MaxStepsExceeded,
        format!(
            "reached max_steps ({max_steps}) without finish_task; raise it with `--max-steps` or `max_steps` in the config, or simplify the task"
        ),
        max_steps,
        usage,
    ))
}

/// The tool calls a text answer holds, when the model key repairs them and the answer has no
/// proper call.
fn repaired_calls(
    response: &crate::ports::ChatResponse,
    model: &ModelParams,
    catalogue: &Catalogue<'_>,
    step: u32,
    replayed: Option<Option<Vec<String>>>,
) -> Option<crate::repair::Repaired> {
    if !response.tool_calls.is_empty() {
        return None;
    }
    let text = response.content.as_deref()?;
    match replayed {
        // Replayed: as recorded, against the tools it named then.
        Some(Some(tools)) => crate::repair::repair(text, &tools, step),
        Some(None) => None,
        None if model.tool_call_repair => crate::repair::repair(text, &catalogue.available, step),
        None => None,
    }
}

/// Records a call the model made, before it runs (or is refused).
async fn record_call(
    rec: Recorder<'_>,
    step: u32,
    call: &fabric_domain::ToolCall,
    args: &Result<Value, String>,
) -> Result<(), StoreError> {
    rec.record(
        Some(step),
        &runlog::ToolCall {
            tool: call.name.clone(),
            call_id: call.id.clone(),
            args: shown_args(call, args),
        },
    )
    .await
}

/// A call's arguments as the runlog shows them: parsed, or the raw text (capped).
fn shown_args(call: &fabric_domain::ToolCall, args: &Result<Value, String>) -> Value {
    args.clone().unwrap_or_else(|_| {
        Value::String(truncate(&call.arguments, MAX_LLM_CONTENT_IN_RUNLOG_CHARS))
    })
}

/// Records what the repetition breaker did about a call.
async fn record_loop(
    rec: Recorder<'_>,
    step: u32,
    call: &fabric_domain::ToolCall,
    args: Value,
    repeats: u32,
    action: &str,
    message: &str,
) -> Result<(), StoreError> {
    rec.record(
        Some(step),
        &runlog::LoopDetected {
            tool: call.name.clone(),
            call_id: call.id.clone(),
            args,
            repeats,
            action: action.to_owned(),
            message: message.to_owned(),
        },
    )
    .await
}

/// The text a live call's result goes back to the model as: with the repetition breaker's
/// note when the call just completed a streak (recorded as `loop_detected`).
async fn nudge(
    rec: Recorder<'_>,
    step: u32,
    call: &fabric_domain::ToolCall,
    key: Option<u64>,
    text: String,
    repeats: &mut Repeats,
    catalogue: &Catalogue<'_>,
) -> Result<String, StoreError> {
    let note = repeats.after(&call.name, key, &text, &catalogue.available);
    if let Some(note) = &note {
        // The parsed arguments went to the tool; read again from the call, only here.
        let args = shown_args(call, &parse_arguments(&call.arguments));
        record_loop(rec, step, call, args, repeats.count(), "nudged", note).await?;
    }
    Ok(with_note(text, note))
}

/// A tool result with the repetition breaker's note after it.
fn with_note(text: String, note: Option<String>) -> String {
    match note {
        Some(note) => format!("{text}\n\n{note}"),
        None => text,
    }
}

/// Whether the member is repairing rejected work on the cloud model.
fn repairing_on_cloud(gate: &Option<crate::gate::GateState<'_>>) -> bool {
    gate.as_ref().is_some_and(|g| g.repair_on_cloud)
}

/// Whether the tool a call names only reads, by its contract (`finish_task` only checks its
/// payload); an unknown tool does not.
fn reads_only(catalogue: &Catalogue<'_>, name: &str) -> bool {
    name == FINISH_TOOL
        || catalogue
            .tool(name)
            .is_some_and(|t| t.spec().annotations.read_only)
}
