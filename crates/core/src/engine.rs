//! The tool-calling loop of one specialist.
//!
//! Each step: ask the model, then run the tool calls it made, in order, feeding every result
//! (or an exact error) back as a `tool` message. The loop ends when the model calls
//! `finish_task` with a payload that fits the specialist's finish schema, when it keeps
//! answering in plain text, when `max_steps` runs out, when the model server fails, or when
//! the run is cancelled. It never branches on where a tool came from.

use fabric_domain::{
    FINISH_TOOL, Message, RunStatus, SpecialistSpec, ToolCall, Usage, runlog, schema,
};
use serde_json::{Map, Value, json};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::gate::Passage;
use crate::history::{RecordedOutcome, RecordedStep};
use crate::ports::{
    ChatClient, ChatRequest, StoreError, Tool, ToolContext, ToolDefinitions, ToolError, ToolSource,
    Withheld,
};
use crate::recorder::{Recorder, truncate};

/// Most characters of a tool result sent to the model and written to the runlog.
pub const MAX_TOOL_RESULT_CHARS: usize = 16_000;
/// Most characters of model text written to the runlog per response.
pub const MAX_LLM_CONTENT_IN_RUNLOG_CHARS: usize = 2_000;
/// Plain-text replies in a row answered with a corrective message before giving up.
pub const MAX_CORRECTIVE_REPROMPTS: u32 = 1;

/// The model and how to sample it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelParams {
    /// The model name on the server.
    pub name: String,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    pub top_p: Option<f32>,
    /// Upper bound of generated tokens per call.
    pub max_tokens: Option<u32>,
    /// Stream responses.
    pub stream: bool,
    /// What its tokens cost, when the config says (`price_per_mtok`).
    pub price: Option<crate::budget::Price>,
    /// Recover tool calls its server handed back as text (`tool_call_repair`;
    /// [`crate::repair`]).
    pub tool_call_repair: bool,
    /// Its context window in tokens, when known: the conversation is compacted to fit it
    /// ([`crate::context`]).
    pub context_window: Option<u32>,
    /// Left-out turns are summarised by the model (`context_compaction: summarize`) rather
    /// than listed.
    pub summarize_compaction: bool,
}

/// How one specialist's loop ended.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopOutcome {
    /// The typed status.
    pub status: RunStatus,
    /// The finish payload (or the fallback payload); `null` when the loop failed.
    pub payload: Value,
    /// Model calls made.
    pub steps: u32,
    /// Tokens used.
    pub usage: Usage,
    /// Why it failed, for statuses other than `completed`.
    pub reason: Option<String>,
}

/// A stronger model a step goes to when the local one fails in a way it may fix (seed 000
/// ADR-008: by quality, never by a connection failure), up to a number of times per run.
pub struct Fallback<'a> {
    /// Its client.
    pub chat: &'a dyn ChatClient,
    /// Its model.
    pub model: &'a ModelParams,
    /// Its model key, for the runlog.
    pub model_key: &'a str,
    /// Fall back when the local model answers without a tool call.
    pub no_tool_calls: bool,
    /// Fall back when the local model sent invalid arguments two steps in a row (the
    /// corrective error message did not help).
    pub malformed_args: bool,
    /// Fall back (for the repair) when the critic rejected the work.
    pub critic_rejected: bool,
    /// Fallbacks left for the whole run (shared by its members).
    pub remaining: &'a std::sync::atomic::AtomicU32,
}

impl Fallback<'_> {
    /// Takes one fallback from the run's allowance, when the cloud model may be asked
    /// (its daily budget is not spent).
    pub(crate) fn take(&self) -> bool {
        if let Some(why) = self.chat.unavailable() {
            tracing::debug!(model_key = self.model_key, "no cloud fallback: {why}");
            return false;
        }
        self.remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }
}

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

/// The outcome of dispatching one tool call.
enum Dispatch {
    /// A tool returned a result.
    Done(Value),
    /// `finish_task` was accepted with this payload.
    Finished(Value),
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
            Ok(failed(status, reason, 0, Usage::default()))
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

    // The `finish_task` definition is built once; the schema itself is checked against
    // `specialist.finish_schema`, so no second copy of it lives through the run.
    // Kept as JSON text for the life of the run (a `Value` tree is about three times the
    // memory) and decoded only when the tool set changes.
    let finish_definition = match specialist.finish_tool() {
        Ok(spec) => spec.openai_definition().to_string(),
        Err(e) => {
            return Ok(failed(
                RunStatus::Failed,
                e.to_string(),
                0,
                Usage::default(),
            ));
        }
    };
    let mut catalogue = Catalogue::build(source, &finish_definition, &specialist.finish_schema);
    let mut usage = Usage::default();
    // With no tool to work with, there is no work to require before finish_task.
    let mut attempted_work = catalogue.tools.is_empty();
    let mut plain_replies = 0u32;
    // Steps in a row whose calls had invalid arguments (for the `malformed_args` fallback).
    let mut invalid_streak = 0u32;

    for step in 0..max_steps {
        record_notices(source, &rec, Some(step)).await?;
        // Tools that arrived since the last step (a late MCP server, a loaded schema) are
        // offered from this step on; the definitions are rebuilt only when the set changed.
        if source.version() != catalogue.version {
            catalogue = Catalogue::build(source, &finish_definition, &specialist.finish_schema);
        }
        let definitions = &catalogue.definitions;
        // Every model call is paid from the budget the whole delegation tree shares.
        if let Err(reason) = ctx.lineage.budget.take_step() {
            return Ok(failed(RunStatus::BudgetExceeded, reason, step, usage));
        }
        // The conversation must fit the model's window; compacting is deterministic, so a
        // replayed step compacts as the live one did (and records nothing again).
        let replaying_step = replay
            .front()
            .is_some_and(|r| r.step == step && r.response.is_some());
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
            return Ok(failed(
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
        let (response, mut recorded, price) = match recorded {
            Some(RecordedStep {
                response: Some(response),
                started,
                outcomes,
                replaced_usage,
                ..
            }) => {
                // A local answer a cloud fallback replaced was paid for too.
                usage.add(replaced_usage);
                ctx.lineage.budget.charge(replaced_usage, model.price);
                (response, Some((started, outcomes)), model.price)
            }
            // The call was in flight when the process stopped: ask again.
            _ => {
                let cloud = match fallback {
                    // The repair of rejected work runs on the cloud model (`critic_rejected`).
                    Some(f) if repairing_on_cloud(&gate) => Some(f),
                    // Invalid arguments twice running: this step goes to the cloud model.
                    Some(f) if f.malformed_args && invalid_streak >= 2 && f.take() => {
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
                    Err((status, reason)) => return Ok(failed(status, reason, step, usage)),
                }
            }
        };
        let replaying = recorded.is_some();
        // A call the server failed to parse, written in the model's own format, is repaired
        // (deterministically, so a replayed step repairs the same way under the same ids).
        let response = match repaired_calls(&response, model, &catalogue, step) {
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
                    && f.no_tool_calls
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
                    Err((status, reason)) => return Ok(failed(status, reason, step, usage)),
                }
            }
            _ => response,
        };

        if response.tool_calls.is_empty() {
            let text = response.content.unwrap_or_default();
            if plain_replies < MAX_CORRECTIVE_REPROMPTS {
                plain_replies += 1;
                if !replaying {
                    rec.record(
                        Some(step),
                        &runlog::CorrectiveReprompt {
                            reason: "plain_text_response".to_owned(),
                            attempt: plain_replies,
                            max_retries: MAX_CORRECTIVE_REPROMPTS,
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
            return Ok(LoopOutcome {
                status: RunStatus::CompletedWithoutFinish,
                payload,
                steps: step + 1,
                usage,
                reason: Some("the model answered in plain text instead of calling finish_task; the payload was built from its reply".into()),
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
            let outcome = if let Some(settled) = settled {
                if let (RecordedOutcome::Result(_), Ok(args)) = (&settled, &args) {
                    source.replayed(&call.name, args);
                }
                let known = call.name != FINISH_TOOL
                    && (catalogue.tool(&call.name).is_some()
                        || matches!(settled, RecordedOutcome::Result(_)));
                attempted_work |= known;
                match settled {
                    RecordedOutcome::Result(payload) if call.name == FINISH_TOOL => {
                        return Ok(completed(payload, step + 1, usage));
                    }
                    RecordedOutcome::Result(result) => {
                        messages.push(Message::tool_result(&call.id, render_result(&result)));
                    }
                    RecordedOutcome::Error(message) => messages.push(Message::tool_result(
                        &call.id,
                        json!({"error": message}).to_string(),
                    )),
                }
                continue;
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
                    rec.record(
                        Some(step),
                        &runlog::ToolCall {
                            tool: call.name.clone(),
                            call_id: call.id.clone(),
                            args: args.clone().unwrap_or_else(|_| {
                                Value::String(truncate(
                                    &call.arguments,
                                    MAX_LLM_CONTENT_IN_RUNLOG_CHARS,
                                ))
                            }),
                        },
                    )
                    .await?;
                }
                tokio::select! {
                    biased;
                    () = ctx.cancel.cancelled() => {
                        return Ok(failed(RunStatus::Cancelled, "the run was cancelled".into(), step + 1, usage));
                    }
                    () = until(ctx.lineage.budget.deadline()) => {
                        let reason = ctx.lineage.budget.time_reason(&format!("the tool `{}`", call.name));
                        return Ok(failed(RunStatus::BudgetExceeded, reason, step + 1, usage));
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
                                return Ok(failed(status, reason, step + 1, usage));
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
                    return Ok(completed(payload, step + 1, usage));
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
                    messages.push(Message::tool_result(
                        &call.id,
                        json!({"error": message}).to_string(),
                    ));
                }
            }
        }
        invalid_streak = if invalid_here { invalid_streak + 1 } else { 0 };
    }
    Ok(failed(
        RunStatus::MaxStepsExceeded,
        format!(
            "reached max_steps ({max_steps}) without finish_task; raise it with `--max-steps` or `max_steps` in the config, or simplify the task"
        ),
        max_steps,
        usage,
    ))
}

/// One live model call: recorded as `llm_request`, then `llm_response` (with the whole
/// text and arguments when the runlog's fields are capped, so a resumed run continues the
/// same conversation). `Ok(Err(..))` is how the loop ends: cancelled, or the server failed.
async fn ask(
    chat: &dyn ChatClient,
    messages: &[Message],
    definitions: &ToolDefinitions,
    model: &ModelParams,
    ctx: &ToolContext,
    rec: Recorder<'_>,
    step: u32,
) -> Result<Result<crate::ports::ChatResponse, (RunStatus, String)>, StoreError> {
    // The call may not take the run past its token or cost budget: its answer is capped to
    // what is left once its prompt is paid for.
    let budget = &ctx.lineage.budget;
    let max_tokens = match budget.cap_completion(
        model.max_tokens,
        || prompt_estimate(messages, definitions),
        model.price,
    ) {
        Ok(cap) => cap,
        Err(reason) => return Ok(Err((RunStatus::BudgetExceeded, reason))),
    };
    rec.record(
        Some(step),
        &runlog::LlmRequest {
            model: model.name.clone(),
            message_count: messages.len(),
            tool_count: definitions.len(),
        },
    )
    .await?;
    let request = ChatRequest {
        model: &model.name,
        messages,
        tools: definitions,
        temperature: model.temperature,
        top_p: model.top_p,
        max_tokens,
        stream: model.stream,
    };
    let started = Instant::now();
    // A streamed answer is counted as it arrives: a server that ignores `max_tokens` is
    // stopped once the text passes what the budget leaves.
    let metered = StreamMeter {
        inner: rec.observer(),
        chars: AtomicUsize::new(0),
        limit_chars: max_tokens
            .filter(|_| model.stream && budget.limits_answers(model.price))
            .map(StreamMeter::chars_for),
        over: tokio::sync::Notify::new(),
    };
    let answer = tokio::select! {
        biased;
        () = ctx.cancel.cancelled() => {
            return Ok(Err((RunStatus::Cancelled, "the run was cancelled".into())));
        }
        () = until(budget.deadline()) => {
            return Ok(Err((RunStatus::BudgetExceeded, budget.time_reason("a model call"))));
        }
        () = metered.over.notified() => {
            let seen = metered.chars.load(Ordering::Relaxed);
            budget.charge_tokens((seen / 4) as u64);
            return Ok(Err((RunStatus::BudgetExceeded, format!(
                "the model's streamed answer passed what the token and cost budget of this run leaves (about {} tokens) while it streamed, and was stopped ({seen} characters received; the server did not keep to `max_tokens`)",
                max_tokens.unwrap_or_default()
            ))));
        }
        answer = chat.chat(request, &metered) => answer,
    };
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let response = match answer {
        Ok(response) => response,
        Err(e) => {
            let status = if e.is_model_unsupported() {
                RunStatus::ModelUnsupported
            } else {
                RunStatus::LlmError
            };
            return Ok(Err((status, e.to_string())));
        }
    };
    let capped = |text: &str| truncate(text, MAX_LLM_CONTENT_IN_RUNLOG_CHARS);
    let whole = |text: &str, cut: &str| (cut.len() != text.len()).then(|| text.to_owned());
    let content = response.content.as_deref().map(capped);
    rec.record(
        Some(step),
        &runlog::LlmResponse {
            full_content: match (&response.content, &content) {
                (Some(text), Some(cut)) => whole(text, cut),
                _ => None,
            },
            content,
            tool_calls: response
                .tool_calls
                .iter()
                .map(|c| {
                    let arguments = capped(&c.arguments);
                    runlog::LlmToolCall {
                        call_id: Some(c.id.clone()),
                        name: c.name.clone(),
                        full_arguments: whole(&c.arguments, &arguments),
                        arguments,
                    }
                })
                .collect(),
            usage: response.usage,
            latency_ms: (latency_ms * 1000.0).round() / 1000.0,
            finish_reason: response.finish_reason.clone(),
        },
    )
    .await?;
    Ok(Ok(response))
}

/// The run's observer, counting the streamed text against the budget's cap.
struct StreamMeter<'a> {
    inner: &'a dyn crate::ports::RunObserver,
    chars: AtomicUsize,
    /// Past this many characters the answer is over its cap; `None`: not counted.
    limit_chars: Option<usize>,
    over: tokio::sync::Notify,
}

impl StreamMeter<'_> {
    /// Characters that `tokens` may take: four a token, plus a quarter for what the estimate
    /// errs by, so an answer within its cap is never stopped.
    fn chars_for(tokens: u32) -> usize {
        (tokens as usize).saturating_mul(5)
    }
}

impl crate::ports::ChatObserver for StreamMeter<'_> {
    fn on_text_delta(&self, delta: &str) {
        self.inner.on_text_delta(delta);
        if let Some(limit) = self.limit_chars {
            let seen = self.chars.fetch_add(delta.len(), Ordering::Relaxed) + delta.len();
            if seen > limit {
                self.over.notify_one();
            }
        }
    }
}

/// Waits until `deadline`, or forever without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

/// About how many tokens a request's prompt is: its text and tool definitions at four
/// characters a token (servers' tokenizers differ; within about a quarter for English and
/// code), so the answer's cap leaves room for it.
fn prompt_estimate(messages: &[Message], definitions: &ToolDefinitions) -> u64 {
    let chars: usize = messages
        .iter()
        .map(|m| {
            m.content.as_deref().map_or(0, str::len)
                + m.tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len())
                    .sum::<usize>()
                + 8
        })
        .sum::<usize>()
        + definitions.byte_len();
    (chars / 4) as u64
}

/// Compacts the conversation when it would not fit the model's context window, recording
/// `context_compacted` (live steps only). `Ok(Err(reason))`: it cannot be made to fit.
#[allow(clippy::too_many_arguments)]
async fn fit_window(
    chat: &dyn ChatClient,
    messages: &mut Vec<Message>,
    definitions: &ToolDefinitions,
    model: &ModelParams,
    ctx: &ToolContext,
    rec: Recorder<'_>,
    step: u32,
    replaying: bool,
    usage: &mut Usage,
) -> Result<Result<(), String>, StoreError> {
    let Some(window) = model.context_window else {
        return Ok(Ok(()));
    };
    let room = crate::context::room(window, model.max_tokens);
    let done = match crate::context::compact(messages, definitions, room) {
        Ok(None) => return Ok(Ok(())),
        Ok(Some(done)) => done,
        Err(smallest) => {
            return Ok(Err(format!(
                "the conversation does not fit the model's context window of {window} tokens even with only the system prompt, the task and the last step left (about {smallest} tokens, room for {room}); raise the window (`num_ctx` for Ollama, `context_window` otherwise), use a model with a larger one, or shorten the task or the tool results"
            )));
        }
    };
    if replaying {
        return Ok(Ok(()));
    }
    // The model writes the note for what was left out, when asked to; a failure keeps the
    // listed note.
    let mut summary = None;
    if model.summarize_compaction && done.dropped_messages > 0 {
        let prompt = [
            Message::system(
                "You summarise the earlier steps of an agent's work in a few sentences: what was done, what was found, what files were written. Be factual and brief.",
            ),
            Message::user(done.dropped_text.clone()),
        ];
        let request = ChatRequest {
            model: &model.name,
            messages: &prompt,
            tools: &ToolDefinitions::none(),
            temperature: model.temperature,
            top_p: model.top_p,
            max_tokens: Some(400),
            stream: false,
        };
        let asked = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => None,
            answer = chat.chat(request, &crate::ports::NoopObserver) => answer.ok(),
        };
        if let Some(answer) = asked {
            if let Some(u) = answer.usage {
                usage.add(u);
                ctx.lineage.budget.charge(u, model.price);
            }
            if let Some(text) = answer.content.filter(|t| !t.trim().is_empty()) {
                crate::context::use_summary(messages, text.trim());
                summary = Some(text.trim().to_owned());
            }
        }
    }
    rec.record(
        Some(step),
        &runlog::ContextCompacted {
            window,
            room,
            tokens_before: done.tokens_before,
            tokens_after: crate::context::estimate(messages, definitions),
            shortened_results: done.shortened,
            dropped_messages: done.dropped_messages,
            mode: if summary.is_some() {
                "summarize"
            } else {
                "drop"
            }
            .to_owned(),
            summary,
        },
    )
    .await?;
    Ok(Ok(()))
}

/// The tool calls a text answer holds, when the model key repairs them and the answer has no
/// proper call.
fn repaired_calls(
    response: &crate::ports::ChatResponse,
    model: &ModelParams,
    catalogue: &Catalogue<'_>,
    step: u32,
) -> Option<crate::repair::Repaired> {
    if !model.tool_call_repair || !response.tool_calls.is_empty() {
        return None;
    }
    crate::repair::repair(response.content.as_deref()?, &catalogue.available, step)
}

/// Whether the member is repairing rejected work on the cloud model.
fn repairing_on_cloud(gate: &Option<crate::gate::GateState<'_>>) -> bool {
    gate.as_ref().is_some_and(|g| g.repair_on_cloud)
}

/// Records that a step goes to the cloud model, and why.
pub(crate) async fn record_fallback(
    rec: Recorder<'_>,
    step: u32,
    reason: &str,
    local: &ModelParams,
    fallback: &Fallback<'_>,
) -> Result<(), StoreError> {
    rec.record(
        Some(step),
        &runlog::CloudFallback {
            reason: reason.to_owned(),
            local_model: local.name.clone(),
            cloud_model: fallback.model.name.clone(),
            cloud_model_key: fallback.model_key.to_owned(),
        },
    )
    .await
}

/// Whether the tool a call names only reads, by its contract (`finish_task` only checks its
/// payload); an unknown tool does not.
fn reads_only(catalogue: &Catalogue<'_>, name: &str) -> bool {
    name == FINISH_TOOL
        || catalogue
            .tool(name)
            .is_some_and(|t| t.spec().annotations.read_only)
}

/// An accepted `finish_task`.
fn completed(payload: Value, steps: u32, usage: Usage) -> LoopOutcome {
    LoopOutcome {
        status: RunStatus::Completed,
        payload,
        steps,
        usage,
        reason: None,
    }
}

fn failed(status: RunStatus, reason: String, steps: u32, usage: Usage) -> LoopOutcome {
    LoopOutcome {
        status,
        payload: Value::Null,
        steps,
        usage,
        reason: Some(reason),
    }
}

/// Parses the raw argument text. An empty string means no arguments, as several servers send
/// it for tools without parameters. Arguments nested deeper than `MAX_DEPTH` levels are
/// refused: the runlog wraps them in more levels, and serde's limit of 128 would then make
/// the runlog unreadable.
fn parse_arguments(raw: &str) -> Result<Value, String> {
    const MAX_DEPTH: usize = 32;
    fn depth(v: &Value) -> usize {
        match v {
            Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }
    if raw.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let value: Value = serde_json::from_str(raw).map_err(|e| e.to_string())?;
    if depth(&value) > MAX_DEPTH {
        return Err(format!(
            "they nest arrays and objects more than {MAX_DEPTH} levels deep; send flatter arguments"
        ));
    }
    Ok(value)
}

/// What the model may call at one step: built from the tool source, rebuilt when its
/// version changes.
struct Catalogue<'a> {
    version: u64,
    tools: Vec<Arc<dyn Tool>>,
    available: Vec<String>,
    withheld: Vec<Withheld>,
    /// Serialised once per tool set (`ToolDefinitions`): sent with every request.
    definitions: ToolDefinitions,
    finish_schema: &'a Value,
}

impl<'a> Catalogue<'a> {
    fn build(source: &dyn ToolSource, finish_definition: &str, finish_schema: &'a Value) -> Self {
        // The version is read first: a change racing this read only causes one more rebuild.
        let version = source.version();
        let tools = source.tools();
        let mut definitions: Vec<Value> =
            tools.iter().map(|t| t.spec().openai_definition()).collect();
        // The text was produced by `serde_json` from a `Value` just above, so it parses.
        definitions.push(serde_json::from_str(finish_definition).unwrap_or_default());
        let mut available: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
        available.push(FINISH_TOOL.to_owned());
        Self {
            version,
            tools,
            available,
            withheld: source.withheld(),
            definitions: ToolDefinitions::new(&definitions),
            finish_schema,
        }
    }

    /// The tool a call names: by its name, or by an old name (alias) it still answers to.
    fn tool(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools
            .iter()
            .find(|t| t.spec().name == name)
            .or_else(|| self.tools.iter().find(|t| t.spec().answers_to(name)))
    }
}

async fn dispatch(
    call: &ToolCall,
    args: Result<Value, String>,
    catalogue: &Catalogue<'_>,
    attempted_work: bool,
    ctx: &ToolContext,
) -> Result<Dispatch, ToolError> {
    let available = &catalogue.available;
    let schema_of = |name: &str| -> Option<&Value> {
        if name == FINISH_TOOL {
            Some(catalogue.finish_schema)
        } else {
            catalogue.tool(name).map(|t| &t.spec().input_schema)
        }
    };
    let Some(input_schema) = schema_of(&call.name) else {
        let why = catalogue
            .withheld
            .iter()
            .find(|(name, _)| *name == call.name)
            .map(|(_, why)| *why);
        return Err(ToolError::InvalidArguments(match why {
            Some(why) => format!(
                "tool `{}` is not available in this run: {why}; the available tools are: {}",
                call.name,
                available.join(", ")
            ),
            None => format!(
                "unknown tool `{}`; the available tools are: {}",
                call.name,
                available.join(", ")
            ),
        }));
    };
    let args = args.map_err(|parse_error| {
        ToolError::InvalidArguments(format!(
            "the arguments of `{}` are not valid JSON ({parse_error}): {}; send one JSON object, for example {}",
            call.name,
            truncate(&call.arguments, 200),
            skeleton(input_schema)
        ))
    })?;
    schema::validate(input_schema, &args).map_err(|violations| {
        ToolError::InvalidArguments(format!(
            "invalid arguments for `{}`: {violations}",
            call.name
        ))
    })?;

    if call.name == FINISH_TOOL {
        if !attempted_work {
            let others: Vec<&str> = available
                .iter()
                .map(String::as_str)
                .filter(|n| *n != FINISH_TOOL)
                .collect();
            return Err(ToolError::InvalidArguments(format!(
                "finish_task refused: no other tool has been used yet. Do the task with the tools ({}) first, check the result, then call finish_task",
                others.join(", ")
            )));
        }
        return Ok(Dispatch::Finished(args));
    }
    match catalogue.tool(&call.name) {
        Some(tool) => tool.call(args, ctx).await.map(Dispatch::Done),
        // schema_of found it above, so it is here; answer like an unknown tool regardless.
        None => Err(ToolError::InvalidArguments(format!(
            "unknown tool `{}`",
            call.name
        ))),
    }
}

/// A tool result as the model reads it: strings as they are, anything else as JSON.
fn render_result(result: &Value) -> String {
    match result {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// An example object with the required fields of a schema, to show a model the shape.
fn skeleton(schema: &Value) -> String {
    let mut out = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object);
    let required = schema.get("required").and_then(Value::as_array);
    for key in required.into_iter().flatten().filter_map(Value::as_str) {
        let kind = properties
            .and_then(|p| p.get(key))
            .and_then(|p| p.get("type"))
            .and_then(|t| {
                t.as_str()
                    .or_else(|| t.as_array().and_then(|a| a.first()).and_then(Value::as_str))
            })
            .unwrap_or("string");
        let placeholder = match kind {
            "array" => json!([]),
            "object" => json!({}),
            "integer" | "number" => json!(0),
            "boolean" => json!(false),
            _ => json!("..."),
        };
        out.insert(key.to_owned(), placeholder);
    }
    Value::Object(out).to_string()
}

fn corrective_message(available: &[String], finish_schema: &Value) -> String {
    format!(
        "You answered in plain text, but this task is done only through tool calls. Use the tools ({}) to do the work, then call finish_task with arguments like {}. If the work is already done, call finish_task now.",
        available.join(", "),
        skeleton(finish_schema)
    )
}

/// The payload of a run whose model never called `finish_task` (seed ADR-003 fallback): the
/// text goes into the first required string field of the finish schema.
fn fallback_payload(finish_schema: &Value, text: &str) -> Value {
    let field = finish_schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|key| finish_schema["properties"][*key]["type"].as_str() == Some("string"))
        .unwrap_or("summary");
    let mut payload = Map::new();
    payload.insert(field.to_owned(), Value::String(text.to_owned()));
    // The note never replaces the model's text, should the text field itself be `notes`.
    payload.entry("notes").or_insert_with(|| {
        Value::String("The model ended without calling finish_task; this payload was built from its last reply.".to_owned())
    });
    Value::Object(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skeleton_shows_required_fields() {
        let s = json!({"type": "object", "properties": {"summary": {"type": "string"}, "artifacts": {"type": "array"}}, "required": ["summary"]});
        assert_eq!(skeleton(&s), r#"{"summary":"..."}"#);
    }

    #[test]
    fn fallback_uses_first_required_string_field() {
        let s = json!({"type": "object", "properties": {"executive_summary": {"type": "string"}}, "required": ["executive_summary"]});
        let p = fallback_payload(&s, "hello");
        assert_eq!(p["executive_summary"], "hello");
    }

    #[test]
    fn empty_arguments_are_an_empty_object() {
        assert_eq!(parse_arguments("  "), Ok(json!({})));
        assert!(parse_arguments("{bad").is_err());
    }

    #[test]
    fn deeply_nested_arguments_are_refused() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse_arguments(&format!(r#"{{"a":{}}}"#, nested(31))).is_ok());
        assert_eq!(
            parse_arguments(&format!(r#"{{"a":{}}}"#, nested(32))),
            Err(
                "they nest arrays and objects more than 32 levels deep; send flatter arguments"
                    .to_owned()
            )
        );
    }
}
