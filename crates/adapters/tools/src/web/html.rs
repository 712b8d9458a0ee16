//! HTML to readable text, small and dependency-free.
//!
//! Why our own: a model needs the words, the headings, the paragraph breaks and where links
//! go, not a faithful DOM. Full HTML parsers (html5ever and friends) cost more build time
//! than the whole tools crate. This scanner tolerates broken markup: an unclosed tag or a
//! stray `<` ends up as text, never as an error.

/// Elements whose content is dropped entirely: code, styling and site chrome.
const SKIPPED: &[&str] = &[
    "script", "style", "nav", "noscript", "template", "svg", "head", "iframe", "form", "button",
    "select", "canvas",
];

/// Elements that break the text into blocks.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "footer",
    "aside",
    "ul",
    "ol",
    "table",
    "tr",
    "blockquote",
    "pre",
    "figure",
    "figcaption",
    "dl",
    "dt",
    "dd",
    "hr",
    "address",
];

/// The readable text of an HTML document, and its `<title>` when it has one.
pub(crate) fn html_to_text(html: &str) -> (String, Option<String>) {
    let mut out = Writer::default();
    let mut title: Option<String> = None;
    let mut skip: Option<String> = None;
    let mut links: Vec<Option<String>> = Vec::new();
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        if skip.is_none() {
            out.text(&rest[..lt]);
        }
        rest = &rest[lt..];
        // `<` not followed by a tag name (`1 < 2`) is text.
        let starts_tag = rest[1..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, '/' | '!' | '?'));
        if !starts_tag {
            if skip.is_none() {
                out.text("<");
            }
            rest = &rest[1..];
            continue;
        }
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = after.find("-->").map_or("", |end| &after[end + 3..]);
            continue;
        }
        let Some(gt) = rest.find('>') else {
            // A `<` with no `>`: text, not a tag.
            if skip.is_none() {
                out.text(rest);
            }
            rest = "";
            break;
        };
        let tag = Tag::parse(&rest[1..gt]);
        rest = &rest[gt + 1..];
        let Some(tag) = tag else { continue };
        // The title lives in `<head>`, which is otherwise skipped.
        if tag.name == "title" && !tag.closing && skip.as_deref().is_none_or(|s| s == "head") {
            let end = find_ci(rest, "</title").unwrap_or(rest.len());
            let text = collapse(&decode_entities(&rest[..end]));
            if !text.is_empty() {
                title = Some(text);
            }
            rest = &rest[end..];
            continue;
        }
        if let Some(skipped) = &skip {
            if tag.closing && tag.name == *skipped {
                skip = None;
            }
            continue;
        }
        if SKIPPED.contains(&tag.name.as_str()) && !tag.closing && !tag.self_closing {
            skip = Some(tag.name);
            continue;
        }
        match (tag.name.as_str(), tag.closing) {
            ("br", _) => out.newline(),
            ("li", false) => {
                out.block();
                out.raw("- ");
            }
            ("h1" | "h2" | "h3" | "h4" | "h5" | "h6", false) => {
                out.paragraph();
                let level = tag.name[1..].parse::<usize>().unwrap_or(1);
                out.raw(&format!("{} ", "#".repeat(level)));
            }
            ("h1" | "h2" | "h3" | "h4" | "h5" | "h6", true) => out.paragraph(),
            ("a", false) => links.push(tag.href),
            ("a", true) => {
                if let Some(Some(href)) = links.pop()
                    && !href.starts_with('#')
                    && !href.starts_with("javascript:")
                {
                    out.raw(&format!(" ({href})"));
                }
            }
            ("td" | "th", false) => out.raw(" | "),
            (name, _) if BLOCKS.contains(&name) => out.paragraph(),
            _ => {}
        }
    }
    if skip.is_none() {
        out.text(rest);
    }
    (out.finish(), title)
}

/// One tag: its lower-case name, whether it closes, and `href` for links.
struct Tag {
    name: String,
    closing: bool,
    self_closing: bool,
    href: Option<String>,
}

impl Tag {
    fn parse(inner: &str) -> Option<Self> {
        let (closing, inner) = match inner.strip_prefix('/') {
            Some(rest) => (true, rest),
            None => (false, inner),
        };
        // `<!DOCTYPE>`, `<?xml?>` and the like are not elements.
        if inner.starts_with(['!', '?']) {
            return None;
        }
        let name: String = inner
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if name.is_empty() {
            return None;
        }
        let href = (name == "a").then(|| attribute(inner, "href")).flatten();
        Some(Self {
            name,
            closing,
            self_closing: inner.trim_end().ends_with('/'),
            href,
        })
    }
}

/// The value of attribute `name` in a tag's inside, quoted or not.
fn attribute(inner: &str, name: &str) -> Option<String> {
    let lower = inner.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find(name) {
        let at = from + i;
        from = at + name.len();
        let before_ok = at == 0 || lower.as_bytes()[at - 1].is_ascii_whitespace();
        let rest = inner[from..].trim_start();
        if !before_ok || !rest.starts_with('=') {
            continue;
        }
        let value = rest[1..].trim_start();
        let raw = match value.chars().next() {
            Some(q @ ('"' | '\'')) => value[1..].split(q).next().unwrap_or_default(),
            _ => value
                .split(|c: char| c.is_whitespace() || c == '>')
                .next()
                .unwrap_or_default(),
        };
        return Some(decode_entities(raw));
    }
    None
}

/// Where `needle` (lower-case ASCII) first occurs in `haystack`, ignoring ASCII case.
/// Compares in place, without a lower-case copy of the haystack: a copy per `<title>` made a
/// page of many titles quadratic.
fn find_ci(haystack: &str, needle: &str) -> Option<usize> {
    let (hay, needle) = (haystack.as_bytes(), needle.as_bytes());
    let first = *needle.first()?;
    let mut from = 0;
    while let Some(i) = hay[from..]
        .iter()
        .position(|b| b.to_ascii_lowercase() == first)
    {
        let at = from + i;
        if hay.len() - at < needle.len() {
            return None;
        }
        if hay[at..at + needle.len()].eq_ignore_ascii_case(needle) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Decodes the entities real pages use; unknown ones stay as written.
pub(crate) fn decode_entities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        // An entity name is short: look for its `;` in the next few bytes only. Bytes, not a
        // string slice: byte 12 may fall inside a multi-byte character.
        let end = rest.as_bytes().iter().take(12).position(|b| *b == b';');
        let decoded = end.and_then(|end| entity(&rest[1..end]).map(|c| (c, end)));
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn entity(name: &str) -> Option<char> {
    let named = match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        "ndash" => '–',
        "mdash" => '—',
        "hellip" => '…',
        "copy" => '©',
        "rsquo" => '’',
        "lsquo" => '‘',
        "rdquo" => '”',
        "ldquo" => '“',
        _ => {
            let code = match name.strip_prefix("#x").or_else(|| name.strip_prefix("#X")) {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => name.strip_prefix('#')?.parse().ok()?,
            };
            return char::from_u32(code);
        }
    };
    Some(named)
}

fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Accumulates text with collapsed spaces and at most one blank line between blocks.
#[derive(Default)]
struct Writer {
    out: String,
}

impl Writer {
    fn text(&mut self, html_text: &str) {
        let decoded = decode_entities(html_text);
        for (i, word) in decoded.split_whitespace().enumerate() {
            let starts_with_space = i > 0 || decoded.starts_with(char::is_whitespace);
            if starts_with_space && !self.out.is_empty() && !self.out.ends_with(['\n', ' ']) {
                self.out.push(' ');
            }
            self.out.push_str(word);
        }
        if decoded.ends_with(char::is_whitespace) && !self.out.ends_with(['\n', ' ']) {
            self.out.push(' ');
        }
    }

    fn raw(&mut self, s: &str) {
        self.out.push_str(s);
    }

    fn trim_trailing_spaces(&mut self) {
        while self.out.ends_with(' ') {
            self.out.pop();
        }
    }

    fn newline(&mut self) {
        self.trim_trailing_spaces();
        self.out.push('\n');
    }

    fn block(&mut self) {
        self.trim_trailing_spaces();
        if !self.out.is_empty() && !self.out.ends_with('\n') {
            self.out.push('\n');
        }
    }

    fn paragraph(&mut self) {
        self.block();
        if !self.out.is_empty() && !self.out.ends_with("\n\n") {
            self.out.push('\n');
        }
    }

    fn finish(self) -> String {
        let lines: Vec<&str> = self.out.lines().map(str::trim_end).collect();
        let mut text = String::new();
        let mut blank = false;
        for line in lines {
            if line.trim().is_empty() {
                blank = !text.is_empty();
                continue;
            }
            if blank {
                text.push('\n');
                blank = false;
            }
            text.push_str(line.trim_start_matches(' '));
            text.push('\n');
        }
        text.trim_end().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_headings_paragraphs_and_links_drops_code_and_chrome() {
        let html = r#"<!DOCTYPE html><html><head><title>Rust &amp; You</title>
            <style>body{color:red}</style><script>alert("x<y")</script></head>
            <body><nav><a href="/">Home</a></nav>
            <h1>Ownership</h1><p>Each value has   an <b>owner</b>.</p>
            <p>See <a href="https://doc.rust-lang.org/book/">the book</a> &mdash; ch. 4.</p>
            <ul><li>one</li><li>two</li></ul><!-- hidden --><p>a<br>b &#65;&#x42;</p></body></html>"#;
        let (text, title) = html_to_text(html);
        assert_eq!(title.as_deref(), Some("Rust & You"));
        assert_eq!(
            text,
            "# Ownership\n\nEach value has an owner.\n\nSee the book (https://doc.rust-lang.org/book/) — ch. 4.\n\n- one\n- two\n\na\nb AB"
        );
    }

    #[test]
    fn broken_markup_is_text_not_an_error() {
        let (text, _) = html_to_text("1 < 2 and <p>fine");
        assert_eq!(text, "1 < 2 and\n\nfine");
        let (text, _) = html_to_text("a &bogus; b < c");
        assert_eq!(text, "a &bogus; b < c");
        let (text, _) = html_to_text("<script>never closed");
        assert_eq!(text, "");
    }

    #[test]
    fn an_entity_before_multibyte_text_does_not_panic() {
        // Byte 12 after `&` falls inside the fourth CJK character (3 bytes each).
        assert_eq!(decode_entities("&漢字漢字漢字"), "&漢字漢字漢字");
        assert_eq!(decode_entities("&amp;漢字"), "&漢字");
        let (text, title) = html_to_text("<title>&中文标题很长</title><p>&日本語のテキスト</p>");
        assert_eq!(title.as_deref(), Some("&中文标题很长"));
        assert_eq!(text, "&日本語のテキスト");
    }

    #[test]
    fn many_titles_parse_in_linear_time() {
        // 40 000 titles in 1 MB: a lower-case copy of the rest per title was ~20 GB of copying.
        let page = "<TITLE>t</TITLE>x".repeat(40_000);
        let started = std::time::Instant::now();
        let (text, title) = html_to_text(&page);
        assert_eq!(title.as_deref(), Some("t"));
        assert_eq!(text.len(), 40_000);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
        assert_eq!(find_ci("abc</TiTlE", "</title"), Some(3));
        assert_eq!(find_ci("</titl", "</title"), None);
        assert_eq!(find_ci("ä</title", "</title"), Some(2));
    }
}
