//! `fabric chat`'s line editor (ADR-107): rustyline on a thread of its own, reading one line
//! at a time when the session says so, and the screen everything else is printed on, above
//! the editor's prompt.

use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Config, ExternalPrinter, Helper};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// The prompt, the same whether a turn runs or not.
const PROMPT: &str = "› ";
/// Lines kept in the history file.
const HISTORY_LINES: usize = 1_000;

/// What the person typed.
#[derive(Debug)]
pub(super) enum Typed {
    /// A line (lines continued with a trailing `\` joined by newlines).
    Line(String),
    /// Ctrl-C.
    Interrupted,
    /// Ctrl-D, or the terminal closed.
    Eof,
}

/// The editor's thread, as the session drives it: each [`Typed`] waits for
/// [`LineEditor::read_on`] before the next line is read, so the session can end with no
/// read under way (the terminal back as it was).
pub(super) struct LineEditor {
    typed: UnboundedReceiver<Typed>,
    go: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl LineEditor {
    /// Starts the editor on its thread, its history read from `history`, and the screen
    /// that prints above its prompt.
    pub(super) fn start(history: Option<PathBuf>) -> anyhow::Result<(Self, Arc<Screen>)> {
        let config = Config::builder()
            .max_history_size(HISTORY_LINES)?
            .history_ignore_dups(true)?
            .history_ignore_space(true)
            .build();
        let mut editor = rustyline::Editor::<Continued, DefaultHistory>::with_config(config)?;
        editor.set_helper(Some(Continued));
        if let Some(path) = &history {
            create_history(path);
            let _ = editor.load_history(path);
        }
        let printer = editor
            .create_external_printer()
            .ok()
            .map(|p| Box::new(p) as Box<dyn ExternalPrinter + Send>);
        let screen = Arc::new(Screen::start(printer)?);
        let (typed_tx, typed) = unbounded_channel();
        let (go, go_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("fabric-chat-editor".to_owned())
            .spawn(move || read_lines(editor, history, typed_tx, go_rx))?;
        Ok((Self { typed, go, thread }, screen))
    }

    /// Ends the editor's thread, which waits for a go-ahead (no line is being read): the
    /// editor is dropped, the terminal as it was.
    pub(super) fn close(self) {
        drop(self.go);
        let _ = self.thread.join();
    }

    /// What was typed next (`Eof` once the editor is gone).
    pub(super) async fn next(&mut self) -> Typed {
        self.typed.recv().await.unwrap_or(Typed::Eof)
    }

    /// Reads the next line (after each [`Typed`], before the next).
    pub(super) fn read_on(&self) {
        let _ = self.go.send(());
    }
}

/// Creates the history file, if it is not there, before any run starts: private (0600 in a
/// 0700 directory), and made here because rustyline makes a missing one under a umask it
/// sets for the whole process, which a run's files made at that moment would get.
fn create_history(path: &std::path::Path) {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir);
    }
    let made = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path);
    if let Err(e) = made {
        tracing::warn!(path = %path.display(), error = %e, "cannot keep the chat history");
    }
}

/// The editor's loop: a line, then a wait for the session's go-ahead.
fn read_lines(
    mut editor: rustyline::Editor<Continued, DefaultHistory>,
    history: Option<PathBuf>,
    typed: UnboundedSender<Typed>,
    go: mpsc::Receiver<()>,
) {
    loop {
        let line = match editor.readline(PROMPT) {
            Ok(line) => {
                if !line.trim().is_empty() {
                    let _ = editor.add_history_entry(line.as_str());
                    if let Some(path) = &history
                        && let Err(e) = editor.append_history(path)
                    {
                        tracing::warn!(error = %e, "cannot keep the chat history");
                    }
                }
                Typed::Line(joined(&line))
            }
            Err(ReadlineError::Interrupted) => Typed::Interrupted,
            Err(ReadlineError::Eof) => Typed::Eof,
            Err(e) => {
                tracing::warn!(error = %e, "the line editor failed");
                Typed::Eof
            }
        };
        if typed.send(line).is_err() || go.recv().is_err() {
            return;
        }
    }
}

/// A line continued with a trailing `\` and Enter, as the person meant it: one newline
/// where each `\` and Enter were.
fn joined(line: &str) -> String {
    line.replace("\\\n", "\n")
}

/// The editor's helper: Enter after a trailing `\` continues the line on the next.
struct Continued;

impl Helper for Continued {}
impl Highlighter for Continued {}
impl Hinter for Continued {
    type Hint = String;
}

impl Completer for Continued {
    type Candidate = String;

    /// The slash commands, completed with Tab.
    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        let typed = &line[..pos];
        if !typed.starts_with('/') || typed.contains(char::is_whitespace) {
            return Ok((0, Vec::new()));
        }
        let matches = super::COMMANDS
            .iter()
            .filter(|(name, _)| name.starts_with(typed))
            .map(|(name, _)| (*name).to_owned())
            .collect();
        Ok((0, matches))
    }
}

impl Validator for Continued {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(if ctx.input().ends_with('\\') {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

/// The terminal as the session prints on it: above the editor's prompt, which is drawn
/// again below (rustyline's external printer), or on stderr when there is none.
///
/// Printing never blocks the caller (the renderer, in the run's task): lines go to a thread
/// of their own, in order. The external printer can block: a line handed to it just as the
/// editor stopped reading waits for the next read, and the editor does not read while a
/// line typed during a turn waits for the turn's end, which must not wait for the printer.
pub(super) struct Screen {
    lines: Mutex<Option<mpsc::Sender<String>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Screen {
    fn start(printer: Option<Box<dyn ExternalPrinter + Send>>) -> std::io::Result<Self> {
        let (lines, queued) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("fabric-chat-screen".to_owned())
            .spawn(move || print_lines(printer, queued))?;
        Ok(Self {
            lines: Mutex::new(Some(lines)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Prints `text` (its own line or lines).
    pub(super) fn print(&self, text: impl Into<String>) {
        let text = text.into();
        let queued = match locked(&self.lines).as_ref() {
            Some(lines) => lines.send(text),
            None => Err(mpsc::SendError(text)),
        };
        if let Err(mpsc::SendError(text)) = queued {
            eprintln!("{}", text.trim_end_matches('\n'));
        }
    }

    /// A renderer's sink: its lines printed here.
    pub(super) fn sink(self: &Arc<Self>) -> crate::render::LineSink {
        let screen = Arc::clone(self);
        Box::new(move |line| screen.print(line))
    }

    /// Prints what is queued and ends the printing thread; after the editor closed, so the
    /// printer no longer waits for it (what it still held goes to stderr).
    pub(super) fn close(&self) {
        drop(locked(&self.lines).take());
        if let Some(thread) = locked(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The printing thread: each line through the editor's printer, or on stderr once it
/// fails (the editor is gone).
fn print_lines(
    mut printer: Option<Box<dyn ExternalPrinter + Send>>,
    lines: mpsc::Receiver<String>,
) {
    for text in lines {
        let text = match printer.as_mut().map(|p| p.print(text.clone())) {
            Some(Ok(())) => continue,
            Some(Err(_)) => {
                printer = None;
                text
            }
            None => text,
        };
        eprintln!("{}", text.trim_end_matches('\n'));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_42_a_line_continued_with_a_backslash_is_joined_by_newlines() {
        assert_eq!(joined("one\\\ntwo\\\nthree"), "one\ntwo\nthree");
        assert_eq!(joined("a \\ b"), "a \\ b");
    }
}
