//! One key of `models:`, merged over the key of the layer below or the defaults.

use crate::error::ConfigError;
use crate::raw::RawModel;
use crate::settings::{Backend, ModelConfig};

use super::Merger;
use crate::overlay::set_some;

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
        overlay!(m, raw; backend, vision);
        set_some(&mut m.api_key_env, raw.api_key_env);
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
        overlay_within!(self, at, m, raw;
            max_tokens: 1, 1_000_000;
            timeout_s: 1, 3600;
            num_ctx: 512, 10_000_000;
            max_retries: 0, 20);
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
            m.price_per_mtok = Some(crate::Price {
                input_per_mtok: price("input", p.input)?,
                output_per_mtok: price("output", p.output)?,
            });
        }
        set_some(&mut m.tool_call_repair, raw.tool_call_repair);
        if let Some(mode) = raw.constrained_decoding {
            let word = mode.as_str();
            let fits = match m.backend {
                fabric_domain::Backend::OpenAi | fabric_domain::Backend::OpenAiResponses => true,
                fabric_domain::Backend::Ollama => mode != fabric_domain::ConstrainedDecoding::Auto,
                fabric_domain::Backend::Anthropic => {
                    mode == fabric_domain::ConstrainedDecoding::Off
                }
            };
            if !fits {
                let takes = match m.backend {
                    fabric_domain::Backend::Ollama => "`off` or `json_schema`",
                    _ => "only `off` (the Anthropic API has no JSON-schema sampling)",
                };
                return Err(self.invalid(
                    at("constrained_decoding"),
                    format!("`{word}` is for OpenAI-compatible servers (`backend: openai` or `openai-responses`: `off`, `json_schema` or `auto`) and Ollama (`off` or `json_schema`, through its `format`); this key's backend takes {takes}"),
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
        set_some(
            &mut m.max_concurrent_requests,
            self.within(
                &at("max_concurrent_requests"),
                raw.max_concurrent_requests,
                1,
                10_000,
            )?,
        );
        set_some(
            &mut m.context_window,
            self.within(&at("context_window"), raw.context_window, 512, 10_000_000)?,
        );
        Ok(m)
    }
}
