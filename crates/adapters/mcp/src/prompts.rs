//! Each specialist as an MCP prompt (issue #29): a client app that brings its own model can
//! use a specialist's instructions with it. `prompts/list` names one prompt per specialist
//! with its one argument, `task`; `prompts/get` answers one user message holding the
//! specialist's system prompt and the task.

use rmcp::ErrorData;
use rmcp::model::{
    GetPromptRequestParams, GetPromptResult, ListPromptsResult, Prompt, PromptArgument,
    PromptMessage, Role,
};

use crate::server::{SpecialistEntry, SpecialistList};

/// One prompt per specialist.
pub(crate) fn list(specialists: &SpecialistList) -> ListPromptsResult {
    let prompts = specialists
        .specialists
        .iter()
        .map(|s| {
            let task = PromptArgument::new("task")
                .with_description("The task for the specialist, complete in itself")
                .with_required(true);
            Prompt::new(&s.id, Some(&s.description), Some(vec![task]))
        })
        .collect();
    ListPromptsResult::with_all_items(prompts)
}

/// The prompt (specialist) called `name`, or an error naming the ones there are.
pub(crate) fn named<'a>(
    specialists: &'a SpecialistList,
    name: &str,
) -> Result<&'a SpecialistEntry, ErrorData> {
    specialists
        .specialists
        .iter()
        .find(|s| s.id == name)
        .ok_or_else(|| {
            let names: Vec<&str> = specialists
                .specialists
                .iter()
                .map(|s| s.id.as_str())
                .collect();
            ErrorData::invalid_params(
                format!(
                    "no prompt `{name}`; the prompts are the specialists: {}",
                    names.join(", ")
                ),
                None,
            )
        })
}

/// The specialist `params.name` with the task `params.arguments.task`.
pub(crate) fn get(
    specialists: &SpecialistList,
    params: &GetPromptRequestParams,
) -> Result<GetPromptResult, ErrorData> {
    let specialist = named(specialists, &params.name)?;
    let task = params
        .arguments
        .as_ref()
        .and_then(|a| a.get("task"))
        .and_then(|t| t.as_str())
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| {
            ErrorData::invalid_params(
                format!(
                    "prompt `{}` needs the argument `task`: the task for the specialist",
                    specialist.id
                ),
                None,
            )
        })?;
    let text = format!("{}\n\n# Task\n\n{task}", specialist.system_prompt);
    Ok(
        GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
            .with_description(specialist.description.clone()),
    )
}
