//! Fitting the conversation to the model's context window before a call
//! ([`crate::context`]), recorded as `context_compacted`.

use fabric_domain::{Message, Usage, runlog};

use crate::params::ModelParams;
use crate::ports::{ChatClient, ChatRequest, StoreError, ToolContext, ToolDefinitions};
use crate::recorder::Recorder;

/// Compacts the conversation when it would not fit the model's context window, recording
/// `context_compacted` (live steps only). `Ok(Err(reason))`: it cannot be made to fit.
#[allow(clippy::too_many_arguments)]
pub(super) async fn fit_window(
    chat: &dyn ChatClient,
    messages: &mut Vec<Message>,
    definitions: &ToolDefinitions,
    model: &ModelParams,
    ctx: &ToolContext,
    rec: Recorder<'_>,
    step: u32,
    replaying: Option<Option<String>>,
    usage: &mut Usage,
) -> Result<Result<(), String>, StoreError> {
    let Some(window) = model.context_window else {
        return Ok(Ok(()));
    };
    let room = crate::context::room(window, model.max_tokens);
    let done = match crate::context::compact(messages, definitions, room) {
        Ok(None) => return Ok(Ok(())),
        Ok(Some(done)) => done,
        Err(smallest) => {
            return Ok(Err(format!(
                "the conversation does not fit the model's context window of {window} tokens even with only the system prompt, the task and the last step left, its results cut (about {smallest} tokens, room for {room}); raise the window (`num_ctx` for Ollama, `context_window` otherwise), use a model with a larger one, or shorten the task or the tool results"
            )));
        }
    };
    // Replayed: the summary the step used then, if any (its tokens are in the replayed
    // step's usage); nothing is recorded again.
    if let Some(summary) = replaying {
        if let Some(summary) = summary {
            crate::context::use_summary(messages, &summary);
        }
        return Ok(Ok(()));
    }
    // The model writes the note for what was left out, when asked to; a failure keeps the
    // listed note.
    let mut summary = None;
    let mut summary_usage = None;
    if model.summarize_compaction && done.dropped_messages > 0 {
        let prompt = [
            Message::system(
                "You summarise the earlier steps of an agent's work in a few sentences: what was done, what was found, what files were written. Be factual and brief.",
            ),
            Message::user(done.dropped_text.clone()),
        ];
        let request = ChatRequest {
            model: &model.name,
            messages: &prompt,
            tools: &ToolDefinitions::none(),
            temperature: model.temperature,
            top_p: model.top_p,
            max_tokens: Some(400),
            stream: false,
        };
        let asked = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => None,
            answer = chat.chat(request, &crate::ports::NoopObserver) => answer.ok(),
        };
        if let Some(answer) = asked {
            if let Some(u) = answer.usage {
                usage.add(u);
                ctx.lineage.budget.charge(u, model.price);
                summary_usage = Some(u);
            }
            if let Some(text) = answer.content.filter(|t| !t.trim().is_empty()) {
                crate::context::use_summary(messages, text.trim());
                summary = Some(text.trim().to_owned());
            }
        }
    }
    rec.record(
        Some(step),
        &runlog::ContextCompacted {
            window,
            room,
            tokens_before: done.tokens_before,
            tokens_after: crate::context::estimate(messages, definitions),
            shortened_results: done.shortened,
            dropped_messages: done.dropped_messages,
            cut_results: done.cut,
            mode: if summary.is_some() {
                "summarize"
            } else {
                "drop"
            }
            .to_owned(),
            summary,
            summary_usage,
        },
    )
    .await?;
    Ok(Ok(()))
}
