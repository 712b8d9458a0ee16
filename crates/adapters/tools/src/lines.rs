//! `read_file` with `offset`/`limit`: a part of a file by lines, so a model with a small
//! context window reads a big file a part at a time (issue #26). The note after the lines
//! says which lines these are, of how many, and the call that reads on.

use std::io::{BufRead, BufReader, Read};

use fabric_engine::ToolError;
use serde_json::{Value, json};

use crate::text::decode;

/// Bytes read past the part, at most, to count the file's lines for the note.
const COUNT_CAP: u64 = 64 * 1024 * 1024;

/// The lines asked for: from `first` (1-based), at most `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lines {
    first: u64,
    limit: Option<u64>,
}

impl Lines {
    pub(crate) fn new(first: u64, limit: Option<u64>) -> Self {
        Self {
            first: first.max(1),
            limit,
        }
    }

    /// Reads the lines from `file` (`raw` is the path as the model gave it, `size` its size
    /// in bytes), at most `max` bytes of them.
    pub(crate) fn read(
        self,
        file: std::fs::File,
        raw: &str,
        max: u64,
        size: u64,
    ) -> Result<Value, ToolError> {
        let failed = |e: std::io::Error| ToolError::Failed(format!("cannot read `{raw}`: {e}"));
        let mut reader = BufReader::new(file);
        let mut line = Vec::new();
        let mut number = 0u64;
        let mut part = Vec::new();
        let mut last_shown = 0u64;
        let mut full = false;
        let mut capped = false;
        let mut long_line = None;
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line).map_err(failed)? == 0 {
                break;
            }
            number += 1;
            if number < self.first || full {
                continue;
            }
            let over_limit = self.limit.is_some_and(|l| number >= self.first + l);
            if over_limit || (part.len() + line.len()) as u64 > max {
                full = true;
                if number == self.first {
                    // One line longer than the cap: its start, rather than nothing.
                    part.extend_from_slice(&line[..max as usize]);
                    last_shown = number;
                    long_line = Some(line.len());
                }
                // Only counting from here on, and not forever.
                let (more, hit) =
                    count_lines(&mut reader.by_ref().take(COUNT_CAP)).map_err(failed)?;
                number += more;
                capped = hit;
                break;
            }
            part.extend_from_slice(&line);
            last_shown = number;
        }
        let total = number;
        if self.first > total.max(1) {
            return Err(ToolError::InvalidArguments(format!(
                "parameter `offset` is {}, but `{raw}` has {total} line{}; use an offset from 1 to {}",
                self.first,
                if total == 1 { "" } else { "s" },
                total.max(1)
            )));
        }
        if total == 0 {
            return Ok(Value::String(format!("[file `{raw}` is empty]")));
        }
        let (mut text, lossy) = decode(&part, full);
        if lossy {
            text.push_str(
                "\n[note: the file is not valid UTF-8; invalid bytes are shown as \u{FFFD}]",
            );
        }
        if !text.ends_with('\n') {
            text.push('\n');
        }
        let seen = Seen {
            last_shown,
            total,
            capped,
            long_line,
        };
        text.push_str(&self.note(raw, &seen, size, max));
        Ok(Value::String(text))
    }

    /// The note after a part: which lines of how many, the file's size when there is more,
    /// and the call that reads on.
    fn note(self, raw: &str, seen: &Seen, size: u64, max: u64) -> String {
        let (first, last) = (self.first, seen.last_shown);
        // Counting stops at the cap on a huge file.
        let of = match seen.capped {
            true => format!("more than {}", seen.total),
            false => seen.total.to_string(),
        };
        let again = json!({"path": raw, "offset": last + 1, "limit": self.limit.unwrap_or(last + 1 - first).max(1)});
        let on = match last < seen.total {
            true => format!("read_file with {again} reads the next part"),
            false => "the end of the file".to_owned(),
        };
        match seen.long_line {
            Some(len) => format!(
                "[the first {max} bytes of line {first} of {of} ({size} bytes): the line is {len} bytes long and read_file returns at most {max} bytes at once, so the rest of it cannot be read with read_file; {on}]"
            ),
            None if last < seen.total => {
                format!("[lines {first}–{last} of {of} ({size} bytes); {on}]")
            }
            None => format!("[lines {first}–{last} of {of}: {on}]"),
        }
    }
}

/// What a read saw: the last line shown, the lines counted (and whether counting stopped at
/// its cap), and the length of a line too long to show whole.
struct Seen {
    last_shown: u64,
    total: u64,
    capped: bool,
    long_line: Option<usize>,
}

/// Lines in what `reader` yields (newlines, plus one for a last line without one), and
/// whether it stopped at [`COUNT_CAP`].
fn count_lines(reader: &mut impl Read) -> std::io::Result<(u64, bool)> {
    let mut buf = vec![0u8; 64 * 1024];
    let (mut count, mut read) = (0u64, 0u64);
    let mut last = b'\n';
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        read += n as u64;
        count += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    Ok((count + u64::from(last != b'\n'), read >= COUNT_CAP))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn file(text: &str) -> (tempfile::NamedTempFile, std::fs::File) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        let opened = std::fs::File::open(f.path()).unwrap();
        (f, opened)
    }

    fn read(text: &str, first: u64, limit: Option<u64>, max: u64) -> Result<String, ToolError> {
        let (_keep, f) = file(text);
        Lines::new(first, limit)
            .read(f, "big.txt", max, text.len() as u64)
            .map(|v| v.as_str().unwrap().to_owned())
    }

    fn numbered(n: u64) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn issue_26_a_part_says_where_it_is_and_how_to_read_on() {
        let text = read(&numbered(10), 3, Some(2), 1_000).unwrap();
        assert_eq!(
            text,
            "line 3\nline 4\n[lines 3–4 of 10 (71 bytes); read_file with {\"limit\":2,\"offset\":5,\"path\":\"big.txt\"} reads the next part]"
        );
        let end = read(&numbered(10), 9, None, 1_000).unwrap();
        assert_eq!(
            end,
            "line 9\nline 10\n[lines 9–10 of 10: the end of the file]"
        );
    }

    #[test]
    fn issue_26_the_size_cap_ends_a_part_at_a_whole_line() {
        let text = read(&numbered(100), 1, None, 30).unwrap();
        assert!(
            text.starts_with("line 1\nline 2\nline 3\nline 4\n["),
            "{text}"
        );
        assert!(text.contains("[lines 1–4 of 100 (792 bytes);"), "{text}");
        assert!(text.contains("\"offset\":5"), "{text}");
    }

    #[test]
    fn issue_26_an_offset_past_the_end_is_a_precise_error() {
        let err = read(&numbered(3), 7, None, 1_000).unwrap_err();
        assert_eq!(
            err.to_string(),
            "parameter `offset` is 7, but `big.txt` has 3 lines; use an offset from 1 to 3"
        );
        assert_eq!(
            read("", 1, Some(5), 1_000).unwrap(),
            "[file `big.txt` is empty]"
        );
        // A last line without a newline counts.
        assert_eq!(
            read("a\nb", 2, None, 1_000).unwrap(),
            "b\n[lines 2–2 of 2: the end of the file]"
        );
    }
}
