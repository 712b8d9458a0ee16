//! Lifecycle hooks in Claude Code's settings format (issue #43, ADR-109): the one type from
//! the config file (or a project's `.claude/settings.json`) to the engine, how a matcher
//! picks the hooks of an event, and what a hook's exit code and output mean.
//!
//! The shape is exactly Claude Code's: `{EVENT: [{"matcher": "Write|Edit", "hooks":
//! [{"type": "command", "command": "...", "timeout": 30}]}]}`. Reading it is strict for the
//! fabric's own config (a mistake is refused with its key) and lenient for a file a project
//! ships (what cannot be used is skipped with a warning, so a team's file written for a newer
//! Claude Code still loads). No I/O here: the runner (`fabric-tools`) runs the commands, and
//! the engine decides what their answers do.

use regex_automata::meta::Regex;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

use crate::DomainError;
use crate::runlog::{HookOutcome, HookRun};

/// A hook's timeout when it names none, in seconds: Claude Code's.
pub const DEFAULT_HOOK_TIMEOUT_S: u64 = 60;
/// The longest timeout a hook may name, in seconds.
pub const MAX_HOOK_TIMEOUT_S: u64 = 3600;
/// Most bytes of a hook's stdout and of its stderr read; the rest is dropped.
pub const MAX_HOOK_OUTPUT_BYTES: usize = 64 * 1024;
/// Most characters of a hook's text given to the model (a reason, a context).
pub const MAX_HOOK_MESSAGE_CHARS: usize = 8_000;

/// Claude Code's tool names for the fabric's built-in tools, so a matcher written for Claude
/// Code (`Bash`, `Write|Edit`) matches the fabric's equivalent (`shell`, `write_file`). MCP
/// tools need none: both name them `mcp__<server>__<tool>`.
pub const CLAUDE_CODE_TOOL_NAMES: &[(&str, &str)] = &[
    ("Bash", crate::builtin::SHELL),
    ("Read", crate::builtin::READ_FILE),
    ("Write", crate::builtin::WRITE_FILE),
    ("Edit", crate::builtin::WRITE_FILE),
    ("MultiEdit", crate::builtin::WRITE_FILE),
    ("Glob", crate::builtin::LIST_FILES),
    ("LS", crate::builtin::LIST_FILES),
    ("WebFetch", crate::builtin::FETCH_URL),
    ("WebSearch", crate::builtin::WEB_SEARCH),
];

macro_rules! hook_events {
    ($( $(#[doc = $doc:literal])* $variant:ident fires $fires:literal ),+ $(,)?) => {
        /// An event Claude Code documents. The fabric fires those with `fires()`; the others
        /// are read and kept, and never fire (docs/HOOKS.md).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum HookEvent {
            $( $(#[doc = $doc])* $variant, )+
        }

        impl HookEvent {
            /// Every event, in the order docs/HOOKS.md lists them.
            pub const ALL: &'static [HookEvent] = &[$(Self::$variant),+];

            /// The event's name, as Claude Code spells it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => stringify!($variant), )+
                }
            }

            /// Whether the fabric's loop fires this event.
            pub fn fires(self) -> bool {
                match self {
                    $( Self::$variant => $fires, )+
                }
            }
        }
    };
}

hook_events! {
    /// Before a tool call runs: may deny, ask, allow or rewrite it.
    PreToolUse fires true,
    /// After a tool call returned a result.
    PostToolUse fires true,
    /// The task, and each message said to the run while it works.
    UserPromptSubmit fires true,
    /// The model calls `finish_task`: may keep the run going.
    Stop fires true,
    /// A delegated child run's model calls `finish_task` (its `Stop`).
    SubagentStop fires true,
    /// A member's loop starts.
    SessionStart fires true,
    /// A member's loop ended.
    SessionEnd fires true,
    /// The conversation is about to be compacted to fit the context window.
    PreCompact fires true,
    /// Claude Code's notifications; never fired by the fabric.
    Notification fires false,
    /// Claude Code's permission dialog; never fired by the fabric (approvals are issue #42's).
    PermissionRequest fires false,
    /// Claude Code's failed tool calls; never fired by the fabric.
    PostToolUseFailure fires false,
    /// Claude Code's subagent start; never fired by the fabric.
    SubagentStart fires false,
}

impl HookEvent {
    /// The event named `text`, exactly as Claude Code spells it.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|e| e.as_str() == text)
    }

    /// Whether the event's matcher is compared with a tool's name (otherwise with its
    /// `source` or `trigger`, or not at all).
    pub fn is_about_a_tool(self) -> bool {
        matches!(
            self,
            Self::PreToolUse
                | Self::PostToolUse
                | Self::PermissionRequest
                | Self::PostToolUseFailure
        )
    }
}

impl Serialize for HookEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One hook: a command the user wrote, run by `sh -c`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookCommand {
    /// Always `command`: the only type the fabric runs.
    #[serde(rename = "type")]
    pub kind: String,
    /// The command line.
    pub command: String,
    /// Seconds before it is killed; absent: [`DEFAULT_HOOK_TIMEOUT_S`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

impl HookCommand {
    /// Its timeout in seconds.
    pub fn timeout_s(&self) -> u64 {
        self.timeout.unwrap_or(DEFAULT_HOOK_TIMEOUT_S)
    }
}

/// The hooks of one matcher.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookGroup {
    /// Which calls (by tool name) or starts (by source) they are for; absent, empty or `*`:
    /// all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    /// The commands, run in parallel.
    pub hooks: Vec<HookCommand>,
}

/// Hooks by event: Claude Code's `hooks` settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct HooksConfig {
    /// The groups of each event, in the file's order.
    pub events: BTreeMap<HookEvent, Vec<HookGroup>>,
}

/// How a mistake in a hooks file is met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// Refused, naming its key: the fabric's own config.
    Refuse,
    /// Skipped with a warning: a file a project ships, written for Claude Code.
    Skip,
}

/// Hooks read from a file, and what was skipped on the way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadHooks {
    /// What will run.
    pub config: HooksConfig,
    /// What was skipped and why, one sentence each.
    pub warnings: Vec<String>,
}

/// One hook that applies to an event: its group's matcher and its command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applicable<'a> {
    /// The matcher as written.
    pub matcher: Option<&'a str>,
    /// The hook.
    pub hook: &'a HookCommand,
}

impl HooksConfig {
    /// Whether no event has a hook.
    pub fn is_empty(&self) -> bool {
        self.events.values().all(Vec::is_empty)
    }

    /// Reads a whole Claude Code `settings.json` (user, project or local): its `hooks`, every
    /// other key ignored; leniently ([`Strictness::Skip`]), as a project file is.
    pub fn from_claude_settings(text: &str) -> Result<ReadHooks, DomainError> {
        let settings: Value = serde_json::from_str(text).map_err(|e| invalid("settings", e))?;
        let Some(settings) = settings.as_object() else {
            return Err(invalid("settings", "the file is not a JSON object"));
        };
        match settings.get("hooks") {
            None | Some(Value::Null) => Ok(ReadHooks::default()),
            Some(hooks) => Self::read(hooks, Strictness::Skip),
        }
    }

    /// Reads the value of a `hooks` key, checking every event, matcher, type and timeout.
    pub fn read(value: &Value, strictness: Strictness) -> Result<ReadHooks, DomainError> {
        let mut reader = Reader {
            strictness,
            warnings: Vec::new(),
        };
        let Some(events) = value.as_object() else {
            return Err(invalid(
                "hooks",
                "expected a map of event names to lists of `{matcher, hooks}`",
            ));
        };
        let mut config = HooksConfig::default();
        for (name, groups) in events {
            let key = format!("hooks.{name}");
            let Some(event) = HookEvent::parse(name) else {
                let known: Vec<&str> = HookEvent::ALL.iter().map(|e| e.as_str()).collect();
                reader.problem(&key, format!(
                    "unknown hook event `{name}`; the events are {} (spelled as Claude Code does)",
                    known.join(", ")
                ), "its hooks are skipped")?;
                continue;
            };
            let groups = reader.groups(&key, groups)?;
            if !groups.is_empty() {
                config.events.entry(event).or_default().extend(groups);
            }
        }
        Ok(ReadHooks {
            config,
            warnings: reader.warnings,
        })
    }

    /// The hooks of `event` whose matcher matches `target` (the tool's name, the start's
    /// source, the compaction's trigger; `None`: an event without one, where every group
    /// applies), in the file's order.
    pub fn applicable(&self, event: HookEvent, target: Option<&str>) -> Vec<Applicable<'_>> {
        let Some(groups) = self.events.get(&event) else {
            return Vec::new();
        };
        groups
            .iter()
            .filter(|g| target.is_none_or(|t| matches(g.matcher.as_deref(), t, event)))
            .flat_map(|g| {
                g.hooks.iter().map(|hook| Applicable {
                    matcher: g.matcher.as_deref(),
                    hook,
                })
            })
            .collect()
    }
}

/// Reads groups and hooks, meeting each mistake by its strictness.
struct Reader {
    strictness: Strictness,
    warnings: Vec<String>,
}

impl Reader {
    /// A mistake at `key`: refused, or kept as a warning (`Ok`: skip what it is about).
    fn problem(&mut self, key: &str, detail: String, then: &str) -> Result<(), DomainError> {
        match self.strictness {
            Strictness::Refuse => Err(invalid(key, detail)),
            Strictness::Skip => {
                self.warnings.push(format!("`{key}`: {detail}; {then}"));
                Ok(())
            }
        }
    }

    fn groups(&mut self, key: &str, value: &Value) -> Result<Vec<HookGroup>, DomainError> {
        let Some(groups) = value.as_array() else {
            self.problem(
                key,
                "expected a list of `{matcher, hooks}`".to_owned(),
                "skipped",
            )?;
            return Ok(Vec::new());
        };
        let mut read = Vec::new();
        for (i, group) in groups.iter().enumerate() {
            let key = format!("{key}[{i}]");
            if let Some(group) = self.group(&key, group)? {
                read.push(group);
            }
        }
        Ok(read)
    }

    fn group(&mut self, key: &str, value: &Value) -> Result<Option<HookGroup>, DomainError> {
        let Some(group) = value.as_object() else {
            self.problem(key, "expected `{matcher, hooks}`".to_owned(), "skipped")?;
            return Ok(None);
        };
        let matcher = match group.get("matcher") {
            None | Some(Value::Null) => None,
            Some(Value::String(m)) => Some(m.clone()),
            Some(_) => {
                self.problem(
                    &format!("{key}.matcher"),
                    "expected a string".to_owned(),
                    "the group is skipped",
                )?;
                return Ok(None);
            }
        };
        if let Some(pattern) = &matcher
            && let Err(e) = Matcher::compile(pattern)
        {
            self.problem(
                &format!("{key}.matcher"),
                format!("`{pattern}` is not a valid regular expression: {e}"),
                "the group is skipped",
            )?;
            return Ok(None);
        }
        let hooks = match group.get("hooks") {
            Some(Value::Array(hooks)) => hooks,
            _ => {
                self.problem(
                    &format!("{key}.hooks"),
                    "expected a list of hooks".to_owned(),
                    "the group is skipped",
                )?;
                return Ok(None);
            }
        };
        let mut read = Vec::new();
        for (i, hook) in hooks.iter().enumerate() {
            if let Some(hook) = self.hook(&format!("{key}.hooks[{i}]"), hook)? {
                read.push(hook);
            }
        }
        Ok((!read.is_empty()).then_some(HookGroup {
            matcher,
            hooks: read,
        }))
    }

    fn hook(&mut self, key: &str, value: &Value) -> Result<Option<HookCommand>, DomainError> {
        let empty = Map::new();
        let hook = value.as_object().unwrap_or(&empty);
        match hook.get("type").and_then(Value::as_str) {
            Some("command") => {}
            Some(other) => {
                self.problem(&format!("{key}.type"), format!(
                    "hooks of type `{other}` are not supported by the fabric; only `command` hooks run"
                ), "the hook is skipped")?;
                return Ok(None);
            }
            None => {
                self.problem(
                    &format!("{key}.type"),
                    "expected `\"type\": \"command\"`".to_owned(),
                    "the hook is skipped",
                )?;
                return Ok(None);
            }
        }
        let Some(command) = hook
            .get("command")
            .and_then(Value::as_str)
            .filter(|c| !c.trim().is_empty())
        else {
            self.problem(
                &format!("{key}.command"),
                "expected the command to run, a non-empty string".to_owned(),
                "the hook is skipped",
            )?;
            return Ok(None);
        };
        let timeout = match hook.get("timeout") {
            None | Some(Value::Null) => None,
            Some(t) => match t.as_u64().filter(|t| (1..=MAX_HOOK_TIMEOUT_S).contains(t)) {
                Some(t) => Some(t),
                None => {
                    // A project file's timeout out of range (often milliseconds, `5000`)
                    // keeps its hook, with the longest timeout allowed.
                    self.problem(
                        &format!("{key}.timeout"),
                        format!("expected whole seconds from 1 to {MAX_HOOK_TIMEOUT_S}, got {t}"),
                        &format!("it runs with a timeout of {MAX_HOOK_TIMEOUT_S} s"),
                    )?;
                    Some(MAX_HOOK_TIMEOUT_S)
                }
            },
        };
        Ok(Some(HookCommand {
            kind: "command".to_owned(),
            command: command.to_owned(),
            timeout,
        }))
    }
}

fn invalid(key: &str, detail: impl std::fmt::Display) -> DomainError {
    DomainError::InvalidHooks {
        key: key.to_owned(),
        detail: detail.to_string(),
    }
}

/// A matcher, compiled as Claude Code reads it: empty or `*` matches everything; names of
/// letters, digits, `_` and `-` joined by `|` match exactly; anything else is a regular
/// expression searched for in the name (unanchored, as Claude Code's are).
enum Matcher<'a> {
    All,
    Names(Vec<&'a str>),
    Pattern(Regex),
}

impl<'a> Matcher<'a> {
    fn compile(pattern: &'a str) -> Result<Self, Box<regex_automata::meta::BuildError>> {
        let pattern = pattern.trim();
        if pattern.is_empty() || pattern == "*" {
            return Ok(Self::All);
        }
        let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '|' | ' ');
        if pattern.chars().all(plain) {
            return Ok(Self::Names(
                pattern
                    .split('|')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .collect(),
            ));
        }
        Regex::new(pattern).map(Self::Pattern).map_err(Box::new)
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Self::All => true,
            Self::Names(names) => names.contains(&name),
            Self::Pattern(regex) => regex.is_match(name),
        }
    }
}

/// Whether `pattern` matches `target`: for a tool, its fabric name or any of its Claude Code
/// names ([`CLAUDE_CODE_TOOL_NAMES`]). A pattern that does not compile matches nothing (the
/// reader refused or skipped it already).
fn matches(pattern: Option<&str>, target: &str, event: HookEvent) -> bool {
    let Some(pattern) = pattern else {
        return true;
    };
    let Ok(matcher) = Matcher::compile(pattern) else {
        return false;
    };
    if matcher.matches(target) {
        return true;
    }
    event.is_about_a_tool()
        && CLAUDE_CODE_TOOL_NAMES
            .iter()
            .any(|(claude, ours)| *ours == target && matcher.matches(claude))
}

/// What a hook is given on stdin, as JSON: Claude Code's fields, those of its event set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookInput {
    /// The run's id.
    pub session_id: String,
    /// The run's runlog (the runner sets it: only it knows where runlogs are).
    pub transcript_path: String,
    /// The directory the run works in.
    pub cwd: String,
    /// The event.
    pub hook_event_name: HookEvent,
    /// Always `default`: the fabric's approvals are per specialist, not a session mode.
    pub permission_mode: &'static str,
    /// The tool (PreToolUse, PostToolUse).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// The call's arguments (PreToolUse, PostToolUse).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_input: Option<Value>,
    /// The call's id (PreToolUse, PostToolUse).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// The call's result (PostToolUse).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_response: Option<Value>,
    /// The task or the message said (UserPromptSubmit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Whether the run goes on already because a Stop hook blocked an earlier finish (Stop,
    /// SubagentStop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_hook_active: Option<bool>,
    /// How the loop started: `startup` or `resume` (SessionStart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// `auto`: the context window is full (PreCompact).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// Always empty: no one writes compaction instructions in the fabric (PreCompact).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom_instructions: Option<String>,
    /// How the loop ended: its status (SessionEnd).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl HookInput {
    /// The input of `event` in run `session_id` working in `cwd`, with no event fields yet.
    pub fn new(event: HookEvent, session_id: &str, cwd: &str) -> Self {
        Self {
            session_id: session_id.to_owned(),
            transcript_path: String::new(),
            cwd: cwd.to_owned(),
            hook_event_name: event,
            permission_mode: "default",
            tool_name: None,
            tool_input: None,
            tool_use_id: None,
            tool_response: None,
            prompt: None,
            stop_hook_active: None,
            source: None,
            trigger: None,
            custom_instructions: None,
            reason: None,
        }
    }

    /// What the event's matchers are compared with: the tool's name, the start's source, the
    /// compaction's trigger; `None`: every group applies.
    pub fn target(&self) -> Option<&str> {
        match self.hook_event_name {
            e if e.is_about_a_tool() => self.tool_name.as_deref(),
            HookEvent::SessionStart => self.source.as_deref(),
            HookEvent::PreCompact => self.trigger.as_deref(),
            _ => None,
        }
    }
}

/// How one hook process ended, as the runner saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookExit {
    /// It exited with this code; its output, each capped at [`MAX_HOOK_OUTPUT_BYTES`].
    Exited {
        /// The exit code.
        code: i32,
        /// What it wrote on stdout.
        stdout: String,
        /// What it wrote on stderr.
        stderr: String,
    },
    /// It was killed by a signal, or its output could not be read: a crash.
    Crashed(String),
    /// It ran past its timeout and was killed with its process group.
    TimedOut(u64),
    /// It could not be started.
    NotStarted(String),
}

/// What one hook's answer means: its outcome, the text for the model, the rewritten input,
/// and what went wrong (never for the model).
#[derive(Debug, Clone, PartialEq)]
pub struct HookAnswer {
    /// The typed outcome.
    pub outcome: HookOutcome,
    /// The reason or context given to the model.
    pub message: Option<String>,
    /// The call's new arguments (PreToolUse `updatedInput`).
    pub updated_input: Option<Value>,
    /// Why it failed, for the runlog.
    pub detail: Option<String>,
    /// `stopReason` with `continue: false`: for the user, never the model (ADR-125).
    pub stop_reason: Option<String>,
    /// `systemMessage`: a warning for the user, never the model (ADR-125).
    pub system_message: Option<String>,
}

impl HookAnswer {
    fn of(outcome: HookOutcome) -> Self {
        Self {
            outcome,
            message: None,
            updated_input: None,
            detail: None,
            stop_reason: None,
            system_message: None,
        }
    }

    fn failed(outcome: HookOutcome, detail: impl Into<String>) -> Self {
        Self {
            detail: Some(capped(&detail.into())),
            ..Self::of(outcome)
        }
    }

    fn saying(outcome: HookOutcome, message: Option<String>) -> Self {
        Self {
            message: message.filter(|m| !m.trim().is_empty()).map(|m| capped(&m)),
            ..Self::of(outcome)
        }
    }

    /// Reads how a hook of `event` ended, as Claude Code does: exit 0 reads stdout's JSON
    /// (plain text is context for `UserPromptSubmit` and `SessionStart`, ignored otherwise);
    /// exit 2 blocks with stderr where the event can block; any other code is a non-blocking
    /// error and the action goes ahead (fail-open, ADR-110).
    pub fn read(event: HookEvent, exit: &HookExit) -> Self {
        let (code, stdout, stderr) = match exit {
            HookExit::Exited {
                code,
                stdout,
                stderr,
            } => (*code, stdout, stderr),
            HookExit::Crashed(why) => return Self::failed(HookOutcome::InvalidOutput, why.clone()),
            HookExit::TimedOut(s) => {
                return Self::failed(HookOutcome::Timeout, format!("killed after {s} s"));
            }
            HookExit::NotStarted(why) => return Self::failed(HookOutcome::Error, why.clone()),
        };
        match code {
            0 => Self::stdout(event, stdout.trim()),
            2 if can_block(event) => {
                let reason = match stderr.trim() {
                    "" => format!(
                        "a {} hook blocked this (exit code 2) and gave no reason",
                        event.as_str()
                    ),
                    reason => reason.to_owned(),
                };
                Self::saying(HookOutcome::Blocked, Some(reason))
            }
            code => Self::failed(
                HookOutcome::Error,
                format!("exit code {code}: {}", stderr.trim()),
            ),
        }
    }

    fn stdout(event: HookEvent, stdout: &str) -> Self {
        if stdout.is_empty() {
            return Self::of(HookOutcome::Ok);
        }
        if !stdout.starts_with('{') {
            let context = matches!(event, HookEvent::UserPromptSubmit | HookEvent::SessionStart);
            return Self::saying(HookOutcome::Ok, context.then(|| stdout.to_owned()));
        }
        let answer = match serde_json::from_str::<Value>(stdout) {
            Ok(Value::Object(answer)) => answer,
            Ok(_) => {
                return Self::failed(
                    HookOutcome::InvalidOutput,
                    "stdout is JSON but not an object",
                );
            }
            Err(e) => {
                return Self::failed(
                    HookOutcome::InvalidOutput,
                    format!("stdout is not valid JSON: {e}"),
                );
            }
        };
        Self::json(event, &answer)
    }

    /// A JSON answer: Claude Code's common fields first (`continue: false` stops the run
    /// whatever else it says, `systemMessage` is for the user), then the event's own.
    fn json(event: HookEvent, answer: &Map<String, Value>) -> Self {
        let mut read = match answer.get("continue") {
            None | Some(Value::Bool(true)) => Self::decision(event, answer),
            Some(Value::Bool(false)) => Self {
                stop_reason: user_text(answer, "stopReason"),
                ..Self::of(HookOutcome::Stopped)
            },
            Some(_) => {
                return Self::failed(
                    HookOutcome::InvalidOutput,
                    "`continue` is not true or false",
                );
            }
        };
        read.system_message = user_text(answer, "systemMessage");
        read
    }

    /// What a JSON answer decides for `event`: its decision, reason, context and rewrite.
    fn decision(event: HookEvent, answer: &Map<String, Value>) -> Self {
        let specific = answer.get("hookSpecificOutput").and_then(Value::as_object);
        let field = |name: &str| specific.and_then(|s| s.get(name)).and_then(Value::as_str);
        let context = field("additionalContext").map(str::to_owned);
        let reason = answer
            .get("reason")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let blocks = answer.get("decision").and_then(Value::as_str) == Some("block");
        if event == HookEvent::PreToolUse {
            return pre_tool_use(answer, specific);
        }
        if blocks && can_block(event) {
            let reason = reason.unwrap_or_else(|| {
                format!("a {} hook blocked this and gave no reason", event.as_str())
            });
            return Self::saying(HookOutcome::Blocked, Some(joined(Some(reason), context)));
        }
        let gives_context = matches!(
            event,
            HookEvent::UserPromptSubmit | HookEvent::SessionStart | HookEvent::PostToolUse
        );
        Self::saying(HookOutcome::Ok, context.filter(|_| gives_context))
    }
}

/// A PreToolUse answer: `permissionDecision` (or the older top-level `decision`
/// `approve`/`block`), its reason, and `updatedInput`; `invalid_output` when they do not fit.
fn pre_tool_use(answer: &Map<String, Value>, specific: Option<&Map<String, Value>>) -> HookAnswer {
    let invalid = |why: String| HookAnswer::failed(HookOutcome::InvalidOutput, why);
    let field = |name: &str| specific.and_then(|s| s.get(name));
    let updated = match field("updatedInput") {
        None | Some(Value::Null) => None,
        Some(Value::Object(input)) => Some(Value::Object(input.clone())),
        Some(_) => return invalid("`updatedInput` is not a JSON object".to_owned()),
    };
    let (decision, reason) = match field("permissionDecision") {
        Some(d) => (
            d.as_str(),
            field("permissionDecisionReason").and_then(Value::as_str),
        ),
        None => (
            answer.get("decision").and_then(Value::as_str),
            answer.get("reason").and_then(Value::as_str),
        ),
    };
    let outcome = match decision {
        Some("allow" | "approve") => HookOutcome::Allowed,
        Some("deny" | "block") => HookOutcome::Denied,
        Some("ask") => HookOutcome::Asked,
        None if updated.is_some() => HookOutcome::Rewritten,
        None => HookOutcome::Ok,
        Some(other) => {
            return invalid(format!(
                "`permissionDecision` `{other}` is none of allow, deny, ask"
            ));
        }
    };
    let reason = reason.map(str::to_owned);
    let reason = match (&outcome, reason) {
        (HookOutcome::Denied, None) => {
            Some("a PreToolUse hook denied this call and gave no reason".to_owned())
        }
        (_, reason) => reason,
    };
    let mut read = HookAnswer::saying(outcome.clone(), reason);
    if outcome != HookOutcome::Denied {
        read.updated_input = updated;
    }
    read
}

/// Whether exit code 2 or `decision: block` blocks `event`'s action (Claude Code's table);
/// elsewhere it is an error the action ignores.
fn can_block(event: HookEvent) -> bool {
    matches!(
        event,
        HookEvent::PreToolUse
            | HookEvent::PostToolUse
            | HookEvent::UserPromptSubmit
            | HookEvent::Stop
            | HookEvent::SubagentStop
    )
}

/// A text field of an answer meant for the user (`stopReason`, `systemMessage`): capped,
/// `None` when absent or blank.
fn user_text(answer: &Map<String, Value>, name: &str) -> Option<String> {
    answer
        .get(name)
        .and_then(Value::as_str)
        .filter(|t| !t.trim().is_empty())
        .map(capped)
}

fn joined(first: Option<String>, second: Option<String>) -> String {
    [first, second]
        .into_iter()
        .flatten()
        .filter(|t| !t.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

fn capped(text: &str) -> String {
    match text.char_indices().nth(MAX_HOOK_MESSAGE_CHARS) {
        Some((at, _)) => format!(
            "{}… [cut at {MAX_HOOK_MESSAGE_CHARS} characters]",
            &text[..at]
        ),
        None => text.to_owned(),
    }
}

/// What the hooks of one event decided together, from their recorded runs (so a replay
/// decides the same from the runlog): a block or a deny wins over an ask, an ask over an
/// allow; contexts are all given, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookVerdict {
    /// Blocked (exit 2, `decision: block`), with the reasons.
    pub blocked: Option<String>,
    /// The PreToolUse permission decision that won, with its reason.
    pub permission: Option<(Permission, Option<String>)>,
    /// The call's rewritten arguments (the first hook's that gave any).
    pub updated_input: Option<Value>,
    /// Additional context for the model, in the hooks' order.
    pub context: Vec<String>,
    /// A hook answered `continue: false`: the run ends after this hook point, whatever the
    /// others decided (ADR-125).
    pub stopped: bool,
}

/// A PreToolUse permission decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    /// Run it without the approval policy's ask.
    Allow,
    /// Ask a person first.
    Ask,
    /// Do not run it.
    Deny,
}

impl HookVerdict {
    /// The verdict of `runs`, the hooks of one event.
    pub fn of(runs: &[HookRun]) -> Self {
        let mut verdict = Self::default();
        let mut blocked = Vec::new();
        for run in runs {
            let message = run.message.clone();
            if verdict.updated_input.is_none() && run.outcome != HookOutcome::Denied {
                verdict.updated_input.clone_from(&run.updated_input);
            }
            let permission = match run.outcome {
                HookOutcome::Blocked => {
                    blocked.extend(message);
                    continue;
                }
                HookOutcome::Ok => {
                    verdict.context.extend(message);
                    continue;
                }
                HookOutcome::Denied => Permission::Deny,
                HookOutcome::Asked => Permission::Ask,
                HookOutcome::Allowed => Permission::Allow,
                HookOutcome::Stopped => {
                    verdict.stopped = true;
                    continue;
                }
                _ => continue,
            };
            if verdict
                .permission
                .as_ref()
                .is_none_or(|(p, _)| permission > *p)
            {
                verdict.permission = Some((permission, message));
            }
        }
        if !blocked.is_empty() {
            verdict.blocked = Some(blocked.join("\n"));
        }
        verdict
    }

    /// The text for the model beside what it already gets: the contexts, one per line.
    pub fn context_text(&self) -> Option<String> {
        (!self.context.is_empty()).then(|| self.context.join("\n"))
    }
}

#[cfg(test)]
mod tests;
