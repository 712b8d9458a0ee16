//! Runlog events as Server-Sent Events: `id:` is the event's `seq`, `event:` its kind, and
//! `data:` the runlog line itself, so a client reads the same schema as the runlog.
//!
//! The stream is pulled: the next event is taken from the run's buffer only when the
//! connection has taken the previous one, so a slow client is held back by its own socket
//! (back-pressure) without losing events or slowing the run. When the client goes away the
//! stream is dropped and the run goes on.

use axum::response::sse::{Event, KeepAlive, Sse};
use fabric_core::live::{Followed, LiveRun};
use fabric_domain::{LiveToolOutput, RunEvent};
use futures_util::Stream;
use futures_util::stream::{self, StreamExt};
use std::convert::Infallible;
use std::sync::Arc;

/// Where a stream's events come from.
pub(crate) enum Source {
    /// A run in flight: its buffer, then whatever it records next, until it ends.
    Live(Arc<LiveRun>),
    /// A run that is not in flight here: its runlog as stored.
    Stored(Vec<RunEvent>),
}

/// The events of `source` with a `seq` greater than `after` (all without it).
pub(crate) fn events(
    source: Source,
    after: Option<u64>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let first = after.map_or(0, |seq| seq.saturating_add(1));
    let stream = match source {
        Source::Live(run) => {
            let id = run.id().clone();
            stream::unfold(run.follow(first), move |mut follower| {
                let id = id.clone();
                async move {
                    let frame = match follower.next_followed().await? {
                        Followed::Event(event) => to_sse(&event),
                        Followed::Notice(notice) => notice_frame(&id, &notice),
                        Followed::Output(output) => output_frame(&output),
                    };
                    Some((frame, follower))
                }
            })
            .left_stream()
        }
        Source::Stored(all) => stream::iter(all.into_iter().filter(move |e| e.seq >= first))
            .map(|event| to_sse(&event))
            .right_stream(),
    };
    Sse::new(stream.map(Ok)).keep_alive(KeepAlive::default())
}

/// A notice for the people following a run (issue #26: no worker has claimed it yet): an
/// `event: notice` frame with no `id:`, so it does not move `Last-Event-ID`, and
/// `data: {"run_id": …, "notice": …}`. Not in the runlog.
fn notice_frame(id: &fabric_domain::RunId, notice: &str) -> Event {
    Event::default()
        .event("notice")
        .data(serde_json::json!({"run_id": id.as_str(), "notice": notice}).to_string())
}

/// A running tool's live output (issue #42, ADR-106): an `event: tool_output` frame with no
/// `id:` and `data: {"call_id", "tool", "step", "member"?, "stream", "line"}` or
/// `{…, "dropped": N}`. Not in the runlog.
fn output_frame(output: &LiveToolOutput) -> Event {
    let data = serde_json::to_string(output).unwrap_or_else(|_| "{}".to_owned());
    Event::default().event("tool_output").data(data)
}

fn to_sse(event: &RunEvent) -> Event {
    // An event serialises unless its payload holds what JSON cannot (a path that is not
    // UTF-8), and then the runlog could not record it either; `{}` keeps the frame
    // well-formed, and the log says which event it stands for.
    let data = serde_json::to_string(event).unwrap_or_else(|e| {
        tracing::warn!(seq = event.seq, kind = event.kind().as_str(), error = %e, "an event cannot be sent as JSON");
        "{}".to_owned()
    });
    Event::default()
        .id(event.seq.to_string())
        .event(event.kind().as_str())
        .data(data)
}
