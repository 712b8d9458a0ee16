//! The text formats of query parameters, headers and body fields that are more than "a
//! string": each is published in the OpenAPI document as a `pattern`, and checked here by
//! exactly that pattern before its value is parsed, so a value the document allows is never
//! refused and a value it does not allow never gets through (issue #14: schemathesis found
//! `since=` and `Last-Event-ID` values the document allowed and the server refused).
//!
//! The document gets its patterns from these constants (`openapi::publish_formats`). There
//! is no regex engine in this crate (the binary stays small), so each pattern has a small
//! matcher beside it, and a table of values keeps each matcher equal to its pattern.

/// A length of time: a number (at most 9 digits, optionally a fraction of at most 9) and a
/// unit, `90s`, `30m`, `12h`, `7d`, `2w`, `1.5h`. `older_than` of `POST /runs/prune`.
pub(crate) const DURATION_PATTERN: &str = r"^[0-9]{1,9}(\.[0-9]{1,9})?[smhdw]$";

/// A moment back from now: a duration (as [`DURATION_PATTERN`]), a date `2026-11-01`, or a
/// UTC time `2026-11-01T12:30:00Z` (the seconds and the `Z` optional, a space for the `T`).
/// `since` of `GET /runs/search` and `GET /stats`.
pub(crate) const SINCE_PATTERN: &str = r"^([0-9]{1,9}(\.[0-9]{1,9})?[smhdw]|[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])([T ]([01][0-9]|2[0-3]):[0-5][0-9](:([0-5][0-9]|60))?Z?)?)$";

/// Text that is not blank: at least one character that is not white space. White space is
/// spelled out because `\s` means other sets in ECMA-262 (the document's dialect), Python
/// and Rust: this set is ECMA's and Rust's `char::is_whitespace` (which the core's `trim`
/// uses) together, so whatever a validator's `\s`, a value the pattern allows is one the
/// server takes (issue #14: a `pack` of U+0085 matched the document's `\S` and was refused
/// as empty).
/// `prompt`, `pack` and `model_key` of the run requests, `q` of a search, `specialist` of a
/// listing.
pub(crate) const NOT_BLANK_PATTERN: &str = "[^\\u0009-\\u000d\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]";

/// An event's `seq`, as `Last-Event-ID` carries it: decimal digits only.
pub(crate) const EVENT_ID_PATTERN: &str = r"^[0-9]+$";

/// Whether `text` does not match [`NOT_BLANK_PATTERN`]: it holds white space only.
pub(crate) fn is_blank(text: &str) -> bool {
    text.chars().all(|c| c.is_whitespace() || c == '\u{feff}')
}

/// Whether `text` matches [`DURATION_PATTERN`].
pub(crate) fn is_duration(text: &str) -> bool {
    let Some(number) = text.strip_suffix(['s', 'm', 'h', 'd', 'w']) else {
        return false;
    };
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (number, None),
    };
    digits(whole, 1, 9) && fraction.is_none_or(|f| digits(f, 1, 9))
}

/// Whether `text` matches [`SINCE_PATTERN`].
pub(crate) fn is_since(text: &str) -> bool {
    if is_duration(text) {
        return true;
    }
    let bytes = text.as_bytes();
    if bytes.len() < 10 || !text.is_char_boundary(10) {
        return false;
    }
    let (date, rest) = text.split_at(10);
    let date_ok = matches!(date.as_bytes(), [y1, y2, y3, y4, b'-', m1, m2, b'-', d1, d2]
        if [y1, y2, y3, y4, m1, m2, d1, d2].iter().all(|b| b.is_ascii_digit())
            && in_range(*m1, *m2, 1, 12)
            && in_range(*d1, *d2, 1, 31));
    if !date_ok {
        return false;
    }
    if rest.is_empty() {
        return true;
    }
    let Some(time) = rest.strip_prefix(['T', ' ']) else {
        return false;
    };
    let time = time.strip_suffix('Z').unwrap_or(time);
    match time.as_bytes() {
        [h1, h2, b':', m1, m2] => in_range(*h1, *h2, 0, 23) && in_range(*m1, *m2, 0, 59),
        [h1, h2, b':', m1, m2, b':', s1, s2] => {
            in_range(*h1, *h2, 0, 23) && in_range(*m1, *m2, 0, 59) && in_range(*s1, *s2, 0, 60)
        }
        _ => false,
    }
}

/// The `seq` a `Last-Event-ID` names when it matches [`EVENT_ID_PATTERN`]. A number beyond
/// any `seq` (more than `u64` holds) is read as the largest: there is nothing after it.
pub(crate) fn event_id(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.parse().unwrap_or(u64::MAX))
}

/// `text` is `min..=max` ASCII digits.
fn digits(text: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_digit())
}

/// Two ASCII digits whose number is within `low..=high`.
fn in_range(tens: u8, ones: u8, low: u8, high: u8) -> bool {
    tens.is_ascii_digit()
        && ones.is_ascii_digit()
        && (low..=high).contains(&((tens - b'0') * 10 + (ones - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each value, and whether it matches [`DURATION_PATTERN`] and [`SINCE_PATTERN`].
    const DATES_AND_DURATIONS: [(&str, bool, bool); 33] = [
        ("90s", true, true),
        ("30m", true, true),
        ("12h", true, true),
        ("7d", true, true),
        ("2w", true, true),
        ("1.5h", true, true),
        ("0s", true, true),
        ("123456789d", true, true),
        ("1.123456789w", true, true),
        ("2026-11-01", false, true),
        ("2026-11-01T12:30:00Z", false, true),
        ("2026-11-01T12:30:00", false, true),
        ("2026-11-01T12:30Z", false, true),
        ("2026-11-01 12:30", false, true),
        ("2026-02-31", false, true),
        ("2026-12-31T23:59:60Z", false, true),
        // Refused by both, some of which `parse_duration` or `parse_since` alone took.
        ("", false, false),
        ("7", false, false),
        ("7y", false, false),
        (" 7d", false, false),
        ("7 d", false, false),
        ("7.d", false, false),
        (".5h", false, false),
        ("1234567890d", false, false),
        ("7D", false, false),
        ("yesterday", false, false),
        ("2026-13-01", false, false),
        ("2026-11-00", false, false),
        ("2026-11", false, false),
        ("2026-11-01T24:00", false, false),
        ("2026-11-01T12:30:61", false, false),
        ("2026-11-01T1:30", false, false),
        ("2026-11-01\u{e9}", false, false),
    ];

    #[test]
    fn issue_14_durations_and_dates_match_their_patterns() {
        for (text, duration, since) in DATES_AND_DURATIONS {
            assert_eq!(is_duration(text), duration, "duration {text:?}");
            assert_eq!(is_since(text), since, "since {text:?}");
            // What the patterns allow, the parsers take.
            if duration {
                assert!(fabric_domain::parse_duration(text).is_ok(), "{text}");
            }
            if since {
                assert!(fabric_domain::parse_since(text, 0.0).is_ok(), "{text}");
            }
        }
    }

    #[test]
    fn issue_14_blank_is_white_space_in_every_dialect() {
        // (text, blank): blank is also what the core's `trim` empties, and more.
        let cases = [
            ("", true),
            (" \t\n\r", true),
            ("\u{85}", true),
            ("\u{feff}", true),
            ("\u{a0}\u{3000}\u{2028}", true),
            ("a", false),
            (" a ", false),
            ("\u{85}x", false),
            ("\u{200b}\u{1c}", false),
        ];
        for (text, blank) in cases {
            assert_eq!(is_blank(text), blank, "{text:?}");
            if !blank {
                assert!(!text.trim().is_empty(), "{text:?} is text to the core too");
            }
        }
        // The pattern's set is exactly the characters `is_blank` skips.
        let listed: Vec<char> = (0..=0x10ffff_u32)
            .filter_map(char::from_u32)
            .filter(|c| is_blank(&c.to_string()))
            .collect();
        let ranges = [
            (0x09, 0x0d),
            (0x20, 0x20),
            (0x85, 0x85),
            (0xa0, 0xa0),
            (0x1680, 0x1680),
            (0x2000, 0x200a),
            (0x2028, 0x2028),
            (0x2029, 0x2029),
            (0x202f, 0x202f),
            (0x205f, 0x205f),
            (0x3000, 0x3000),
            (0xfeff, 0xfeff),
        ];
        let expected: Vec<char> = ranges
            .iter()
            .flat_map(|(a, b)| (*a..=*b).filter_map(char::from_u32))
            .collect();
        assert_eq!(listed, expected);
        let escape = |c: u32| format!("\\u{c:04x}");
        let class: String = ranges
            .iter()
            .map(|&(a, b)| match a == b {
                true => escape(a),
                false => format!("{}-{}", escape(a), escape(b)),
            })
            .collect();
        assert_eq!(NOT_BLANK_PATTERN, format!("[^{class}]"));
    }

    #[test]
    fn issue_14_event_ids_are_digits_and_saturate() {
        assert_eq!(event_id("0"), Some(0));
        assert_eq!(event_id("42"), Some(42));
        assert_eq!(event_id("99999999999999999999999"), Some(u64::MAX));
        for bad in ["", "null", "-1", "+1", " 1", "1 ", "1.0", "\u{0661}"] {
            assert_eq!(event_id(bad), None, "{bad:?}");
        }
    }

    /// The document publishes these constants where the server checks them.
    #[test]
    fn issue_14_the_document_publishes_these_patterns() {
        let doc = serde_json::to_value(crate::openapi()).expect("the document serialises");
        let param = |path: &str, name: &str| {
            doc["paths"][path]["get"]["parameters"]
                .as_array()
                .and_then(|ps| ps.iter().find(|p| p["name"] == name))
                .map(|p| p["schema"].clone())
                .unwrap_or_else(|| panic!("GET {path} has no parameter {name}"))
        };
        for (path, name, pattern) in [
            ("/runs/search", "q", NOT_BLANK_PATTERN),
            ("/runs/search", "since", SINCE_PATTERN),
            ("/stats", "since", SINCE_PATTERN),
            ("/runs", "specialist", NOT_BLANK_PATTERN),
            ("/runs/{id}/events", "Last-Event-ID", EVENT_ID_PATTERN),
        ] {
            let schema = param(path, name);
            assert_eq!(schema["pattern"], pattern, "{path} {name}");
            assert_eq!(schema["type"], "string", "{path} {name} is never null");
        }
        let field = |component: &str, name: &str| {
            doc["components"]["schemas"][component]["properties"][name]["pattern"].clone()
        };
        for name in ["prompt", "pack", "model_key"] {
            assert_eq!(field("RunRequest", name), NOT_BLANK_PATTERN, "{name}");
        }
        assert_eq!(field("PruneRequest", "older_than"), DURATION_PATTERN);
    }
}
