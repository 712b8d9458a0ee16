//! `fabric chat`: an interactive session on a terminal (issue #42, ADR-107). Each line is a
//! turn, an ordinary run that continues the previous turn's conversation (as
//! `fabric run --continue` does; on a project, on the same branch); what it does is shown
//! as `fabric run` shows it; its questions and approvals are answered at the prompt, and a
//! line typed while it works is said to it (steering). Ctrl-C cancels the turn, not the
//! session.

mod editor;
mod person;

use async_trait::async_trait;
use fabric_core::live_output::OutputObserver;
use fabric_core::ports::ApplyMode;
use fabric_core::service::{
    ContinueRequest, ProjectRequest, RunService, ServiceConfig, Submission, TaskRequest, WhenAsked,
};
use fabric_core::{ChatObserver, RunObserver};
use fabric_domain::{LiveToolOutput, RunEvent, RunId, visible_text};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::signal::unix::{Signal, SignalKind, signal};

use self::editor::{LineEditor, Screen, Typed};
use self::person::AtPrompt;
use super::follow::{EMBED_GRACE, ended};
use super::project;
use crate::cli::{ChatArgs, Cli};
use crate::errors::UsageError;
use crate::render::HumanRenderer;
use crate::wiring;

/// The session's commands and what each does (`/help`, and Tab completes them).
pub(super) const COMMANDS: &[(&str, &str)] = &[
    (
        "/diff",
        "what the session changed in the project so far (`fabric diff` of the last turn)",
    ),
    (
        "/apply",
        "bring those changes into your working tree, uncommitted (`fabric apply`)",
    ),
    (
        "/discard",
        "remove the session's worktree and branch (`fabric discard`); the next line starts a new conversation",
    ),
    (
        "/fork",
        "the next turn forks: a new branch from the last turn's head, that branch left alone",
    ),
    (
        "/exit",
        "end the session (so do Ctrl-D, and Ctrl-C twice at the prompt)",
    ),
    ("/help", "this list"),
];

/// A command typed at the prompt.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Command {
    Diff,
    Apply,
    Discard,
    Fork,
    Exit,
    Help,
}

impl Command {
    /// The command `line` names; `Err` for a `/word` that is none.
    fn parse(line: &str) -> Option<Result<Self, UsageError>> {
        let word = line.trim().strip_prefix('/')?;
        Some(match word {
            "diff" => Ok(Self::Diff),
            "apply" => Ok(Self::Apply),
            "discard" => Ok(Self::Discard),
            "fork" => Ok(Self::Fork),
            "exit" | "quit" => Ok(Self::Exit),
            "help" => Ok(Self::Help),
            other => Err(UsageError(format!(
                "no command `/{}`: /help lists them",
                fabric_domain::visible_line(other)
            ))),
        })
    }
}

/// `fabric chat`.
pub(crate) async fn chat(cli: &Cli, args: &ChatArgs) -> anyhow::Result<u8> {
    if !std::io::stdin().is_terminal() {
        return Err(UsageError(
            "`fabric chat` needs a terminal, and its stdin is not one; from a script, `fabric run PROMPT` starts a conversation and `fabric run --continue RUN_ID PROMPT` goes on with it".to_owned(),
        )
        .into());
    }
    let settings = wiring::load_settings(cli)?;
    // What the repository ships that would run is asked about before the session (issue #43).
    super::trust::ask_before(&settings, args.project.as_deref()).await?;
    let fabric = wiring::fabric(&settings, ServiceConfig::default()).await?;
    let (editor, screen) = LineEditor::start(fabric_config::chat_history_file())?;
    let mut session = Session {
        service: fabric.service.clone(),
        args,
        screen,
        editor,
        interrupts: signal(SignalKind::interrupt())?,
        last: None,
        fork: false,
        held: None,
    };
    session.run().await;
    // The editor's thread ends with the session, no line being read; then the screen
    // prints what is left.
    let Session { editor, screen, .. } = session;
    editor.close();
    screen.close();
    fabric.service.shutdown(EMBED_GRACE).await;
    fabric.flush_telemetry().await;
    Ok(0)
}

/// One session: its terminal and the conversation so far.
struct Session<'a> {
    service: RunService,
    args: &'a ChatArgs,
    screen: Arc<Screen>,
    editor: LineEditor,
    /// SIGINT, when Ctrl-C comes while no line is being read (the terminal's own).
    interrupts: Signal,
    /// The last turn that ran: the next continues (or forks) its conversation.
    last: Option<RunId>,
    /// The next turn forks instead of continuing (`/fork`).
    fork: bool,
    /// A line typed during a turn that waits for its end (a command, or any line once the
    /// turn's end was shown); the editor reads no other meanwhile.
    held: Option<String>,
}

impl Session<'_> {
    /// Reads lines until the person ends the session.
    async fn run(&mut self) {
        self.screen.print(
            "fabric chat · each line is a turn · a line ending in \\ goes on on the next · Ctrl-C cancels a turn · /help · /exit or Ctrl-D ends",
        );
        let mut interrupted = false;
        loop {
            let typed = match self.held.take() {
                Some(line) => Typed::Line(line),
                None => self.editor.next().await,
            };
            match typed {
                Typed::Eof => return,
                Typed::Interrupted if interrupted => return,
                Typed::Interrupted => {
                    interrupted = true;
                    self.editor.read_on();
                    self.screen
                        .print("(Ctrl-C again, Ctrl-D or /exit ends the session)");
                }
                Typed::Line(line) => {
                    interrupted = false;
                    if matches!(Command::parse(&line), Some(Ok(Command::Exit))) {
                        return;
                    }
                    self.editor.read_on();
                    if !self.line(line).await {
                        return;
                    }
                }
            }
        }
    }

    /// A line typed at the prompt between turns, the editor reading the next: a command
    /// or a turn; `false` ends the session.
    async fn line(&mut self, line: String) -> bool {
        match Command::parse(&line) {
            Some(Ok(command)) => self.command(command).await,
            Some(Err(unknown)) => self.screen.print(unknown.0),
            None if line.trim().is_empty() => {}
            None => return self.turn(line).await,
        }
        true
    }

    async fn command(&mut self, command: Command) {
        let done = match command {
            Command::Help => Ok(help()),
            Command::Fork => Ok(self.fork_next()),
            Command::Diff | Command::Apply | Command::Discard => self.project(command).await,
            Command::Exit => Ok(String::new()),
        };
        match done {
            Ok(text) => self.screen.print(text),
            Err(e) => self.screen.print(error_text(&e)),
        }
    }

    fn fork_next(&mut self) -> String {
        match &self.last {
            None => "nothing to fork yet: the first turn starts the conversation".to_owned(),
            Some(id) => {
                self.fork = true;
                format!("the next turn forks run {id}: a new branch from its head")
            }
        }
    }

    /// `/diff`, `/apply` and `/discard` of the last turn, as `fabric diff`, `apply` and
    /// `discard` of it.
    async fn project(&mut self, command: Command) -> anyhow::Result<String> {
        let Some(id) = self.last.clone() else {
            return Err(UsageError("no turn has run yet in this session".to_owned()).into());
        };
        if command == Command::Discard {
            let text = project::discard_text(&self.service, &id).await?;
            self.last = None;
            self.fork = false;
            return Ok(format!("{text}the next line starts a new conversation"));
        }
        let ws = project::workspace(&self.service, &id).await?;
        match command {
            Command::Apply => project::apply_text(ws.as_ref(), &id, ApplyMode::WorkingTree).await,
            _ => {
                let diff = project::diff_text(ws.as_ref(), &id, false, false).await?;
                Ok(match diff.is_empty() {
                    true => format!("run {id}'s branch changes nothing yet"),
                    false => diff,
                })
            }
        }
    }
}

impl Session<'_> {
    /// The request of the next turn: a new conversation, or the last turn's continued (or
    /// forked), on its project.
    fn request(&self, prompt: String) -> TaskRequest {
        let continues = self.last.clone().map(|run_id| ContinueRequest {
            run_id,
            fork: self.fork,
        });
        let first = continues.is_none();
        TaskRequest {
            prompt,
            // A later turn goes on with the specialist and the project of the conversation.
            specialists: match first {
                true => self.args.specialists.clone(),
                false => Vec::new(),
            },
            model_key: self.args.model_key.clone(),
            project: self
                .args
                .project
                .clone()
                .filter(|_| first)
                .map(|path| ProjectRequest { path, base: None }),
            continues,
            ..TaskRequest::default()
        }
    }

    /// Runs one turn to its end, the lines typed meanwhile answering it or said to it;
    /// `false` when the person ended the session during it.
    async fn turn(&mut self, prompt: String) -> bool {
        drain(&mut self.interrupts).await;
        let person = Arc::new(AtPrompt::new(self.screen.clone()));
        let shown = Arc::new(Shown::new(HumanRenderer::printing_to(self.screen.sink())));
        let submission = Submission::new(self.request(prompt))
            .observed(shown.clone())
            .attended(WhenAsked::Ask(person.clone()));
        let mut handle = match self.service.submit(submission) {
            Ok(handle) => handle,
            Err(e) => {
                self.screen.print(error_text(&e.into()));
                return true;
            }
        };
        let id = handle.id().clone();
        let work = async move {
            handle.prepared().await?;
            Ok::<_, fabric_core::service::ServiceError>(handle.outcome().await)
        };
        tokio::pin!(work);
        let mut stay = true;
        let done = loop {
            tokio::select! {
                done = &mut work => break done,
                typed = self.editor.next(), if stay && self.held.is_none() => {
                    stay &= self.during(&id, typed, &person, shown.ended()).await;
                }
                _ = self.interrupts.recv() => self.cancel(&id),
            }
        };
        self.ended(done);
        stay
    }

    /// What was typed while turn `id` works; `false` for the session's end.
    async fn during(&mut self, id: &RunId, typed: Typed, person: &AtPrompt, ended: bool) -> bool {
        let line = match typed {
            Typed::Eof => {
                if !ended {
                    self.cancel(id);
                }
                return false;
            }
            Typed::Interrupted => {
                self.editor.read_on();
                if !ended {
                    self.cancel(id);
                }
                return true;
            }
            Typed::Line(line) => line,
        };
        if person.offer(&line) {
            self.editor.read_on();
            return true;
        }
        if ended || Command::parse(&line).is_some() {
            // Handled at the prompt once the turn is over.
            if !ended {
                self.screen.print(format!(
                    "{} waits until the turn ends (Ctrl-C cancels it)",
                    fabric_domain::visible_line(line.trim())
                ));
            }
            self.held = Some(line);
            return true;
        }
        self.editor.read_on();
        if line.trim().is_empty() {
            return true;
        }
        match self.service.steer(id, &line, "chat").await {
            Ok(()) => self
                .screen
                .print("  said to the turn: its model hears it at its next step"),
            Err(e) => self.screen.print(error_text(&e.into())),
        }
        true
    }

    fn cancel(&self, id: &RunId) {
        self.screen.print("cancelling the turn");
        self.service.cancel(id);
    }

    /// How a turn ended, shown; the next turn goes on from it if it ran.
    fn ended(
        &mut self,
        done: Result<
            Result<fabric_core::execute::RunOutcome, fabric_core::service::ServiceError>,
            fabric_core::service::ServiceError,
        >,
    ) {
        let outcome = match done {
            // Not prepared: no run to go on from.
            Err(e) => return self.screen.print(error_text(&e.into())),
            Ok(Err(e)) => return self.screen.print(error_text(&e.into())),
            Ok(Ok(outcome)) => outcome,
        };
        self.last = Some(outcome.run_id.clone());
        self.fork = false;
        match ended(&outcome) {
            Ok((result, notes)) => {
                if let Some(result) = result {
                    self.screen.print(result);
                }
                for note in notes {
                    self.screen.print(note);
                }
            }
            Err(e) => self.screen.print(error_text(&e)),
        }
    }
}

/// The turn's renderer, and whether it showed the run's end (a line typed after that
/// is for the prompt, not the turn).
struct Shown {
    renderer: HumanRenderer,
    ended: AtomicBool,
}

impl Shown {
    fn new(renderer: HumanRenderer) -> Self {
        Self {
            renderer,
            ended: AtomicBool::new(false),
        }
    }

    fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }
}

impl ChatObserver for Shown {
    fn on_text_delta(&self, delta: &str) {
        self.renderer.on_text_delta(delta);
    }
}

#[async_trait]
impl RunObserver for Shown {
    async fn on_event(&self, event: &RunEvent) {
        // Marked before it is shown: a line typed once the person sees the end is for the
        // prompt; marked after, one typed at once was said to the ended turn and lost.
        if event.run_end().is_some() {
            self.ended.store(true, Ordering::Release);
        }
        self.renderer.on_event(event).await;
    }

    fn on_prepared(&self, notes: &[String]) {
        self.renderer.on_prepared(notes);
    }

    fn on_notice(&self, notice: &str) {
        self.renderer.on_notice(notice);
    }

    fn on_tool_output(&self, output: &LiveToolOutput) {
        self.renderer.on_tool_output(output);
    }

    fn output_observer(&self) -> Option<Arc<dyn OutputObserver>> {
        self.renderer.output_observer()
    }
}

/// `/help`.
fn help() -> String {
    let mut text = String::from(
        "each line is a turn that goes on with the conversation; a line typed while a turn works is said to it, or answers its question\n",
    );
    for (name, what) in COMMANDS {
        text.push_str(&format!("  {name:<9} {what}\n"));
    }
    text.push_str("  Ctrl-C    cancel the turn that works (at the prompt: twice ends the session)");
    text
}

/// An error as the session shows it, escaped (it may carry what tools and servers said).
fn error_text(error: &anyhow::Error) -> String {
    format!("error: {}", visible_text(&format!("{error:#}")))
}

/// Forgets a Ctrl-C that came between turns, so it does not cancel the next.
async fn drain(interrupts: &mut Signal) {
    tokio::select! {
        biased;
        _ = interrupts.recv() => {}
        () = std::future::ready(()) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_42_chat_commands_are_read_and_an_unknown_one_is_named() {
        assert!(matches!(Command::parse("/diff"), Some(Ok(Command::Diff))));
        assert!(matches!(Command::parse(" /exit "), Some(Ok(Command::Exit))));
        assert!(Command::parse("add a test").is_none());
        let unknown = Command::parse("/frob").and_then(Result::err);
        assert!(unknown.is_some_and(|e| e.0.contains("/frob")));
    }
}
