//! Keeping a conversation inside the model's context window (issue #12). Ollama silently
//! drops the start of a prompt longer than `num_ctx`, so a run never sends one: before each
//! model call the prompt is estimated, and when it (with room for the answer) would not fit,
//! the conversation is compacted:
//!
//! 1. older tool results are shortened, oldest first, the latest ones kept whole;
//! 2. then older turns (a model answer and its tool results, together, so every result still
//!    follows its call) are left out, oldest first, and one note in their place says what
//!    they did (written by the model when `context_compaction: summarize`);
//!
//! 3. then the last turn, kept whole so far, is cut to what fits: the long texts of its calls'
//!    arguments, its own text (a long answer in prose, such as one the server's token limit
//!    cut, issue #40), then its results, largest first, each with a note the model can act
//!    on (for `read_file`, the lines shown and the call that reads the next part; [`cut`]);
//!
//! never the system prompt, the task (and the hand-over before the first answer), nor the last
//! turn's calls. When even that does not fit, the run ends `context_window_exceeded`.
//!
//! The estimate is the prompt's UTF-8 bytes divided by three: it errs high for English and
//! code (about four characters a token) by about a third, and low only for text that takes
//! more than one token per three bytes (long runs of digits or symbols), so a prompt judged
//! to fit does.

mod cut;

use fabric_domain::{Message, Role};

use crate::ports::ToolDefinitions;

/// Bytes a token is taken to be, for the window (see the module doc).
pub(crate) const BYTES_PER_TOKEN: usize = 3;
/// What a shortened tool result keeps of its start.
const SHORTENED_CHARS: usize = 300;
/// The prefix that marks the note standing for left-out turns.
pub const NOTE_PREFIX: &str = "[Context note:";
/// What marks a shortened tool result (it is not shortened again).
const SHORTENED_MARK: &str = "left out to fit the model's context window; call the tool again";
/// What marks a note written by the model.
const SUMMARY_MARK: &str = "this is what they did:";

/// About how many tokens a request takes, erring high (see the module doc).
pub fn estimate(messages: &[Message], definitions: &ToolDefinitions) -> u64 {
    let bytes: usize = messages
        .iter()
        .map(|m| {
            m.content.as_deref().map_or(0, str::len)
                + m.tool_calls
                    .iter()
                    .map(|c| c.id.len() + c.name.len() + c.arguments.len() + 16)
                    .sum::<usize>()
                + 16
        })
        .sum::<usize>()
        + definitions.byte_len();
    (bytes / BYTES_PER_TOKEN) as u64
}

/// The share of the window kept for the answer: `max_tokens`, at most a quarter of it.
pub(crate) fn answer_share(window: u32, max_tokens: Option<u32>) -> u32 {
    max_tokens.unwrap_or(1024).min(window / 4)
}

/// The room a request may take: the window minus the answer's share.
pub fn room(window: u32, max_tokens: Option<u32>) -> u64 {
    u64::from(window.saturating_sub(answer_share(window, max_tokens)))
}

/// What a compaction did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Compaction {
    /// The estimate before and after.
    pub tokens_before: u64,
    /// After.
    pub tokens_after: u64,
    /// Tool results shortened.
    pub shortened: usize,
    /// Messages left out (model answers and tool results).
    pub dropped_messages: usize,
    /// Results of the last turn cut to fit.
    pub cut: usize,
    /// The turns left out, as the note describes them (for a summary by the model).
    pub dropped_text: String,
}

/// Where a conversation's protected parts are: everything before the first model answer
/// (system prompt, task, hand-over, an earlier note) and the last turn.
fn layout(messages: &[Message]) -> (usize, usize) {
    let head = messages
        .iter()
        .position(|m| m.role == Role::Assistant)
        .unwrap_or(messages.len());
    let last = messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .unwrap_or(messages.len());
    (head, last.max(head))
}

/// Compacts `messages` until the estimate fits `room`, or returns `Err` with the smallest
/// estimate reachable. `Ok(None)`: it fitted already.
pub fn compact(
    messages: &mut Vec<Message>,
    definitions: &ToolDefinitions,
    room: u64,
) -> Result<Option<Compaction>, u64> {
    let before = estimate(messages, definitions);
    if before <= room {
        return Ok(None);
    }
    let mut done = Compaction {
        tokens_before: before,
        ..Compaction::default()
    };
    // 1. Shorten older tool results, oldest first.
    done.shortened = shorten_old_results(messages, definitions, room);
    // 2. Leave out older turns, oldest first, each an answer with its results.
    let (dropped, earlier_summary) = drop_old_turns(messages, definitions, room);
    done.dropped_messages = dropped.len();
    // 3. The last turn's results, cut to what fits.
    if estimate(messages, definitions) > room {
        done.cut = cut::cut_newest(messages, definitions, room);
    }
    done.dropped_text = match earlier_summary {
        Some(earlier) => format!("Earlier: {earlier}\n{}", describe(&dropped)),
        None => describe(&dropped),
    };
    let after = estimate(messages, definitions);
    done.tokens_after = after;
    if after > room {
        return Err(after);
    }
    Ok(Some(done))
}

/// Shortens older tool results, oldest first, until the messages fit `room`; how many.
fn shorten_old_results(
    messages: &mut [Message],
    definitions: &ToolDefinitions,
    room: u64,
) -> usize {
    let mut shortened = 0;
    let (head, last) = layout(messages);
    for i in head..last {
        if estimate(messages, definitions) <= room {
            break;
        }
        let message = &mut messages[i];
        if message.role != Role::Tool {
            continue;
        }
        let Some(content) = message.content.as_deref() else {
            continue;
        };
        if content.chars().count() <= SHORTENED_CHARS + 100
            || content.contains(SHORTENED_MARK)
            || content.contains(cut::CUT_MARK)
        {
            continue;
        }
        let kept: String = content.chars().take(SHORTENED_CHARS).collect();
        let cut = content.chars().count() - SHORTENED_CHARS;
        message.content = Some(
            format!(
                "{kept}\n[… {cut} more characters left out to fit the model's context window; call the tool again if you need them]"
            )
            .into(),
        );
        shortened += 1;
    }
    shortened
}

/// Leaves out older turns, oldest first, each an answer with its results, until the
/// messages fit `room`; a note takes their place. Returns the turns left out and what an
/// earlier note said.
fn drop_old_turns(
    messages: &mut Vec<Message>,
    definitions: &ToolDefinitions,
    room: u64,
) -> (Vec<Message>, Option<String>) {
    let mut dropped: Vec<Message> = Vec::new();
    // What an earlier note said, so a summary of the newly left-out turns builds on it.
    let mut earlier_summary: Option<String> = None;
    loop {
        let (head, last) = layout(messages);
        if estimate(messages, definitions) <= room || head >= last {
            break;
        }
        let end = messages[head + 1..last]
            .iter()
            .position(|m| m.role == Role::Assistant)
            .map_or(last, |p| head + 1 + p);
        let turn: Vec<Message> = messages.drain(head..end).collect();
        // The note takes the turns' place at the end of the head; an earlier note is
        // counted into it, so it stays one short line however many turns go.
        let earlier = messages[..head].iter().position(|m| {
            m.role == Role::User
                && m.content
                    .as_deref()
                    .is_some_and(|c| c.starts_with(NOTE_PREFIX))
        });
        let earlier_text = earlier.and_then(|i| messages[i].content.clone().map(String::from));
        if earlier_summary.is_none() {
            earlier_summary = earlier_text.clone();
        }
        // A note may hold a summary the model wrote (kept) and the counts of turns left out
        // since (merged), one line each.
        let lines: Vec<&str> = earlier_text
            .as_deref()
            .map_or(Vec::new(), |t| t.lines().collect());
        let kept_summary = lines.iter().find(|l| l.contains(SUMMARY_MARK)).copied();
        let mut counts = lines
            .iter()
            .find(|l| !l.contains(SUMMARY_MARK))
            .map(|l| NoteCounts::parse(l))
            .unwrap_or_default();
        counts.add(&turn);
        let note = match kept_summary {
            Some(summary) => format!("{summary}\n{}", counts.render()),
            None => counts.render(),
        };
        match earlier {
            Some(i) => messages[i].content = Some(note.into()),
            None => messages.insert(head, Message::user(note)),
        }
        dropped.extend(turn);
    }
    (dropped, earlier_summary)
}

/// What the note standing for left-out turns says: how many steps, and the calls they made.
#[derive(Debug, Default, PartialEq, Eq)]
struct NoteCounts {
    steps: usize,
    /// Tool names and how often each was called, in the order first seen.
    calls: Vec<(String, usize)>,
}

impl NoteCounts {
    /// Counts a left-out turn in.
    fn add(&mut self, turn: &[Message]) {
        for m in turn.iter().filter(|m| m.role == Role::Assistant) {
            self.steps += 1;
            for call in &m.tool_calls {
                match self.calls.iter_mut().find(|(name, _)| *name == call.name) {
                    Some((_, n)) => *n += 1,
                    None => self.calls.push((call.name.clone(), 1)),
                }
            }
        }
    }

    fn render(&self) -> String {
        let calls: Vec<String> = self
            .calls
            .iter()
            .map(|(name, n)| format!("{name} ×{n}"))
            .collect();
        format!(
            "{NOTE_PREFIX} {} earlier step(s) were left out to fit the model's context window. They called: {}. Their effects (files written, commands run) are still there: check with the tools when you need them.]",
            self.steps,
            if calls.is_empty() {
                "no tools".to_owned()
            } else {
                calls.join(", ")
            }
        )
    }

    /// Reads back a note [`render`](Self::render) wrote (a summary note counts as nothing).
    fn parse(note: &str) -> Self {
        let steps = note
            .strip_prefix(NOTE_PREFIX)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let calls = note
            .split_once("They called: ")
            .and_then(|(_, rest)| rest.split_once(". Their effects"))
            .map(|(list, _)| {
                list.split(", ")
                    .filter_map(|item| {
                        let (name, n) = item.rsplit_once(" ×")?;
                        Some((name.to_owned(), n.parse().ok()?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self { steps, calls }
    }
}

/// The left-out turns as text, for the model to summarise.
fn describe(dropped: &[Message]) -> String {
    let mut out = String::new();
    for m in dropped {
        match m.role {
            Role::Assistant => {
                if let Some(text) = m.content.as_deref().filter(|t| !t.is_empty()) {
                    out.push_str(&format!(
                        "assistant: {}\n",
                        crate::recorder::truncate(text, 500)
                    ));
                }
                for c in &m.tool_calls {
                    out.push_str(&format!(
                        "call {}({})\n",
                        c.name,
                        crate::recorder::truncate(&c.arguments, 300)
                    ));
                }
            }
            Role::Tool => out.push_str(&format!(
                "result: {}\n",
                crate::recorder::truncate(m.content.as_deref().unwrap_or(""), 500)
            )),
            _ => {}
        }
    }
    out
}

/// Puts a model-written summary in the note's place.
pub(crate) fn use_summary(messages: &mut [Message], summary: &str) {
    if let Some(note) = messages.iter_mut().find(|m| {
        m.role == Role::User
            && m.content
                .as_deref()
                .is_some_and(|c| c.starts_with(NOTE_PREFIX))
    }) {
        // The count of steps left out stays in the note: the model learns how far along it
        // is, and a scripted server keys its answers by it (`turn_by: conversation`).
        let steps: usize = note
            .content
            .as_deref()
            .unwrap_or_default()
            .lines()
            .map(|l| NoteCounts::parse(l).steps)
            .sum();
        note.content = Some(
            format!(
                "{NOTE_PREFIX} {steps} earlier step(s) were left out to fit the model's context window; {SUMMARY_MARK} {}]",
                summary.replace('\n', " ")
            )
            .into(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_domain::ToolCall;

    fn turn(n: usize, result: &str) -> Vec<Message> {
        let id = format!("c{n}");
        vec![
            Message::assistant(
                None,
                vec![ToolCall {
                    id: id.clone(),
                    name: "read_file".into(),
                    arguments: format!("{{\"path\": \"f{n}\"}}"),
                }],
            ),
            Message::tool_result(&id, result),
        ]
    }

    fn conversation(turns: usize, size: usize) -> Vec<Message> {
        let mut m = vec![Message::system("system"), Message::user("the task")];
        for n in 0..turns {
            m.extend(turn(n, &"x".repeat(size)));
        }
        m
    }

    #[test]
    fn a_conversation_that_fits_is_left_alone() {
        let mut m = conversation(3, 100);
        assert_eq!(compact(&mut m, &ToolDefinitions::none(), 10_000), Ok(None));
    }

    #[test]
    fn older_results_are_shortened_first_and_the_last_turn_kept_whole() {
        let mut m = conversation(6, 3_000);
        let room = estimate(&m, &ToolDefinitions::none()) - 2_000;
        let done = compact(&mut m, &ToolDefinitions::none(), room)
            .unwrap_or_default()
            .unwrap_or_default();
        assert!(
            done.shortened >= 1 && done.dropped_messages == 0,
            "{done:?}"
        );
        assert!(done.tokens_after <= room);
        assert_eq!(m.len(), 14, "nothing dropped");
        assert!(
            m[3].content
                .as_deref()
                .unwrap_or("")
                .contains("left out to fit")
        );
        assert_eq!(
            m[13].content.as_deref().map(str::len),
            Some(3_000),
            "the last result whole"
        );
        assert_eq!(m[0].content.as_deref(), Some("system"));
        assert_eq!(m[1].content.as_deref(), Some("the task"));
    }

    #[test]
    fn then_older_turns_are_left_out_behind_one_note() {
        let mut m = conversation(40, 300);
        let room = 2_000;
        let done = compact(&mut m, &ToolDefinitions::none(), room)
            .unwrap_or_default()
            .unwrap_or_default();
        assert!(
            done.dropped_messages > 0 && done.dropped_messages.is_multiple_of(2),
            "{done:?}"
        );
        assert!(estimate(&m, &ToolDefinitions::none()) <= room);
        assert!(
            m[2].content
                .as_deref()
                .unwrap_or("")
                .starts_with(NOTE_PREFIX)
        );
        // Every result still follows its call.
        for (i, message) in m.iter().enumerate() {
            if message.role == Role::Tool {
                let id = message.tool_call_id.clone().unwrap_or_default();
                assert!(
                    m[..i]
                        .iter()
                        .any(|p| p.tool_calls.iter().any(|c| c.id == id))
                );
            }
        }
        // A second compaction keeps one note.
        m.extend(turn(99, &"y".repeat(3_000)));
        let _ = compact(&mut m, &ToolDefinitions::none(), room);
        let notes = m
            .iter()
            .filter(|x| {
                x.content
                    .as_deref()
                    .is_some_and(|c| c.starts_with(NOTE_PREFIX))
            })
            .count();
        assert_eq!(notes, 1);
    }

    #[test]
    fn a_shortened_result_is_not_shortened_again() {
        let mut m = conversation(6, 3_000);
        let room = estimate(&m, &ToolDefinitions::none()) - 2_000;
        let _ = compact(&mut m, &ToolDefinitions::none(), room);
        let once: Vec<Option<fabric_domain::Text>> = m.iter().map(|x| x.content.clone()).collect();
        let _ = compact(&mut m, &ToolDefinitions::none(), 1);
        let kept = m
            .iter()
            .filter_map(|x| x.content.as_deref())
            .filter(|c| c.contains(SHORTENED_MARK))
            .all(|c| once.iter().flatten().any(|o| o == c));
        assert!(
            kept,
            "a shortened result keeps its note of how much was cut"
        );
    }

    #[test]
    fn a_summary_survives_the_next_compaction_with_counts_beside_it() {
        let mut m = conversation(40, 300);
        let _ = compact(&mut m, &ToolDefinitions::none(), 2_000);
        use_summary(&mut m, "read the files");
        m.extend(turn(98, &"z".repeat(1_500)));
        m.extend(turn(99, &"y".repeat(1_500)));
        let _ = compact(&mut m, &ToolDefinitions::none(), 2_000);
        let note = m
            .iter()
            .find_map(|x| x.content.as_deref().filter(|c| c.starts_with(NOTE_PREFIX)))
            .unwrap_or_default();
        assert!(
            note.contains("read the files") && note.contains("earlier step(s)"),
            "{note}"
        );
    }

    #[test]
    fn issue_26_the_note_keeps_counting_the_steps_left_out_through_summaries() {
        let mut m = conversation(40, 300);
        let _ = compact(&mut m, &ToolDefinitions::none(), 2_000);
        use_summary(&mut m, "read the files");
        m.extend(turn(98, &"z".repeat(1_500)));
        m.extend(turn(99, &"y".repeat(1_500)));
        let _ = compact(&mut m, &ToolDefinitions::none(), 2_000);
        use_summary(&mut m, "read more files");
        let note = m
            .iter()
            .find_map(|x| x.content.as_deref().filter(|c| c.starts_with(NOTE_PREFIX)))
            .unwrap_or_default();
        let kept = m.iter().filter(|x| x.role == Role::Assistant).count();
        let noted: usize = note.lines().map(|l| NoteCounts::parse(l).steps).sum();
        assert_eq!(noted + kept, 42, "{note}");
    }

    #[test]
    fn the_note_counts_survive_a_round_trip() {
        let mut counts = NoteCounts::default();
        counts.add(&turn(1, "r"));
        counts.add(&turn(2, "r"));
        let text = counts.render();
        assert!(
            text.contains("2 earlier step(s)") && text.contains("read_file ×2"),
            "{text}"
        );
        assert_eq!(NoteCounts::parse(&text), counts);
    }

    #[test]
    fn what_cannot_fit_is_an_error() {
        let mut m = vec![Message::system("s"), Message::user("t".repeat(30_000))];
        assert!(compact(&mut m, &ToolDefinitions::none(), 1_000).is_err());
    }
}
