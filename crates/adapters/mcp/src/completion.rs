//! `completion/complete` (issue #29): what a client can offer a person typing the argument of
//! a resource template or a prompt. `run_id` is completed from the newest runs' ids, `path`
//! (of `fabric://runs/{run_id}/files/{+path}`, with `run_id` in the request's context) from
//! that run's workspace files; a specialist's `task` is free text and has no completions.
//! Anything else, or an unknown template, prompt or argument, is "invalid params" saying
//! what exists.

use fabric_domain::RunId;
use rmcp::ErrorData;
use rmcp::model::{CompleteRequestParams, CompleteResult, CompletionInfo, Reference};

use crate::prompts;
use crate::resources::RunResources;
use crate::server::SpecialistList;
use crate::uri;

/// The template whose `path` argument is a workspace file.
const FILE_TEMPLATE: &str = "fabric://runs/{run_id}/files/{+path}";

/// The completions of `params`.
pub(crate) async fn complete(
    resources: &RunResources,
    specialists: &SpecialistList,
    params: &CompleteRequestParams,
) -> Result<CompleteResult, ErrorData> {
    let argument = &params.argument;
    let values = match &params.r#ref {
        Reference::Prompt(prompt) => {
            let specialist = prompts::named(specialists, &prompt.name)?;
            if argument.name != "task" {
                return Err(no_argument(&specialist.id, &argument.name, "task"));
            }
            Vec::new()
        }
        Reference::Resource(template) => {
            let Some((uri_template, ..)) = uri::TEMPLATES.iter().find(|t| t.0 == template.uri)
            else {
                let names: Vec<&str> = uri::TEMPLATES.iter().map(|t| t.0).collect();
                return Err(ErrorData::invalid_params(
                    format!(
                        "no resource template `{}`; the templates are: {}",
                        template.uri,
                        names.join(", ")
                    ),
                    None,
                ));
            };
            match argument.name.as_str() {
                "run_id" => resources.run_ids(&argument.value).await?,
                "path" if *uri_template == FILE_TEMPLATE => {
                    let run = context_run(params)?;
                    resources.file_paths(&run, &argument.value).await?
                }
                other => {
                    let names = if *uri_template == FILE_TEMPLATE {
                        "run_id` and `path"
                    } else {
                        "run_id"
                    };
                    return Err(no_argument(uri_template, other, names));
                }
            }
        }
        // A kind of reference a later revision adds.
        _ => {
            return Err(ErrorData::invalid_params(
                "only prompts (`ref/prompt`) and resource templates (`ref/resource`) are completed",
                None,
            ));
        }
    };
    Ok(CompleteResult::new(info(values)))
}

/// At most the protocol's 100 values, with how many there were.
fn info(mut values: Vec<String>) -> CompletionInfo {
    let total = u32::try_from(values.len()).unwrap_or(u32::MAX);
    let more = values.len() > CompletionInfo::MAX_VALUES;
    values.truncate(CompletionInfo::MAX_VALUES);
    // At most MAX_VALUES by the truncation above, so the check cannot fail.
    CompletionInfo::with_pagination(values, Some(total), more).unwrap_or_default()
}

/// The run a `path` is completed in: `run_id` among the request's context arguments.
fn context_run(params: &CompleteRequestParams) -> Result<RunId, ErrorData> {
    let given = params
        .context
        .as_ref()
        .and_then(|c| c.arguments.as_ref())
        .and_then(|a| a.get("run_id"))
        .ok_or_else(|| {
            ErrorData::invalid_params(
                "completing `path` needs the run: send `run_id` in `context.arguments`",
                None,
            )
        })?;
    RunId::parse(given).map_err(|e| ErrorData::invalid_params(e.to_string(), None))
}

fn no_argument(of: &str, name: &str, there: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("`{of}` has no argument `{name}`; it has `{there}`"),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_29_at_most_a_hundred_values_with_the_total() {
        let many: Vec<String> = (0..150).map(|i| i.to_string()).collect();
        let info = info(many);
        assert_eq!(info.values.len(), 100);
        assert_eq!((info.total, info.has_more), (Some(150), Some(true)));
        let few = super::info(vec!["a".to_owned()]);
        assert_eq!((few.total, few.has_more), (Some(1), Some(false)));
    }
}
