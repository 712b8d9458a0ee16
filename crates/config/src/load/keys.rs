//! The top-level keys of one config file, merged group by group over the layer below.

use fabric_domain::{ContextCompaction, FallbackReason};
use std::path::PathBuf;

use crate::defaults::{BRAVE_KEY_ENV, BRAVE_URL};
use crate::dirs::expand_home;
use crate::error::ConfigError;
use crate::raw::{RawConfig, RawFetchUrl, RawWebSearch};
use crate::settings::{SearchProvider, Settings};

use super::Merger;
use crate::overlay::{set, set_some};

impl Merger {
    pub(super) fn apply(&self, s: &mut Settings, raw: RawConfig) -> Result<(), ConfigError> {
        if let Some(models) = raw.models {
            for (key, model) in models {
                let base = s.models.get(&key).cloned();
                let merged = self.model(&key, base, model)?;
                s.models.insert(key, merged);
            }
        }
        overlay!(s, raw; default_model_key, default_specialist, routing_model_key, routing,
            task_force_mode, local_llm_ensure_available, auto_pull_if_missing, auto_pull_model,
            network_allowed);
        overlay_within!(self, String::from, s, raw; task_force_max_parallel: 1, 64);
        if let Some(v) = raw.complexity_routing {
            self.complexity_routing(s, v)?;
        }
        if let Some(b) = raw.budget {
            self.budget("budget", b, &mut s.budget)?;
        }
        if let Some(limits) = raw.daily_budget {
            self.daily_budget(s, limits)?;
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
            self.cloud_fallback(s, v)?;
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
        overlay_within!(self, String::from, s, raw;
            local_llm_start_timeout_s: 1, 3600;
            max_steps: 1, 1000);
        if let Some(shell) = raw.shell {
            self.shell(s, shell)?;
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
        self.paths_and_hosts(s, raw.protected_paths, raw.network)?;
        if let Some(store) = raw.store {
            store.merge(&mut s.store, |key, detail| self.invalid(key, detail))?;
        }
        if let Some(index) = raw.run_index {
            index.merge(&mut s.run_index, |key, detail| self.invalid(key, detail))?;
        }
        if let Some(d) = raw.delegation {
            self.delegation(s, d)?;
        }
        if let Some(i) = raw.instructions {
            overlay_within!(self, |f: &str| format!("instructions.{f}"), s.instructions, i;
                max_bytes: 0, 1_048_576);
            overlay!(s.instructions, i; user_file);
        }
        if let Some(p) = raw.mcp_pool {
            overlay_within!(self, |f: &str| format!("mcp_pool.{f}"), s.mcp_pool, p;
                size: 0, 64; idle_timeout_s: 1, 86_400);
        }
        for (i, dir) in raw.trusted_projects.iter().flatten().enumerate() {
            let path = expand_home(dir);
            if !path.is_absolute() {
                return Err(self.invalid(
                    format!("trusted_projects[{i}]"),
                    format!("must be an absolute directory (or `~/...`), got `{dir}`"),
                ));
            }
            s.trusted_projects.push(path);
        }
        for (name, agent) in raw.agents.into_iter().flatten() {
            self.agent(s, name, agent)?;
        }
        if let Some(hooks) = raw.hooks {
            self.hooks(s, &hooks)?;
        }
        Ok(())
    }

    /// `hooks:`: Claude Code's settings shape, every mistake refused with its key (issue #43).
    fn hooks(&self, s: &mut Settings, value: &serde_json::Value) -> Result<(), ConfigError> {
        use fabric_domain::hooks::{HooksConfig, Strictness};
        if value.is_null() {
            s.hooks = HooksConfig::default();
            return Ok(());
        }
        let read = HooksConfig::read(value, Strictness::Refuse).map_err(|e| match e {
            fabric_domain::DomainError::InvalidHooks { key, detail } => self.invalid(key, detail),
            other => self.invalid("hooks", other.to_string()),
        })?;
        s.hooks = read.config;
        Ok(())
    }

    /// `complexity_routing:`: the threshold and the two model keys.
    pub(super) fn complexity_routing(
        &self,
        s: &mut Settings,
        v: crate::raw::RawComplexityRouting,
    ) -> Result<(), ConfigError> {
        let threshold = self
            .within("complexity_routing.threshold", v.threshold, 0, 100)?
            .unwrap_or(60);
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
        Ok(())
    }

    /// `daily_budget:`: a limit per model key and day.
    pub(super) fn daily_budget(
        &self,
        s: &mut Settings,
        limits: std::collections::BTreeMap<String, crate::raw::RawDailyLimit>,
    ) -> Result<(), ConfigError> {
        for (key, limit) in limits {
            let at = |field: &str| format!("daily_budget.{key}.{field}");
            if limit.max_tokens.is_none() && limit.max_cost_usd.is_none() {
                return Err(self.invalid(
                    format!("daily_budget.{key}"),
                    "needs `max_tokens` or `max_cost_usd` (per day)",
                ));
            }
            let max_tokens =
                self.within(&at("max_tokens"), limit.max_tokens, 1, 1_000_000_000_000)?;
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
        Ok(())
    }

    /// `cloud_fallback:`: the cloud key, when it is asked, and how often.
    pub(super) fn cloud_fallback(
        &self,
        s: &mut Settings,
        v: crate::raw::RawCloudFallback,
    ) -> Result<(), ConfigError> {
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
        let policy = v
            .policy
            .unwrap_or_else(|| vec![FallbackReason::NoToolCalls, FallbackReason::MalformedArgs]);
        let on = |reason| policy.contains(&reason);
        let max_per_run = self
            .within("cloud_fallback.max_per_run", v.max_per_run, 1, 1000)?
            .unwrap_or(3);
        s.cloud_fallback = Some(crate::FallbackPolicy {
            model_key,
            no_tool_calls: on(FallbackReason::NoToolCalls),
            malformed_args: on(FallbackReason::MalformedArgs),
            critic_rejected: on(FallbackReason::CriticRejected),
            max_per_run,
        });
        Ok(())
    }

    /// `shell:`: the commands allowed, the timeout and the variables passed on.
    pub(super) fn shell(
        &self,
        s: &mut Settings,
        shell: crate::raw::RawShell,
    ) -> Result<(), ConfigError> {
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
        overlay!(s.shell, shell; allowed_commands);
        for c in shell.also_allow.into_iter().flatten() {
            if !s.shell.allowed_commands.contains(&c) {
                s.shell.allowed_commands.push(c);
            }
        }
        overlay_within!(self, |f| format!("shell.{f}"), s.shell, shell; timeout_s: 1, 3600);
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
        Ok(())
    }

    /// One key of `agents:`: a remote A2A agent.
    fn agent(
        &self,
        s: &mut Settings,
        name: String,
        raw: crate::raw::RawAgent,
    ) -> Result<(), ConfigError> {
        let at = |field: &str| format!("agents.{name}.{field}");
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(self.invalid(
                format!("agents.{name}"),
                "names hold only letters, digits, `_` and `-` (the tool is `agent__<name>`)",
            ));
        }
        let base = s.agents.get(&name).cloned();
        let url = match (raw.url, base.as_ref()) {
            (Some(url), _) => url,
            (None, Some(base)) => base.url.clone(),
            (None, None) => {
                return Err(self.invalid(at("url"), "is needed: the agent's base URL, whose card is at `{url}/.well-known/agent-card.json`"));
            }
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(self.invalid(
                at("url"),
                format!("must start with http:// or https://, got `{url}`"),
            ));
        }
        if let Some(var) = &raw.token_env
            && (var.is_empty() || var.contains(['=', '\0']))
        {
            return Err(self.invalid(
                at("token_env"),
                "must be the name of an environment variable holding the agent's bearer token",
            ));
        }
        let timeout_s = self
            .within(&at("timeout_s"), raw.timeout_s, 1, 86_400)?
            .unwrap_or_else(|| base.as_ref().map_or(600, |b| b.timeout_s));
        let token_env = raw.token_env.or(base.and_then(|b| b.token_env));
        s.agents.insert(
            name,
            crate::settings::RemoteAgentSettings {
                url: url.trim_end_matches('/').to_owned(),
                token_env,
                timeout_s,
            },
        );
        Ok(())
    }

    /// `delegation:`: how deep, how much and where children work.
    pub(super) fn delegation(
        &self,
        s: &mut Settings,
        d: crate::raw::RawDelegation,
    ) -> Result<(), ConfigError> {
        let c = &mut s.delegation;
        overlay_within!(self, |f| format!("delegation.{f}"), c, d; max_depth: 0, 5);
        set_some(
            &mut c.max_tokens,
            self.within("delegation.max_tokens", d.max_tokens, 1, 100_000_000)?,
        );
        set_some(
            &mut c.timeout_s,
            self.within("delegation.timeout_s", d.timeout_s, 1, 86_400)?,
        );
        overlay!(c, d; workspace);
        Ok(())
    }

    /// `protected_paths:` and `network:`, each entry checked.
    pub(super) fn paths_and_hosts(
        &self,
        s: &mut Settings,
        protected_paths: Option<Vec<String>>,
        network: Option<crate::security::RawNetwork>,
    ) -> Result<(), ConfigError> {
        if let Some(paths) = protected_paths {
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
        if let Some(network) = network {
            overlay!(s.network, network; allow_private);
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
        Ok(())
    }

    pub(super) fn security(
        &self,
        s: &mut Settings,
        mode: Option<crate::SandboxMode>,
        limits: Option<crate::security::RawLimits>,
        read_paths: Option<Vec<String>>,
    ) -> Result<(), ConfigError> {
        set(&mut s.sandbox.mode, mode);
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
    pub(super) fn dirs(&self, dirs: &[String]) -> Result<Vec<PathBuf>, ConfigError> {
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

    pub(super) fn web_search(
        &self,
        s: &mut Settings,
        raw: RawWebSearch,
    ) -> Result<(), ConfigError> {
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
        overlay_within!(self, |f| format!("web_search.{f}"), w, raw;
            timeout_s: 1, 300;
            max_results: 1, 50);
        Ok(())
    }

    pub(super) fn fetch_url(&self, s: &mut Settings, raw: RawFetchUrl) -> Result<(), ConfigError> {
        let f = &mut s.fetch_url;
        overlay_within!(self, |k| format!("fetch_url.{k}"), f, raw;
            timeout_s: 1, 300;
            max_download_bytes: 1024, 64 * 1024 * 1024;
            max_text_chars: 1000, 1_000_000;
            max_redirects: 0, 20);
        Ok(())
    }
}

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
