//! The scripted model.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use fabric_core::{ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse};
use fabric_domain::{Message, Role, ToolCall};
use serde_json::Value;

use super::lock;

/// One answer of the model.
pub type Answer = Result<ChatResponse, ChatError>;

type ByTurn = Box<dyn Fn(usize) -> Answer + Send + Sync>;
type Before = Box<dyn Fn(usize) + Send + Sync>;
type Intercept = Box<dyn Fn(&ChatRequest<'_>) -> Option<Answer> + Send + Sync>;

/// A model that answers from a script and remembers every request; a clone shares the
/// script (a run owns its client, the test keeps looking at it). Configure it before
/// cloning it.
#[derive(Clone)]
pub struct ScriptedChat(Arc<Script>);

/// What a [`ScriptedChat`] and its clones share.
struct Script {
    answers: Answers,
    seen: Mutex<Vec<Vec<Message>>>,
    offered: Mutex<Vec<Vec<String>>>,
    caps: Mutex<Vec<Option<u32>>>,
    calls: AtomicUsize,
    in_flight: AtomicUsize,
    most: AtomicUsize,
    record: bool,
    delay: Duration,
    before: Option<Before>,
    intercept: Option<Intercept>,
}

enum Answers {
    /// The next answer of the list; an error once it is exhausted.
    InOrder(Mutex<VecDeque<Answer>>),
    /// The answer for the conversation's turn (how many assistant messages it has), so a
    /// resumed run gets the same answers.
    ByTurn(ByTurn),
}

impl ScriptedChat {
    /// Answers `answers` in order, then fails with "script exhausted".
    pub fn new(answers: Vec<Answer>) -> Self {
        Self::with(Answers::InOrder(Mutex::new(answers.into())))
    }

    /// Answers by the conversation's turn: `answer(n)` for a conversation with `n` assistant
    /// messages.
    pub fn by_turn(answer: impl Fn(usize) -> Answer + Send + Sync + 'static) -> Self {
        Self::with(Answers::ByTurn(Box::new(answer)))
    }

    fn with(answers: Answers) -> Self {
        Self(Arc::new(Script {
            answers,
            seen: Mutex::default(),
            offered: Mutex::default(),
            caps: Mutex::default(),
            calls: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            record: true,
            delay: Duration::ZERO,
            before: None,
            intercept: None,
        }))
    }

    fn configure(mut self, set: impl FnOnce(&mut Script)) -> Self {
        let script = Arc::get_mut(&mut self.0).expect("configure a ScriptedChat before cloning it");
        set(script);
        self
    }

    /// Waits `delay` before each answer.
    pub fn delayed(self, delay: Duration) -> Self {
        self.configure(|s| s.delay = delay)
    }

    /// Calls `hook(n)` before the `n`th answer (from 1), so a test can change the world
    /// between steps.
    pub fn before_each(self, hook: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.configure(|s| s.before = Some(Box::new(hook)))
    }

    /// Lets `answer` answer a request first; the script answers when it returns `None`.
    /// Requests it answers are not recorded.
    pub fn answering_first(
        self,
        answer: impl Fn(&ChatRequest<'_>) -> Option<Answer> + Send + Sync + 'static,
    ) -> Self {
        self.configure(|s| s.intercept = Some(Box::new(answer)))
    }

    /// Keeps no copy of the requests (benchmarks), only their count.
    pub fn unrecorded(self) -> Self {
        self.configure(|s| s.record = false)
    }

    /// A client sharing this script, for a run to own.
    pub fn client(&self) -> Arc<dyn ChatClient> {
        Arc::new(self.clone())
    }

    /// The messages of every request so far.
    pub fn seen(&self) -> MutexGuard<'_, Vec<Vec<Message>>> {
        lock(&self.0.seen)
    }

    /// The names of the tools offered in every request so far.
    pub fn offered(&self) -> Vec<Vec<String>> {
        lock(&self.0.offered).clone()
    }

    /// The `max_tokens` of every request so far.
    pub fn caps(&self) -> Vec<Option<u32>> {
        lock(&self.0.caps).clone()
    }

    /// How many requests it was sent (also unrecorded, also answered first).
    pub fn calls(&self) -> usize {
        self.0.calls.load(Ordering::Relaxed)
    }

    /// The most requests it held at once (waiting out its delay).
    pub fn most_at_once(&self) -> usize {
        self.0.most.load(Ordering::SeqCst)
    }

    /// The turn each request asked for (its assistant messages).
    pub fn turns_asked(&self) -> Vec<usize> {
        self.seen().iter().map(|m| turn_of(m)).collect()
    }

    /// The tool messages of the last request.
    pub fn last_tool_messages(&self) -> Vec<String> {
        let seen = self.seen();
        seen.last()
            .unwrap()
            .iter()
            .filter(|m| m.role == Role::Tool)
            .map(|m| m.content.clone().map(String::from).unwrap_or_default())
            .collect()
    }

    fn record(&self, request: &ChatRequest<'_>) -> usize {
        if !self.0.record {
            return self.0.calls.fetch_add(1, Ordering::Relaxed) + 1;
        }
        self.0.calls.fetch_add(1, Ordering::Relaxed);
        lock(&self.0.offered).push(tool_names(request));
        lock(&self.0.caps).push(request.max_tokens);
        let mut seen = lock(&self.0.seen);
        seen.push(request.messages.to_vec());
        seen.len()
    }

    fn answer(&self, messages: &[Message]) -> Answer {
        match &self.0.answers {
            Answers::InOrder(answers) => lock(answers).pop_front().unwrap_or_else(|| {
                Err(ChatError::Decode {
                    url: "fake".into(),
                    detail: "script exhausted".into(),
                })
            }),
            Answers::ByTurn(answer) => answer(turn_of(messages)),
        }
    }
}

#[async_trait]
impl ChatClient for ScriptedChat {
    async fn chat(
        &self,
        request: ChatRequest<'_>,
        _observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
        if let Some(answer) = self.0.intercept.as_ref().and_then(|i| i(&request)) {
            self.0.calls.fetch_add(1, Ordering::Relaxed);
            return answer;
        }
        let n = self.record(&request);
        if let Some(before) = &self.0.before {
            before(n);
        }
        let now = self.0.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.0.most.fetch_max(now, Ordering::SeqCst);
        if !self.0.delay.is_zero() {
            tokio::time::sleep(self.0.delay).await;
        }
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.answer(request.messages)
    }
}

/// The names of the tools a request offers.
fn tool_names(request: &ChatRequest<'_>) -> Vec<String> {
    request
        .tools
        .defs()
        .iter()
        .map(|t| t.name.clone())
        .collect()
}

/// How many assistant messages a conversation has: the turn it asks for.
fn turn_of(messages: &[Message]) -> usize {
    messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .count()
}

/// An answer that calls `name` with `args`, as call `c-{name}`.
pub fn call(name: &str, args: Value) -> Answer {
    call_raw(name, &args.to_string())
}

/// An answer that calls `name` with `arguments` as the model wrote them (which may not be
/// JSON), as call `c-{name}`.
pub fn call_raw(name: &str, arguments: &str) -> Answer {
    Ok(ChatResponse {
        tool_calls: vec![ToolCall {
            id: format!("c-{name}"),
            name: name.into(),
            arguments: arguments.into(),
        }],
        ..ChatResponse::default()
    })
}
