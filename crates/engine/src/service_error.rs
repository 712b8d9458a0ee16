//! Why the service could not run a request, typed, so each front end maps it once: the CLI
//! to an exit code, the HTTP API to a status, the MCP server to a tool error, A2A to a
//! JSON-RPC error or a rejected task. Each variant carries its cause (a port's error, or the
//! fields its message is made of); [`ServiceError::code`] sorts it into the stable codes the
//! front ends' tables are keyed on, and [`ServiceError::remedy`] derives from that code
//! (ADR-097).

use std::path::PathBuf;

use fabric_domain::{DomainError, RunId, RunStatus};
use thiserror::Error;

use crate::CoreError;
use crate::ports::{SetupError, StoreError, WorkspaceError};

/// Why a request did not become a run, or a run ended inside the fabric rather than with a
/// status of its own. Every message names the problem and the fix.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ServiceError {
    /// The request is wrong as given (an empty prompt, a pack naming a specialist twice, a
    /// sandbox this host cannot enforce): the caller can fix it.
    #[error(transparent)]
    Invalid(#[from] InvalidRequest),
    /// The run to continue has already ended: there is nothing to continue.
    #[error("run `{id}` already ended ({status}); there is nothing to continue")]
    AlreadyEnded {
        /// The run.
        id: RunId,
        /// How it ended.
        status: RunStatus,
    },
    /// No specialist with that id.
    #[error("no specialist `{id}`; the specialists are: {known}")]
    UnknownSpecialist {
        /// The id asked for.
        id: String,
        /// The ids there are, listed for the message.
        known: String,
    },
    /// No model key with that name.
    #[error("no model key `{key}`; the configured keys are: {known}")]
    UnknownModelKey {
        /// The key asked for.
        key: String,
        /// The keys there are, listed for the message.
        known: String,
    },
    /// `cloud_fallback.model_key` names no model key.
    #[error("cloud_fallback.model_key names `{key}`, which is not a model key")]
    UnknownFallbackKey {
        /// The key named.
        key: String,
    },
    /// The project a run was asked to work on cannot be used (no repository there, no
    /// commit, a base that names nothing, a taken branch, no git): the caller can fix it.
    #[error(transparent)]
    InvalidProject(#[from] ProjectError),
    /// The configuration lacks what the request needs, fixed in the config or the
    /// environment: a model key whose API key variable is unset.
    #[error("model key `{key}` needs an API key: {fix}")]
    Misconfigured {
        /// The model key.
        key: String,
        /// What to set, from the chat factory.
        fix: String,
    },
    /// The model a request needs cannot be used now (server down, no tool-capable model,
    /// a failed pull).
    #[error(transparent)]
    ModelUnavailable(SetupError),
    /// Every model key the run could use has spent its daily budget (`daily_budget`).
    #[error(transparent)]
    BudgetSpent(DailySpent),
    /// The service has as many runs in flight as it may.
    #[error("{limit} runs are in flight, the most this server runs at once; try again shortly")]
    TooManyRuns {
        /// The limit.
        limit: usize,
    },
    /// The service is shutting down and starts no new runs.
    #[error("the fabric is shutting down and starts no new runs")]
    ShuttingDown,
    /// The run was cancelled while it was being prepared.
    #[error("the run was cancelled before it started")]
    Cancelled,
    /// The run store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run's own code panicked; it was ended `failed`.
    #[error("the run panicked: {message}")]
    Panicked {
        /// The panic's payload, when it was a string (ADR-097: the one message kept as
        /// text, since a panic carries nothing else).
        message: String,
    },
    /// Anything else inside the fabric.
    #[error(transparent)]
    Internal(#[from] Fault),
    /// The earlier run a request asks to continue cannot be continued (issue #42).
    #[error(transparent)]
    Conversation(#[from] ConversationError),
}

/// Why a run cannot continue (or fork) the conversation of the earlier run it names.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ConversationError {
    /// No run has this id.
    #[error("no run `{id}` to continue; `fabric logs list` shows the runs and their ids")]
    NoSuchRun {
        /// The id asked for.
        id: RunId,
    },
    /// The run has not ended.
    #[error(
        "run `{id}` has not ended, so it cannot be continued yet: wait for its end (or cancel it, or `fabric resume {id}` it if its process stopped), then continue it"
    )]
    NotEnded {
        /// The run.
        id: RunId,
    },
    /// The request names a project other than the earlier run's.
    #[error(
        "run `{id}` worked on {recorded}, not on {asked}; continue it without a project (its own is used), or start a new run on {asked}"
    )]
    OtherProject {
        /// The run.
        id: RunId,
        /// Where it worked, in words (`project /src/app` or `a scratch workspace`).
        recorded: String,
        /// What the request named, in words.
        asked: String,
    },
    /// The run's runlog cannot be read back into its conversation.
    #[error("run `{id}` cannot be continued: its runlog cannot be read ({detail})")]
    Unreadable {
        /// The run.
        id: RunId,
        /// Why.
        detail: String,
    },
    /// A parallel task force: its members' conversations are separate.
    #[error(
        "run `{id}` was a parallel task force ({specialists}), whose members each had a conversation of their own; continue one of them: name it with `--pack` (`pack`)"
    )]
    WhichMember {
        /// The run.
        id: RunId,
        /// Its specialists, listed.
        specialists: String,
    },
    /// More than one specialist asked for.
    #[error(
        "a continued run goes on with one specialist, and `--pack` (`pack`) names {count}; name one (by default the earlier run's)"
    )]
    OneSpecialist {
        /// How many were named.
        count: usize,
    },
    /// The run's workspace cannot be reopened or forked.
    #[error("the workspace of run `{id}` cannot be continued: {cause}")]
    Workspace {
        /// The run.
        id: RunId,
        /// Why.
        cause: WorkspaceError,
    },
}

/// What is wrong with a request, each with its own fix.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum InvalidRequest {
    /// The prompt is empty.
    #[error("the prompt is empty; say what the agent should do")]
    EmptyPrompt,
    /// A project asked of a fabric without versioned workspaces.
    #[error(
        "this fabric cannot work on a project: it was started without versioned workspaces (git); run without a project"
    )]
    NoVersioning,
    /// The run to continue is already running here.
    #[error("run `{id}` is already running in this process")]
    AlreadyRunning {
        /// The run.
        id: RunId,
    },
    /// `--pack` names a specialist twice.
    #[error("`--pack` names `{id}` twice")]
    PackTwice {
        /// The specialist.
        id: String,
    },
    /// `budget.max_cost_usd` with a model key that has no price.
    #[error(
        "`budget.max_cost_usd` needs a price for every model key a run uses, and `{key}` has none; add `price_per_mtok: {{input: …, output: …}}` (US dollars per million tokens) to `models.{key}`"
    )]
    NoPrice {
        /// The model key.
        key: String,
    },
    /// No run has this id.
    #[error("no run `{id}`; `fabric logs list` shows the runs and their ids")]
    NoSuchRun {
        /// The id asked for.
        id: RunId,
    },
    /// The run has not ended, so its workspace may not be touched.
    #[error(
        "run `{id}` has not ended (it is running, or its process stopped: `fabric resume {id}` or cancel it first)"
    )]
    NotEnded {
        /// The run.
        id: RunId,
    },
    /// An answer for a run that waits for none (issue #42).
    #[error(
        "run `{id}` is not waiting for an answer (it is {status}); only a run whose status is `input_required` takes one"
    )]
    NotWaiting {
        /// The run.
        id: RunId,
        /// What it is doing instead.
        status: fabric_domain::RunStatus,
    },
    /// A message for a run that has ended (issue #42).
    #[error(
        "run `{id}` has ended ({status}); nothing can be said to it any more. Continue the conversation in a new run instead"
    )]
    NotRunning {
        /// The run.
        id: RunId,
        /// How it ended.
        status: fabric_domain::RunStatus,
    },
    /// An answer or a message that is empty or too long.
    #[error("the {what} has {chars} characters; it must have 1 to {max}")]
    BadLength {
        /// `answer` or `message`.
        what: &'static str,
        /// How many it has.
        chars: usize,
        /// The most it may have.
        max: usize,
    },
    /// An answer to an approval that decides nothing.
    #[error(
        "run `{id}` waits for an approval of `{tool}`: answer `approve`, `approve_for_run` or `deny` (with a reason after it, or as `decision` beside the answer's text)"
    )]
    NoDecision {
        /// The run.
        id: RunId,
        /// The tool whose call waits.
        tool: String,
    },
    /// The run's workspace is versioned and this fabric has no versioned workspaces.
    #[error(
        "run `{id}` has a versioned workspace, and this fabric was started without versioned workspaces"
    )]
    NotVersioned {
        /// The run.
        id: RunId,
    },
    /// The tools, the sandbox or the container a specialist asks for cannot be set up.
    #[error(transparent)]
    Setup(SetupError),
    /// An ended run's workspace cannot be opened as asked (the user's to fix, or gone).
    #[error(transparent)]
    Workspace(WorkspaceError),
    /// The task is not runnable as given (a specialist or tool definition is unusable).
    #[error(transparent)]
    Task(CoreError),
    /// A checkpoint that is not one of the run's (issue #42: `GET /runs/{id}/diff`).
    #[error("run `{id}` recorded no checkpoint `{commit}`; {known}")]
    NoSuchCheckpoint {
        /// The run.
        id: RunId,
        /// The commit asked for.
        commit: String,
        /// The run's checkpoints, said for the person who asked.
        known: String,
    },
}

/// Why the project a request names cannot be used.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ProjectError {
    /// `server.project_roots` is empty: no directory may be named.
    #[error(
        "`project` `{}` is refused: this server lets requests work on no directory of its machine (`server.project_roots` is empty, the default); its operator may list the directories requests may name in `server.project_roots` of its config, or run `fabric run --project` there",
        project.display()
    )]
    NoRoots {
        /// The path given.
        project: PathBuf,
    },
    /// Inside a root, but it cannot be resolved (it does not exist).
    #[error(
        "`project` `{}` cannot be used: {detail}; give an existing directory of a repository's working tree",
        project.display()
    )]
    Unresolvable {
        /// The path given.
        project: PathBuf,
        /// The system's words.
        detail: String,
    },
    /// Outside every root.
    #[error(
        "`project` `{}` is outside the directories this server lets requests work on (`server.project_roots`: {roots}; symbolic links and `..` are resolved before the check); name a directory inside one of them, or ask the server's operator to add it to `server.project_roots`",
        project.display()
    )]
    OutsideRoots {
        /// The path given.
        project: PathBuf,
        /// The roots, listed for the message.
        roots: String,
    },
    /// The path cannot be made absolute.
    #[error(
        "project `{}`: {detail}; give the path of a repository's working tree",
        project.display()
    )]
    NotAbsolute {
        /// The path given.
        project: PathBuf,
        /// The system's words.
        detail: String,
    },
    /// A base asked of a directory that is no repository.
    #[error(
        "{} is not in a git repository, so there is no base to start from; leave out `--base` to work on a copy of it",
        path.display()
    )]
    NoBase {
        /// The directory.
        path: PathBuf,
    },
    /// The worktree cannot be made for a reason the user can fix.
    #[error(transparent)]
    Workspace(WorkspaceError),
    /// The project's path is not UTF-8, and the run queue keeps requests as JSON.
    #[error(
        "the project path `{}` is not UTF-8, and the run queue keeps requests as JSON; give the project as a UTF-8 path, or run without `store.queue`",
        path.display()
    )]
    NotUtf8 {
        /// The path as given.
        path: PathBuf,
    },
}

/// Why a model key's daily budget stops the run.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum DailySpent {
    /// The key the request named is spent.
    #[error(
        "{why}; it resets at midnight ({zone} time). Run with another `--model-key`, or raise `daily_budget.{key}`"
    )]
    Named {
        /// What was spent, from the daily budget.
        why: String,
        /// The budget's time zone.
        zone: String,
        /// The key.
        key: String,
    },
    /// Every key the run could fall back to is spent too.
    #[error(
        "{why}, and no other model key has budget left today; it resets at midnight ({zone} time). Raise `daily_budget` or wait"
    )]
    NoneLeft {
        /// What was spent, from the daily budget.
        why: String,
        /// The budget's time zone.
        zone: String,
    },
}

/// A fault inside the fabric: the caller can only report it.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum Fault {
    /// A preparation port failed in a way that is no one's input (a client that cannot be
    /// built).
    #[error(transparent)]
    Setup(SetupError),
    /// The preparation chose a model key it built no client for.
    #[error("no client for `{key}`")]
    NoClient {
        /// The model key.
        key: String,
    },
    /// The run's task went away before it answered.
    #[error("the run's task ended before preparing it")]
    EndedBeforePreparing,
    /// The run's task went away without an outcome.
    #[error("the run's task ended without an outcome")]
    EndedWithoutOutcome,
    /// A project's worktree could not be made, for a reason that is the fabric's.
    #[error("cannot open the run's workspace: {0}")]
    OpenWorkspace(WorkspaceError),
    /// An ended run's workspace could not be opened or removed.
    #[error(transparent)]
    Workspace(WorkspaceError),
    /// The remote of an interrupted run's workspace does not answer now.
    #[error(
        "run `{id}` cannot be continued now: {cause}; it stays interrupted, so `fabric resume {id}` it once the remote answers"
    )]
    RemoteDown {
        /// The run.
        id: RunId,
        /// Why the workspace could not be restored.
        cause: WorkspaceError,
    },
    /// An event could not be encoded.
    #[error(transparent)]
    Encode(DomainError),
    /// The files of the run a new run continues could not be copied into its workspace.
    #[error("cannot copy the earlier run's files from {}: {detail}", from.display())]
    Copy {
        /// The earlier run's workspace.
        from: PathBuf,
        /// The system's words.
        detail: String,
    },
    /// The queue's feed of a run stopped before the run's end.
    #[error("the feed of run `{id}` stopped before its end; `GET /runs/{id}` shows where it is")]
    FeedStopped {
        /// The run.
        id: RunId,
    },
}

/// The stable codes of the service's errors, the one sorting every front end's table is
/// keyed on. The strings are the ones on the wire (the HTTP API's `error.code`, or the
/// CLI's `--json` code where HTTP has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The request is wrong as given.
    InvalidRequest,
    /// No such specialist.
    UnknownSpecialist,
    /// No such model key.
    UnknownModelKey,
    /// The project cannot be used.
    InvalidProject,
    /// The configuration lacks what the request needs.
    ConfigError,
    /// The model cannot be used now.
    ModelUnavailable,
    /// The daily budget is spent.
    DailyBudgetSpent,
    /// The service is full.
    TooManyRuns,
    /// The service is shutting down.
    ShuttingDown,
    /// The run was cancelled before it started.
    Cancelled,
    /// A fault inside the fabric.
    Internal,
    /// The run to continue does not exist (issue #42).
    RunNotFound,
    /// The run to continue has not ended.
    RunNotEnded,
    /// The run to continue cannot be continued as asked.
    CannotContinue,
}

impl ErrorCode {
    /// The code as sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::UnknownSpecialist => "unknown_specialist",
            Self::UnknownModelKey => "unknown_model_key",
            Self::InvalidProject => "invalid_project",
            Self::ConfigError => "config_error",
            Self::ModelUnavailable => "model_unavailable",
            Self::DailyBudgetSpent => "daily_budget_spent",
            Self::TooManyRuns => "too_many_runs",
            Self::ShuttingDown => "shutting_down",
            Self::Cancelled => "cancelled",
            Self::Internal => "internal",
            Self::RunNotFound => "run_not_found",
            Self::RunNotEnded => "run_not_ended",
            Self::CannotContinue => "cannot_continue",
        }
    }

    /// What the caller must do: fix the request, try again shortly (the service is full or
    /// a model is down), or report it.
    pub fn remedy(self) -> crate::Remedy {
        match self {
            Self::InvalidRequest
            | Self::UnknownSpecialist
            | Self::UnknownModelKey
            | Self::InvalidProject
            | Self::RunNotFound
            | Self::RunNotEnded
            | Self::CannotContinue => crate::Remedy::FixInput,
            Self::ModelUnavailable | Self::TooManyRuns => crate::Remedy::Retry,
            // The operator's to fix, in the server's config or environment.
            Self::ConfigError
            | Self::DailyBudgetSpent
            | Self::ShuttingDown
            | Self::Cancelled
            | Self::Internal => crate::Remedy::Report,
        }
    }

    /// Whether the fabric itself, not the caller's request or the models, is at fault (the
    /// service logs these as warnings).
    pub fn is_the_fabrics(self) -> bool {
        matches!(
            self,
            Self::TooManyRuns | Self::ShuttingDown | Self::Internal
        )
    }
}

impl ServiceError {
    /// The stable code: the one match over the variants every front end's table derives
    /// from.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Invalid(_) | Self::AlreadyEnded { .. } => ErrorCode::InvalidRequest,
            Self::UnknownSpecialist { .. } => ErrorCode::UnknownSpecialist,
            Self::UnknownModelKey { .. } | Self::UnknownFallbackKey { .. } => {
                ErrorCode::UnknownModelKey
            }
            Self::InvalidProject(_) => ErrorCode::InvalidProject,
            Self::Misconfigured { .. } => ErrorCode::ConfigError,
            Self::ModelUnavailable(_) => ErrorCode::ModelUnavailable,
            Self::BudgetSpent(_) => ErrorCode::DailyBudgetSpent,
            Self::TooManyRuns { .. } => ErrorCode::TooManyRuns,
            Self::ShuttingDown => ErrorCode::ShuttingDown,
            Self::Cancelled => ErrorCode::Cancelled,
            Self::Store(_) | Self::Panicked { .. } | Self::Internal(_) => ErrorCode::Internal,
            Self::Conversation(e) => match e {
                ConversationError::NoSuchRun { .. } => ErrorCode::RunNotFound,
                ConversationError::NotEnded { .. } => ErrorCode::RunNotEnded,
                ConversationError::OtherProject { .. }
                | ConversationError::Unreadable { .. }
                | ConversationError::WhichMember { .. }
                | ConversationError::OneSpecialist { .. }
                | ConversationError::Workspace { .. } => ErrorCode::CannotContinue,
            },
        }
    }

    /// What the caller must do, by [`ServiceError::code`].
    pub fn remedy(&self) -> crate::Remedy {
        self.code().remedy()
    }
}

impl From<CoreError> for ServiceError {
    fn from(error: CoreError) -> Self {
        match error {
            CoreError::Store(e) => Self::Store(e),
            other => Self::Invalid(InvalidRequest::Task(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Remedy;

    fn id() -> RunId {
        RunId::parse("20260101-120000-000-0123abcd").unwrap_or_else(|e| panic!("{e}"))
    }

    /// The typed causes say what the strings said, word for word, and each is sorted into
    /// the code the front ends' tables are keyed on.
    #[test]
    fn issue_41_typed_service_errors_keep_their_words_and_have_one_code() {
        let id = id();
        let cases: Vec<(ServiceError, ErrorCode, &str)> = vec![
            (
                InvalidRequest::NoSuchRun { id: id.clone() }.into(),
                ErrorCode::InvalidRequest,
                "no run `20260101-120000-000-0123abcd`; `fabric logs list` shows the runs and their ids",
            ),
            (
                ServiceError::AlreadyEnded {
                    id: id.clone(),
                    status: RunStatus::Completed,
                },
                ErrorCode::InvalidRequest,
                "run `20260101-120000-000-0123abcd` already ended (completed); there is nothing to continue",
            ),
            (
                ServiceError::UnknownSpecialist {
                    id: "law".to_owned(),
                    known: "engineering, research".to_owned(),
                },
                ErrorCode::UnknownSpecialist,
                "no specialist `law`; the specialists are: engineering, research",
            ),
            (
                ProjectError::NoBase {
                    path: PathBuf::from("/src/x"),
                }
                .into(),
                ErrorCode::InvalidProject,
                "/src/x is not in a git repository, so there is no base to start from; leave out `--base` to work on a copy of it",
            ),
            (
                ServiceError::Misconfigured {
                    key: "cloud".to_owned(),
                    fix: "set `CLOUD_KEY`".to_owned(),
                },
                ErrorCode::ConfigError,
                "model key `cloud` needs an API key: set `CLOUD_KEY`",
            ),
            (
                ServiceError::BudgetSpent(DailySpent::NoneLeft {
                    why: "`local` spent its 1000 tokens today".to_owned(),
                    zone: "UTC".to_owned(),
                }),
                ErrorCode::DailyBudgetSpent,
                "`local` spent its 1000 tokens today, and no other model key has budget left today; it resets at midnight (UTC time). Raise `daily_budget` or wait",
            ),
            (
                Fault::FeedStopped { id: id.clone() }.into(),
                ErrorCode::Internal,
                "the feed of run `20260101-120000-000-0123abcd` stopped before its end; `GET /runs/20260101-120000-000-0123abcd` shows where it is",
            ),
            (
                ServiceError::Panicked {
                    message: "a bug".to_owned(),
                },
                ErrorCode::Internal,
                "the run panicked: a bug",
            ),
        ];
        for (error, code, words) in cases {
            assert_eq!((error.code(), error.to_string().as_str()), (code, words));
        }
        let down = ServiceError::ModelUnavailable(SetupError::ModelUnavailable("down".to_owned()));
        assert_eq!(down.code().as_str(), "model_unavailable");
        assert_eq!(down.remedy(), Remedy::Retry);
        assert_eq!(
            ServiceError::from(InvalidRequest::EmptyPrompt).remedy(),
            Remedy::FixInput
        );
        assert!(
            ServiceError::Store(StoreError::Suspended)
                .code()
                .is_the_fabrics()
        );
        assert!(!ServiceError::Cancelled.code().is_the_fabrics());
    }
}
