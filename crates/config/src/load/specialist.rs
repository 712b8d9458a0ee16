//! One specialist (from `specialists:` or a markdown file) and `budget:` maps.

use fabric_domain::{SpecialistSpec, check_finish_schema};
use std::sync::Arc;

use crate::builtins::engineering_finish_schema;
use crate::error::ConfigError;
use crate::raw::RawSpecialist;
use crate::settings::Settings;

use super::Merger;
use crate::overlay::{set, set_some};

impl Merger {
    /// Merges one specialist over `s`; `prefix` is its key path in messages (`specialists.ID`
    /// in the config file, empty in a markdown file).
    pub(super) fn specialist(
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
                // An ACP agent's prompt and tools are its own.
                system_prompt: raw
                    .system_prompt
                    .clone()
                    .or_else(|| raw.acp.as_ref().map(|_| String::new()))
                    .ok_or_else(|| {
                        self.invalid(
                            at("system_prompt"),
                            "a new specialist needs a `system_prompt`",
                        )
                    })?,
                tools: raw
                    .tools
                    .clone()
                    .or_else(|| raw.acp.as_ref().map(|_| Vec::new()))
                    .ok_or_else(|| {
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
                approval: Default::default(),
                project_instructions: true,
            },
        };
        overlay!(spec, raw; description, keywords, capabilities, system_prompt, tools);
        if let Some(schema) = raw.finish_schema {
            check_finish_schema(&schema)
                .map_err(|e| self.invalid(at("finish_schema"), e.to_string()))?;
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
        overlay!(spec, raw; limitations, may_write, needs_network, project_instructions);
        set_some(&mut spec.model_key, raw.model_key);
        overlay_within!(self, at, spec.loop_aids, raw; repeat_limit: 0, 100);
        overlay!(spec.loop_aids, raw; require_finish);
        if let Some(approval) = raw.approval {
            spec.approval = approval;
        }
        if let Some(servers) = raw.mcp_servers {
            spec.tooling.mcp_servers = crate::mcp::check_servers(servers)
                .map_err(|(key, detail)| self.invalid(at(&key), detail))?;
        }
        overlay!(spec.tooling, raw; tool_loading, delegates);
        if let Some(acp) = raw.acp {
            spec.tooling.acp = Some(self.acp_agent(&at("acp"), acp)?);
        }
        let rounds = self.within(&at("max_repair_rounds"), raw.max_repair_rounds, 1, 10)?;
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
                set(&mut existing.max_repair_rounds, rounds);
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
    pub(super) fn budget(
        &self,
        prefix: &str,
        b: crate::raw::RawBudget,
        into: &mut crate::BudgetLimits,
    ) -> Result<(), ConfigError> {
        let at = |field: &str| format!("{prefix}.{field}");
        set_some(
            &mut into.max_tokens,
            self.within(&at("max_tokens"), b.max_tokens, 1, 1_000_000_000)?,
        );
        if let Some(v) = b.max_cost_usd {
            if !(v.is_finite() && v > 0.0 && v <= 1_000_000.0) {
                return Err(self.invalid(
                    at("max_cost_usd"),
                    format!("must be US dollars between 0 and 1000000, got {v}"),
                ));
            }
            into.max_cost_usd = Some(v);
        }
        set_some(
            &mut into.max_wall_s,
            self.within(&at("max_wall_s"), b.max_wall_s, 1, 604_800)?,
        );
        Ok(())
    }
}

impl Merger {
    /// A specialist's `acp:`: the program that speaks ACP, checked to be named.
    fn acp_agent(
        &self,
        key: &str,
        raw: crate::raw::RawAcpAgent,
    ) -> Result<fabric_domain::AcpAgentSpec, ConfigError> {
        if raw.command.trim().is_empty() {
            return Err(self.invalid(
                format!("{key}.command"),
                "names the program that speaks ACP on its stdin/stdout, e.g. `node` with `args: [agent.mjs]`",
            ));
        }
        let timeout_s = self
            .within(&format!("{key}.timeout_s"), raw.timeout_s, 1, 86_400)?
            .unwrap_or(fabric_domain::DEFAULT_ACP_TIMEOUT_S);
        Ok(fabric_domain::AcpAgentSpec {
            command: raw.command,
            args: raw.args,
            env: raw.env,
            timeout_s,
        })
    }
}
