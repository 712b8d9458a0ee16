//! Deterministic embeddings: [`hash_embedding`], and the two embedding endpoints that answer
//! with it, `POST /api/embed` (Ollama) and `POST /v1/embeddings` (OpenAI).
//!
//! No model is involved: each lowercase word of the text, and with a smaller weight each of
//! its character trigrams, is hashed to one coordinate with a sign (feature hashing), and the
//! sum is L2-normalised. Texts that share words therefore have a high cosine similarity and
//! unrelated texts are close to orthogonal, which is what a test of semantic search needs,
//! without a real embedding model and with the same vector on every machine and every run.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::server::{Shared, Wire, error_value, json_reply, model_name};

/// The weight of a whole word; a trigram counts [`TRIGRAM_WEIGHT`] of it. Words dominate so
/// that only shared words make texts close; trigrams let `runs` and `running` be a little
/// close, as a real model would make them.
const WORD_WEIGHT: f32 = 1.0;
/// See [`WORD_WEIGHT`].
const TRIGRAM_WEIGHT: f32 = 0.3;

/// The embedding of `text` in `dims` dimensions: feature hashing of its lowercase word tokens
/// (runs of letters and digits) and of their character trigrams, L2-normalised.
///
/// The same text always gives the same vector, on any machine (the hash is FNV-1a, not
/// std's randomly seeded one). A text without any word (empty, only punctuation) gives the
/// first unit vector rather than a zero vector, whose cosine with anything is undefined.
/// `dims == 0` gives an empty vector.
///
/// Public so that benchmarks can make synthetic embeddings without starting a server.
pub fn hash_embedding(text: &str, dims: usize) -> Vec<f32> {
    let mut vector = vec![0.0f32; dims];
    if dims == 0 {
        return vector;
    }
    let lower = text.to_lowercase();
    let words = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty());
    for word in words {
        add_feature(&mut vector, b"w", word.as_bytes(), WORD_WEIGHT);
        // `^` and `$` mark the word's ends, so short words still have trigrams and a
        // word's start and end count apart from its middle.
        let padded: Vec<char> = std::iter::once('^')
            .chain(word.chars())
            .chain(std::iter::once('$'))
            .collect();
        for gram in padded.windows(3) {
            let gram: String = gram.iter().collect();
            add_feature(&mut vector, b"t", gram.as_bytes(), TRIGRAM_WEIGHT);
        }
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut vector {
            *x /= norm;
        }
    } else {
        vector[0] = 1.0;
    }
    vector
}

/// Adds `weight` with a hashed sign at a hashed coordinate. The signs make collisions of
/// unrelated features cancel out on average instead of piling up into false similarity.
fn add_feature(vector: &mut [f32], kind: &[u8], feature: &[u8], weight: f32) {
    let hash = fnv1a(kind, feature);
    // The low bits pick the coordinate, the top bit the sign: independent enough for tests.
    let index = (hash % vector.len() as u64) as usize;
    let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
    vector[index] += sign * weight;
}

/// 64-bit FNV-1a of `kind`, a separator, then `feature`: stable across platforms and Rust
/// versions, unlike `std`'s hasher.
fn fnv1a(kind: &[u8], feature: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in kind.iter().chain(&[0u8]).chain(feature) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // FNV's low bits mix poorly for short keys; a final avalanche (from SplitMix64) spreads
    // them, so `% dims` uses the whole hash.
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// What an embedding request asked for.
struct EmbedRequest {
    model: String,
    inputs: Vec<String>,
    /// The client's `dimensions`, when it asked for a size (OpenAI's parameter).
    dims: Option<usize>,
    /// Roughly four characters a token, as the chat endpoints estimate.
    tokens: u64,
}

/// Records the request and checks it; `Err` is the reply to send instead (down, bad body),
/// boxed because a `Response` is large next to the request.
fn accept(
    shared: &Shared,
    wire: Wire,
    path: &str,
    raw: &Bytes,
) -> Result<EmbedRequest, Box<Response>> {
    let parsed = serde_json::from_slice::<Value>(raw);
    let recorded = match &parsed {
        Ok(body) => body.clone(),
        Err(_) => Value::String(String::from_utf8_lossy(raw).into_owned()),
    };
    shared.record_embedding(path, recorded);
    if shared.embeddings_down() {
        tracing::debug!("scripted LLM server: embeddings are down, answering 503");
        return Err(error(
            wire,
            StatusCode::SERVICE_UNAVAILABLE,
            "scripted LLM server: the embedding endpoint is down",
        ));
    }
    let request = parsed.map_err(|e| {
        error(
            wire,
            StatusCode::BAD_REQUEST,
            &format!("invalid JSON body: {e}"),
        )
    })?;
    if request.get("model").and_then(Value::as_str).is_none() {
        return Err(error(wire, StatusCode::BAD_REQUEST, "model is required"));
    }
    // Both APIs take one string or a list of strings.
    let inputs = match request.get("input") {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                error(
                    wire,
                    StatusCode::BAD_REQUEST,
                    "`input` must be a string or a list of strings",
                )
            })?,
        _ => {
            return Err(error(
                wire,
                StatusCode::BAD_REQUEST,
                "`input` must be a string or a list of strings",
            ));
        }
    };
    let dims = request
        .get("dimensions")
        .and_then(Value::as_u64)
        .and_then(|d| usize::try_from(d).ok())
        .filter(|&d| d > 0);
    let chars: usize = inputs.iter().map(String::len).sum();
    Ok(EmbedRequest {
        model: model_name(shared, &request),
        inputs,
        dims,
        tokens: (chars as u64 / 4).max(1),
    })
}

fn error(wire: Wire, status: StatusCode, message: &str) -> Box<Response> {
    Box::new(json_reply(status, &error_value(wire, status, message)))
}

/// `POST /api/embed {"model", "input"}` → `{"model", "embeddings": [[...]], ...}`.
pub(crate) async fn ollama(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let request = match accept(&shared, Wire::Ollama, "/api/embed", &body) {
        Ok(request) => request,
        Err(reply) => return *reply,
    };
    let dims = request.dims.unwrap_or(shared.scenario.embedding_dims);
    let embeddings: Vec<Vec<f32>> = request
        .inputs
        .iter()
        .map(|text| hash_embedding(text, dims))
        .collect();
    json_reply(
        StatusCode::OK,
        &json!({
            "model": request.model,
            "embeddings": embeddings,
            // Nanoseconds, as Ollama reports them; plausible, not measured.
            "total_duration": 1_000_000 * request.tokens,
            "load_duration": 1_000_000,
            "prompt_eval_count": request.tokens,
        }),
    )
}

/// `POST /v1/embeddings {"model", "input"}` → `{"data": [{"index", "embedding"}], ...}`.
pub(crate) async fn openai(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let request = match accept(&shared, Wire::OpenAi, "/v1/embeddings", &body) {
        Ok(request) => request,
        Err(reply) => return *reply,
    };
    let dims = request.dims.unwrap_or(shared.scenario.embedding_dims);
    let data: Vec<Value> = request
        .inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            json!({
                "object": "embedding",
                "index": index,
                "embedding": hash_embedding(text, dims),
            })
        })
        .collect();
    json_reply(
        StatusCode::OK,
        &json!({
            "object": "list",
            "data": data,
            "model": request.model,
            "usage": { "prompt_tokens": request.tokens, "total_tokens": request.tokens },
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn vectors_are_unit_length_and_deterministic() {
        let a = hash_embedding("Fix the failing login test", 768);
        assert_eq!(a.len(), 768);
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
        assert_eq!(a, hash_embedding("Fix the failing login test", 768));
        // Case and punctuation do not matter; words do.
        assert_eq!(a, hash_embedding("fix THE failing, login test!", 768));
    }

    #[test]
    fn shared_words_are_close_and_unrelated_texts_are_not() {
        let a = hash_embedding("refactor the parser of the config loader", 768);
        let b = hash_embedding("the config loader parser needs a refactor", 768);
        let c = hash_embedding("summarise quarterly revenue in a chart", 768);
        let close = cosine(&a, &b);
        let far = cosine(&a, &c);
        assert!(close > 0.7, "{close}");
        assert!(far.abs() < 0.2, "{far}");
    }

    #[test]
    fn texts_without_words_and_zero_dims_are_defined() {
        let empty = hash_embedding("  ?! ", 8);
        assert_eq!(empty, vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        assert!(hash_embedding("anything", 0).is_empty());
        assert!(hash_embedding("x", 1)[0].abs() > 0.99);
    }

    #[test]
    fn the_hash_is_stable() {
        // Pinned so that a change to the hash, which would silently change every synthetic
        // embedding benchmarks and stored fixtures rely on, fails here.
        let v = hash_embedding("hello", 16);
        let signs: Vec<i8> = v
            .iter()
            .map(|&x| i8::from(x > 0.0) - i8::from(x < 0.0))
            .collect();
        assert_eq!(
            signs,
            [0, 0, 0, 0, 1, -1, 0, 0, 0, 1, -1, 0, 0, 0, -1, 0],
            "{v:?}"
        );
    }
}
