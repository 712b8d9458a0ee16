//! Reading the file and merging it over the defaults, checking every value on the way.

use fabric_domain::{
    ContextCompaction, FallbackReason, SpecialistSpec, check_finish_schema, check_tool_pattern,
    is_tool_pattern,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::builtins::engineering_finish_schema;
use crate::defaults::{BRAVE_KEY_ENV, BRAVE_URL};
use crate::dirs::{LoadOptions, expand_home, read_specialist_dir};
use crate::error::ConfigError;
use crate::markdown::parse_markdown;
use crate::raw::{RawConfig, RawFetchUrl, RawModel, RawSpecialist, RawWebSearch};
use crate::settings::{Backend, ModelConfig, SearchProvider, Settings, SpecialistSource};

impl Settings {
    /// The defaults, overlaid with the file at `path` when one is given. Markdown specialist
    /// directories are not read; [`Settings::load_with`] reads them.
    ///
    /// A path that does not exist is an error: a user who names a file means it.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        match path {
            None => Ok(Self::defaults()),
            Some(path) => Self::from_text(&read_config(path)?, path),
        }
    }

    /// Everything, in precedence order: built-in specialists < the user directory < the
    /// project directory (`<workspace>/specialists`) < the config file's `specialists:`
    /// (`specialist_dirs` in the file replaces the two directories). Other keys: defaults <
    /// the file < `options.workspace`.
    pub fn load_with(options: &LoadOptions) -> Result<Self, ConfigError> {
        let raw = match &options.config {
            Some(path) => parse_raw(&read_config(path)?, path)?,
            None => RawConfig::default(),
        };
        Self::assemble(raw, options.config.as_deref(), Some(options))
    }

    /// Parses `text` as the file at `path` (the extension picks JSON or YAML), without
    /// reading specialist directories.
    pub fn from_text(text: &str, path: &Path) -> Result<Self, ConfigError> {
        Self::assemble(parse_raw(text, path)?, Some(path), None)
    }

    fn assemble(
        mut raw: RawConfig,
        source: Option<&Path>,
        options: Option<&LoadOptions>,
    ) -> Result<Self, ConfigError> {
        let mut settings = Self::defaults();
        settings.source = source.map(Path::to_path_buf);
        let merger = Merger {
            source_name: settings.source_name(),
        };
        let file_specialists = raw.specialists.take();
        let dirs = raw.specialist_dirs.take();
        merger.apply(&mut settings, raw)?;
        if let Some(options) = options {
            if let Some(workspace) = &options.workspace {
                settings.workspace = workspace.clone();
            }
            if let Some(url) = &options.store_url {
                let url = crate::store::check_url(url).map_err(|detail| ConfigError::Invalid {
                    source_name: format!("environment variable {}", crate::STORE_URL_ENV),
                    key: "store.url".to_owned(),
                    detail,
                })?;
                settings.store.url = Some(url);
            }
            let (dirs, required) = match dirs {
                Some(dirs) => (merger.dirs(&dirs)?, true),
                None => {
                    let project = settings.workspace.join("specialists");
                    (
                        options.user_dir.iter().cloned().chain([project]).collect(),
                        false,
                    )
                }
            };
            for dir in &dirs {
                load_dir(&mut settings, dir, required)?;
            }
            settings.specialist_dirs = dirs;
        } else if let Some(dirs) = dirs {
            merger.dirs(&dirs)?;
        }
        if let Some(specialists) = file_specialists {
            for (id, raw_spec) in specialists {
                merger.specialist(&mut settings, &id, raw_spec, &format!("specialists.{id}"))?;
                if let Some(path) = &settings.source {
                    let source = SpecialistSource::Config { path: path.clone() };
                    settings
                        .specialist_origins
                        .entry(id)
                        .or_default()
                        .sources
                        .push(source);
                }
            }
        }
        merger.cross_check(&settings)?;
        // The budget keys under `delegation:` are the old spelling of `budget:`; still read.
        let d = &settings.delegation;
        if d.max_tokens.is_some() || d.timeout_s.is_some() {
            settings.deprecations.push(
                "`delegation.max_tokens` and `delegation.timeout_s` are deprecated: use `budget.max_tokens` and `budget.max_wall_s` (docs/QUALITY.md)".to_owned(),
            );
            settings.budget.max_tokens = settings.budget.max_tokens.or(d.max_tokens);
            settings.budget.max_wall_s = settings.budget.max_wall_s.or(d.timeout_s);
        }
        Ok(settings)
    }

    /// Checks that every specialist's tools exist among `known_tools`, and that tool
    /// patterns (`mcp__github__*`) have the MCP shape. The binary calls this with the names
    /// of the tools it can build. The message names the file the specialist came from.
    pub fn check_tools(&self, known_tools: &[&str]) -> Result<(), ConfigError> {
        for specialist in &self.specialists {
            let (source_name, prefix) = match self
                .specialist_origin(&specialist.id)
                .and_then(|o| o.sources.last())
            {
                Some(SpecialistSource::File { path }) => {
                    (path.display().to_string(), String::new())
                }
                _ => (
                    self.source_name(),
                    format!("specialists.{}.", specialist.id),
                ),
            };
            for (i, tool) in specialist.tools.iter().enumerate() {
                let problem = if is_tool_pattern(tool) {
                    check_tool_pattern(tool).err()
                } else if let Some(rest) = tool.strip_prefix(fabric_domain::MCP_TOOL_PREFIX) {
                    // One MCP tool by its full name: `mcp__<server>__<tool>`.
                    match rest.split_once("__") {
                        Some((server, name)) if !server.is_empty() && !name.is_empty() => None,
                        _ => Some(format!(
                            "`{tool}` is not an MCP tool name; expected `mcp__<server>__<tool>` or a pattern such as `mcp__github__*`"
                        )),
                    }
                } else if known_tools.contains(&tool.as_str()) {
                    None
                } else {
                    Some(format!(
                        "unknown tool `{tool}`; the known tools are: {} (MCP tools are named by patterns such as `mcp__github__*`)",
                        known_tools.join(", ")
                    ))
                };
                if let Some(detail) = problem {
                    return Err(ConfigError::Invalid {
                        source_name,
                        key: format!("{prefix}tools[{i}]"),
                        detail,
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

fn read_config(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ConfigError::NotFound {
            path: path.to_path_buf(),
        },
        _ => ConfigError::Read {
            path: path.to_path_buf(),
            detail: e.to_string(),
        },
    })
}

fn parse_raw(text: &str, path: &Path) -> Result<RawConfig, ConfigError> {
    parse_document(text, path)
}

/// Parses a JSON (by extension) or YAML document into `T`, with the config's error messages:
/// the file, the format and the key at fault. Also used for `fabric test` scenario files.
pub fn parse_document<T: serde::de::DeserializeOwned>(
    text: &str,
    path: &Path,
) -> Result<T, ConfigError> {
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
    serde_path_to_error::deserialize(value).map_err(|e| {
        let key = e.path().to_string();
        ConfigError::Invalid {
            source_name,
            key: if key == "." {
                "(top level)".to_owned()
            } else {
                key
            },
            detail: e.into_inner().to_string(),
        }
    })
}

/// Reads one directory's markdown specialists over `settings`. A file replaces a
/// specialist of the same id from a lower layer entirely (a file is a whole definition);
/// two files of one directory with the same id are an error.
fn load_dir(settings: &mut Settings, dir: &Path, required: bool) -> Result<(), ConfigError> {
    let mut seen: Vec<(String, PathBuf)> = Vec::new();
    for (path, text) in read_specialist_dir(dir, required)? {
        let parsed = parse_markdown(&text, &path)?;
        if let Some((_, other)) = seen.iter().find(|(id, _)| *id == parsed.id) {
            return Err(ConfigError::SpecialistFile {
                path: path.clone(),
                line: None,
                detail: format!(
                    "specialist `{}` is also defined in {}; rename one (`name:` in the front matter)",
                    parsed.id,
                    other.display()
                ),
            });
        }
        let merger = Merger {
            source_name: path.display().to_string(),
        };
        // Replaced in place, so listings keep the built-in order.
        let position = settings.specialists.iter().position(|s| s.id == parsed.id);
        settings.specialists.retain(|s| s.id != parsed.id);
        merger.specialist(settings, &parsed.id, parsed.raw, "")?;
        if let Some(i) = position
            && let Some(spec) = settings.specialists.pop()
        {
            settings.specialists.insert(i, spec);
        }
        let origin = settings
            .specialist_origins
            .entry(parsed.id.clone())
            .or_default();
        origin
            .sources
            .push(SpecialistSource::File { path: path.clone() });
        origin.warnings = parsed.warnings;
        seen.push((parsed.id, path));
    }
    Ok(())
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
        if let Some(v) = raw.default_model_key {
            s.default_model_key = v;
        }
        if let Some(v) = raw.default_specialist {
            s.default_specialist = v;
        }
        if let Some(v) = raw.routing_model_key {
            s.routing_model_key = v;
        }
        if let Some(v) = raw.task_force_max_parallel {
            s.task_force_max_parallel =
                self.range("task_force_max_parallel", u64::from(v), 1, 64)? as u32;
        }
        if let Some(v) = raw.routing {
            s.routing = v;
        }
        if let Some(v) = raw.complexity_routing {
            let threshold = match v.threshold {
                Some(t) => self.range("complexity_routing.threshold", t, 0, 100)? as u8,
                None => 60,
            };
            let key = |name: &str, value: Option<String>| {
                value.filter(|k| !k.trim().is_empty()).ok_or_else(|| {
                    self.invalid(
                        format!("complexity_routing.{name}"),
                        "must name a key of `models:` (for example `fast` for simple tasks, `quality` for complex ones)".to_owned(),
                    )
                })
            };
            s.complexity_routing = Some(crate::ComplexityRouting {
                threshold,
                simple: key("simple", v.simple)?,
                complex: key("complex", v.complex)?,
            });
        }
        if let Some(b) = raw.budget {
            self.budget("budget", b, &mut s.budget)?;
        }
        if let Some(limits) = raw.daily_budget {
            for (key, limit) in limits {
                let at = |field: &str| format!("daily_budget.{key}.{field}");
                if limit.max_tokens.is_none() && limit.max_cost_usd.is_none() {
                    return Err(self.invalid(
                        format!("daily_budget.{key}"),
                        "needs `max_tokens` or `max_cost_usd` (per day)",
                    ));
                }
                let max_tokens = match limit.max_tokens {
                    Some(v) => Some(self.range(&at("max_tokens"), v, 1, 1_000_000_000_000)?),
                    None => None,
                };
                if let Some(v) = limit.max_cost_usd
                    && !(v.is_finite() && v > 0.0 && v <= 1_000_000.0)
                {
                    return Err(self.invalid(
                        at("max_cost_usd"),
                        format!("must be US dollars between 0 and 1000000, got {v}"),
                    ));
                }
                s.daily_budget.insert(
                    key,
                    crate::DailyLimit {
                        max_tokens,
                        max_cost_usd: limit.max_cost_usd,
                    },
                );
            }
        }
        if let Some(v) = raw.context_compaction {
            s.summarize_compaction = v == ContextCompaction::Summarize;
        }
        if let Some(v) = raw.daily_budget_timezone {
            s.daily_budget_timezone = parse_zone(&v).ok_or_else(|| {
                self.invalid(
                    "daily_budget_timezone",
                    format!("must be `local`, `UTC` or an offset such as `+02:00`, got `{v}` (for a named zone, set TZ in the fabric's environment and use `local`)"),
                )
            })?;
        }
        if let Some(v) = raw.cloud_fallback {
            let model_key = v
                .model_key
                .filter(|k| !k.trim().is_empty())
                .ok_or_else(|| {
                    self.invalid(
                    "cloud_fallback.model_key",
                    "must name a key of `models:` (the cloud model asked when the local one fails)"
                        .to_owned(),
                )
                })?;
            let policy = v.policy.unwrap_or_else(|| {
                vec![FallbackReason::NoToolCalls, FallbackReason::MalformedArgs]
            });
            let on = |reason| policy.contains(&reason);
            let max_per_run = match v.max_per_run {
                Some(n) => self.range("cloud_fallback.max_per_run", n, 1, 1000)? as u32,
                None => 3,
            };
            s.cloud_fallback = Some(crate::CloudFallbackConfig {
                model_key,
                no_tool_calls: on(FallbackReason::NoToolCalls),
                malformed_args: on(FallbackReason::MalformedArgs),
                critic_rejected: on(FallbackReason::CriticRejected),
                max_per_run,
            });
        }
        if let Some(v) = raw.task_force_mode {
            s.task_force_mode = v;
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
            for (key, list) in [
                ("allowed_commands", &shell.allowed_commands),
                ("also_allow", &shell.also_allow),
            ] {
                for (i, c) in list.iter().flatten().enumerate() {
                    if c.is_empty() || c.contains('/') || c.contains(char::is_whitespace) {
                        return Err(self.invalid(
                            format!("shell.{key}[{i}]"),
                            format!("must be a bare program name such as `ls`, got `{c}`"),
                        ));
                    }
                }
            }
            if let Some(commands) = shell.allowed_commands {
                s.shell.allowed_commands = commands;
            }
            for c in shell.also_allow.into_iter().flatten() {
                if !s.shell.allowed_commands.contains(&c) {
                    s.shell.allowed_commands.push(c);
                }
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
        if let Some(telemetry) = raw.telemetry {
            telemetry.merge(&mut s.telemetry, |key, detail| self.invalid(key, detail))?;
        }
        if let Some(w) = raw.workspace {
            s.workspace = PathBuf::from(w);
        }
        if let Some(web) = raw.web_search {
            self.web_search(s, web)?;
        }
        if let Some(fetch) = raw.fetch_url {
            self.fetch_url(s, fetch)?;
        }
        self.security(s, raw.sandbox, raw.sandbox_limits, raw.sandbox_read_paths)?;
        if let Some(paths) = raw.protected_paths {
            for (i, p) in paths.iter().enumerate() {
                if p.trim().is_empty() || p.starts_with('/') || p.split('/').any(|c| c == "..") {
                    return Err(self.invalid(
                        format!("protected_paths[{i}]"),
                        format!("must be a path relative to the workspace without `..`, such as `.git`, got `{p}`"),
                    ));
                }
            }
            s.protected_paths = paths;
        }
        if let Some(network) = raw.network {
            if let Some(v) = network.allow_private {
                s.network.allow_private = v;
            }
            if let Some(hosts) = network.allow_hosts {
                for (i, h) in hosts.iter().enumerate() {
                    if h.trim().is_empty() || h.contains(char::is_whitespace) {
                        return Err(self.invalid(
                            format!("network.allow_hosts[{i}]"),
                            format!("must be a host name, an address or a CIDR range such as `10.0.0.0/8`, got `{h}`"),
                        ));
                    }
                }
                s.network.allow_hosts = hosts;
            }
        }
        if let Some(store) = raw.store {
            store.merge(&mut s.store, |key, detail| self.invalid(key, detail))?;
        }
        if let Some(index) = raw.run_index {
            index.merge(&mut s.run_index, |key, detail| self.invalid(key, detail))?;
        }
        if let Some(d) = raw.delegation {
            let c = &mut s.delegation;
            if let Some(v) = d.max_depth {
                c.max_depth = self.range("delegation.max_depth", u64::from(v), 0, 5)? as u32;
            }
            if let Some(v) = d.max_tokens {
                c.max_tokens = Some(self.range("delegation.max_tokens", v, 1, 100_000_000)?);
            }
            if let Some(v) = d.timeout_s {
                c.timeout_s = Some(self.range("delegation.timeout_s", v, 1, 86_400)?);
            }
            if let Some(v) = d.workspace {
                c.workspace = v;
            }
        }
        Ok(())
    }

    fn security(
        &self,
        s: &mut Settings,
        mode: Option<crate::SandboxMode>,
        limits: Option<crate::security::RawLimits>,
        read_paths: Option<Vec<String>>,
    ) -> Result<(), ConfigError> {
        if let Some(mode) = mode {
            s.sandbox.mode = mode;
        }
        if let Some(limits) = limits {
            limits.merge(&mut s.sandbox.limits, |key, v, min, max| {
                self.range(key, v, min, max)
            })?;
        }
        if let Some(paths) = read_paths {
            let mut out = Vec::new();
            for (i, p) in paths.iter().enumerate() {
                let path = expand_home(p);
                if !path.is_absolute() {
                    return Err(self.invalid(
                        format!("sandbox_read_paths[{i}]"),
                        format!("must be an absolute directory (or start with `~/`), got `{p}`"),
                    ));
                }
                out.push(path);
            }
            s.sandbox.read_paths = out;
        }
        Ok(())
    }

    /// Checks `specialist_dirs` and expands `~/`.
    fn dirs(&self, dirs: &[String]) -> Result<Vec<PathBuf>, ConfigError> {
        dirs.iter()
            .enumerate()
            .map(|(i, d)| {
                if d.trim().is_empty() {
                    Err(self.invalid(format!("specialist_dirs[{i}]"), "must name a directory"))
                } else {
                    Ok(expand_home(d))
                }
            })
            .collect()
    }

    fn web_search(&self, s: &mut Settings, raw: RawWebSearch) -> Result<(), ConfigError> {
        let w = &mut s.web_search;
        if let Some(p) = raw.provider {
            w.provider = p;
            // A provider's own address and key variable, unless the file names others.
            if w.provider == SearchProvider::Brave {
                w.base_url = BRAVE_URL.to_owned();
                w.api_key_env = Some(BRAVE_KEY_ENV.to_owned());
            }
        }
        if let Some(url) = raw.base_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(self.invalid(
                    "web_search.base_url",
                    format!("must start with http:// or https://, got `{url}`"),
                ));
            }
            w.base_url = url.trim_end_matches('/').to_owned();
        }
        if let Some(name) = raw.api_key_env {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(self.invalid(
                    "web_search.api_key_env",
                    "must be the name of an environment variable, e.g. BRAVE_SEARCH_API_KEY",
                ));
            }
            w.api_key_env = Some(name);
        }
        if let Some(t) = raw.timeout_s {
            w.timeout_s = self.range("web_search.timeout_s", t, 1, 300)?;
        }
        if let Some(n) = raw.max_results {
            w.max_results = self.range("web_search.max_results", u64::from(n), 1, 50)? as u32;
        }
        Ok(())
    }

    fn fetch_url(&self, s: &mut Settings, raw: RawFetchUrl) -> Result<(), ConfigError> {
        let f = &mut s.fetch_url;
        if let Some(t) = raw.timeout_s {
            f.timeout_s = self.range("fetch_url.timeout_s", t, 1, 300)?;
        }
        if let Some(b) = raw.max_download_bytes {
            f.max_download_bytes =
                self.range("fetch_url.max_download_bytes", b, 1024, 64 * 1024 * 1024)?;
        }
        if let Some(c) = raw.max_text_chars {
            f.max_text_chars = self.range("fetch_url.max_text_chars", c, 1000, 1_000_000)?;
        }
        if let Some(r) = raw.max_redirects {
            f.max_redirects = self.range("fetch_url.max_redirects", u64::from(r), 0, 20)? as u32;
        }
        Ok(())
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
            m.backend = v;
        }
        if let Some(v) = raw.api_key_env {
            m.api_key_env = Some(v);
        }
        // Anthropic always needs a key; its SDKs read this variable.
        if m.backend == Backend::Anthropic && m.api_key_env.is_none() {
            m.api_key_env = Some("ANTHROPIC_API_KEY".to_owned());
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
        if let Some(p) = raw.price_per_mtok {
            let price = |name: &str, v: Option<f64>| match v {
                Some(v) if v.is_finite() && (0.0..=10_000.0).contains(&v) => Ok(v),
                Some(v) => Err(self.invalid(
                    at(&format!("price_per_mtok.{name}")),
                    format!("must be US dollars per million tokens between 0 and 10000, got {v}"),
                )),
                None => Err(self.invalid(
                    at(&format!("price_per_mtok.{name}")),
                    "is needed: give both `input` and `output` in US dollars per million tokens"
                        .to_owned(),
                )),
            };
            m.price_per_mtok = Some((price("input", p.input)?, price("output", p.output)?));
        }
        if let Some(v) = raw.tool_call_repair {
            m.tool_call_repair = Some(v);
        }
        if let Some(mode) = raw.constrained_decoding {
            let word = mode.as_str();
            let fits = match m.backend {
                fabric_domain::Backend::OpenAi => true,
                fabric_domain::Backend::Ollama => mode != fabric_domain::ConstrainedDecoding::Auto,
                fabric_domain::Backend::Anthropic => {
                    mode == fabric_domain::ConstrainedDecoding::Off
                }
            };
            if !fits {
                return Err(self.invalid(
                    at("constrained_decoding"),
                    format!("`{word}` is for OpenAI-compatible servers (`backend: openai`: `off`, `json_schema` or `auto`) and Ollama (`off` or `json_schema`, through its `format`); this key's backend takes `off`"),
                ));
            }
            m.constrained_decoding = Some(mode);
        }
        if let Some(v) = raw.max_concurrent_requests {
            m.max_concurrent_requests =
                Some(self.range(&at("max_concurrent_requests"), v, 1, 10_000)? as u32);
        }
        if let Some(v) = raw.context_window {
            m.context_window = Some(self.range(&at("context_window"), v, 512, 10_000_000)? as u32);
        }
        Ok(m)
    }

    /// Merges one specialist over `s`; `prefix` is its key path in messages (`specialists.ID`
    /// in the config file, empty in a markdown file).
    fn specialist(
        &self,
        s: &mut Settings,
        id: &str,
        raw: RawSpecialist,
        prefix: &str,
    ) -> Result<(), ConfigError> {
        let at = |field: &str| {
            if prefix.is_empty() {
                field.to_owned()
            } else {
                format!("{prefix}.{field}")
            }
        };
        let valid_id = !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_id {
            return Err(self.invalid(
                if prefix.is_empty() {
                    format!("name: {id}")
                } else {
                    prefix.to_owned()
                },
                "ids hold only letters, digits, `_` and `-`",
            ));
        }
        let existing = s.specialists.iter().position(|x| x.id == id);
        let mut spec = match existing {
            Some(i) => s.specialists[i].as_ref().clone(),
            None => SpecialistSpec {
                container_image: None,
                id: id.to_owned(),
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
                limitations: Vec::new(),
                tooling: Default::default(),
                loop_aids: Default::default(),
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
            check_finish_schema(&schema).map_err(|e| self.invalid(at("finish_schema"), e))?;
            spec.finish_schema = schema;
        }
        if let Some(image) = raw.container_image {
            if image.trim().is_empty()
                || image.contains(char::is_whitespace)
                || image.starts_with('-')
            {
                return Err(self.invalid(
                    at("container_image"),
                    format!("must be an image reference such as `docker.io/library/rust:1.95`, got `{image}`"),
                ));
            }
            spec.container_image = Some(image);
        }
        if let Some(v) = raw.limitations {
            spec.limitations = v;
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
        if let Some(n) = raw.repeat_limit {
            spec.loop_aids.repeat_limit = self.range(&at("repeat_limit"), n, 0, 100)? as u32;
        }
        if let Some(v) = raw.require_finish {
            spec.loop_aids.require_finish = v;
        }
        if let Some(servers) = raw.mcp_servers {
            spec.tooling.mcp_servers = crate::mcp::check_servers(servers)
                .map_err(|(key, detail)| self.invalid(at(&key), detail))?;
        }
        if let Some(v) = raw.tool_loading {
            spec.tooling.tool_loading = v;
        }
        if let Some(v) = raw.delegates {
            spec.tooling.delegates = v;
        }
        let rounds = match raw.max_repair_rounds {
            Some(n) => Some(self.range(&at("max_repair_rounds"), n, 1, 10)? as u32),
            None => None,
        };
        if let Some(b) = raw.budget {
            let mut limits = s.specialist_budgets.get(id).cloned().unwrap_or_default();
            self.budget(&at("budget"), b, &mut limits)?;
            s.specialist_budgets.insert(id.to_owned(), limits);
        }
        match (raw.critic, &mut spec.tooling.critic) {
            (Some(critic), _) => {
                spec.tooling.critic = Some(fabric_domain::CriticSpec {
                    specialist: critic,
                    max_repair_rounds: rounds.unwrap_or(fabric_domain::DEFAULT_MAX_REPAIR_ROUNDS),
                });
            }
            (None, Some(existing)) => {
                if let Some(n) = rounds {
                    existing.max_repair_rounds = n;
                }
            }
            (None, None) => {
                if rounds.is_some() {
                    return Err(self.invalid(
                        at("max_repair_rounds"),
                        "limits the critic's reviews, and this specialist has no `critic`; add `critic: reviewer` (or another read-only specialist)",
                    ));
                }
            }
        }
        match existing {
            Some(i) => s.specialists[i] = Arc::new(spec),
            None => s.specialists.push(Arc::new(spec)),
        }
        Ok(())
    }

    /// Reads a `budget:` map (top-level, or a specialist's) into `into`, limit by limit.
    fn budget(
        &self,
        prefix: &str,
        b: crate::raw::RawBudget,
        into: &mut crate::BudgetConfig,
    ) -> Result<(), ConfigError> {
        let at = |field: &str| format!("{prefix}.{field}");
        if let Some(v) = b.max_tokens {
            into.max_tokens = Some(self.range(&at("max_tokens"), v, 1, 1_000_000_000)?);
        }
        if let Some(v) = b.max_cost_usd {
            if !(v.is_finite() && v > 0.0 && v <= 1_000_000.0) {
                return Err(self.invalid(
                    at("max_cost_usd"),
                    format!("must be US dollars between 0 and 1000000, got {v}"),
                ));
            }
            into.max_cost_usd = Some(v);
        }
        if let Some(v) = b.max_wall_s {
            into.max_wall_s = Some(self.range(&at("max_wall_s"), v, 1, 604_800)?);
        }
        Ok(())
    }

    /// A budget in dollars needs a price on every model key its runs may use without a
    /// `--model-key`: the same rule `fabric run` applies, said by `config validate` too.
    fn check_cost_budgets(&self, s: &Settings) -> Result<(), ConfigError> {
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
    fn check_critic(&self, s: &Settings, id: &str, critic: &str) -> Result<(), ConfigError> {
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
        for spec in &s.specialists {
            if let Some(critic) = &spec.tooling.critic {
                self.check_critic(s, &spec.id, &critic.specialist)?;
            }
            for (i, id) in spec.tooling.delegates.iter().enumerate() {
                let problem = if *id == spec.id {
                    Some("a specialist cannot delegate to itself".to_owned())
                } else if s.specialist(id).is_none() {
                    Some(format!(
                        "no specialist `{id}`; the specialists are: {}",
                        s.specialist_ids().join(", ")
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

#[cfg(test)]
mod tests;

/// `local`, `UTC` (or `Z`), or `±HH:MM`.
fn parse_zone(text: &str) -> Option<crate::DayZone> {
    let text = text.trim();
    match text.to_ascii_lowercase().as_str() {
        "local" => return Some(crate::DayZone::Local),
        "utc" | "z" | "+00:00" => return Some(crate::DayZone::Utc),
        _ => {}
    }
    let (sign, rest) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':')?;
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    ((0..=14).contains(&h) && (0..60).contains(&m) && h.to_string().len() <= 2)
        .then_some(crate::DayZone::Offset(sign * (h * 3600 + m * 60)))
}
