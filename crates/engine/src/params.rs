//! The model a loop asks and how to sample it: a leaf, read by the loop ([`crate::engine`]),
//! the gate and the run's preparation alike, so none of them imports another for it.

/// The model and how to sample it.
#[derive(Debug, Clone, Default, PartialEq)]
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
    /// What its tokens cost, when the config says (`price_per_mtok`).
    pub price: Option<crate::budget::Price>,
    /// Recover tool calls its server handed back as text (`tool_call_repair`;
    /// [`crate::repair`]).
    pub tool_call_repair: bool,
    /// Its context window in tokens, when known: the conversation is compacted to fit it
    /// ([`crate::context`]).
    pub context_window: Option<u32>,
    /// Left-out turns are summarised by the model (`context_compaction: summarize`) rather
    /// than listed.
    pub summarize_compaction: bool,
    /// It reads images (`vision`): the images a tool returns go to it with the result
    /// ([`fabric_domain::ToolImage`]); otherwise only the result's text does.
    pub vision: bool,
}

impl ModelParams {
    /// Model `name`, sampled as its server does by default, not streamed, with no price, no
    /// tool-call repair and no known window: what a test or a bench asks for, the settings
    /// then changed as it needs.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }
}
