//! A remote A2A agent as a sub-agent tool (`agent__<name>`, issue #30): its card is fetched
//! and checked once, then each call sends the task (`SendMessage`, returning at once),
//! follows it (`GetTask`) until it ends, cancels it when the run is cancelled or its time is
//! up (`CancelTask`), and returns the agent's answer as a local sub-agent's is returned.
//! A remote failure is a tool error that names the agent, the state and what it said.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fabric_domain::{AGENT_TOOL_PREFIX, ToolAnnotations, ToolSpec};
use fabric_engine::delegate::DelegateInput;
use fabric_engine::typed::{Typed, TypedTool};
use fabric_engine::{ToolContext, ToolError};
use serde_json::{Value, json};

/// How often a running remote task is read again.
const POLL: Duration = Duration::from_millis(300);

/// A remote agent, as the config names it.
#[derive(Debug, Clone)]
pub struct RemoteAgentConfig {
    /// Its name: the tool is `agent__<name>`.
    pub name: String,
    /// The agent's base URL; its card is at `{url}/.well-known/agent-card.json`.
    pub url: String,
    /// The bearer token, read from the environment variable the config names.
    pub token: Option<String>,
    /// The most one call may take, in seconds (also bounded by the run's time budget).
    pub timeout_s: u64,
}

/// Why a remote agent cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RemoteAgentError {
    /// The card could not be fetched.
    #[error("agent `{name}`: cannot fetch its card at {url}: {detail}")]
    Unreachable {
        /// The agent.
        name: String,
        /// The card's address.
        url: String,
        /// What failed.
        detail: String,
    },
    /// The card is not an A2A v1 card with a JSON-RPC interface.
    #[error("agent `{name}`: its card at {url} is not usable: {detail}")]
    BadCard {
        /// The agent.
        name: String,
        /// The card's address.
        url: String,
        /// What is wrong with it.
        detail: String,
    },
}

/// What the card says that the tool needs.
#[derive(Debug, Clone)]
struct Card {
    description: String,
    endpoint: String,
}

/// Reads and checks the card of `config`'s agent.
pub async fn fetch_card(
    http: &reqwest::Client,
    config: &RemoteAgentConfig,
) -> Result<RemoteAgentTool, RemoteAgentError> {
    let url = format!(
        "{}/.well-known/agent-card.json",
        config.url.trim_end_matches('/')
    );
    let unreachable = |detail: String| RemoteAgentError::Unreachable {
        name: config.name.clone(),
        url: url.clone(),
        detail,
    };
    let response = http
        .get(&url)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    if !response.status().is_success() {
        return Err(unreachable(format!("HTTP {}", response.status())));
    }
    let card: Value = response
        .json()
        .await
        .map_err(|e| RemoteAgentError::BadCard {
            name: config.name.clone(),
            url: url.clone(),
            detail: format!("not JSON: {e}"),
        })?;
    let card = check_card(&card, |detail| RemoteAgentError::BadCard {
        name: config.name.clone(),
        url: url.clone(),
        detail: detail.to_owned(),
    })?;
    Ok(RemoteAgentTool {
        config: config.clone(),
        card,
        http: http.clone(),
    })
}

/// The card's description and its JSON-RPC endpoint, or what is missing (`bad(detail)`
/// builds the error).
fn check_card(
    card: &Value,
    bad: impl Fn(&str) -> RemoteAgentError,
) -> Result<Card, RemoteAgentError> {
    let name = card.get("name").and_then(Value::as_str).unwrap_or_default();
    if name.trim().is_empty() {
        return Err(bad("it has no `name`"));
    }
    let interfaces = card
        .get("supportedInterfaces")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("it has no `supportedInterfaces` (an A2A v1.0 card lists them)"))?;
    let endpoint = interfaces
        .iter()
        .find(|i| {
            i.get("protocolBinding").and_then(Value::as_str) == Some("JSONRPC")
                && i.get("protocolVersion")
                    .and_then(Value::as_str)
                    .is_none_or(|v| v == "1" || v.starts_with("1."))
        })
        .and_then(|i| i.get("url").and_then(Value::as_str))
        .ok_or_else(|| bad("it offers no JSON-RPC interface of protocol version 1.x, the one binding this fabric speaks"))?;
    let skills: Vec<&str> = card
        .get("skills")
        .and_then(Value::as_array)
        .map(|s| {
            s.iter()
                .filter_map(|s| s.get("id").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let mut description = card
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or(name)
        .trim_end_matches('.')
        .to_owned();
    if !skills.is_empty() {
        description.push_str(&format!("; skills: {}", skills.join(", ")));
    }
    Ok(Card {
        description,
        endpoint: endpoint.to_owned(),
    })
}

/// The tool `agent__<name>` for one remote agent.
#[derive(Debug, Clone)]
pub struct RemoteAgentTool {
    config: RemoteAgentConfig,
    card: Card,
    http: reqwest::Client,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl RemoteAgentTool {
    /// One JSON-RPC call: its `result`, or the error as the model should read it. Reads and
    /// cancels get 30 s; sending may take until the call's deadline, for an agent that
    /// answers only when it is done (it may ignore `returnImmediately`).
    async fn call(&self, method: &str, params: Value) -> Result<Value, ToolError> {
        self.call_within(method, params, Duration::from_secs(30))
            .await
    }

    async fn call_within(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, ToolError> {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mut request = self
            .http
            .post(&self.card.endpoint)
            .header("A2A-Version", "1.0")
            .timeout(timeout)
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        if let Some(token) = &self.config.token {
            request = request.bearer_auth(token);
        }
        let failed = |detail: String| {
            ToolError::Failed(format!(
                "the remote agent `{}` could not be reached ({method}): {detail}; try again later or do the task yourself",
                self.config.name
            ))
        };
        let response = request.send().await.map_err(|e| failed(e.to_string()))?;
        let status = response.status();
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            return Err(ToolError::Failed(format!(
                "the remote agent `{}` refused this fabric (HTTP {status}): its token is missing or wrong; the fabric's config names it in `agents.{}.token_env`, and the user must set that variable",
                self.config.name, self.config.name
            )));
        }
        let body: Value = response
            .json()
            .await
            .map_err(|e| failed(format!("HTTP {status}, and the answer is not JSON: {e}")))?;
        if let Some(error) = body.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            let code = error
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or_default();
            return Err(ToolError::Failed(format!(
                "the remote agent `{}` refused {method} (error {code}): {message}",
                self.config.name
            )));
        }
        body.get("result").cloned().ok_or_else(|| {
            failed(format!(
                "HTTP {status}, with neither `result` nor `error`: {body}"
            ))
        })
    }

    /// The error for an answer to `method` that is not what A2A v1.0 says: `what` it was,
    /// and the start of it.
    fn garbage(&self, method: &str, what: &str, answer: &Value) -> ToolError {
        let shown: String = answer.to_string().chars().take(200).collect();
        ToolError::Failed(format!(
            "the remote agent `{}` answered {method} with {what}, not an A2A v1.0 answer: {shown}; it may speak another protocol version; do the task yourself or ask the user to check `agents.{}.url`",
            self.config.name, self.config.name
        ))
    }

    /// Follows task `id` until it ends, the run is cancelled, or `deadline` passes (then it
    /// is cancelled remotely too).
    async fn follow(
        &self,
        id: &str,
        ctx: &ToolContext,
        deadline: Instant,
    ) -> Result<Value, ToolError> {
        loop {
            let task = self
                .call("GetTask", json!({"id": id, "historyLength": 0}))
                .await?;
            let state = state_of(&task).map_err(|what| self.garbage("GetTask", what, &task))?;
            if !matches!(state, "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING") {
                return Ok(task);
            }
            let stop = tokio::select! {
                () = ctx.cancel.cancelled() => Some("the run was cancelled"),
                () = tokio::time::sleep_until(deadline.into()) => Some("its time ran out"),
                () = tokio::time::sleep(POLL) => None,
            };
            if let Some(why) = stop {
                // Best effort: the remote agent should stop working for nobody.
                let _ = self.call("CancelTask", json!({"id": id})).await;
                return Err(ToolError::Failed(format!(
                    "the remote agent `{}` did not finish task `{id}`: {why}; it was asked to cancel it",
                    self.config.name
                )));
            }
        }
    }

    /// The ended task as the model reads it: an error unless it completed.
    fn answer(&self, task: &Value) -> Result<Value, ToolError> {
        let state = task
            .pointer("/status/state")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let said = texts(task.pointer("/status/message/parts"));
        let mut texts = Vec::new();
        let mut data = Vec::new();
        for artifact in task
            .get("artifacts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for part in artifact
                .get("parts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(t) = part.get("text").and_then(Value::as_str) {
                    texts.push(t.to_owned());
                } else if let Some(d) = part.get("data") {
                    data.push(d.clone());
                }
            }
        }
        let answer = json!({
            "agent": self.config.name,
            "task_id": task.get("id"),
            "state": state,
            "text": texts.join("\n\n"),
            "data": data,
            "message": said.join(" "),
        });
        if state == "TASK_STATE_COMPLETED" {
            Ok(answer)
        } else {
            Err(ToolError::Failed(answer.to_string()))
        }
    }
}

#[async_trait]
impl TypedTool for RemoteAgentTool {
    type Input = DelegateInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_input::<DelegateInput>(
            &format!("{AGENT_TOOL_PREFIX}{}", self.config.name),
            &format!(
                "Hand a task to the remote agent `{}` ({}), over A2A. It returns its final answer. Describe the task completely: it sees nothing of this conversation.",
                self.config.name, self.card.description
            ),
        )
        .example(json!({"task": "Summarise the release notes of version 2 in three bullet points"}))
        .annotate(ToolAnnotations {
            destructive: true,
            needs_network: true,
            ..ToolAnnotations::default()
        })
    }

    async fn run(&self, input: DelegateInput, ctx: &ToolContext) -> Result<Value, ToolError> {
        if input.task.trim().is_empty() {
            return Err(ToolError::InvalidArguments(
                "`task` is empty; describe what the remote agent should do".to_owned(),
            ));
        }
        let mut deadline = Instant::now() + Duration::from_secs(self.config.timeout_s);
        if let Some(tree) = ctx.lineage.budget.deadline() {
            deadline = deadline.min(tree);
        }
        let message = json!({
            "messageId": format!("{}-{}", ctx.run_id, NEXT_ID.fetch_add(1, Ordering::Relaxed)),
            "role": "ROLE_USER",
            "parts": [{"text": input.task}],
            "metadata": {"fabric_run_id": ctx.run_id.as_str()},
        });
        let within = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1));
        let sent = self
            .call_within(
                "SendMessage",
                json!({"message": message, "configuration": {"returnImmediately": true}}),
                within,
            )
            .await?;
        let Some(task) = sent.get("task") else {
            // An agent may answer with a message instead of a task: that is its answer.
            if sent.get("message").is_none() {
                return Err(self.garbage("SendMessage", "neither a task nor a message", &sent));
            }
            let text = texts(sent.pointer("/message/parts"));
            return Ok(
                json!({"agent": self.config.name, "state": "message", "text": text.join("\n\n")}),
            );
        };
        let id = task.get("id").and_then(Value::as_str).unwrap_or_default();
        let state = state_of(task).map_err(|what| self.garbage("SendMessage", what, &sent))?;
        let ended = if matches!(state, "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING") {
            if id.is_empty() {
                return Err(self.garbage("SendMessage", "a running task without an `id`", &sent));
            }
            self.follow(id, ctx, deadline).await?
        } else {
            task.clone()
        };
        self.answer(&ended)
    }
}

/// A task's state, or what is wrong with it: a task the agent sends must say its state.
fn state_of(task: &Value) -> Result<&str, &'static str> {
    match task.pointer("/status/state").and_then(Value::as_str) {
        Some(state) if state.starts_with("TASK_STATE_") => Ok(state),
        Some(_) => Err("a task whose state is not an A2A v1.0 state (`TASK_STATE_…`)"),
        None => Err("a task without `status.state`"),
    }
}

/// The text parts of a list of A2A parts (none when it is not a list).
fn texts(parts: Option<&Value>) -> Vec<&str> {
    parts
        .and_then(Value::as_array)
        .map(|p| {
            p.iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// The tools of `agents`, each card fetched and checked; the first agent that cannot be used
/// is the error.
pub async fn remote_agents(
    agents: &[RemoteAgentConfig],
) -> Result<Vec<Arc<dyn fabric_engine::Tool>>, RemoteAgentError> {
    let http = reqwest::Client::new();
    let mut tools: Vec<Arc<dyn fabric_engine::Tool>> = Vec::new();
    for agent in agents {
        let tool = fetch_card(&http, agent).await?;
        tools.push(Arc::new(Typed::new(tool)));
    }
    Ok(tools)
}

/// What a started source offers: its tools, and those withheld with the reason.
type Offered = (
    Vec<Arc<dyn fabric_engine::Tool>>,
    Vec<fabric_engine::Withheld>,
);

/// The remote agents a specialist delegates to, as a tool source: their cards are fetched
/// and checked when the run starts (an agent that cannot be used ends the run `failed`,
/// naming it), and a run without the network is not offered them.
pub struct RemoteAgents {
    configs: Vec<RemoteAgentConfig>,
    started: std::sync::Mutex<Offered>,
    version: AtomicU64,
}

impl RemoteAgents {
    /// A source over `configs` (each a delegate that names an `agents:` entry).
    pub fn new(configs: Vec<RemoteAgentConfig>) -> Self {
        Self {
            configs,
            started: std::sync::Mutex::default(),
            version: AtomicU64::new(0),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Offered> {
        // A panic while holding the lock leaves plain data behind.
        self.started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl fabric_engine::ToolSource for RemoteAgents {
    async fn start(&self, ctx: &ToolContext) -> Result<(), fabric_engine::ports::SourceError> {
        if !ctx.network_allowed {
            let withheld = self
                .configs
                .iter()
                .map(|c| {
                    (
                        format!("{AGENT_TOOL_PREFIX}{}", c.name),
                        "a remote agent is reached over the network, which this run does not allow",
                    )
                })
                .collect();
            self.state().1 = withheld;
        } else {
            let tools = tokio::select! {
                () = ctx.cancel.cancelled() => return Err(fabric_engine::ports::SourceError::Cancelled),
                tools = remote_agents(&self.configs) => tools,
            };
            let tools = tools
                .map_err(|e| fabric_engine::ports::SourceError::Unavailable(vec![e.to_string()]))?;
            self.state().0 = tools;
        }
        self.version.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    fn tools(&self) -> Vec<Arc<dyn fabric_engine::Tool>> {
        self.state().0.clone()
    }

    fn withheld(&self) -> Vec<fabric_engine::Withheld> {
        self.state().1.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The card's problem, as `detail` of a card the tests name nothing else of.
    fn bad(detail: &str) -> RemoteAgentError {
        RemoteAgentError::BadCard {
            name: "x".to_owned(),
            url: "u".to_owned(),
            detail: detail.to_owned(),
        }
    }

    #[test]
    fn issue_30_a_card_without_a_json_rpc_v1_interface_is_refused_by_what_it_lacks() {
        assert!(
            check_card(&json!({}), bad)
                .unwrap_err()
                .to_string()
                .contains("no `name`")
        );
        assert!(
            check_card(&json!({"name": "x"}), bad)
                .unwrap_err()
                .to_string()
                .contains("supportedInterfaces")
        );
        let grpc = json!({"name": "x", "supportedInterfaces": [{"url": "u", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]});
        assert!(
            check_card(&grpc, bad)
                .unwrap_err()
                .to_string()
                .contains("JSON-RPC")
        );
        let old = json!({"name": "x", "supportedInterfaces": [{"url": "u", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]});
        assert!(
            check_card(&old, bad)
                .unwrap_err()
                .to_string()
                .contains("1.x")
        );
        let good = json!({"name": "x", "description": "Writes poems.", "skills": [{"id": "haiku"}],
            "supportedInterfaces": [{"url": "http://h/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
        let card = check_card(&good, bad).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(card.endpoint, "http://h/a2a");
        assert_eq!(card.description, "Writes poems; skills: haiku");
    }
}
