//! Working with a person (issue #42): what was said to the run comes in at each step
//! boundary (steering), a call whose answer is a person's (`ask_user`) or that waits for
//! approval asks them, and a run whose answer comes later stops `input_required`, its
//! request in the runlog, holding no process until the answer continues it.

use fabric_domain::runlog::{Decision, InputAnswered, InputKind, InputRequired};
use fabric_domain::{ApprovalAsk, Message, RunStatus, ToolCall};
use serde_json::{Value, json};

use super::{Loop, Stop};
use crate::ports::{Reply, ToolError};

/// What a person's answer to a call came to.
pub(super) enum Consulted {
    /// The call's result: a question's answer.
    Answer(Value),
    /// An approval: run the call.
    Approved,
    /// The call does not run: the model is told this.
    Refused(ToolError),
}

impl Loop<'_, '_> {
    /// What was said to the run before this step: recorded `user_message`s of a replayed
    /// step as they were, new ones (taken from the person) recorded now; each goes to the
    /// model as a user message before it is asked.
    pub(super) async fn hear(&mut self, step: u32) -> Result<(), Stop> {
        let replayed = match self.replay.front_mut() {
            Some(r) if r.step == step => Some((std::mem::take(&mut r.said), r.response.is_some())),
            _ => None,
        };
        let live = match replayed {
            Some((said, answered)) => {
                for text in said {
                    self.messages.push(Message::user(text));
                }
                // A step whose answer was recorded heard everything it was going to.
                !answered
            }
            None => true,
        };
        let Some(person) = self.person.filter(|_| live) else {
            return Ok(());
        };
        for message in person.said().await {
            // A message a UserPromptSubmit hook blocks is neither given to the model nor
            // recorded as said; its `hook_run` says why.
            let at = self.messages.len();
            if self
                .prompt_submitted(Some(step), message.text.clone())
                .await?
                .is_some()
            {
                continue;
            }
            self.messages
                .insert(at, Message::user(message.text.clone()));
            self.rec.record(Some(step), message).await?;
        }
        Ok(())
    }

    /// Asks the person `request` about `call` and records the answer; a [`Stop`] when the
    /// run waits for it (`input_required`) or must end without it.
    pub(super) async fn consult(
        &mut self,
        step: u32,
        call: &ToolCall,
        request: InputRequired,
    ) -> Result<Consulted, Stop> {
        let answered = match self.answered.remove(&call.id) {
            // Answered before the process stopped (approvals only: a question's answer is
            // its recorded result): not asked again.
            Some(answer) => answer,
            None => match self.ask_person(step, &request).await? {
                Ok(answer) => answer,
                Err(refused) => return Ok(Consulted::Refused(refused)),
            },
        };
        if request.input == InputKind::Question {
            return Ok(Consulted::Answer(json!({"answer": answered.answer})));
        }
        Ok(match answered.decision {
            Some(Decision::Approve) => Consulted::Approved,
            Some(Decision::ApproveForRun) => {
                if let Some(scope) = self.scopes.remove(&call.id) {
                    self.approved.insert(scope);
                }
                Consulted::Approved
            }
            Some(Decision::Deny) | None => Consulted::Refused(denied(call, &answered.answer)),
        })
    }

    /// Asks and records: the answer, or the tool error the model gets when no one can
    /// answer; a [`Stop`] when the run waits or ends.
    async fn ask_person(
        &mut self,
        step: u32,
        request: &InputRequired,
    ) -> Result<Result<InputAnswered, ToolError>, Stop> {
        let Some(person) = self.person else {
            return Ok(Err(ToolError::Failed(unattended(
                request,
                "it has no channel to a person",
            ))));
        };
        let reply = tokio::select! {
            biased;
            () = self.ctx.cancel.cancelled() => {
                return Err(Stop::Ended(RunStatus::Cancelled, "the run was cancelled".into()));
            }
            reply = person.ask(request) => reply,
        };
        match reply {
            Reply::Answered(mut answer) => {
                answer.call_id.clone_from(&request.call_id);
                self.rec.record(Some(step), answer.clone()).await?;
                Ok(Ok(answer))
            }
            Reply::Unavailable(why) => Ok(Err(ToolError::Failed(unattended(request, &why)))),
            Reply::Fail(reason) => Err(Stop::Ended(RunStatus::Unanswered, reason)),
            Reply::Wait { expires_at } => {
                if !self.asked.contains(&request.call_id) {
                    let mut recorded = request.clone();
                    recorded.expires_at = expires_at;
                    self.rec.record(Some(step), recorded).await?;
                }
                Err(Stop::Waiting(request.question.clone()))
            }
        }
    }

    /// Whether `call` waits for approval before it runs, by the specialist's policy: the
    /// request to ask, unless an earlier approval for the run covers it.
    pub(super) fn approval_needed(
        &mut self,
        call: &ToolCall,
        args: &Value,
    ) -> Option<InputRequired> {
        // `finish_task` and an unknown tool run nothing a person could approve.
        let read_only = self
            .catalogue
            .tool(&call.name)?
            .spec()
            .annotations
            .read_only;
        let ask = self.specialist.approval.asks(&call.name, args, read_only)?;
        self.approval_request(call, args, ask)
    }

    /// The approval to ask for a call the allowlist `refused`, when the specialist's mode is
    /// `on_request`: only the allowlist's refusals (`command_not_allowed`) are asked about;
    /// what the sandbox or the paths refuse stays refused.
    pub(super) fn refusal_approval(
        &mut self,
        call: &ToolCall,
        args: &Value,
        refused: &ToolError,
    ) -> Option<InputRequired> {
        let ToolError::Denied {
            event_type,
            message,
            ..
        } = refused
        else {
            return None;
        };
        if event_type != "command_not_allowed" {
            return None;
        }
        let mut ask = self.specialist.approval.asks_on_refusal(&call.name, args)?;
        ask.reason = format!("{} ({message})", ask.reason);
        self.approval_request(call, args, ask)
    }

    pub(super) fn approval_request(
        &mut self,
        call: &ToolCall,
        args: &Value,
        ask: ApprovalAsk,
    ) -> Option<InputRequired> {
        if self.approved.contains(&ask.scope) {
            return None;
        }
        // What an approve-for-run answer covers, kept until the call is answered.
        self.scopes.insert(call.id.clone(), ask.scope);
        Some(InputRequired {
            call_id: call.id.clone(),
            input: InputKind::Approval,
            question: format!("May `{}` run? {}", call.name, ask.reason),
            choices: vec![
                Decision::Approve.as_str().to_owned(),
                Decision::ApproveForRun.as_str().to_owned(),
                Decision::Deny.as_str().to_owned(),
            ],
            tool: Some(call.name.clone()),
            arguments: Some(args.clone()),
            expires_at: None,
        })
    }

    /// A replayed call a person approved for the run: later calls it covers run without
    /// asking, as they did before the stop.
    pub(super) fn replay_approval(&mut self, call: &ToolCall, args: &Value) {
        let approved_for_run = self
            .answered
            .get(&call.id)
            .is_some_and(|a| a.decision == Some(Decision::ApproveForRun));
        if !approved_for_run {
            return;
        }
        self.answered.remove(&call.id);
        let policy = &self.specialist.approval;
        let read_only = self
            .catalogue
            .tool(&call.name)
            .is_some_and(|t| t.spec().annotations.read_only);
        let ask = policy
            .asks(&call.name, args, read_only)
            .or_else(|| policy.asks_on_refusal(&call.name, args));
        if let Some(ask) = ask {
            self.approved.insert(ask.scope);
        }
    }
}

/// What the model is told when no one can answer: `why` says why (the channel's words).
fn unattended(request: &InputRequired, why: &str) -> String {
    match request.input {
        InputKind::Question => format!(
            "no one can answer questions in this run ({why}). Decide yourself, and say in your result what you assumed"
        ),
        InputKind::Approval => format!(
            "this call of `{}` needs a person's approval, and no one can approve in this run ({why}); do without it, or finish and say what you could not do",
            request.tool.as_deref().unwrap_or("the tool")
        ),
    }
}

/// The error the model gets for a call a person denied, with their reason.
fn denied(call: &ToolCall, reason: &str) -> ToolError {
    let reason = reason.trim();
    let why = if reason.is_empty() {
        "no reason given".to_owned()
    } else {
        reason.to_owned()
    };
    ToolError::Denied {
        event_type: "approval_denied".to_owned(),
        attempted: call.name.clone(),
        message: format!(
            "a person denied this call of `{}`: {why}. Do not call it again as it was; change your approach",
            call.name
        ),
    }
}
