#![allow(clippy::unwrap_used)]

use super::keywords::{CapabilityMap, greedy_cover, word_matches, words};
use super::llm::parse_answer;
use super::*;
use serde_json::json;

fn spec(id: &str, caps: &[&str], keywords: &[&str]) -> SpecialistSpec {
    SpecialistSpec {
        container_image: None,
        id: id.into(),
        description: format!("{id} specialist"),
        keywords: keywords.iter().map(|s| (*s).to_owned()).collect(),
        capabilities: caps.iter().map(|s| (*s).to_owned()).collect(),
        system_prompt: "p".into(),
        tools: vec![],
        finish_schema: json!({"type": "object"}),
        model_key: None,
        may_write: true,
        needs_network: false,
        limitations: vec![],
        tooling: Default::default(),
        loop_aids: Default::default(),
        approval: Default::default(),
        project_instructions: true,
    }
}

fn roster() -> Vec<std::sync::Arc<SpecialistSpec>> {
    [
        spec(
            "engineering",
            &["code_execution", "file_io", "software_testing"],
            &["code", "implement"],
        ),
        spec(
            "research",
            &[
                "systematic_review",
                "web_search",
                "citation_extraction",
                "file_io",
            ],
            &["research", "papers"],
        ),
        spec(
            "enterprise_research",
            &[
                "enterprise_search",
                "github_search",
                "systematic_review",
                "web_search",
                "file_io",
            ],
            &["confluence"],
        ),
    ]
    .into_iter()
    .map(std::sync::Arc::new)
    .collect()
}

fn caps(prompt: &str) -> Vec<String> {
    CapabilityMap::builtin()
        .infer(prompt)
        .into_iter()
        .map(|(c, _)| c)
        .collect()
}

#[test]
fn substring_traps_do_not_match() {
    // The original matched substrings: each of these asked for testing or Rust code.
    for prompt in [
        "Summarise the latest survey",
        "Explain why trust matters in teams",
        "Who won the contest?",
        "Describe remote attestation",
        "Decode this message",
        "A special offer",
    ] {
        let found = caps(prompt);
        assert!(
            !found.contains(&"software_testing".to_owned())
                && !found.contains(&"code_execution".to_owned()),
            "{prompt}: {found:?}"
        );
    }
}

#[test]
fn inflections_match() {
    for (word, keyword) in [
        ("tests", "test"),
        ("tested", "test"),
        ("testing", "test"),
        ("coding", "code"),
        ("coded", "code"),
        ("implementation", "implement"),
        ("libraries", "library"),
        ("debugging", "debug"),
        ("programming", "program"),
        ("studies", "study"),
        ("fixes", "fix"),
    ] {
        assert!(word_matches(word, keyword), "{word} ~ {keyword}");
    }
    for (word, keyword) in [
        ("latest", "test"),
        ("attest", "test"),
        ("trust", "rust"),
        ("codec", "code"),
        ("testament", "test"),
    ] {
        assert!(!word_matches(word, keyword), "{word} !~ {keyword}");
    }
}

#[test]
fn words_are_lowercase_and_keep_cpp() {
    assert_eq!(
        words("Write C++ code, then TEST it!"),
        ["write", "c++", "code", "then", "test", "it"]
    );
}

#[test]
fn multi_word_keywords_need_the_words_in_a_row() {
    assert!(caps("do a systematic review of X").contains(&"systematic_review".to_owned()));
    assert!(caps("open a pull request").contains(&"github_search".to_owned()));
    assert!(!caps("pull the request").contains(&"github_search".to_owned()));
}

#[test]
fn one_specialist_when_one_covers_everything() {
    let d = route_by_keywords(
        "Implement a parser and write unit tests",
        &roster(),
        "engineering",
    );
    assert_eq!(d.specialist_ids, ["engineering"]);
    assert_eq!(d.routing_method, RoutingMethod::Keyword);
    assert_eq!(
        d.required_capabilities,
        ["code_execution", "software_testing"]
    );
    assert!(d.reason.contains("`engineering` covers"), "{}", d.reason);
}

#[test]
fn a_task_force_in_the_order_the_prompt_asks() {
    let d = route_by_keywords(
        "Research the literature on CRDTs, then implement one with tests",
        &roster(),
        "engineering",
    );
    assert_eq!(d.specialist_ids, ["research", "engineering"]);
    let d = route_by_keywords(
        "Implement a CRDT, then research the literature for citations",
        &roster(),
        "engineering",
    );
    assert_eq!(d.specialist_ids, ["engineering", "research"]);
}

#[test]
fn the_latest_survey_is_research_only() {
    let d = route_by_keywords(
        "Find the latest survey papers on trust",
        &roster(),
        "engineering",
    );
    assert_eq!(d.specialist_ids, ["research"], "{}", d.reason);
}

#[test]
fn ties_go_to_keywords_then_configuration_order() {
    // Both cover file_io only; research has a keyword in the prompt.
    let prompt_words = words("list the files of my research folder");
    let required = vec!["file_io".to_owned()];
    let chosen = greedy_cover(&roster(), &required, &prompt_words);
    assert_eq!(chosen.len(), 1);
    assert_eq!((chosen[0].index, &chosen[0].covers), (1, &required));
    assert_eq!(
        chosen[0].tie.as_deref(),
        Some(
            "tied with `engineering` on 1 capability; `research` has more of its own keywords in the prompt (1 to 0)"
        )
    );
    // No keyword either: configuration order (engineering first).
    let chosen = greedy_cover(&roster(), &required, &words("list the files"));
    assert_eq!((chosen[0].index, &chosen[0].covers), (0, &required));
    assert_eq!(
        chosen[0].tie.as_deref(),
        Some(
            "tied with `research` on 1 capability and own keywords in the prompt (0 each); `engineering` is listed first in the configuration"
        )
    );
}

#[test]
fn the_reason_explains_a_tie() {
    let d = route_by_keywords("list the files", &roster(), "engineering");
    assert_eq!(d.specialist_ids, ["engineering"]);
    assert_eq!(
        d.reason,
        "prompt asks for file_io; `engineering` covers file_io (tied with `research` on 1 capability and own keywords in the prompt (0 each); `engineering` is listed first in the configuration)"
    );
    // A clear winner needs no note.
    let d = route_by_keywords("implement the parser", &roster(), "engineering");
    assert!(!d.reason.contains("tied"), "{}", d.reason);
    // Without capabilities, own keywords decide, and a tie there is explained too.
    let mut r = roster();
    std::sync::Arc::make_mut(&mut r[0])
        .keywords
        .push("zebra".into());
    std::sync::Arc::make_mut(&mut r[1])
        .keywords
        .push("zebra".into());
    let d = route_by_keywords("zebra", &r, "engineering");
    assert_eq!(
        d.reason,
        "no capability keyword in the prompt; `engineering` matched 1 of its own keywords (tied with `research`, which matched as many; `engineering` is listed first in the configuration)"
    );
}

#[test]
fn greedy_prefers_the_widest_cover() {
    let required: Vec<String> = ["enterprise_search", "systematic_review", "web_search"]
        .map(str::to_owned)
        .to_vec();
    let chosen = greedy_cover(&roster(), &required, &[]);
    assert_eq!(chosen.len(), 1);
    assert_eq!(chosen[0].index, 2);
    assert_eq!(chosen[0].tie, None);
}

#[test]
fn nothing_matched_uses_own_keywords_then_the_default() {
    let mut r = roster();
    r.push(spec("poet", &["poetry"], &["poem", "haiku"]).into());
    let d = route_by_keywords("write a haiku about autumn", &r, "engineering");
    assert_eq!(d.specialist_ids, ["poet"], "{}", d.reason);
    let d = route_by_keywords("hello there", &r, "engineering");
    assert_eq!(d.specialist_ids, ["engineering"]);
    assert!(d.reason.contains("default specialist"), "{}", d.reason);
}

#[test]
fn specialists_extend_the_map_with_new_capabilities() {
    let mut r = roster();
    r.push(spec("ops", &["kubernetes_ops"], &["kubernetes", "helm"]).into());
    let d = route_by_keywords("upgrade the helm charts", &r, "engineering");
    assert_eq!(d.required_capabilities, ["kubernetes_ops"]);
    assert_eq!(d.specialist_ids, ["ops"]);
}

#[test]
fn llm_answers_are_validated() {
    let known = ["engineering", "research"];
    assert_eq!(
        parse_answer(
            r#"{"specialist_ids": ["research", "engineering", "research"], "reason": "both"}"#,
            &known
        ),
        Ok((vec!["research".into(), "engineering".into()], "both".into()))
    );
    let fenced =
        "Sure!\n```json\n{\"specialist_ids\": [\"engineering\"], \"reason\": \"code\"}\n```";
    assert_eq!(parse_answer(fenced, &known).unwrap().0, ["engineering"]);
    for (bad, says) in [
        ("I think engineering", "not a JSON object"),
        (
            r#"{"specialist_ids": ["poet"]}"#,
            "unknown specialist `poet`",
        ),
        (r#"{"specialist_ids": []}"#, "chose no specialist"),
        (r#"{"ids": ["engineering"]}"#, "no `specialist_ids`"),
        (r#"{"specialist_ids": [1]}"#, "non-string"),
    ] {
        let err = parse_answer(bad, &known).unwrap_err().to_string();
        assert!(err.contains(says), "{bad}: {err}");
    }
}

#[test]
fn issue_14_a_review_does_not_bring_in_a_writer() {
    let mut auditor = spec("auditor", &["code_review"], &["review", "audit", "bugs"]);
    auditor.may_write = false;
    let specialists: Vec<Arc<SpecialistSpec>> = vec![
        Arc::new(spec(
            "engineering",
            &["code_execution", "file_io", "software_testing"],
            &["code", "fix"],
        )),
        Arc::new(auditor),
    ];
    for prompt in [
        "please review the code for bugs",
        "audit this code and explain what it does",
    ] {
        let d = route_by_keywords(prompt, &specialists, "engineering");
        assert_eq!(d.specialist_ids, ["auditor"], "{prompt}: {}", d.reason);
        assert!(d.reason.contains("only asks to look"), "{}", d.reason);
    }
    // Asked to change or run something, the engineer is recruited.
    for prompt in [
        "review the code and fix the bugs",
        "review the code and run the test suite to check for bugs",
        "audit the code and upgrade its libraries",
    ] {
        let d = route_by_keywords(prompt, &specialists, "engineering");
        assert!(
            d.specialist_ids.contains(&"engineering".to_owned()),
            "{prompt}: {}",
            d.reason
        );
    }
}
