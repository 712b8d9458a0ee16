//! The repair corpus (issue #12): answers shaped like what real local models and servers
//! send, each with what must come of it. Positive cases become exactly these calls; negative
//! cases stay text.

use super::*;

fn known() -> Vec<String> {
    [
        "write_file",
        "read_file",
        "list_files",
        "shell",
        "finish_task",
        "mcp__github__search_issues",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// `(label, text, expected)`: `Some((format, [(name, arguments JSON)]))` or `None`.
type Case = (
    &'static str,
    &'static str,
    Option<(Format, Vec<(&'static str, &'static str)>)>,
);

fn corpus() -> Vec<Case> {
    use Format::*;
    vec![
        // --- Hermes / Qwen 2.5 ---
        (
            "qwen one call",
            "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.txt\", \"content\": \"hi\"}}\n</tool_call>",
            Some((
                Hermes,
                vec![("write_file", r#"{"content":"hi","path":"a.txt"}"#)],
            )),
        ),
        (
            "qwen two calls",
            "<tool_call>\n{\"name\": \"list_files\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"b.md\"}}\n</tool_call>",
            Some((
                Hermes,
                vec![("list_files", "{}"), ("read_file", r#"{"path":"b.md"}"#)],
            )),
        ),
        (
            "qwen with thinking before",
            "I will list the files first.\n<tool_call>\n{\"name\": \"list_files\", \"arguments\": {\"path\": \".\"}}\n</tool_call>",
            Some((Hermes, vec![("list_files", r#"{"path":"."}"#)])),
        ),
        (
            "hermes without closing tag",
            "<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": [\"ls\", \"-la\"]}}",
            Some((Hermes, vec![("shell", r#"{"cmd":["ls","-la"]}"#)])),
        ),
        (
            "hermes arguments as a string",
            "<tool_call>{\"name\": \"read_file\", \"arguments\": \"{\\\"path\\\": \\\"x.py\\\"}\"}</tool_call>",
            Some((Hermes, vec![("read_file", r#"{"path":"x.py"}"#)])),
        ),
        (
            "hermes finish_task",
            "<tool_call>\n{\"name\": \"finish_task\", \"arguments\": {\"summary\": \"done\"}}\n</tool_call>",
            Some((Hermes, vec![("finish_task", r#"{"summary":"done"}"#)])),
        ),
        (
            "hermes unknown tool",
            "<tool_call>\n{\"name\": \"delete_everything\", \"arguments\": {}}\n</tool_call>",
            None,
        ),
        (
            "hermes broken json",
            "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.txt\",}\n</tool_call>",
            None,
        ),
        (
            "hermes arguments not an object",
            "<tool_call>{\"name\": \"read_file\", \"arguments\": [\"a.txt\"]}</tool_call>",
            None,
        ),
        // --- Llama 3.x ---
        (
            "llama python_tag",
            "<|python_tag|>{\"name\": \"read_file\", \"parameters\": {\"path\": \"notes.md\"}}<|eom_id|>",
            Some((PythonTag, vec![("read_file", r#"{"path":"notes.md"}"#)])),
        ),
        (
            "llama python_tag eot",
            "<|python_tag|>{\"name\": \"list_files\", \"parameters\": {}}<|eot_id|>",
            Some((PythonTag, vec![("list_files", "{}")])),
        ),
        (
            "llama two calls with semicolon",
            "<|python_tag|>{\"name\": \"list_files\", \"parameters\": {}}; {\"name\": \"read_file\", \"parameters\": {\"path\": \"a\"}}",
            Some((
                PythonTag,
                vec![("list_files", "{}"), ("read_file", r#"{"path":"a"}"#)],
            )),
        ),
        (
            "llama python code, not a call",
            "<|python_tag|>print(open('a.txt').read())<|eom_id|>",
            None,
        ),
        // --- Mistral ---
        (
            "mistral list",
            "[TOOL_CALLS][{\"name\": \"write_file\", \"arguments\": {\"path\": \"m.txt\", \"content\": \"x\"}}]",
            Some((
                Mistral,
                vec![("write_file", r#"{"content":"x","path":"m.txt"}"#)],
            )),
        ),
        (
            "mistral with space and end token",
            "[TOOL_CALLS] [{\"name\": \"list_files\", \"arguments\": {}}, {\"name\": \"read_file\", \"arguments\": {\"path\": \"r\"}}]</s>",
            Some((
                Mistral,
                vec![("list_files", "{}"), ("read_file", r#"{"path":"r"}"#)],
            )),
        ),
        (
            "mistral unknown tool",
            "[TOOL_CALLS][{\"name\": \"web_browse\", \"arguments\": {}}]",
            None,
        ),
        // --- Bare JSON ---
        (
            "bare parameters",
            "{\"name\": \"list_files\", \"parameters\": {\"path\": \"src\"}}",
            Some((BareJson, vec![("list_files", r#"{"path":"src"}"#)])),
        ),
        (
            "bare arguments with whitespace",
            "\n  {\"name\": \"read_file\", \"arguments\": {\"path\": \"README.md\"}}  \n",
            Some((BareJson, vec![("read_file", r#"{"path":"README.md"}"#)])),
        ),
        (
            "bare openai shape",
            "{\"function\": {\"name\": \"shell\", \"arguments\": \"{\\\"cmd\\\": [\\\"pwd\\\"]}\"}}",
            Some((BareJson, vec![("shell", r#"{"cmd":["pwd"]}"#)])),
        ),
        (
            "bare list",
            "[{\"name\": \"list_files\", \"arguments\": {}}]",
            Some((BareJson, vec![("list_files", "{}")])),
        ),
        (
            "bare mcp tool",
            "{\"name\": \"mcp__github__search_issues\", \"arguments\": {\"q\": \"bug\"}}",
            Some((
                BareJson,
                vec![("mcp__github__search_issues", r#"{"q":"bug"}"#)],
            )),
        ),
        (
            "bare no arguments at all",
            "{\"name\": \"list_files\"}",
            Some((BareJson, vec![("list_files", "{}")])),
        ),
        (
            "bare json that is a payload, not a call",
            "{\"summary\": \"I wrote the file\", \"artifacts\": [\"a.txt\"]}",
            None,
        ),
        (
            "bare json naming a person",
            "{\"name\": \"Alice\", \"age\": 30}",
            None,
        ),
        ("bare json list of numbers", "[1, 2, 3]", None),
        // --- Fenced JSON ---
        (
            "fenced json call",
            "I'll read it now.\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.rs\"}}\n```",
            Some((FencedJson, vec![("read_file", r#"{"path":"main.rs"}"#)])),
        ),
        (
            "fenced bare call",
            "```\n{\"name\": \"list_files\", \"arguments\": {}}\n```",
            Some((FencedJson, vec![("list_files", "{}")])),
        ),
        (
            "fenced tool_call info",
            "```tool_call\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"t\", \"content\": \"c\"}}\n```",
            Some((
                FencedJson,
                vec![("write_file", r#"{"content":"c","path":"t"}"#)],
            )),
        ),
        (
            "fenced json of data, not a call",
            "Here is the config:\n```json\n{\"debug\": true, \"port\": 8080}\n```",
            None,
        ),
        (
            "fenced python code",
            "Run this:\n```python\nprint('hello')\n```",
            None,
        ),
        (
            "fenced call of an unknown tool",
            "```json\n{\"name\": \"send_email\", \"arguments\": {\"to\": \"x\"}}\n```",
            None,
        ),
        (
            "fenced package.json beside a fenced call",
            "The project:\n```json\n{\"name\": \"my-app\", \"version\": \"1.0.0\"}\n```\nNow:\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"package.json\"}}\n```",
            Some((
                FencedJson,
                vec![("read_file", r#"{"path":"package.json"}"#)],
            )),
        ),
        (
            "bare data with a name and results",
            "{\"name\": \"search\", \"results\": [1, 2]}",
            None,
        ),
        (
            "bare data naming a known tool with other keys",
            "{\"name\": \"list_files\", \"count\": 3}",
            None,
        ),
        // --- Prose ---
        (
            "prose mentioning json",
            "You can pass a JSON object such as {\"path\": \"a.txt\"} to read_file.",
            None,
        ),
        (
            "prose describing a call",
            "I would call write_file with the name and the content, then finish.",
            None,
        ),
        (
            "prose with braces",
            "The set {1, 2, 3} has three elements.",
            None,
        ),
        ("empty", "", None),
        (
            "prose then an unclosed fence",
            "Result:\n```json\n{\"name\": \"list_files\"",
            None,
        ),
    ]
}

#[test]
fn issue_12_the_repair_corpus() {
    let cases = corpus();
    assert!(cases.len() >= 30, "the corpus has {} cases", cases.len());
    let positives = cases.iter().filter(|c| c.2.is_some()).count();
    assert!(positives >= 12 && cases.len() - positives >= 12);
    for (label, text, expected) in cases {
        let got = repair(text, &known(), 4);
        match (got, expected) {
            (None, None) => {}
            (Some(r), Some((format, calls))) => {
                assert_eq!(r.format, format, "{label}");
                let got: Vec<(String, Value)> = r
                    .calls
                    .iter()
                    .map(|c| {
                        (
                            c.name.clone(),
                            serde_json::from_str(&c.arguments).unwrap_or_default(),
                        )
                    })
                    .collect();
                let want: Vec<(String, Value)> = calls
                    .iter()
                    .map(|(n, a)| ((*n).to_owned(), serde_json::from_str(a).unwrap_or_default()))
                    .collect();
                assert_eq!(got, want, "{label}");
                for (n, call) in r.calls.iter().enumerate() {
                    assert_eq!(call.id, format!("repaired_4_{n}"), "{label}");
                }
            }
            (got, expected) => panic!("{label}: got {got:?}, expected {expected:?}"),
        }
    }
}

#[test]
fn the_text_around_a_call_is_kept() {
    let r = repair(
        "Let me check.\n<tool_call>\n{\"name\": \"list_files\", \"arguments\": {}}\n</tool_call>",
        &known(),
        0,
    )
    .unwrap_or_else(|| panic!("a call"));
    assert_eq!(r.rest.as_deref(), Some("Let me check."));
    let r = repair("{\"name\": \"list_files\", \"arguments\": {}}", &known(), 0)
        .unwrap_or_else(|| panic!("a call"));
    assert_eq!(r.rest, None);
}
