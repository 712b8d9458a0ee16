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
use super::prompt::{shared_prompt, system_prompt};
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

/// Runs (or, with `history`, continues) a task force in `run`, in four moves: the team
/// assembled with its tools, its beginning recorded (or its resumption), the members' work,
/// and the end recorded. The task force and the history come boxed: the future keeps its
/// arguments twice (as given and as moved into its body), and at their size inline that was
/// 2 KiB more for every run in flight (issue #14).
pub(super) async fn run(
    run: NewRun,
    mut force: Box<TaskForce>,
    mut history: Option<Box<RunHistory>>,
    observer: &dyn RunObserver,
    cancel: CancellationToken,
) -> Result<RunOutcome, CoreError> {
    continuable(&run, &force, history.as_deref())?;
    let journal = Journal::new(
        run.log.as_ref(),
        observer,
        history.as_ref().map_or(0, |h| h.next_seq),
    );
    let rec = journal.recorder();
    let team = Team::assemble(&mut force);
    let lineage = lineage_of(&force, team.members.len());
    // For `_meta`: as first recorded (a resumed run was recruited before it stopped).
    let (routing, model_reason) = first_notes(&force, &team, history.as_deref());
    match history.as_deref() {
        Some(h) => record_resumed(rec, &run, &force, &team, h).await?,
        None => record_start(rec, &run, &force, &team, &lineage).await?,
    }
    let ctx = ToolContext {
        approved: false,
        sampler: None,
        live: observer
            .output_observer()
            .map(crate::live_output::LiveSink::new),
        run_id: run.id.clone(),
        workspace: run.workspace.clone(),
        network_allowed: force.network_allowed,
        cancel,
        lineage,
    };
    let parallel_recorded = history.as_ref().is_some_and(|h| h.parallel_recorded);
    // The fallbacks are counted by the tree's budget: across the members, and the critic's
    // and children's runs, which share it (issue #26: a critic's run had its own count).
    let shared = Shared {
        prompt: &force.prompt,
        max_steps: force.max_steps,
        ctx: &ctx,
        toolsets: &team.toolsets,
        histories: std::sync::Mutex::new(history.take().map(|h| h.members).unwrap_or_default()),
        fallback: force.fallback.as_ref(),
        versioned: run.versioned.as_deref(),
        reviewing: force.origin == runlog::RunOrigin::Critic,
        person: force.person.as_deref(),
        instructions: force.instructions.as_deref(),
        hooks: force.hooks.as_deref(),
    };
    // The end and the workspace's result are boxed: held across the last two awaits, inline
    // they had room reserved in this future (200 bytes) for the whole run (issue #45).
    let ended = Box::new(shared.work(rec, &force, &team, parallel_recorded).await?);
    // A run waiting for a person has no end yet: the answer continues it (issue #42).
    if ended.status == fabric_domain::RunStatus::InputRequired {
        return Ok(outcome_of(run, team, *ended, (routing, model_reason), None));
    }
    let workspace = Box::new(match &run.versioned {
        Some(versioned) => versioned.result().await,
        None => None,
    });
    // `run_complete` with the result, or `run_failed` without one (`RunEnd::kind`).
    rec.record(
        None,
        runlog::RunEnd {
            run_id: run.id.clone(),
            status: ended.status,
            specialist_ids: team.ids.clone(),
            task_force_mode: team.mode.clone(),
            steps: ended.steps,
            usage: ended.usage,
            reason: ended.reason.clone(),
            result: ended.status.has_result().then(|| ended.payload.clone()),
            workspace: (*workspace).clone(),
        },
    )
    .await?;
    Ok(outcome_of(
        run,
        team,
        *ended,
        (routing, model_reason),
        *workspace,
    ))
}

/// The run's outcome, from how its members' work ended. A run waiting for a person
/// (`input_required`) has no end recorded and no changes to show yet.
fn outcome_of(
    run: NewRun,
    team: Team,
    ended: Ended,
    (routing, model_reason): (Option<super::RoutingNote>, Option<String>),
    changes: Option<runlog::WorkspaceResult>,
) -> RunOutcome {
    let first = &team.members[0];
    RunOutcome {
        run_id: run.id,
        status: ended.status,
        payload: ended.payload,
        reason: ended.reason,
        workspace: run.workspace,
        model_key: first.model_key.clone(),
        model: first.model.name.clone(),
        specialist_ids: team.ids,
        steps: ended.steps,
        usage: ended.usage,
        routing,
        model_reason,
        changes,
    }
}

/// Refuses a task force without members, and the continuation of a run that recorded its
/// end: it would write a second (issue #27: seen with a run cut after its `run_complete`).
/// The run service refuses such a run before it gets here; this holds for every caller.
fn continuable(
    run: &NewRun,
    force: &TaskForce,
    history: Option<&RunHistory>,
) -> Result<(), CoreError> {
    if force.members.is_empty() {
        return Err(CoreError::InvalidTask(
            "a task needs at least one specialist".to_owned(),
        ));
    }
    if let Some(status) = history.and_then(|h| h.ended) {
        return Err(CoreError::InvalidTask(format!(
            "run `{}` already ended ({status}); there is nothing to continue",
            run.id
        )));
    }
    Ok(())
}

/// The members of a run, each with the tools its loop reads between steps.
struct Team {
    /// In recruitment order; never empty ([`continuable`]).
    members: Vec<Member>,
    /// Per member, what it may call (lazily loaded where its specialist says so).
    toolsets: Vec<Arc<dyn ToolSource>>,
    /// The members' specialist ids.
    ids: Vec<String>,
    /// `single` for one member, else the task force's mode.
    mode: runlog::TaskForceShape,
}

impl Team {
    /// Takes the task force's members, each given the tools its specialist allows.
    fn assemble(force: &mut TaskForce) -> Self {
        let network_allowed = force.network_allowed;
        let mut toolsets: Vec<Arc<dyn ToolSource>> = Vec::new();
        let members: Vec<Member> = std::mem::take(&mut force.members)
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
        let ids = members.iter().map(|m| m.specialist.id.clone()).collect();
        let mode = if members.len() > 1 {
            force.mode.into()
        } else {
            runlog::TaskForceShape::Single
        };
        Self {
            members,
            toolsets,
            ids,
            mode,
        }
    }

    fn is_task_force(&self) -> bool {
        self.members.len() > 1
    }
}

/// The run's place in its tree: the task force's, or for a run a person started its own
/// steps, per member, as the whole tree's budget.
fn lineage_of(force: &TaskForce, members: usize) -> Lineage {
    force.lineage.clone().unwrap_or_else(|| {
        let steps = force.max_steps.saturating_mul(members as u32);
        Lineage::root(Arc::new(RunBudget::new(
            fabric_domain::DEFAULT_MAX_DELEGATION_DEPTH,
            Some(steps),
            None,
            None,
        )))
    })
}

/// How the run was recruited and why its model, as first recorded (a resumed run was
/// recruited before it stopped).
fn first_notes(
    force: &TaskForce,
    team: &Team,
    recorded: Option<&RunHistory>,
) -> (Option<super::RoutingNote>, Option<String>) {
    let routing = Some(recorded.and_then(|h| h.recruitment.as_ref()).map_or_else(
        || super::RoutingNote {
            method: force.recruitment.routing_method.clone(),
            reason: force.recruitment.reason.clone(),
        },
        super::RoutingNote::from,
    ));
    let model_reason = match recorded.and_then(|h| h.start.as_ref()) {
        Some(start) => start.model_reason.clone(),
        None => team.members[0].model_reason.clone(),
    };
    (routing, model_reason)
}

/// A new run's beginning: `run_start`, its `workspace`, the sandbox's notices and the
/// recruitment.
async fn record_start(
    rec: Recorder<'_>,
    run: &NewRun,
    force: &TaskForce,
    team: &Team,
    lineage: &Lineage,
) -> Result<(), StoreError> {
    let first = &team.members[0];
    rec.record(
        None,
        runlog::RunStart {
            run_id: run.id.clone(),
            prompt: force.prompt.clone(),
            model_key: first.model_key.clone(),
            model: first.model.name.clone(),
            model_reason: first.model_reason.clone(),
            origin: force.origin.clone(),
            max_steps: force.max_steps,
            network_allowed: force.network_allowed,
            workspace: run.workspace.clone(),
            sandbox: std::sync::Arc::clone(&force.sandbox.policy),
            parent_run_id: lineage.parent_run_id.clone(),
            depth: lineage.depth,
            context_id: force.context_id.clone(),
            continues: first.inherited.as_ref().map(|i| i.link.clone()),
            instructions: force
                .instructions
                .as_ref()
                .map(|i| i.files.clone())
                .unwrap_or_default(),
        },
    )
    .await?;
    if let Some(versioned) = &run.versioned {
        rec.record(None, versioned.opened().clone()).await?;
    }
    for notice in &force.sandbox.notices {
        rec.record(
            None,
            runlog::SecurityEvent {
                event_type: notice.event_type.as_str().into(),
                tool: None,
                call_id: None,
                attempted: "run_start".to_owned(),
                error_message: notice.message.clone(),
            },
        )
        .await?;
    }
    record_recruitment(rec, force, team).await
}

/// A resumed run's beginning is in its runlog already: where it goes on from, its
/// workspace again, and the recruitment if it stopped before recording one.
async fn record_resumed(
    rec: Recorder<'_>,
    run: &NewRun,
    force: &TaskForce,
    team: &Team,
    h: &RunHistory,
) -> Result<(), StoreError> {
    rec.record(
        None,
        runlog::RunResumed {
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
        rec.record(None, versioned.opened().clone()).await?;
    }
    // Stopped between `run_start` and `recruitment`: chosen again, recorded now.
    if h.recruitment.is_none() {
        record_recruitment(rec, force, team).await?;
    }
    Ok(())
}

/// How the members' work ended, together.
struct Ended {
    status: fabric_domain::RunStatus,
    payload: Value,
    reason: Option<String>,
    steps: u32,
    usage: fabric_domain::Usage,
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
    fallback: Option<&'a Fallback>,
    /// The run's versioned workspace, checkpointed after each call that may change it.
    versioned: Option<&'a crate::versioned::RunWorkspace>,
    /// The run is a critic's review, its work in its task.
    reviewing: bool,
    /// Whoever started the run, if anyone can answer it.
    person: Option<&'a dyn crate::ports::Person>,
    /// The project's instructions for the members' system prompts (issue #43).
    instructions: Option<&'a fabric_domain::Instructions>,
    /// The run's lifecycle hooks, if any (issue #43).
    hooks: Option<&'a dyn crate::ports::Hooks>,
}

impl Shared<'_> {
    /// A member's system prompt: its specialist's, ended by the project's instructions
    /// unless the specialist opts out (issue #43).
    fn system_message(&self, member: &Member) -> Message {
        let instructions = self
            .instructions
            .filter(|_| member.specialist.project_instructions);
        Message::system(shared_prompt(system_prompt(
            &member.specialist,
            &member.tools,
            member.model.context_window,
            instructions,
        )))
    }

    /// The members' work: a lone specialist's loop (no `pack_index` on its events, the plain
    /// payload as result), or the task force's, merged.
    async fn work(
        &self,
        rec: Recorder<'_>,
        force: &TaskForce,
        team: &Team,
        parallel_recorded: bool,
    ) -> Result<Ended, StoreError> {
        if !team.is_task_force() {
            let outcome = self.member(rec, None, &team.members[0], None).await?;
            return Ok(Ended {
                status: outcome.status,
                payload: outcome.payload,
                reason: outcome.reason,
                steps: outcome.steps,
                usage: outcome.usage,
            });
        }
        let results = match force.mode {
            TaskForceMode::Sequential => self.sequential(rec, &team.members).await?,
            TaskForceMode::Parallel => {
                let limit = force.max_parallel.max(1);
                if !parallel_recorded {
                    rec.record(
                        None,
                        runlog::TaskForceParallel {
                            specialist_ids: team.ids.clone(),
                            max_parallel: limit,
                        },
                    )
                    .await?;
                }
                self.parallel(rec, &team.members, limit).await?
            }
        };
        let status = combined_status(&results);
        let (steps, usage) = totals(&results);
        let payload = if status.has_result() {
            merged_payload(team.mode.as_str(), &results)
        } else {
            Value::Null
        };
        Ok(Ended {
            status,
            payload,
            reason: combined_reason(&results),
            steps,
            usage,
        })
    }

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
        // Boxed, and used up before the loop (below): inline, its 296 bytes were reserved
        // in the member's future for its whole life (issue #45).
        let history = Box::new(self.take_history(index.unwrap_or(0) as usize));
        if let Some(ended) = history.ended {
            return Ok(ended);
        }
        if !history.started {
            self.record_member_start(rec, index, member, tools.as_ref(), handoff)
                .await?;
        }
        let mut messages = vec![self.system_message(member)];
        // A continued conversation: the earlier one, then the new prompt (issue #42).
        if let Some(inherited) = &member.inherited {
            messages.extend(inherited.messages.iter().cloned());
        }
        messages.push(Message::user(self.prompt));
        if let Some((id, payload)) = handoff {
            messages.push(Message::user(handoff_message(id, payload)));
        }
        // A member with a critic works in a staging area: its tools see it as the
        // workspace, and its changes reach the workspace only when the critic approves.
        let staged = match self.open_gate(member, index).await {
            Ok(staged) => staged,
            Err(reason) => {
                return Ok(LoopOutcome {
                    status: fabric_domain::RunStatus::Failed,
                    payload: Value::Null,
                    steps: 0,
                    usage: fabric_domain::Usage::default(),
                    reason: Some(reason.to_string()),
                });
            }
        };
        let member_ctx = self.member_context(member, staged.as_ref());
        // The history is used up here, in a block, and borrowed only there, so nothing of it
        // is held while the loop runs.
        let input = {
            let history = history;
            let gate = staged.as_ref().map(|gate| GateState {
                gate,
                rounds_done: history.critic_rounds,
                repair_on_cloud: history.repair_on_cloud,
                model_key: &member.model_key,
                approved: history.critic_approved,
            });
            Box::new(LoopInput {
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
                person: self.person,
                asked: history.asked,
                answers: history.answers,
                hooks: self.hooks,
                start_hooks: history.start_hooks,
            })
        };
        let outcome = run_loop(member.chat.as_ref(), input, rec).await?;
        // A task-force member's end is its own event (a lone specialist's is the run's), so
        // a continued run does not run a member that had ended; one waiting for a person
        // has not ended.
        if index.is_some() && outcome.status != fabric_domain::RunStatus::InputRequired {
            rec.record(
                None,
                runlog::MemberEnd {
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

    /// The critic's staging area for `member`, if it has a critic; why it could not be
    /// opened otherwise.
    async fn open_gate(
        &self,
        member: &Member,
        index: Option<u32>,
    ) -> Result<Option<CriticGate>, crate::ports::StagingError> {
        let Some(critic) = &member.critic else {
            return Ok(None);
        };
        let branch = self.versioned.map(|v| Arc::clone(v.handle()));
        CriticGate::open(
            critic,
            self.ctx,
            self.prompt,
            &member.specialist.id,
            index,
            branch,
        )
        .await
        .map(Some)
    }

    /// What `member`'s tools run with: the run's context (or the staging area's), and its
    /// model lent to its tools' servers (MCP sampling), in the run's budget.
    fn member_context(&self, member: &Member, staged: Option<&CriticGate>) -> ToolContext {
        let base_ctx = staged.map_or_else(|| self.ctx.clone(), |gate| gate.context(self.ctx));
        ToolContext {
            approved: false,
            sampler: Some(Arc::new(crate::sampling::ModelSampler::new(
                member.chat.clone(),
                member.model.clone(),
                member.model_key.clone(),
                base_ctx.lineage.budget.clone(),
                base_ctx.cancel.clone(),
            ))),
            ..base_ctx
        }
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

    async fn record_member_start(
        &self,
        rec: Recorder<'_>,
        index: Option<u32>,
        member: &Member,
        tools: &dyn ToolSource,
        handoff: Option<(&str, &Value)>,
    ) -> Result<(), StoreError> {
        rec.record(
            None,
            runlog::MemberStart {
                specialist_id: member.specialist.id.clone(),
                member: index.unwrap_or(0),
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
    force: &TaskForce,
    team: &Team,
) -> Result<(), StoreError> {
    if let Some(call) = force.routing_call.as_ref() {
        record_routing_call(rec, call).await?;
    }
    let recruitment = &force.recruitment;
    rec.record(
        None,
        runlog::Recruitment {
            specialist_id: team.ids[0].clone(),
            specialist_ids: team.ids.clone(),
            required_capabilities: recruitment.required_capabilities.clone(),
            routing_method: recruitment.routing_method.clone(),
            reason: recruitment.reason.clone(),
            is_task_force: team.is_task_force(),
            task_force_mode: team.mode.clone(),
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
        runlog::RoutingRequest {
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
        runlog::RoutingResponse {
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
            error: call.outcome.as_ref().err().map(ToString::to_string),
        },
    )
    .await
}
