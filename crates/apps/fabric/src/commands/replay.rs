//! `fabric replay RUN_ID`: re-runs a recorded run with no model server (issue #12). Each
//! model call gets the answer the recording holds; today's specialist, tools and validation
//! do the rest. Where the new run goes another way than the recorded one (other tools
//! offered, a call that now fails, a result that changed, more or fewer steps, another
//! end), that is a divergence, and the exit code is 1.

use fabric_core::history::{RunHistory, response_of};
use fabric_core::service::{ContinueRequest, RunService, ServiceConfig, Submission, TaskRequest};
use fabric_core::{ChatResponse, NoopObserver};
use fabric_domain::runlog;
use fabric_domain::{EventPayload, RunEvent, RunId, RunStatus};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::cli::{Cli, ReplayArgs};
use crate::errors::UsageError;
use crate::offline::{OfflineChats, OfflinePreparer, QueueChat, RecordedVerdict};
use crate::wiring;

/// Exit code when the replay diverged from the recording.
const EXIT_DIVERGED: u8 = 1;

pub(crate) async fn replay(cli: &Cli, args: &ReplayArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    let id = RunId::parse(&args.run_id)
        .map_err(|e| UsageError(format!("`{}` is not a run id: {e}", args.run_id)))?;
    let store = wiring::open_store(&settings).await?;
    let recorded = fabric_core::RunStore::read_events(store.as_ref(), &id)
        .await
        .map_err(|e| UsageError(format!("cannot read run `{id}`: {e}")))?;
    let history = RunHistory::read(id.clone(), &recorded);
    let request = replay_request(&id, &history)?;
    let ids = request.specialists.clone();
    let members = answers_by_member(&recorded, ids.len());
    let tools =
        (args.specialist_from == "recorded").then(|| offered_by_member(&recorded, ids.len()));
    let search = wiring::run_search(&settings, Arc::clone(&store))?;
    let preparer = OfflinePreparer {
        app: crate::app::preparation_with(
            &settings,
            &search,
            crate::daily::off(store.clone()),
            (crate::app::model_servers(&settings), Arc::new(OfflineChats)),
        ),
        members: Mutex::new(Some(members.clone())),
        tools,
        windows: Some(windows_by_member(&recorded, ids.len())),
        interrupted: interrupted_by_member(&recorded, ids.len()),
        verdicts: verdicts_by_member(&recorded, ids.len()),
        // The hooks' recorded decisions, without running a hook (issue #43).
        hooks: Some(Arc::new(crate::offline::RecordedHooks::of(&recorded))),
    };
    let answers: usize = members.iter().map(|q| q.left()).sum();
    let service = wiring::versioned(
        RunService::new(store.clone(), Arc::new(preparer), ServiceConfig::default()),
        &settings,
    );
    // A person's answers and what was said are given again as recorded (issue #42).
    let person = Arc::new(crate::offline::RecordedPerson::of(&recorded));
    let submission = Submission::new(request)
        .observed(Arc::new(NoopObserver))
        .attended(fabric_core::service::WhenAsked::Ask(person));
    let handle = service.submit(submission)?;
    let new_id = handle.id().clone();
    let outcome = handle.outcome().await?;
    service.shutdown(std::time::Duration::from_secs(5)).await;
    if let Err(e) = service.discard_workspace(&new_id).await {
        tracing::warn!(run_id = %new_id, error = %e, "cannot remove the replay's worktree");
    }
    let replayed = fabric_core::RunStore::read_events(store.as_ref(), &new_id).await?;
    let mut divergences = compare(&recorded, &replayed, ids.len());
    divergences.extend(inherited_differently(&recorded, &replayed));
    let unused: usize = members.iter().map(|q| q.left()).sum();
    if unused > 0 {
        divergences.push(format!(
            "the replay ended ({}) with {unused} recorded model answer(s) not asked for",
            outcome.status
        ));
    }
    let recorded_status = recorded.iter().rev().find_map(RunEvent::terminal_status);
    // A recording that ended during a model call ends the replay there too: with no answer
    // to give, the replay's own end (`llm_error`) is that same point, not a divergence.
    let same_point =
        ended_mid_call(&recorded) && unused == 0 && outcome.status == RunStatus::LlmError;
    if let Some(was) = recorded_status
        && was != outcome.status
        && !same_point
    {
        divergences.push(format!(
            "the run ended `{}`; the recording ended `{was}`",
            outcome.status
        ));
    }
    let report = Report {
        id: &id,
        new_id: &new_id,
        status: outcome.status,
        recorded_status,
        answers,
        steps: outcome.steps,
        divergences: &divergences,
    };
    report.print(args.json)?;
    Ok(if divergences.is_empty() {
        0
    } else {
        EXIT_DIVERGED
    })
}

/// The recorded run's request again: its prompt, specialists, model and limits, on its
/// project as it was when it started.
fn replay_request(id: &RunId, history: &RunHistory) -> Result<TaskRequest, UsageError> {
    let Some(recorded) = TaskRequest::recorded(history) else {
        return Err(UsageError(format!(
            "run `{id}` has no `run_start`: there is nothing to replay"
        )));
    };
    if recorded.specialists.is_empty() {
        return Err(UsageError(format!(
            "run `{id}` never recruited a specialist: there is nothing to replay"
        )));
    }
    Ok(TaskRequest {
        // The recorded model by name: no discovery, no server.
        model: history.start.as_ref().map(|s| s.model.clone()),
        // As configured here, and outside any A2A conversation.
        sandbox: None,
        context_id: None,
        origin: fabric_domain::runlog::RunOrigin::Replay,
        // A run on a project is replayed on the project as it was when the run started (its
        // base), in a worktree of its own that is removed after; the user's files are never
        // touched.
        project: history.workspace.as_ref().and_then(|w| {
            Some(fabric_core::service::ProjectRequest {
                // A copied directory is copied again as it is now (it has no history).
                path: w.repo.clone().or_else(|| w.source.clone())?,
                // A continued run started from the earlier run's head (issue #42).
                base: w
                    .repo
                    .as_ref()
                    .map(|_| w.restored_to.clone().unwrap_or_else(|| w.base.clone())),
            })
        }),
        // The same inherited conversation, on a branch of the replay's own: a fork, so the
        // earlier run's branch is never touched (issue #42).
        continues: recorded
            .continues
            .clone()
            .map(|c| ContinueRequest { fork: true, ..c }),
        ..recorded
    })
}

/// The conversation a continued run inherited, when the replay's is not the same (its
/// digest differs: the earlier run's runlog changed, or the rebuilding did; issue #42).
fn inherited_differently(recorded: &[RunEvent], replayed: &[RunEvent]) -> Option<String> {
    let link = |events: &[RunEvent]| {
        events.iter().find_map(|e| match &e.payload {
            EventPayload::RunStart(start) => start.continues.clone(),
            _ => None,
        })
    };
    let (was, now) = (link(recorded)?, link(replayed));
    match now {
        Some(now) if now.digest == was.digest => None,
        Some(now) => Some(format!(
            "the conversation inherited from run `{}` is not the recorded one: {} message(s), digest {}; recorded {} message(s), digest {}",
            was.run_id, now.messages, now.digest, was.messages, was.digest
        )),
        None => Some(format!(
            "the replay did not continue run `{}` as the recording did",
            was.run_id
        )),
    }
}

/// What a replay found, for a person or as JSON.
struct Report<'a> {
    id: &'a RunId,
    new_id: &'a RunId,
    status: RunStatus,
    recorded_status: Option<RunStatus>,
    answers: usize,
    steps: u32,
    divergences: &'a [String],
}

impl Report<'_> {
    fn print(&self, as_json: bool) -> anyhow::Result<()> {
        let Self {
            id,
            new_id,
            status,
            answers,
            steps,
            divergences,
            ..
        } = self;
        if as_json {
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({
                    "run_id": id,
                    "replay_run_id": new_id,
                    "status": status,
                    "recorded_status": self.recorded_status,
                    "divergences": divergences,
                }))?
            );
        } else if divergences.is_empty() {
            println!(
                "replayed {id} as {new_id}: {answers} recorded model answer(s), {steps} step(s), ended {status}: no divergence"
            );
        } else {
            println!(
                "replayed {id} as {new_id}: {} divergence(s):",
                divergences.len()
            );
            for d in *divergences {
                println!("  - {d}");
            }
        }
        Ok(())
    }
}

/// Per member (`pack_index`), the model answers of its loop in the order they came
/// (fallback answers included), as the model would give them again.
fn answers_by_member(events: &[RunEvent], members: usize) -> Vec<Arc<QueueChat>> {
    let mut by: Vec<Vec<ChatResponse>> = vec![Vec::new(); members.max(1)];
    for event in events {
        let EventPayload::LlmResponse(answer) = &event.payload else {
            continue;
        };
        if event.step.is_none() {
            continue;
        }
        let index = event.member.unwrap_or(0) as usize;
        if let Some(list) = by.get_mut(index) {
            list.push(response_of(answer.clone()));
        }
    }
    by.into_iter()
        .map(|a| QueueChat::new(a, "the recording"))
        .collect()
}

/// Per member, the calls recorded as interrupted (`tool_error` of type `interrupted`): the
/// tool, the arguments of its `tool_call`, and the message.
fn interrupted_by_member(events: &[RunEvent], members: usize) -> Vec<Vec<(String, Value, String)>> {
    let mut by = vec![Vec::new(); members.max(1)];
    for event in events {
        let EventPayload::ToolError(error) = &event.payload else {
            continue;
        };
        if error.error_type != runlog::ToolErrorType::Interrupted {
            continue;
        }
        let args = events.iter().find_map(|e| match &e.payload {
            EventPayload::ToolCall(call) if call.call_id == error.call_id => {
                Some(call.args.clone())
            }
            _ => None,
        });
        let index = event.member.unwrap_or(0) as usize;
        if let (Some(args), Some(list)) = (args, by.get_mut(index)) {
            list.push((error.tool.clone(), args, error.error_message.clone()));
        }
    }
    by
}

/// Per member, its critic's verdicts in order: the critic's run and `{approved, findings}`,
/// or how its run ended when it gave none.
fn verdicts_by_member(events: &[RunEvent], members: usize) -> Vec<Vec<RecordedVerdict>> {
    let mut by = vec![Vec::new(); members.max(1)];
    for event in events {
        let EventPayload::CriticReview(review) = &event.payload else {
            continue;
        };
        let index = event.member.unwrap_or(0) as usize;
        if let Some(list) = by.get_mut(index) {
            list.push(RecordedVerdict {
                run_id: review.critic_run_id.clone(),
                payload: json!({"approved": review.approved, "findings": review.findings}),
                status: review.critic_status.unwrap_or(RunStatus::Completed),
                reason: review.critic_reason.clone(),
            });
        }
    }
    by
}

/// Per member, the context window its `pack_start` recorded.
fn windows_by_member(events: &[RunEvent], members: usize) -> Vec<Option<u32>> {
    let mut by = vec![None; members.max(1)];
    for event in events {
        if let EventPayload::MemberStart(start) = &event.payload
            && let Some(slot) = by.get_mut(start.member as usize)
        {
            *slot = start.context_window;
        }
    }
    by
}

/// Whether the recording ended during a model call (it was cancelled, ran out of time, or
/// its process stopped): the replay runs out of answers at the same point.
fn ended_mid_call(events: &[RunEvent]) -> bool {
    let calls = events
        .iter()
        .filter(|e| matches!(e.payload, EventPayload::LlmRequest(_)) && e.step.is_some())
        .count();
    let answers = events
        .iter()
        .filter(|e| matches!(e.payload, EventPayload::LlmResponse(_)) && e.step.is_some())
        .count();
    calls > answers
}

/// Per member, the tools its `pack_start` offered.
fn offered_by_member(events: &[RunEvent], members: usize) -> Vec<Vec<String>> {
    let mut by = vec![Vec::new(); members.max(1)];
    for event in events {
        if let EventPayload::MemberStart(start) = &event.payload
            && let Some(slot) = by.get_mut(start.member as usize)
        {
            slot.clone_from(&start.tools);
        }
    }
    by
}

/// How one call ended, as compared.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Result(Value),
    Error(String, String),
}

type Calls = BTreeMap<(usize, u32, String), (String, Outcome)>;

/// Each call's outcome, by member, step and call id.
fn calls(events: &[RunEvent]) -> Calls {
    let mut out = BTreeMap::new();
    for event in events {
        let member = event.member.unwrap_or(0) as usize;
        let step = event.step.unwrap_or(0);
        if let EventPayload::ToolResult(r) = &event.payload {
            out.insert(
                (member, step, r.call_id.clone()),
                (r.tool.clone(), Outcome::Result(stable(r.result.clone()))),
            );
        }
        if let EventPayload::ToolError(e) = &event.payload {
            out.insert(
                (member, step, e.call_id.clone()),
                (
                    e.tool.clone(),
                    Outcome::Error(e.error_type.to_string(), e.error_message.clone()),
                ),
            );
        }
    }
    out
}

/// A result with what legitimately changes between runs left out (`fetched_at` times).
fn stable(result: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.remove("fetched_at");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    // Tool results are recorded as text; JSON text is compared as JSON.
    let mut value = match &result {
        Value::String(text) => serde_json::from_str(text).unwrap_or(result),
        _ => result,
    };
    strip(&mut value);
    value
}

/// Where the replayed events go another way than the recorded ones.
fn compare(recorded: &[RunEvent], replayed: &[RunEvent], members: usize) -> Vec<String> {
    let mut out = Vec::new();
    let (was, now) = (
        offered_by_member(recorded, members),
        offered_by_member(replayed, members),
    );
    for (i, (was, now)) in was.iter().zip(&now).enumerate() {
        let added: Vec<&String> = now.iter().filter(|t| !was.contains(t)).collect();
        let gone: Vec<&String> = was.iter().filter(|t| !now.contains(t)).collect();
        if !added.is_empty() || !gone.is_empty() {
            out.push(format!(
                "member {i} was offered other tools: new {added:?}, gone {gone:?}"
            ));
        }
    }
    let (was, now) = (calls(recorded), calls(replayed));
    let shown = |v: &Outcome| {
        let text = match v {
            Outcome::Result(r) => r.to_string(),
            Outcome::Error(kind, message) => format!("{kind}: {message}"),
        };
        crate::render::one_line(&text, 160)
    };
    for (key, (tool, outcome)) in &was {
        let (member, step, call) = key;
        let at = format!("step {} (member {member}, call {call}), `{tool}`", step + 1);
        match now.get(key) {
            None => out.push(format!("{at}: not called in the replay")),
            Some((_, new)) if new == outcome => {}
            Some((_, Outcome::Error(kind, message))) if kind == "invalid_args" => {
                out.push(format!(
                    "{at}: a validation now fails: {}",
                    crate::render::one_line(message, 200)
                ))
            }
            Some((_, new)) => out.push(format!(
                "{at}: the result changed: recorded {}, now {}",
                shown(outcome),
                shown(new)
            )),
        }
    }
    for (key, (tool, _)) in &now {
        if !was.contains_key(key) {
            let (member, step, call) = key;
            out.push(format!(
                "step {} (member {member}, call {call}): `{tool}` was called in the replay, not in the recording",
                step + 1
            ));
        }
    }
    out
}
