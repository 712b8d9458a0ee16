//! `fabric doctor`: one line per check, each with the fix when it fails.

use fabric_config::{Backend, Routing, Settings};
use fabric_core::models::choose_model;
use std::sync::Arc;
use std::time::Duration;

use crate::cli::Cli;
use crate::wiring;

/// How one check came out.
enum Verdict {
    Ok,
    Warn,
    Fail,
    /// Nothing to check (said so that the absence of a line is not a mystery).
    Skip,
}

struct Report {
    failed: bool,
}

impl Report {
    fn line(&mut self, verdict: Verdict, check: &str, detail: &str) {
        let tag = match verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Skip => "skip",
            Verdict::Fail => {
                self.failed = true;
                "FAIL"
            }
        };
        println!("[{tag}] {check}: {detail}");
    }
}

pub(crate) async fn doctor(cli: &Cli) -> anyhow::Result<u8> {
    let mut report = Report { failed: false };
    let settings = match wiring::load_settings(cli) {
        Ok(s) => {
            let source = s.source.as_ref().map_or_else(
                || "built-in defaults".to_owned(),
                |p| p.display().to_string(),
            );
            report.line(Verdict::Ok, "config", &format!("valid ({source})"));
            s
        }
        Err(e) => {
            report.line(
                Verdict::Fail,
                "config",
                &format!("{e:#}; fix it, then run `fabric config validate`"),
            );
            return Ok(1);
        }
    };
    for (key, users) in model_users(&settings) {
        model_checks(&settings, &key, &users.join(", "), &mut report).await;
    }
    store_check(&settings, &mut report).await;
    embedding_check(&settings, &mut report).await;
    sandbox_checks(&settings, &mut report);
    container_checks(&settings, &mut report).await;
    git_check(&settings, &mut report).await;
    open_files_check(&settings, &mut report);
    Ok(if report.failed { 1 } else { 0 })
}

/// Whether the hard open-files limit holds `server.max_runs_in_flight` runs (ADR-132). This
/// process has already raised its soft limit as `fabric serve` does, so the limit read is the
/// one a server started here gets.
fn open_files_check(settings: &Settings, report: &mut Report) {
    let runs = settings.server.max_runs_in_flight as u64;
    match crate::open_files::current() {
        None => report.line(Verdict::Ok, "open files", "no limit"),
        Some(limit) => match crate::open_files::shortfall(limit, runs, "server.max_runs_in_flight") {
            Some(said) => report.line(
                Verdict::Warn,
                "open files",
                said.trim_start_matches("warning: "),
            ),
            None => report.line(
                Verdict::Ok,
                "open files",
                &format!(
                    "{limit} for a serving fabric, enough for about {} runs in flight (server.max_runs_in_flight: {runs})",
                    crate::open_files::runs_that_fit(limit)
                ),
            ),
        },
    }
}

/// Runs on a project (and versioned scratch workspaces) need git 2.40 or newer: a warning
/// without it, a failure when the config versions every run.
async fn git_check(settings: &Settings, report: &mut Report) {
    let needed = settings.store.workspace_history || settings.store.workspace_remote.is_some();
    match fabric_workspace_git::GitWorkspaces::new().check().await {
        Ok(()) => report.line(
            Verdict::Ok,
            "git",
            "usable: runs on a project (`--project`) and versioned workspaces work (docs/PROJECTS.md)",
        ),
        Err(e) => report.line(
            if needed { Verdict::Fail } else { Verdict::Warn },
            "git",
            &format!("{e}; without it `--project` runs are refused (docs/PROJECTS.md)"),
        ),
    }
}

/// The run store opens and is migrated.
async fn store_check(settings: &Settings, report: &mut Report) {
    match wiring::open_store(settings).await {
        Ok(store) => report.line(
            Verdict::Ok,
            "store",
            &format!(
                "{} (docs/STORE.md)",
                fabric_core::RunCatalog::describe(store.as_ref())
            ),
        ),
        Err(e) => report.line(Verdict::Fail, "store", &format!("{e:#}")),
    }
}

/// The embedding model of `run_index` answers one embedding request.
async fn embedding_check(settings: &Settings, report: &mut Report) {
    let Some(key) = &settings.run_index.embedding_model_key else {
        report.line(
            Verdict::Skip,
            "embeddings model",
            "none configured (`run_index.embedding_model_key`): `fabric logs search` ranks by text only",
        );
        return;
    };
    let model = &settings.run_index.embedding_model;
    let label = format!("embeddings model `{model}` (key `{key}`)");
    let client = match settings.model(key).map(wiring::embedding_client) {
        Some(Ok(client)) => client,
        Some(Err(e)) => return report.line(Verdict::Fail, &label, &format!("{e:#}")),
        None => {
            return report.line(
                Verdict::Fail,
                &label,
                "the key is not under `models`; add it or change `run_index.embedding_model_key`",
            );
        }
    };
    let probe = tokio::time::timeout(
        Duration::from_secs(10),
        client.embed(model, &["agent-fabric doctor".to_owned()]),
    )
    .await;
    match probe {
        Ok(Ok(vectors)) => report.line(
            Verdict::Ok,
            &label,
            &format!(
                "answers ({} dimensions); runs are searched by meaning too",
                vectors.first().map_or(0, Vec::len)
            ),
        ),
        Ok(Err(e)) => report.line(
            Verdict::Warn,
            &label,
            &format!("{e}; runs are still found by text, and embedded later by `fabric index rebuild`"),
        ),
        Err(_) => report.line(
            Verdict::Warn,
            &label,
            "no answer within 10 s; runs are still found by text, and embedded later by `fabric index rebuild`",
        ),
    }
}

/// Every model key a run can use, in a stable order (the default, the routing model, then
/// the specialists' keys in configuration order), each with who uses it.
fn model_users(settings: &Settings) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut add = |key: &str, user: String| match out.iter_mut().find(|(k, _)| k == key) {
        Some((_, users)) => users.push(user),
        None => out.push((key.to_owned(), vec![user])),
    };
    add(&settings.default_model_key, "the default".to_owned());
    if settings.routing == Routing::Llm {
        add(&settings.routing_model_key, "LLM routing".to_owned());
    }
    for spec in &settings.specialists {
        if let Some(key) = &spec.model_key {
            add(key, format!("specialist `{}`", spec.id));
        }
    }
    out
}

async fn model_checks(settings: &Settings, key: &str, users: &str, report: &mut Report) {
    let label = format!("model `{key}`");
    let Some(model) = settings.model(key) else {
        // The config loader refuses unknown keys; say so rather than skip silently.
        report.line(
            Verdict::Fail,
            &label,
            &format!("used by {users} but not configured; add it under `models`"),
        );
        return;
    };
    if let Err(e) = fabric_llm::probe(&model.base_url, Duration::from_secs(3)).await {
        let (what, fix) = unreachable_fix(settings, key, model, &e);
        report.line(
            Verdict::Fail,
            &format!("{label} server"),
            &format!("{what} (used by {users}); {fix}"),
        );
        return;
    }
    report.line(
        Verdict::Ok,
        &format!("{label} server"),
        &format!("{} answers (used by {users})", model.base_url),
    );
    // Listing only: nothing is started or pulled, so nothing is shown on the way.
    let servers = fabric_llm::ModelServers::new(settings, Arc::new(fabric_llm::LoggedNotices));
    if model.backend == Backend::Anthropic {
        anthropic_checks(&servers, (key, model), &label, report).await;
        return;
    }
    // A key that names `api_key_env` needs it set: runs on it are refused without (#40).
    if let Some(var) = model.missing_api_key() {
        let fix = model.missing_api_key_fix(key, var);
        report.line(Verdict::Fail, &format!("{label} key"), &fix);
    }
    let listed = match servers.models_of(model).await {
        Ok(listed) => listed,
        Err(e) => {
            report.line(
                Verdict::Warn,
                &format!("{label} models"),
                &format!("cannot list models: {e:#}"),
            );
            return;
        }
    };
    let present = listed
        .iter()
        .any(|m| m.name == model.model || m.name == format!("{}:latest", model.model));
    if present {
        report.line(
            Verdict::Ok,
            &format!("{label} present"),
            &format!("`{}` is installed", model.model),
        );
    } else {
        let (verdict, what) = missing_model(settings, key, model, &listed);
        report.line(verdict, &format!("{label} present"), &what);
    }
    if model.backend == Backend::OpenAiResponses {
        responses_schema_check(model, &label, report).await;
    }
    if model.backend == Backend::OpenAi {
        report.line(Verdict::Warn, &format!("{label} tools"), "OpenAI-compatible servers do not report tool support; a run tells (`model_unsupported`, exit 4)");
        return;
    }
    let tools = listed
        .iter()
        .find(|m| m.name == model.model || m.name == format!("{}:latest", model.model))
        .and_then(|m| m.supports_tools());
    match (present, tools) {
        (true, Some(true)) => report.line(Verdict::Ok, &format!("{label} tools"), "calls tools"),
        (true, Some(false)) => report.line(
            Verdict::Fail,
            &format!("{label} tools"),
            "this model cannot call tools; choose a tool-capable model such as qwen2.5:7b",
        ),
        (true, None) => report.line(
            Verdict::Warn,
            &format!("{label} tools"),
            "the server does not report capabilities",
        ),
        // The `present` line said what runs will do instead.
        (false, _) => {}
    }
}

/// What went wrong reaching `model`'s server, without the error's own advice, and the fix:
/// install or start Ollama where the fabric would start it, else check the URL.
fn unreachable_fix(
    settings: &Settings,
    key: &str,
    model: &fabric_config::ModelConfig,
    e: &fabric_core::ChatError,
) -> (String, String) {
    // What went wrong, without the error's own advice (the fix below is the advice).
    let what = match e {
        fabric_core::ChatError::Unreachable { url, detail } => {
            format!("nothing answers at {url} ({detail})")
        }
        other => other.to_string(),
    };
    let local_ollama = fabric_llm::is_local(&model.base_url) && model.backend == Backend::Ollama;
    let starter = settings.local_llm_start_cmd.first().map(String::as_str);
    let fix = if local_ollama && starter == Some("ollama") && on_path("ollama").is_none() {
        format!(
            "Ollama is not installed: install it from https://ollama.com/download and pull a tool-capable model (`ollama pull qwen2.5:7b`), point `models.{key}.base_url` at a server that runs, or try the scripted server (README: \"No model at hand?\")"
        )
    } else if local_ollama {
        format!(
            "start it with `{}` (or leave `local_llm_ensure_available` on and `fabric run` starts it)",
            settings.local_llm_start_cmd.join(" ")
        )
    } else {
        format!("check `models.{key}.base_url` and that the server runs")
    };
    (what, fix)
}

/// How a Responses API key asks for tool calls on its server (issue #40): whether the
/// server enforces the schema of `constrained_decoding`, and a template that cannot call
/// tools with constrained decoding off, which would call no tool.
async fn responses_schema_check(
    model: &fabric_config::ModelConfig,
    label: &str,
    report: &mut Report,
) {
    use fabric_domain::ConstrainedDecoding as C;
    let Ok(client) = fabric_llm::ResponsesClient::new(&fabric_llm::HttpSettings::of(model)) else {
        return;
    };
    let check = format!("{label} constrained decoding");
    let (verdict, detail) = match (client.schema_route().await, model.constrained()) {
        (fabric_llm::SchemaRoute::LlamaCpp { template_calls_tools: Some(false) }, C::Off) => (
            Verdict::Fail,
            "llama.cpp says the chat template cannot call tools and `constrained_decoding` is `off`: the model will answer in prose and call no tool; set `constrained_decoding: auto` (or `json_schema`)".to_owned(),
        ),
        (fabric_llm::SchemaRoute::LlamaCpp { template_calls_tools }, mode) => (
            Verdict::Ok,
            format!(
                "llama.cpp's /v1/responses ignores `text.format`; the tool-call schema also goes as `response_format`, which it enforces ({})",
                match (mode, template_calls_tools) {
                    (C::Off, _) => "`constrained_decoding: off`: native tool calls",
                    (C::JsonSchema, _) => "`json_schema`: every call",
                    (C::Auto, Some(false)) => "`auto`: the chat template cannot call tools, so every call",
                    (C::Auto, _) => "`auto`: the chat template calls tools, so native tool calls",
                }
            ),
        ),
        (fabric_llm::SchemaRoute::TextFormat, C::JsonSchema) => (
            Verdict::Warn,
            "the tool-call schema goes as `text.format`, which OpenAI enforces; this server does not say whether it does, and one that ignores it answers in prose and no tool is called".to_owned(),
        ),
        (fabric_llm::SchemaRoute::TextFormat, _) => (
            Verdict::Ok,
            "native tool calls (no llama.cpp `/props` says the template cannot call them)".to_owned(),
        ),
    };
    report.line(verdict, &check, &detail);
}

/// A configured model the server does not list: what a run does about it (discovery takes
/// another tool-capable model, or pulls one, or sends the name as configured), a warning
/// when a run still works, a failure when it cannot.
fn missing_model(
    settings: &Settings,
    key: &str,
    model: &fabric_config::ModelConfig,
    listed: &[fabric_core::models::ModelCandidate],
) -> (Verdict, String) {
    let name = &model.model;
    if model.backend != Backend::Ollama {
        return (
            Verdict::Warn,
            format!(
                "`{name}` is not in the server's model list; runs send it as configured and the server may still answer (set `models.{key}.model` to one it lists to be sure)"
            ),
        );
    }
    let pull = format!("`ollama pull {name}` to use it");
    match choose_model(name, listed) {
        Ok(choice) => (
            Verdict::Warn,
            // The reason reads "`X` is not installed; using `Y`: why".
            format!(
                "{}; runs will use `{}`; {pull}",
                choice.reason, choice.model
            ),
        ),
        Err(_) if settings.auto_pull_if_missing => (
            Verdict::Warn,
            format!(
                "`{name}` is not installed and no installed model calls tools; the first run pulls `{}` (`auto_pull_model`), or {pull}",
                settings.auto_pull_model
            ),
        ),
        Err(why) => (
            Verdict::Fail,
            format!(
                "{why}; {pull}, set `models.{key}.model` to an installed model, or set `auto_pull_if_missing: true`"
            ),
        ),
    }
}

/// An Anthropic key: its variable is set, the API accepts it (listing the models needs
/// it), and the model is one the API lists. Claude models all call tools.
async fn anthropic_checks(
    servers: &fabric_llm::ModelServers,
    (key, model): (&str, &fabric_config::ModelConfig),
    label: &str,
    report: &mut Report,
) {
    if let Some(var) = model.missing_api_key() {
        report.line(
            Verdict::Fail,
            &format!("{label} key"),
            &model.missing_api_key_fix(key, var),
        );
        return;
    }
    let var = model.api_key_env.as_deref().unwrap_or("ANTHROPIC_API_KEY");
    report.line(
        Verdict::Ok,
        &format!("{label} key"),
        &format!("read from `{var}`"),
    );
    match servers.models_of(model).await {
        Ok(listed) if listed.iter().any(|m| m.name == model.model) => report.line(
            Verdict::Ok,
            &format!("{label} present"),
            &format!(
                "the API accepts the key and lists `{}`; Claude models call tools",
                model.model
            ),
        ),
        Ok(listed) => report.line(
            Verdict::Fail,
            &format!("{label} present"),
            &format!(
                "the API does not list `{}`; set `models.{key}.model` to one of: {}",
                model.model,
                listed
                    .iter()
                    .take(8)
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Err(e) => report.line(
            Verdict::Fail,
            &format!("{label} key"),
            &format!("the API refused to list models ({e:#}); check the key in `{var}`"),
        ),
    }
}

/// The probe of this kernel and the sandbox policy runs would get, with what is and is not
/// enforced; a configured mode this host cannot enforce is a failure with the way out.
fn sandbox_checks(settings: &Settings, report: &mut Report) {
    let host = fabric_sandbox::probe();
    report.line(Verdict::Ok, "kernel", &format!("Linux {}", host.kernel));
    match &host.landlock_abi {
        Ok(abi) => report.line(Verdict::Ok, "landlock", &format!("ABI {abi}")),
        Err(why) => report.line(Verdict::Warn, "landlock", &why.to_string()),
    }
    match &host.seccomp {
        Ok(()) => report.line(Verdict::Ok, "seccomp", "filters available"),
        Err(why) => report.line(Verdict::Warn, "seccomp", &why.to_string()),
    }
    match host.user_namespaces {
        Some(0) => report.line(
            Verdict::Warn,
            "user namespaces",
            "disabled (not needed by the sandbox; Podman rootless needs them)",
        ),
        Some(n) => report.line(
            Verdict::Ok,
            "user namespaces",
            &format!("enabled (max {n})"),
        ),
        None => report.line(
            Verdict::Warn,
            "user namespaces",
            "cannot read /proc/sys/user/max_user_namespaces",
        ),
    }
    match &host.cgroups {
        Ok(cgroups) => report.line(
            Verdict::Ok,
            "cgroups",
            &format!("{} (a memory and pids cgroup per command)", cgroups.describe()),
        ),
        Err(why) => report.line(
            Verdict::Warn,
            "cgroups",
            &format!("none for commands: {why}; memory is capped by RLIMIT_AS alone, which shared memory and kernel buffers escape"),
        ),
    }
    let mode = settings.sandbox.mode;
    match crate::app::tools::sandbox_policy(settings, None) {
        Ok(policy) => {
            let verdict = if policy.mode == fabric_sandbox::Mode::Off {
                Verdict::Warn
            } else {
                Verdict::Ok
            };
            report.line(
                verdict,
                "sandbox",
                &format!("`{}` enforced on this host", policy.mode.as_str()),
            );
            for line in policy.enforced() {
                report.line(Verdict::Ok, "sandbox enforces", &line);
            }
            for line in policy.not_enforced() {
                report.line(Verdict::Warn, "sandbox does not enforce", &line);
            }
        }
        Err(e) => report.line(
            Verdict::Fail,
            "sandbox",
            &format!("{e} (configured mode: {mode:?})"),
        ),
    }
}

/// Podman, and for each image a specialist's `container_image` names, that a container of
/// it starts as a call starts one (issue #40: `[ok] podman` while every call exited 125).
async fn container_checks(settings: &Settings, report: &mut Report) {
    let Some(path) = fabric_tools::podman_path() else {
        report.line(Verdict::Warn, "podman", "not installed; specialists with `container_image` cannot run their shell (`apt-get install podman catatonit`)");
        return;
    };
    let mut images: Vec<(&str, &str)> = Vec::new();
    for spec in &settings.specialists {
        if let Some(image) = spec.container_image.as_deref()
            && !images.iter().any(|(i, _)| *i == image)
        {
            images.push((image, &spec.id));
        }
    }
    if images.is_empty() {
        report.line(
            Verdict::Ok,
            "podman",
            &format!(
                "{} (no specialist has `container_image`, so no container was started)",
                path.display()
            ),
        );
        return;
    }
    for (image, id) in images {
        match fabric_tools::container_starts(image, Duration::from_secs(60)).await {
            Ok(()) => report.line(
                Verdict::Ok,
                "podman",
                &format!("a container of `{image}` (specialist `{id}`) starts"),
            ),
            Err(why) => report.line(
                Verdict::Fail,
                "podman",
                &format!("{why}; specialist `{id}` can run no command (a missing `catatonit`, which Debian's podman only recommends: `apt-get install catatonit`; an image not present: `podman pull {image}`)"),
            ),
        }
    }
}

/// Where `program` is on PATH, if it is.
fn on_path(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}
