//! Working with a person (issue #42, ADR-103): the run's [`Person`] over the store's inbox,
//! answering a run that waits, and saying something to a run while it works.
//!
//! A run that asks with no one at hand to answer at once records its question and lets go
//! of its process (status `input_required`); the answer is left in the store's inbox and
//! the run is continued from its runlog like any stopped run, on whichever process takes it,
//! its in-flight call settled with the answer. Messages said to a running run wait in the
//! same inbox and reach the model at its next step boundary.

use async_trait::async_trait;
use fabric_domain::runlog::{Decision, InputAnswered, InputKind, InputRequired, UserMessage};
use fabric_domain::{EventPayload, RunId, RunStatus};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{InvalidRequest, RunHandle, RunService, ServiceError, Submission};
use crate::ports::{InboxItem, Person, Reply, RunStore};

/// Most characters of an answer or of a message said to a run.
pub const MAX_INPUT_CHARS: usize = 16_000;

/// What a run does when its model asks (or its policy wants an approval) and no answer is
/// in its inbox: the channel it was started by decides.
#[derive(Clone)]
pub enum WhenAsked {
    /// It waits in the store, holding no process (`fabric serve`, A2A, `--on-question
    /// wait`); after `timeout` unanswered it ends `unanswered`.
    Wait {
        /// How long an answer may take; `None`: as long as it takes.
        timeout: Option<Duration>,
    },
    /// Answered with this text at once (`--on-question answer=TEXT`); an approval is
    /// approved.
    Answer(String),
    /// The run ends `unanswered` (`--on-question fail`).
    Fail,
    /// The model is told no one can answer, and why (`--json` without a terminal).
    Refuse(String),
    /// Asked now of this channel (a terminal, an MCP client's elicitation).
    Ask(Arc<dyn Person>),
}

/// The run's person: answers from the inbox first, then the channel it was started by.
pub(crate) struct InboxPerson {
    store: Arc<dyn RunStore>,
    run: RunId,
    when: WhenAsked,
    /// Answers taken from the inbox before their question was asked again.
    answers: Mutex<Vec<InputAnswered>>,
}

impl InboxPerson {
    pub(crate) fn new(store: Arc<dyn RunStore>, run: RunId, when: WhenAsked) -> Self {
        Self {
            store,
            run,
            when,
            answers: Mutex::new(Vec::new()),
        }
    }

    /// Takes the inbox: answers are kept for [`Person::ask`], messages returned.
    async fn take(&self) -> Vec<UserMessage> {
        let items = match self.store.take_inbox(&self.run).await {
            Ok(items) => items,
            Err(e) => {
                tracing::warn!(run_id = %self.run, error = %e, "cannot read the run's inbox");
                return Vec::new();
            }
        };
        let mut said = Vec::new();
        for item in items {
            match item {
                InboxItem::Message(message) => said.push(message),
                InboxItem::Answer(answer) => self.kept().push(answer),
            }
        }
        said
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Vec<InputAnswered>> {
        // A panic while holding it loses at most an answer, which can be given again.
        self.answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The answer to `call_id`, if one came (an answer to another call is stale: dropped).
    fn answer_for(&self, call_id: &str) -> Option<InputAnswered> {
        let mut kept = self.kept();
        let found = kept.iter().rposition(|a| a.call_id == call_id);
        let answer = found.map(|i| kept.swap_remove(i));
        kept.clear();
        answer
    }
}

#[async_trait]
impl Person for InboxPerson {
    async fn ask(&self, request: &InputRequired) -> Reply {
        let said = self.take().await;
        if !said.is_empty() {
            // Said while the run was not at a step boundary: heard at the next one.
            if let Err(e) = self.put_back(said).await {
                tracing::warn!(run_id = %self.run, error = %e, "cannot keep a message for the run");
            }
        }
        if let Some(answer) = self.answer_for(&request.call_id) {
            return Reply::Answered(answer);
        }
        match &self.when {
            WhenAsked::Wait { timeout } => Reply::Wait {
                expires_at: timeout.map(|t| crate::unix_now() + t.as_secs_f64()),
            },
            WhenAsked::Answer(text) => Reply::Answered(InputAnswered {
                call_id: request.call_id.clone(),
                answer: text.clone(),
                decision: (request.input == InputKind::Approval).then_some(Decision::Approve),
                by: "flag".to_owned(),
            }),
            WhenAsked::Fail => Reply::Fail(format!(
                "the run asked \"{}\" and was started with `--on-question fail`",
                request.question
            )),
            WhenAsked::Refuse(why) => Reply::Unavailable(why.clone()),
            WhenAsked::Ask(channel) => channel.ask(request).await,
        }
    }

    async fn said(&self) -> Vec<UserMessage> {
        self.take().await
    }
}

impl InboxPerson {
    async fn put_back(&self, said: Vec<UserMessage>) -> Result<(), crate::StoreError> {
        for message in said {
            self.store
                .post_to_inbox(&self.run, &InboxItem::Message(message))
                .await?;
        }
        Ok(())
    }
}

/// A person's answer to a waiting run, as a front end received it.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The text: a question's answer, or an approval's reason (or its decision, spelled
    /// `approve`, `approve_for_run`, `deny`, optionally followed by a reason).
    pub text: String,
    /// An approval's decision, when the front end has it apart from the text.
    pub decision: Option<Decision>,
    /// Who answers: `terminal`, `http`, `a2a`, `mcp`, `cli`.
    pub by: String,
}

/// Checks the length of an answer or a message.
fn checked(what: &'static str, text: &str) -> Result<(), ServiceError> {
    let chars = text.chars().count();
    // Blank as the API's document says it (`formats::NOT_BLANK_PATTERN`): white space, or a
    // byte-order mark, only.
    let blank = text.chars().all(|c| c.is_whitespace() || c == '\u{feff}');
    if blank || chars > MAX_INPUT_CHARS {
        return Err(InvalidRequest::BadLength {
            what,
            chars,
            max: MAX_INPUT_CHARS,
        }
        .into());
    }
    Ok(())
}

/// The decision and the reason in an approval's answer.
fn decided(answer: &Answer) -> Option<(Decision, String)> {
    if let Some(decision) = answer.decision {
        return Some((decision, answer.text.trim().to_owned()));
    }
    Decision::leading(&answer.text).map(|(d, reason)| (d, reason.to_owned()))
}

impl RunService {
    /// The question or approval run `id` waits for, if its status is `input_required`.
    pub async fn waiting_for(&self, id: &RunId) -> Result<InputRequired, ServiceError> {
        self.waiting(id).await.map(|(asked, _)| asked)
    }

    /// [`Self::waiting_for`], with the `seq` of its `input_required` line.
    async fn waiting(&self, id: &RunId) -> Result<(InputRequired, u64), ServiceError> {
        if self.live(id).is_some() {
            return Err(InvalidRequest::NotWaiting {
                id: id.clone(),
                status: RunStatus::Running,
            }
            .into());
        }
        let summary = match self.inner.store.get_run(id).await {
            Ok(summary) => summary,
            Err(crate::StoreError::NotFound(_)) => {
                return Err(InvalidRequest::NoSuchRun { id: id.clone() }.into());
            }
            Err(e) => return Err(e.into()),
        };
        if summary.status != RunStatus::InputRequired {
            return Err(InvalidRequest::NotWaiting {
                id: id.clone(),
                status: summary.status,
            }
            .into());
        }
        let events = self.inner.store.read_events(id).await?;
        events
            .into_iter()
            .rev()
            .find_map(|event| match event.payload {
                EventPayload::InputRequired(asked) => Some((asked, event.seq)),
                _ => None,
            })
            .ok_or_else(|| {
                InvalidRequest::NotWaiting {
                    id: id.clone(),
                    status: summary.status,
                }
                .into()
            })
    }

    /// Answers run `id`, which waits for a person: the answer goes to its inbox and the run
    /// is continued here (`when` for any later question), its handle returned. A wait that
    /// has expired ends the run `unanswered` instead.
    pub async fn answer(
        &self,
        id: &RunId,
        answer: Answer,
        when: WhenAsked,
        observer: Option<Arc<dyn crate::RunObserver>>,
    ) -> Result<RunHandle, ServiceError> {
        let (asked, asked_at) = self.waiting(id).await?;
        let decision = match asked.input {
            InputKind::Question => {
                checked("answer", &answer.text)?;
                None
            }
            InputKind::Approval => {
                if answer.text.chars().count() > MAX_INPUT_CHARS {
                    checked("answer", &answer.text)?;
                }
                Some(decided(&answer).ok_or_else(|| InvalidRequest::NoDecision {
                    id: id.clone(),
                    tool: asked.tool.clone().unwrap_or_default(),
                })?)
            }
        };
        if asked.expires_at.is_some_and(|at| at < crate::unix_now()) {
            self.expire(id).await?;
            return Err(InvalidRequest::NotWaiting {
                id: id.clone(),
                status: RunStatus::Unanswered,
            }
            .into());
        }
        let (decision, text) = match decision {
            Some((decision, reason)) => (Some(decision), reason),
            None => (None, answer.text),
        };
        let item = InboxItem::Answer(InputAnswered {
            call_id: asked.call_id,
            answer: text,
            decision,
            by: answer.by,
        });
        self.inner.store.post_to_inbox(id, &item).await?;
        // With a queue, a worker continues it (it waits in the queue as done until then).
        if let Some(queue) = self.inner.queue.clone() {
            if !queue.requeue(id).await? {
                return Err(InvalidRequest::NotWaiting {
                    id: id.clone(),
                    status: RunStatus::Running,
                }
                .into());
            }
            return Ok(self.follow_queued(id, queue, Some(asked_at)));
        }
        let mut submission = Submission::resume(id.clone()).attended(when);
        submission.observer = observer;
        self.submit(submission)
    }

    /// Says `text` to run `id` (steering): the model gets it at its next step boundary, on
    /// whichever process runs it. A run that waits for an answer hears it once continued.
    pub async fn steer(&self, id: &RunId, text: &str, by: &str) -> Result<(), ServiceError> {
        checked("message", text)?;
        if self.live(id).is_none() {
            let status = match self.inner.store.get_run(id).await {
                Ok(summary) => summary.status,
                Err(crate::StoreError::NotFound(_)) => {
                    return Err(InvalidRequest::NoSuchRun { id: id.clone() }.into());
                }
                Err(e) => return Err(e.into()),
            };
            if status.is_terminal() {
                return Err(InvalidRequest::NotRunning {
                    id: id.clone(),
                    status,
                }
                .into());
            }
        }
        let item = InboxItem::Message(UserMessage {
            text: text.to_owned(),
            by: by.to_owned(),
        });
        self.inner.store.post_to_inbox(id, &item).await?;
        Ok(())
    }

    /// Ends run `id`, whose wait for an answer expired, `unanswered`.
    pub async fn expire(&self, id: &RunId) -> Result<(), ServiceError> {
        let run = self.inner.store.reopen_run(id).await?;
        let events = self.inner.store.read_events(id).await?;
        let history = crate::history::RunHistory::read(id.clone(), &events);
        let event = history
            .end_event(
                RunStatus::Unanswered,
                "no one answered the run's question or approval before its wait ended (`server.input_timeout_s`)",
            )
            .map_err(|e| ServiceError::Store(crate::StoreError::InvalidQuery(e.to_string())))?;
        run.log.append(&event).await?;
        self.inner.store.flush().await;
        Ok(())
    }

    /// Ends every run whose wait for an answer has expired; how many.
    pub async fn expire_waits(&self) -> usize {
        let query = crate::RunQuery {
            limit: 1_000,
            statuses: vec![RunStatus::InputRequired],
            ..crate::RunQuery::default()
        };
        let Ok(waiting) = self.inner.store.list_runs(&query).await else {
            return 0;
        };
        let now = crate::unix_now();
        let mut ended = 0;
        for run in waiting {
            match self.waiting_for(&run.id).await {
                Ok(asked) if asked.expires_at.is_some_and(|at| at < now) => {
                    match self.expire(&run.id).await {
                        Ok(()) => ended += 1,
                        Err(e) => {
                            tracing::warn!(run_id = %run.id, error = %e, "cannot end an expired wait")
                        }
                    }
                }
                _ => {}
            }
        }
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_42_an_approval_is_decided_by_its_first_word_or_apart() {
        let answer = |text: &str, decision| Answer {
            text: text.to_owned(),
            decision,
            by: "http".to_owned(),
        };
        assert_eq!(
            decided(&answer("deny: not on main", None)),
            Some((Decision::Deny, "not on main".to_owned()))
        );
        assert_eq!(
            decided(&answer("approve_for_run", None)),
            Some((Decision::ApproveForRun, String::new()))
        );
        assert_eq!(
            decided(&answer("fine", Some(Decision::Approve))),
            Some((Decision::Approve, "fine".to_owned()))
        );
        assert_eq!(decided(&answer("perhaps later", None)), None);
    }
}
