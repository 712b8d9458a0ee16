//! Runs without a model server (issue #12): `fabric replay` answers each model call with the
//! answer a recorded run got, `fabric test` with the turns a scenario file scripts. Everything
//! else is real: today's specialists, tools, validation, sandbox and runlog.
//!
//! Each member of the run gets its own queue of answers. A run started offline does not start
//! child runs (sub-agents, critics): their answers are not in the queue, so the request is
//! refused and the tool reports it, which shows as a divergence.

use async_trait::async_trait;
use fabric_core::ports::{ChatFactory, SetupError};
use fabric_core::ports::{Hooks, Person, Reply};
use fabric_core::service::prepare::Preparation;
use fabric_core::service::{PrepareContext, Preparer, Runnable, ServiceError, TaskRequest};
use fabric_core::{ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse};
use fabric_domain::hooks::{HookEvent, HookInput};
use fabric_domain::runlog::{HookRun, InputAnswered, InputRequired, UserMessage};
use fabric_domain::{EventPayload, RunEvent};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

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

/// The clients of an offline run's preparation: every key's is an empty queue, replaced by
/// the member's own answers once prepared. No client is built, so nothing reads a key's API
/// variable or warns it is unset.
pub(crate) struct OfflineChats;

impl ChatFactory for OfflineChats {
    fn chat(&self, _key: &str) -> Result<Arc<dyn ChatClient>, SetupError> {
        Ok(QueueChat::new(Vec::new(), "the recording"))
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
    /// The fabric's own preparation, over [`OfflineChats`] and no daily budgets.
    pub(crate) app: Preparation,
    /// Per member, its answers; taken by the first request (the run itself).
    pub(crate) members: Mutex<Option<Vec<Arc<QueueChat>>>>,
    /// Only these tools, when set (`fabric replay --specialist-from recorded`), per member.
    pub(crate) tools: Option<Vec<Vec<String>>>,
    /// Per member, the context window the recording had (`fabric replay`): the model's
    /// server is not asked for it.
    pub(crate) windows: Option<Vec<Option<u32>>>,
    /// Per member, the calls the recording shows interrupted (its process stopped while they
    /// ran, and the continued run reported them so): `(tool, arguments, message)`, answered
    /// as recorded instead of run again (`fabric replay`).
    pub(crate) interrupted: Vec<Vec<(String, serde_json::Value, String)>>,
    /// Per member, its critic's recorded verdicts in order (`critic_review`: the critic's
    /// run, and its `{approved, findings}`), given again instead of running the critic.
    pub(crate) verdicts: Vec<Vec<RecordedVerdict>>,
    /// The hooks' recorded runs, given again instead of running the configured hooks
    /// (`fabric replay`, issue #43); `None`: the configured hooks run (`fabric test`).
    pub(crate) hooks: Option<Arc<dyn Hooks>>,
}

/// One review as a recording holds it.
#[derive(Debug, Clone)]
pub(crate) struct RecordedVerdict {
    /// The critic's run.
    pub(crate) run_id: Option<fabric_domain::RunId>,
    /// `{approved, findings}`.
    pub(crate) payload: serde_json::Value,
    /// How the critic's run ended: `completed`, or how it failed to give a verdict.
    pub(crate) status: fabric_domain::RunStatus,
    pub(crate) reason: Option<String>,
}

/// A critic that answers with the verdicts a recording holds, in order (issue #26: a
/// replay of a run whose critic rejected the work saw divergences, the critic being off;
/// issue #27: one whose critic's run failed, too).
struct RecordedVerdicts {
    verdicts: Mutex<VecDeque<RecordedVerdict>>,
}

#[async_trait]
impl fabric_core::delegate::ChildRunner for RecordedVerdicts {
    async fn run_child(
        &self,
        specialist: &str,
        _task: String,
        parent: &fabric_core::ToolContext,
    ) -> Result<fabric_core::execute::RunOutcome, fabric_core::service::ServiceError> {
        let recorded = self
            .verdicts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front()
            .ok_or_else(|| {
                fabric_core::service::ServiceError::from(fabric_core::service::Fault::Setup(
                    fabric_core::ports::SetupError::Internal(format!(
                        "the recording holds no more reviews by `{specialist}`"
                    )),
                ))
            })?;
        Ok(fabric_core::execute::RunOutcome {
            run_id: recorded.run_id.unwrap_or_else(fabric_core::new_run_id),
            status: recorded.status,
            payload: recorded.payload,
            reason: recorded.reason,
            workspace: parent.workspace.clone(),
            specialist_ids: vec![specialist.to_owned()],
            model_key: String::new(),
            model: String::new(),
            steps: 0,
            usage: fabric_domain::Usage::default(),
            routing: None,
            model_reason: None,
            changes: None,
        })
    }
}

/// A tool whose calls the recording shows interrupted: a call with the same arguments gets
/// the recorded interruption, once, instead of running again (a replay re-executed commands
/// whose process had been killed, and saw a divergence where the run had none; issue #26).
struct AsRecorded {
    inner: Arc<dyn fabric_core::Tool>,
    pending: Mutex<Vec<(serde_json::Value, String)>>,
}

#[async_trait]
impl fabric_core::Tool for AsRecorded {
    fn spec(&self) -> &fabric_domain::ToolSpec {
        self.inner.spec()
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &fabric_core::ToolContext,
    ) -> Result<serde_json::Value, fabric_core::ToolError> {
        let output = self.call_for_model(args, ctx).await;
        output.map(|output| output.result)
    }

    /// The recorded interruption, or the wrapped tool's answer with its images (an MCP
    /// tool's).
    async fn call_for_model(
        &self,
        args: serde_json::Value,
        ctx: &fabric_core::ToolContext,
    ) -> Result<fabric_core::ToolOutput, fabric_core::ToolError> {
        match self.interrupted(&args) {
            Some(message) => Err(fabric_core::ToolError::Interrupted(message)),
            None => self.inner.call_for_model(args, ctx).await,
        }
    }
}

impl AsRecorded {
    /// The recorded interruption of a call with these arguments, taken once.
    fn interrupted(&self, args: &serde_json::Value) -> Option<String> {
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pending
            .iter()
            .position(|(a, _)| a == args)
            .map(|at| pending.remove(at).1)
    }
}

/// `tools`, each one the recording shows an interrupted call of wrapped in [`AsRecorded`].
fn as_recorded(
    tools: &mut [Arc<dyn fabric_core::Tool>],
    interrupted: &[(String, serde_json::Value, String)],
) {
    for tool in tools.iter_mut() {
        let name = tool.spec().name.clone();
        let pending: Vec<(serde_json::Value, String)> = interrupted
            .iter()
            .filter(|(t, _, _)| *t == name)
            .map(|(_, a, m)| (a.clone(), m.clone()))
            .collect();
        if !pending.is_empty() {
            *tool = Arc::new(AsRecorded {
                inner: Arc::clone(tool),
                pending: Mutex::new(pending),
            });
        }
    }
}

#[async_trait]
impl Preparer for OfflinePreparer {
    fn check(&self, request: &TaskRequest) -> Result<(), ServiceError> {
        self.app.check_request(request)
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
                ServiceError::from(fabric_core::service::InvalidRequest::Setup(
                    fabric_core::ports::SetupError::Refused(
                        "an offline run (fabric replay, fabric test) does not start child runs: sub-agents and critics are not replayed".to_owned(),
                    ),
                ))
            })?;
        let mut task = self.app.prepare_task(request, context).await?;
        for (i, member) in task.members.iter_mut().enumerate() {
            let queue: Arc<dyn ChatClient> = match queues.get(i) {
                Some(q) => Arc::clone(q) as Arc<dyn ChatClient>,
                None => QueueChat::new(Vec::new(), "the recording"),
            };
            member.chat = queue;
            // A critic's reviews are runs of their own: replayed, its recorded verdicts
            // answer in order; otherwise (a scenario) there is no critic.
            let verdicts = self.verdicts.get(i).filter(|v| !v.is_empty());
            member.critic = match (member.critic.take(), verdicts) {
                (Some(mut critic), Some(verdicts)) => {
                    critic.runner = Arc::new(RecordedVerdicts {
                        verdicts: Mutex::new(verdicts.iter().cloned().collect()),
                    });
                    Some(critic)
                }
                _ => None,
            };
            // A summary would be a model call the answers do not hold.
            member.model.summarize_compaction = false;
            if let Some(window) = self.windows.as_ref().and_then(|w| w.get(i)) {
                member.model.context_window = *window;
            }
            if let Some(only) = self.tools.as_ref().and_then(|t| t.get(i)) {
                member.tools.retain(|t| only.contains(&t.spec().name));
            }
            if let Some(interrupted) = self.interrupted.get(i) {
                as_recorded(&mut member.tools, interrupted);
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
        if let Some(hooks) = &self.hooks {
            task.hooks = Some(Arc::clone(hooks));
        }
        Ok(Box::new(task))
    }
}

/// The person of a replayed run (issue #42): the answers the recording holds, by call, and
/// what was said to a lone specialist before each step, in step order. A question the
/// recording never answered is told no one can answer, as a run without a person is.
pub(crate) struct RecordedPerson {
    answers: HashMap<String, InputAnswered>,
    said: Mutex<VecDeque<Vec<UserMessage>>>,
}

impl RecordedPerson {
    pub(crate) fn of(events: &[RunEvent]) -> Self {
        let mut answers = HashMap::new();
        let mut said: BTreeMap<u32, Vec<UserMessage>> = BTreeMap::new();
        let lone = events.iter().all(|e| e.member.is_none());
        for event in events {
            match &event.payload {
                EventPayload::InputAnswered(answer) => {
                    answers.insert(answer.call_id.clone(), answer.clone());
                }
                EventPayload::UserMessage(message) if lone => {
                    let step = event.step.unwrap_or_default();
                    said.entry(step).or_default().push(message.clone());
                }
                _ => {}
            }
        }
        // One entry per step up to the last that heard something: the loop asks once a step.
        let last = said.keys().next_back().copied().map_or(0, |s| s + 1);
        let by_step = (0..last)
            .map(|s| said.remove(&s).unwrap_or_default())
            .collect();
        Self {
            answers,
            said: Mutex::new(by_step),
        }
    }
}

#[async_trait]
impl Person for RecordedPerson {
    async fn ask(&self, request: &InputRequired) -> Reply {
        match self.answers.get(&request.call_id) {
            Some(answer) => Reply::Answered(answer.clone()),
            None => Reply::Unavailable("the recording holds no answer to it".to_owned()),
        }
    }

    async fn said(&self) -> Vec<UserMessage> {
        // A poisoned lock is a panic elsewhere in this replay: nothing more is said.
        match self.said.lock() {
            Ok(mut said) => said.pop_front().unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }
}

/// Per event and call, the recorded fires in order, each its hooks' runs.
type RecordedFires = HashMap<(String, Option<String>), VecDeque<Vec<HookRun>>>;

/// The hooks of a replayed run (issue #43): each fire is answered with the runs the
/// recording holds for it (its event and call, in order), and no command runs. A fire the
/// recording has no runs for gets none: as if no hook applied.
pub(crate) struct RecordedHooks {
    /// Per event and call, the recorded fires in order, each its hooks' runs.
    fires: Mutex<RecordedFires>,
}

impl RecordedHooks {
    pub(crate) fn of(events: &[RunEvent]) -> Self {
        let mut fires = RecordedFires::new();
        // The runs of one fire are recorded together: the same event, call and step.
        let mut last: Option<(String, Option<String>, Option<u32>)> = None;
        for event in events {
            let EventPayload::HookRun(run) = &event.payload else {
                last = None;
                continue;
            };
            let at = (run.event.clone(), run.call_id.clone(), event.step);
            let queue = fires.entry((at.0.clone(), at.1.clone())).or_default();
            match (last.as_ref() == Some(&at), queue.back_mut()) {
                (true, Some(fire)) => fire.push(run.clone()),
                _ => queue.push_back(vec![run.clone()]),
            }
            last = Some(at);
        }
        Self {
            fires: Mutex::new(fires),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecordedFires> {
        self.fires
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl Hooks for RecordedHooks {
    fn wants(&self, event: HookEvent, _target: Option<&str>) -> bool {
        self.lock()
            .iter()
            .any(|((e, _), fires)| e == event.as_str() && !fires.is_empty())
    }

    async fn fire(&self, input: &HookInput) -> Vec<HookRun> {
        let key = (
            input.hook_event_name.as_str().to_owned(),
            input.tool_use_id.clone(),
        );
        self.lock()
            .get_mut(&key)
            .and_then(VecDeque::pop_front)
            .unwrap_or_default()
    }
}
