//! `fabric eval [SUITE]`: runs a suite of tasks against real model keys, each task
//! `--repeat` times, and prints per model key the success rate, steps, tokens, wall time and
//! how much of each prompt the server's cache served (issue #24; docs/LOCAL_MODELS.md). How a
//! user picks a local model for a specialist, and how the loop's aids are measured.
//!
//! A task's success is judged by its effects only: files in the workspace, commands run
//! there afterwards, fields of the payload, the status. Each run is an ordinary run (kept,
//! listed, replayable); the report names them and is also written as JSON under
//! `<workspace root>/evals/`.

use anyhow::Context;
use fabric_core::service::{RunService, ServiceConfig, Submission, TaskRequest};
use fabric_core::{NewRun, NoopObserver, RunQuery, RunStore, StoreError};
use fabric_domain::{EventPayload, RunEvent, RunId, RunSummary};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::cli::{Cli, EvalArgs};
use crate::errors::UsageError;
use crate::wiring;

/// The suite run when none is given.
const BUILTIN_SUITE: &str = include_str!("../../evals/engineering.yaml");

/// A suite file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Suite {
    /// Shown in the report; the file name when absent.
    name: Option<String>,
    tasks: Vec<EvalTask>,
}

/// One task of a suite.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EvalTask {
    name: String,
    prompt: String,
    /// Default `engineering`.
    specialist: Option<String>,
    max_steps: Option<u32>,
    /// Files the workspace holds before the run: path → content.
    #[serde(default)]
    files: BTreeMap<String, String>,
    #[serde(default)]
    expect: Expect,
}

/// What a successful run leaves behind; each is checked only when given.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    /// The status (default `completed`).
    status: Option<String>,
    #[serde(default)]
    files: BTreeMap<String, TextCheck>,
    /// Fields of the finish payload.
    #[serde(default)]
    payload: BTreeMap<String, TextCheck>,
    /// Commands (argv) run in the workspace afterwards; each must exit 0.
    #[serde(default)]
    commands: Vec<Vec<String>>,
}

/// A check of one text.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TextCheck {
    equals: Option<String>,
    contains: Option<String>,
    lacks: Option<String>,
    /// The file must not exist.
    #[serde(default)]
    absent: bool,
}

/// One run of one task, as the report shows it.
#[derive(Debug, Serialize)]
struct Attempt {
    task: String,
    run_id: RunId,
    status: String,
    passed: bool,
    failures: Vec<String>,
    steps: u32,
    tokens: u64,
    wall_ms: u64,
    /// Time the model server took: the `latency_ms` of each answer, and the time of each
    /// call that got none (it failed) until the next event.
    model_ms: u64,
    /// Prompt tokens the server took from its cache, and evaluated anew, after the first
    /// step (when it reports them).
    cached_tokens: u64,
    evaluated_tokens: u64,
}

/// One model key's figures.
#[derive(Debug, Serialize)]
struct KeyReport {
    model_key: String,
    runs: usize,
    passed: usize,
    success_rate: f64,
    mean_steps: f64,
    mean_tokens: f64,
    mean_wall_s: f64,
    /// Share of prompt tokens served from the cache after each run's first step; `None`
    /// when the server does not report it.
    cache_hit_rate: Option<f64>,
    /// Share of the wall time not spent waiting for the model (the fabric and the tools).
    outside_model_share: f64,
    attempts: Vec<Attempt>,
}

pub(crate) async fn eval(cli: &Cli, args: &EvalArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    let (suite, source) = load_suite(args.suite.as_deref())?;
    let suite_name = suite.name.clone().unwrap_or(source);
    for task in &suite.tasks {
        let id = task.specialist.as_deref().unwrap_or("engineering");
        if settings.specialist(id).is_none() {
            return Err(UsageError(format!(
                "task `{}`: no specialist `{id}`; the specialists are: {}",
                task.name,
                settings.specialist_ids().join(", ")
            ))
            .into());
        }
    }
    let keys = if args.model_key.is_empty() {
        vec![settings.default_model_key.clone()]
    } else {
        args.model_key.clone()
    };
    for key in &keys {
        if settings.model(key).is_none() {
            return Err(UsageError(format!(
                "no model key `{key}`; the configured keys are: {}",
                settings.model_keys().join(", ")
            ))
            .into());
        }
    }
    let mut seeded = None;
    let fabric = wiring::fabric_over(&settings, ServiceConfig::default(), |store| {
        let wrapped = Arc::new(SeededStore {
            inner: store,
            next: Mutex::default(),
        });
        seeded = Some(Arc::clone(&wrapped));
        wrapped
    })
    .await?;
    let seeded = seeded.context("the run store was not opened")?;
    let service = fabric.service.clone();
    let mut reports = Vec::new();
    for key in &keys {
        let mut attempts = Vec::new();
        for round in 0..args.repeat.max(1) {
            for task in &suite.tasks {
                if !args.json {
                    eprintln!(
                        "{key} · {} · {}/{}",
                        task.name,
                        round + 1,
                        args.repeat.max(1)
                    );
                }
                attempts.push(attempt(&service, &seeded, key, task).await?);
            }
        }
        reports.push(summarise(key, attempts));
    }
    service.shutdown(super::follow::EMBED_GRACE).await;
    let report = serde_json::json!({"suite": suite_name, "repeat": args.repeat.max(1), "model_keys": reports});
    let saved = save_report(&settings.workspace, &suite_name, &report);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&suite_name, &reports);
        match saved {
            Ok(path) => println!("report: {}", path.display()),
            Err(e) => eprintln!("the report could not be saved: {e:#}"),
        }
    }
    Ok(0)
}

/// The suite at `path`, or the built-in one.
fn load_suite(path: Option<&Path>) -> anyhow::Result<(Suite, String)> {
    let (text, file) = match path {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(|e| UsageError(format!("cannot read {}: {e}", path.display())))?,
            path.to_path_buf(),
        ),
        None => (BUILTIN_SUITE.to_owned(), PathBuf::from("engineering.yaml")),
    };
    let suite: Suite = fabric_config::parse_document(&text, &file)?;
    if suite.tasks.is_empty() {
        return Err(UsageError(format!("{}: the suite has no tasks", file.display())).into());
    }
    let name = file
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    Ok((suite, name))
}

/// Runs one task once on one model key and judges it.
async fn attempt(
    service: &RunService,
    seeded: &SeededStore,
    key: &str,
    task: &EvalTask,
) -> anyhow::Result<Attempt> {
    *seeded.next.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.files.clone());
    let request = TaskRequest {
        prompt: task.prompt.clone(),
        specialists: vec![
            task.specialist
                .clone()
                .unwrap_or_else(|| "engineering".into()),
        ],
        model_key: Some(key.to_owned()),
        max_steps: task.max_steps,
        // Kept out of `logs list` and `stats` unless asked (issue #24).
        origin: fabric_domain::runlog::RunOrigin::Eval,
        ..TaskRequest::default()
    };
    let started = Instant::now();
    let handle = service.submit(Submission::new(request).observed(Arc::new(NoopObserver)))?;
    let run_id = handle.id().clone();
    let outcome = handle.outcome().await?;
    let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let events = seeded.inner.read_events(&run_id).await?;
    let mut failures = judge(&task.expect, &outcome).await;
    if outcome.status.as_str() != task.expect.status.as_deref().unwrap_or("completed") {
        failures.insert(
            0,
            format!(
                "status `{}`{}",
                outcome.status,
                outcome
                    .reason
                    .as_deref()
                    .map(|r| format!(": {}", crate::render::one_line(r, 160)))
                    .unwrap_or_default()
            ),
        );
    }
    let (model_ms, cached, evaluated) = model_figures(&events);
    Ok(Attempt {
        task: task.name.clone(),
        run_id,
        status: outcome.status.as_str().to_owned(),
        passed: failures.is_empty(),
        failures,
        steps: outcome.steps,
        tokens: outcome.usage.total_tokens,
        wall_ms,
        model_ms,
        cached_tokens: cached,
        evaluated_tokens: evaluated,
    })
}

/// What of the expectations does not hold, in words (the status is judged by the caller).
async fn judge(expect: &Expect, outcome: &fabric_core::execute::RunOutcome) -> Vec<String> {
    let mut failures = Vec::new();
    for (file, check) in &expect.files {
        let text = tokio::fs::read_to_string(outcome.workspace.join(file))
            .await
            .ok();
        match (check.absent, text) {
            (true, Some(_)) => failures.push(format!("file `{file}` should not exist")),
            (true, None) => {}
            (false, None) => failures.push(format!("file `{file}` is missing")),
            (false, Some(text)) => {
                failures.extend(check.judge(&text).map(|why| format!("file `{file}` {why}")))
            }
        }
    }
    // The finish payload the task expects fields of.
    let finished = &outcome.payload;
    for (field, check) in &expect.payload {
        let text = match finished.get(field) {
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
            None => {
                failures.push(format!("payload.{field} is missing"));
                continue;
            }
        };
        failures.extend(
            check
                .judge(&text)
                .map(|why| format!("payload.{field} {why}")),
        );
    }
    for argv in &expect.commands {
        let Some((program, rest)) = argv.split_first() else {
            continue;
        };
        let output = tokio::process::Command::new(program)
            .args(rest)
            .current_dir(&outcome.workspace)
            .kill_on_drop(true)
            .output()
            .await;
        match output {
            Ok(out) if out.status.success() => {}
            Ok(out) => failures.push(format!(
                "`{}` failed ({}): {}",
                argv.join(" "),
                out.status,
                crate::render::one_line(&String::from_utf8_lossy(&out.stderr), 160)
            )),
            Err(e) => failures.push(format!("`{}` could not start: {e}", argv.join(" "))),
        }
    }
    failures
}

impl TextCheck {
    /// Why `text` fails the check, if it does.
    fn judge(&self, text: &str) -> Option<String> {
        let shown = || crate::render::one_line(text, 80);
        if let Some(want) = &self.equals
            && text.trim_end() != want.trim_end()
        {
            return Some(format!("is {:?}, not {want:?}", shown()));
        }
        if let Some(want) = &self.contains
            && !text.contains(want.as_str())
        {
            return Some(format!("lacks {want:?} (it is {:?})", shown()));
        }
        if let Some(banned) = &self.lacks
            && text.contains(banned.as_str())
        {
            return Some(format!("still has {banned:?}"));
        }
        None
    }
}

/// Milliseconds the model took, and the prompt tokens its cache served and evaluated after
/// the first step, from the runlog's `llm_request`s and `llm_response`s. A call answered
/// counts its `latency_ms`; one that failed (no `llm_response` follows its `llm_request`)
/// counts until the next event, the run's end or its fallback (issue #40: it counted as
/// time outside the model).
fn model_figures(events: &[RunEvent]) -> (u64, u64, u64) {
    let (mut model_ms, mut cached, mut evaluated) = (0.0, 0, 0);
    let mut answers = 0;
    // When the call under way was asked.
    let mut asked: Option<f64> = None;
    for event in events {
        if let EventPayload::LlmResponse(p) = &event.payload {
            asked = None;
            model_ms += p.latency_ms;
            if let (true, Some(cache)) = (answers > 0, p.prompt_cache) {
                cached += cache.cached_tokens;
                evaluated += cache.evaluated_tokens;
            }
            answers += 1;
            continue;
        }
        if let Some(at) = asked.take() {
            model_ms += (event.ts - at).max(0.0) * 1000.0;
        }
        if matches!(event.payload, EventPayload::LlmRequest(_)) {
            asked = Some(event.ts);
        }
    }
    (model_ms as u64, cached, evaluated)
}

fn summarise(key: &str, attempts: Vec<Attempt>) -> KeyReport {
    let runs = attempts.len();
    let passed = attempts.iter().filter(|a| a.passed).count();
    let mean = |f: &dyn Fn(&Attempt) -> f64| {
        if runs == 0 {
            0.0
        } else {
            attempts.iter().map(f).sum::<f64>() / runs as f64
        }
    };
    let (cached, evaluated) = attempts.iter().fold((0, 0), |(c, e), a| {
        (c + a.cached_tokens, e + a.evaluated_tokens)
    });
    let wall: u64 = attempts.iter().map(|a| a.wall_ms).sum();
    let model: u64 = attempts.iter().map(|a| a.model_ms).sum();
    KeyReport {
        model_key: key.to_owned(),
        runs,
        passed,
        success_rate: if runs == 0 {
            0.0
        } else {
            passed as f64 / runs as f64
        },
        mean_steps: mean(&|a| f64::from(a.steps)),
        mean_tokens: mean(&|a| a.tokens as f64),
        mean_wall_s: mean(&|a| a.wall_ms as f64 / 1000.0),
        cache_hit_rate: (cached + evaluated > 0)
            .then(|| cached as f64 / (cached + evaluated) as f64),
        outside_model_share: if wall == 0 {
            0.0
        } else {
            wall.saturating_sub(model) as f64 / wall as f64
        },
        attempts,
    }
}

fn print_table(suite: &str, reports: &[KeyReport]) {
    println!("suite {suite}");
    println!(
        "{:<16} {:>9} {:>8} {:>7} {:>9} {:>8} {:>7} {:>9}",
        "model key", "success", "passed", "steps", "tokens", "wall s", "cache", "outside"
    );
    for r in reports {
        println!(
            "{:<16} {:>8.0}% {:>4}/{:<3} {:>7.1} {:>9.0} {:>8.1} {:>7} {:>8.1}%",
            r.model_key,
            r.success_rate * 100.0,
            r.passed,
            r.runs,
            r.mean_steps,
            r.mean_tokens,
            r.mean_wall_s,
            r.cache_hit_rate
                .map_or_else(|| "-".to_owned(), |h| format!("{:.0}%", h * 100.0)),
            r.outside_model_share * 100.0
        );
        for a in r.attempts.iter().filter(|a| !a.passed) {
            println!(
                "  FAIL {} (run {}): {}",
                a.task,
                a.run_id,
                a.failures.join("; ")
            );
        }
    }
}

/// Writes the report under `<root>/evals/`, named by time and suite.
fn save_report(root: &Path, suite: &str, report: &Value) -> anyhow::Result<PathBuf> {
    let dir = root.join("evals");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let t = fabric_domain::UtcTime::from_unix(now);
    let stamp = format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    );
    let safe: String = suite
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = dir.join(format!("{stamp}-{safe}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(report)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The store, placing a task's files in the workspace of the next run it creates.
struct SeededStore {
    inner: Arc<dyn RunStore>,
    next: Mutex<Option<BTreeMap<String, String>>>,
}

#[async_trait::async_trait]
impl RunStore for SeededStore {
    async fn create_run(&self, id: RunId) -> Result<NewRun, StoreError> {
        let run = self.inner.create_run(id).await?;
        let files = self.next.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(files) = files {
            let workspace = run.workspace.clone();
            let failed = |detail: String| StoreError::Io {
                action: "cannot place the task's files in",
                path: run.workspace.clone(),
                detail,
            };
            tokio::task::spawn_blocking(move || seed(&workspace, &files))
                .await
                .map_err(|e| failed(e.to_string()))?
                .map_err(|e| failed(e.to_string()))?;
        }
        Ok(run)
    }
    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<RunSummary>, StoreError> {
        self.inner.list_runs(query).await
    }
    async fn get_run(&self, id: &RunId) -> Result<RunSummary, StoreError> {
        self.inner.get_run(id).await
    }
    async fn read_events(&self, id: &RunId) -> Result<Vec<RunEvent>, StoreError> {
        self.inner.read_events(id).await
    }
    fn runlog_path(&self, id: &RunId) -> Option<PathBuf> {
        self.inner.runlog_path(id)
    }
    async fn flush(&self) {
        self.inner.flush().await;
    }
}

/// Writes `files` (relative paths) into `workspace`.
fn seed(workspace: &Path, files: &BTreeMap<String, String>) -> std::io::Result<()> {
    for (path, content) in files {
        let relative = Path::new(path);
        if relative.is_absolute()
            || relative
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(std::io::Error::other(format!(
                "the file `{path}` of a task must be a path inside the workspace"
            )));
        }
        let target = workspace.join(relative);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(target, content)?;
    }
    Ok(())
}
