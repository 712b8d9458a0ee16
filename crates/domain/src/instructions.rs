//! A project's own instructions to its agents (issue #43): the `AGENTS.md` files of the
//! repository a run works on (`CLAUDE.md` where a directory has no `AGENTS.md`) and the
//! user's own file, assembled into one block of the system prompt within a byte budget.
//!
//! The rule (docs/INSTRUCTIONS.md, ADR-115): the user's file first, then the repository's
//! from its root down, shallower before deeper, so the file nearest to the code a run changes
//! speaks last and wins where they disagree (as codex reads them). A file goes in whole or
//! not at all, in that order of priority; what did not fit is named at the end of the block,
//! so the model can still read it. The block is made once, at the run's start: the system
//! prompt stays the same bytes at every step, and a model server's prompt cache keeps it.

use serde::{Deserialize, Serialize};

/// The budget of the instructions' text when the config does not say (codex's default).
pub const DEFAULT_MAX_BYTES: usize = 32 * 1024;

/// The names read in each directory, in order of preference: the first present is taken.
pub const FILE_NAMES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];

/// One file found, before the budget: where it is and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionSource {
    /// As shown to the model and recorded: relative to the repository's root
    /// (`src/AGENTS.md`), or the user's own file as `~/…` or an absolute path.
    pub path: String,
    /// What it covers.
    pub scope: InstructionScope,
    /// The SHA-256 (hex) of its bytes.
    pub sha256: String,
    /// Its text.
    pub text: String,
}

/// What a file covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstructionScope {
    /// The user's own file: every project.
    User,
    /// A directory of the repository, relative to its root (`""` for the root itself).
    Directory(String),
}

/// `run_start.instructions[]`: one file the run's instructions were made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstructionFile {
    /// As [`InstructionSource::path`].
    pub path: String,
    /// The SHA-256 (hex) of its bytes.
    pub sha256: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Whether it is in the system prompt; `false`: it did not fit the budget.
    pub included: bool,
}

/// The assembled block and what it was made of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instructions {
    /// The text appended to the system prompt (empty when no file was found).
    pub text: String,
    /// Every file found, included or not, in the order of the block.
    pub files: Vec<InstructionFile>,
}

/// What introduces the block.
const HEADER: &str = "\n\nProject instructions (the repository's AGENTS.md files; a later file is nearer to the code it covers and wins where they disagree):";

impl Instructions {
    /// The block from `sources` within `max_bytes` of file text: ordered by
    /// [`Instructions::order`], each file whole or not at all.
    pub fn assemble(mut sources: Vec<InstructionSource>, max_bytes: usize) -> Self {
        Self::order(&mut sources);
        let mut text = String::new();
        let mut files = Vec::with_capacity(sources.len());
        let mut left_out = Vec::new();
        let mut used = 0usize;
        for source in sources {
            let bytes = source.text.len();
            let included = used + bytes <= max_bytes && !source.text.trim().is_empty();
            if included {
                used += bytes;
                if text.is_empty() {
                    text.push_str(HEADER);
                }
                text.push_str(&format!(
                    "\n\n--- {} ({})\n{}",
                    source.path,
                    scope_words(&source.scope),
                    source.text.trim_end()
                ));
            } else if !source.text.trim().is_empty() {
                left_out.push(source.path.clone());
            }
            files.push(InstructionFile {
                path: source.path,
                sha256: source.sha256,
                bytes: bytes as u64,
                included,
            });
        }
        if !left_out.is_empty() {
            if text.is_empty() {
                text.push_str(HEADER);
            }
            text.push_str(&format!(
                "\n\n(Left out, over the {max_bytes}-byte budget of instructions: {}. Read them with read_file before you change files they cover.)",
                left_out.join(", ")
            ));
        }
        Self { text, files }
    }

    /// The order of the block, which is also the order of priority for the budget: the
    /// user's file, then the repository's by depth (the root first), then by path.
    pub fn order(sources: &mut [InstructionSource]) {
        sources.sort_by(|a, b| {
            rank(&a.scope)
                .cmp(&rank(&b.scope))
                .then(a.path.cmp(&b.path))
        });
    }

    /// Whether no file was found.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// (0, 0) for the user's file, then (1, depth) for a directory.
fn rank(scope: &InstructionScope) -> (u8, usize) {
    match scope {
        InstructionScope::User => (0, 0),
        InstructionScope::Directory(dir) if dir.is_empty() => (1, 0),
        InstructionScope::Directory(dir) => (1, dir.split('/').count()),
    }
}

/// How the block says what a file covers.
fn scope_words(scope: &InstructionScope) -> String {
    match scope {
        InstructionScope::User => "yours, for every project".to_owned(),
        InstructionScope::Directory(dir) if dir.is_empty() => "the whole repository".to_owned(),
        InstructionScope::Directory(dir) => format!("files under {dir}/"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(path: &str, scope: InstructionScope, text: &str) -> InstructionSource {
        InstructionSource {
            path: path.to_owned(),
            scope,
            sha256: format!("sha-{path}"),
            text: text.to_owned(),
        }
    }

    fn dir(d: &str) -> InstructionScope {
        InstructionScope::Directory(d.to_owned())
    }

    #[test]
    fn the_user_file_comes_first_and_the_nearest_file_last() {
        let made = Instructions::assemble(
            vec![
                source("src/api/AGENTS.md", dir("src/api"), "Use axum.\n"),
                source("AGENTS.md", dir(""), "Run cargo test.\n"),
                source(
                    "~/.config/agent-fabric/AGENTS.md",
                    InstructionScope::User,
                    "Be brief.",
                ),
                source("src/AGENTS.md", dir("src"), "No unwrap."),
            ],
            DEFAULT_MAX_BYTES,
        );
        let paths: Vec<&str> = made.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "~/.config/agent-fabric/AGENTS.md",
                "AGENTS.md",
                "src/AGENTS.md",
                "src/api/AGENTS.md"
            ]
        );
        let user = made.text.find("Be brief.").unwrap_or(usize::MAX);
        let root = made.text.find("Run cargo test.").unwrap_or(usize::MAX);
        let api = made.text.find("Use axum.").unwrap_or(usize::MAX);
        assert!(user < root && root < api, "{}", made.text);
        assert!(
            made.text
                .contains("--- src/api/AGENTS.md (files under src/api/)")
        );
        assert!(made.text.contains("--- AGENTS.md (the whole repository)"));
        assert!(made.files.iter().all(|f| f.included));
    }

    #[test]
    fn what_does_not_fit_is_named_and_recorded_as_left_out() {
        let made = Instructions::assemble(
            vec![
                source("AGENTS.md", dir(""), &"a".repeat(60)),
                source("docs/AGENTS.md", dir("docs"), &"b".repeat(60)),
                source("src/AGENTS.md", dir("src"), &"c".repeat(30)),
            ],
            100,
        );
        let included: Vec<bool> = made.files.iter().map(|f| f.included).collect();
        assert_eq!(included, [true, false, true]);
        assert!(made.text.contains("Left out, over the 100-byte budget"));
        assert!(made.text.contains("docs/AGENTS.md"));
        assert!(!made.text.contains(&"b".repeat(60)));
        assert_eq!(made.files[1].bytes, 60);
    }

    #[test]
    fn nothing_found_is_an_empty_block() {
        let made = Instructions::assemble(Vec::new(), DEFAULT_MAX_BYTES);
        assert!(made.is_empty());
        assert_eq!(made.text, "");
    }

    #[test]
    fn the_block_is_the_same_bytes_for_the_same_files() {
        let files = || {
            vec![
                source("b/AGENTS.md", dir("b"), "B"),
                source("a/AGENTS.md", dir("a"), "A"),
            ]
        };
        assert_eq!(
            Instructions::assemble(files(), 1000),
            Instructions::assemble(files().into_iter().rev().collect(), 1000)
        );
    }
}
