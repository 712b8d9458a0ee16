//! Preparation with fake ports (issue #28, step 2): the policy's choices, without a model
//! server, a store or a tool.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::budget::daily::{DailyLimit, DayClock};
use crate::delegate::ChildRunner;
use crate::execute::RunOutcome;
use crate::fakes::ScriptedChat;
use crate::models::ModelCandidate;
use crate::ports::{
    DaySpend, NoOsSandbox, RunSandbox, SpendLedger, Stager, StoreError, Tool, ToolContext,
    ToolSource,
};
use fabric_domain::{Backend, CriticSpec, Routing, SandboxMode, TaskForceMode};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A server per key: its listing (or why it cannot list), whether it starts, what was pulled.
#[derive(Default)]
struct Servers {
    listings: BTreeMap<String, Vec<ModelCandidate>>,
    down: Option<String>,
    pulled: Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl ModelResolver for Servers {
    async fn start(&self, _key: &str) -> Result<(), SetupError> {
        match &self.down {
            Some(why) => Err(SetupError::ModelUnavailable(why.clone())),
            None => Ok(()),
        }
    }

    async fn list(&self, key: &str) -> Result<Arc<Vec<ModelCandidate>>, SetupError> {
        let mut listed = self.listings.get(key).cloned().unwrap_or_default();
        for (k, pulled) in self.pulled.lock().unwrap().iter() {
            if k == key {
                listed.push(candidate(pulled, true));
            }
        }
        Ok(Arc::new(listed))
    }

    async fn pull(&self, key: &str, model: &str) -> Result<(), SetupError> {
        self.pulled
            .lock()
            .unwrap()
            .push((key.to_owned(), model.to_owned()));
        Ok(())
    }
}

fn candidate(name: &str, tools: bool) -> ModelCandidate {
    ModelCandidate {
        name: name.to_owned(),
        capabilities: Some(if tools {
            vec!["completion".to_owned(), "tools".to_owned()]
        } else {
            vec!["completion".to_owned()]
        }),
        ..ModelCandidate::default()
    }
}

/// Clients for every key; `missing` names the keys whose API key is unset.
#[derive(Default)]
struct Chats {
    missing: Vec<String>,
}

impl ChatFactory for Chats {
    fn chat(&self, _key: &str) -> Result<Arc<dyn ChatClient>, SetupError> {
        Ok(ScriptedChat::new(Vec::new()).client())
    }

    fn missing_api_key(&self, key: &str) -> Option<String> {
        self.missing
            .iter()
            .any(|k| k == key)
            .then(|| format!("`{key}_API_KEY` is not set"))
    }
}

struct NoStager;

#[async_trait]
impl Stager for NoStager {
    async fn stage(
        &self,
        _workspace: &std::path::Path,
        _name: &str,
    ) -> Result<Arc<dyn crate::ports::Staged>, crate::ports::StagingError> {
        Err(crate::ports::StagingError::Refused(
            "no staging in this test".to_owned(),
        ))
    }
}

struct Tools;

impl ToolFactory for Tools {
    fn sandbox(
        &self,
        mode: Option<SandboxMode>,
    ) -> Result<(Arc<dyn ProcessSandbox>, RunSandbox), SetupError> {
        match mode {
            Some(SandboxMode::Strict) => Err(SetupError::Refused("no strict here".to_owned())),
            _ => Ok((Arc::new(NoOsSandbox), RunSandbox::default())),
        }
    }

    fn check(&self, _specialist: &SpecialistSpec) -> Result<(), SetupError> {
        Ok(())
    }

    fn tools(
        &self,
        _specialist: &SpecialistSpec,
        _sandbox: (&Arc<dyn ProcessSandbox>, Option<SandboxMode>),
        _children: &Arc<dyn ChildRunner>,
    ) -> Result<Vec<Arc<dyn Tool>>, SetupError> {
        Ok(Vec::new())
    }

    fn sources(&self, _specialist: &SpecialistSpec) -> Vec<Arc<dyn ToolSource>> {
        Vec::new()
    }

    fn stager(&self) -> Arc<dyn Stager> {
        Arc::new(NoStager)
    }
}

/// Today's spend per key, set by the test.
#[derive(Default)]
struct Ledger(Mutex<BTreeMap<String, DaySpend>>);

#[async_trait]
impl SpendLedger for Ledger {
    async fn add_spend(
        &self,
        _day: &str,
        key: &str,
        tokens: u64,
        cost_usd: f64,
    ) -> Result<DaySpend, StoreError> {
        let mut spent = self.0.lock().unwrap();
        let s = spent.entry(key.to_owned()).or_default();
        s.tokens += tokens;
        s.cost_usd += cost_usd;
        s.calls += 1;
        Ok(*s)
    }

    async fn spend_on(&self, _day: &str) -> Result<Vec<(String, DaySpend)>, StoreError> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|(k, s)| (k.clone(), *s))
            .collect())
    }
}

struct Fixed;

impl DayClock for Fixed {
    fn today(&self) -> String {
        "2026-11-27".to_owned()
    }

    fn zone_name(&self) -> String {
        "UTC".to_owned()
    }
}

struct NoChildren;

#[async_trait]
impl ChildRunner for NoChildren {
    async fn run_child(
        &self,
        _specialist: &str,
        _task: String,
        _parent: &ToolContext,
    ) -> Result<RunOutcome, crate::service::ServiceError> {
        Err(crate::service::InvalidRequest::Setup(SetupError::Refused(
            "no children in this test".to_owned(),
        ))
        .into())
    }
}

/// A specialist with every optional field at its default.
fn spec(id: &str) -> SpecialistSpec {
    serde_json::from_value(json!({
        "id": id,
        "description": format!("{id} specialist"),
        "keywords": [id],
        "system_prompt": "p",
        "tools": [],
        "finish_schema": {"type": "object"},
    }))
    .unwrap()
}

fn model(name: &str, backend: Backend) -> Arc<ModelConfig> {
    Arc::new(ModelConfig {
        temperature: 0.2,
        max_tokens: 512,
        timeout_s: 30,
        tool_call_repair: Some(false),
        num_ctx: 8192,
        ..ModelConfig::new(backend, format!("http://{name}.test"), name)
    })
}

/// Two keys on OpenAI-compatible servers (`small`, `big`), one specialist, keyword routing.
fn policy() -> PreparePolicy {
    let models = [
        ("small", model("small-model", Backend::OpenAi)),
        ("big", model("big-model", Backend::OpenAi)),
    ]
    .into_iter()
    .map(|(k, m)| (k.to_owned(), m))
    .collect();
    PreparePolicy {
        hooks: Default::default(),
        specialists: vec![Arc::new(spec("engineering"))],
        default_specialist: "engineering".to_owned(),
        routing: Routing::Keyword,
        routing_model_key: "small".to_owned(),
        complexity: None,
        default_model_key: "small".to_owned(),
        models,
        auto_pull: None,
        summarize_compaction: false,
        max_steps: 5,
        budget: BudgetLimits::default(),
        specialist_budgets: BTreeMap::new(),
        max_depth: 2,
        share_parent_workspace: false,
        mode: TaskForceMode::Sequential,
        max_parallel: 2,
        network_allowed: false,
        cloud_fallback: None,
        instructions: Default::default(),
    }
}

/// A preparation over the fakes; `spent` keys have used up their daily budget of 100 tokens.
fn preparation(
    policy: PreparePolicy,
    servers: Servers,
    chats: Chats,
    spent: &[&str],
) -> Preparation {
    let ledger = Ledger::default();
    let mut limits = BTreeMap::new();
    for key in policy.models.keys() {
        let limit = DailyLimit {
            max_tokens: Some(100),
            max_cost_usd: None,
        };
        limits.insert(key.clone(), limit);
    }
    for key in spent {
        ledger.0.lock().unwrap().insert(
            (*key).to_owned(),
            DaySpend {
                tokens: 100,
                ..DaySpend::default()
            },
        );
    }
    let daily = DailyBudget::new(Arc::new(ledger), limits, Arc::new(Fixed));
    let ports = PreparePorts {
        models: Arc::new(servers),
        chats: Arc::new(chats),
        tools: Arc::new(Tools),
        daily,
    };
    Preparation::new(policy, ports)
}

fn context() -> PrepareContext {
    PrepareContext {
        children: Arc::new(NoChildren),
    }
}

fn request(prompt: &str) -> TaskRequest {
    TaskRequest {
        prompt: prompt.to_owned(),
        ..TaskRequest::default()
    }
}

async fn prepare(p: &Preparation, r: TaskRequest) -> Result<TaskForce, ServiceError> {
    p.prepare_task(r, &context()).await
}

fn with_complexity(threshold: u8) -> PreparePolicy {
    PreparePolicy {
        complexity: Some(ComplexityRouting {
            threshold,
            simple: "small".to_owned(),
            complex: "big".to_owned(),
        }),
        ..policy()
    }
}

#[tokio::test]
async fn issue_28_complexity_picks_the_model_key() {
    let p = preparation(
        with_complexity(0),
        Servers::default(),
        Chats::default(),
        &[],
    );
    let task = prepare(&p, request("fix the bug")).await.unwrap();
    let member = &task.members[0];
    assert_eq!(member.model_key, "big");
    assert_eq!(member.model.name, "big-model");
    assert!(
        member
            .model_reason
            .as_deref()
            .unwrap()
            .starts_with("complexity "),
        "{}",
        member.model_reason.as_deref().unwrap_or_default()
    );
    assert!(
        member
            .model_reason
            .as_deref()
            .unwrap()
            .contains(" ≥ 0: big ("),
        "{}",
        member.model_reason.as_deref().unwrap_or_default()
    );

    let p = preparation(
        with_complexity(255),
        Servers::default(),
        Chats::default(),
        &[],
    );
    let task = prepare(&p, request("fix the bug")).await.unwrap();
    assert_eq!(task.members[0].model_key, "small");
    assert!(
        task.members[0]
            .model_reason
            .as_deref()
            .unwrap()
            .contains(" < 255: small (")
    );

    // `--model-key` and the specialist's own key come before complexity.
    let mut named = request("fix the bug");
    named.model_key = Some("small".to_owned());
    let p = preparation(
        with_complexity(0),
        Servers::default(),
        Chats::default(),
        &[],
    );
    let task = prepare(&p, named).await.unwrap();
    assert_eq!(task.members[0].model_key, "small");
    assert_eq!(
        task.members[0].model_reason.as_deref(),
        Some("`small-model` as configured")
    );
}

#[tokio::test]
async fn issue_28_a_spent_daily_budget_gives_way_to_a_key_with_budget() {
    let p = preparation(
        with_complexity(0),
        Servers::default(),
        Chats::default(),
        &["big"],
    );
    let task = prepare(&p, request("fix the bug")).await.unwrap();
    let member = &task.members[0];
    assert_eq!(member.model_key, "small");
    assert!(
        member.model_reason.as_deref().unwrap().contains(
            "; the daily budget of `big` is spent (100 of 100 tokens on 2026-11-27): `small` instead; `small-model` as configured"
        ),
        "{}",
        member.model_reason.as_deref().unwrap_or_default()
    );

    // A key a person named is refused instead, and so is a run with no key left.
    let mut named = request("fix the bug");
    named.model_key = Some("big".to_owned());
    let refused = prepare(&p, named).await.err().unwrap();
    assert!(
        matches!(refused, ServiceError::BudgetSpent(_)),
        "{refused:?}"
    );
    assert!(
        refused
            .to_string()
            .contains("Run with another `--model-key`, or raise `daily_budget.big`")
    );
    let p = preparation(
        with_complexity(0),
        Servers::default(),
        Chats::default(),
        &["big", "small"],
    );
    let none_left = prepare(&p, request("fix the bug")).await.err().unwrap();
    assert!(
        none_left
            .to_string()
            .contains("no other model key has budget left today")
    );

    // A continued run goes on with the key it recorded.
    let mut continued = request("fix the bug");
    continued.continued = true;
    let p = preparation(
        with_complexity(0),
        Servers::default(),
        Chats::default(),
        &["big"],
    );
    assert_eq!(
        prepare(&p, continued).await.unwrap().members[0].model_key,
        "big"
    );
}

fn with_fallback() -> PreparePolicy {
    let mut policy = policy();
    policy
        .models
        .insert("cloud".to_owned(), model("cloud-model", Backend::Anthropic));
    policy.cloud_fallback = Some(fabric_domain::FallbackPolicy {
        model_key: "cloud".to_owned(),
        no_tool_calls: true,
        malformed_args: false,
        critic_rejected: false,
        max_per_run: 3,
    });
    policy
}

#[tokio::test]
async fn issue_28_the_cloud_fallback_is_attached_unless_its_budget_or_key_is_missing() {
    let p = preparation(with_fallback(), Servers::default(), Chats::default(), &[]);
    let task = prepare(&p, request("fix the bug")).await.unwrap();
    let fallback = task.fallback.as_ref().expect("a fallback");
    assert_eq!(fallback.policy.model_key, "cloud");
    assert_eq!(fallback.model.name, "cloud-model");
    assert_eq!(fallback.policy.max_per_run, 3);

    let p = preparation(
        with_fallback(),
        Servers::default(),
        Chats::default(),
        &["cloud"],
    );
    let task = prepare(&p, request("fix the bug")).await.unwrap();
    assert!(task.fallback.is_none());
    assert!(
        task.members[0].model_reason.as_deref().unwrap().ends_with("; cloud fallback to `cloud` off: the daily budget of `cloud` is spent (100 of 100 tokens on 2026-11-27)"),
        "{}",
        task.members[0].model_reason.as_deref().unwrap_or_default()
    );

    let chats = Chats {
        missing: vec!["cloud".to_owned()],
    };
    let p = preparation(with_fallback(), Servers::default(), chats, &[]);
    let task = prepare(&p, request("fix the bug")).await.unwrap();
    assert!(task.fallback.is_none());
    assert!(
        task.members[0]
            .model_reason
            .as_deref()
            .unwrap()
            .ends_with("off: `cloud_API_KEY` is not set")
    );

    // A fallback naming no model key is the configuration's mistake, said as such.
    let mut policy = with_fallback();
    policy.models.remove("cloud");
    let p = preparation(policy, Servers::default(), Chats::default(), &[]);
    let error = prepare(&p, request("fix the bug")).await.err().unwrap();
    assert_eq!(
        error.code(),
        crate::service::ErrorCode::UnknownModelKey,
        "{error:?}"
    );
}

#[tokio::test]
async fn issue_28_critics_and_budgets_are_attached() {
    let mut policy = policy();
    let mut reviewed = spec("engineering");
    reviewed.tooling.critic = Some(CriticSpec {
        specialist: "reviewer".to_owned(),
        max_repair_rounds: 2,
    });
    policy.specialists = vec![Arc::new(reviewed)];
    policy.budget.max_tokens = Some(1_000);
    policy.specialist_budgets.insert(
        "engineering".to_owned(),
        BudgetLimits {
            max_wall_s: Some(60),
            ..BudgetLimits::default()
        },
    );
    let p = preparation(policy.clone(), Servers::default(), Chats::default(), &[]);
    let task = prepare(&p, request("fix the bug")).await.unwrap();
    let critic = task.members[0].critic.as_ref().expect("a critic");
    assert_eq!(
        (critic.specialist.as_str(), critic.max_rounds),
        ("reviewer", 2)
    );
    let budget = &task.lineage.as_ref().unwrap().budget;
    // Five steps for the member and five for each of its two reviews.
    for _ in 0..15 {
        budget.take_step().unwrap();
    }
    assert!(budget.take_step().is_err());
    assert!(
        budget.deadline().is_some(),
        "the specialist's own wall-clock limit"
    );
    assert_eq!(task.max_steps, 5);

    // A cost limit needs a price on every key the run uses.
    policy.budget.max_cost_usd = Some(1.0);
    let p = preparation(policy, Servers::default(), Chats::default(), &[]);
    let error = prepare(&p, request("fix the bug")).await.err().unwrap();
    assert!(matches!(error, ServiceError::Invalid(_)), "{error:?}");
    assert!(error.to_string().contains("`small` has none"), "{error}");
}

fn on_ollama() -> PreparePolicy {
    let mut policy = policy();
    policy
        .models
        .insert("small".to_owned(), model("qwen2.5:7b", Backend::Ollama));
    policy
}

#[tokio::test]
async fn issue_28_a_model_that_cannot_be_resolved_is_unavailable() {
    let servers = Servers {
        down: Some("no model server answers at http://small.test".to_owned()),
        ..Servers::default()
    };
    let p = preparation(on_ollama(), servers, Chats::default(), &[]);
    let error = prepare(&p, request("fix the bug")).await.err().unwrap();
    assert_eq!(
        error.to_string(),
        "no model server answers at http://small.test"
    );
    assert!(
        matches!(error, ServiceError::ModelUnavailable(_)),
        "{error:?}"
    );

    // A server whose models cannot call tools, and no pull allowed.
    let servers = Servers {
        listings: [("small".to_owned(), vec![candidate("tiny", false)])].into(),
        ..Servers::default()
    };
    let p = preparation(on_ollama(), servers, Chats::default(), &[]);
    let error = prepare(&p, request("fix the bug")).await.err().unwrap();
    assert!(
        matches!(error, ServiceError::ModelUnavailable(_)),
        "{error:?}"
    );

    // Unknown keys and specialists are refused before a slot is taken.
    let p = preparation(policy(), Servers::default(), Chats::default(), &[]);
    let mut unknown = request("x");
    unknown.model_key = Some("huge".to_owned());
    assert_eq!(
        p.check_request(&unknown)
            .map_err(|e| (e.code(), e.to_string())),
        Err((
            crate::service::ErrorCode::UnknownModelKey,
            "no model key `huge`; the configured keys are: big, small".to_owned()
        ))
    );
    unknown.model_key = None;
    unknown.specialists = vec!["law".to_owned()];
    assert!(matches!(
        p.check_request(&unknown),
        Err(ServiceError::UnknownSpecialist { .. })
    ));
    // A sandbox the host cannot enforce stops the run before anything else.
    let mut strict = request("x");
    strict.sandbox = Some(SandboxMode::Strict);
    assert_eq!(
        prepare(&p, strict)
            .await
            .err()
            .map(|e| (e.code(), e.to_string())),
        Some((
            crate::service::ErrorCode::InvalidRequest,
            "no strict here".to_owned()
        ))
    );
}

#[tokio::test]
async fn issue_28_a_missing_model_is_pulled_when_allowed() {
    let mut policy = on_ollama();
    policy.auto_pull = Some("qwen2.5:3b".to_owned());
    let p = preparation(policy, Servers::default(), Chats::default(), &[]);
    let task = prepare(&p, request("fix the bug")).await.unwrap();
    let member = &task.members[0];
    assert_eq!(member.model.name, "qwen2.5:3b");
    assert!(
        member
            .model_reason
            .as_deref()
            .unwrap_or_default()
            .ends_with("; pulled `qwen2.5:3b` (auto_pull_model)"),
        "{:?}",
        member.model_reason.as_deref().unwrap_or_default()
    );
    // Ollama's window is the `num_ctx` the fabric sends.
    assert_eq!(member.model.context_window, Some(8192));
}

#[tokio::test]
async fn issue_28_an_unusable_routing_model_falls_back_to_keywords() {
    use fabric_domain::runlog::RoutingMethod;
    let mut no_key = policy();
    no_key.routing = Routing::Llm;
    no_key.routing_model_key = "router".to_owned();
    let p = preparation(no_key, Servers::default(), Chats::default(), &[]);
    let task = prepare(&p, request("fix the bug")).await.unwrap();
    assert_eq!(
        task.recruitment.routing_method,
        RoutingMethod::KeywordFallback
    );
    assert!(
        task.recruitment
            .reason
            .starts_with("no routing model `router`; keyword routing: "),
        "{}",
        task.recruitment.reason
    );
    assert!(task.routing_call.is_none());

    let mut down = on_ollama();
    down.routing = Routing::Llm;
    let servers = Servers {
        down: Some("no model server answers".to_owned()),
        ..Servers::default()
    };
    let mut named = request("fix the bug");
    named.specialists = vec!["engineering".to_owned()];
    named.model = Some("qwen2.5:7b".to_owned());
    let p = preparation(down.clone(), servers, Chats::default(), &[]);
    // `--pack` asks no router, and `--model` no server.
    let task = prepare(&p, named).await.unwrap();
    assert_eq!(task.recruitment.routing_method, RoutingMethod::Explicit);
    assert_eq!(task.recruitment.reason, "--pack engineering");
    let servers = Servers {
        down: Some("no model server answers".to_owned()),
        ..Servers::default()
    };
    let p = preparation(down, servers, Chats::default(), &[]);
    let mut routed = request("fix the bug");
    routed.model = Some("qwen2.5:7b".to_owned());
    let task = prepare(&p, routed).await.unwrap();
    assert!(
        task.recruitment.reason.starts_with(
            "routing model `small` unusable (no model server answers); keyword routing: "
        ),
        "{}",
        task.recruitment.reason
    );
}

#[tokio::test]
async fn issue_29_a_vision_key_s_member_and_fallback_read_images() {
    let mut policy = with_fallback();
    let p = preparation(policy.clone(), Servers::default(), Chats::default(), &[]);
    let task = prepare(&p, request("fix the bug")).await.unwrap();
    assert!(!task.members[0].model.vision(), "off unless the key says");
    for key in ["small", "cloud"] {
        Arc::make_mut(policy.models.get_mut(key).unwrap()).vision = true;
    }
    let p = preparation(policy, Servers::default(), Chats::default(), &[]);
    let task = prepare(&p, request("fix the bug")).await.unwrap();
    assert!(task.members[0].model.vision());
    assert!(task.fallback.as_ref().expect("a fallback").model.vision());
}

/// Issue #40: a model key whose API key is unset is a configuration error, refused by the
/// request's check (before anything is prepared) when the key is certain: the key named,
/// or the pack's keys when no daily budget can move a member; as each member is prepared
/// otherwise.
#[tokio::test]
async fn issue_40_a_missing_api_key_is_a_configuration_error_checked_first() {
    let missing = || Chats {
        missing: vec!["small".to_owned()],
    };
    let p = preparation(policy(), Servers::default(), missing(), &[]);
    let named = TaskRequest {
        model_key: Some("small".to_owned()),
        ..request("fix the bug")
    };
    let error = p.check(&named).unwrap_err();
    assert!(
        matches!(error, ServiceError::Misconfigured { .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "model key `small` needs an API key: `small_API_KEY` is not set"
    );
    let big = TaskRequest {
        model_key: Some("big".to_owned()),
        ..request("fix the bug")
    };
    assert!(p.check(&big).is_ok());
    // With daily budgets, the pack's key may give way: checked as the member is prepared.
    let packed = TaskRequest {
        specialists: vec!["engineering".to_owned()],
        ..request("fix the bug")
    };
    assert!(p.check(&packed).is_ok());
    let error = prepare(&p, packed.clone()).await.err().unwrap();
    assert!(
        matches!(error, ServiceError::Misconfigured { .. }),
        "{error:?}"
    );
    // Without them, it is certain, and refused first.
    let ports = PreparePorts {
        models: Arc::new(Servers::default()),
        chats: Arc::new(missing()),
        tools: Arc::new(Tools),
        daily: DailyBudget::new(
            Arc::new(Ledger::default()),
            BTreeMap::new(),
            Arc::new(Fixed),
        ),
    };
    let p = Preparation::new(policy(), ports);
    assert!(matches!(
        p.check(&packed),
        Err(ServiceError::Misconfigured { .. })
    ));
}

#[test]
fn issue_44_a_requests_mcp_servers_and_approval_mode_join_the_specialist() {
    let server = |name: &str, command: &str| fabric_domain::McpServerSpec {
        name: name.to_owned(),
        transport: fabric_domain::McpTransport::Stdio {
            command: command.to_owned(),
            args: Vec::new(),
            env: BTreeMap::new(),
            pass_env: Vec::new(),
            cwd: None,
        },
        required: false,
        startup_timeout_s: 30,
        call_timeout_s: 120,
        sampling: true,
        elicitation: fabric_domain::McpElicitation::default(),
        pool: true,
    };
    let mut own = spec("engineering");
    own.tooling.mcp_servers = vec![server("fs", "own-fs")];
    let own = Arc::new(own);
    let plain = TaskRequest::default();
    assert!(Arc::ptr_eq(&for_request(own.clone(), &plain), &own));
    let request = TaskRequest {
        mcp_servers: vec![server("fs", "editor-fs"), server("everything", "node")],
        approval_mode: Some(fabric_domain::ApprovalMode::Untrusted),
        ..TaskRequest::default()
    };
    let joined = for_request(own, &request);
    let names: Vec<&str> = joined
        .tooling
        .mcp_servers
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["fs", "everything"],
        "the specialist's own `fs` wins"
    );
    assert!(matches!(
        &joined.tooling.mcp_servers[0].transport,
        fabric_domain::McpTransport::Stdio { command, .. } if command == "own-fs"
    ));
    assert_eq!(joined.tools, ["mcp__everything__*"]);
    assert_eq!(joined.approval.mode, fabric_domain::ApprovalMode::Untrusted);
}
