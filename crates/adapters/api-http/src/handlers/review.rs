//! Finishing the job of a run on a project over HTTP (issue #42, the web viewer): its diff,
//! per file and per checkpoint, and `apply` / `discard` as `fabric diff|apply|discard` do.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use fabric_core::ports::{ApplyMode, FileDiff, WorkspaceError};
use fabric_core::service::{InvalidRequest, RunDiff, ServiceError};
use fabric_domain::RunId;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::ErrorBody;
use crate::extract::{JsonBody, QueryOf, RunIdPath};
use crate::{ApiError, AppState};

/// A file's diff is cut after this many bytes (the whole is in `fabric diff`).
const MAX_FILE_DIFF_BYTES: usize = 256 * 1024;

/// The query of `GET /runs/{id}/diff`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct DiffQuery {
    /// One checkpoint's changes against the checkpoint before it (for the first, where the
    /// run started): a `commit` of the run's `checkpoint` events, whole or its first 7 or
    /// more characters. Without it: the run's changes against its base.
    #[param(pattern = "^[0-9a-fA-F]{7,64}$")]
    pub(crate) checkpoint: Option<String>,
}

/// The changes of a run, per file.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DiffView {
    /// The run.
    pub(crate) run_id: String,
    /// Its branch (`fabric/<run id>`, or the run's it continues).
    pub(crate) branch: String,
    /// The commit it started from.
    pub(crate) base: String,
    /// Its last checkpoint (the base when it changed nothing).
    pub(crate) head: String,
    /// The commits its `checkpoint` events recorded, in order.
    pub(crate) checkpoints: Vec<String>,
    /// The checkpoint asked for; `null` for the whole run.
    pub(crate) checkpoint: Option<String>,
    /// The changes are from this commit...
    pub(crate) from: String,
    /// ...to this one.
    pub(crate) to: String,
    /// The changed files, in path order.
    pub(crate) files: Vec<FileDiffView>,
}

/// One changed file.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FileDiffView {
    /// The path in the repository, `/`-separated.
    pub(crate) path: String,
    /// Lines added; `null` for a binary file.
    pub(crate) added: Option<u64>,
    /// Lines removed; `null` for a binary file.
    pub(crate) removed: Option<u64>,
    /// Its unified diff, from its `diff --git` line: the file's contents as they are
    /// (untrusted text, to be shown as text).
    pub(crate) diff: String,
    /// Whether `diff` was cut (at 262,144 bytes; `fabric diff` shows it whole).
    pub(crate) truncated: bool,
}

/// The body of `POST /runs/{id}/apply`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApplyRequest {
    /// `true`: commit the changes onto the repository's current branch (`fabric apply
    /// --commit`); `false` (the default): leave them uncommitted in its working tree.
    #[serde(default)]
    pub(crate) commit: bool,
}

/// What `POST /runs/{id}/apply` did.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Applied {
    /// The run.
    pub(crate) run_id: String,
    /// Its branch.
    pub(crate) branch: String,
    /// The files brought into the repository (none: the run changed nothing).
    pub(crate) files: Vec<String>,
    /// The commit made with `commit: true`; `null` when they were left uncommitted.
    pub(crate) commit: Option<String>,
}

/// What `POST /runs/{id}/discard` did.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Discarded {
    /// The run.
    pub(crate) run_id: String,
    /// Always `true`: its worktree and branch (or history) are gone; its runlog stays.
    pub(crate) discarded: bool,
}

/// The service's refusals, as the API answers them (the CLI's, typed).
fn refused(state: &AppState, error: ServiceError) -> ApiError {
    match error {
        ServiceError::Invalid(InvalidRequest::NoSuchRun { id }) => {
            ApiError::RunNotFound(id.to_string())
        }
        ServiceError::Invalid(e @ InvalidRequest::NotEnded { .. }) => {
            ApiError::RunNotEnded(e.to_string())
        }
        ServiceError::Invalid(e @ InvalidRequest::NotVersioned { .. }) => {
            ApiError::NotVersioned(e.to_string())
        }
        ServiceError::Invalid(e @ InvalidRequest::NoSuchCheckpoint { .. }) => {
            ApiError::CheckpointNotFound(e.to_string())
        }
        ServiceError::Invalid(InvalidRequest::Workspace(e)) => workspace_refused(e),
        other => crate::launch::from_service(state, other),
    }
}

/// A workspace that is gone, or that refused what was asked, said for the client.
fn workspace_refused(error: WorkspaceError) -> ApiError {
    match error {
        WorkspaceError::NotFound { .. } => ApiError::WorkspaceGone(format!(
            "{error}; it was discarded (or pruned): its runlog stays, its changes are gone"
        )),
        WorkspaceError::NoProject { .. } => ApiError::NotVersioned(error.to_string()),
        e if e.is_user_fixable() => ApiError::ApplyRefused(e.to_string()),
        e => ApiError::Internal(e.to_string()),
    }
}

fn no_branch(id: &RunId) -> ApiError {
    ApiError::NotVersioned(format!(
        "run `{id}` worked in a plain scratch workspace, not on a project: there is no branch to diff, apply or discard (its files are in its workspace, `fabric logs show {id}`)"
    ))
}

/// An ended run's changes against its base, per file, or one checkpoint's.
#[utoipa::path(
    get,
    path = "/runs/{id}/diff",
    tag = "runs",
    params(
        ("id" = String, Path, description = "The run id", pattern = r"^[A-Za-z0-9_-]{1,128}$"),
        DiffQuery,
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The changes, per file", body = DiffView),
        (status = 400, description = "`invalid_run_id`, `invalid_parameter` (a `checkpoint` that is no commit id)", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`run_not_found`, `checkpoint_not_found` (not one of the run's checkpoints; the message lists them)", body = ErrorBody),
        (status = 409, description = "`run_not_ended` (it is running or waiting: its changes are not final), `not_versioned` (the run worked in a plain scratch workspace, or this server has no versioned workspaces), `workspace_gone` (it was discarded)", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody),
    )
)]
pub(crate) async fn run_diff(
    State(state): State<AppState>,
    RunIdPath(id): RunIdPath,
    QueryOf(query): QueryOf<DiffQuery>,
) -> Result<Response, ApiError> {
    let checkpoint = query.checkpoint.as_deref();
    if let Some(asked) = checkpoint
        && !is_commit_id(asked)
    {
        return Err(ApiError::InvalidParameter(format!(
            "`checkpoint` must be a commit id (7 to 64 hexadecimal digits), got `{asked}`"
        )));
    }
    let diff = state
        .inner
        .service
        .run_diff(&id, checkpoint)
        .await
        .map_err(|e| refused(&state, e))?
        .ok_or_else(|| no_branch(&id))?;
    Ok(axum::Json(view(&id, diff)).into_response())
}

fn is_commit_id(text: &str) -> bool {
    (7..=64).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn view(id: &RunId, diff: RunDiff) -> DiffView {
    DiffView {
        run_id: id.to_string(),
        branch: diff.branch,
        base: diff.base,
        head: diff.head,
        checkpoints: diff.checkpoints,
        checkpoint: diff.checkpoint,
        from: diff.from,
        to: diff.to,
        files: diff.files.into_iter().map(file_view).collect(),
    }
}

fn file_view(file: FileDiff) -> FileDiffView {
    let mut diff = file.diff;
    let truncated = diff.len() > MAX_FILE_DIFF_BYTES;
    if truncated {
        let mut end = MAX_FILE_DIFF_BYTES;
        while !diff.is_char_boundary(end) {
            end -= 1;
        }
        diff.truncate(end);
    }
    FileDiffView {
        path: file.stat.path,
        added: file.stat.added,
        removed: file.stat.removed,
        diff,
        truncated,
    }
}

/// Brings an ended run's changes into the user's repository, as `fabric apply` does.
#[utoipa::path(
    post,
    path = "/runs/{id}/apply",
    tag = "runs",
    params(("id" = String, Path, description = "The run id", pattern = r"^[A-Za-z0-9_-]{1,128}$")),
    request_body = ApplyRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Applied (or nothing to apply: `files` is empty)", body = Applied),
        (status = 400, description = "`invalid_run_id`, `invalid_json`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`run_not_found`", body = ErrorBody),
        (status = 409, description = "`run_not_ended`, `not_versioned` (a scratch run: there is no repository to apply to), `workspace_gone`, `apply_refused` (the changes conflict with commits or uncommitted changes in the repository; nothing was written)", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 422, description = "`invalid_request`", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody),
    )
)]
pub(crate) async fn apply_run(
    State(state): State<AppState>,
    RunIdPath(id): RunIdPath,
    JsonBody(body): JsonBody<ApplyRequest>,
) -> Result<Response, ApiError> {
    let ws = state
        .inner
        .service
        .ended_workspace(&id)
        .await
        .map_err(|e| refused(&state, e))?
        .ok_or_else(|| no_branch(&id))?;
    let mode = if body.commit {
        ApplyMode::Commit
    } else {
        ApplyMode::WorkingTree
    };
    let applied = ws.apply(mode).await.map_err(workspace_refused)?;
    Ok(axum::Json(Applied {
        run_id: id.to_string(),
        branch: ws.branch().to_owned(),
        files: applied.files,
        commit: applied.commit.map(|c| c.to_string()),
    })
    .into_response())
}

/// Removes an ended run's worktree and branch (or scratch history), as `fabric discard`
/// does; its runlog stays.
#[utoipa::path(
    post,
    path = "/runs/{id}/discard",
    tag = "runs",
    params(("id" = String, Path, description = "The run id", pattern = r"^[A-Za-z0-9_-]{1,128}$")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Discarded (also when it was gone already)", body = Discarded),
        (status = 400, description = "`invalid_run_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`run_not_found`", body = ErrorBody),
        (status = 409, description = "`run_not_ended`, `not_versioned` (a plain scratch run has no branch)", body = ErrorBody),
        (status = 500, description = "`internal`", body = ErrorBody),
    )
)]
pub(crate) async fn discard_run(
    State(state): State<AppState>,
    RunIdPath(id): RunIdPath,
) -> Result<Response, ApiError> {
    let discarded = state
        .inner
        .service
        .discard_workspace(&id)
        .await
        .map_err(|e| refused(&state, e))?;
    if !discarded {
        return Err(no_branch(&id));
    }
    Ok(axum::Json(Discarded {
        run_id: id.to_string(),
        discarded: true,
    })
    .into_response())
}
