//! A task's updates as the SSE stream of `SendStreamingMessage` and `SubscribeToTask`: each
//! `data:` a `StreamResponse` (in a JSON-RPC response for that binding): the task first, a
//! status update for each tool the run calls, then the result as an artifact and the final
//! status.
//! Pulled from the run's buffer like `/runs/{id}/events`, so a slow client loses nothing.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, KeepAlive, Sse};
use fabric_core::live::LiveRun;
use fabric_domain::{EventKind, EventPayload, RunEvent};
use futures_util::Stream;
use futures_util::stream::{self, StreamExt};
use serde_json::{Value, json};

use super::files::Accepted;
use super::{Binding, RpcError, methods, rest, success, task};
use crate::AppState;

/// One frame.
fn frame(binding: &Binding, result: Value) -> Event {
    match binding {
        Binding::JsonRpc(id) => Event::default().data(success(id, result).to_string()),
        Binding::Rest => Event::default().data(result.to_string()),
    }
}

/// An error in place of the stream's frames (the HTTP+JSON binding's `error` event).
fn error_frame(binding: &Binding, error: RpcError) -> Event {
    match binding {
        Binding::JsonRpc(id) => Event::default().data(super::failure(id, error).to_string()),
        Binding::Rest => Event::default()
            .event("error")
            .data(rest::error_body(&error).to_string()),
    }
}

/// A stream of one answer (a rejected task).
pub(crate) fn once(
    binding: Binding,
    result: Value,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    Sse::new(stream::iter([Ok(frame(&binding, result))]))
}

enum Step {
    Start,
    Follow(fabric_core::live::Follower, String),
    Done,
}

/// The updates of `live` for the request `id`, until the task ends: the task as the store
/// has it first (its context, its state), then what the run does from its first event.
pub(crate) fn run(
    state: AppState,
    id: Binding,
    live: Arc<LiveRun>,
    accepted: Accepted,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let frames = stream::unfold(Step::Start, move |step| {
        let (state, id, live, accepted) = (
            state.clone(),
            id.clone(),
            Arc::clone(&live),
            accepted.clone(),
        );
        async move {
            match step {
                Step::Start => Some(start(&state, &id, &live).await),
                Step::Follow(mut follower, context) => loop {
                    let Some(event) = follower.next().await else {
                        return Some((end(&state, &id, &live, &accepted).await, Step::Done));
                    };
                    if let Some(update) = update_of(live.id().as_str(), &context, &event) {
                        return Some((vec![frame(&id, update)], Step::Follow(follower, context)));
                    }
                    if matches!(event.kind(), EventKind::RunComplete | EventKind::RunFailed) {
                        return Some((end(&state, &id, &live, &accepted).await, Step::Done));
                    }
                },
                Step::Done => None,
            }
        }
    });
    Sse::new(frames.flat_map(stream::iter).map(Ok)).keep_alive(KeepAlive::default())
}

/// The first frame: the task as the store has it once the run recorded its start (its
/// context, its state); then the run's events from the first.
async fn start(state: &AppState, id: &Binding, live: &Arc<LiveRun>) -> (Vec<Event>, Step) {
    methods::recorded(live).await;
    match methods::summary(state, live.id()).await {
        Ok(run) => {
            let first = frame(id, json!({"task": task::task_of(&run, false)}));
            let context = task::context_of(&run).to_owned();
            (vec![first], Step::Follow(live.follow(0), context))
        }
        Err(error) => (vec![error_frame(id, error)], Step::Done),
    }
}

/// A status update for an event worth telling a client about: a tool call.
fn update_of(task_id: &str, context_id: &str, event: &RunEvent) -> Option<Value> {
    let EventPayload::ToolCall(call) = &event.payload else {
        return None;
    };
    let tool = &call.tool;
    let text = match event.step {
        Some(step) => format!("step {step}: calling `{tool}`"),
        None => format!("calling `{tool}`"),
    };
    Some(json!({"statusUpdate": {
        "taskId": task_id, "contextId": context_id,
        "status": {
            "state": "TASK_STATE_WORKING",
            "timestamp": task::timestamp(event.ts),
            "message": task::agent_message(task_id, context_id, &text),
        },
    }}))
}

/// The last frames: the result as an artifact, the files the client accepts as another,
/// then the final status.
async fn end(state: &AppState, id: &Binding, live: &LiveRun, accepted: &Accepted) -> Vec<Event> {
    let task_id = live.id();
    let run = match methods::summary(state, task_id).await {
        Ok(run) => run,
        Err(error) => return vec![error_frame(id, error)],
    };
    let (task_id, context) = (task_id.as_str(), task::context_of(&run));
    let files = super::files::artifact(state, &run, accepted).await;
    let mut frames = Vec::new();
    for artifact in task::artifact_of(&run).into_iter().chain(files) {
        frames.push(frame(
            id,
            json!({"artifactUpdate": {
                "taskId": task_id, "contextId": context, "artifact": artifact, "lastChunk": true,
            }}),
        ));
    }
    frames.push(frame(
        id,
        json!({"statusUpdate": {
            "taskId": task_id, "contextId": context, "status": task::status_of(&run),
        }}),
    ));
    frames
}
