//! The *settle a call* and *finish* moves: each call of an answer is replayed, refused,
//! resumed, reported interrupted or dispatched, and its result (or exact error) goes back to
//! the model and into the runlog; an accepted `finish_task` passes the gate and ends the loop.

use fabric_domain::{FINISH_TOOL, Message, RunStatus, ToolCall, ToolImage, runlog};
use serde_json::{Value, json};

use super::answer::{Answer, Recorded, Source};
use super::ask::until;
use super::calls::{ArgumentsError, Catalogue, Dispatch, dispatch, parse_arguments, render_result};
use super::hooks::Gate;
use super::person::Consulted;
use super::repeats::Verdict;
use super::{Loop, MAX_LLM_CONTENT_IN_RUNLOG_CHARS, MAX_TOOL_RESULT_CHARS, Stop};
use crate::gate::Passage;
use crate::ports::{StoreError, ToolContext, ToolError, ToolOutput};
use crate::recorded::RecordedOutcome;
use crate::recorder::{Recorder, truncate};

/// How one call of an answer is settled.
enum Settlement {
    /// Settled before the run's process stopped: replayed as recorded.
    Replayed(RecordedOutcome),
    /// Refused by the repetition breaker; the model is told this.
    Refused(String),
    /// Refused by the repetition breaker once too often: the run ends `stalled`, for this
    /// reason.
    Stalled(String),
    /// In flight at the stop, and its tool settled it itself ([`crate::ports::Tool::resume`]).
    Resumed(Result<Value, ToolError>),
    /// In flight at the stop, and run again it might change things twice: not run.
    Interrupted,
    /// Run now.
    Dispatched,
}

/// What a call that ran (or was refused) came to.
type CallOutcome = Result<Dispatch, ToolError>;

impl<'a> Loop<'a, '_> {
    /// Settles each call of an answer, in order.
    pub(super) async fn settle_calls(&mut self, step: u32, answer: Answer<'a>) -> Result<(), Stop> {
        let calls = answer.response.tool_calls;
        self.messages
            .push(Message::assistant(answer.response.content, calls.clone()));
        let mut recorded = match answer.source {
            Source::Replayed(recorded) => Some(recorded),
            Source::Live | Source::Cloud(_) => None,
        };
        let mut invalid_here = false;
        for call in &calls {
            invalid_here |= self.settle(step, call, recorded.as_mut()).await?;
        }
        self.invalid_streak = if invalid_here {
            self.invalid_streak + 1
        } else {
            0
        };
        Ok(())
    }

    /// Settles one call; `true`: its arguments were invalid.
    async fn settle(
        &mut self,
        step: u32,
        call: &ToolCall,
        recorded: Option<&mut Recorded>,
    ) -> Result<bool, Stop> {
        let args = parse_arguments(&call.arguments);
        // Settled before the stop: replayed as recorded. Started but not settled: in flight
        // at the stop, run again only when the tool only reads (at-least-once for those,
        // at-most-once for every other tool; docs/DURABILITY.md).
        let (settled, in_flight) = match recorded {
            Some(r) => (r.outcomes.remove(&call.id), r.started.contains(&call.id)),
            None => (None, false),
        };
        // The repetition breaker judges every call but finish_task, replayed or live, so a
        // continued run reaches the same verdicts at the same calls.
        let key = match call.name == FINISH_TOOL {
            true => None,
            false => self
                .repeats
                .key(&call.name, args.as_ref().ok(), &call.arguments),
        };
        let verdict = self.repeats.before(&call.name, key);
        let refused = verdict.refusal().is_some();
        let settlement = self.settlement(settled, verdict, call, &args, in_flight);
        let outcome = match settlement.await {
            Settlement::Replayed(settled) => {
                self.replay_call(call, &args, key, refused, settled)?;
                return Ok(false);
            }
            Settlement::Refused(message) => {
                self.record_refusal(step, call, &args, in_flight, "refused", &message)
                    .await?;
                Err(ToolError::Failed(message))
            }
            Settlement::Stalled(reason) => {
                self.record_refusal(step, call, &args, in_flight, "stopped", &reason)
                    .await?;
                return Err(Stop::Ended(RunStatus::Stalled, reason));
            }
            Settlement::Resumed(resumed) => {
                self.checkpoint_after(step, call).await?;
                resumed.map(|result| Dispatch::Done(result.into()))
            }
            Settlement::Interrupted => Err(ToolError::Interrupted(format!(
                "this call of `{}` was interrupted: the fabric process running it stopped before it returned, and it was not run again because it may change things. Its effect is unknown: check what it would have changed (for example read the files) before calling it again",
                call.name
            ))),
            Settlement::Dispatched => {
                let outcome = self.run_call(step, call, args, in_flight).await?;
                self.checkpoint_after(step, call).await?;
                outcome
            }
        };
        if call.name != FINISH_TOOL && self.catalogue.tool(&call.name).is_some() {
            self.attempted_work = true;
        }
        match outcome {
            Ok(Dispatch::Finished(payload)) => self.finish(step, call, payload).await?,
            Ok(Dispatch::Done(output)) => self.record_result(step, call, key, output).await?,
            Err(error) => {
                let invalid = matches!(error, ToolError::InvalidArguments(_));
                self.record_error(step, call, key, refused, error).await?;
                return Ok(invalid);
            }
        }
        // A PostToolUse hook's `continue: false`: the run ends now its result is recorded.
        if let Some(reason) = self.hook_stop.take() {
            return Err(Stop::Ended(RunStatus::Cancelled, reason));
        }
        Ok(false)
    }

    /// Which way a call settles, in order of precedence.
    async fn settlement(
        &self,
        settled: Option<RecordedOutcome>,
        verdict: Verdict,
        call: &ToolCall,
        args: &Result<Value, ArgumentsError>,
        in_flight: bool,
    ) -> Settlement {
        if let Some(settled) = settled {
            return Settlement::Replayed(settled);
        }
        match verdict {
            Verdict::Refuse(message) => return Settlement::Refused(message),
            Verdict::Stop(reason) => return Settlement::Stalled(reason),
            Verdict::Run => {}
        }
        // A call in flight that was waiting for a person's answer (and had none) did not
        // run: it is settled now, with the answer the run was continued with.
        let waiting = self.asked.contains(&call.id) && !self.answered.contains_key(&call.id);
        if !in_flight || waiting {
            return Settlement::Dispatched;
        }
        if let (Some(tool), Ok(args)) = (self.catalogue.tool(&call.name), args)
            && !tool.spec().annotations.read_only
            && let Some(resumed) = tool.resume(args.clone(), self.ctx).await
        {
            return Settlement::Resumed(resumed);
        }
        if reads_only(&self.catalogue, &call.name) {
            Settlement::Dispatched
        } else {
            Settlement::Interrupted
        }
    }

    /// A call settled before the stop goes back to the model as it was; its events are in
    /// the runlog already.
    fn replay_call(
        &mut self,
        call: &ToolCall,
        args: &Result<Value, ArgumentsError>,
        key: Option<u64>,
        refused: bool,
        settled: RecordedOutcome,
    ) -> Result<(), Stop> {
        if let (RecordedOutcome::Result(_), Ok(args)) = (&settled, args) {
            self.source.replayed(&call.name, args);
        }
        if let Ok(args) = args {
            self.replay_approval(call, args);
        }
        let known = call.name != FINISH_TOOL
            && (self.catalogue.tool(&call.name).is_some()
                || matches!(settled, RecordedOutcome::Result(_)));
        self.attempted_work |= known;
        let text = match settled {
            RecordedOutcome::Result(payload) if call.name == FINISH_TOOL => {
                return Err(Stop::Finished(payload));
            }
            RecordedOutcome::Result(result) => render_result(&result),
            RecordedOutcome::Error(message) => json!({"error": message}).to_string(),
        };
        // Its `loop_detected` is in the runlog already.
        let note = match refused {
            true => None,
            false => self
                .repeats
                .after(&call.name, key, &text, &self.catalogue.available),
        };
        self.messages
            .push(Message::tool_result(&call.id, with_note(text, note)));
        Ok(())
    }

    /// Records a call the repetition breaker refused, and what it did.
    async fn record_refusal(
        &self,
        step: u32,
        call: &ToolCall,
        args: &Result<Value, ArgumentsError>,
        in_flight: bool,
        action: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        if !in_flight {
            record_call(self.rec, step, call, args).await?;
        }
        let repeated = self.repeats.count() + self.repeats.refused();
        let shown = shown_args(call, args);
        record_loop(self.rec, step, call, shown, repeated, action, message).await
    }

    /// Commits what a call may have changed in the run's versioned workspace, before its
    /// result is recorded (issue #25): a call that only reads changes nothing, and a member
    /// behind a critic works in its staging area, which reaches the workspace only when the
    /// critic approves (checkpointed then).
    async fn checkpoint_after(&self, step: u32, call: &ToolCall) -> Result<(), Stop> {
        let Some(versioned) = self.versioned else {
            return Ok(());
        };
        if self.ctx.workspace != versioned.dir()
            || self.catalogue.tool(&call.name).is_none()
            || reads_only(&self.catalogue, &call.name)
        {
            return Ok(());
        }
        versioned
            .checkpoint(&self.rec, step, &call.name, &call.id, &self.ctx.cancel)
            .await
            .map_err(Stop::from)
    }

    /// Runs a call: recorded, approved when the specialist's policy asks, then dispatched;
    /// a call whose answer is a person's asks them.
    async fn run_call(
        &mut self,
        step: u32,
        call: &ToolCall,
        args: Result<Value, ArgumentsError>,
        in_flight: bool,
    ) -> Result<CallOutcome, Stop> {
        if !in_flight {
            record_call(self.rec, step, call, &args).await?;
        }
        // The PreToolUse hooks first (issue #43): they may refuse the call, rewrite its
        // arguments, ask for approval, or spare it the policy's ask.
        let (args, approval) = match args {
            Ok(parsed) => match self.pre_tool_use(step, call, parsed).await? {
                Gate::Refused(error) => return Ok(Err(error)),
                Gate::Run(parsed, approval) => (Ok(parsed), approval),
            },
            Err(e) => (Err(e), None),
        };
        // What PostToolUse hooks are told the call was given.
        let given = match self.hooks {
            Some(_) => args.as_ref().ok().cloned(),
            None => None,
        };
        if let Some(request) = approval {
            match self.consult(step, call, request).await? {
                Consulted::Approved => {}
                Consulted::Answer(_) => {}
                Consulted::Refused(error) => return Ok(Err(error)),
            }
        }
        // Kept for a second dispatch only where a refusal may be approved (`on_request`).
        let again = (self.specialist.approval.mode == fabric_domain::ApprovalMode::OnRequest)
            .then(|| args.clone());
        let outcome = self.dispatch_now(step, call, args, false).await?;
        let outcome = match (outcome, again) {
            // Refused by the allowlist, asked about instead (`on_request`).
            (Err(refused @ ToolError::Denied { .. }), Some(Ok(parsed))) => {
                match self.refusal_approval(call, &parsed, &refused) {
                    Some(request) => match self.consult(step, call, request).await? {
                        Consulted::Approved => {
                            self.dispatch_now(step, call, Ok(parsed), true).await?
                        }
                        Consulted::Answer(_) => Err(refused),
                        Consulted::Refused(denied) => Err(denied),
                    },
                    None => Err(refused),
                }
            }
            (outcome, _) => outcome,
        };
        match outcome {
            // The call's answer is a person's (`ask_user`).
            Err(ToolError::Ask(mut request)) => {
                request.call_id.clone_from(&call.id);
                Ok(self.answer_of(step, call, *request).await?)
            }
            Ok(Dispatch::Done(output)) => {
                if let Some(given) = &given {
                    self.post_tool_use(step, call, given, &output.result)
                        .await?;
                }
                Ok(Ok(Dispatch::Done(output)))
            }
            outcome => Ok(outcome),
        }
    }

    /// The result of a call whose answer is a person's.
    async fn answer_of(
        &mut self,
        step: u32,
        call: &ToolCall,
        request: fabric_domain::runlog::InputRequired,
    ) -> Result<CallOutcome, Stop> {
        Ok(match self.consult(step, call, request).await? {
            Consulted::Answer(answer) => Ok(Dispatch::Done(answer.into())),
            Consulted::Approved => Err(ToolError::Failed(
                "the question was answered as an approval; ask it again".to_owned(),
            )),
            Consulted::Refused(error) => Err(error),
        })
    }

    /// Dispatches a call, unless the run is cancelled or out of time first.
    async fn dispatch_now(
        &self,
        step: u32,
        call: &ToolCall,
        args: Result<Value, ArgumentsError>,
        approved: bool,
    ) -> Result<CallOutcome, Stop> {
        // Its live output (issue #42) is named after it; dropped with the call, which says
        // what was left out.
        let ctx = &self
            .ctx
            .for_call(step, self.rec.member_index(), &call.id, &call.name);
        let approved_ctx;
        let ctx = if approved {
            approved_ctx = ToolContext {
                approved: true,
                ..ctx.clone()
            };
            &approved_ctx
        } else {
            ctx
        };
        let budget = &ctx.lineage.budget;
        let running = dispatch(call, args, &self.catalogue, self.attempted_work, ctx);
        tokio::pin!(running);
        loop {
            tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => {
                    return Err(Stop::Ended(RunStatus::Cancelled, "the run was cancelled".into()));
                }
                () = until(budget.deadline()) => {
                    let reason = budget.time_reason(&format!("the tool `{}`", call.name));
                    return Err(Stop::Ended(RunStatus::BudgetExceeded, reason));
                }
                outcome = &mut running => {
                    // What the server said just before it answered is the call's: let its
                    // handlers run, then record it before the result.
                    tokio::task::yield_now().await;
                    super::record_notices(self.source, &self.rec, Some(step)).await?;
                    return Ok(outcome);
                }
                // What the tool's server says while it works goes into the runlog now.
                () = self.source.noticed() => {
                    super::record_notices(self.source, &self.rec, Some(step)).await?;
                }
            }
        }
    }

    /// An accepted `finish_task`: a critic reviews the work first, and the run completes
    /// only when it approves (and the staged changes are applied).
    async fn finish(&mut self, step: u32, call: &ToolCall, payload: Value) -> Result<(), Stop> {
        if let Some(reason) = self.stop_blocked(step).await? {
            return self.keep_going(step, call, reason).await;
        }
        if let Some(g) = self.gate.as_mut() {
            match g.pass(&payload, self.ctx, self.rec, step).await? {
                Passage::Complete => {
                    // The approved changes reached the workspace just now.
                    if let Some(versioned) = self.versioned {
                        versioned
                            .checkpoint(&self.rec, step, FINISH_TOOL, &call.id, &self.ctx.cancel)
                            .await?;
                    }
                }
                Passage::End(status, reason) => return Err(Stop::Ended(status, reason)),
                Passage::Repair(message) => return self.repair_rejected(step, call, message).await,
            }
        }
        self.rec
            .record(
                Some(step),
                runlog::ToolResult {
                    tool: FINISH_TOOL.to_owned(),
                    call_id: call.id.clone(),
                    result: payload.clone(),
                    images: Vec::new(),
                },
            )
            .await?;
        if let Some(g) = &self.gate {
            g.discard().await;
        }
        Err(Stop::Finished(payload))
    }

    /// A Stop hook kept the run going (issue #43): `finish_task` is answered that it may
    /// not finish yet, and the hooks' reason follows as a user message.
    async fn keep_going(&mut self, step: u32, call: &ToolCall, reason: String) -> Result<(), Stop> {
        let message = "the run may not finish yet: a Stop hook kept it going; its reason follows. Do what it asks, then call finish_task again".to_owned();
        self.refuse_finish(step, call, message).await?;
        self.messages
            .push(Message::user(format!("[Stop hook] {reason}")));
        Ok(())
    }

    /// `finish_task` is answered with `message`, recorded as a `rejected` error.
    async fn refuse_finish(
        &mut self,
        step: u32,
        call: &ToolCall,
        message: String,
    ) -> Result<(), StoreError> {
        let text = json!({"error": message}).to_string();
        self.rec
            .record(
                Some(step),
                runlog::ToolFailed {
                    tool: FINISH_TOOL.to_owned(),
                    call_id: call.id.clone(),
                    error_type: runlog::ToolErrorType::Rejected,
                    error_message: message,
                },
            )
            .await?;
        self.messages.push(Message::tool_result(&call.id, text));
        Ok(())
    }

    /// Rejected work goes back to the model as the `finish_task` result, for a repair.
    async fn repair_rejected(
        &mut self,
        step: u32,
        call: &ToolCall,
        message: String,
    ) -> Result<(), Stop> {
        self.refuse_finish(step, call, message).await?;
        if let Some(g) = self.gate.as_mut() {
            g.begin_repair(
                self.rec,
                step,
                self.model,
                (self.fallback, &self.ctx.lineage.budget),
            )
            .await?;
        }
        self.invalid_streak = 0;
        Ok(())
    }

    /// A tool's result goes to the runlog and back to the model (capped), with the images
    /// it returned when the model reads them (bounded; the runlog names their types only,
    /// ADR-087).
    async fn record_result(
        &mut self,
        step: u32,
        call: &ToolCall,
        key: Option<u64>,
        output: ToolOutput,
    ) -> Result<(), StoreError> {
        let text = truncate(&render_result(&output.result), MAX_TOOL_RESULT_CHARS);
        // What the PostToolUse hooks said goes beside the result (issue #43).
        let mut text = with_note(text, self.hook_note.take());
        let images = match self.model.vision() {
            true => {
                let (shown, refused) = ToolImage::admit(output.images);
                text = with_note(text, refused);
                shown
            }
            false => Vec::new(),
        };
        self.rec
            .record(
                Some(step),
                runlog::ToolResult {
                    tool: call.name.clone(),
                    call_id: call.id.clone(),
                    result: Value::String(text.clone()),
                    images: images.iter().map(|i| i.mime_type.clone()).collect(),
                },
            )
            .await?;
        let text = self.nudge(step, call, key, text).await?;
        self.messages
            .push(Message::tool_result(&call.id, text).with_images(images));
        Ok(())
    }

    /// A call's error goes to the runlog (a refused one as a security event too) and back
    /// to the model, exactly.
    async fn record_error(
        &mut self,
        step: u32,
        call: &ToolCall,
        key: Option<u64>,
        refused: bool,
        error: ToolError,
    ) -> Result<(), StoreError> {
        let message = error.to_string();
        self.rec
            .record(
                Some(step),
                runlog::ToolFailed {
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
            self.rec
                .record(
                    Some(step),
                    runlog::SecurityEvent {
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
            false => self.nudge(step, call, key, text).await?,
        };
        self.messages.push(Message::tool_result(&call.id, text));
        Ok(())
    }

    /// The text a live call's result goes back to the model as: with the repetition
    /// breaker's note when the call just completed a streak (recorded as `loop_detected`).
    async fn nudge(
        &mut self,
        step: u32,
        call: &ToolCall,
        key: Option<u64>,
        text: String,
    ) -> Result<String, StoreError> {
        let note = self
            .repeats
            .after(&call.name, key, &text, &self.catalogue.available);
        if let Some(note) = &note {
            // The parsed arguments went to the tool; read again from the call, only here.
            let args = shown_args(call, &parse_arguments(&call.arguments));
            let count = self.repeats.count();
            record_loop(self.rec, step, call, args, count, "nudged", note).await?;
        }
        Ok(with_note(text, note))
    }
}

/// Records a call the model made, before it runs (or is refused).
async fn record_call(
    rec: Recorder<'_>,
    step: u32,
    call: &ToolCall,
    args: &Result<Value, ArgumentsError>,
) -> Result<(), StoreError> {
    rec.record(
        Some(step),
        runlog::ToolCalled {
            tool: call.name.clone(),
            call_id: call.id.clone(),
            args: shown_args(call, args),
        },
    )
    .await
}

/// A call's arguments as the runlog shows them: parsed, or the raw text (capped).
fn shown_args(call: &ToolCall, args: &Result<Value, ArgumentsError>) -> Value {
    args.clone().unwrap_or_else(|_| {
        Value::String(truncate(&call.arguments, MAX_LLM_CONTENT_IN_RUNLOG_CHARS))
    })
}

/// Records what the repetition breaker did about a call.
async fn record_loop(
    rec: Recorder<'_>,
    step: u32,
    call: &ToolCall,
    args: Value,
    repeats: u32,
    action: &str,
    message: &str,
) -> Result<(), StoreError> {
    rec.record(
        Some(step),
        runlog::LoopDetected {
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

/// A tool result with the repetition breaker's note after it.
fn with_note(text: String, note: Option<String>) -> String {
    match note {
        Some(note) => format!("{text}\n\n{note}"),
        None => text,
    }
}

/// Whether the tool a call names only reads, by its contract (`finish_task` only checks its
/// payload); an unknown tool does not.
fn reads_only(catalogue: &Catalogue<'_>, name: &str) -> bool {
    name == FINISH_TOOL
        || catalogue
            .tool(name)
            .is_some_and(|t| t.spec().annotations.read_only)
}
