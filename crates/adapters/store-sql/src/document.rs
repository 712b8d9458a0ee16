//! Pure text functions of search: the document a run is found by, and a user's words turned
//! into a full-text query that can only ever mean "these words".

use fabric_domain::runlog::EventPayload;
use fabric_domain::{RunEvent, RunSummary};
use serde_json::Value;

/// The most text of one run that goes into the full-text index.
pub const DOCUMENT_CAP: usize = 64 * 1024;

/// The text a run is found by: its prompt, its specialists, its summary and result, then its
/// tool calls (name and arguments), results and errors in order, cut at `cap` bytes (on a
/// character boundary).
pub fn search_document(summary: &RunSummary, events: &[RunEvent], cap: usize) -> String {
    let mut doc = String::new();
    push(&mut doc, &summary.prompt, cap);
    push(&mut doc, &summary.specialist_ids.join(" "), cap);
    if let Some(text) = &summary.summary {
        push(&mut doc, text, cap);
    }
    if let Some(result) = &summary.result {
        push(&mut doc, &value_text(result), cap);
    }
    for event in events {
        if doc.len() >= cap {
            break;
        }
        let text = match ToolEvent::of(event) {
            Some(ToolEvent::Call { tool, args }) => format!("{tool} {}", value_text(args)),
            Some(ToolEvent::Result { result, .. }) => value_text(result),
            Some(ToolEvent::Error { tool, message }) => format!("{tool} {message}"),
            None => continue,
        };
        push(&mut doc, &text, cap);
    }
    doc
}

/// What search and stats by tool take from the events of a tool call.
pub(crate) enum ToolEvent<'a> {
    /// `tool_call`.
    Call { tool: &'a str, args: &'a Value },
    /// `tool_result`.
    Result { tool: &'a str, result: &'a Value },
    /// `tool_error`.
    Error { tool: &'a str, message: &'a str },
}

impl<'a> ToolEvent<'a> {
    /// The tool call `event` is part of; `None` for other events and for a payload that
    /// does not fit its kind (it is indexed without a tool).
    pub(crate) fn of(event: &'a RunEvent) -> Option<Self> {
        match &event.payload {
            EventPayload::ToolCall(call) => Some(Self::Call {
                tool: &call.tool,
                args: &call.args,
            }),
            EventPayload::ToolResult(result) => Some(Self::Result {
                tool: &result.tool,
                result: &result.result,
            }),
            EventPayload::ToolError(error) => Some(Self::Error {
                tool: &error.tool,
                message: &error.error_message,
            }),
            EventPayload::RunStart(_)
            | EventPayload::Recruitment(_)
            | EventPayload::TaskForceParallel(_)
            | EventPayload::MemberStart(_)
            | EventPayload::MemberEnd(_)
            | EventPayload::McpServer(_)
            | EventPayload::McpMessage(_)
            | EventPayload::McpRequest(_)
            | EventPayload::LlmRequest(_)
            | EventPayload::RoutingRequest(_)
            | EventPayload::LlmResponse(_)
            | EventPayload::RoutingResponse(_)
            | EventPayload::CorrectiveReprompt(_)
            | EventPayload::ToolCallRepaired(_)
            | EventPayload::ContextCompacted(_)
            | EventPayload::CloudFallback(_)
            | EventPayload::CriticReview(_)
            | EventPayload::RepairRound(_)
            | EventPayload::SecurityEvent(_)
            | EventPayload::LoopDetected(_)
            | EventPayload::RunResumed(_)
            | EventPayload::InputRequired(_)
            | EventPayload::InputAnswered(_)
            | EventPayload::UserMessage(_)
            | EventPayload::HookRun(_)
            | EventPayload::Workspace(_)
            | EventPayload::Checkpoint(_)
            | EventPayload::RunComplete(_)
            | EventPayload::RunFailed(_)
            | EventPayload::RunAborted(_)
            | EventPayload::Unknown { .. }
            | EventPayload::Unreadable { .. } => None,
        }
    }

    /// The tool called.
    pub(crate) fn tool(self) -> &'a str {
        match self {
            Self::Call { tool, .. } | Self::Result { tool, .. } | Self::Error { tool, .. } => tool,
        }
    }
}

/// A JSON value as text: strings as they are, anything else as compact JSON.
fn value_text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn push(doc: &mut String, text: &str, cap: usize) {
    let text = text.trim();
    if text.is_empty() || doc.len() >= cap {
        return;
    }
    if !doc.is_empty() {
        doc.push('\n');
    }
    let room = cap.saturating_sub(doc.len());
    let mut end = text.len().min(room);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    doc.push_str(&text[..end]);
}

/// The words of a query: runs of letters and digits. Everything else (`"`, `*`, `-`, `:`,
/// parentheses) separates words and means nothing, so no query syntax gets through.
pub fn query_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(32)
        .map(str::to_lowercase)
        .collect()
}

/// The English stopwords a text search leaves out of a query, on both stores: exactly those of
/// PostgreSQL's `english` configuration (its `english.stop`), which drops them from the
/// query and the document alike; SQLite's FTS5 would otherwise require them, so one query
/// found different runs on the two stores (issue #40, ADR-094).
pub const STOPWORDS: [&str; 127] = [
    "i",
    "me",
    "my",
    "myself",
    "we",
    "our",
    "ours",
    "ourselves",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "he",
    "him",
    "his",
    "himself",
    "she",
    "her",
    "hers",
    "herself",
    "it",
    "its",
    "itself",
    "they",
    "them",
    "their",
    "theirs",
    "themselves",
    "what",
    "which",
    "who",
    "whom",
    "this",
    "that",
    "these",
    "those",
    "am",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "have",
    "has",
    "had",
    "having",
    "do",
    "does",
    "did",
    "doing",
    "a",
    "an",
    "the",
    "and",
    "but",
    "if",
    "or",
    "because",
    "as",
    "until",
    "while",
    "of",
    "at",
    "by",
    "for",
    "with",
    "about",
    "against",
    "between",
    "into",
    "through",
    "during",
    "before",
    "after",
    "above",
    "below",
    "to",
    "from",
    "up",
    "down",
    "in",
    "out",
    "on",
    "off",
    "over",
    "under",
    "again",
    "further",
    "then",
    "once",
    "here",
    "there",
    "when",
    "where",
    "why",
    "how",
    "all",
    "any",
    "both",
    "each",
    "few",
    "more",
    "most",
    "other",
    "some",
    "such",
    "no",
    "nor",
    "not",
    "only",
    "own",
    "same",
    "so",
    "than",
    "too",
    "very",
    "s",
    "t",
    "can",
    "will",
    "just",
    "don",
    "should",
    "now",
];

/// The words a text search looks for: `words` less the [`STOPWORDS`].
pub fn search_terms(words: &[String]) -> Vec<String> {
    words
        .iter()
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .cloned()
        .collect()
}

/// An FTS5 query matching runs with all the words: each one a quoted string, so `NEAR`,
/// `OR` and `AND` are words like any other.
pub fn fts5_query(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The same words for PostgreSQL's `plainto_tsquery`, which reads no operators.
pub(crate) fn plain_query(words: &[String]) -> String {
    words.join(" ")
}

/// A short excerpt of `text` around the first of `words` it contains, the matches in `[…]`.
pub fn snippet(text: &str, words: &[String], radius: usize) -> Option<String> {
    let lower = text.to_lowercase();
    // Lower-casing can change byte lengths; fall back to the start when it did.
    let same_len = lower.len() == text.len();
    let hit = words
        .iter()
        .filter_map(|w| lower.find(w.as_str()).map(|at| (at, w.len())))
        .min();
    let (at, len) = match hit {
        Some(found) if same_len => found,
        _ => (0, 0),
    };
    let mut start = at.saturating_sub(radius);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (at + len + radius).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    if len > 0 {
        out.push_str(&text[start..at]);
        out.push('[');
        out.push_str(&text[at..at + len]);
        out.push(']');
        out.push_str(&text[at + len..end]);
    } else {
        out.push_str(&text[start..end]);
    }
    if end < text.len() {
        out.push('…');
    }
    let out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_domain::{EventKind, RunId};
    use serde_json::json;

    #[test]
    fn query_syntax_is_plain_words() {
        let words = query_words(r#"say "hello" NEAR world* OR -x col:umn"#);
        assert_eq!(
            words,
            ["say", "hello", "near", "world", "or", "x", "col", "umn"]
        );
        assert_eq!(fts5_query(&words[..2]), r#""say" "hello""#);
        assert!(query_words(" \"*-: ").is_empty());
    }

    #[test]
    fn document_holds_prompt_tools_and_results_capped() {
        let mut summary = RunSummary::new(RunId::parse("r1").unwrap());
        summary.prompt = "write hello".into();
        summary.summary = Some("wrote it".into());
        let events = vec![
            fabric_fakes::sample(
                EventKind::ToolCall,
                1.0,
                json!({"tool": "write_file", "args": {"path": "hello.txt"}}),
            ),
            fabric_fakes::sample(
                EventKind::ToolResult,
                1.0,
                json!({"tool": "write_file", "result": "wrote 11 bytes"}),
            ),
            fabric_fakes::sample(
                EventKind::ToolError,
                1.0,
                json!({"tool": "shell", "error_message": "no such command: zz"}),
            ),
        ];
        let doc = search_document(&summary, &events, DOCUMENT_CAP);
        assert!(doc.contains("write hello") && doc.contains("hello.txt"));
        assert!(doc.contains("wrote 11 bytes"));
        assert!(doc.contains("shell no such command: zz"), "{doc}");
        let capped = search_document(&summary, &events, 12);
        assert!(capped.len() <= 12, "{capped}");
    }

    #[test]
    fn snippet_marks_the_match() {
        let text = "a long text about the zebra crossing in town";
        assert_eq!(
            snippet(text, &["zebra".to_owned()], 6).unwrap(),
            "…t the [zebra] cross…"
        );
    }

    /// The list is PostgreSQL's own, word for word, wherever PostgreSQL is installed here
    /// (issue #40: the two stores must leave out the same words).
    #[test]
    fn issue_40_the_stopwords_are_postgresqls_english_stop() {
        let Ok(versions) = std::fs::read_dir("/usr/share/postgresql") else {
            return;
        };
        for version in versions.flatten() {
            let file = version.path().join("tsearch_data/english.stop");
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let theirs: Vec<&str> = text.split_whitespace().collect();
            assert_eq!(theirs, STOPWORDS, "{}", file.display());
        }
        let words = query_words("The sea AND the river");
        assert_eq!(search_terms(&words), ["sea", "river"]);
    }
}
