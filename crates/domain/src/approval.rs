//! A specialist's approval policy (issue #42, ADR-104), in codex's terms: which of its tool
//! calls wait for a person's approval before they run.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// When calls wait for a person.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// No call waits (the rules may still ask about some).
    #[default]
    Never,
    /// A call the sandbox or the allowlist refuses (a command outside `shell.allow`) is
    /// asked about instead of refused; approved, it runs once as asked.
    OnRequest,
    /// Every call that may write or execute (a tool not marked read-only) waits.
    Untrusted,
}

impl ApprovalMode {
    /// The mode as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::OnRequest => "on_request",
            Self::Untrusted => "untrusted",
        }
    }
}

/// What a rule does with a call it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleAction {
    /// Always ask.
    Ask,
    /// Never ask.
    Allow,
}

/// One rule, by tool and, for `shell`, by the command's first words.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRule {
    /// The tool's name (`shell`, `write_file`, `mcp__github__create_issue`); `*` any tool.
    pub tool: String,
    /// The command's words it starts with (`git push`), for a tool that takes a command
    /// (`shell`'s `cmd`, or a `command` string); absent: every call of the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Ask, or allow without asking.
    pub action: RuleAction,
}

impl ApprovalRule {
    /// Whether this rule is about a call of `tool` with `args`: its tool, and its command
    /// starting with the rule's words (whole words: `git push` matches `git push -f`, not
    /// `git pushd`).
    pub fn matches(&self, tool: &str, args: &Value) -> bool {
        if self.tool != "*" && self.tool != tool {
            return false;
        }
        let Some(prefix) = &self.prefix else {
            return true;
        };
        let want: Vec<&str> = prefix.split_whitespace().collect();
        let have = command_words(args);
        !want.is_empty() && have.len() >= want.len() && want[..] == have[..want.len()]
    }

    /// The rule as a person reads it.
    pub fn describe(&self) -> String {
        match &self.prefix {
            Some(prefix) => format!("`{}` commands starting with `{prefix}`", self.tool),
            None => format!("every call of `{}`", self.tool),
        }
    }
}

/// A specialist's approval policy: a mode and rules, the first matching rule winning.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalPolicy {
    /// When calls wait, besides the rules.
    #[serde(default)]
    pub mode: ApprovalMode,
    /// Rules by tool and command prefix, tried in order before the mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<ApprovalRule>,
}

/// Why a call waits for approval, and what approving it for the run covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ApprovalAsk {
    /// Why, as a person reads it.
    pub reason: String,
    /// What "approve for the rest of this run" covers: the rule, or the tool under the mode.
    pub scope: String,
}

impl ApprovalPolicy {
    /// Whether a call of `tool` (`read_only` by its contract) with `args` waits for approval
    /// before it runs; `None`: it runs. The `on_request` mode asks only after a refusal,
    /// which the loop handles, so it asks nothing here.
    pub fn asks(&self, tool: &str, args: &Value, read_only: bool) -> Option<ApprovalAsk> {
        if let Some(rule) = self.rules.iter().find(|r| r.matches(tool, args)) {
            return match rule.action {
                RuleAction::Allow => None,
                RuleAction::Ask => Some(ApprovalAsk {
                    reason: format!("the approval rule for {} asks first", rule.describe()),
                    scope: format!(
                        "rule:{}:{}",
                        rule.tool,
                        rule.prefix.as_deref().unwrap_or("")
                    ),
                }),
            };
        }
        match self.mode {
            ApprovalMode::Untrusted if !read_only => Some(ApprovalAsk {
                reason: format!(
                    "approval mode `untrusted`: every call that may write or execute waits for approval (`{tool}`)"
                ),
                scope: format!("tool:{tool}"),
            }),
            _ => None,
        }
    }

    /// Whether a refusal of a call of `tool` is asked about instead (`on_request`).
    pub fn asks_on_refusal(&self, tool: &str, args: &Value) -> Option<ApprovalAsk> {
        if self.mode != ApprovalMode::OnRequest {
            return None;
        }
        // A rule that allows the call does not override the sandbox: it was refused anyway.
        Some(ApprovalAsk {
            reason: "approval mode `on_request`: the call was refused by the sandbox or the allowlist, and runs only if approved".to_owned(),
            scope: format!("refused:{tool}:{}", command_words(args).join(" ")),
        })
    }
}

/// The words of a call's command: `shell`'s `cmd` (argv), or a `command` string split at
/// whitespace; none for a call without one.
fn command_words(args: &Value) -> Vec<&str> {
    if let Some(argv) = args.get("cmd").and_then(Value::as_array) {
        return argv.iter().filter_map(Value::as_str).collect();
    }
    args.get("command")
        .and_then(Value::as_str)
        .map(|c| c.split_whitespace().collect())
        .unwrap_or_default()
}

/// Whether a policy is the default one (`never`, no rules), which specialists leave out.
pub(crate) fn is_default(policy: &ApprovalPolicy) -> bool {
    *policy == ApprovalPolicy::default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(tool: &str, prefix: Option<&str>, action: RuleAction) -> ApprovalRule {
        ApprovalRule {
            tool: tool.to_owned(),
            prefix: prefix.map(str::to_owned),
            action,
        }
    }

    #[test]
    fn issue_42_rules_match_whole_command_words_and_win_over_the_mode() {
        let policy = ApprovalPolicy {
            mode: ApprovalMode::Untrusted,
            rules: vec![
                rule("shell", Some("pytest"), RuleAction::Allow),
                rule("shell", Some("git push"), RuleAction::Ask),
            ],
        };
        let shell = |c: &str| json!({"command": c});
        assert!(policy.asks("shell", &shell("pytest -q"), false).is_none());
        let push = policy.asks("shell", &shell("git  push -f origin"), false);
        assert!(push.is_some_and(|a| a.scope == "rule:shell:git push"));
        // `git pushd` is not `git push`; the mode asks about it as any other command.
        let other = policy.asks("shell", &shell("git pushd"), false);
        assert!(other.is_some_and(|a| a.scope == "tool:shell"));
        assert!(policy.asks("read_file", &json!({}), true).is_none());
        // `shell`'s argv counts word by word too.
        let argv = policy.asks("shell", &json!({"cmd": ["git", "push", "-f"]}), false);
        assert!(argv.is_some_and(|a| a.scope == "rule:shell:git push"));
        assert!(
            policy
                .asks("shell", &json!({"cmd": ["pytest"]}), false)
                .is_none()
        );
    }

    #[test]
    fn issue_42_never_asks_nothing_but_its_rules() {
        let policy = ApprovalPolicy::default();
        assert!(
            policy
                .asks("shell", &json!({"command": "rm -rf /"}), false)
                .is_none()
        );
        assert!(policy.asks_on_refusal("shell", &json!({})).is_none());
        let asked = ApprovalPolicy {
            mode: ApprovalMode::Never,
            rules: vec![rule("*", None, RuleAction::Ask)],
        };
        assert!(asked.asks("read_file", &json!({}), true).is_some());
    }

    #[test]
    fn issue_42_decisions_read_as_people_and_clients_spell_them() {
        use crate::runlog::Decision;
        assert_eq!(Decision::parse(" Yes "), Some(Decision::Approve));
        assert_eq!(
            Decision::parse("allow_always"),
            Some(Decision::ApproveForRun)
        );
        assert_eq!(Decision::parse("reject_once"), Some(Decision::Deny));
        assert_eq!(Decision::parse("maybe"), None);
    }
}
