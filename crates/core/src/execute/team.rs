//! Running the members of a task: one, in sequence, or in parallel, into one runlog.

use fabric_domain::runlog;
use fabric_domain::{Message, ToolLoading};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::critic::CriticGate;
use super::merge::{
    MemberResult, combined_reason, combined_status, handoff_message, merged_payload, totals,
};
use super::prompt::system_prompt;
use super::toolset::{MemberTools, split_allowed};
use super::{Member, RunOutcome, TaskForce, TaskForceMode};
use crate::CoreError;
use crate::budget::{Lineage, RunBudget};
use crate::engine::{Fallback, LoopInput, LoopOutcome, run_loop};
use crate::gate::GateState;
use crate::history::{MemberHistory, RunHistory};
use crate::lazy::LazyTools;
use crate::ports::{NewRun, RunObserver, StoreError, ToolContext, ToolSource};
use crate::recorder::{Journal, Recorder, truncate};

/// Runs (or, with `history`, continues) a task force in `run`. The task force and the
/// history come boxed: the future keeps its arguments twice (as given and as moved into its
/// body), and at their size inline that was 2 KiB more for every run in flight (issue #14).
pub(super) async fn run(
    run: NewRun,
    force: Box<TaskForce>,
    mut history: Option<Box<RunHistory>>,
    observer: &dyn RunObserver,
    cancel: CancellationToken,
) -> Result<RunOutcome, CoreError> {
    if force.members.is_empty() {
        return Err(CoreError::InvalidTask(
            "a task needs at least one specialist".to_owned(),
        ));
    }
    // A run ends exactly once: continuing one that recorded its end would write a second
    // (issue #27: seen with a run cut after its `run_complete`). The run service refuses
    // such a run before it gets here; this holds for every caller of the engine.
    if let Some(status) = history.as_ref().and_then(|h| h.ended) {
        return Err(CoreError::InvalidTask(format!(
            "run `{}` already ended ({status}); there is nothing to continue",
            run.id
        )));
    }
    let next_seq = history.as_ref().map_or(0, |h| h.next_seq);
    let journal = Journal::new(run.log.as_ref(), observer, next_seq);
    let rec = journal.recorder();
    let network_allowed = force.network_allowed;
    let mut toolsets: Vec<Arc<dyn ToolSource>> = Vec::new();
    let members: Vec<Member> = force
        .members
        .into_iter()
        .map(|mut m| {
            let (tools, left_out) = split_allowed(m.tools, &m.specialist, network_allowed);
            m.tools = tools.clone();
            let member_tools: Arc<dyn ToolSource> = Arc::new(MemberTools {
                fixed: tools,
                fixed_withheld: left_out,
                sources: std::mem::take(&mut m.sources),
                specialist: m.specialist.clone(),
                network_allowed,
            });
            toolsets.push(match m.specialist.tooling.tool_loading {
                ToolLoading::Eager => member_tools,
                ToolLoading::Lazy => Arc::new(LazyTools::new(member_tools)),
            });
            m
        })
        .collect();
    let ids: Vec<String> = members.iter().map(|m| m.specialist.id.clone()).collect();
    let is_task_force = members.len() > 1;
    let mode = if is_task_force {
        force.mode.into()
    } else {
        runlog::TaskForceMode::Single
    };
    let first = &members[0];
    let lineage = force.lineage.clone().unwrap_or_else(|| {
        // A run a person started: its own steps, per member, are the whole tree's budget.
        let steps = force.max_steps.saturating_mul(members.len() as u32);
        Lineage::root(Arc::new(RunBudget::new(
            fabric_domain::DEFAULT_MAX_DELEGATION_DEPTH,
            Some(steps),
            None,
            None,
        )))
    });

    // For `_meta`: as first recorded (a resumed run was recruited before it stopped).
    let recorded = history.as_ref();
    let routing = Some(recorded.and_then(|h| h.recruitment.as_ref()).map_or_else(
        || super::RoutingNote {
            method: force.recruitment.routing_method.clone(),
            reason: force.recruitment.reason.clone(),
        },
        super::RoutingNote::from,
    ));
    let model_reason = match recorded.and_then(|h| h.start.as_ref()) {
        Some(start) => start.model_reason.clone(),
        None => first.model_reason.clone(),
    };
    match &history {
        // A resumed run's beginning is in its runlog already; say where it goes on from.
        Some(h) => {
            rec.record(
                None,
                &runlog::RunResumed {
                    run_id: run.id.clone(),
                    resumption: h.resumptions + 1,
                    previous_events: h.next_seq,
                    replayed_steps: h.answered_steps(),
                    last_event_ts: h.last_ts,
                    reaped_processes: h.reaped.clone(),
                },
            )
            .await?;
            if let Some(versioned) = &run.versioned {
                rec.record(None, versioned.opened()).await?;
            }
            // Stopped between `run_start` and `recruitment`: chosen again, recorded now.
            if h.recruitment.is_none() {
                record_recruitment(
                    rec,
                    force.routing_call.as_ref(),
                    &force.recruitment,
                    &ids,
                    mode.clone(),
                )
                .await?;
            }
        }
        None => {
            rec.record(
                None,
                &runlog::RunStart {
                    run_id: run.id.clone(),
                    prompt: force.prompt.clone(),
                    model_key: first.model_key.clone(),
                    model: first.model.name.clone(),
                    model_reason: first.model_reason.clone(),
                    origin: force.origin.clone(),
                    max_steps: force.max_steps,
                    network_allowed,
                    workspace: run.workspace.clone(),
                    sandbox: Value::clone(&force.sandbox.policy),
                    parent_run_id: lineage.parent_run_id.clone(),
                    depth: lineage.depth,
                    context_id: force.context_id.clone(),
                },
            )
            .await?;
            if let Some(versioned) = &run.versioned {
                rec.record(None, versioned.opened()).await?;
            }
            for notice in &force.sandbox.notices {
                rec.record(
                    None,
                    &runlog::SecurityEvent {
                        event_type: notice.event_type.as_str().into(),
                        tool: None,
                        call_id: None,
                        attempted: "run_start".to_owned(),
                        error_message: notice.message.clone(),
                    },
                )
                .await?;
            }
            record_recruitment(
                rec,
                force.routing_call.as_ref(),
                &force.recruitment,
                &ids,
                mode.clone(),
            )
            .await?;
        }
    }
    let ctx = ToolContext {
        sampler: None,
        run_id: run.id.clone(),
        workspace: run.workspace.clone(),
        network_allowed,
        cancel,
        lineage,
    };
    let parallel_recorded = history.as_ref().is_some_and(|h| h.parallel_recorded);
    // The fallbacks are counted by the tree's budget: across the members, and the critic's
    // and children's runs, which share it (issue #26: a critic's run had its own count).
    let fallback = force.fallback.as_ref().map(|f| Fallback {
        chat: f.chat.as_ref(),
        model: &f.model,
        model_key: &f.model_key,
        policy: f.policy,
        tree: &ctx.lineage.budget,
    });
    let shared = Shared {
        prompt: &force.prompt,
        max_steps: force.max_steps,
        ctx: &ctx,
        toolsets: &toolsets,
        histories: std::sync::Mutex::new(history.take().map(|h| h.members).unwrap_or_default()),
        fallback: fallback.as_ref(),
        versioned: run.versioned.as_deref(),
        reviewing: force.origin == runlog::RunOrigin::Critic,
    };

    let (status, payload, reason, steps, usage) = if !is_task_force {
        // A single specialist: no `pack_index` on its events, the plain payload as result.
        let outcome = shared.member(rec, None, first, None).await?;
        (
            outcome.status,
            outcome.payload,
            outcome.reason,
            outcome.steps,
            outcome.usage,
        )
    } else {
        let results = match force.mode {
            TaskForceMode::Sequential => shared.sequential(rec, &members).await?,
            TaskForceMode::Parallel => {
                let limit = force.max_parallel.max(1);
                if !parallel_recorded {
                    rec.record(
                        None,
                        &runlog::TaskForceParallel {
                            specialist_ids: ids.clone(),
                            max_parallel: limit,
                        },
                    )
                    .await?;
                }
                shared.parallel(rec, &members, limit).await?
            }
        };
        let status = combined_status(&results);
        let (steps, usage) = totals(&results);
        let payload = if status.has_result() {
            merged_payload(mode.as_str(), &results)
        } else {
            Value::Null
        };
        (status, payload, combined_reason(&results), steps, usage)
    };

    let workspace = match &run.versioned {
        Some(versioned) => versioned.result().await,
        None => None,
    };
    // `run_complete` with the result, or `run_failed` without one (`RunEnd::kind`).
    rec.record(
        None,
        &runlog::RunEnd {
            run_id: run.id.clone(),
            status,
            specialist_ids: ids.clone(),
            task_force_mode: mode,
            steps,
            usage,
            reason: reason.clone(),
            result: status.has_result().then(|| payload.clone()),
            workspace: workspace.clone(),
        },
    )
    .await?;

    Ok(RunOutcome {
        run_id: run.id,
        status,
        payload,
        reason,
        workspace: run.workspace,
        specialist_ids: ids,
        model_key: first.model_key.clone(),
        model: first.model.name.clone(),
        steps,
        usage,
        routing,
        model_reason,
        changes: workspace,
    })
}

/// What every member's loop shares.
struct Shared<'a> {
    prompt: &'a str,
    max_steps: u32,
    ctx: &'a ToolContext,
    /// Per member, the tools its loop reads between steps.
    toolsets: &'a [Arc<dyn ToolSource>],
    /// Per member, what a resumed run recorded before (empty for a new run); each member
    /// takes its own once.
    histories: std::sync::Mutex<Vec<MemberHistory>>,
    /// The cloud model steps fall back to, if the run has one.
    fallback: Option<&'a Fallback<'a>>,
    /// The run's versioned workspace, checkpointed after each call that may change it.
    versioned: Option<&'a crate::versioned::RunWorkspace>,
    /// The run is a critic's review, its work in its task.
    reviewing: bool,
}

impl Shared<'_> {
    /// One member's loop. `index` is its `pack_index` (`None` for a lone specialist, whose
    /// events stay untagged); `handoff` the previous member's id and payload.
    async fn member(
        &self,
        rec: Recorder<'_>,
        index: Option<u32>,
        member: &Member,
        handoff: Option<(&str, &Value)>,
    ) -> Result<LoopOutcome, StoreError> {
        let rec = match index {
            Some(i) => rec.member(i),
            None => rec,
        };
        // Built alongside the members, one per member, so the index is always there.
        let tools = &self.toolsets[index.unwrap_or(0) as usize];
        let history = self.take_history(index.unwrap_or(0) as usize);
        if let Some(ended) = history.ended {
            return Ok(ended);
        }
        if !history.started {
            self.record_pack_start(rec, index, member, tools.as_ref(), handoff)
                .await?;
        }
        let mut messages = vec![
            Message::system(system_prompt(
                &member.specialist,
                &member.tools,
                member.model.context_window,
            )),
            Message::user(self.prompt),
        ];
        if let Some((id, payload)) = handoff {
            messages.push(Message::user(handoff_message(id, payload)));
        }
        // A member with a critic works in a staging area: its tools see it as the
        // workspace, and its changes reach the workspace only when the critic approves.
        let staged = match &member.critic {
            Some(critic) => {
                let branch = self.versioned.map(|v| Arc::clone(v.handle()));
                match CriticGate::open(
                    critic,
                    self.ctx,
                    self.prompt,
                    &member.specialist.id,
                    index,
                    branch,
                )
                .await
                {
                    Ok(gate) => Some(gate),
                    Err(reason) => {
                        return Ok(LoopOutcome {
                            status: fabric_domain::RunStatus::Failed,
                            payload: Value::Null,
                            steps: 0,
                            usage: fabric_domain::Usage::default(),
                            reason: Some(reason.to_string()),
                        });
                    }
                }
            }
            None => None,
        };
        let base_ctx = staged
            .as_ref()
            .map_or_else(|| self.ctx.clone(), |gate| gate.context(self.ctx));
        // The member's tools' servers may borrow its model (MCP sampling), in the run's budget.
        let member_ctx = ToolContext {
            sampler: Some(Arc::new(crate::sampling::ModelSampler::new(
                member.chat.clone(),
                member.model.clone(),
                member.model_key.clone(),
                base_ctx.lineage.budget.clone(),
                base_ctx.cancel.clone(),
            ))),
            ..base_ctx
        };
        let gate = staged.as_ref().map(|gate| GateState {
            gate,
            rounds_done: history.critic_rounds,
            repair_on_cloud: history.repair_on_cloud,
            model_key: &member.model_key,
            approved: history.critic_approved,
        });
        let outcome = run_loop(
            member.chat.as_ref(),
            LoopInput {
                specialist: &member.specialist,
                tools: tools.as_ref(),
                messages,
                model: &member.model,
                max_steps: self.max_steps,
                ctx: &member_ctx,
                replay: history.steps,
                fallback: self.fallback,
                gate,
                versioned: self.versioned,
                reviewing: self.reviewing,
            },
            rec,
        )
        .await?;
        // A task-force member's end is its own event (a lone specialist's is the run's), so
        // a continued run does not run a member that had ended.
        if index.is_some() {
            rec.record(
                None,
                &runlog::PackEnd {
                    specialist_id: member.specialist.id.clone(),
                    status: outcome.status,
                    steps: outcome.steps,
                    usage: outcome.usage,
                    reason: outcome.reason.clone(),
                    result: (!outcome.payload.is_null()).then(|| outcome.payload.clone()),
                },
            )
            .await?;
        }
        Ok(outcome)
    }

    /// Member `index`'s recorded past, taken once (a poisoned lock only means another member
    /// panicked while taking its own; the rest is intact).
    fn take_history(&self, index: usize) -> MemberHistory {
        let mut histories = self
            .histories
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        histories
            .get_mut(index)
            .map(std::mem::take)
            .unwrap_or_default()
    }

    async fn record_pack_start(
        &self,
        rec: Recorder<'_>,
        index: Option<u32>,
        member: &Member,
        tools: &dyn ToolSource,
        handoff: Option<(&str, &Value)>,
    ) -> Result<(), StoreError> {
        rec.record(
            None,
            &runlog::PackStart {
                specialist_id: member.specialist.id.clone(),
                pack_index: index.unwrap_or(0),
                tools: tools
                    .tools()
                    .iter()
                    .map(|t| t.spec().name.clone())
                    .collect(),
                tool_loading: member.specialist.tooling.tool_loading,
                model_key: member.model_key.clone(),
                model: member.model.name.clone(),
                handoff_from: handoff.map(|(id, _)| id.to_owned()),
                context_window: member.model.context_window,
            },
        )
        .await
    }

    /// Members in turn, each given the previous one's payload. A member without a result
    /// stops the chain: the next one would build on nothing. Later members are `skipped`.
    async fn sequential(
        &self,
        rec: Recorder<'_>,
        members: &[Member],
    ) -> Result<Vec<MemberResult>, StoreError> {
        let mut results: Vec<MemberResult> = Vec::new();
        let mut stopped = false;
        for (i, member) in members.iter().enumerate() {
            if stopped {
                results.push(MemberResult {
                    specialist_id: member.specialist.id.clone(),
                    outcome: None,
                });
                continue;
            }
            let handoff = results.last().and_then(|r| {
                r.outcome
                    .as_ref()
                    .map(|o| (r.specialist_id.as_str(), &o.payload))
            });
            let outcome = self.member(rec, Some(i as u32), member, handoff).await?;
            stopped = !outcome.status.has_result();
            results.push(MemberResult {
                specialist_id: member.specialist.id.clone(),
                outcome: Some(outcome),
            });
        }
        Ok(results)
    }

    /// Members at the same time, at most `limit` at once. Results come back in recruitment
    /// order whatever order they finish in (`join_all` keeps its input order).
    async fn parallel(
        &self,
        rec: Recorder<'_>,
        members: &[Member],
        limit: usize,
    ) -> Result<Vec<MemberResult>, StoreError> {
        let permits = Semaphore::new(limit);
        let runs = members.iter().enumerate().map(|(i, member)| {
            let permits = &permits;
            async move {
                // The semaphore is never closed, so acquiring fails only if it were; running
                // without a permit is then the safe degradation.
                let _permit = permits.acquire().await.ok();
                let outcome = self.member(rec, Some(i as u32), member, None).await?;
                Ok::<_, StoreError>(MemberResult {
                    specialist_id: member.specialist.id.clone(),
                    outcome: Some(outcome),
                })
            }
        });
        futures_util::future::join_all(runs)
            .await
            .into_iter()
            .collect()
    }
}

/// The routing call (if any) and `recruitment`.
async fn record_recruitment(
    rec: Recorder<'_>,
    routing_call: Option<&crate::recruit::RoutingCall>,
    recruitment: &super::Recruitment,
    ids: &[String],
    mode: runlog::TaskForceMode,
) -> Result<(), StoreError> {
    if let Some(call) = routing_call {
        record_routing_call(rec, call).await?;
    }
    rec.record(
        None,
        &runlog::Recruitment {
            specialist_id: ids[0].clone(),
            specialist_ids: ids.to_vec(),
            required_capabilities: recruitment.required_capabilities.clone(),
            routing_method: recruitment.routing_method.clone(),
            reason: recruitment.reason.clone(),
            is_task_force: ids.len() > 1,
            task_force_mode: mode,
        },
    )
    .await
}

/// The routing model call, as an `llm_request`/`llm_response` pair marked `purpose: routing`.
async fn record_routing_call(
    rec: Recorder<'_>,
    call: &crate::recruit::RoutingCall,
) -> Result<(), StoreError> {
    rec.record(
        None,
        &runlog::RoutingRequest {
            purpose: runlog::CallPurpose::Routing,
            model_key: call.model_key.clone(),
            model: call.model.clone(),
            // The routing prompt is one system and one user message, offering one tool.
            message_count: 2,
            tool_count: 1,
        },
    )
    .await?;
    rec.record(
        None,
        &runlog::RoutingResponse {
            purpose: runlog::CallPurpose::Routing,
            model: call.model.clone(),
            content: call.content.as_deref().map(|c| truncate(c, 2_000)),
            tool_calls: call
                .tool_arguments
                .iter()
                .map(|a| runlog::LlmToolCall {
                    call_id: None,
                    name: crate::recruit::ROUTE_TOOL.to_owned(),
                    arguments: truncate(a, 2_000),
                    full_arguments: None,
                })
                .collect(),
            latency_ms: call.latency_ms,
            error: call.outcome.as_ref().err().cloned(),
        },
    )
    .await
}
