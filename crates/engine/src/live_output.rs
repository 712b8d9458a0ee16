//! A running call's live output on its way to the people following the run (issue #42,
//! ADR-106): a tool hands its lines to the [`LiveSink`] of its [`ToolContext`], which bounds
//! them (each line at most [`MAX_LINE_BYTES`], at most [`BURST_LINES`] at once and
//! [`LINES_PER_SECOND`] after that, per call; what is left out is counted and said) and
//! gives them to the run's [`OutputObserver`]. Nothing here is recorded: the runlog, the
//! store and the tool's result never see a live line.
//!
//! [`ToolContext`]: crate::ports::ToolContext

use fabric_domain::{LiveToolOutput, OutputChunk, OutputStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// The longest line followers get, in bytes; a longer one is cut, saying how much was left
/// out.
pub const MAX_LINE_BYTES: usize = 1_024;
/// Lines of one call that may go out at once.
pub const BURST_LINES: u32 = 100;
/// Lines of one call that may go out per second, once the burst is spent.
pub const LINES_PER_SECOND: u32 = 50;

/// Who gets a run's live output: its followers (the live window, the submitter's
/// observer). Told synchronously from the tool's task, so it must only queue or print,
/// never wait: live output may be lost, a run is never slowed by it.
pub trait OutputObserver: Send + Sync {
    /// One item of a running call's output.
    fn on_tool_output(&self, output: &LiveToolOutput);
}

/// Where a tool publishes what it prints while it runs: the run's observer, and once the
/// loop hands the context to a call, that call's identity and its rate. Cheap to clone.
#[derive(Clone)]
pub struct LiveSink {
    observer: Arc<dyn OutputObserver>,
    call: Option<Arc<CallOutput>>,
}

impl std::fmt::Debug for LiveSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSink")
            .field("call", &self.call.as_ref().map(|c| &c.call_id))
            .finish()
    }
}

impl LiveSink {
    /// A run's sink, not yet for a call (a line given to it goes nowhere).
    pub fn new(observer: Arc<dyn OutputObserver>) -> Self {
        Self {
            observer,
            call: None,
        }
    }

    /// The sink of one call, with its own rate.
    pub fn for_call(&self, step: u32, member: Option<u32>, call_id: &str, tool: &str) -> Self {
        Self {
            observer: Arc::clone(&self.observer),
            call: Some(Arc::new(CallOutput {
                observer: Arc::clone(&self.observer),
                call_id: call_id.to_owned(),
                tool: tool.to_owned(),
                step,
                member,
                bucket: Mutex::new(Bucket::full()),
            })),
        }
    }

    /// A splitter of `stream`'s bytes into lines for this call; `None` outside a call.
    pub fn lines(&self, stream: OutputStream) -> Option<LineSplitter> {
        let call = Arc::clone(self.call.as_ref()?);
        Some(LineSplitter {
            call,
            stream,
            line: Vec::new(),
            cut: 0,
        })
    }
}

/// One call's output on its way out: who it is, and its rate.
struct CallOutput {
    observer: Arc<dyn OutputObserver>,
    call_id: String,
    tool: String,
    step: u32,
    member: Option<u32>,
    bucket: Mutex<Bucket>,
}

/// A token bucket of lines, and the lines it left out since the last one shown.
struct Bucket {
    tokens: f64,
    at: Instant,
    dropped: u64,
}

impl Bucket {
    fn full() -> Self {
        Self {
            tokens: f64::from(BURST_LINES),
            at: Instant::now(),
            dropped: 0,
        }
    }

    /// Whether a line may go out now, and how many were left out before it; counts it as
    /// left out when not.
    fn take(&mut self) -> Option<u64> {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * f64::from(LINES_PER_SECOND);
        self.tokens = (self.tokens + refill).min(f64::from(BURST_LINES));
        self.at = now;
        if self.tokens < 1.0 {
            self.dropped += 1;
            return None;
        }
        self.tokens -= 1.0;
        Some(std::mem::take(&mut self.dropped))
    }
}

impl CallOutput {
    fn tell(&self, chunk: OutputChunk) {
        self.observer.on_tool_output(&LiveToolOutput {
            call_id: self.call_id.clone(),
            tool: self.tool.clone(),
            step: self.step,
            member: self.member,
            chunk,
        });
    }

    /// Shows one line (its first bytes, `cut` more left out) if the rate allows.
    fn line(&self, stream: OutputStream, bytes: &[u8], cut: u64) {
        let taken = self
            .bucket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(dropped) = taken else {
            return;
        };
        if dropped > 0 {
            self.tell(OutputChunk::Dropped { dropped });
        }
        self.tell(OutputChunk::Line {
            stream,
            line: line_text(bytes, cut),
        });
    }
}

impl Drop for CallOutput {
    /// The call is over: what was left out since the last line shown is said.
    fn drop(&mut self) {
        let dropped = std::mem::take(
            &mut self
                .bucket
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .dropped,
        );
        if dropped > 0 {
            self.tell(OutputChunk::Dropped { dropped });
        }
    }
}

/// `bytes` as text (invalid UTF-8 replaced, a trailing `\r` gone), saying how many bytes
/// were cut; a character cut in two counts as cut.
fn line_text(bytes: &[u8], cut: u64) -> String {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let whole = match std::str::from_utf8(bytes) {
        Err(e) if cut > 0 && e.error_len().is_none() => e.valid_up_to(),
        _ => bytes.len(),
    };
    let mut text = String::from_utf8_lossy(&bytes[..whole]).into_owned();
    let cut = cut + (bytes.len() - whole) as u64;
    if cut > 0 {
        text.push_str(&format!(" … [cut: {cut} more bytes]"));
    }
    text
}

/// Turns a stream's bytes into lines for a call's followers, keeping at most
/// [`MAX_LINE_BYTES`] of a line in memory however long it is.
pub struct LineSplitter {
    call: Arc<CallOutput>,
    stream: OutputStream,
    line: Vec<u8>,
    /// Bytes of the current line past [`MAX_LINE_BYTES`].
    cut: u64,
}

impl LineSplitter {
    /// The next bytes the stream gave.
    pub fn push(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let end = bytes.iter().position(|&b| b == b'\n');
            let part = &bytes[..end.unwrap_or(bytes.len())];
            let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
            self.line.extend_from_slice(&part[..part.len().min(room)]);
            self.cut += part.len().saturating_sub(room) as u64;
            match end {
                Some(at) => {
                    self.flush();
                    bytes = &bytes[at + 1..];
                }
                None => break,
            }
        }
    }

    /// The stream ended: its last line, when it had no line break.
    pub fn finish(mut self) {
        self.end_line();
    }

    /// The line so far goes out now, as if a line break came: the stream's writer has said
    /// all it will say for a while (an ACP agent's turn ended while its process lives on).
    pub fn end_line(&mut self) {
        if !self.line.is_empty() || self.cut > 0 {
            self.flush();
        }
    }

    fn flush(&mut self) {
        self.call.line(self.stream, &self.line, self.cut);
        self.line.clear();
        self.cut = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Seen(Mutex<Vec<LiveToolOutput>>);

    impl OutputObserver for Seen {
        fn on_tool_output(&self, output: &LiveToolOutput) {
            self.0.lock().unwrap().push(output.clone());
        }
    }

    fn sink() -> (Arc<Seen>, LiveSink) {
        let seen = Arc::new(Seen::default());
        let sink = LiveSink::new(seen.clone()).for_call(2, None, "call_1", "shell");
        (seen, sink)
    }

    fn chunks(seen: &Seen) -> Vec<OutputChunk> {
        seen.0
            .lock()
            .unwrap()
            .iter()
            .map(|o| o.chunk.clone())
            .collect()
    }

    fn line(stream: OutputStream, line: &str) -> OutputChunk {
        OutputChunk::Line {
            stream,
            line: line.to_owned(),
        }
    }

    #[test]
    fn issue_42_lines_are_split_across_reads_and_the_last_one_kept() {
        let (seen, sink) = sink();
        let mut lines = sink.lines(OutputStream::Stdout).unwrap();
        lines.push(b"one\ntw");
        lines.push(b"o\r\n\nthree");
        lines.finish();
        use OutputStream::Stdout;
        assert_eq!(
            chunks(&seen),
            [
                line(Stdout, "one"),
                line(Stdout, "two"),
                line(Stdout, ""),
                line(Stdout, "three")
            ]
        );
        let first = &seen.0.lock().unwrap()[0];
        assert_eq!(
            serde_json::to_value(first).unwrap(),
            serde_json::json!({"call_id": "call_1", "tool": "shell", "step": 2, "stream": "stdout", "line": "one"})
        );
    }

    #[test]
    fn issue_42_a_long_line_is_cut_saying_how_much() {
        let (seen, sink) = sink();
        let mut lines = sink.lines(OutputStream::Stderr).unwrap();
        let mut long = "é".repeat(MAX_LINE_BYTES); // 2 bytes each
        long.push('\n');
        for part in long.as_bytes().chunks(100) {
            lines.push(part);
        }
        let got = chunks(&seen);
        let OutputChunk::Line { line, stream } = &got[0] else {
            panic!("{got:?}")
        };
        assert_eq!(*stream, OutputStream::Stderr);
        let kept = "é".repeat(MAX_LINE_BYTES / 2);
        assert_eq!(
            line,
            &format!("{kept} … [cut: {MAX_LINE_BYTES} more bytes]")
        );
    }

    #[test]
    fn issue_42_over_the_rate_lines_are_counted_and_said() {
        let (seen, sink) = sink();
        let mut lines = sink.lines(OutputStream::Stdout).unwrap();
        for i in 0..10_000 {
            lines.push(format!("line {i}\n").as_bytes());
        }
        lines.finish();
        drop(sink);
        let got = chunks(&seen);
        let shown = got
            .iter()
            .filter(|c| matches!(c, OutputChunk::Line { .. }))
            .count();
        let dropped: u64 = got
            .iter()
            .map(|c| match c {
                OutputChunk::Dropped { dropped } => *dropped,
                OutputChunk::Line { .. } => 0,
            })
            .sum();
        assert!(shown >= BURST_LINES as usize, "{shown}");
        assert!(shown < 2 * BURST_LINES as usize, "{shown}");
        assert_eq!(shown as u64 + dropped, 10_000);
        assert!(matches!(got.last(), Some(OutputChunk::Dropped { .. })));
    }

    #[test]
    fn issue_42_no_lines_outside_a_call() {
        let seen = Arc::new(Seen::default());
        assert!(LiveSink::new(seen).lines(OutputStream::Stdout).is_none());
    }
}
