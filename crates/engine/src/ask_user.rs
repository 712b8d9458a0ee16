//! `ask_user`: the tool whose answer is a person's (issue #42). The model asks a question
//! (with choices, if it has them); the loop asks whoever started the run, by the channel
//! they used, and the answer is the call's result. A specialist has it when its `tools`
//! name it.

use async_trait::async_trait;
use fabric_domain::runlog::{InputKind, InputRequired};
use fabric_domain::{ASK_TOOL, ToolAnnotations, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::ports::{ToolContext, ToolError};
use crate::typed::TypedTool;

/// Most characters of a question, and of each choice.
pub const MAX_QUESTION_CHARS: usize = 2_000;
/// Most choices offered.
pub const MAX_CHOICES: usize = 10;

/// The input of `ask_user`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskUserInput {
    /// The question, as the person will read it: one decision, with what you need to know.
    pub question: String,
    /// The answers to choose from, if the question has a few (the person may still answer
    /// in their own words).
    #[serde(default)]
    pub choices: Vec<String>,
}

/// The `ask_user` tool.
#[derive(Debug, Default, Clone, Copy)]
pub struct AskUserTool;

/// The contract of `ask_user`.
pub fn ask_user_spec() -> ToolSpec {
    ToolSpec::for_input::<AskUserInput>(
        ASK_TOOL,
        "Ask the person who started this run a question, and get their answer as the result. Use it only for a decision you cannot make yourself (which of two designs, whether to overwrite something); do not ask for what the tools can find out.",
    )
    .example(json!({"question": "Keep the old config format readable?"}))
    .example(json!({"question": "Which database should the example use?", "choices": ["SQLite", "PostgreSQL"]}))
    // It changes nothing: asked again after a stop, it is answered again.
    .annotate(ToolAnnotations {
        read_only: true,
        ..ToolAnnotations::default()
    })
}

#[async_trait]
impl TypedTool for AskUserTool {
    type Input = AskUserInput;

    fn spec(&self) -> ToolSpec {
        ask_user_spec()
    }

    async fn run(&self, input: AskUserInput, _ctx: &ToolContext) -> Result<Value, ToolError> {
        let question = input.question.trim();
        if question.is_empty() {
            return Err(ToolError::InvalidArguments(
                "parameter `question` is empty; write the question the person should answer"
                    .to_owned(),
            ));
        }
        if question.chars().count() > MAX_QUESTION_CHARS {
            return Err(ToolError::InvalidArguments(format!(
                "parameter `question` has {} characters, more than {MAX_QUESTION_CHARS}; ask a shorter question",
                question.chars().count()
            )));
        }
        if input.choices.len() > MAX_CHOICES {
            return Err(ToolError::InvalidArguments(format!(
                "parameter `choices` has {} entries, more than {MAX_CHOICES}; offer fewer",
                input.choices.len()
            )));
        }
        if let Some(long) = input
            .choices
            .iter()
            .position(|c| c.trim().is_empty() || c.chars().count() > MAX_QUESTION_CHARS)
        {
            return Err(ToolError::InvalidArguments(format!(
                "parameter `choices[{long}]` is empty or longer than {MAX_QUESTION_CHARS} characters"
            )));
        }
        // The loop fills in the call's id and asks the run's person.
        Err(ToolError::Ask(Box::new(InputRequired {
            call_id: String::new(),
            input: InputKind::Question,
            question: question.to_owned(),
            choices: input.choices,
            tool: None,
            arguments: None,
            expires_at: None,
        })))
    }
}
