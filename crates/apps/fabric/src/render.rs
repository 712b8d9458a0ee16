//! How a run looks: step by step for a person on stderr, or JSON lines for a program.

use async_trait::async_trait;
use console::{Style, Term};
use fabric_core::{ChatObserver, RunObserver};
use fabric_domain::{
    EventPayload, LiveToolOutput, OutputChunk, OutputStream, RunEvent, UtcTime, runlog,
    visible_line, visible_text,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `2026-11-22 04:30:12` for a Unix time in seconds.
pub(crate) fn timestamp(ts: f64) -> String {
    UtcTime::from_unix(ts.max(0.0) as u64).to_string()
}

/// `text` on one line, cut to `max` characters: newlines and tabs become spaces, every
/// other control character is shown as an escape (`fabric_domain::visible_line`).
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let flat = visible_line(&text.replace(['\n', '\t'], " ")).into_owned();
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

/// Where a renderer's lines go instead of stderr: a line editor's printer, which keeps its
/// prompt below them (`fabric chat`, ADR-107).
pub(crate) type LineSink = Box<dyn Fn(String) + Send + Sync>;

/// Shows a person what the agent does, on stderr: each model call with a spinner while the
/// model thinks, each tool call and its outcome, and the end.
pub(crate) struct HumanRenderer {
    term: Term,
    /// Lines go here, not to stderr, and no spinner is drawn (`fabric chat`).
    sink: Option<LineSink>,
    spinner: Mutex<Option<ProgressBar>>,
    /// Set once text was streamed for the current response, so it ends with a newline.
    streaming_text: AtomicBool,
    dim: Style,
    ok: Style,
    bad: Style,
    warn: Style,
    accent: Style,
}

impl HumanRenderer {
    pub(crate) fn new() -> Self {
        let colors = console::colors_enabled_stderr() && std::env::var_os("NO_COLOR").is_none();
        let style = |s: Style| s.force_styling(colors);
        Self {
            term: Term::stderr(),
            sink: None,
            spinner: Mutex::new(None),
            streaming_text: AtomicBool::new(false),
            dim: style(Style::new().dim()),
            ok: style(Style::new().green()),
            bad: style(Style::new().red()),
            warn: style(Style::new().yellow()),
            accent: style(Style::new().cyan().bold()),
        }
    }

    /// The same lines, printed by `sink` (and no spinner, which would draw over its prompt).
    pub(crate) fn printing_to(sink: LineSink) -> Self {
        Self {
            sink: Some(sink),
            ..Self::new()
        }
    }

    fn line(&self, text: String) {
        self.stop_spinner();
        match &self.sink {
            Some(sink) => sink(text),
            None => {
                let _ = self.term.write_line(&text);
            }
        }
    }

    fn start_spinner(&self, message: String) {
        if self.sink.is_some() {
            return;
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message(message);
        bar.enable_steady_tick(Duration::from_millis(100));
        if let Ok(mut slot) = self.spinner.lock() {
            *slot = Some(bar);
        }
    }

    fn stop_spinner(&self) {
        if let Ok(mut slot) = self.spinner.lock()
            && let Some(bar) = slot.take()
        {
            bar.finish_and_clear();
        }
    }
}

impl ChatObserver for HumanRenderer {
    fn on_text_delta(&self, delta: &str) {
        if let Some(sink) = &self.sink {
            // Each piece on a line of its own (`fabric chat` does not stream).
            return sink(visible_text(delta).into_owned());
        }
        if !self.streaming_text.swap(true, Ordering::Relaxed) {
            self.stop_spinner();
        }
        // Model text is untrusted: escape sequences could rewrite the terminal (OSC 52 can
        // even reach the clipboard), so control characters other than newline and tab are
        // shown as escapes, never obeyed (the one rule, ADR-089).
        let clean = visible_text(delta);
        let _ = (&self.term).write_all(clean.as_bytes());
        let _ = self.term.flush();
    }
}

#[async_trait]
impl RunObserver for HumanRenderer {
    fn on_prepared(&self, notes: &[String]) {
        for note in notes {
            self.line(visible_line(note).into_owned());
        }
    }

    fn on_notice(&self, notice: &str) {
        self.line(format!(
            "{} {}",
            self.warn.apply_to("⚠"),
            visible_line(notice)
        ));
    }

    /// A running command's line under its call (issue #42): `  │ line` (stderr's in the
    /// warning colour), and `  │ … N lines not shown` for what the rate left out.
    fn on_tool_output(&self, output: &LiveToolOutput) {
        let text = match &output.chunk {
            OutputChunk::Line { stream, line } => {
                let line = visible_line(line);
                match stream {
                    OutputStream::Stdout => self.dim.apply_to(line).to_string(),
                    OutputStream::Stderr => self.warn.apply_to(line).to_string(),
                }
            }
            OutputChunk::Dropped { dropped } => self
                .dim
                .apply_to(format!(
                    "… {dropped} lines not shown (live output is rate-limited)"
                ))
                .to_string(),
        };
        self.line(format!("  {} {text}", self.dim.apply_to("│")));
    }

    async fn on_event(&self, event: &RunEvent) {
        use EventPayload as P;
        // A payload that does not fit its struct (`Unreadable`) prints nothing.
        match &event.payload {
            P::RunStart(p) => self.run_start(p),
            P::RunResumed(p) => self.line(format!(
                "{} run {} resumed · {} recorded model answers replayed, not asked again",
                self.accent.apply_to("fabric"),
                p.run_id,
                p.replayed_steps
            )),
            P::Recruitment(p) => self.line(format!(
                "{} specialist {} ({})",
                self.dim.apply_to("·"),
                self.accent
                    .apply_to(visible_line(&p.specialist_ids.join(", "))),
                p.routing_method
            )),
            P::LlmRequest(_) | P::RoutingRequest(_) => {
                let step = event.step.map(|s| s + 1).unwrap_or_default();
                self.streaming_text.store(false, Ordering::Relaxed);
                self.start_spinner(format!("step {step}: thinking"));
            }
            P::LlmResponse(p) => self.answer(p.content.as_deref(), p.tool_calls.is_empty()),
            P::RoutingResponse(p) => self.answer(p.content.as_deref(), p.tool_calls.is_empty()),
            P::ToolCall(p) => self.tool_call(p),
            P::ToolResult(p) => self.tool_result(p),
            P::ToolError(p) => self.line(format!(
                "  {} {}",
                self.bad.apply_to("✗"),
                one_line(&p.error_message, 200)
            )),
            P::SecurityEvent(p) => self.line(format!(
                "  {} refused ({}): {}",
                self.bad.apply_to("⛔"),
                p.event_type,
                one_line(&p.attempted, 120)
            )),
            P::CloudFallback(p) => self.line(format!(
                "  {} {} did not manage ({}); asking {}",
                self.dim.apply_to("↑"),
                visible_line(&p.local_model),
                p.reason,
                visible_line(&p.cloud_model)
            )),
            P::CriticReview(p) => self.critic_review(p),
            P::RepairRound(p) => self.line(format!(
                "  {} repairing for review {} of {} on {}",
                self.dim.apply_to("↺"),
                p.round,
                p.max_rounds,
                visible_line(&p.model_key)
            )),
            P::ContextCompacted(p) => self.context_compacted(p),
            P::ToolCallRepaired(p) => self.line(format!(
                "  {} the server returned the model's call of {} as text ({}); repaired",
                self.dim.apply_to("⚙"),
                visible_line(&p.tools.join(", ")),
                visible_line(&p.format)
            )),
            P::LoopDetected(p) => self.loop_detected(p),
            P::CorrectiveReprompt(_) => self.line(format!(
                "  {} the model answered in text; asking it to use its tools",
                self.dim.apply_to("↺")
            )),
            P::RunComplete(p) => self.run_complete(p),
            P::RunFailed(p) => self.run_failed(p.status, p.reason.as_deref()),
            P::RunAborted(p) => self.run_failed(p.status, Some(&p.reason)),
            P::McpServer(p) => self.mcp_server(p),
            P::McpMessage(p) => self.mcp_message(p),
            P::McpRequest(p) => self.mcp_request(p),
            P::Workspace(p) => self.workspace(p),
            P::Checkpoint(p) => self.checkpoint(p),
            P::InputRequired(p) => self.input_required(p),
            P::InputAnswered(p) => self.input_answered(p),
            P::UserMessage(p) => self.user_message(p),
            P::HookRun(p) => self.hook_run(p),
            P::MemberStart(_)
            | P::MemberEnd(_)
            | P::TaskForceParallel(_)
            | P::Unknown { .. }
            | P::Unreadable { .. } => {}
        }
        // A versioned workspace's changes, after the end (not after an end without
        // `finish_task`, whose warning says enough).
        if let Some(end) = event.run_end()
            && end.status != fabric_domain::RunStatus::CompletedWithoutFinish
            && let Some(changes) = &end.workspace
        {
            self.changes(&end.run_id, changes);
        }
    }
}

impl HumanRenderer {
    /// A call the model made, before it runs.
    fn tool_call(&self, p: &fabric_domain::runlog::ToolCalled) {
        self.line(format!(
            "{} {} {}",
            self.accent.apply_to("→"),
            visible_line(&p.tool),
            self.dim.apply_to(one_line(&p.args.to_string(), 120))
        ));
    }

    /// A person's answer to the run's question or approval.
    fn input_answered(&self, p: &fabric_domain::runlog::InputAnswered) {
        self.line(format!(
            "  {} answered ({}): {}",
            self.accent.apply_to("✎"),
            visible_line(&p.by),
            one_line(&p.answer, 200)
        ));
    }

    /// What a person said to the run while it worked.
    fn user_message(&self, p: &fabric_domain::runlog::UserMessage) {
        self.line(format!(
            "{} you ({}): {}",
            self.accent.apply_to("›"),
            visible_line(&p.by),
            one_line(&p.text, 200)
        ));
    }

    /// A lifecycle hook ran (issue #43): its event, command, outcome and what it said (a
    /// `continue: false`'s `stopReason`), then its `systemMessage`, for the user (ADR-125).
    fn hook_run(&self, p: &fabric_domain::runlog::HookRun) {
        let said = p
            .message
            .as_deref()
            .or(p.stop_reason.as_deref())
            .or(p.detail.as_deref())
            .map(|m| format!(": {}", one_line(m, 200)))
            .unwrap_or_default();
        self.line(format!(
            "  {} hook {} `{}` {} in {} ms{said}",
            self.accent.apply_to("⚓"),
            visible_line(&p.event),
            one_line(&p.command, 80),
            visible_line(p.outcome.as_str()),
            p.duration_ms
        ));
        if let Some(warning) = &p.system_message {
            self.line(format!(
                "    {} {}",
                self.warn.apply_to("⚠"),
                one_line(warning, 400)
            ));
        }
    }

    /// A question or approval the run waits for, with how to answer it.
    fn input_required(&self, p: &fabric_domain::runlog::InputRequired) {
        self.stop_spinner();
        let what = match p.input {
            fabric_domain::runlog::InputKind::Question => "question",
            fabric_domain::runlog::InputKind::Approval => "approval",
        };
        self.line(format!(
            "  {} {what}: {}",
            self.warn.apply_to("?"),
            one_line(&p.question, 400)
        ));
        if !p.choices.is_empty() {
            self.line(format!(
                "    {} {}",
                self.dim.apply_to("choices:"),
                visible_line(&p.choices.join(" | "))
            ));
        }
    }

    /// A model's answer: its text, when it called no tool.
    fn answer(&self, content: Option<&str>, no_calls: bool) {
        if self.streaming_text.swap(false, Ordering::Relaxed) {
            let _ = self.term.write_line("");
        }
        self.stop_spinner();
        let content = content.unwrap_or_default();
        if !content.trim().is_empty() && no_calls {
            self.line(format!(
                "  {} {}",
                self.dim.apply_to("model:"),
                one_line(content, 200)
            ));
        }
    }

    fn tool_result(&self, p: &runlog::ToolResult) {
        if p.tool != fabric_domain::FINISH_TOOL {
            self.line(format!(
                "  {} {}",
                self.ok.apply_to("✓"),
                self.dim.apply_to(one_line(&text(&p.result), 120))
            ));
        }
    }

    fn context_compacted(&self, p: &runlog::ContextCompacted) {
        self.line(format!(
            "  {} context compacted to fit {} tokens: about {} → {} ({} results shortened, {} messages left out)",
            self.dim.apply_to("⇣"),
            p.window,
            p.tokens_before,
            p.tokens_after,
            p.shortened_results,
            p.dropped_messages
        ));
    }

    fn loop_detected(&self, p: &runlog::LoopDetected) {
        self.line(format!(
            "  {} `{}` repeated {} times with the same result; {}",
            self.warn.apply_to("↻"),
            visible_line(&p.tool),
            p.repeats,
            match p.action.as_str() {
                "nudged" => "telling the model",
                "refused" => "refused",
                _ => "stopping",
            }
        ));
    }

    fn run_complete(&self, p: &runlog::RunEnd) {
        // Not a green tick: the model never said it was done (issue #24).
        if p.status == fabric_domain::RunStatus::CompletedWithoutFinish {
            self.line(format!(
                "{} ended in {} steps without finish_task: {}",
                self.warn.apply_to("⚠"),
                p.steps,
                visible_line(p.reason.as_deref().unwrap_or_default())
            ));
            return;
        }
        self.line(format!(
            "{} {} in {} steps",
            self.ok.apply_to("✔"),
            p.status,
            p.steps
        ));
    }

    fn run_failed(&self, status: fabric_domain::RunStatus, reason: Option<&str>) {
        self.line(format!(
            "{} {}: {}",
            self.bad.apply_to("✘"),
            status,
            visible_line(reason.unwrap_or_default())
        ));
    }
}

impl HumanRenderer {
    /// A critic's verdict, or its failure: a critic whose run did not complete gave no
    /// verdict, and is shown so, not as a rejection (issue #40).
    fn critic_review(&self, p: &runlog::CriticReview) {
        let round = format!("review {} of {}", p.round, p.max_rounds);
        if let Some(status) = p.critic_status {
            self.line(format!(
                "  {} critic {} {} ({round}): its run ended {status}{}; no verdict",
                self.accent.apply_to("⚖"),
                visible_line(&p.critic),
                self.bad.apply_to("failed"),
                p.critic_reason
                    .as_deref()
                    .map(|r| format!(" ({})", one_line(r, 160)))
                    .unwrap_or_default()
            ));
            return;
        }
        let verdict = match p.approved {
            true => self.ok.apply_to("approved").to_string(),
            false => self.bad.apply_to("rejected").to_string(),
        };
        self.line(format!(
            "  {} critic {} {verdict} ({round}, {} file(s), {} finding(s){})",
            self.accent.apply_to("⚖"),
            visible_line(&p.critic),
            p.files.len(),
            p.findings.len(),
            match p.approved {
                true => format!(", {} applied", p.applied.len()),
                false => String::new(),
            }
        ));
        for f in p.findings.iter().take(5) {
            self.line(format!(
                "    {} {}{}",
                self.dim.apply_to(visible_line(&f.severity)),
                f.file
                    .as_deref()
                    .map(|f| format!("{}: ", visible_line(f)))
                    .unwrap_or_default(),
                one_line(&f.reason, 160)
            ));
        }
    }

    /// The run's first line, and its instruction files under it.
    fn run_start(&self, p: &runlog::RunStart) {
        self.line(format!(
            "{} run {} · model {} · workspace {}",
            self.accent.apply_to("fabric"),
            p.run_id,
            visible_line(&p.model),
            visible_line(&p.workspace.display().to_string())
        ));
        self.instructions(&p.instructions);
    }

    /// The project's instruction files the run was given (issue #43), and those that did not
    /// fit; nothing when there were none.
    fn instructions(&self, files: &[fabric_domain::InstructionFile]) {
        if files.is_empty() {
            return;
        }
        let shown = |included: bool| {
            files
                .iter()
                .filter(|f| f.included == included)
                .map(|f| visible_line(&f.path).into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (taken, left) = (shown(true), shown(false));
        let mut line = format!("{} instructions {taken}", self.dim.apply_to("·"));
        if !left.is_empty() {
            line.push_str(&format!(" (left out, over the budget: {left})"));
        }
        self.line(line);
    }

    fn workspace(&self, p: &runlog::WorkspaceOpened) {
        let base = p.base.get(..12).unwrap_or(&p.base);
        let what = match (&p.repo, &p.restored_to) {
            (_, Some(to)) => format!(
                "workspace restored to checkpoint {}",
                visible_line(to.get(..12).unwrap_or(to))
            ),
            (Some(repo), None) => format!(
                "worktree of {} on branch {} from {}",
                visible_line(&repo.display().to_string()),
                visible_line(&p.branch),
                visible_line(base)
            ),
            (None, None) => format!(
                "scratch workspace versioned on branch {}",
                visible_line(&p.branch)
            ),
        };
        self.line(format!("{} {what}", self.dim.apply_to("·")));
    }

    fn checkpoint(&self, p: &runlog::Checkpoint) {
        if let Some(commit) = &p.commit {
            self.line(format!(
                "  {} checkpoint {}",
                self.dim.apply_to("⎇"),
                self.dim
                    .apply_to(visible_line(commit.get(..12).unwrap_or(commit)))
            ));
        }
        if !p.ignored.is_empty() {
            self.line(format!(
                "  {} not recorded (.gitignore): {}",
                self.warn.apply_to("⚠"),
                one_line(&p.ignored.join(", "), 160)
            ));
        }
    }

    fn changes(&self, run: &fabric_domain::RunId, c: &runlog::WorkspaceResult) {
        self.line(format!(
            "{} branch {}: {} file(s) changed, +{} -{}; `fabric diff {run}` to review, `fabric apply {run}` to take, `fabric discard {run}` to drop",
            self.accent.apply_to("⎇"),
            visible_line(&c.branch),
            c.files.len(),
            c.added,
            c.removed
        ));
    }
}

impl HumanRenderer {
    fn mcp_server(&self, p: &runlog::McpServer) {
        use runlog::McpStatus;
        let detail = match p.status {
            McpStatus::Ready | McpStatus::ToolsChanged => {
                format!("{} tools", p.tools.as_ref().map_or(0, Vec::len))
            }
            McpStatus::Starting => {
                visible_line(p.transport.as_deref().unwrap_or_default()).into_owned()
            }
            _ => one_line(p.error.as_deref().unwrap_or_default(), 200),
        };
        let mark = match p.status {
            McpStatus::Failed | McpStatus::Timeout | McpStatus::Stopped => self.bad.apply_to("✗"),
            _ => self.dim.apply_to("·"),
        };
        self.line(format!(
            "{mark} mcp server {} {}: {detail}",
            visible_line(&p.server),
            p.status
        ));
    }

    /// A server's log line (`[level] text`) or a call's progress (`3/10 text`).
    fn mcp_message(&self, p: &runlog::McpMessage) {
        let text = one_line(p.message.as_deref().unwrap_or_default(), 200);
        let head = match p.message_type {
            runlog::McpMessageType::Progress => match (p.progress, p.total) {
                (Some(done), Some(total)) => format!("{done}/{total}"),
                (Some(done), None) => format!("{done}"),
                _ => "progress".to_owned(),
            },
            _ => format!("[{}]", visible_line(p.level.as_deref().unwrap_or("log"))),
        };
        self.line(format!(
            "  {} {} {head} {text}",
            self.dim.apply_to("⋯"),
            visible_line(&p.server)
        ));
    }

    /// A server's request and how it was answered.
    fn mcp_request(&self, p: &runlog::McpRequest) {
        let answered = p.outcome == runlog::McpRequestOutcome::Answered;
        let detail = match (&p.model, &p.usage, &p.reason) {
            (Some(model), Some(usage), _) => {
                format!("by {}, {} tokens", visible_line(model), usage.total_tokens)
            }
            (_, _, Some(reason)) => one_line(reason, 200),
            _ => one_line(
                &p.fields.as_ref().map(|f| f.join(", ")).unwrap_or_default(),
                200,
            ),
        };
        let mark = if answered {
            self.dim.apply_to("⇄")
        } else {
            self.warn.apply_to("⇄")
        };
        self.line(format!(
            "  {mark} {} asked {}: {} {detail}",
            visible_line(&p.server),
            visible_line(&p.method),
            p.outcome
        ));
    }
}

/// Prints every event as one JSON line on stdout, as written to the runlog.
pub(crate) struct JsonLinesRenderer;

impl ChatObserver for JsonLinesRenderer {
    fn on_text_delta(&self, _delta: &str) {}
}

#[async_trait]
impl RunObserver for JsonLinesRenderer {
    async fn on_event(&self, event: &RunEvent) {
        if let Ok(line) = serde_json::to_string(event) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }

    /// On stderr: stdout holds runlog lines only.
    fn on_notice(&self, notice: &str) {
        let _ = writeln!(std::io::stderr().lock(), "fabric: {}", visible_line(notice));
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}
