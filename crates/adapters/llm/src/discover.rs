//! Model discovery and bootstrap over HTTP: is the server up, which models does an
//! OpenAI-compatible server list, and pulling a model into Ollama with progress.
//! Choosing among the models is not done here (that is `fabric_engine::models`).

use fabric_engine::ChatError;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use std::time::Duration;

use crate::error::{NotFound, classify};
use crate::lines::LineSplitter;
use crate::ollama::OllamaClient;
use crate::openai::OpenAiClient;
use crate::transport::{HttpSettings, Transport, decode_json};

/// Whether anything answers at the server's root (`/v1` dropped) within `timeout`: any
/// HTTP answer below 500 counts as up. One attempt, no retries: this is a probe.
pub async fn probe(base_url: &str, timeout: Duration) -> Result<(), ChatError> {
    let mut settings = HttpSettings::new(base_url);
    settings.max_retries = 0;
    settings.timeout_s = timeout.as_secs().max(1);
    settings.connect_timeout_s = timeout.as_secs().max(1);
    let transport = Transport::new(&settings).map_err(|e| ChatError::Unreachable {
        url: base_url.to_owned(),
        detail: e.to_string(),
    })?;
    let base = transport.base_url();
    let root = base.strip_suffix("/v1").unwrap_or(base).to_owned();
    match transport
        .fetch(Method::GET, &format!("{root}/"), None::<&()>)
        .await
    {
        Ok(_) => Ok(()),
        Err(ChatError::Status { status, .. }) if status < 500 => Ok(()),
        Err(e) => Err(e),
    }
}

#[derive(Debug, Default, Deserialize)]
struct ModelList {
    #[serde(default)]
    data: Option<Vec<ModelEntry>>,
}

#[derive(Debug, Default, Deserialize)]
struct ModelEntry {
    #[serde(default)]
    id: Option<String>,
}

impl OpenAiClient {
    /// The model ids the server lists (`GET {base_url}/models`).
    pub async fn list_models(&self) -> Result<Vec<String>, ChatError> {
        let url = format!("{}/models", self.base_url());
        let bytes = self
            .transport()
            .fetch(Method::GET, &url, None::<&()>)
            .await?;
        let list: ModelList = decode_json(&url, &bytes)?;
        Ok(list
            .data
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| m.id.filter(|id| !id.is_empty()))
            .collect())
    }
}

/// llama.cpp's `GET /props`: the context window of each slot, what the chat template can do.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Props {
    #[serde(default)]
    default_generation_settings: Option<SlotSettings>,
    #[serde(default)]
    n_ctx: Option<u64>,
    #[serde(default)]
    chat_template_caps: Option<TemplateCaps>,
}

#[derive(Debug, Default, Deserialize)]
struct TemplateCaps {
    #[serde(default)]
    supports_tools: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
struct SlotSettings {
    #[serde(default)]
    n_ctx: Option<u64>,
}

impl OpenAiClient {
    /// The context window the server gives each request, when it reports one: llama.cpp's
    /// `GET /props` (`default_generation_settings.n_ctx`, the window of one slot). `None`
    /// for servers without `/props` (vLLM, LM Studio, clouds) or an answer without it.
    pub async fn context_window(&self) -> Option<u64> {
        let props = self.props().await?;
        props
            .default_generation_settings
            .and_then(|s| s.n_ctx)
            .or(props.n_ctx)
            .filter(|n| *n > 0)
    }

    /// Whether the server says its chat template cannot call tools (llama.cpp's `/props`,
    /// `chat_template_caps.supports_tools: false`); `false` when it does not say.
    pub(crate) async fn template_lacks_tools(&self) -> bool {
        self.props()
            .await
            .and_then(|p| p.chat_template_caps)
            .and_then(|c| c.supports_tools)
            == Some(false)
    }

    async fn props(&self) -> Option<Props> {
        props(self.transport()).await
    }
}

/// llama.cpp's `GET /props` beside the API root of `transport`, or `None` from a server
/// without it.
pub(crate) async fn props(transport: &Transport) -> Option<Props> {
    let base = transport.base_url();
    let root = base.strip_suffix("/v1").unwrap_or(base);
    let url = format!("{root}/props");
    let bytes = transport
        .fetch(Method::GET, &url, None::<&()>)
        .await
        .map_err(|e| tracing::debug!(%url, "no /props: {e}"))
        .ok()?;
    decode_json(&url, &bytes).ok()
}

/// What llama.cpp's `/props` says of a server's chat template, when it answers: whether
/// the template can call tools (`None`: it does not say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LlamaProps {
    pub(crate) supports_tools: Option<bool>,
}

impl LlamaProps {
    /// Asks the server behind `transport`; `None` when it has no `/props` (not llama.cpp).
    pub(crate) async fn of(transport: &Transport) -> Option<Self> {
        let props = props(transport).await?;
        Some(Self {
            supports_tools: props.chat_template_caps.and_then(|c| c.supports_tools),
        })
    }
}

/// One progress line of `POST /api/pull`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct PullProgress {
    /// What Ollama is doing (`pulling manifest`, `downloading ...`, `success`).
    #[serde(default)]
    pub status: String,
    /// Bytes of the current layer, when known.
    #[serde(default)]
    pub total: Option<u64>,
    /// Bytes of it done so far.
    #[serde(default)]
    pub completed: Option<u64>,
    /// The layer digest, when the line is about one.
    #[serde(default)]
    pub digest: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct PullBody<'a> {
    model: &'a str,
    stream: bool,
}

impl OllamaClient {
    /// Pulls a model (`POST /api/pull`), calling `progress` with every NDJSON line as it
    /// arrives. Ends when the server says `success`; an `error` line or a stream that ends
    /// without `success` is an error naming the model.
    pub async fn pull(
        &self,
        model: &str,
        progress: &mut (dyn FnMut(&PullProgress) + Send),
    ) -> Result<(), ChatError> {
        let url = format!("{}/api/pull", self.root());
        let mut response = self
            .transport()
            .open_stream(
                &url,
                &PullBody {
                    model,
                    stream: true,
                },
            )
            .await
            .map_err(|e| classify(e, model, NotFound::MeansModel))?;
        let mut lines = LineSplitter::default();
        loop {
            let chunk = self.transport().next_chunk(&url, &mut response).await?;
            let ended = chunk.is_none();
            let batch = match chunk {
                Some(bytes) => lines.push(&bytes),
                None => lines.finish().into_iter().collect(),
            };
            for line in batch.iter().filter(|l| !l.trim().is_empty()) {
                let update: PullProgress = decode_json(&url, line.as_bytes())?;
                if let Some(error) = &update.error {
                    return Err(ChatError::Decode {
                        url: url.clone(),
                        detail: format!("pulling `{model}` failed: {error}"),
                    });
                }
                progress(&update);
                if update.status == "success" {
                    return Ok(());
                }
            }
            if ended {
                return Err(ChatError::Decode {
                    url,
                    detail: format!("the pull of `{model}` ended without `success`"),
                });
            }
        }
    }
}
