//! Turning captured bytes into text for the model.

/// Decodes bytes as UTF-8, replacing invalid sequences with U+FFFD. When the bytes are a
/// prefix of something longer (`cut` is true), an incomplete character at the very end is
/// dropped instead of being shown as a replacement character, because the cut made it, not
/// the data. Returns the text and whether anything was replaced.
pub(crate) fn decode(bytes: &[u8], cut: bool) -> (String, bool) {
    let mut bytes = bytes;
    // `error_len() == None` means "valid so far, but the input ends mid-character".
    if cut
        && let Err(e) = std::str::from_utf8(bytes)
        && e.error_len().is_none()
    {
        bytes = &bytes[..e.valid_up_to()];
    }
    match String::from_utf8_lossy(bytes) {
        std::borrow::Cow::Borrowed(text) => (text.to_owned(), false),
        std::borrow::Cow::Owned(text) => (text, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_text_is_unchanged() {
        assert_eq!(
            decode("héllo".as_bytes(), false),
            ("héllo".to_owned(), false)
        );
    }

    #[test]
    fn a_cut_character_is_dropped_not_replaced() {
        let bytes = "aé".as_bytes();
        assert_eq!(decode(&bytes[..2], true), ("a".to_owned(), false));
        assert_eq!(decode(&bytes[..2], false), ("a\u{FFFD}".to_owned(), true));
    }

    #[test]
    fn invalid_bytes_are_replaced_and_reported() {
        assert_eq!(decode(b"a\xffb", false), ("a\u{FFFD}b".to_owned(), true));
        assert_eq!(decode(b"a\xffb", true), ("a\u{FFFD}b".to_owned(), true));
    }
}
