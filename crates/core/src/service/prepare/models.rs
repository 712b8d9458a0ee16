//! Making a model key usable before a run: start its server when it is down, ask which
//! models it has, choose one ([`crate::models`]), pull one when none fits and pulling is
//! allowed. The servers are reached through the [`ModelResolver`] port; the choice is made
//! here.

pub use fabric_engine::models::Flights;

use super::policy::PreparePolicy;
use crate::models::{ModelChoice, choose_model, is_listed};
use crate::ports::{ModelResolver, SetupError};
use fabric_domain::{Backend, ModelConfig};

/// Resolves the model name of `key`: discovery, and a pull when allowed and nothing fits.
/// A server that answers but cannot list its models is not an error here: the configured
/// model is used and a failing server then ends the run with `llm_error` and a complete
/// runlog. A local server that is down and cannot be started is an error, before any run
/// exists.
pub(super) async fn resolve(
    policy: &PreparePolicy,
    resolver: &dyn ModelResolver,
    pulls: &Flights,
    (key, model): (&str, &ModelConfig),
) -> Result<ModelChoice, SetupError> {
    resolver.start(key).await?;
    let listed = match resolver.list(key).await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!("model discovery at {} failed: {e}", model.base_url);
            return Ok(as_configured(
                model,
                "as configured (the server did not list its models)",
            ));
        }
    };
    if model.backend != Backend::Ollama {
        // OpenAI-compatible servers do not say which models call tools, and cloud lists are
        // long: never swap a configured model there, only say when it is not listed.
        let listed_here = listed.iter().any(|m| m.name == model.model);
        return Ok(as_configured(
            model,
            if listed_here || listed.is_empty() {
                "as configured"
            } else {
                "as configured (not in the server's model list; it may still answer)"
            },
        ));
    }
    match (choose_model(&model.model, &listed), &policy.auto_pull) {
        (Ok(choice), _) => Ok(choice),
        // Pulling helps only when the configured model is missing, not when it is installed
        // and cannot call tools.
        (Err(why), Some(target)) if !is_listed(&model.model, &listed) => {
            let lock = pulls.lock_for(format!("pull {} {target}", model.base_url));
            let _pulling = lock.lock().await;
            // Another request may have pulled a model while this one waited.
            if let Ok(fresh) = resolver.list(key).await
                && let Ok(choice) = choose_model(&model.model, &fresh)
            {
                return Ok(choice);
            }
            resolver.pull(key, target).await?;
            Ok(ModelChoice {
                reason: format!("{why}; pulled `{target}` (auto_pull_model)"),
                model: target.clone(),
                substituted: true,
            })
        }
        (Err(why), _) => Err(why),
    }
}

fn as_configured(model: &ModelConfig, how: &str) -> ModelChoice {
    ModelChoice {
        model: model.model.clone(),
        reason: format!("`{}` {how}", model.model),
        substituted: false,
    }
}

/// The context length the server reported for `name` (Ollama: the model's trained length;
/// OpenAI-compatible: the one window the server gives every request), when discovery
/// learned it. `named`: the model was given by name (`--model`), so Ollama's is not asked.
pub(super) async fn reported_window(
    resolver: &dyn ModelResolver,
    (key, model): (&str, &ModelConfig),
    name: &str,
    (named, offline): (bool, bool),
) -> Option<u64> {
    match model.backend {
        // Discovery already listed the server (cached); `--model` skips it, and so does this.
        Backend::Ollama if !named => {
            let listed = resolver.list(key).await.ok()?;
            listed
                .iter()
                .find(|m| m.name == name || m.name == format!("{name}:latest"))
                .and_then(|m| m.context_length)
        }
        // The server reports one window whatever the model is called (cached listing).
        Backend::OpenAi if model.context_window.is_none() && !offline => {
            let listed = resolver.list(key).await.ok()?;
            listed.iter().find_map(|m| m.context_length)
        }
        _ => None,
    }
}
