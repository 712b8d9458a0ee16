//! One key of `models:`, merged over the key of the layer below or the defaults.

use crate::error::ConfigError;
use crate::raw::RawModel;
use crate::settings::{Backend, ModelConfig};

use super::Merger;

impl Merger {
    pub(super) fn model(
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
                fabric_domain::Backend::Anthropic | fabric_domain::Backend::OpenAiResponses => {
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
        if let Some(v) = raw.response_chaining {
            if m.backend != Backend::OpenAiResponses {
                return Err(self.invalid(
                    at("response_chaining"),
                    "is for `backend: openai-responses` (the Responses API); this key's backend sends the whole conversation every time",
                ));
            }
            m.response_chaining = v;
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
}
