//! The last resort of compaction: the newest tool results, which the steps before keep whole,
//! cut to what fits (issue #26). A small local model's first big file (a 12,000-character
//! file on a 4,096-token window) used to end the run `context_window_exceeded`; now it reads
//! the start of the file with a note saying exactly how to ask for the rest.

use fabric_domain::{Message, Role};
use serde_json::{Value, json};

use super::{BYTES_PER_TOKEN, estimate, layout};
use crate::ports::ToolDefinitions;

/// What marks a result cut here (it is not cut twice).
pub(super) const CUT_MARK: &str = "cut to fit the model's context window";
/// Bytes a cut result keeps at least: less tells the model nothing it can act on.
const MIN_KEEP: usize = 200;
/// Bytes set aside for the note that replaces the rest.
const NOTE_ROOM: usize = 320;

/// Cuts the last turn until the estimate fits `room`: first the long texts in the
/// arguments of its calls (they ran already; the model need not read its own file content
/// again), then the answer's own text (a reply in prose the corrective reprompt answers),
/// then its results, largest first. Returns how many were cut; the caller checks
/// whether it fits now.
pub(super) fn cut_newest(
    messages: &mut [Message],
    definitions: &ToolDefinitions,
    room: u64,
) -> usize {
    let (_, last) = layout(messages);
    let mut cut = 0;
    if last < messages.len() {
        for c in 0..messages[last].tool_calls.len() {
            if estimate(messages, definitions) <= room {
                return cut;
            }
            let call = &mut messages[last].tool_calls[c];
            if let Some(shorter) = shorten_arguments(&call.arguments) {
                call.arguments = shorter;
                cut += 1;
            }
        }
    }
    // Then the answer's own text: a long reply in prose (one the server's token limit cut,
    // answered by the corrective reprompt) weighs like any result (issue #40).
    if last < messages.len() {
        let over = estimate(messages, definitions).saturating_sub(room);
        if over > 0
            && let Some(shorter) = shorten_answer(messages[last].content.as_deref(), over)
        {
            messages[last].content = Some(shorter.into());
            cut += 1;
        }
    }
    loop {
        let over = estimate(messages, definitions).saturating_sub(room);
        if over == 0 {
            return cut;
        }
        // The largest result of the last turn not cut yet.
        let Some(i) = (last..messages.len())
            .filter(|&i| messages[i].role == Role::Tool)
            .filter(|&i| {
                messages[i]
                    .content
                    .as_deref()
                    .is_some_and(|c| c.len() > MIN_KEEP + NOTE_ROOM && !c.contains(CUT_MARK))
            })
            .max_by_key(|&i| messages[i].content.as_deref().map_or(0, str::len))
        else {
            return cut;
        };
        let content = messages[i].content.take().unwrap_or_default();
        let keep = keep_for(content.len(), over);
        let call = messages[last]
            .tool_calls
            .iter()
            .find(|c| Some(&c.id) == messages[i].tool_call_id.as_ref());
        let (name, args) = call.map_or(("", Value::Null), |c| {
            (
                c.name.as_str(),
                serde_json::from_str(&c.arguments).unwrap_or(Value::Null),
            )
        });
        messages[i].content = Some(cut_text(&content, keep, name, &args).into());
        cut += 1;
    }
}

/// Bytes a text of `len` bytes keeps to take `over` tokens off the estimate. The estimate is
/// bytes / 3 (rounded down): taking `over` tokens' bytes, one more token's, and the note's
/// makes it fit when this text alone can.
fn keep_for(len: usize, over: u64) -> usize {
    let remove = (over as usize + 1) * BYTES_PER_TOKEN + NOTE_ROOM;
    len.saturating_sub(remove).max(MIN_KEEP)
}

/// A model answer's long text cut to what takes `over` tokens off, with a note, when it is
/// long enough to cut and not cut yet.
fn shorten_answer(text: Option<&str>, over: u64) -> Option<String> {
    let text = text.filter(|t| t.len() > MIN_KEEP + NOTE_ROOM && !t.contains(CUT_MARK))?;
    let mut end = keep_for(text.len(), over);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!(
        "{}\n[… {} more characters of this answer {CUT_MARK}]",
        &text[..end],
        text[end..].chars().count()
    ))
}

/// The arguments with every long string value cut to its start and a note, when one is;
/// still a JSON object, so every server takes it.
fn shorten_arguments(arguments: &str) -> Option<String> {
    let Ok(Value::Object(mut map)) = serde_json::from_str::<Value>(arguments) else {
        return None;
    };
    let mut changed = false;
    for value in map.values_mut() {
        if let Value::String(text) = value
            && text.len() > MIN_KEEP + NOTE_ROOM
            && !text.contains(CUT_MARK)
        {
            let mut end = MIN_KEEP;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let rest = text[end..].chars().count();
            *text = format!(
                "{}[… {rest} more characters {CUT_MARK}; the call ran with the whole text]",
                &text[..end]
            );
            changed = true;
        }
    }
    changed.then(|| Value::Object(map).to_string())
}

/// The first `keep` bytes of `content` (on a character boundary, and at a line's end for a
/// file), and a note the model can act on.
fn cut_text(content: &str, keep: usize, tool: &str, args: &Value) -> String {
    let mut end = keep.min(content.len());
    while !content.is_char_boundary(end) {
        end -= 1;
    }
    if tool == "read_file" {
        // Whole lines, so the line numbers in the note are exact.
        if let Some(nl) = content[..end].rfind('\n') {
            end = nl + 1;
        }
        let kept = &content[..end];
        let lines = kept.lines().count();
        let total = content.lines().count();
        let first = args.get("offset").and_then(Value::as_u64).unwrap_or(1);
        let next = first + lines as u64;
        let again = json!({
            "path": args.get("path").cloned().unwrap_or(Value::Null),
            "offset": next,
            "limit": lines.max(1),
        });
        // The file's lines: from read_file's own note, which ends every part that is not
        // the whole file; a whole file has no note and counts its own.
        let of = file_lines(content).map_or_else(|| total.to_string(), str::to_owned);
        return format!(
            "{kept}[{CUT_MARK}: showing lines {first}–{} of {of}; read_file with {again} reads the next part]",
            next.saturating_sub(1)
        );
    }
    let kept = &content[..end];
    format!(
        "{kept}\n[… {} more characters {CUT_MARK}; ask for less at a time (a narrower command, a smaller part) to see them]",
        content[end..].chars().count()
    )
}

/// The file's line count in read_file's note at the end of `content` ("[lines 1–197 of 500
/// (40500 bytes); …]" or "[lines 450–500 of 500: the end of the file]"): "500", or "more
/// than …" when the tool stopped counting.
fn file_lines(content: &str) -> Option<&str> {
    let note = content.trim_end().rsplit('\n').next()?;
    let rest = note.strip_prefix("[lines ")?;
    let (_, of) = rest.split_once(" of ")?;
    Some(of.split(['(', ':', ';']).next()?.trim_end())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::super::{compact, estimate};
    use super::*;
    use fabric_domain::ToolCall;

    fn reading(file: &str, args: &str) -> Vec<Message> {
        vec![
            Message::system("You are an engineer."),
            Message::user("Summarise big.txt"),
            Message::assistant(
                None,
                vec![ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    arguments: args.into(),
                }],
            ),
            Message::tool_result("c1", file),
        ]
    }

    fn numbered(lines: usize) -> String {
        (1..=lines)
            .map(|n| format!("line {n}: the river runs to the sea, and the sea is not full\n"))
            .collect()
    }

    #[test]
    fn issue_26_a_file_larger_than_the_window_is_cut_with_where_to_read_on() {
        // 12,000+ characters on a 4,096-token window (room 3,072 tokens).
        let file = numbered(200);
        assert!(file.len() > 12_000);
        let mut m = reading(&file, r#"{"path": "big.txt"}"#);
        let done = compact(&mut m, &ToolDefinitions::none(), 3_072)
            .unwrap()
            .unwrap();
        assert_eq!(done.cut, 1, "{done:?}");
        assert!(estimate(&m, &ToolDefinitions::none()) <= 3_072);
        let text = m[3].content.as_deref().unwrap();
        assert!(text.starts_with("line 1: "), "{text}");
        let note = text.lines().last().unwrap();
        let shown: usize = text.lines().count() - 1;
        assert!(
            note.contains(&format!("showing lines 1–{shown} of 200;")),
            "{note}"
        );
        for part in [
            format!(r#""offset":{}"#, shown + 1),
            format!(r#""limit":{shown}"#),
            r#""path":"big.txt""#.to_owned(),
        ] {
            assert!(note.contains(&part), "{part}: {note}");
        }
        // The line before the note is whole.
        assert!(text.lines().nth(shown - 1).unwrap().ends_with("not full"));
    }

    /// A part read_file cut itself is cut again with the file's line count from the tool's
    /// note, not the lines this call returned (issue #40: "lines 1–32 of the 197" of a
    /// 500-line file).
    #[test]
    fn issue_40_a_cut_part_of_a_file_counts_the_files_lines() {
        let part = format!(
            "{}[lines 1–197 of 500 (40500 bytes); read_file with {{\"limit\":197,\"offset\":198,\"path\":\"big.txt\"}} reads the next part]",
            numbered(197)
        );
        let mut m = reading(&part, r#"{"path": "big.txt"}"#);
        compact(&mut m, &ToolDefinitions::none(), 3_072).unwrap();
        let text = m[3].content.as_deref().unwrap();
        let note = text.lines().last().unwrap();
        let shown = text.lines().count() - 1;
        assert!(
            note.contains(&format!("showing lines 1–{shown} of 500;")),
            "{note}"
        );
        assert!(
            note.contains(&format!(r#""offset":{}"#, shown + 1)),
            "{note}"
        );
        assert_eq!(
            file_lines("a\n[lines 9–10 of 10: the end of the file]"),
            Some("10")
        );
        assert_eq!(
            file_lines("a\n[lines 1–1 of more than 9 (99 bytes); read_file …]"),
            Some("more than 9")
        );
        assert_eq!(file_lines("a\nb\n"), None);
    }

    #[test]
    fn issue_26_a_ranged_read_counts_its_lines_from_its_offset() {
        let mut m = reading(&numbered(200), r#"{"path": "big.txt", "offset": 41}"#);
        compact(&mut m, &ToolDefinitions::none(), 2_000).unwrap();
        let text = m[3].content.as_deref().unwrap();
        assert!(text.contains("showing lines 41–"), "{text}");
    }

    #[test]
    fn issue_26_other_results_are_cut_on_a_character_boundary() {
        let mut m = reading(&"é".repeat(9_000), "{}");
        m[2].tool_calls[0].name = "shell".into();
        compact(&mut m, &ToolDefinitions::none(), 2_000).unwrap();
        let text = m[3].content.as_deref().unwrap();
        assert!(text.contains("more characters cut to fit"), "{text}");
        assert!(estimate(&m, &ToolDefinitions::none()) <= 2_000);
    }

    #[test]
    fn issue_26_the_long_text_of_a_call_that_ran_is_cut_before_its_result() {
        let mut m = reading("written", "{}");
        m[2].tool_calls[0].name = "write_file".into();
        m[2].tool_calls[0].arguments =
            json!({"path": "big.txt", "content": numbered(200)}).to_string();
        let done = compact(&mut m, &ToolDefinitions::none(), 2_000)
            .unwrap()
            .unwrap();
        assert_eq!(done.cut, 1);
        let args: Value = serde_json::from_str(&m[2].tool_calls[0].arguments).unwrap();
        assert_eq!(args["path"], "big.txt");
        let content = args["content"].as_str().unwrap();
        assert!(
            content.starts_with("line 1: ") && content.contains("the call ran with the whole text"),
            "{content}"
        );
        assert_eq!(m[3].content.as_deref(), Some("written"));
    }

    #[test]
    fn issue_26_when_the_task_alone_does_not_fit_it_is_still_an_error() {
        let mut m = reading(&numbered(200), r#"{"path": "big.txt"}"#);
        m[1] = Message::user("t".repeat(30_000));
        assert!(compact(&mut m, &ToolDefinitions::none(), 3_072).is_err());
    }
}
