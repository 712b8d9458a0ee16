//! A member's model lent to its tools' servers (MCP sampling, issue #29): each completion is
//! one model call of the run, so it takes a step from the run's budget, its answer is
//! capped by the token and cost limits, and its tokens are charged like the loop's own.

use async_trait::async_trait;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::budget::RunBudget;
use crate::engine::ModelParams;
use crate::ports::{
    ChatClient, ChatRequest, NoopObserver, SampleError, SampleRequest, Sampled, Sampler,
    ToolDefinitions,
};

/// The model key of one member, answering its servers' requests.
pub(crate) struct ModelSampler {
    chat: Arc<dyn ChatClient>,
    model: ModelParams,
    model_key: String,
    budget: Arc<RunBudget>,
    cancel: CancellationToken,
}

impl ModelSampler {
    pub(crate) fn new(
        chat: Arc<dyn ChatClient>,
        model: ModelParams,
        model_key: String,
        budget: Arc<RunBudget>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            chat,
            model,
            model_key,
            budget,
            cancel,
        }
    }
}

#[async_trait]
impl Sampler for ModelSampler {
    async fn sample(&self, request: SampleRequest) -> Result<Sampled, SampleError> {
        if let Some(why) = self.chat.unavailable() {
            return Err(SampleError::Budget(why));
        }
        self.budget
            .take_step()
            .map_err(|spent| SampleError::Budget(spent.to_string()))?;
        let tools = ToolDefinitions::none();
        let cap = self
            .budget
            .cap_completion(
                Some(request.max_tokens),
                || crate::context::estimate(&request.messages, &tools),
                self.model.price(),
            )
            .map_err(|spent| SampleError::Budget(spent.to_string()))?;
        let chat = ChatRequest {
            model: &self.model.name,
            messages: &request.messages,
            tools: &tools,
            temperature: request.temperature.or(self.model.temperature),
            top_p: self.model.top_p,
            max_tokens: cap,
            stream: false,
            vision: false,
        };
        let answer = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return Err(SampleError::Cancelled),
            answer = self.chat.chat(chat, &NoopObserver) => answer,
        };
        let response = answer.map_err(|e| SampleError::Model(e.to_string()))?;
        let usage = response.usage.unwrap_or_default();
        self.budget.charge(usage, self.model.price());
        let stop_reason = match response.finish_reason.as_deref() {
            Some("length") => "maxTokens",
            _ => "endTurn",
        };
        Ok(Sampled {
            text: response.content.unwrap_or_default(),
            model_key: self.model_key.clone(),
            model: self.model.name.clone(),
            stop_reason,
            usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::{ChatError, ChatObserver, ChatResponse};
    use fabric_domain::{Message, Usage};
    use std::sync::Mutex;

    /// Answers every call with "sure", 7 tokens, and keeps the requests' caps.
    #[derive(Default)]
    struct Echo {
        caps: Mutex<Vec<Option<u32>>>,
    }

    #[async_trait]
    impl ChatClient for Echo {
        async fn chat(
            &self,
            request: ChatRequest<'_>,
            _observer: &dyn ChatObserver,
        ) -> Result<ChatResponse, ChatError> {
            self.caps
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(request.max_tokens);
            Ok(ChatResponse {
                content: Some("sure".into()),
                usage: Some(Usage::from_counts(5, 2, None)),
                ..ChatResponse::default()
            })
        }
    }

    fn params() -> ModelParams {
        ModelParams::named("small")
    }

    fn request() -> SampleRequest {
        SampleRequest {
            messages: vec![Message::user("summarise")],
            max_tokens: 100,
            temperature: None,
        }
    }

    #[tokio::test]
    async fn issue_29_a_completion_is_a_step_of_the_run_s_budget() {
        let budget = Arc::new(RunBudget::new(3, Some(1), Some(1_000), None));
        let chat = Arc::new(Echo::default());
        let sampler = ModelSampler::new(
            chat.clone(),
            params(),
            "local".into(),
            budget.clone(),
            CancellationToken::new(),
        );
        let sampled = sampler
            .sample(request())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sampled.text, "sure");
        assert_eq!(
            (sampled.model_key.as_str(), sampled.stop_reason),
            ("local", "endTurn")
        );
        assert_eq!(budget.steps_used(), 1);
        // The server's own cap holds under the token budget.
        assert_eq!(
            *chat.caps.lock().unwrap_or_else(|e| e.into_inner()),
            vec![Some(100)]
        );
        // The one step the budget allows is used: the next request is refused, no call made.
        let refused = sampler.sample(request()).await;
        assert!(
            matches!(&refused, Err(SampleError::Budget(why)) if why.contains("1")),
            "{refused:?}"
        );
        assert_eq!(chat.caps.lock().unwrap_or_else(|e| e.into_inner()).len(), 1);
    }

    #[tokio::test]
    async fn issue_29_a_cancelled_run_lends_no_model() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let sampler = ModelSampler::new(
            Arc::new(Echo::default()),
            params(),
            "local".into(),
            Arc::new(RunBudget::unlimited()),
            cancel,
        );
        assert_eq!(sampler.sample(request()).await, Err(SampleError::Cancelled));
    }
}
