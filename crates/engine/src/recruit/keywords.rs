//! Keyword routing: which capabilities a prompt asks for, and which specialists cover them.
//!
//! Matching is by whole words, never substrings (the original counted "latest" as "test" and
//! "trust" as "rust"). The prompt is split into lowercase words (runs of letters, digits,
//! `_` and `+`, so `c++` stays a word); a keyword of several words matches the same words in
//! a row. A prompt word matches a keyword word when it is that word or that word plus one of
//! a few English suffixes ([`SUFFIXES`]): `tests`, `tested`, `testing`, `coded`, `coding`,
//! `implementation`, `libraries`. Only suffixes are added, never prefixes, so "attest",
//! "contest" and "latest" never match "test". The rule over-matches rarely ("tester") and
//! misses irregular forms ("built" for "build"); specialists can list those as keywords.

use fabric_domain::SpecialistSpec;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Words of a task that only asks to look at something.
const LOOK_WORDS: &[&str] = &[
    "review",
    "audit",
    "inspect",
    "explain",
    "analyze",
    "analyse",
    "assess",
    "check",
    "summarize",
    "summarise",
    "describe",
    "evaluate",
    "critique",
    "examine",
    "read",
];

/// Words of a task that asks for a change.
const CHANGE_WORDS: &[&str] = &[
    "fix",
    "change",
    "write",
    "implement",
    "refactor",
    "create",
    "add",
    "update",
    "edit",
    "modify",
    "build",
    "rewrite",
    "remove",
    "delete",
    "rename",
    "patch",
    "make",
    "generate",
    "apply",
    "correct",
    "improve",
    "run",
    "execute",
    "upgrade",
    "bump",
    "merge",
    "install",
    "configure",
    "resolve",
    "restart",
    "optimize",
    "optimise",
    "migrate",
    "port",
    "replace",
    "move",
    "deploy",
    "commit",
    "convert",
    "format",
];

/// Whether the prompt only asks to look (a review, an audit, an explanation) and asks for no
/// change: then specialists that write are not recruited beside one that only reads.
pub(crate) fn reads_only(prompt_words: &[String]) -> bool {
    let has = |list: &[&str]| {
        prompt_words
            .iter()
            .any(|w| list.iter().any(|k| word_matches(w, k)))
    };
    has(LOOK_WORDS) && !has(CHANGE_WORDS)
}

/// Suffixes a prompt word may add to a keyword word.
pub(crate) const SUFFIXES: &[&str] = &[
    "s", "es", "ed", "ing", "er", "ers", "ation", "ations", "ment", "ments",
];

/// The built-in capability → keywords map. Specialists extend it with their own
/// capabilities (see [`CapabilityMap::with_specialists`]).
pub(crate) const BUILTIN_CAPABILITIES: &[(&str, &[&str])] = &[
    (
        "code_execution",
        &[
            "code",
            "implement",
            "build",
            "compile",
            "script",
            "program",
            "function",
            "refactor",
            "debug",
            "bug",
            "fix",
            "rust",
            "python",
            "javascript",
            "typescript",
            "cli",
            "parser",
            "crate",
            "library",
            "cargo",
            "module",
        ],
    ),
    (
        "software_testing",
        &[
            "test",
            "unit test",
            "pytest",
            "coverage",
            "regression",
            "benchmark",
        ],
    ),
    (
        "file_io",
        &["file", "directory", "folder", "csv", "json file", "path"],
    ),
    (
        "web_search",
        &[
            "web",
            "internet",
            "online",
            "website",
            "url",
            "browse",
            "news",
            "search the web",
        ],
    ),
    (
        "systematic_review",
        &[
            "research",
            "literature",
            "survey",
            "paper",
            "study",
            "studies",
            "evidence",
            "systematic review",
            "state of the art",
        ],
    ),
    (
        "citation_extraction",
        &["cite", "citation", "reference", "bibliography", "source"],
    ),
    (
        "enterprise_search",
        &[
            "confluence",
            "jira",
            "sharepoint",
            "intranet",
            "internal wiki",
            "past runs",
        ],
    ),
    ("github_search", &["github", "gitlab", "pull request"]),
];

/// Capability → keywords, built-in plus the specialists' own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapabilityMap {
    map: BTreeMap<String, Vec<String>>,
}

impl CapabilityMap {
    /// The built-in map alone.
    pub fn builtin() -> Self {
        let map = BUILTIN_CAPABILITIES
            .iter()
            .map(|(cap, words)| {
                (
                    (*cap).to_owned(),
                    words.iter().map(|w| (*w).to_owned()).collect(),
                )
            })
            .collect();
        Self { map }
    }

    /// The built-in map extended by the specialists: a capability a specialist declares that
    /// the map does not know gets that specialist's `keywords` as its keywords (so a new
    /// `kubernetes_ops` specialist with keywords `kubernetes, helm` is routable without
    /// code). Keywords of built-in capabilities are not changed by specialists: they are
    /// used for tie-breaks instead.
    pub(crate) fn with_specialists(specialists: &[Arc<SpecialistSpec>]) -> Self {
        let mut out = Self::builtin();
        for spec in specialists {
            for cap in &spec.capabilities {
                if BUILTIN_CAPABILITIES.iter().any(|(c, _)| c == cap) {
                    continue;
                }
                let words = out.map.entry(cap.clone()).or_default();
                for keyword in &spec.keywords {
                    let keyword = keyword.to_lowercase();
                    if !words.contains(&keyword) {
                        words.push(keyword);
                    }
                }
            }
        }
        out
    }

    /// The capabilities the prompt asks for, each with the position (in words) of its first
    /// matching keyword, sorted by that position.
    pub(crate) fn infer(&self, prompt: &str) -> Vec<(String, usize)> {
        let words = words(prompt);
        let mut found: Vec<(String, usize)> = self
            .map
            .iter()
            .filter_map(|(cap, keywords)| {
                keywords
                    .iter()
                    .filter_map(|k| first_match(&words, k))
                    .min()
                    .map(|at| (cap.clone(), at))
            })
            .collect();
        found.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        found
    }
}

/// Lowercase words of a text: runs of letters, digits, `_` and `+`.
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '+'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether a prompt word is this keyword word, or it plus one suffix (with the usual
/// spelling changes: `code` → `coding`, `library` → `libraries`).
pub(crate) fn word_matches(word: &str, keyword: &str) -> bool {
    if word == keyword {
        return true;
    }
    match word.strip_prefix(keyword) {
        Some(rest) if SUFFIXES.contains(&rest) => true,
        _ => stem_variants(word, keyword),
    }
}

/// Spelling changes before a suffix: `code` → `coding`, `library` → `libraries`,
/// `debug` → `debugging`.
fn stem_variants(word: &str, keyword: &str) -> bool {
    // A doubled final consonant: `debug` → `debugging`, `program` → `programming`.
    if let Some(last) = keyword.chars().last()
        && let Some(rest) = word.strip_prefix(keyword)
        && let Some(rest) = rest.strip_prefix(last)
    {
        return !"aeiou".contains(last) && matches!(rest, "ing" | "ed" | "er" | "ers");
    }
    if let Some(stem) = keyword.strip_suffix('e')
        && let Some(rest) = word.strip_prefix(stem)
    {
        return matches!(rest, "ing" | "ed" | "er" | "ers" | "ation" | "ations");
    }
    if let Some(stem) = keyword.strip_suffix('y')
        && let Some(rest) = word.strip_prefix(stem)
    {
        return matches!(rest, "ies" | "ied");
    }
    false
}

/// The word position where a (possibly multi-word) keyword first matches.
fn first_match(words: &[String], keyword: &str) -> Option<usize> {
    let parts: Vec<String> = self::words(keyword);
    if parts.is_empty() || parts.len() > words.len() {
        return None;
    }
    (0..=words.len() - parts.len()).find(|&start| {
        parts
            .iter()
            .enumerate()
            .all(|(i, part)| word_matches(&words[start + i], part))
    })
}

/// How many of a specialist's own keywords the prompt contains.
pub(crate) fn keyword_score(spec: &SpecialistSpec, prompt_words: &[String]) -> usize {
    spec.keywords
        .iter()
        .filter(|k| first_match(prompt_words, &k.to_lowercase()).is_some())
        .count()
}

/// One specialist the greedy cover picked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pick {
    /// Its index in the specialists as configured.
    pub index: usize,
    /// The required capabilities it was picked for.
    pub covers: Vec<String>,
    /// When another specialist covered as many at that point: who, and which tie-break
    /// rule chose this one, in words.
    pub tie: Option<String>,
}

/// The greedy set cover: repeatedly take the specialist that covers the most required
/// capabilities not yet covered. Ties go to (1) the specialist with more of its own keywords
/// in the prompt, then (2) the one listed first in the configuration; a pick that won a tie
/// says so ([`Pick::tie`]). Stops when all are covered or nobody covers what is left.
/// Returns the picks in pick order.
pub(crate) fn greedy_cover(
    specialists: &[Arc<SpecialistSpec>],
    required: &[String],
    prompt_words: &[String],
) -> Vec<Pick> {
    let mut uncovered: BTreeSet<&str> = required.iter().map(String::as_str).collect();
    let mut chosen: Vec<Pick> = Vec::new();
    while !uncovered.is_empty() {
        let mut candidates: Vec<(usize, Vec<String>, usize)> = specialists
            .iter()
            .enumerate()
            .filter(|(i, _)| !chosen.iter().any(|p| p.index == *i))
            .map(|(i, spec)| {
                let covers: Vec<String> = spec
                    .capabilities
                    .iter()
                    .filter(|c| uncovered.contains(c.as_str()))
                    .cloned()
                    .collect();
                (i, covers, keyword_score(spec, prompt_words))
            })
            .filter(|(_, covers, _)| !covers.is_empty())
            .collect();
        // Best first: widest cover, then more own keywords, then configuration order.
        candidates.sort_by(|a, b| {
            b.1.len()
                .cmp(&a.1.len())
                .then(b.2.cmp(&a.2))
                .then(a.0.cmp(&b.0))
        });
        let mut ranked = candidates.into_iter();
        let Some((index, covers, score)) = ranked.next() else {
            break;
        };
        let tie = ranked
            .next()
            .filter(|(_, other, _)| other.len() == covers.len())
            .map(|(other, _, other_score)| {
                tie_note(
                    &specialists[index].id,
                    &specialists[other].id,
                    &format!(
                        "{} capabilit{}",
                        covers.len(),
                        if covers.len() == 1 { "y" } else { "ies" }
                    ),
                    score,
                    other_score,
                )
            });
        for c in &covers {
            uncovered.remove(c.as_str());
        }
        chosen.push(Pick { index, covers, tie });
    }
    chosen
}

/// Why `winner` was preferred to `runner_up`, which matched it on `what`: more of its own
/// keywords in the prompt, else its place in the configuration.
pub(crate) fn tie_note(
    winner: &str,
    runner_up: &str,
    what: &str,
    score: usize,
    other: usize,
) -> String {
    if score > other {
        format!(
            "tied with `{runner_up}` on {what}; `{winner}` has more of its own keywords in the prompt ({score} to {other})"
        )
    } else {
        format!(
            "tied with `{runner_up}` on {what} and own keywords in the prompt ({score} each); `{winner}` is listed first in the configuration"
        )
    }
}
