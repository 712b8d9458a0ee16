//! The canonical workflows of the built-in tools (seed 004: contracts carry "prerequisites,
//! recommended next actions, and canonical workflows"), each defined once, here.
//!
//! A workflow spans several tools, so it belongs to none of them: it is written once in
//! [`BUILTIN`], and each built-in tool's contract gets a copy of every workflow that names it
//! ([`attach`]). Whoever holds a contract (the meta-tools of lazy loading, the system prompt,
//! the generated docs/TOOLS.md) then sees its workflows without knowing this registry, and
//! the core, which cannot depend on this crate, needs no list of its own.

use fabric_domain::{ToolSpec, Workflow};

/// A workflow as written here: static text, made a [`Workflow`] when a contract is built.
struct Def {
    name: &'static str,
    purpose: &'static str,
    steps: &'static [&'static [&'static str]],
}

/// The built-in workflows. Keep them few and short: the ones that fit a specialist's tools
/// go into its system prompt, one line each, and small models have small windows.
const BUILTIN: &[Def] = &[
    Def {
        name: "inspect-edit-verify",
        purpose: "change files, then run something that checks the change",
        steps: &[&["list_files", "read_file"], &["write_file"], &["shell"]],
    },
    Def {
        name: "search-fetch-cite",
        purpose: "answer from the web, citing only pages you fetched",
        steps: &[
            &["web_search"],
            &["fetch_url"],
            &["write_file", "finish_task"],
        ],
    },
    Def {
        name: "list-read-report",
        purpose: "review or explain files without changing them",
        steps: &[&["list_files"], &["read_file"], &["finish_task"]],
    },
];

/// The built-in workflows, in the order the system prompt offers them.
pub fn builtin_workflows() -> Vec<Workflow> {
    BUILTIN
        .iter()
        .map(|d| Workflow::new(d.name, d.purpose, d.steps))
        .collect()
}

/// The contract with every built-in workflow that names its tool.
pub(crate) fn attach(spec: ToolSpec) -> ToolSpec {
    let name = spec.name.clone();
    builtin_workflows()
        .into_iter()
        .filter(|w| w.involves(&name))
        .fold(spec, ToolSpec::workflow)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{BUILTIN_TOOLS, NoOsSandbox, ProcessSandbox, ToolPolicy, engineering_tools};

    fn contracts() -> Vec<ToolSpec> {
        let sandbox: Arc<dyn ProcessSandbox> = Arc::new(NoOsSandbox);
        engineering_tools(&Arc::new(ToolPolicy::default()), &sandbox)
            .iter()
            .map(|t| t.spec().clone())
            .collect()
    }

    #[test]
    fn issue_26_built_in_workflows_are_short_unique_and_name_only_built_in_tools() {
        let workflows = builtin_workflows();
        for (i, w) in workflows.iter().enumerate() {
            assert!(
                workflows[..i].iter().all(|other| other.name != w.name),
                "{} is defined twice",
                w.name
            );
            assert!((2..=4).contains(&w.steps.len()), "{}: 2 to 4 steps", w.name);
            // Bytes, as the prompt's budget counts them: with its header, one line must fit
            // the share of a 2048-token window that fabric-core's `execute::prompt` gives
            // workflows (1/32 of it, 3 bytes a token: 192 bytes).
            assert!(
                w.summary().len() <= 150,
                "{} must fit one short line of a system prompt: {} bytes",
                w.name,
                w.summary().len()
            );
            for tool in w.steps.iter().flatten() {
                assert!(
                    BUILTIN_TOOLS.contains(&tool.as_str()) || tool == fabric_domain::FINISH_TOOL,
                    "{} names `{tool}`, which is not a built-in tool",
                    w.name
                );
            }
        }
    }

    #[test]
    fn issue_26_each_contract_carries_exactly_the_workflows_that_name_it() {
        let contracts = contracts();
        for spec in &contracts {
            let expected: Vec<Workflow> = builtin_workflows()
                .into_iter()
                .filter(|w| w.involves(&spec.name))
                .collect();
            assert_eq!(spec.planner.workflows, expected, "{}", spec.name);
        }
        // The engineering and research tool sets each fit their own workflow.
        let refs: Vec<&ToolSpec> = contracts.iter().collect();
        let names: Vec<&str> = fabric_domain::fitting_workflows(&refs)
            .iter()
            .map(|w| w.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "inspect-edit-verify",
                "list-read-report",
                "search-fetch-cite"
            ]
        );
    }
}
