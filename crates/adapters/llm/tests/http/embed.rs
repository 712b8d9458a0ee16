//! Embeddings over both wires: the happy path against the scripted server (deterministic
//! hash embeddings), malformed answers against the mock.

use fabric_engine::{ChatError, EmbeddingClient};
use fabric_llm::{Backend, OllamaClient, OpenAiClient, build_embedder};
use fabric_test_support::{Scenario, ScriptedServer, hash_embedding};
use serde_json::json;

use crate::mock::{Reply, settings, start};

fn texts() -> Vec<String> {
    vec![
        "fix the flaky login test".to_owned(),
        "summarise the quarterly revenue".to_owned(),
    ]
}

/// The cause inside the wrapper every embedding error is, after checking the wrapper names
/// the model.
fn unwrap_cause(error: ChatError, model: &str) -> ChatError {
    let text = error.to_string();
    assert!(text.contains(&format!("`{model}`")), "{text}");
    match error {
        ChatError::Embedding { model: m, cause } => {
            assert_eq!(m, model);
            *cause
        }
        other => panic!("not an embedding error: {other:?}"),
    }
}

#[tokio::test]
async fn ollama_embeds_against_the_scripted_server() {
    let server = ScriptedServer::start(Scenario::default()).await.unwrap();
    // The `/v1` of an OpenAI-style base URL is dropped for the native API, as for chat.
    let embedder = build_embedder(Backend::Ollama, &settings(&server.base_url())).unwrap();
    let vectors = embedder.embed("nomic-embed-text", &texts()).await.unwrap();
    assert_eq!(
        vectors,
        texts()
            .iter()
            .map(|t| hash_embedding(t, 768))
            .collect::<Vec<_>>()
    );
    assert_eq!(server.hits("/api/embed"), 1);
    let sent = &server.embedding_requests()[0];
    assert_eq!(sent.path, "/api/embed");
    assert_eq!(
        sent.body,
        json!({"model": "nomic-embed-text", "input": texts()})
    );
    server.shutdown().await;
}

#[tokio::test]
async fn openai_embeds_against_the_scripted_server() {
    let scenario = Scenario::from_yaml("embedding_dims: 64\n").unwrap();
    let server = ScriptedServer::start(scenario).await.unwrap();
    let embedder = build_embedder(Backend::OpenAi, &settings(&server.base_url())).unwrap();
    let vectors = embedder.embed("embed-small", &texts()).await.unwrap();
    assert_eq!(vectors.len(), 2);
    assert_eq!(vectors[1], hash_embedding(&texts()[1], 64));
    assert_eq!(server.hits("/v1/embeddings"), 1);
    assert_eq!(
        server.embedding_requests()[0].body,
        json!({"model": "embed-small", "input": texts()})
    );
    server.shutdown().await;
}

#[tokio::test]
async fn no_texts_means_no_request() {
    let server = ScriptedServer::start(Scenario::default()).await.unwrap();
    for backend in [Backend::Ollama, Backend::OpenAi] {
        let embedder = build_embedder(backend, &settings(&server.base_url())).unwrap();
        assert!(embedder.embed("m", &[]).await.unwrap().is_empty());
    }
    assert_eq!(server.embedding_request_count(), 0);
    server.shutdown().await;
}

#[tokio::test]
async fn a_server_that_is_down_is_an_error_naming_model_and_server() {
    let scenario = Scenario::from_yaml("embeddings: down\n").unwrap();
    let server = ScriptedServer::start(scenario).await.unwrap();
    let mut s = settings(&server.root_url());
    s.max_retries = 0;
    let embedder = build_embedder(Backend::Ollama, &s).unwrap();
    let error = embedder
        .embed("nomic-embed-text", &texts())
        .await
        .unwrap_err();
    assert!(error.is_retryable(), "a 503 may pass: {error:?}");
    assert_eq!(error.kind_tag(), "http_status");
    let text = error.to_string();
    assert!(text.contains(&server.root_url()), "{text}");
    let cause = unwrap_cause(error, "nomic-embed-text");
    assert!(
        matches!(cause, ChatError::Status { status: 503, .. }),
        "{cause:?}"
    );

    // With retries, the transport tries again before giving up; then it works once up.
    let s = settings(&server.base_url());
    let embedder = OpenAiClient::new(&s).unwrap();
    let error = embedder.embed("m", &texts()).await.unwrap_err();
    assert!(
        matches!(
            unwrap_cause(error, "m"),
            ChatError::RetriesExhausted { attempts: 3, .. }
        ),
        "three attempts with max_retries 2"
    );
    assert_eq!(server.hits("/v1/embeddings"), 3);
    server.set_embeddings_down(false);
    assert_eq!(embedder.embed("m", &texts()).await.unwrap().len(), 2);
    server.shutdown().await;
}

#[tokio::test]
async fn openai_data_is_put_in_input_order_by_index() {
    let (base, mock) = start(vec![Reply::json(json!({
        "object": "list",
        "data": [
            {"object": "embedding", "index": 1, "embedding": [0.0, 1.0]},
            {"object": "embedding", "index": 0, "embedding": [1.0, 0.0]}
        ]
    }))])
    .await;
    let client = OpenAiClient::new(&settings(&format!("{base}/v1"))).unwrap();
    let vectors = client.embed("m", &texts()).await.unwrap();
    assert_eq!(vectors, vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
    assert_eq!(mock.received()[0].path, "/v1/embeddings");
}

/// Sends one scripted answer to `texts()` and returns the error's cause and message.
async fn bad_answer(backend: Backend, answer: serde_json::Value) -> (ChatError, String) {
    let (base, _mock) = start(vec![Reply::json(answer)]).await;
    let embedder = build_embedder(backend, &settings(&base)).unwrap();
    let error = embedder.embed("emb", &texts()).await.unwrap_err();
    let text = error.to_string();
    assert!(text.contains(&base), "names the server: {text}");
    assert!(text.contains("`emb`"), "names the model: {text}");
    assert!(!error.is_retryable(), "{error:?}");
    (unwrap_cause(error, "emb"), text)
}

#[tokio::test]
async fn malformed_answers_are_clear_errors() {
    let cases = [
        (
            Backend::Ollama,
            json!({"embeddings": [[0.1, 0.2, 0.3], [0.1, 0.2]]}),
            "embedding 1 has 2 dimensions but embedding 0 has 3",
        ),
        (
            Backend::Ollama,
            json!({"embeddings": [[0.1, "x"], [0.1, 0.2]]}),
            "embedding 0 has a value that is not a number at position 1: \"x\"",
        ),
        (
            Backend::Ollama,
            json!({"embeddings": []}),
            "no embeddings for the 2 texts",
        ),
        (Backend::Ollama, json!({}), "no embeddings for the 2 texts"),
        (
            Backend::Ollama,
            json!({"embeddings": [[0.5]]}),
            "1 embeddings for the 2 texts",
        ),
        (
            Backend::Ollama,
            json!({"embeddings": [[], []]}),
            "embedding 0 is empty",
        ),
        (
            Backend::Ollama,
            json!({"error": "the model is busy"}),
            "the server reported an error: the model is busy",
        ),
        (
            Backend::OpenAi,
            json!({"data": [{"index": 0, "embedding": "AAAA"}, {"index": 1, "embedding": [1.0]}]}),
            "embedding 0 is not a list of numbers: \"AAAA\"",
        ),
        (
            Backend::OpenAi,
            json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]}),
            "entry 1 of `data` has index 0",
        ),
        (
            Backend::OpenAi,
            json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 7, "embedding": [1.0]}]}),
            "has index 7",
        ),
        (
            Backend::OpenAi,
            json!({"data": [{"index": 0, "embedding": [1.0, 2.0]}, {"index": 1, "embedding": [1.0]}]}),
            "embedding 1 has 1 dimensions but embedding 0 has 2",
        ),
        (
            Backend::OpenAi,
            json!({"data": []}),
            "no embeddings for the 2 texts",
        ),
    ];
    for (backend, answer, expected) in cases {
        let (cause, text) = bad_answer(backend, answer.clone()).await;
        assert!(
            matches!(cause, ChatError::Decode { .. }),
            "{answer}: {cause:?}"
        );
        assert!(text.contains(expected), "{answer}: {text}");
    }
}

#[tokio::test]
async fn unknown_models_and_http_errors_name_the_model() {
    let (base, _mock) = start(vec![Reply::status(
        404,
        r#"{"error":"model \"nomic-embed-text\" not found, try pulling it first"}"#,
    )])
    .await;
    let client = OllamaClient::new(&settings(&base), None).unwrap();
    let error = client
        .embed("nomic-embed-text", &texts())
        .await
        .unwrap_err();
    assert!(
        matches!(
            unwrap_cause(error, "nomic-embed-text"),
            ChatError::ModelNotFound { .. }
        ),
        "a 404 from Ollama is the model"
    );

    let (base, _mock) = start(vec![Reply::status(
        400,
        r#"{"error":{"message":"input too long"}}"#,
    )])
    .await;
    let client = OpenAiClient::new(&settings(&base)).unwrap();
    let error = client.embed("emb", &texts()).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("HTTP 400") && text.contains("input too long") && text.contains(&base),
        "{text}"
    );
    assert!(matches!(
        unwrap_cause(error, "emb"),
        ChatError::Status { status: 400, .. }
    ));
}

#[tokio::test]
async fn the_api_key_is_sent_with_embeddings_too() {
    // Cargo sets this variable for test processes; using it spares an unsafe `set_var`.
    let var = "CARGO_MANIFEST_DIR";
    let key = std::env::var(var).unwrap();
    let (base, mock) = start(vec![Reply::json(
        json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0]}]}),
    )])
    .await;
    let mut s = settings(&base);
    s.api_key_env = Some(var.to_owned());
    let client = OpenAiClient::new(&s).unwrap();
    client.embed("emb", &texts()).await.unwrap();
    assert_eq!(
        mock.received()[0].headers["authorization"]
            .to_str()
            .unwrap(),
        format!("Bearer {key}")
    );
}
