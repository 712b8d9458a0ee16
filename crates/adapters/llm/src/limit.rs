//! At most N requests at once to one model endpoint (`models.<key>.max_concurrent_requests`;
//! issue #14): a local Ollama serves a few requests at a time (`OLLAMA_NUM_PARALLEL`), and a
//! thousand runs must queue politely for it rather than open a thousand connections.
//!
//! The permits are per endpoint (its base URL) and process-wide: every client of the same
//! server, from every run, waits on one semaphore. A request's wait is reported in its
//! answer (`queued_ms`), which the runlog records.

use async_trait::async_trait;
use fabric_engine::{ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use tokio::sync::Semaphore;

/// The semaphore of `endpoint` (one per server, [`fabric_domain::endpoint_key`]), made with
/// `permits` by its first user; later users share it. Keys naming one server with different
/// limits are refused by the configuration, so the number is the same whoever comes first.
fn semaphore(endpoint: &str, permits: usize) -> Arc<Semaphore> {
    static ENDPOINTS: OnceLock<Mutex<HashMap<String, Arc<Semaphore>>>> = OnceLock::new();
    let mut map = ENDPOINTS
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Arc::clone(
        map.entry(fabric_domain::endpoint_key(endpoint))
            .or_insert_with(|| Arc::new(Semaphore::new(permits.max(1)))),
    )
}

/// A client that holds one of its endpoint's permits for each request.
pub(crate) struct Limited {
    inner: Arc<dyn ChatClient>,
    permits: Arc<Semaphore>,
}

impl Limited {
    pub(crate) fn new(inner: Arc<dyn ChatClient>, endpoint: &str, permits: usize) -> Self {
        Self {
            inner,
            permits: semaphore(endpoint, permits),
        }
    }
}

#[async_trait]
impl ChatClient for Limited {
    async fn chat(
        &self,
        request: ChatRequest<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
        let asked = Instant::now();
        // The semaphore is never closed; without a permit the request goes ahead rather
        // than fail the run.
        let _permit = self.permits.acquire().await.ok();
        let queued = asked.elapsed();
        let mut answer = self.inner.chat(request, observer).await?;
        // Only a wait worth telling about: the permit of an idle endpoint takes microseconds.
        if queued.as_millis() >= 1 {
            answer.queued_ms = Some(u64::try_from(queued.as_millis()).unwrap_or(u64::MAX));
        }
        Ok(answer)
    }

    fn unavailable(&self) -> Option<String> {
        self.inner.unavailable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_engine::{NoopObserver, ToolDefinitions};
    use fabric_fakes::ScriptedChat;
    use std::time::Duration;

    #[tokio::test]
    async fn issue_14_requests_to_one_endpoint_queue_for_its_permits() {
        // A model that counts the requests it holds at once.
        let slow = ScriptedChat::by_turn(|_| Ok(ChatResponse::default()))
            .delayed(Duration::from_millis(30));
        let clients: Vec<Limited> = (0..8)
            .map(|_| Limited::new(slow.client(), "http://limit-test.invalid/v1/", 2))
            .collect();
        let tools = ToolDefinitions::none();
        let request = ChatRequest {
            model: "m",
            messages: &[],
            tools: &tools,
            temperature: None,
            top_p: None,
            max_tokens: None,
            stream: false,
            vision: false,
        };
        let answers =
            futures_util::future::join_all(clients.iter().map(|c| c.chat(request, &NoopObserver)))
                .await;
        assert_eq!(slow.most_at_once(), 2, "two at a time");
        let queued = answers
            .iter()
            .filter(|a| a.as_ref().is_ok_and(|a| a.queued_ms.is_some()))
            .count();
        assert!(queued >= 6, "the others waited, and said so: {queued}");
    }
}
