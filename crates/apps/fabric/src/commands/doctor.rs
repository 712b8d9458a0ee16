//! `fabric doctor`: one line per check, each with the fix when it fails.

use fabric_config::{Backend, Routing, Settings};
use fabric_core::models::choose_model;
use std::time::Duration;

use crate::bootstrap;
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
    report.line(
        Verdict::Skip,
        "embeddings model",
        "nothing to check: no feature of agent-fabric uses embeddings yet, so none is configured",
    );
    sandbox_checks(&mut report);
    Ok(if report.failed { 1 } else { 0 })
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
        let fix = if bootstrap::is_local(&model.base_url) && model.backend == Backend::Ollama {
            format!(
                "start it with `{}` (or leave `local_llm_ensure_available` on and `fabric run` starts it)",
                settings.local_llm_start_cmd.join(" ")
            )
        } else {
            "check `base_url` and that the server runs".to_owned()
        };
        report.line(
            Verdict::Fail,
            &format!("{label} server"),
            &format!("{e} (used by {users}); {fix}"),
        );
        return;
    }
    report.line(
        Verdict::Ok,
        &format!("{label} server"),
        &format!("{} answers (used by {users})", model.base_url),
    );
    let listed = match bootstrap::list(model).await {
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
        let fix = match model.backend {
            Backend::Ollama => format!(
                "`ollama pull {}`, or set `models.{key}.model` to an installed model",
                model.model
            ),
            Backend::Openai => format!("set `models.{key}.model` to one the server lists"),
        };
        report.line(
            Verdict::Fail,
            &format!("{label} present"),
            &format!("`{}` is not installed; {fix}", model.model),
        );
    }
    if model.backend == Backend::Openai {
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
        (false, _) => match choose_model(&model.model, &listed) {
            Ok(choice) => report.line(
                Verdict::Warn,
                &format!("{label} tools"),
                &format!("runs would use another model: {}", choice.reason),
            ),
            Err(why) => report.line(Verdict::Fail, &format!("{label} tools"), &why),
        },
    }
}

/// What can be checked cheaply and without unsafe code; the OS sandbox itself is issue #5.
fn sandbox_checks(report: &mut Report) {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    report.line(Verdict::Ok, "kernel", &format!("Linux {kernel}"));
    match std::fs::read_to_string("/proc/sys/user/max_user_namespaces") {
        Ok(n) if n.trim() != "0" => report.line(Verdict::Ok, "user namespaces", &format!("enabled (max {})", n.trim())),
        Ok(_) => report.line(Verdict::Warn, "user namespaces", "disabled (max_user_namespaces is 0); the future OS sandbox needs them: `sysctl user.max_user_namespaces=15000`"),
        Err(_) => report.line(Verdict::Warn, "user namespaces", "cannot read /proc/sys/user/max_user_namespaces"),
    }
    let lsm = std::fs::read_to_string("/sys/kernel/security/lsm").unwrap_or_default();
    let landlock = if lsm.split(',').any(|m| m.trim() == "landlock") {
        "landlock is an active LSM"
    } else if lsm.is_empty() {
        "cannot read /sys/kernel/security/lsm"
    } else {
        "landlock is not in the active LSMs"
    };
    report.line(
        Verdict::Warn,
        "sandbox",
        &format!("the OS sandbox is not built yet (issue #5): tools are confined by path checks and the command allowlist only; {landlock}"),
    );
}
