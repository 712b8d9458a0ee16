//! Lifecycle hooks in the loop (issue #43, docs/HOOKS.md): where each event fires and what
//! its verdict does. Each fire is recorded (`hook_run`, one per hook) before it is acted on;
//! the verdict is read from those records alone, so a replay handed the recorded runs acts
//! the same without running anything.

use fabric_domain::hooks::{HookEvent, HookInput, HookVerdict, Permission};
use fabric_domain::runlog::InputRequired;
use fabric_domain::{ApprovalAsk, Message, RunStatus, ToolCall};
use serde_json::Value;

use super::{Loop, Stop};
use crate::ports::ToolError;

/// What the PreToolUse hooks decided about a call.
pub(super) enum Gate {
    /// It does not run: the model gets this error.
    Refused(ToolError),
    /// It runs with these arguments, after this approval when one is asked.
    Run(Value, Option<InputRequired>),
}

impl Loop<'_, '_> {
    /// The input of `event` in this run, with no event fields yet.
    fn hook_input(&self, event: HookEvent) -> HookInput {
        let cwd = self.ctx.workspace.display().to_string();
        HookInput::new(event, self.ctx.run_id.as_str(), &cwd)
    }

    /// Fires `input`'s event: the hooks that apply run, each run is recorded, and their
    /// verdict comes back (empty when no hook applies). A hook's `continue: false` ends the
    /// run here (ADR-125), before anything else it decided is acted on; after a PostToolUse,
    /// once the call's result is recorded.
    async fn fire(&mut self, step: Option<u32>, input: HookInput) -> Result<HookVerdict, Stop> {
        let Some(hooks) = self.hooks else {
            return Ok(HookVerdict::default());
        };
        if !hooks.wants(input.hook_event_name, input.target()) {
            return Ok(HookVerdict::default());
        }
        let runs = tokio::select! {
            biased;
            () = self.ctx.cancel.cancelled() => {
                return Err(Stop::Ended(RunStatus::Cancelled, "the run was cancelled".into()));
            }
            runs = hooks.fire(&input) => runs,
        };
        for run in &runs {
            self.rec.record(step, run.clone()).await?;
        }
        let verdict = HookVerdict::of(&runs);
        if verdict.stopped {
            let event = input.hook_event_name;
            let reason = format!(
                "a {} hook stopped the run (`continue: false`); its `stopReason`, for the user and not the model, is on its `hook_run` line",
                event.as_str()
            );
            match event {
                HookEvent::PostToolUse => self.hook_stop = Some(reason),
                _ => return Err(Stop::Ended(RunStatus::Cancelled, reason)),
            }
        }
        Ok(verdict)
    }

    /// Whether this loop is a delegated child's (or a critic's): it fires `SubagentStop`
    /// where a run a person started fires `Stop`, and no session or prompt events.
    fn is_subagent(&self) -> bool {
        self.ctx.lineage.depth > 0 || self.reviewing
    }

    /// The loop's start: `SessionStart` (its context after the system prompt, so the
    /// prompt's prefix stays byte-stable), then `UserPromptSubmit` for the task (its context
    /// after the task; a block ends the run before the model is asked). A resumed loop
    /// (`source: resume`) is given the context its start's hooks gave before the stop, as
    /// recorded, and does not submit its task again (ADR-125).
    pub(super) async fn session_start(&mut self) -> Result<(), Stop> {
        if self.is_subagent() {
            return Ok(());
        }
        let resumed = !self.replay.is_empty();
        let at = match resumed {
            true => self.restore_start_context(),
            false => self.after_system_prompt(),
        };
        let mut input = self.hook_input(HookEvent::SessionStart);
        input.source = Some(if resumed { "resume" } else { "startup" }.to_owned());
        if let Some(context) = self.fire(None, input).await?.context_text() {
            self.messages.insert(
                at,
                Message::user(hook_context(HookEvent::SessionStart, &context)),
            );
        }
        if resumed {
            return Ok(());
        }
        let prompt = self
            .messages
            .iter()
            .rev()
            .find(|m| m.role == fabric_domain::Role::User)
            .and_then(|m| m.content.clone())
            .map(String::from)
            .unwrap_or_default();
        match self.prompt_submitted(None, prompt).await? {
            None => Ok(()),
            Some(reason) => Err(Stop::Ended(
                RunStatus::Failed,
                format!("a UserPromptSubmit hook blocked the task: {reason}"),
            )),
        }
    }

    /// A resumed loop's conversation gets back what its start's hooks gave the model before
    /// the stop, where it was: each `SessionStart` context after the system prompt, the
    /// task's `UserPromptSubmit` context after the task. Returns where this start's own
    /// `SessionStart` context goes: after the recorded ones.
    fn restore_start_context(&mut self) -> usize {
        let recorded = std::mem::take(&mut self.start_hooks);
        let mut at = self.after_system_prompt();
        for context in recorded.contexts(HookEvent::SessionStart) {
            let message = Message::user(hook_context(HookEvent::SessionStart, &context));
            self.messages.insert(at, message);
            at += 1;
        }
        // The task is submitted once, by the loop run that started it.
        if let Some(context) = recorded.contexts(HookEvent::UserPromptSubmit).first() {
            let message = Message::user(hook_context(HookEvent::UserPromptSubmit, context));
            self.messages.push(message);
        }
        at
    }

    /// Where the first message after the system prompt goes.
    fn after_system_prompt(&self) -> usize {
        usize::from(
            self.messages
                .first()
                .is_some_and(|m| m.role == fabric_domain::Role::System),
        )
    }

    /// `UserPromptSubmit` for `prompt` (the task, or a message said to the run): the hooks'
    /// reason when they block it; their context goes to the model after it.
    pub(super) async fn prompt_submitted(
        &mut self,
        step: Option<u32>,
        prompt: String,
    ) -> Result<Option<String>, Stop> {
        if self.is_subagent() {
            return Ok(None);
        }
        let mut input = self.hook_input(HookEvent::UserPromptSubmit);
        input.prompt = Some(prompt);
        let verdict = self.fire(step, input).await?;
        if verdict.blocked.is_some() {
            return Ok(verdict.blocked);
        }
        if let Some(context) = verdict.context_text() {
            self.messages.push(Message::user(hook_context(
                HookEvent::UserPromptSubmit,
                &context,
            )));
        }
        Ok(None)
    }

    /// `PreToolUse` for a call about to run with `args`: denied (exit 2 or `deny`), asked
    /// (`ask`: through the approval path), allowed (`allow`: the specialist's policy does not
    /// ask; the allowlist and the sandbox still hold), or rewritten (`updatedInput`: the
    /// new arguments, checked against the tool's schema again when dispatched).
    pub(super) async fn pre_tool_use(
        &mut self,
        step: u32,
        call: &ToolCall,
        args: Value,
    ) -> Result<Gate, Stop> {
        let verdict = match call.name == fabric_domain::FINISH_TOOL {
            true => HookVerdict::default(),
            false => {
                let mut input = self.hook_input(HookEvent::PreToolUse);
                input.tool_name = Some(call.name.clone());
                input.tool_input = Some(args.clone());
                input.tool_use_id = Some(call.id.clone());
                self.fire(Some(step), input).await?
            }
        };
        if let Some(reason) = verdict.blocked {
            return Ok(Gate::Refused(hook_denied(call, &reason)));
        }
        let args = verdict.updated_input.unwrap_or(args);
        let approval = match verdict.permission {
            Some((Permission::Deny, reason)) => {
                let reason = reason.unwrap_or_default();
                return Ok(Gate::Refused(hook_denied(call, &reason)));
            }
            Some((Permission::Allow, _)) => None,
            Some((Permission::Ask, reason)) => self.hook_approval(call, &args, reason),
            None => self.approval_needed(call, &args),
        };
        Ok(Gate::Run(args, approval))
    }

    /// The approval a PreToolUse hook's `ask` wants, through the approval path of issue #42.
    fn hook_approval(
        &mut self,
        call: &ToolCall,
        args: &Value,
        reason: Option<String>,
    ) -> Option<InputRequired> {
        let reason = match reason.filter(|r| !r.trim().is_empty()) {
            Some(reason) => format!("a PreToolUse hook asks first: {reason}"),
            None => "a PreToolUse hook asks first".to_owned(),
        };
        let ask = ApprovalAsk {
            reason,
            scope: format!("hook:{}", call.name),
        };
        self.approval_request(call, args, ask)
    }

    /// `PostToolUse` after a call returned `result`: the hooks' reason (`decision: block`,
    /// exit 2) and context go to the model beside the result.
    pub(super) async fn post_tool_use(
        &mut self,
        step: u32,
        call: &ToolCall,
        args: &Value,
        result: &Value,
    ) -> Result<(), Stop> {
        if call.name == fabric_domain::FINISH_TOOL {
            return Ok(());
        }
        let mut input = self.hook_input(HookEvent::PostToolUse);
        input.tool_name = Some(call.name.clone());
        input.tool_input = Some(args.clone());
        input.tool_use_id = Some(call.id.clone());
        input.tool_response = Some(result.clone());
        let verdict = self.fire(Some(step), input).await?;
        let said: Vec<String> = verdict.blocked.into_iter().chain(verdict.context).collect();
        if !said.is_empty() {
            self.hook_note = Some(hook_context(HookEvent::PostToolUse, &said.join("\n")));
        }
        Ok(())
    }

    /// `Stop` (`SubagentStop` in a child run) when the model calls `finish_task`: the
    /// hooks' reason when they keep the run going (`decision: block`, exit 2). The run's
    /// step budget still bounds how long they can.
    pub(super) async fn stop_blocked(&mut self, step: u32) -> Result<Option<String>, Stop> {
        let event = match self.ctx.lineage.depth > 0 {
            true => HookEvent::SubagentStop,
            false => HookEvent::Stop,
        };
        let mut input = self.hook_input(event);
        input.stop_hook_active = Some(self.stop_hook_active);
        let blocked = self.fire(Some(step), input).await?.blocked;
        self.stop_hook_active |= blocked.is_some();
        Ok(blocked)
    }

    /// `PreCompact` before the conversation is compacted to fit the window (its answer is
    /// recorded; it cannot stop the compaction).
    pub(super) async fn pre_compact(&mut self, step: u32) -> Result<(), Stop> {
        let mut input = self.hook_input(HookEvent::PreCompact);
        input.trigger = Some("auto".to_owned());
        input.custom_instructions = Some(String::new());
        self.fire(Some(step), input).await.map(|_| ())
    }

    /// `SessionEnd` when the loop ended with `status` (its answer is recorded only).
    pub(super) async fn session_end(&mut self, status: RunStatus) -> Result<(), Stop> {
        if self.is_subagent() {
            return Ok(());
        }
        let mut input = self.hook_input(HookEvent::SessionEnd);
        input.reason = Some(status.to_string());
        self.fire(None, input).await.map(|_| ())
    }
}

/// Text hooks give the model, said to come from them.
fn hook_context(event: HookEvent, text: &str) -> String {
    format!("[{} hook] {text}", event.as_str())
}

/// The error the model gets for a call a PreToolUse hook refused, with its reason.
fn hook_denied(call: &ToolCall, reason: &str) -> ToolError {
    let reason = match reason.trim() {
        "" => "no reason given",
        reason => reason,
    };
    ToolError::Denied {
        event_type: "hook_denied".to_owned(),
        attempted: call.name.clone(),
        message: format!(
            "a PreToolUse hook refused this call of `{}`: {reason}. Do not call it again as it was; change your approach",
            call.name
        ),
    }
}
