//! The model a loop asks and how to sample it: a leaf, read by the loop ([`crate::engine`]),
//! the gate and the run's preparation alike, so none of them imports another for it.

use fabric_domain::{Backend, ModelConfig};
use std::sync::Arc;

/// What one member asks its model key for at each call (ADR-098): the model the key's
/// server runs for this run (discovery may choose another than the configured one), the
/// sampling of a call (`None`: the server's default; an MCP sampling request may ask its
/// own), whether to stream, and the window the conversation is kept to. What the key
/// itself says (price, tool-call repair, vision) is read from `config`, shared, never
/// copied.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelParams {
    /// The model name on the server.
    pub name: String,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    pub top_p: Option<f32>,
    /// Upper bound of generated tokens per call.
    pub max_tokens: Option<u32>,
    /// Stream responses.
    pub stream: bool,
    /// Its context window in tokens, when known (the key's, or what its server reported):
    /// the conversation is compacted to fit it ([`crate::context`]).
    pub context_window: Option<u32>,
    /// Left-out turns are summarised by the model (`context_compaction: summarize`) rather
    /// than listed.
    pub summarize_compaction: bool,
    /// The model key as configured, shared by every run on it.
    pub config: Arc<ModelConfig>,
}

impl ModelParams {
    /// Model `name`, sampled as its server does by default, not streamed, with no price, no
    /// tool-call repair and no known window: what a test or a bench asks for, the settings
    /// then changed as it needs.
    pub fn named(name: impl Into<String>) -> Self {
        let name = name.into();
        Self {
            config: Arc::new(ModelConfig::new(Backend::OpenAi, "", name.clone())),
            name,
            temperature: None,
            top_p: None,
            max_tokens: None,
            stream: false,
            context_window: None,
            summarize_compaction: false,
        }
    }

    /// What its tokens cost, when the key says (`price_per_mtok`).
    pub fn price(&self) -> Option<crate::budget::Price> {
        self.config.price_per_mtok
    }

    /// Recover tool calls its server handed back as text (`tool_call_repair`;
    /// [`crate::repair`]).
    pub fn repairs_tool_calls(&self) -> bool {
        self.config.repairs_tool_calls()
    }

    /// It reads images (`vision`): the images a tool returns go to it with the result
    /// ([`fabric_domain::ToolImage`]); otherwise only the result's text does.
    pub fn vision(&self) -> bool {
        self.config.vision
    }
}
