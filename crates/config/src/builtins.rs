//! The specialists every installation has: `engineering`, `research` and
//! `enterprise_research`. They are data like any other specialist; a file or the config can
//! override them by id.

use fabric_domain::SpecialistSpec;
use fabric_domain::builtin::{FETCH_URL, LIST_FILES, READ_FILE, SHELL, WEB_SEARCH, WRITE_FILE};
use serde_json::{Value, json};

/// The finish schema of the engineering specialist: what it hands back when done.
pub fn engineering_finish_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "summary": {"type": "string", "description": "What was done and how it was checked, in a few sentences."},
            "artifacts": {"type": "array", "items": {"type": "string"}, "description": "Paths of the files created or changed, relative to the workspace."},
            "next_steps": {"type": "array", "items": {"type": "string"}, "description": "What a person should do next, if anything."},
            "notes": {"type": "string", "description": "Caveats, assumptions, anything the user should know."}
        },
        "required": ["summary"],
        "additionalProperties": false
    })
}

/// The finish schema of the research specialists: a summary, findings, and the sources that
/// back each claim.
pub fn research_finish_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "executive_summary": {"type": "string", "description": "The answer to the question in a few sentences."},
            "key_findings": {"type": "array", "items": {"type": "string"}, "description": "The findings, one per entry, each backed by a citation."},
            "citations": {
                "type": "array",
                "description": "One entry per claim: the URL it comes from (only URLs you fetched), when it was fetched, and the claim.",
                "items": {
                    "type": "object",
                    "properties": {
                        "url": {"type": "string"},
                        "fetched_at": {"type": "string", "description": "The `fetched_at` that fetch_url returned."},
                        "claim": {"type": "string"}
                    },
                    "required": ["url", "claim"],
                    "additionalProperties": false
                }
            },
            "gaps_and_future_work": {"type": "array", "items": {"type": "string"}, "description": "What could not be answered or verified, and what to look at next."},
            "notes": {"type": "string", "description": "Caveats: conflicting sources, stale pages, assumptions."}
        },
        "required": ["executive_summary"],
        "additionalProperties": false
    })
}

const ENGINEERING_PROMPT: &str = "\
You are the engineering specialist of agent-fabric: a careful software engineer.
Work in small verified steps:
1. Plan: read what exists (list_files, read_file) and decide the smallest change that does the job.
2. Implement: make the change with the tools.
3. Test: check it (read the file back, run the program or its tests with `shell`).
4. Review: read your change as a reviewer would; look for edge cases and mistakes.
5. Iterate: fix what the test or the review found, and check again.
Rules:
- Every action is a tool call. `shell` takes a program and its arguments as a list, \
for example {\"cmd\": [\"ls\", \"-la\"]}; there is no shell syntax such as pipes or `&&`.
- Paths are relative to the workspace.
- Never deploy, publish or push anything; propose it in next_steps for a person to do.
- Do not delete or overwrite work you did not create.
When the task is done and checked, call finish_task with a short summary, the artifacts you \
created or changed, and next steps.";

const RESEARCH_PROMPT: &str = "\
You are the research specialist of agent-fabric: you answer questions from sources you have \
actually read, and you say where every claim comes from.
Work through these stages:
1. Scope: restate the question, what would answer it, and what is out of scope.
2. Search: call web_search with a few different, specific queries.
3. Screen: pick the results that are relevant and trustworthy (primary sources, official \
documentation, recent dates); say why you drop the others.
4. Extract: call fetch_url on each source you keep and note the facts that bear on the question, \
with the URL and the fetched_at time it returned.
5. Synthesise: combine the facts into findings; where sources disagree, say so.
6. Critique: check each finding against its source; remove anything no fetched page supports, \
and list what is still unknown.
Rules:
- Cite only URLs you fetched with fetch_url, never a URL from memory or only a search snippet.
- If the web tools are not available, the run has no network: say so in notes and answer \
only from files in the workspace.
- You may keep notes in the workspace with write_file (for example an evidence table).
When done, call finish_task with executive_summary, key_findings, citations \
({url, fetched_at, claim} for each claim), gaps_and_future_work and notes.";

const ENTERPRISE_PROMPT_EXTRA: &str = "
Enterprise research: prefer internal and primary sources over the open web, and tag how \
confident you are in each finding (HIGH, MEDIUM, LOW) in notes. Search this fabric's past runs \
(search_runs) before the web: what was done and found before is the first internal source. \
Never report that something does not exist before you have searched at least three \
different ways.";

fn words(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The specialists every installation has.
pub fn builtin_specialists() -> Vec<SpecialistSpec> {
    let research_tools = words(&[WEB_SEARCH, FETCH_URL, READ_FILE, WRITE_FILE, LIST_FILES]);
    vec![
        SpecialistSpec {
            container_image: None,
            id: "engineering".to_owned(),
            description: "Plans, implements, tests and reviews code and files in its workspace."
                .to_owned(),
            keywords: words(&[
                "code",
                "implement",
                "build",
                "script",
                "program",
                "file",
                "test",
                "debug",
                "refactor",
                "function",
            ]),
            capabilities: words(&["code_execution", "file_io", "software_testing"]),
            system_prompt: ENGINEERING_PROMPT.to_owned(),
            tools: words(&[SHELL, READ_FILE, WRITE_FILE, LIST_FILES]),
            finish_schema: engineering_finish_schema(),
            model_key: None,
            may_write: true,
            needs_network: false,
            limitations: Vec::new(),
            tooling: Default::default(),
            loop_aids: Default::default(),
            approval: Default::default(),
            project_instructions: true,
        },
        SpecialistSpec {
            container_image: None,
            id: "research".to_owned(),
            description: "Researches a question on the web and answers with cited sources."
                .to_owned(),
            keywords: words(&[
                "research",
                "find",
                "search",
                "sources",
                "compare",
                "survey",
                "literature",
                "cite",
                "citations",
                "evidence",
            ]),
            capabilities: words(&[
                "systematic_review",
                "web_search",
                "citation_extraction",
                "file_io",
            ]),
            system_prompt: RESEARCH_PROMPT.to_owned(),
            tools: research_tools.clone(),
            finish_schema: research_finish_schema(),
            model_key: None,
            may_write: true,
            needs_network: true,
            limitations: Vec::new(),
            tooling: Default::default(),
            loop_aids: Default::default(),
            approval: Default::default(),
            project_instructions: true,
        },
        SpecialistSpec {
            container_image: None,
            id: "enterprise_research".to_owned(),
            description: "Research across internal and web sources, with confidence per finding."
                .to_owned(),
            keywords: words(&[
                "enterprise",
                "internal",
                "confluence",
                "jira",
                "github",
                "wiki",
            ]),
            capabilities: words(&[
                "enterprise_search",
                "systematic_review",
                "web_search",
                "file_io",
            ]),
            system_prompt: format!("{RESEARCH_PROMPT}\n{ENTERPRISE_PROMPT_EXTRA}"),
            tools: {
                // Past runs of this fabric are an internal source too (docs/STORE.md).
                let mut tools = research_tools;
                tools.push("search_runs".to_owned());
                tools
            },
            finish_schema: research_finish_schema(),
            model_key: None,
            may_write: true,
            needs_network: true,
            limitations: words(&[
                "Internal sources (GitHub, wikis, trackers) come through MCP servers: none is \
                 configured by default; add them with `mcp_servers` and tools such as \
                 `mcp__github__*` (docs/MCP.md).",
            ]),
            tooling: Default::default(),
            loop_aids: Default::default(),
            approval: Default::default(),
            project_instructions: true,
        },
        SpecialistSpec {
            container_image: None,
            id: fabric_domain::DEFAULT_CRITIC.to_owned(),
            description: "Reviews code and files without changing them, and another \
                          specialist's staged changes before they are applied (the default \
                          critic of the quality gate)."
                .to_owned(),
            // Recruited by keywords only for a task that asks to look and to change nothing
            // ("review the code", "audit this module"): see `recruit::route_by_keywords`.
            keywords: words(&["review", "audit", "critique", "code review"]),
            capabilities: Vec::new(),
            system_prompt: REVIEWER_PROMPT.to_owned(),
            tools: words(&[READ_FILE, LIST_FILES]),
            finish_schema: critic_finish_schema(),
            model_key: None,
            may_write: false,
            needs_network: false,
            limitations: Vec::new(),
            tooling: Default::default(),
            loop_aids: Default::default(),
            approval: Default::default(),
            project_instructions: true,
        },
    ]
}

/// The finish schema every critic has (at least `approved`): its verdict and what it found.
pub fn critic_finish_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "approved": {"type": "boolean", "description": "true when the changes do the task correctly and may be applied as they are."},
            "findings": {
                "type": "array",
                "description": "What is wrong (or worth knowing), one entry per problem; empty when there is nothing to say.",
                "items": {
                    "type": "object",
                    "properties": {
                        "severity": {"type": "string", "enum": ["error", "warning", "info"], "description": "error: must be fixed before approval; warning: should be fixed; info: a remark."},
                        "file": {"type": "string", "description": "The file it concerns, relative to the workspace."},
                        "reason": {"type": "string", "description": "What is wrong and how to fix it, precisely."}
                    },
                    "required": ["severity", "reason"],
                    "additionalProperties": false
                }
            },
            "summary": {"type": "string", "description": "The verdict in one or two sentences."}
        },
        "required": ["approved", "findings"],
        "additionalProperties": false
    })
}

const REVIEWER_PROMPT: &str = "\
You are the reviewer of agent-fabric: the quality gate that checks another specialist's work \
before it is applied. You are given the task, the specialist's answer and the diff of the \
changes it staged; your workspace shows the files as they would be after the changes.
Review like a demanding senior engineer:
1. Read the task, then the diff. Read the changed files whole (read_file) where the diff is \
not enough to judge them.
2. Check that the changes do what the task asks, completely, and nothing it did not ask.
3. Look for mistakes: wrong logic, broken syntax, missing files, edge cases, secrets, \
destructive changes.
Approve (approved: true) when the changes are correct and complete, even if you would have \
written them differently. Reject (approved: false) only for real problems, each one a finding \
with severity `error`, the file, and a reason precise enough to fix it from.
When you are given a task of your own (a review or an audit, with no diff), review the files \
in your workspace the task names (list_files, then read_file), report each problem as a \
finding, and approve only when you found no error.
Call finish_task exactly once with approved, findings and a one-sentence summary.";
