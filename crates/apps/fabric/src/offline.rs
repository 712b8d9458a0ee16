//! Runs without a model server (issue #12): `fabric replay` answers each model call with the
//! answer a recorded run got, `fabric test` with the turns a scenario file scripts. Everything
//! else is real: today's specialists, tools, validation, sandbox and runlog.
//!
//! Each member of the run gets its own queue of answers. A run started offline does not start
//! child runs (sub-agents, critics): their answers are not in the queue, so the request is
//! refused and the tool reports it, which shows as a divergence.

use async_trait::async_trait;
use fabric_core::service::{PrepareContext, Preparer, Runnable, ServiceError, TaskRequest};
use fabric_core::{ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::app::AppPreparer;

/// Answers given in order, then an error saying the script ran out.
pub(crate) struct QueueChat {
    answers: Mutex<VecDeque<ChatResponse>>,
    /// What holds the answers, for the error: "the recording", "the scenario".
    source: &'static str,
}

impl QueueChat {
    pub(crate) fn new(answers: Vec<ChatResponse>, source: &'static str) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into()),
            source,
        })
    }

    /// Answers not asked for.
    pub(crate) fn left(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<ChatResponse>> {
        self.answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl ChatClient for QueueChat {
    async fn chat(
        &self,
        _request: ChatRequest<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
        match self.lock().pop_front() {
            Some(answer) => {
                if let Some(text) = &answer.content {
                    observer.on_text_delta(text);
                }
                Ok(answer)
            }
            None => Err(ChatError::Decode {
                url: "offline".to_owned(),
                detail: format!(
                    "{} has no more model answers: the run asked for more than it holds",
                    self.source
                ),
            }),
        }
    }
}

/// The cloud fallback of an offline run: each request goes to the queue of the member whose
/// system prompt it carries.
struct ByMember(Vec<(String, Arc<QueueChat>)>);

#[async_trait]
impl ChatClient for ByMember {
    async fn chat(
        &self,
        request: ChatRequest<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
        let system = request
            .messages
            .first()
            .and_then(|m| m.content.as_deref())
            .unwrap_or_default();
        let queue = self
            .0
            .iter()
            .find(|(prompt, _)| system.starts_with(prompt.as_str()))
            .or_else(|| self.0.first())
            .map(|(_, q)| Arc::clone(q));
        match queue {
            Some(queue) => queue.chat(request, observer).await,
            None => {
                QueueChat::new(Vec::new(), "the recording")
                    .chat(request, observer)
                    .await
            }
        }
    }
}

/// The preparer of an offline run: the fabric's own, with each member's client replaced by
/// its queue (and the cloud fallback by the queue of the member that asks). Critics are off:
/// their reviews are runs of their own. Daily budgets are off too: no model is called.
pub(crate) struct OfflinePreparer {
    pub(crate) app: AppPreparer,
    /// Per member, its answers; taken by the first request (the run itself).
    pub(crate) members: Mutex<Option<Vec<Arc<QueueChat>>>>,
    /// Only these tools, when set (`fabric replay --specialist-from recorded`), per member.
    pub(crate) tools: Option<Vec<Vec<String>>>,
    /// Per member, the context window the recording had (`fabric replay`): the model's
    /// server is not asked for it.
    pub(crate) windows: Option<Vec<Option<u32>>>,
}

#[async_trait]
impl Preparer for OfflinePreparer {
    fn check(&self, request: &TaskRequest) -> Result<(), ServiceError> {
        self.app.check(request)
    }

    async fn prepare(
        &self,
        request: TaskRequest,
        context: &PrepareContext,
    ) -> Result<Box<dyn Runnable>, ServiceError> {
        let queues = self
            .members
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .ok_or_else(|| {
                ServiceError::Invalid(
                    "an offline run (fabric replay, fabric test) does not start child runs: sub-agents and critics are not replayed".to_owned(),
                )
            })?;
        let app = &self.app;
        let mut task = crate::app::prepare(app, request, context).await?;
        for (i, member) in task.members.iter_mut().enumerate() {
            let queue: Arc<dyn ChatClient> = match queues.get(i) {
                Some(q) => Arc::clone(q) as Arc<dyn ChatClient>,
                None => QueueChat::new(Vec::new(), "the recording"),
            };
            member.chat = queue;
            member.critic = None;
            // A summary would be a model call the answers do not hold.
            member.model.summarize_compaction = false;
            if let Some(window) = self.windows.as_ref().and_then(|w| w.get(i)) {
                member.model.context_window = *window;
            }
            if let Some(only) = self.tools.as_ref().and_then(|t| t.get(i)) {
                member.tools.retain(|t| only.contains(&t.spec().name));
            }
        }
        // A fallback's answers are in the queue of the member that took it, in the order
        // they came; the member is told apart by its system prompt.
        if let Some(fallback) = &mut task.fallback {
            let routes = task
                .members
                .iter()
                .zip(&queues)
                .map(|(m, q)| {
                    (
                        m.specialist.system_prompt.trim_end().to_owned(),
                        Arc::clone(q),
                    )
                })
                .collect();
            fallback.chat = Arc::new(ByMember(routes));
        }
        Ok(Box::new(task))
    }
}
