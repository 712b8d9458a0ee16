use super::*;

fn parse(text: &str) -> Result<MarkdownSpecialist, ConfigError> {
    parse_markdown(text, Path::new("/p/specialists/reviewer.md"))
}

fn err(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

#[test]
fn our_own_format() {
    let text = "---\nname: reviewer\ndescription: Reviews code.\ntools: [read_file, list_files, mcp__github__*]\nmay_write: false\nkeywords: [review]\nfinish_schema:\n  type: object\n  properties:\n    summary: {type: string}\n  required: [summary]\nlimitations: [no tests]\n---\nYou review code.\n\nBe precise.\n";
    let s = parse(text).unwrap();
    assert_eq!(s.id, "reviewer");
    let raw = s.raw;
    assert_eq!(raw.description.as_deref(), Some("Reviews code."));
    assert_eq!(
        raw.system_prompt.as_deref(),
        Some("You review code.\n\nBe precise.")
    );
    assert_eq!(
        raw.tools.unwrap(),
        ["read_file", "list_files", "mcp__github__*"]
    );
    assert_eq!(raw.may_write, Some(false));
    assert_eq!(raw.finish_schema.unwrap()["required"][0], "summary");
    assert_eq!(raw.limitations.unwrap(), ["no tests"]);
    assert!(s.warnings.is_empty());
}

#[test]
fn claude_code_agent_as_is() {
    let text = "---\nname: code-reviewer\ndescription: Expert code review specialist. Use proactively after writing code.\ntools: Read, Grep, Glob, Bash, Edit, Write\nmodel: sonnet\ncolor: blue\n---\n\nYou are a senior code reviewer.\n";
    let s = parse(text).unwrap();
    assert_eq!(s.id, "code-reviewer");
    assert_eq!(
        s.raw.tools.unwrap(),
        ["read_file", "list_files", "shell", "write_file"],
        "Edit and Write both map to write_file, once"
    );
    assert_eq!(s.raw.model_key, None, "sonnet is not a model key");
    let warnings = s.warnings.join("\n");
    assert!(warnings.contains("`Grep` has no equivalent"), "{warnings}");
    assert!(warnings.contains("model: sonnet"), "{warnings}");
    assert!(
        !warnings.contains("color"),
        "display keys are ignored quietly"
    );
}

#[test]
fn claude_code_defaults_and_web_tools() {
    let text = "---\ndescription: Looks things up.\ntools:\n  - WebFetch\n  - WebSearch\nmodel: fast\n---\nSearch.\n";
    let s = parse(text).unwrap();
    assert_eq!(s.id, "reviewer", "the file name is the id without `name`");
    assert_eq!(s.raw.tools.unwrap(), ["fetch_url", "web_search"]);
    assert_eq!(s.raw.model_key.as_deref(), Some("fast"));
    let all = parse("---\ndescription: d\ndisallowedTools: Bash, Write\n---\np\n").unwrap();
    assert_eq!(
        all.raw.tools.unwrap(),
        ["read_file", "list_files", "web_search", "fetch_url"],
        "no `tools` inherits all of them, minus disallowedTools"
    );
}

#[test]
fn goose_recipe_fields() {
    let text = "---\ntitle: Summariser\ndescription: Summarises.\ninstructions: Summarise the input.\nresponse:\n  json_schema:\n    type: object\n    properties:\n      summary: {type: string}\nextensions: []\n---\n";
    let s = parse(text).unwrap();
    assert_eq!(s.raw.system_prompt.as_deref(), Some("Summarise the input."));
    assert_eq!(s.raw.finish_schema.unwrap()["type"], "object");
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("`extensions` ignored"))
    );
}

#[test]
fn unknown_key_names_file_line_and_key() {
    let e = err("---\ndescription: d\ntoolz: [read_file]\n---\nprompt\n");
    assert!(e.starts_with("/p/specialists/reviewer.md:3: "), "{e}");
    assert!(e.contains("unknown front-matter key `toolz`"), "{e}");
}

#[test]
fn bad_yaml_names_the_file_line() {
    let e = err("---\ndescription: d\ntools: [read_file\n---\nprompt\n");
    assert!(e.starts_with("/p/specialists/reviewer.md:"), "{e}");
    assert!(e.contains("not valid YAML"), "{e}");
    let line: u64 = e
        .trim_start_matches("/p/specialists/reviewer.md:")
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("a line number in {e}"));
    assert!((3..=5).contains(&line), "{e}");
    let e = err("---\ndescription: d\nmay_write: perhaps\n---\nprompt\n");
    assert!(
        e.starts_with("/p/specialists/reviewer.md:3: `may_write`"),
        "{e}"
    );
}

#[test]
fn missing_pieces_are_explained() {
    let e = err("---\nname: x\ntools: [read_file]\n---\nprompt\n");
    assert!(e.contains("missing `description`"), "{e}");
    let e = err("no front matter\n");
    assert!(
        e.contains("reviewer.md:1: a specialist file starts with a `---` line"),
        "{e}"
    );
    let e = err("---\ndescription: d\n");
    assert!(e.contains("never closed"), "{e}");
    let e = err("---\ndescription: d\n---\n\n");
    assert!(e.contains("no system prompt"), "{e}");
}

#[test]
fn crlf_and_bom_are_accepted() {
    let s = parse("\u{feff}---\r\ndescription: d\r\ntools: Read\r\n---\r\nprompt\r\n").unwrap();
    assert_eq!(s.raw.tools.unwrap(), ["read_file"]);
    assert_eq!(s.raw.system_prompt.as_deref(), Some("prompt"));
}
