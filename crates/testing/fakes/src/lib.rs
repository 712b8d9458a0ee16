//! `fabric-fakes`: the one set of fakes of the core's ports that every test binary uses
//! (issue #41, ADR-100), so a port's fake is written once.
//!
//! - [`ScriptedChat`]: a [`ChatClient`](fabric_core::ChatClient) answering from a script (in
//!   order, or by the conversation's turn), remembering what it was asked; a delay, a hook
//!   before each answer and requests it answers itself are options.
//! - [`MemStore`] and [`MemLog`]: a [`RunStore`](fabric_core::RunStore) and
//!   [`RunLog`](fabric_core::RunLog) in memory: one runlog for every run (engine tests), one
//!   per run (service and HTTP tests), or a store that refuses to create runs.
//! - [`ScriptedRun`] and [`FakePreparer`]: a [`Runnable`](fabric_core::service::Runnable)
//!   that records a few events, panics or ignores cancellation, and a
//!   [`Preparer`](fabric_core::service::Preparer) that makes runnables, optionally after a
//!   gate opens.
//! - [`FakeTool`] and the helpers that build a test's specialist and task force.
//! - [`events`]: runlog events built by hand ([`sample`], [`sample_payload`], [`event`]),
//!   which used to be in `fabric-domain`'s public API.
//!
//! It is test code: a fake panics where a test would fail anyway. Every test binary takes it
//! as a dev-dependency; core's own unit tests compile this same source into the core
//! (`#[path]` in core's `lib.rs`, ADR-100), since as a dependency it would implement the ports
//! of a second copy of the core. So its modules name each other by `super::`, never `crate::`,
//! and the core always as `fabric_core::`.

// A fake is test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod chat;
pub mod events;
mod service;
mod store;
mod tools;

pub use chat::{Answer, ScriptedChat, call, call_raw};
pub use events::{Line, event, run_event, sample, sample_payload};
pub use service::{FakePreparer, RunScript, ScriptedRun};
pub use store::{MemLog, MemStore};
pub use tools::{FakeTool, ok_tool, run, specialist, specialist_as, task, tool};

/// A fake's lock: a test that panicked while holding it has already failed.
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
