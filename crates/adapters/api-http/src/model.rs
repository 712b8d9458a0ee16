//! The bodies the API takes and gives, with their OpenAPI schemas.
//!
//! Runlog events go out exactly as the runlog stores them (`fabric_domain::RunEvent`);
//! [`EventDoc`] only describes that shape for the OpenAPI document.

use fabric_core::Liveness;
use fabric_domain::{RunEvent, RunId, RunStatus, RunSummary};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::ApiError;

/// Most model calls a request may ask for, as `fabric run --max-steps`; the server's own
/// `max_steps` may be lower, and a request may not ask for more than that.
pub const MAX_STEPS_LIMIT: u32 = 1000;

/// Every run status as the API writes it, in the runlog's order.
pub const STATUSES: [&str; 16] = [
    "running",
    "completed",
    "completed_without_finish",
    "partial",
    "max_steps_exceeded",
    "budget_exceeded",
    "llm_error",
    "model_unsupported",
    "cancelled",
    "failed",
    "interrupted",
    "quality_gate_failed",
    "context_window_exceeded",
    "stalled",
    "input_required",
    "unanswered",
];

/// A task to run: the body of `POST /run`, `POST /run/stream` and `POST /runs`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// What the agent should do. Must not be blank.
    // The pattern is `formats::NOT_BLANK_PATTERN`, published by `openapi::publish_formats`.
    #[schema(min_length = 1, example = "Create hello.txt containing Hello World")]
    pub prompt: String,
    /// The specialist (`--pack`), or a task force as on the command line: `a,b` (in that
    /// order); default: recruited by the configured routing. The names are the server's
    /// config, so this document cannot list them: any other is 422 `unknown_specialist`,
    /// whose message lists them.
    #[serde(default)]
    // The pattern is `formats::NOT_BLANK_PATTERN`, published by `openapi::publish_formats`.
    #[schema(min_length = 1)]
    pub pack: Option<String>,
    /// The model key from the config; default: the specialist's, else `default_model_key`.
    /// As with `pack`, any key the config does not have is 422 `unknown_model_key`, whose
    /// message lists them.
    #[serde(default)]
    // The pattern is `formats::NOT_BLANK_PATTERN`, published by `openapi::publish_formats`.
    #[schema(min_length = 1)]
    pub model_key: Option<String>,
    /// Whether tools may use the network; default: `network_allowed` from the server's
    /// config. `true` is refused (403 `not_permitted`) when the config says `false`.
    #[serde(default)]
    pub network_allowed: Option<bool>,
    /// Most model calls (1–1000); default: `max_steps` from the server's config. More than
    /// the config's `max_steps` is refused (403 `not_permitted`).
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_steps: Option<u32>,
    /// A git repository on the server's machine to work on (an absolute path inside its
    /// working tree): the run gets a worktree on its own branch `fabric/<run_id>`, and its
    /// result is that branch (docs/PROJECTS.md). Only inside the directories the server's
    /// config lists in `server.project_roots` (none by default), its real path resolved;
    /// otherwise 422 `invalid_project`. Default: a scratch workspace.
    #[serde(default)]
    #[schema(min_length = 1, pattern = "^/", example = "/home/me/src/app")]
    pub project: Option<String>,
    /// With `project`: the commit, branch or tag to start from; default `HEAD`.
    #[serde(default)]
    #[schema(min_length = 1)]
    pub base: Option<String>,
    /// Go on with the conversation of an ended run (docs/INTERACTIVE.md): `prompt` is its
    /// next user message, the specialist and model key are that run's unless `pack` or
    /// `model_key` say otherwise, and a project run works on that run's branch (or, with
    /// `fork`, a new branch from its head). An unknown run is 404 `run_not_found`, one that
    /// has not ended 409 `run_not_ended`, one that cannot be continued as asked 422
    /// `cannot_continue`.
    #[serde(default)]
    pub continues: Option<ContinuesBody>,
}

/// Which ended run a new run continues (`continues` of a run request).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContinuesBody {
    /// The earlier run's id.
    #[schema(
        min_length = 1,
        pattern = r"^[A-Za-z0-9_-]{1,128}$",
        example = "20261123-180202-671-9afa8e3b"
    )]
    pub run_id: String,
    /// `true`: on a new branch from the earlier run's head, its own branch left alone;
    /// `false` (the default): on the earlier run's branch.
    #[serde(default)]
    pub fork: bool,
}

/// An integer as JSON Schema has it: `20`, and also `20.0` or `2e1`, numbers without a
/// fraction, which serde's `u32` refuses (issue #14: schemathesis sent `260.0` for
/// `max_steps`, valid for the document's `integer`, and got 422).
fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let Some(number) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    let whole = match number.as_u64() {
        Some(n) => u32::try_from(n).ok(),
        None => number
            .as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(f))
            // Exact: a whole number within `u32`'s range.
            .map(|f| f as u32),
    };
    whole.map(Some).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "`max_steps` must be a whole number between 1 and {MAX_STEPS_LIMIT}, got {number}"
        ))
    })
}

impl RunRequest {
    /// Checks what the types cannot: a blank prompt, a step limit out of range.
    pub fn validate(&self) -> Result<(), ApiError> {
        if let Some(project) = &self.project
            && !std::path::Path::new(project).is_absolute()
        {
            return Err(ApiError::InvalidProject(format!(
                "`project` must be an absolute path on the server's machine, got `{project}`"
            )));
        }
        if self.base.is_some() && self.project.is_none() {
            return Err(ApiError::InvalidProject(
                "`base` needs `project`: it names where a run on a project starts".to_owned(),
            ));
        }
        // Blank as the document's pattern has it, which is also blank to the core's `trim`.
        if crate::formats::is_blank(&self.prompt) {
            return Err(ApiError::InvalidRequest(
                "`prompt` is empty; say what the agent should do".to_owned(),
            ));
        }
        if let Some(n) = self.max_steps
            && !(1..=MAX_STEPS_LIMIT).contains(&n)
        {
            return Err(ApiError::InvalidRequest(format!(
                "`max_steps` must be between 1 and {MAX_STEPS_LIMIT}, got {n}"
            )));
        }
        if let Some(continues) = &self.continues {
            RunId::parse(&continues.run_id)
                .map_err(|e| ApiError::InvalidRunId(format!("`continues.run_id`: {e}")))?;
        }
        for (name, value) in [("pack", &self.pack), ("model_key", &self.model_key)] {
            if value.as_deref().is_some_and(crate::formats::is_blank) {
                return Err(ApiError::InvalidRequest(format!(
                    "`{name}` is empty; leave it out to use the default"
                )));
            }
        }
        Ok(())
    }
}

/// The answer of `GET /health`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok` when the server answers.
    pub status: String,
    /// The fabric's version.
    pub version: String,
    /// Runs in flight in this server.
    pub runs_in_flight: usize,
}

/// The answer of `POST /runs`: the run was started.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunAccepted {
    /// The new run's id.
    #[schema(value_type = String)]
    pub run_id: RunId,
    /// `running`.
    #[schema(value_type = String)]
    pub status: RunStatus,
    /// Where to follow its events (`GET`, JSON or SSE).
    pub events_url: String,
    /// Where to read its status.
    pub status_url: String,
}

/// The answer of `POST /run`: the finish payload's fields plus `_meta`, exactly the object
/// `fabric run --json` prints. On a run that did not complete, only `_meta`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunResultDoc {
    /// How the run went.
    #[serde(rename = "_meta")]
    pub meta: RunMetaDoc,
}

/// `_meta` of a run result.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunMetaDoc {
    /// The run.
    pub run_id: String,
    /// `completed`, `completed_without_finish`, `partial`, `max_steps_exceeded`,
    /// `budget_exceeded`, `llm_error`, `model_unsupported`, `cancelled` or `failed`.
    pub status: String,
    /// Why it failed, or how it completed when not through `finish_task`.
    pub reason: Option<String>,
    /// Who worked on it.
    pub specialist_ids: Vec<String>,
    /// The run's workspace directory on the server.
    pub workspace: String,
    /// The runlog file on the server.
    pub runlog: String,
    /// The model key.
    pub model_key: String,
    /// The model name.
    pub model: String,
    /// Model calls made.
    pub steps: u32,
    /// Tokens used.
    pub usage: Value,
    /// How the specialists were chosen: `{"method", "reason"}` (`method` is `explicit`,
    /// `keyword`, `llm` or `keyword_fallback`); null when the run stopped before choosing.
    pub routing: Option<Value>,
    /// How discovery chose the model, when it did.
    pub model_reason: Option<String>,
}

/// One runlog line: the same object the runlog stores and the SSE `data:` carries.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventDoc {
    /// Position in the run from 0, without gaps; also the SSE `id`.
    pub seq: u64,
    /// Seconds since the Unix epoch.
    pub ts: f64,
    /// What happened (`run_start`, `llm_request`, ..., `run_complete`, `run_failed`); also
    /// the SSE `event`.
    pub kind: String,
    /// The loop step, or null outside the loop.
    pub step: Option<u32>,
    /// Kind-specific fields (docs/RUNLOG.md).
    pub payload: Value,
}

/// One frame of an SSE stream of runlog events, described the way OpenAPI 3.1 describes an
/// item of a `text/event-stream` (and 3.2's `itemSchema`): the frame's fields, with the runlog
/// line as the JSON content of `data`. Describing the stream by [`EventDoc`] alone read as if
/// each frame were the runlog object itself (issue #14).
pub struct SseFrameDoc;

impl utoipa::PartialSchema for SseFrameDoc {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        let text = |description: &str| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some(description))
        };
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(
                "One Server-Sent Event: `id` is the event's `seq`, `event` its `kind`, `data` the runlog line (an `EventDoc`, as JSON). Between events a live stream may also carry frames that are not in the runlog and have no `id`: `event: notice` (`data: {\"run_id\", \"notice\"}`) and `event: tool_output` (a running tool's line, `data: {\"call_id\", \"tool\", \"step\", \"member\"?, \"stream\", \"line\"}`, or `{…, \"dropped\": N}` for lines left out; docs/HTTP.md).",
            ))
            .property(
                "id",
                text("The event's `seq`; send it back as `Last-Event-ID` to resume after it. (`notice` and `tool_output` frames, which are not events, have none.)")
                    .pattern(Some(crate::formats::EVENT_ID_PATTERN)),
            )
            .property("event", text("The event's `kind`."))
            .property(
                "data",
                text("The runlog line, byte for byte.")
                    .content_media_type("application/json")
                    .content_schema(Some(utoipa::openapi::Ref::from_schema_name("EventDoc"))),
            )
            .required("id")
            .required("event")
            .required("data")
            .into()
    }
}

impl ToSchema for SseFrameDoc {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        schemas.push((
            <EventDoc as ToSchema>::name().into(),
            <EventDoc as utoipa::PartialSchema>::schema(),
        ));
        <EventDoc as ToSchema>::schemas(schemas);
    }
}

/// The answer of `GET /runs/{id}/events` as JSON.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventList {
    /// The run.
    #[schema(value_type = String)]
    pub run_id: RunId,
    /// The run's status now.
    #[schema(value_type = String)]
    pub status: RunStatus,
    /// The events after `after` (all without it), in order.
    #[schema(value_type = Vec<EventDoc>)]
    pub events: Vec<RunEvent>,
}

/// The answer of `GET /runs/{id}/status`.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatusView {
    /// The run.
    #[schema(value_type = String)]
    pub run_id: RunId,
    /// `running`, or how it ended: `completed`, `completed_without_finish`, `partial`,
    /// `max_steps_exceeded`, `budget_exceeded`, `llm_error`, `model_unsupported`, `cancelled`,
    /// `failed`.
    #[schema(value_type = String)]
    pub status: RunStatus,
    /// Whether this server is running it now (and can cancel it).
    pub live: bool,
    /// `true` when the run is `running` but no process carries it on any more (it was
    /// killed or crashed: its runlog's lock is free): `fabric resume <id>` continues it. The
    /// CLI shows it as `interrupted (resumable)`. Derived at each read, never stored; false
    /// when this server cannot tell (the run's runlog is on another machine).
    pub resumable: bool,
    /// `true` when the run is `running` but waits for a worker to claim it (`store.queue:
    /// true`): no worker has taken it yet, or its worker's lease ran out and none has taken
    /// it over yet. Derived at each read, never stored.
    pub queued: bool,
}

/// A conversation up to one of its runs.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConversationDoc {
    /// Its first run.
    #[schema(value_type = String)]
    pub first: RunId,
    /// Runs from the first up to this one.
    pub runs: usize,
    /// Their model calls.
    pub steps: u32,
    /// Their tokens.
    pub tokens: u64,
}

impl From<fabric_core::service::ConversationTotals> for ConversationDoc {
    fn from(t: fabric_core::service::ConversationTotals) -> Self {
        Self {
            first: t.first,
            runs: t.runs,
            steps: t.steps,
            tokens: t.tokens,
        }
    }
}

/// The answer of `POST /runs/{id}/cancel`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CancelAccepted {
    /// The run.
    #[schema(value_type = String)]
    pub run_id: RunId,
    /// Always true: the run was asked to stop. It ends shortly with `run_failed` /
    /// `cancelled`; follow its events or status to see when.
    pub cancel_requested: bool,
}

/// The answer of `GET /runs`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunPage {
    /// Runs, newest first.
    pub runs: Vec<RunListItem>,
    /// Pass as `before` to get the next page; null on the last page.
    pub next_before: Option<String>,
}

/// One run in a listing.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunListItem {
    /// The run.
    #[schema(value_type = String)]
    pub run_id: RunId,
    /// `running`, or how it ended.
    #[schema(value_type = String)]
    pub status: RunStatus,
    /// Seconds since the Unix epoch.
    pub started_at: f64,
    /// Who worked on it.
    pub specialist_ids: Vec<String>,
    /// The prompt.
    pub prompt: String,
    /// The finish payload's summary, or the failure reason.
    pub summary: Option<String>,
    /// How many events the runlog holds.
    pub events: u64,
    /// The run that delegated this one (`agent__<id>`), if any.
    #[schema(value_type = Option<String>)]
    pub parent_id: Option<RunId>,
    /// Who started it: `user`, `child`, `critic`, `replay`, `test` or `eval`.
    #[schema(value_type = String)]
    pub origin: fabric_domain::runlog::RunOrigin,
    /// When it ended (seconds since the Unix epoch), or null while it goes on.
    pub ended_at: Option<f64>,
    /// Model calls made so far, all members together.
    pub steps: u32,
    /// Tokens used so far, all members together.
    pub tokens: u64,
    /// `true` when the run is `running` but no process carries it on any more (it was
    /// killed or crashed: its runlog's lock is free): `fabric resume <id>` continues it. The
    /// CLI shows it as `interrupted (resumable)`. Derived at each read, never stored; false
    /// when this server cannot tell (the run's runlog is on another machine).
    pub resumable: bool,
    /// `true` when the run is `running` but waits for a worker to claim it (`store.queue:
    /// true`): no worker has taken it yet, or its worker's lease ran out and none has taken
    /// it over yet. Derived at each read, never stored.
    pub queued: bool,
    /// The conversation the run belongs to (issue #42): its first run, and the runs, model
    /// calls and tokens from there up to this run (a run that continues none is a
    /// conversation of one). Read from the runlogs at each listing; budgets stay per run.
    pub conversation: Option<ConversationDoc>,
}

/// A `status` query parameter, as the closed set of run statuses.
pub(crate) fn parse_status(text: Option<&str>) -> Result<Option<RunStatus>, ApiError> {
    text.map(|s| {
        serde_json::from_value::<RunStatus>(Value::String(s.to_owned())).map_err(|_| {
            ApiError::InvalidParameter(format!(
                "`status` must be one of {}; got `{s}`",
                STATUSES.join(", ")
            ))
        })
    })
    .transpose()
}

impl From<RunSummary> for RunListItem {
    fn from(r: RunSummary) -> Self {
        Self {
            run_id: r.id,
            status: r.status,
            started_at: r.started_at,
            specialist_ids: r.specialist_ids,
            prompt: r.prompt,
            summary: r.summary,
            events: r.events,
            parent_id: r.parent_id,
            origin: r.origin,
            ended_at: r.ended_at,
            steps: r.steps,
            tokens: r.usage.total_tokens,
            resumable: false,
            queued: false,
            conversation: None,
        }
    }
}

impl RunListItem {
    /// With what a probe found about who carries the run on.
    pub(crate) fn with_liveness(mut self, liveness: Liveness) -> Self {
        self.resumable = liveness.resumable();
        self.queued = liveness.queued();
        self
    }
}

/// The query of `GET /runs/search`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SearchParams {
    /// The words to look for (never SQL or query syntax: every word is taken as written).
    /// Required.
    // An `Option` only so that its absence gets the API's own message. The pattern is
    // `formats::NOT_BLANK_PATTERN`, published by `openapi::publish_formats`.
    #[param(required = true, min_length = 1)]
    pub q: Option<String>,
    /// Rank by meaning only. Needs an embedding model in the server's config
    /// (`run_index.embedding_model_key`); without one, `true` is 422 `invalid_request`.
    pub semantic: Option<bool>,
    /// Only runs this specialist worked on.
    pub specialist: Option<String>,
    /// Only runs with this status.
    #[param(
        pattern = "^(running|completed|completed_without_finish|partial|max_steps_exceeded|budget_exceeded|llm_error|model_unsupported|cancelled|failed|interrupted|quality_gate_failed|context_window_exceeded|stalled|input_required|unanswered)$"
    )]
    pub status: Option<String>,
    /// Only runs started since: a date (`2026-11-01`), a UTC time (`2026-11-01T12:00:00Z`),
    /// or a duration back from now (`7d`); its `pattern` is exactly what the server takes.
    // The pattern is `formats::SINCE_PATTERN`, published by `openapi::publish_formats`.
    pub since: Option<String>,
    /// Hits (1–100, default 10).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<usize>,
}

/// What `GET /runs/search` finds.
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchPage {
    /// How the hits were ranked: `text`, `hybrid` or `semantic`.
    #[schema(value_type = String)]
    pub mode: fabric_core::search::SearchMode,
    /// Why the ranking is not what was asked for (the embedding model did not answer).
    pub note: Option<String>,
    /// Best first.
    pub hits: Vec<SearchHitDoc>,
}

/// One run found.
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchHitDoc {
    /// The run.
    pub run: RunListItem,
    /// The combined score the hits are ordered by (higher is better).
    pub score: f64,
    /// The full-text rank, when the words matched.
    pub text_score: Option<f64>,
    /// The cosine similarity of the embeddings, when the run has one.
    pub semantic_score: Option<f64>,
    /// An excerpt around the matched words.
    pub snippet: Option<String>,
}

/// The query of `GET /stats`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StatsParams {
    /// Group by `specialist` (default), `model` (model key) or `tool`.
    #[param(pattern = "^(specialist|model|tool)$")]
    pub by: Option<String>,
    /// Only runs started since (as in `GET /runs/search`).
    // The pattern is `formats::SINCE_PATTERN`, published by `openapi::publish_formats`.
    pub since: Option<String>,
    /// Count replays, `fabric test` and `fabric eval` runs too (default `false`: the runs
    /// people started, with their children and critics).
    pub all: Option<bool>,
}

/// The body of `POST /runs/prune`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PruneRequest {
    /// Delete ended runs that started longer ago than this: `90s`, `30m`, `12h`, `7d`, `2w`.
    /// Its `pattern` is exactly what the server takes.
    // The pattern is `formats::DURATION_PATTERN`, published by `openapi::publish_formats`.
    #[schema(example = "30d")]
    pub older_than: String,
}

/// The query of `GET /runs`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Runs per page (1–100, default 20).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<usize>,
    /// Only runs with this status (`running`, `completed`, `partial`, `failed`, `cancelled`,
    /// ...).
    #[param(
        pattern = "^(running|completed|completed_without_finish|partial|max_steps_exceeded|budget_exceeded|llm_error|model_unsupported|cancelled|failed|interrupted|quality_gate_failed|context_window_exceeded|stalled|input_required|unanswered)$"
    )]
    pub status: Option<String>,
    /// Only runs this specialist worked on (a task force counts for each member).
    // The pattern is `formats::NOT_BLANK_PATTERN`, published by `openapi::publish_formats`.
    #[param(min_length = 1)]
    pub specialist: Option<String>,
    /// Only runs older than this run id (the previous page's `next_before`).
    #[param(pattern = r"^[A-Za-z0-9_-]{1,128}$")]
    pub before: Option<String>,
}

/// The header of `GET /runs/{id}/events`.
#[derive(Debug, Default, IntoParams)]
#[into_params(parameter_in = Header)]
pub(crate) struct LastEventIdHeader {
    /// SSE resumption: only events with a greater `seq` (decimal digits; a number beyond
    /// every `seq` gives none).
    // Its pattern, `formats::EVENT_ID_PATTERN`, and its type, a string and never null (an
    // `Option` header comes out nullable, and schemathesis sent `null`, issue #14), are set
    // by `openapi::publish_formats`.
    #[param(rename = "Last-Event-ID")]
    pub(crate) last_event_id: Option<String>,
}

impl LastEventIdHeader {
    /// The header of a request, when it is text.
    pub(crate) fn read(headers: &axum::http::HeaderMap) -> Result<Self, ApiError> {
        let last_event_id = headers
            .get("last-event-id")
            .map(|v| v.to_str().map(str::to_owned).map_err(|_| bad_event_id()))
            .transpose()?;
        Ok(Self { last_event_id })
    }

    /// The `seq` it names, exactly as the document's pattern allows.
    pub(crate) fn seq(&self) -> Result<Option<u64>, ApiError> {
        self.last_event_id
            .as_deref()
            .map(|text| crate::formats::event_id(text).ok_or_else(bad_event_id))
            .transpose()
    }
}

fn bad_event_id() -> ApiError {
    ApiError::InvalidParameter(
        "`Last-Event-ID` must be the `seq` of an event (decimal digits)".to_owned(),
    )
}

/// The query of `GET /runs/{id}/events`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events with a `seq` greater than this (as `Last-Event-ID` does for SSE).
    pub after: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_14_http_md_lists_every_status() {
        let doc = include_str!("../../../../docs/HTTP.md");
        let paragraph = doc
            .split("Statuses are the runlog's:")
            .nth(1)
            .and_then(|rest| rest.split("\n\n").next())
            .unwrap_or_else(|| panic!("docs/HTTP.md has no list of statuses"));
        for status in STATUSES {
            assert!(
                paragraph.contains(&format!("`{status}`")),
                "docs/HTTP.md does not list `{status}`"
            );
        }
    }

    #[test]
    fn statuses_names_every_run_status_as_serde_writes_it() {
        // Exhaustive: a new status fails to compile here until it gets a place in STATUSES.
        let place = |s: RunStatus| match s {
            RunStatus::Running => 0,
            RunStatus::Completed => 1,
            RunStatus::CompletedWithoutFinish => 2,
            RunStatus::Partial => 3,
            RunStatus::MaxStepsExceeded => 4,
            RunStatus::BudgetExceeded => 5,
            RunStatus::LlmError => 6,
            RunStatus::ModelUnsupported => 7,
            RunStatus::Cancelled => 8,
            RunStatus::Failed => 9,
            RunStatus::Interrupted => 10,
            RunStatus::QualityGateFailed => 11,
            RunStatus::ContextWindowExceeded => 12,
            RunStatus::Stalled => 13,
            RunStatus::InputRequired => 14,
            RunStatus::Unanswered => 15,
        };
        for (i, name) in STATUSES.iter().enumerate() {
            let status: RunStatus = serde_json::from_value(Value::String((*name).to_owned()))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(status.as_str(), *name);
            assert_eq!(place(status), i, "{name}");
        }
    }
}
