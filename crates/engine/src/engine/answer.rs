//! The *answer* move: a step's answer from the runlog (replayed), the member's own model
//! (live) or the cloud model, repaired when the model wrote its calls as text, and paid for;
//! and what the loop does with an answer that calls no tool.

use fabric_domain::{FallbackReason, Message, runlog};
use std::collections::{HashMap, HashSet};

use super::calls::{corrective_message, fallback_payload};
use super::{Loop, MAX_CORRECTIVE_REPROMPTS, ModelParams, Stop};
use crate::fallback::record_fallback;
use crate::ports::ChatResponse;
use crate::recorded::{RecordedOutcome, RecordedStep};

/// A step's answer and where it came from.
pub(super) struct Answer<'a> {
    pub(super) response: ChatResponse,
    pub(super) source: Source<'a>,
}

/// Where an answer came from: what the loop records for it and how its calls settle follow
/// from this, not from flags.
pub(super) enum Source<'a> {
    /// The runlog, recorded before the run's process stopped: its events are written
    /// already, and its calls settle from what was recorded.
    Replayed(Recorded),
    /// The member's own model, asked now.
    Live,
    /// The cloud model, asked now (a fallback, or the repair of rejected work on it).
    Cloud(&'a ModelParams),
}

/// What a replayed step had done with its calls when the process stopped.
pub(super) struct Recorded {
    /// The calls whose `tool_call` was written (they were started).
    pub(super) started: HashSet<String>,
    /// The settled calls, by call id.
    pub(super) outcomes: HashMap<String, RecordedOutcome>,
    /// The tools a repair recovered from the answer's text then, if any: a replayed step is
    /// repaired exactly as it was (or not at all), whatever today's tools and configuration
    /// say.
    repaired_tools: Option<Vec<String>>,
}

impl Answer<'_> {
    fn replayed(&self) -> bool {
        matches!(self.source, Source::Replayed(_))
    }

    /// What its tokens cost: those of the model that gave it.
    fn price(&self, local: &ModelParams) -> Option<crate::budget::Price> {
        match self.source {
            Source::Replayed(_) | Source::Live => local.price(),
            Source::Cloud(model) => model.price(),
        }
    }
}

impl<'a> Loop<'a, '_> {
    /// A recorded answer for `step`, replayed rather than asked for again (its events are in
    /// the runlog), and paid for again in the budget as it was then.
    fn recorded_answer(&mut self, step: u32) -> Option<Answer<'a>> {
        if self.replay.front().is_none_or(|r| r.step != step) {
            return None;
        }
        // A step recorded without its answer (the call was in flight when the process
        // stopped) is taken off too, and asked again.
        let RecordedStep {
            response: Some(response),
            started,
            outcomes,
            replaced_usage,
            repaired_tools,
            ..
        } = self.replay.pop_front()?
        else {
            return None;
        };
        // A local answer a cloud fallback replaced was paid for too.
        self.usage.add(replaced_usage);
        let price = self.model.price();
        self.ctx.lineage.budget.charge(replaced_usage, price);
        Some(Answer {
            response,
            source: Source::Replayed(Recorded {
                started,
                outcomes,
                repaired_tools,
            }),
        })
    }

    /// The step's answer: replayed when recorded, else asked; repaired; counted and paid for;
    /// and asked of the cloud model instead when it calls no tool and the policy says so.
    pub(super) async fn answer(&mut self, step: u32) -> Result<Answer<'a>, Stop> {
        // Taken by a plain function and matched in an `if let`: a recorded step held in this
        // future's locals would stay beside the model call for as long as it takes (0.3 KiB
        // of every run in flight, issue #45).
        let answer = if let Some(answer) = self.recorded_answer(step) {
            answer
        } else {
            // The call was in flight when the process stopped, or never made: ask.
            self.ask_live(step).await?
        };
        let answer = self.repair(step, answer).await?;
        if let Some(u) = answer.response.usage {
            self.usage.add(u);
            self.ctx.lineage.budget.charge(u, answer.price(self.model));
        }
        // Boxed: rare, and the largest state of a model's answer (issue #45).
        Box::pin(self.fall_back_without_calls(step, answer)).await
    }

    /// Asks the member's model, or the cloud model when the step goes to it.
    async fn ask_live(&mut self, step: u32) -> Result<Answer<'a>, Stop> {
        let cloud = match self.fallback {
            // The repair of rejected work runs on the cloud model (`critic_rejected`).
            Some(f) if self.repairing_on_cloud() => Some(f),
            // Invalid arguments twice running: this step goes to the cloud model.
            Some(f)
                if f.policy.malformed_args
                    && self.invalid_streak >= 2
                    && f.take(&self.ctx.lineage.budget) =>
            {
                record_fallback(self.rec, step, FallbackReason::MalformedArgs, self.model, f)
                    .await?;
                self.invalid_streak = 0;
                Some(f)
            }
            _ => None,
        };
        Ok(match cloud {
            Some(f) => Answer {
                response: self.ask(f.chat.as_ref(), &f.model, step).await?,
                source: Source::Cloud(&f.model),
            },
            None => Answer {
                response: self.ask(self.chat, self.model, step).await?,
                source: Source::Live,
            },
        })
    }

    /// A call the server failed to parse, written in the model's own format, is repaired
    /// (deterministically, so a replayed step repairs the same way under the same ids).
    async fn repair(&self, step: u32, answer: Answer<'a>) -> Result<Answer<'a>, Stop> {
        let Some(repaired) = self.repaired_calls(&answer, step) else {
            return Ok(answer);
        };
        if !answer.replayed() {
            self.rec
                .record(
                    Some(step),
                    runlog::ToolCallRepaired {
                        format: repaired.format.as_str().to_owned(),
                        tools: repaired.calls.iter().map(|c| c.name.clone()).collect(),
                        call_ids: repaired.calls.iter().map(|c| c.id.clone()).collect(),
                    },
                )
                .await?;
        }
        let Answer { response, source } = answer;
        Ok(Answer {
            response: ChatResponse {
                content: repaired.rest,
                tool_calls: repaired.calls,
                ..response
            },
            source,
        })
    }

    /// The tool calls a text answer holds, when the model key repairs them (or a replayed
    /// step was repaired) and the answer has no proper call.
    fn repaired_calls(&self, answer: &Answer<'_>, step: u32) -> Option<crate::repair::Repaired> {
        if !answer.response.tool_calls.is_empty() {
            return None;
        }
        let text = answer.response.content.as_deref()?;
        match &answer.source {
            // Replayed: as recorded, against the tools it named then.
            Source::Replayed(recorded) => recorded
                .repaired_tools
                .as_ref()
                .and_then(|tools| crate::repair::repair(text, tools, step)),
            Source::Live | Source::Cloud(_) if self.model.repairs_tool_calls() => {
                crate::repair::repair(text, &self.catalogue.available, step)
            }
            Source::Live | Source::Cloud(_) => None,
        }
    }

    /// No tool call where one is needed: the same step is asked of the cloud model, and its
    /// answer is the step's.
    async fn fall_back_without_calls(
        &mut self,
        step: u32,
        answer: Answer<'a>,
    ) -> Result<Answer<'a>, Stop> {
        let f = match self.fallback {
            Some(f)
                if !answer.replayed()
                    && !self.repairing_on_cloud()
                    && answer.response.tool_calls.is_empty()
                    && f.policy.no_tool_calls
                    && f.take(&self.ctx.lineage.budget) =>
            {
                f
            }
            _ => return Ok(answer),
        };
        record_fallback(self.rec, step, FallbackReason::NoToolCalls, self.model, f).await?;
        let cloud = self.ask(f.chat.as_ref(), &f.model, step).await?;
        if let Some(u) = cloud.usage {
            self.usage.add(u);
            self.ctx.lineage.budget.charge(u, f.model.price());
        }
        Ok(Answer {
            response: cloud,
            source: Source::Cloud(&f.model),
        })
    }

    /// An answer without a tool call: the model is told to use the tools, up to a number of
    /// times in a row; then the loop ends with its text as the payload.
    pub(super) async fn plain_reply(&mut self, step: u32, answer: Answer<'a>) -> Result<(), Stop> {
        let replayed = answer.replayed();
        let text = answer.response.content.unwrap_or_default();
        let finish_schema = &self.specialist.finish_schema;
        // `require_finish`: asked again until it calls finish_task or max_steps runs out.
        let max_retries = if self.specialist.loop_aids.require_finish {
            self.max_steps
        } else {
            MAX_CORRECTIVE_REPROMPTS
        };
        if self.plain_replies >= max_retries {
            let payload = fallback_payload(finish_schema, &text);
            // Said plainly when nothing was done, so nobody takes it for a success (#24).
            let reason = if self.attempted_work {
                "the model answered in plain text instead of calling finish_task; the payload was built from its reply"
            } else {
                "the model answered in plain text and never called a tool or finish_task, so nothing was done; the payload is its reply (give the specialist `require_finish: true` to keep asking for finish_task)"
            };
            return Err(Stop::Unfinished(payload, reason));
        }
        self.plain_replies += 1;
        if !replayed {
            self.rec
                .record(
                    Some(step),
                    runlog::CorrectiveReprompt {
                        reason: "plain_text_response".to_owned(),
                        attempt: self.plain_replies,
                        max_retries,
                    },
                )
                .await?;
        }
        self.messages
            .push(Message::assistant(Some(text), Vec::new()));
        let corrective = corrective_message(&self.catalogue.available, finish_schema);
        self.messages.push(Message::user(corrective));
        Ok(())
    }

    /// Whether the member is repairing rejected work on the cloud model.
    pub(super) fn repairing_on_cloud(&self) -> bool {
        self.gate.as_ref().is_some_and(|g| g.repair_on_cloud)
    }
}
