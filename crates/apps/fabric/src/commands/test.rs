//! `fabric test [PATH]`: runs scenario files against the user's specialists with no model
//! server (issue #12; docs/TESTING.md). A scenario scripts the model's answers (the scripted
//! server's turn format) and says what must come of them: the status, files in the
//! workspace, the tools called, fields of the payload. Prints `N passed, N failed`; exits 1
//! when any failed.

use fabric_core::service::{RunService, ServiceConfig, Submission, TaskRequest};
use fabric_core::{ChatResponse, NoopObserver};
use fabric_domain::{EventPayload, ToolCall, Usage};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::cli::{Cli, TestArgs};
use crate::errors::UsageError;
use crate::offline::{OfflineChats, OfflinePreparer, QueueChat};
use crate::wiring;

/// One scenario file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Scenario {
    /// Shown in the report; the file name when absent.
    name: Option<String>,
    /// The specialist under test.
    specialist: String,
    /// The task it is given.
    prompt: String,
    /// The step limit (the config's when absent).
    max_steps: Option<u32>,
    /// The model's answers, in order (the scripted server's turn format).
    turns: Vec<Turn>,
    /// What must come of it.
    #[serde(default)]
    expect: Expect,
}

/// One scripted answer: text and/or tool calls.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Turn {
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<TurnCall>,
    usage: Option<TurnUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnCall {
    name: String,
    #[serde(default = "empty_object")]
    arguments: Value,
    id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

fn empty_object() -> Value {
    json!({})
}

/// The expectations; each is checked only when given.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    /// The run's status (default `completed`).
    status: Option<String>,
    /// Files in the workspace afterwards: the exact content, or `null` for "must not exist".
    #[serde(default)]
    files: BTreeMap<String, Option<String>>,
    /// The tools the run called, in order (`finish_task` included).
    tool_calls: Option<Vec<String>>,
    /// Fields the finish payload must have, with these values.
    #[serde(default)]
    payload: BTreeMap<String, Value>,
}

impl Turn {
    fn answer(self, n: usize) -> ChatResponse {
        ChatResponse {
            content: self.content,
            tool_calls: self
                .tool_calls
                .into_iter()
                .enumerate()
                .map(|(i, c)| ToolCall {
                    id: c.id.unwrap_or_else(|| format!("call_{n}_{i}")),
                    name: c.name,
                    arguments: c.arguments.to_string(),
                })
                .collect(),
            usage: self.usage.map(|u| {
                Usage::from_counts(
                    u.prompt_tokens.unwrap_or(0),
                    u.completion_tokens.unwrap_or(0),
                    None,
                )
            }),
            finish_reason: None,
            queued_ms: None,
            prompt_cache: None,
            constrained: false,
        }
    }
}

/// The preparer of a scenario's run: its answers, in order, and the configured hooks.
fn scenario_preparer(
    settings: &fabric_config::Settings,
    search: &fabric_core::search::RunSearch,
    store: &Arc<fabric_store_sql::SqlStore>,
    answers: Vec<ChatResponse>,
) -> OfflinePreparer {
    OfflinePreparer {
        app: crate::app::preparation_with(
            settings,
            search,
            crate::daily::off(store.clone()),
            (crate::app::model_servers(settings), Arc::new(OfflineChats)),
        ),
        members: Mutex::new(Some(vec![QueueChat::new(answers, "the scenario")])),
        tools: None,
        windows: None,
        interrupted: Vec::new(),
        verdicts: Vec::new(),
        hooks: None,
    }
}

pub(crate) async fn test(cli: &Cli, args: &TestArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    let path = args
        .path
        .clone()
        .unwrap_or_else(|| settings.workspace.join("tests"));
    let files = scenario_files(&path)?;
    if files.is_empty() {
        return Err(UsageError(format!(
            "no scenario files (*.yaml, *.yml, *.json) in {}; see docs/TESTING.md",
            path.display()
        ))
        .into());
    }
    let store = wiring::open_store(&settings).await?;
    let search = wiring::run_search(&settings, Arc::clone(&store))?;
    let mut results = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| UsageError(format!("cannot read {}: {e}", file.display())))?;
        let scenario: Scenario = fabric_config::parse_document(&text, file)?;
        if settings.specialist(&scenario.specialist).is_none() {
            return Err(UsageError(format!(
                "{}: no specialist `{}`; the specialists are: {}",
                file.display(),
                scenario.specialist,
                settings.specialist_ids().join(", ")
            ))
            .into());
        }
        let name = scenario.name.clone().unwrap_or_else(|| {
            file.file_stem()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned())
        });
        let expect = &scenario.expect;
        let answers: Vec<ChatResponse> = scenario
            .turns
            .into_iter()
            .enumerate()
            .map(|(n, t)| t.answer(n))
            .collect();
        let preparer = scenario_preparer(&settings, &search, &store, answers);
        let service = RunService::new(store.clone(), Arc::new(preparer), ServiceConfig::default());
        let request = TaskRequest {
            prompt: scenario.prompt.clone(),
            specialists: vec![scenario.specialist.clone()],
            // No discovery and no server: the name only labels the runlog.
            model: Some("scenario".to_owned()),
            max_steps: scenario.max_steps,
            origin: fabric_domain::runlog::RunOrigin::Test,
            ..TaskRequest::default()
        };
        let handle = service.submit(Submission::new(request).observed(Arc::new(NoopObserver)))?;
        let run_id = handle.id().clone();
        let outcome = handle.outcome().await?;
        service.shutdown(std::time::Duration::from_secs(5)).await;
        let events = fabric_core::RunStore::read_events(store.as_ref(), &run_id).await?;
        let failures = check(expect, &outcome, &events);
        results.push((name, run_id, failures));
    }
    let failed = results.iter().filter(|(_, _, f)| !f.is_empty()).count();
    let passed = results.len() - failed;
    if args.json {
        let list: Vec<Value> = results
            .iter()
            .map(|(name, run, failures)| json!({"name": name, "run_id": run, "passed": failures.is_empty(), "failures": failures}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"passed": passed, "failed": failed, "scenarios": list})
            )?
        );
    } else {
        for (name, run, failures) in &results {
            if failures.is_empty() {
                println!("ok    {name}");
            } else {
                println!("FAIL  {name} (run {run})");
                for f in failures {
                    println!("        {f}");
                }
            }
        }
        println!("{passed} passed, {failed} failed");
    }
    Ok(u8::from(failed > 0))
}

/// The scenario files at `path`: the file itself, or a directory's, in name order.
fn scenario_files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path)
        .map_err(|e| UsageError(format!("cannot read {}: {e}", path.display())))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// What of the expectations does not hold, in words.
fn check(
    expect: &Expect,
    outcome: &fabric_core::execute::RunOutcome,
    events: &[fabric_domain::RunEvent],
) -> Vec<String> {
    let mut failures = Vec::new();
    let status = expect.status.as_deref().unwrap_or("completed");
    if outcome.status.as_str() != status {
        failures.push(format!(
            "status: expected `{status}`, got `{}`{}",
            outcome.status,
            outcome
                .reason
                .as_deref()
                .map(|r| format!(" ({})", crate::render::one_line(r, 200)))
                .unwrap_or_default()
        ));
    }
    for (file, want) in &expect.files {
        let got = std::fs::read_to_string(outcome.workspace.join(file)).ok();
        match (want, got) {
            (Some(want), Some(got)) if *want == got => {}
            (None, None) => {}
            (Some(_), None) => {
                failures.push(format!("file `{file}`: expected, not in the workspace"))
            }
            (None, Some(_)) => {
                failures.push(format!("file `{file}`: expected absent, but it exists"))
            }
            (Some(want), Some(got)) => failures.push(format!(
                "file `{file}`: expected {:?}, got {:?}",
                crate::render::one_line(want, 120),
                crate::render::one_line(&got, 120)
            )),
        }
    }
    if let Some(want) = &expect.tool_calls {
        let got: Vec<String> = events
            .iter()
            .filter_map(|e| match &e.payload {
                EventPayload::ToolCall(call) => Some(call.tool.clone()),
                _ => None,
            })
            .collect();
        if &got != want {
            failures.push(format!("tool_calls: expected {want:?}, got {got:?}"));
        }
    }
    // The finish payload the scenario expects fields of.
    let finished = &outcome.payload;
    for (field, want) in &expect.payload {
        let got = finished.get(field);
        if got != Some(want) {
            failures.push(format!(
                "payload.{field}: expected {want}, got {}",
                got.map_or_else(|| "nothing".to_owned(), Value::to_string)
            ));
        }
    }
    failures
}
