//! Checks across keys, once every layer is merged: model keys named, critics, budgets.

use crate::error::ConfigError;
use crate::settings::{Backend, Settings};

use super::Merger;

impl Merger {
    /// A budget in dollars needs a price on every model key its runs may use without a
    /// `--model-key`: the same rule `fabric run` applies, said by `config validate` too.
    pub(super) fn check_cost_budgets(&self, s: &Settings) -> Result<(), ConfigError> {
        let mut used: Vec<(&str, String)> = vec![(
            s.default_model_key.as_str(),
            "`default_model_key`".to_owned(),
        )];
        if let Some(r) = &s.complexity_routing {
            used.push((r.simple.as_str(), "`complexity_routing.simple`".to_owned()));
            used.push((
                r.complex.as_str(),
                "`complexity_routing.complex`".to_owned(),
            ));
        }
        if let Some(f) = &s.cloud_fallback {
            used.push((
                f.model_key.as_str(),
                "`cloud_fallback.model_key`".to_owned(),
            ));
        }
        let own = |id: &str| {
            s.specialists
                .iter()
                .find(|spec| spec.id == id)
                .and_then(|spec| spec.model_key.as_deref())
        };
        let mut budgets: Vec<(String, Vec<(&str, String)>)> = Vec::new();
        if s.budget.max_cost_usd.is_some() {
            let mut all = used.clone();
            for spec in &s.specialists {
                if let Some(key) = &spec.model_key {
                    all.push((
                        key.as_str(),
                        format!("specialist `{}`'s `model_key`", spec.id),
                    ));
                }
            }
            budgets.push(("budget.max_cost_usd".to_owned(), all));
        }
        for (id, b) in &s.specialist_budgets {
            if b.max_cost_usd.is_none() {
                continue;
            }
            let keys = match own(id) {
                Some(key) => vec![(key, format!("specialist `{id}`'s `model_key`"))],
                None => used.clone(),
            };
            budgets.push((format!("specialists.{id}.budget.max_cost_usd"), keys));
        }
        for (at, keys) in budgets {
            if let Some((key, why)) = keys
                .iter()
                .find(|(k, _)| s.models.get(*k).is_some_and(|m| m.price_per_mtok.is_none()))
            {
                return Err(self.invalid(
                    at,
                    format!("needs a price for every model key its runs may use, and `{key}` ({why}) has none; add `price_per_mtok: {{input: …, output: …}}` (US dollars per million tokens) to `models.{key}`"),
                ));
            }
        }
        Ok(())
    }

    /// A critic must exist, be another specialist, only read, and give a verdict.
    pub(super) fn check_critic(
        &self,
        s: &Settings,
        id: &str,
        critic: &str,
    ) -> Result<(), ConfigError> {
        let key = format!("specialists.{id}.critic");
        let Some(spec) = s.specialist(critic) else {
            return Err(self.invalid(
                key,
                format!(
                    "no specialist `{critic}`; the specialists are: {} (`reviewer` is the built-in critic)",
                    s.specialist_ids().join(", ")
                ),
            ));
        };
        let problem = if critic == id {
            Some(
                "a specialist cannot review its own work; use `reviewer` or another specialist"
                    .to_owned(),
            )
        } else if spec.may_write {
            Some(format!(
                "the critic `{critic}` may write files; a critic only reads (set `may_write: false` on it, or use `reviewer`)"
            ))
        } else if spec.finish_schema["properties"]["approved"]["type"].as_str() != Some("boolean") {
            Some(format!(
                "the critic `{critic}` has no boolean `approved` in its finish_schema; a critic's verdict is `approved` (boolean) with `findings` (see docs/QUALITY.md)"
            ))
        } else {
            None
        };
        match problem {
            Some(detail) => Err(self.invalid(key, detail)),
            None => Ok(()),
        }
    }

    /// Checks references between keys once everything is merged.
    pub(super) fn cross_check(&self, s: &Settings) -> Result<(), ConfigError> {
        let keys = s.model_keys().join(", ");
        if !s.models.contains_key(&s.default_model_key) {
            return Err(self.invalid(
                "default_model_key",
                format!(
                    "no model `{}`; the model keys are: {keys}",
                    s.default_model_key
                ),
            ));
        }
        if !s.models.contains_key(&s.routing_model_key) {
            return Err(self.invalid(
                "routing_model_key",
                format!(
                    "no model `{}`; the model keys are: {keys}",
                    s.routing_model_key
                ),
            ));
        }
        if let Some(fallback) = &s.cloud_fallback
            && !s.models.contains_key(&fallback.model_key)
        {
            return Err(self.invalid(
                "cloud_fallback.model_key",
                format!(
                    "no model `{}`; the model keys are: {keys}",
                    fallback.model_key
                ),
            ));
        }
        // One server, one limit: keys naming the same server may not disagree on it.
        let mut limits: std::collections::BTreeMap<String, (&str, u32)> =
            std::collections::BTreeMap::new();
        for (key, model) in &s.models {
            let Some(n) = model.max_concurrent_requests else {
                continue;
            };
            let endpoint = fabric_domain::endpoint_key(&model.base_url);
            match limits.get(&endpoint) {
                Some((other, m)) if *m != n => {
                    return Err(self.invalid(
                        format!("models.{key}.max_concurrent_requests"),
                        format!("is {n}, but `models.{other}` names the same server ({}) with {m}; a server has one limit: give both the same", model.base_url),
                    ));
                }
                _ => {
                    limits.insert(endpoint, (key.as_str(), n));
                }
            }
        }
        for (key, limit) in &s.daily_budget {
            match s.models.get(key) {
                None => {
                    return Err(self.invalid(
                        format!("daily_budget.{key}"),
                        format!("no model `{key}`; the model keys are: {keys}"),
                    ));
                }
                Some(m) if limit.max_cost_usd.is_some() && m.price_per_mtok.is_none() => {
                    return Err(self.invalid(
                        format!("daily_budget.{key}.max_cost_usd"),
                        format!("needs a price: add `price_per_mtok: {{input: …, output: …}}` to `models.{key}`"),
                    ));
                }
                Some(_) => {}
            }
        }
        self.check_cost_budgets(s)?;
        if let Some(routing) = &s.complexity_routing {
            for (name, key) in [("simple", &routing.simple), ("complex", &routing.complex)] {
                if !s.models.contains_key(key) {
                    return Err(self.invalid(
                        format!("complexity_routing.{name}"),
                        format!("no model `{key}`; the model keys are: {keys}"),
                    ));
                }
            }
        }
        if let Some(key) = &s.run_index.embedding_model_key {
            match s.models.get(key) {
                None => {
                    return Err(self.invalid(
                        "run_index.embedding_model_key",
                        format!("no model `{key}`; the model keys are: {keys}"),
                    ));
                }
                Some(m) if m.backend == Backend::Anthropic => {
                    return Err(self.invalid(
                        "run_index.embedding_model_key",
                        format!("`{key}` uses the `anthropic` backend, which has no embeddings API; name an Ollama or OpenAI-compatible model key"),
                    ));
                }
                Some(_) => {}
            }
        }
        if s.specialist(&s.default_specialist).is_none() {
            return Err(self.invalid(
                "default_specialist",
                format!(
                    "no specialist `{}`; the specialists are: {}",
                    s.default_specialist,
                    s.specialist_ids().join(", ")
                ),
            ));
        }
        if let Some(name) = s.agents.keys().find(|name| s.specialist(name).is_some()) {
            return Err(self.invalid(
                format!("agents.{name}"),
                format!("a specialist is called `{name}` too, and both would be the tool `agent__{name}`; rename the agent"),
            ));
        }
        for spec in &s.specialists {
            if let Some(critic) = &spec.tooling.critic {
                self.check_critic(s, &spec.id, &critic.specialist)?;
            }
            for (i, id) in spec.tooling.delegates.iter().enumerate() {
                let problem = if *id == spec.id {
                    Some("a specialist cannot delegate to itself".to_owned())
                } else if s.specialist(id).is_none() && !s.agents.contains_key(id) {
                    Some(format!(
                        "no specialist or remote agent `{id}`; the specialists are: {}; the agents (`agents:`): {}",
                        s.specialist_ids().join(", "),
                        if s.agents.is_empty() {
                            "none".to_owned()
                        } else {
                            s.agents.keys().cloned().collect::<Vec<_>>().join(", ")
                        }
                    ))
                } else {
                    None
                };
                if let Some(detail) = problem {
                    return Err(
                        self.invalid(format!("specialists.{}.delegates[{i}]", spec.id), detail)
                    );
                }
            }
            if let Some(key) = &spec.model_key
                && !s.models.contains_key(key)
            {
                return Err(self.invalid(
                    format!("specialists.{}.model_key", spec.id),
                    format!("no model `{key}`; the model keys are: {keys}"),
                ));
            }
        }
        Ok(())
    }
}
