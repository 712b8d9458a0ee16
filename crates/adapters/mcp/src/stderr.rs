//! The last lines an MCP server wrote to stderr, kept for error messages: "did not start"
//! is only actionable with the server's own words next to it.

use std::collections::VecDeque;
use std::sync::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// Lines kept per server.
const KEPT_LINES: usize = 8;
/// Characters kept per line.
const LINE_CHARS: usize = 300;

/// A bounded tail of a server's stderr.
#[derive(Debug, Default)]
pub(crate) struct StderrTail {
    lines: Mutex<VecDeque<String>>,
}

impl StderrTail {
    /// Reads `stream` to its end, keeping the last lines and logging each at debug level.
    pub(crate) async fn follow(&self, server: &str, stream: impl AsyncRead + Unpin) {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(server, "mcp stderr: {line}");
            let line: String = line.chars().take(LINE_CHARS).collect();
            if let Ok(mut kept) = self.lines.lock() {
                if kept.len() == KEPT_LINES {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        }
    }

    /// `"; it wrote to stderr: ..."`, or nothing when it wrote nothing.
    pub(crate) fn describe(&self) -> String {
        let kept = self.lines.lock().map(|l| l.clone()).unwrap_or_default();
        if kept.is_empty() {
            String::new()
        } else {
            let joined: Vec<String> = kept.into_iter().collect();
            format!("; it wrote to stderr: {}", joined.join(" | "))
        }
    }
}
