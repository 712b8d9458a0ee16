//! The one rule for untrusted text shown to a person (issue #39, ADR-089): a terminal obeys
//! control characters, so a file's contents, a path, a tool's or a server's name or error
//! could clear lines, move the cursor over what a reviewer reads, or write the clipboard
//! (OSC 52). Every control character is shown as an escape a person can read instead of
//! being obeyed or silently dropped: the C0 controls (`\x1b`, `\x07`, `\r`, ...), DEL
//! (`\x7f`) and the C1 controls U+0080–U+009F (`\u{9b}`, the 8-bit CSI, among them).
//!
//! [`visible_text`] keeps newline and tab (a file's contents, an error of several lines);
//! [`visible_line`] escapes them too (a path, a name: one line that stays one line);
//! [`visible_json`] is the rule for JSON printed for people: serde already escapes C0, and
//! DEL and C1 become `\u00XX`, so the JSON still parses to the same value. Output meant for
//! programs (`--json`) is not passed through any of them: it stays byte-exact.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every control character but newline and tab shown as an escape.
pub fn visible_text(text: &str) -> Cow<'_, str> {
    escape(text, |c| c == '\n' || c == '\t', shown)
}

/// `text` on one line: every control character, newline and tab included, shown as an
/// escape.
pub fn visible_line(text: &str) -> Cow<'_, str> {
    escape(text, |_| false, shown)
}

/// JSON text (as serde writes it, pretty or not) with DEL and the C1 controls written as
/// `\u00XX` escapes: the same value, with nothing a terminal obeys. serde escapes every C0
/// control inside strings, so the C0 characters left (newlines, indentation) are the
/// layout's own; DEL and C1 can only be inside strings, where the escape means the same
/// character.
pub fn visible_json(json: &str) -> Cow<'_, str> {
    escape(
        json,
        |c| c < '\u{7f}',
        |out, c| {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        },
    )
}

/// `text` with each control character not `kept` written by `show`; borrowed when there is
/// none.
fn escape(
    text: &str,
    kept: impl Fn(char) -> bool,
    show: impl Fn(&mut String, char),
) -> Cow<'_, str> {
    let hidden = |c: char| c.is_control() && !kept(c);
    let Some(first) = text.find(hidden) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        if hidden(c) {
            show(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// How one control character is shown: `\n`, `\t`, `\r` by name, the other C0 controls and
/// DEL as `\xNN`, the C1 controls as `\u{NN}` (Rust's own spellings).
fn shown(out: &mut String, c: char) {
    let _ = match c {
        '\n' => out.write_str("\\n"),
        '\t' => out.write_str("\\t"),
        '\r' => out.write_str("\\r"),
        c if u32::from(c) <= 0x7f => write!(out, "\\x{:02x}", u32::from(c)),
        c => write!(out, "\\u{{{:x}}}", u32::from(c)),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const OSC52: &str = "\u{1b}]52;c;SGVsbG8=\u{7}";

    #[test]
    fn issue_39_escape_sequences_are_shown_not_obeyed() {
        let text = format!("a{OSC52}\n\u{1b}[1A\u{1b}[2Kb\tc\r\u{7f}\u{9b}31m\u{85}");
        let shown = visible_text(&text);
        assert_eq!(
            shown,
            "a\\x1b]52;c;SGVsbG8=\\x07\n\\x1b[1A\\x1b[2Kb\tc\\r\\x7f\\u{9b}31m\\u{85}"
        );
        assert!(
            !shown
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
        );
    }

    #[test]
    fn issue_39_a_line_escapes_newlines_and_tabs_too() {
        let shown = visible_line("x\u{1b}]52;c;SGVsbG8=\u{7}\n\ty\u{0}");
        assert_eq!(shown, "x\\x1b]52;c;SGVsbG8=\\x07\\n\\ty\\x00");
        assert!(!shown.chars().any(char::is_control));
    }

    #[test]
    fn issue_39_plain_text_is_borrowed_unchanged() {
        for text in [
            "",
            "src/main.rs",
            "naïve ünïcode → ✓ 日本",
            "tab\tand\nnewline",
        ] {
            assert!(matches!(visible_text(text), Cow::Borrowed(t) if t == text));
        }
        assert!(matches!(
            visible_line("a b/c.rs"),
            Cow::Borrowed("a b/c.rs")
        ));
        // Printable characters beyond C1 (U+00A0 on) are kept.
        assert_eq!(visible_line("\u{a0}é\u{ff}"), "\u{a0}é\u{ff}");
    }

    #[test]
    fn issue_39_json_for_people_keeps_its_value() {
        let value = serde_json::json!({"s": format!("{OSC52}\u{7f}\u{9b}2J\u{85}")});
        for written in [
            serde_json::to_string(&value).unwrap_or_default(),
            serde_json::to_string_pretty(&value).unwrap_or_default(),
        ] {
            let shown = visible_json(&written);
            assert!(
                !shown.chars().any(|c| c.is_control() && c != '\n'),
                "{shown}"
            );
            let back: serde_json::Value = serde_json::from_str(&shown).unwrap_or_default();
            assert_eq!(back, value);
        }
    }
}
