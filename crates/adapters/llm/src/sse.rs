//! A small Server-Sent Events parser: just enough of the spec for Chat Completions streams.
//! `data:` lines are collected until a blank line ends the event; comments (`:`) and the
//! other fields (`event`, `id`, `retry`) are skipped because chat servers carry everything
//! in `data`.

use fabric_engine::ChatError;
use serde::de::DeserializeOwned;

use crate::lines::LineSplitter;
use crate::transport::cut;

/// Decodes each event's data as a typed event `E` and hands it to `handle`, until `handle`
/// says the answer is over (`true`). Empty data and OpenAI's `[DONE]` sentinel are skipped;
/// data that is not an `E` is an error naming it. The typed-event streams (Anthropic's, the
/// Responses API's) read their chunks through this.
pub(crate) fn decode_events<E: DeserializeOwned>(
    url: &str,
    events: Vec<String>,
    mut handle: impl FnMut(E) -> Result<bool, ChatError>,
) -> Result<bool, ChatError> {
    for data in events {
        let data = data.trim();
        if data.is_empty() || data == "[DONE]" {
            continue;
        }
        let event: E = serde_json::from_str(data).map_err(|e| ChatError::Decode {
            url: url.to_owned(),
            detail: format!("bad stream event ({e}): {}", cut(data)),
        })?;
        if handle(event)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Turns a byte stream into the `data` payloads of its events.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    lines: LineSplitter,
    data: String,
    has_data: bool,
}

impl SseParser {
    /// Feeds one chunk; returns the data of every event it completed, in order. Multi-line
    /// data is joined with `\n`, as the spec says.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        for line in self.lines.push(chunk) {
            self.line(&line, &mut events);
        }
        events
    }

    /// Ends the stream. A last event without its closing blank line is still delivered:
    /// some servers close the connection right after the final `data:` line.
    pub(crate) fn finish(&mut self) -> Vec<String> {
        let mut events = Vec::new();
        if let Some(line) = self.lines.finish() {
            self.line(&line, &mut events);
        }
        self.dispatch(&mut events);
        events
    }

    fn line(&mut self, line: &str, events: &mut Vec<String>) {
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        if field == "data" {
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(value);
            self.has_data = true;
        }
    }

    fn dispatch(&mut self, events: &mut Vec<String>) {
        if self.has_data {
            events.push(std::mem::take(&mut self.data));
            self.has_data = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(input: &[u8], cuts: &[usize]) -> Vec<String> {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        let mut start = 0;
        for &cut in cuts {
            out.extend(parser.push(&input[start..cut]));
            start = cut;
        }
        out.extend(parser.push(&input[start..]));
        out.extend(parser.finish());
        out
    }

    const STREAM: &str = ": keep-alive comment\r\n\
        event: message\r\n\
        data: {\"a\":\"é\"}\r\n\
        \r\n\
        id: 7\n\
        data:first\n\
        data: second\n\
        retry: 100\n\
        \n\
        :another comment\n\
        data\n\
        \n\
        data: [DONE]\n\n";

    fn want() -> Vec<String> {
        vec![
            "{\"a\":\"é\"}".to_owned(),
            "first\nsecond".to_owned(),
            String::new(),
            "[DONE]".to_owned(),
        ]
    }

    #[test]
    fn whole_stream_at_once() {
        assert_eq!(parse_in_pieces(STREAM.as_bytes(), &[]), want());
    }

    #[test]
    fn every_single_split_point() {
        let bytes = STREAM.as_bytes();
        for cut in 0..=bytes.len() {
            assert_eq!(parse_in_pieces(bytes, &[cut]), want(), "cut at {cut}");
        }
    }

    #[test]
    fn every_pair_of_split_points() {
        let bytes = STREAM.as_bytes();
        for a in 0..=bytes.len() {
            for b in a..=bytes.len() {
                assert_eq!(parse_in_pieces(bytes, &[a, b]), want(), "cuts at {a},{b}");
            }
        }
    }

    #[test]
    fn byte_by_byte() {
        let bytes = STREAM.as_bytes();
        let cuts: Vec<usize> = (1..bytes.len()).collect();
        assert_eq!(parse_in_pieces(bytes, &cuts), want());
    }

    #[test]
    fn last_event_without_blank_line_is_delivered() {
        assert_eq!(
            parse_in_pieces(b"data: {\"x\":1}\ndata: tail", &[]),
            vec!["{\"x\":1}\ntail".to_owned()]
        );
        assert_eq!(parse_in_pieces(b"data: end\r", &[]), vec!["end".to_owned()]);
    }

    #[test]
    fn comments_only_give_nothing() {
        assert!(parse_in_pieces(b": ping\n\n: ping\n\n", &[3]).is_empty());
    }
}
