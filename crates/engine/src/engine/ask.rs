//! One model call of the loop: the budget's cap on the answer, the deadline, cancellation,
//! a streamed answer counted as it arrives, and the `llm_request`/`llm_response` records.

use fabric_domain::{Message, RunStatus, Usage, runlog};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::{Loop, MAX_LLM_CONTENT_IN_RUNLOG_CHARS, Stop};
use crate::params::ModelParams;
use crate::ports::{ChatClient, ChatError, ChatRequest, ChatResponse, StoreError, ToolDefinitions};
use crate::recorder::truncate;

impl Loop<'_, '_> {
    /// One live model call: recorded as `llm_request`, then `llm_response` (with the whole
    /// text and arguments when the runlog's fields are capped, so a resumed run continues
    /// the same conversation). A [`Stop`] when the run is cancelled, out of budget or time,
    /// or the server failed; the tokens an answer cut off took (estimated) are counted.
    pub(super) async fn ask(
        &mut self,
        chat: &dyn ChatClient,
        model: &ModelParams,
        step: u32,
    ) -> Result<ChatResponse, Stop> {
        let max_tokens = self.answer_cap(model)?;
        self.rec
            .record(
                Some(step),
                runlog::LlmRequest {
                    model: model.name.clone(),
                    message_count: self.messages.len(),
                    tool_count: self.catalogue.definitions.len(),
                },
            )
            .await?;
        let (ctx, rec) = (self.ctx, self.rec);
        let budget = &ctx.lineage.budget;
        let request = ChatRequest {
            model: &model.name,
            messages: &self.messages,
            tools: &self.catalogue.definitions,
            temperature: model.temperature,
            top_p: model.top_p,
            max_tokens,
            stream: model.stream,
            vision: model.vision(),
        };
        let started = Instant::now();
        // A streamed answer is counted as it arrives: a server that ignores `max_tokens` is
        // stopped once the text passes what the budget leaves.
        let metered = StreamMeter {
            inner: rec.observer(),
            chars: AtomicUsize::new(0),
            limit_chars: max_tokens
                .filter(|_| model.stream && budget.limits_answers(model.price()))
                .map(StreamMeter::chars_for),
            over: tokio::sync::Notify::new(),
        };
        let answer = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => {
                return Err(Stop::Ended(RunStatus::Cancelled, "the run was cancelled".into()));
            }
            () = until(budget.deadline()) => {
                // What the answer took so far is counted, as when the token budget stops
                // it (issue #40: the time budget's stop recorded 0 tokens).
                let spent = self.spent_so_far(model, metered.chars.load(Ordering::Relaxed));
                let reason = format!(
                    "{}; counted as about {} tokens, estimated from the prompt sent and the text received",
                    budget.time_reason("a model call"),
                    spent.total_tokens
                );
                return Err(Stop::Ended(RunStatus::BudgetExceeded, reason));
            }
            () = metered.over.notified() => None,
            answer = chat.chat(request, &metered) => Some(answer),
        };
        let Some(answer) = answer else {
            let seen = metered.chars.load(Ordering::Relaxed);
            return Err(self.cut_off(model, max_tokens, seen));
        };
        let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
        let response = answer.map_err(|e| Stop::Ended(status_of(&e), e.to_string()))?;
        self.record_response(step, &response, latency_ms).await?;
        Ok(response)
    }

    /// The most tokens the answer may take: what the run's token or cost budget leaves once
    /// the prompt is paid for, and with a known window only its share, so prompt and answer
    /// fit.
    fn answer_cap(&self, model: &ModelParams) -> Result<Option<u32>, Stop> {
        let budget = &self.ctx.lineage.budget;
        let max_tokens = budget
            .cap_completion(
                model.max_tokens,
                || prompt_estimate(&self.messages, &self.catalogue.definitions),
                model.price(),
            )
            .map_err(|spent| Stop::Ended(RunStatus::BudgetExceeded, spent.to_string()))?;
        Ok(match model.context_window {
            Some(window) => {
                let share = crate::context::answer_share(window, model.max_tokens);
                Some(max_tokens.map_or(share, |cap| cap.min(share)))
            }
            None => max_tokens,
        })
    }

    /// A streamed answer stopped past its cap. No usage comes from a server cut off
    /// mid-answer: what it took is estimated, the prompt as sent and the text received, and
    /// counted in the run's usage and budget (issue #26: it showed 0 tokens after about
    /// 2,500 were streamed).
    fn cut_off(&mut self, model: &ModelParams, max_tokens: Option<u32>, seen: usize) -> Stop {
        let spent = self.spent_so_far(model, seen);
        Stop::Ended(
            RunStatus::BudgetExceeded,
            format!(
                "the model's streamed answer passed what the token and cost budget of this run leaves (about {} tokens) while it streamed, and was stopped ({seen} characters received; the server did not keep to `max_tokens`); counted as about {} tokens, estimated from the prompt sent and the text received",
                max_tokens.unwrap_or_default(),
                spent.total_tokens
            ),
        )
    }

    /// What an answer stopped before its end took, `seen` characters of it received:
    /// estimated from the prompt as sent and the text, for no usage comes from a server
    /// cut off mid-answer; counted in the run's usage and budget.
    fn spent_so_far(&mut self, model: &ModelParams, seen: usize) -> Usage {
        let spent = Usage::from_counts(
            prompt_estimate(&self.messages, &self.catalogue.definitions),
            (seen / 4) as u64,
            None,
        );
        self.ctx.lineage.budget.charge(spent, model.price());
        self.usage.add(spent);
        spent
    }

    /// Records the answer as `llm_response`.
    async fn record_response(
        &self,
        step: u32,
        response: &ChatResponse,
        latency_ms: f64,
    ) -> Result<(), StoreError> {
        let capped = |text: &str| truncate(text, MAX_LLM_CONTENT_IN_RUNLOG_CHARS);
        let whole = |text: &str, cut: &str| (cut.len() != text.len()).then(|| text.to_owned());
        let content = response.content.as_deref().map(capped);
        self.rec
            .record(
                Some(step),
                runlog::LlmResponse {
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
                    queued_ms: response.queued_ms,
                    prompt_cache: response.prompt_cache,
                    constrained: response.constrained,
                },
            )
            .await
    }
}

/// How a failed model call ends the run.
fn status_of(e: &ChatError) -> RunStatus {
    if e.is_model_unsupported() {
        RunStatus::ModelUnsupported
    } else if e.is_context_exceeded() {
        RunStatus::ContextWindowExceeded
    } else {
        RunStatus::LlmError
    }
}

/// The run's observer, counting the streamed text against the budget's cap.
struct StreamMeter<'a> {
    inner: &'a dyn crate::ports::RunObserver,
    chars: AtomicUsize,
    /// Past this many characters the answer is over its cap; `None`: no cap.
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
        // Counted whether capped or not: a stop by the deadline counts it too.
        let n = delta.chars().count();
        let seen = self.chars.fetch_add(n, Ordering::Relaxed) + n;
        if self.limit_chars.is_some_and(|limit| seen > limit) {
            self.over.notify_one();
        }
    }
}

/// Waits until `deadline`, or forever without one.
pub(super) async fn until(deadline: Option<Instant>) {
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
