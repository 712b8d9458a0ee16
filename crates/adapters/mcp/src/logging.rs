//! The logging capability (issue #29): `notifications/message` for the server's own notable
//! events, a run that started, ended or failed from a `run_task` call, at or above the level
//! the client asked for.
//!
//! Who asks, and how: a client of the handshake revisions (2025-11-25 and before) sends
//! `logging/setLevel`, kept for its session; a 2026-07-28 client puts
//! `io.modelcontextprotocol/logLevel` in a request's `_meta`, which wins for that request.
//! A client that asked neither way gets no messages (2026-07-28 makes that the rule; for the
//! older revisions it is the server's choice, and the quiet one).
//!
//! rmcp marks the logging types deprecated (SEP-2577 retires logging after 2026-07-28); both
//! revisions this server speaks still define it.
#![expect(deprecated)]

use std::sync::Mutex;

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;

/// The name the server's messages carry as their `logger`.
const LOGGER: &str = "agent-fabric";

/// One session's level, set by `logging/setLevel`; `None` until a client sets one.
#[derive(Debug, Default)]
pub(crate) struct SessionLevel(Mutex<Option<LoggingLevel>>);

impl SessionLevel {
    /// Sets the session's level.
    pub(crate) fn set(&self, level: LoggingLevel) {
        *lock(&self.0) = Some(level);
    }

    /// The level for a request: its own `_meta` level, else the session's.
    fn for_request(&self, context: &RequestContext<RoleServer>) -> Option<LoggingLevel> {
        context.meta.log_level().or(*lock(&self.0))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A level is a plain value: one a panicking thread left behind is still whole.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Severity, lowest first (the syslog order the MCP levels follow).
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// How notable a server event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Severity {
    /// A run started or completed.
    Info,
    /// A run was cancelled, or completed without `finish_task`.
    Warning,
    /// A run failed.
    Error,
}

impl Severity {
    fn level(self) -> LoggingLevel {
        match self {
            Self::Info => LoggingLevel::Info,
            Self::Warning => LoggingLevel::Warning,
            Self::Error => LoggingLevel::Error,
        }
    }
}

/// Sends `data` as a `notifications/message` of `severity` to the client of `context`, when
/// it asked for that level or a lower one. A client that went away misses it; the run goes on.
pub(crate) async fn send(
    session: &SessionLevel,
    context: &RequestContext<RoleServer>,
    severity: Severity,
    data: Value,
) {
    let Some(threshold) = session.for_request(context) else {
        return;
    };
    let level = severity.level();
    if rank(level) < rank(threshold) {
        return;
    }
    let message = LoggingMessageNotificationParam::new(level, data).with_logger(LOGGER);
    if let Err(e) = context.peer.notify_logging_message(message).await {
        tracing::debug!(error = %e, "an MCP log message was not delivered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_29_levels_rank_in_syslog_order() {
        let all = [
            LoggingLevel::Debug,
            LoggingLevel::Info,
            LoggingLevel::Notice,
            LoggingLevel::Warning,
            LoggingLevel::Error,
            LoggingLevel::Critical,
            LoggingLevel::Alert,
            LoggingLevel::Emergency,
        ];
        let ranks: Vec<u8> = all.into_iter().map(rank).collect();
        assert_eq!(ranks, [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(Severity::Error.level(), LoggingLevel::Error);
    }
}
