//! Embeddings: fabric-core's [`EmbeddingClient`] on both clients, over the same transport as
//! chat (retries, API key, timeouts).
//!
//! - [`OllamaClient`]: `POST {root}/api/embed` `{"model", "input": [..]}` →
//!   `{"embeddings": [[..], ..]}`, in input order.
//! - [`OpenAiClient`]: `POST {base_url}/embeddings` `{"model", "input": [..]}` →
//!   `{"data": [{"index", "embedding"}, ..]}`, put in input order by `index` (the API does
//!   not promise the order of `data`).
//!
//! Whatever the server, the answer is checked before anyone stores it: one vector per input,
//! every vector a non-empty list of numbers, all of one length. A vector of the wrong length
//! would poison every later similarity, so it is an error, not a warning. Every failure is a
//! [`ChatError::Embedding`] naming the model, around a cause naming the server.

use async_trait::async_trait;
use fabric_engine::{ChatError, EmbeddingClient};
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{NotFound, classify};
use crate::ollama::OllamaClient;
use crate::openai::OpenAiClient;
use crate::transport::{Transport, cut, decode_json};

/// The request body; both APIs take the same two fields.
#[derive(Debug, Serialize)]
struct EmbedBody<'a> {
    model: &'a str,
    input: &'a [String],
}

/// Ollama's answer. Vectors are read as JSON values first so that a value that is not a
/// number is reported with its place instead of as serde's generic type error.
#[derive(Debug, Default, Deserialize)]
struct OllamaAnswer {
    #[serde(default)]
    embeddings: Option<Vec<Value>>,
    #[serde(default)]
    error: Option<Value>,
}

/// An OpenAI-compatible answer.
#[derive(Debug, Default, Deserialize)]
struct OpenAiAnswer {
    #[serde(default)]
    data: Option<Vec<OpenAiEntry>>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct OpenAiEntry {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    embedding: Value,
}

#[async_trait]
impl EmbeddingClient for OllamaClient {
    async fn embed(&self, model: &str, inputs: &[String]) -> Result<Vec<Vec<f32>>, ChatError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let url = format!("{}/api/embed", self.root());
        let result = async {
            let bytes = post(self.transport(), &url, model, inputs)
                .await
                .map_err(|e| classify(e, model, NotFound::MeansModel))?;
            let answer: OllamaAnswer = decode_json(&url, &bytes)?;
            if let Some(error) = answer.error {
                return Err(reported(&url, &error));
            }
            let vectors = answer.embeddings.unwrap_or_default();
            check(&url, inputs.len(), vectors)
        }
        .await;
        conclude(result, model, &url, inputs.len(), "ollama")
    }
}

#[async_trait]
impl EmbeddingClient for OpenAiClient {
    async fn embed(&self, model: &str, inputs: &[String]) -> Result<Vec<Vec<f32>>, ChatError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let url = format!("{}/embeddings", self.base_url());
        let result = async {
            let bytes = post(self.transport(), &url, model, inputs)
                .await
                .map_err(|e| classify(e, model, NotFound::OnlyIfBodySaysModel))?;
            let answer: OpenAiAnswer = decode_json(&url, &bytes)?;
            if let Some(error) = answer.error {
                return Err(reported(&url, &error));
            }
            let entries = in_input_order(&url, answer.data.unwrap_or_default())?;
            check(&url, inputs.len(), entries)
        }
        .await;
        conclude(result, model, &url, inputs.len(), "openai")
    }
}

async fn post(
    transport: &Transport,
    url: &str,
    model: &str,
    inputs: &[String],
) -> Result<Vec<u8>, ChatError> {
    tracing::debug!(url, model, inputs = inputs.len(), "embedding request");
    transport
        .fetch(
            Method::POST,
            url,
            Some(&EmbedBody {
                model,
                input: inputs,
            }),
        )
        .await
}

/// Logs how the call ended and wraps a failure so its message names the model.
fn conclude(
    result: Result<Vec<Vec<f32>>, ChatError>,
    model: &str,
    url: &str,
    inputs: usize,
    api: &'static str,
) -> Result<Vec<Vec<f32>>, ChatError> {
    match result {
        Ok(vectors) => {
            tracing::debug!(
                api,
                url,
                model,
                inputs,
                dims = vectors.first().map_or(0, Vec::len),
                "embedding answer"
            );
            Ok(vectors)
        }
        Err(error) => {
            tracing::debug!(api, url, model, error = %error, "embedding call failed");
            Err(ChatError::Embedding {
                model: model.to_owned(),
                cause: Box::new(error),
            })
        }
    }
}

/// The entries' vectors ordered by `index`. Without indexes the order of `data` is taken as
/// it is, as servers that omit them send it; an index that is repeated, out of range or
/// given for only some entries is an error, since the vectors could not be matched to the
/// texts.
fn in_input_order(url: &str, entries: Vec<OpenAiEntry>) -> Result<Vec<Value>, ChatError> {
    if entries.iter().all(|e| e.index.is_none()) {
        return Ok(entries.into_iter().map(|e| e.embedding).collect());
    }
    let n = entries.len();
    let mut slots: Vec<Option<Value>> = vec![None; n];
    for (position, entry) in entries.into_iter().enumerate() {
        let index = entry.index.and_then(|i| usize::try_from(i).ok());
        let slot = index.and_then(|i| slots.get_mut(i));
        match slot {
            Some(slot @ None) => *slot = Some(entry.embedding),
            _ => {
                return Err(decode(
                    url,
                    format!(
                        "entry {position} of `data` has index {}, which is missing, repeated or not below the {n} entries; the vectors cannot be matched to the texts",
                        entry
                            .index
                            .map_or_else(|| "none".to_owned(), |i| i.to_string())
                    ),
                ));
            }
        }
    }
    // Every slot is filled: `n` distinct indexes below `n`.
    Ok(slots.into_iter().flatten().collect())
}

/// Checks the vectors against the inputs and turns them into numbers.
fn check(url: &str, inputs: usize, vectors: Vec<Value>) -> Result<Vec<Vec<f32>>, ChatError> {
    if vectors.is_empty() {
        return Err(decode(
            url,
            format!("the answer has no embeddings for the {inputs} texts sent"),
        ));
    }
    if vectors.len() != inputs {
        return Err(decode(
            url,
            format!(
                "the answer has {} embeddings for the {inputs} texts sent",
                vectors.len()
            ),
        ));
    }
    let mut out: Vec<Vec<f32>> = Vec::with_capacity(inputs);
    for (i, value) in vectors.iter().enumerate() {
        let vector = numbers(url, i, value)?;
        if let Some(first) = out.first()
            && first.len() != vector.len()
        {
            return Err(decode(
                url,
                format!(
                    "embedding {i} has {} dimensions but embedding 0 has {}; all must be the same length",
                    vector.len(),
                    first.len()
                ),
            ));
        }
        out.push(vector);
    }
    Ok(out)
}

/// One vector: a non-empty list of numbers.
fn numbers(url: &str, i: usize, value: &Value) -> Result<Vec<f32>, ChatError> {
    let Some(items) = value.as_array() else {
        return Err(decode(
            url,
            format!(
                "embedding {i} is not a list of numbers: {}",
                cut(&value.to_string())
            ),
        ));
    };
    if items.is_empty() {
        return Err(decode(url, format!("embedding {i} is empty")));
    }
    items
        .iter()
        .enumerate()
        .map(|(j, item)| {
            item.as_f64().map(|x| x as f32).ok_or_else(|| {
                decode(
                    url,
                    format!(
                        "embedding {i} has a value that is not a number at position {j}: {}",
                        cut(&item.to_string())
                    ),
                )
            })
        })
        .collect()
}

/// An error the server put in a successful answer.
fn reported(url: &str, error: &Value) -> ChatError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .map_or_else(|| error.to_string(), str::to_owned);
    decode(
        url,
        format!("the server reported an error: {}", cut(&message)),
    )
}

fn decode(url: &str, detail: String) -> ChatError {
    ChatError::Decode {
        url: url.to_owned(),
        detail,
    }
}
