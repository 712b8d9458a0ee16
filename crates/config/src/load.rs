//! Reading the file and merging it over the defaults, checking every value on the way.

use fabric_domain::{SpecialistSpec, ToolSpec};
use serde_json::Value;
use std::path::{Path, PathBuf};

use crate::defaults::engineering_finish_schema;
use crate::error::ConfigError;
use crate::raw::{RawConfig, RawModel, RawSpecialist};
use crate::settings::{Backend, ModelConfig, Settings, TaskForceMode};

impl Settings {
    /// The defaults, overlaid with the file at `path` when one is given.
    ///
    /// A path that does not exist is an error: a user who names a file means it.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let Some(path) = path else {
            return Ok(Self::defaults());
        };
        let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ConfigError::NotFound {
                path: path.to_path_buf(),
            },
            _ => ConfigError::Read {
                path: path.to_path_buf(),
                detail: e.to_string(),
            },
        })?;
        Self::from_text(&text, path)
    }

    /// Parses `text` as the file at `path` (the extension picks JSON or YAML).
    pub fn from_text(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let is_json = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        let value: Value = if is_json {
            serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
                path: path.to_path_buf(),
                format: "JSON",
                detail: e.to_string(),
            })?
        } else {
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Syntax {
                path: path.to_path_buf(),
                format: "YAML",
                detail: e.to_string(),
            })?
        };
        // An empty YAML file is `null`: the same as no keys at all.
        let value = if value.is_null() {
            Value::Object(Default::default())
        } else {
            value
        };
        let source_name = path.display().to_string();
        let raw: RawConfig = serde_path_to_error::deserialize(value).map_err(|e| {
            let key = e.path().to_string();
            ConfigError::Invalid {
                source_name: source_name.clone(),
                key: if key == "." {
                    "(top level)".to_owned()
                } else {
                    key
                },
                detail: e.into_inner().to_string(),
            }
        })?;
        let mut settings = Self::defaults();
        Merger { source_name }.apply(&mut settings, raw)?;
        settings.source = Some(path.to_path_buf());
        Ok(settings)
    }

    /// Checks that every specialist's tools exist among `known_tools`. The binary calls this
    /// with the names of the tools it can build.
    pub fn check_tools(&self, known_tools: &[&str]) -> Result<(), ConfigError> {
        for specialist in &self.specialists {
            for (i, tool) in specialist.tools.iter().enumerate() {
                if !known_tools.contains(&tool.as_str()) {
                    return Err(ConfigError::Invalid {
                        source_name: self.source_name(),
                        key: format!("specialists.{}.tools[{i}]", specialist.id),
                        detail: format!(
                            "unknown tool `{tool}`; the known tools are: {}",
                            known_tools.join(", ")
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    fn source_name(&self) -> String {
        self.source.as_ref().map_or_else(
            || "built-in defaults".to_owned(),
            |p| p.display().to_string(),
        )
    }
}

struct Merger {
    source_name: String,
}

impl Merger {
    fn invalid(&self, key: impl Into<String>, detail: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            source_name: self.source_name.clone(),
            key: key.into(),
            detail: detail.into(),
        }
    }

    fn apply(&self, s: &mut Settings, raw: RawConfig) -> Result<(), ConfigError> {
        if let Some(models) = raw.models {
            for (key, model) in models {
                let base = s.models.get(&key).cloned();
                let merged = self.model(&key, base, model)?;
                s.models.insert(key, merged);
            }
        }
        if let Some(specialists) = raw.specialists {
            for (id, raw_spec) in specialists {
                self.specialist(s, id, raw_spec)?;
            }
        }
        if let Some(v) = raw.default_model_key {
            s.default_model_key = v;
        }
        if let Some(v) = raw.default_specialist {
            s.default_specialist = v;
        }
        if let Some(v) = raw.routing_model_key {
            s.routing_model_key = v;
        }
        if let Some(v) = raw.task_force_mode {
            s.task_force_mode = match v.as_str() {
                "sequential" => TaskForceMode::Sequential,
                "parallel" => TaskForceMode::Parallel,
                other => {
                    return Err(self.invalid(
                        "task_force_mode",
                        format!("must be `sequential` or `parallel`, got `{other}`"),
                    ));
                }
            };
        }
        if let Some(v) = raw.local_llm_ensure_available {
            s.local_llm_ensure_available = v;
        }
        if let Some(v) = raw.local_llm_start_cmd {
            if v.is_empty() || v[0].trim().is_empty() {
                return Err(self.invalid(
                    "local_llm_start_cmd",
                    "must name a program, e.g. [\"ollama\", \"serve\"]",
                ));
            }
            s.local_llm_start_cmd = v;
        }
        if let Some(v) = raw.local_llm_start_timeout_s {
            s.local_llm_start_timeout_s = self.range("local_llm_start_timeout_s", v, 1, 3600)?;
        }
        if let Some(v) = raw.auto_pull_if_missing {
            s.auto_pull_if_missing = v;
        }
        if let Some(v) = raw.auto_pull_model {
            s.auto_pull_model = v;
        }
        if let Some(v) = raw.max_steps {
            s.max_steps = self.range("max_steps", u64::from(v), 1, 1000)? as u32;
        }
        if let Some(v) = raw.network_allowed {
            s.network_allowed = v;
        }
        if let Some(shell) = raw.shell {
            if let Some(commands) = shell.allowed_commands {
                for (i, c) in commands.iter().enumerate() {
                    if c.is_empty() || c.contains('/') || c.contains(char::is_whitespace) {
                        return Err(self.invalid(
                            format!("shell.allowed_commands[{i}]"),
                            format!("must be a bare program name such as `ls`, got `{c}`"),
                        ));
                    }
                }
                s.shell.allowed_commands = Some(commands);
            }
            if let Some(t) = shell.timeout_s {
                s.shell.timeout_s = self.range("shell.timeout_s", t, 1, 3600)?;
            }
            if let Some(names) = shell.pass_env {
                for (i, name) in names.iter().enumerate() {
                    // Loader variables inject code into every program a tool starts.
                    if name.starts_with("LD_") || name.starts_with("DYLD_") || name.is_empty() {
                        return Err(self.invalid(
                            format!("shell.pass_env[{i}]"),
                            format!("`{name}` may not be passed to tools: loader variables inject code into every program they start"),
                        ));
                    }
                }
                s.shell.pass_env = names;
            }
        }
        if let Some(server) = raw.server {
            server.merge(&mut s.server, |key, detail| self.invalid(key, detail))?;
        }
        if let Some(w) = raw.workspace {
            s.workspace = PathBuf::from(w);
        }
        self.cross_check(s)
    }

    fn range(&self, key: &str, v: u64, min: u64, max: u64) -> Result<u64, ConfigError> {
        if (min..=max).contains(&v) {
            Ok(v)
        } else {
            Err(self.invalid(key, format!("must be between {min} and {max}, got {v}")))
        }
    }

    fn model(
        &self,
        key: &str,
        base: Option<ModelConfig>,
        raw: RawModel,
    ) -> Result<ModelConfig, ConfigError> {
        let at = |field: &str| format!("models.{key}.{field}");
        let base = match base {
            Some(base) => base,
            None => {
                let model = raw.model.clone().ok_or_else(|| {
                    self.invalid(
                        at("model"),
                        "a new model key needs `model` (the model's name on the server)",
                    )
                })?;
                crate::defaults::ollama_model(&model, 2048)
            }
        };
        let mut m = base;
        if let Some(url) = raw.base_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(self.invalid(
                    at("base_url"),
                    format!("must start with http:// or https://, got `{url}`"),
                ));
            }
            m.base_url = url;
        }
        if let Some(v) = raw.model {
            if v.trim().is_empty() {
                return Err(self.invalid(at("model"), "must not be empty"));
            }
            m.model = v;
        }
        if let Some(v) = raw.backend {
            m.backend = match v.as_str() {
                "ollama" => Backend::Ollama,
                // `generic` is the seed's name for an OpenAI-compatible server.
                "openai" | "generic" | "vllm" => Backend::Openai,
                other => {
                    return Err(self.invalid(
                        at("backend"),
                        format!("must be `ollama` or `openai`, got `{other}`"),
                    ));
                }
            };
        }
        if let Some(v) = raw.api_key_env {
            m.api_key_env = Some(v);
        }
        if let Some(v) = raw.temperature {
            if !(0.0..=2.0).contains(&v) {
                return Err(self.invalid(
                    at("temperature"),
                    format!("must be between 0 and 2, got {v}"),
                ));
            }
            m.temperature = v;
        }
        if let Some(v) = raw.top_p {
            if !(0.0..=1.0).contains(&v) {
                return Err(self.invalid(at("top_p"), format!("must be between 0 and 1, got {v}")));
            }
            m.top_p = v;
        }
        if let Some(v) = raw.max_tokens {
            m.max_tokens = self.range(&at("max_tokens"), u64::from(v), 1, 1_000_000)? as u32;
        }
        if let Some(v) = raw.timeout_s {
            m.timeout_s = self.range(&at("timeout_s"), v, 1, 3600)?;
        }
        if let Some(v) = raw.num_ctx {
            m.num_ctx = self.range(&at("num_ctx"), u64::from(v), 512, 10_000_000)? as u32;
        }
        if let Some(v) = raw.max_retries {
            m.max_retries = self.range(&at("max_retries"), u64::from(v), 0, 20)? as u32;
        }
        Ok(m)
    }

    fn specialist(
        &self,
        s: &mut Settings,
        id: String,
        raw: RawSpecialist,
    ) -> Result<(), ConfigError> {
        let at = |field: &str| format!("specialists.{id}.{field}");
        let valid_id = !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_id {
            return Err(self.invalid(
                format!("specialists.{id}"),
                "ids hold only letters, digits, `_` and `-`",
            ));
        }
        let existing = s.specialists.iter().position(|x| x.id == id);
        let mut spec = match existing {
            Some(i) => s.specialists[i].clone(),
            None => SpecialistSpec {
                id: id.clone(),
                description: raw.description.clone().ok_or_else(|| {
                    self.invalid(
                        at("description"),
                        "a new specialist needs a one-line `description`",
                    )
                })?,
                keywords: Vec::new(),
                capabilities: Vec::new(),
                system_prompt: raw.system_prompt.clone().ok_or_else(|| {
                    self.invalid(
                        at("system_prompt"),
                        "a new specialist needs a `system_prompt`",
                    )
                })?,
                tools: raw.tools.clone().ok_or_else(|| {
                    self.invalid(
                        at("tools"),
                        "a new specialist needs `tools`, e.g. [read_file, list_files]",
                    )
                })?,
                finish_schema: engineering_finish_schema(),
                model_key: None,
                may_write: true,
                needs_network: false,
            },
        };
        if let Some(v) = raw.description {
            spec.description = v;
        }
        if let Some(v) = raw.keywords {
            spec.keywords = v;
        }
        if let Some(v) = raw.capabilities {
            spec.capabilities = v;
        }
        if let Some(v) = raw.system_prompt {
            spec.system_prompt = v;
        }
        if let Some(v) = raw.tools {
            spec.tools = v;
        }
        if let Some(schema) = raw.finish_schema {
            ToolSpec::with_schema("finish_task", "", schema.clone()).map_err(|_| {
                self.invalid(
                    at("finish_schema"),
                    "must be a JSON Schema with `type: object`",
                )
            })?;
            spec.finish_schema = schema;
        }
        if let Some(v) = raw.model_key {
            spec.model_key = Some(v);
        }
        if let Some(v) = raw.may_write {
            spec.may_write = v;
        }
        if let Some(v) = raw.needs_network {
            spec.needs_network = v;
        }
        match existing {
            Some(i) => s.specialists[i] = spec,
            None => s.specialists.push(spec),
        }
        Ok(())
    }

    /// Checks references between keys once everything is merged.
    fn cross_check(&self, s: &Settings) -> Result<(), ConfigError> {
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
        for spec in &s.specialists {
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

#[cfg(test)]
mod tests;
