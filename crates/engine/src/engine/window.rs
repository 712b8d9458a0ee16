//! Fitting the conversation to the model's context window before a call
//! ([`crate::context`]), recorded as `context_compacted`.

use fabric_domain::{Message, RunStatus, runlog};

use super::{Loop, Stop};
use crate::context::Compaction;
use crate::ports::{ChatRequest, ToolDefinitions};

impl Loop<'_, '_> {
    /// Compacts the conversation when it would not fit the model's context window,
    /// recording `context_compacted` (live steps only). Compacting is deterministic, so a
    /// replayed step compacts as the live one did (and records nothing again). A [`Stop`]
    /// when it cannot be made to fit.
    pub(super) async fn fit_window(&mut self, step: u32) -> Result<(), Stop> {
        let Some(window) = self.model.context_window else {
            return Ok(());
        };
        let room = crate::context::room(window, self.model.max_tokens);
        let definitions = &self.catalogue.definitions;
        let done = match crate::context::compact(&mut self.messages, definitions, room) {
            Ok(None) => return Ok(()),
            Ok(Some(done)) => done,
            Err(smallest) => {
                return Err(Stop::Ended(
                    RunStatus::ContextWindowExceeded,
                    format!(
                        "the conversation does not fit the model's context window of {window} tokens even with only the system prompt, the task and the last step left, its results cut (about {smallest} tokens, room for {room}); raise the window (`num_ctx` for Ollama, `context_window` otherwise), use a model with a larger one, or shorten the task or the tool results"
                    ),
                ));
            }
        };
        // Replayed: the summary the step used then, if any (its tokens are in the replayed
        // step's usage); nothing is recorded again.
        let replaying = self
            .replay
            .front()
            .filter(|r| r.step == step && r.response.is_some())
            .map(|r| r.summary.clone());
        if let Some(summary) = replaying {
            if let Some(summary) = summary {
                crate::context::use_summary(&mut self.messages, &summary);
            }
            return Ok(());
        }
        self.pre_compact(step).await?;
        // The model writes the note for what was left out, when asked to; a failure keeps
        // the listed note.
        let (summary, summary_usage) =
            match self.model.summarize_compaction && done.dropped_messages > 0 {
                true => self.summarise(&done).await,
                false => (None, None),
            };
        self.rec
            .record(
                Some(step),
                runlog::ContextCompacted {
                    window,
                    room,
                    tokens_before: done.tokens_before,
                    tokens_after: crate::context::estimate(
                        &self.messages,
                        &self.catalogue.definitions,
                    ),
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
        Ok(())
    }

    /// Asks the member's model to summarise the left-out turns, and puts its summary in
    /// their place; counts and pays for its tokens.
    async fn summarise(
        &mut self,
        done: &Compaction,
    ) -> (Option<String>, Option<fabric_domain::Usage>) {
        let model = self.model;
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
            vision: false,
        };
        let asked = tokio::select! {
            biased;
            () = self.ctx.cancel.cancelled() => None,
            answer = self.chat.chat(request, &crate::ports::NoopObserver) => answer.ok(),
        };
        let (mut summary, mut summary_usage) = (None, None);
        if let Some(answer) = asked {
            if let Some(u) = answer.usage {
                self.usage.add(u);
                self.ctx.lineage.budget.charge(u, model.price());
                summary_usage = Some(u);
            }
            if let Some(text) = answer.content.filter(|t| !t.trim().is_empty()) {
                crate::context::use_summary(&mut self.messages, text.trim());
                summary = Some(text.trim().to_owned());
            }
        }
        (summary, summary_usage)
    }
}
