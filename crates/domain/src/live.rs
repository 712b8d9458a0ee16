//! What a tool prints while it runs, for the people following the run (issue #42): live
//! only, never in the runlog, never in the store. The tool's result is what it always was.

use serde::Serialize;

/// Which stream of a command a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One item of a running call's live output: a line, or how many lines were left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum OutputChunk {
    /// A line, without its line break; a long one cut, saying how many bytes were left out.
    Line {
        /// `stdout` or `stderr`.
        stream: OutputStream,
        /// The line.
        line: String,
    },
    /// Lines left out (over the rate), told before the next line shown and at the call's end.
    Dropped {
        /// How many.
        dropped: u64,
    },
}

/// A running tool call's live output item, as followers get it (SSE `event: tool_output`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveToolOutput {
    /// The call, as its `tool_call` event names it.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The step of the call.
    pub step: u32,
    /// The task-force member whose call it is (`pack_index`), in a task force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    /// The line, or the count of lines left out.
    #[serde(flatten)]
    pub chunk: OutputChunk,
}
