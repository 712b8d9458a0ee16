//! Splits a byte stream into lines, whatever the chunk boundaries. Both streaming formats
//! (SSE and Ollama's NDJSON) are line based, and the network cuts chunks anywhere: inside a
//! line, between `\r` and `\n`, even inside a multi-byte UTF-8 character.

/// Collects bytes until a line is complete.
#[derive(Debug, Default)]
pub(crate) struct LineSplitter {
    buf: Vec<u8>,
}

impl LineSplitter {
    /// Feeds one chunk; returns the lines it completed, without their terminators. A line ends
    /// at `\n`, `\r\n` or a lone `\r` (SSE allows all three).
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(chunk);
        let mut lines = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i < self.buf.len() {
            match self.buf[i] {
                b'\n' => {
                    lines.push(decode(&self.buf[start..i]));
                    i += 1;
                    start = i;
                }
                b'\r' => {
                    // A `\r` at the end of the buffer may be the first half of `\r\n`; wait for
                    // the next chunk to tell.
                    let Some(&next) = self.buf.get(i + 1) else {
                        break;
                    };
                    lines.push(decode(&self.buf[start..i]));
                    i += if next == b'\n' { 2 } else { 1 };
                    start = i;
                }
                _ => i += 1,
            }
        }
        self.buf.drain(..start);
        lines
    }

    /// The last line, when the stream ended without a terminator.
    pub(crate) fn finish(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.buf);
        let rest = rest.strip_suffix(b"\r").unwrap_or(&rest);
        (!rest.is_empty()).then(|| decode(rest))
    }
}

/// Lines are decoded only once complete, so a character split across chunks arrives whole;
/// invalid bytes become U+FFFD rather than failing the whole answer.
fn decode(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(input: &[u8], chunk: usize) -> Vec<String> {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        for piece in input.chunks(chunk) {
            out.extend(s.push(piece));
        }
        out.extend(s.finish());
        out
    }

    #[test]
    fn every_chunk_size_gives_the_same_lines() {
        let input = "a\r\nbé€\n\nc\rd\r\n\r\nlast".as_bytes();
        let want = vec!["a", "bé€", "", "c", "d", "", "last"];
        for size in 1..=input.len() {
            assert_eq!(split_all(input, size), want, "chunk size {size}");
        }
    }

    #[test]
    fn trailing_cr_waits_for_the_next_chunk() {
        let mut s = LineSplitter::default();
        assert!(s.push(b"abc\r").is_empty());
        assert_eq!(s.push(b"\ndef\n"), vec!["abc", "def"]);
        assert_eq!(s.finish(), None);
    }
}
