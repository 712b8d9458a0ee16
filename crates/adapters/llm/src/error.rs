//! The one error of this crate's own: building a client. Everything a call can hit is
//! fabric-core's [`ChatError`], so the engine sees one vocabulary whatever the server.

use fabric_engine::ChatError;
use thiserror::Error;

/// Why a client could not be built from its settings.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ClientBuildError {
    /// The base URL is not an `http://` or `https://` address.
    #[error(
        "`base_url` `{url}` is not an http:// or https:// address; set it to the model server, for example http://localhost:11434/v1"
    )]
    InvalidBaseUrl {
        /// The configured value.
        url: String,
    },
    /// The HTTP client could not be set up (for example the TLS backend failed to start).
    #[error("could not set up the HTTP client: {detail}")]
    HttpClient {
        /// The HTTP library's own words.
        detail: String,
    },
    /// The backend has no embeddings API (Anthropic).
    #[error(
        "the `{backend}` backend has no embeddings API; point `run_index.embedding_model_key` at an Ollama or OpenAI-compatible model key"
    )]
    NoEmbeddings {
        /// The backend.
        backend: &'static str,
    },
}

/// Logs how a call ended and turns "wrong model" status errors into the errors that say so;
/// both clients end every call here.
pub(crate) fn conclude(
    result: Result<fabric_engine::ChatResponse, ChatError>,
    model: &str,
    not_found: NotFound,
    api: &'static str,
) -> Result<fabric_engine::ChatResponse, ChatError> {
    match &result {
        Ok(response) => tracing::debug!(
            api,
            tool_calls = response.tool_calls.len(),
            finish_reason = ?response.finish_reason,
            usage = ?response.usage,
            "chat answer"
        ),
        Err(error) => tracing::debug!(api, error = %error, "chat call failed"),
    }
    result.map_err(|e| classify(e, model, not_found))
}

/// How to read a 404 from this kind of server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotFound {
    /// Ollama's native API answers 404 exactly when the model is missing.
    MeansModel,
    /// On an OpenAI-compatible server a 404 may also be a wrong path (a missing `/v1`), so
    /// only a body that talks about the model counts.
    OnlyIfBodySaysModel,
}

/// Turns the status errors that mean "wrong model" into the errors that say so, which carry
/// the next step for the user.
pub(crate) fn classify(error: ChatError, model: &str, not_found: NotFound) -> ChatError {
    let ChatError::Status { url, status, body } = error else {
        return error;
    };
    let lower = body.to_lowercase();
    let too_long = lower.contains("exceed_context_size")
        || lower.contains("context_length_exceeded")
        || lower.contains("maximum context length")
        || lower.contains("exceeds the available context size");
    if (400..500).contains(&status) && too_long {
        return ChatError::ContextExceeded {
            url,
            detail: format!("HTTP {status}: {}", crate::transport::cut(&body)),
        };
    }
    if lower.contains("does not support tools") || lower.contains("tools are not supported") {
        return ChatError::ToolsUnsupported {
            model: model.to_owned(),
        };
    }
    let mentions_model = lower.contains("model");
    let model_missing = (status == 404 && (not_found == NotFound::MeansModel || mentions_model))
        || (mentions_model && (lower.contains("not found") || lower.contains("does not exist")));
    if model_missing {
        return ChatError::ModelNotFound {
            model: model.to_owned(),
            url,
        };
    }
    ChatError::Status { url, status, body }
}

/// An error object a server sent inside an answer or a stream (`{"message": …}`), as the
/// port's error. With the HTTP status it stands for (each wire reads that from its own
/// codes) it is retried and classified like that status; without one it names what the
/// server said.
pub(crate) fn reported_error(
    url: &str,
    error: &serde_json::Value,
    status: Option<u16>,
) -> ChatError {
    let message = error
        .get("message")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| error.to_string());
    match status {
        Some(status) => ChatError::Status {
            url: url.to_owned(),
            status,
            body: crate::transport::cut(&message),
        },
        None => ChatError::Decode {
            url: url.to_owned(),
            detail: format!(
                "the server reported an error: {}",
                crate::transport::cut(&message)
            ),
        },
    }
}

/// The HTTP status an error object's numeric `code` gives, as OpenAI-compatible servers
/// (llama.cpp, vLLM) write it.
pub(crate) fn numeric_status(error: &serde_json::Value) -> Option<u16> {
    match error.get("code").and_then(serde_json::Value::as_u64) {
        Some(status @ 400..=599) => Some(status as u16),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, body: &str) -> ChatError {
        ChatError::Status {
            url: "http://x".into(),
            status,
            body: body.into(),
        }
    }

    /// Issue #24: what llama.cpp, llama-cpp-python/OpenAI and vLLM answer to a prompt over
    /// their window becomes one error, which ends the run `context_window_exceeded`.
    #[test]
    fn issue_24_a_prompt_over_the_servers_window_is_named() {
        for body in [
            r#"{"error":{"code":400,"message":"request (5000 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}"#,
            r#"{"error":{"message":"Requested tokens (3000) exceed context window of 2048","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","code":400}"#,
        ] {
            let e = classify(status(400, body), "m", NotFound::OnlyIfBodySaysModel);
            assert!(e.is_context_exceeded(), "{body}");
            assert!(e.to_string().contains("set `context_window`"), "{e}");
        }
        let other = classify(status(400, r#"{"error":"bad"}"#), "m", NotFound::MeansModel);
        assert!(!other.is_context_exceeded());
    }

    #[test]
    fn tools_unsupported_is_recognised() {
        let e = classify(
            status(
                400,
                r#"{"error":"registry.ollama.ai/library/gemma:2b does not support tools"}"#,
            ),
            "gemma:2b",
            NotFound::MeansModel,
        );
        assert_eq!(
            e,
            ChatError::ToolsUnsupported {
                model: "gemma:2b".into()
            }
        );
    }

    #[test]
    fn not_found_depends_on_the_server_kind() {
        let e = classify(status(404, "404 page not found"), "m", NotFound::MeansModel);
        assert!(matches!(e, ChatError::ModelNotFound { .. }));
        let e = classify(
            status(404, "404 page not found"),
            "m",
            NotFound::OnlyIfBodySaysModel,
        );
        assert!(matches!(e, ChatError::Status { status: 404, .. }));
        let e = classify(
            status(
                404,
                r#"{"error":{"message":"The model `m` does not exist"}}"#,
            ),
            "m",
            NotFound::OnlyIfBodySaysModel,
        );
        assert!(matches!(e, ChatError::ModelNotFound { .. }));
    }

    #[test]
    fn other_errors_pass_through() {
        let e = classify(status(500, "boom"), "m", NotFound::MeansModel);
        assert_eq!(e, status(500, "boom"));
        let t = ChatError::Timeout {
            url: "u".into(),
            seconds: 1,
        };
        assert_eq!(classify(t.clone(), "m", NotFound::MeansModel), t);
    }
}
