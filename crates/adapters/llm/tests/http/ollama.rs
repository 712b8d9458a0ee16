use fabric_domain::{Message, ToolCall, Usage};
use fabric_engine::{ChatClient, ChatError, NoopObserver};
use fabric_llm::{OllamaClient, OllamaModel};
use serde_json::{Value, json};

use crate::mock::{Recorder, Reply, request, settings, start};

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {"name": "read_file", "description": "Reads a file.", "parameters": {"type": "object"}}}),
    ]
}

#[tokio::test]
async fn native_chat_whole_answer() {
    let (base, mock) = start(vec![Reply::json(json!({
        "model": "qwen2.5:7b",
        "created_at": "2025-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "read_file", "arguments": {"path": "a.txt"}}},
            {"function": {"name": "list_dir", "arguments": {}}}
        ]},
        "done": true,
        "done_reason": "stop",
        "total_duration": 123,
        "prompt_eval_count": 40,
        "eval_count": 12
    }))])
    .await;
    // The `/v1` of an OpenAI-style base URL is dropped for the native API.
    let client = OllamaClient::new(&settings(&format!("{base}/v1")), Some(16384)).unwrap();
    assert_eq!(client.root(), base);
    let messages = vec![
        Message::system("be brief"),
        Message::user("go"),
        Message::assistant(
            Some("checking".into()),
            vec![ToolCall {
                id: "call_7".into(),
                name: "read_file".into(),
                arguments: "{\"path\":\"b\"}".into(),
            }],
        ),
        Message::tool_result("call_7", "file b"),
    ];
    let tools = tools();
    let mut req = request(&messages, &tools, false);
    req.temperature = Some(0.5);
    req.max_tokens = Some(256);
    let response = client.chat(req, &NoopObserver).await.unwrap();

    assert_eq!(response.content, None);
    assert_eq!(response.tool_calls.len(), 2);
    let first = &response.tool_calls[0];
    assert_eq!(first.name, "read_file");
    assert_eq!(first.arguments, "{\"path\":\"a.txt\"}");
    assert!(first.id.starts_with("call_"));
    assert_ne!(first.id, response.tool_calls[1].id);
    assert_eq!(response.tool_calls[1].arguments, "{}");
    assert_eq!(response.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        response.usage,
        Some(Usage {
            prompt_tokens: 40,
            completion_tokens: 12,
            total_tokens: 52
        })
    );

    let got = &mock.received()[0];
    assert_eq!(got.path, "/api/chat");
    assert_eq!(
        got.body,
        json!({
            "model": "test-model",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": "checking", "tool_calls": [
                    {"function": {"name": "read_file", "arguments": {"path": "b"}}}
                ]},
                {"role": "tool", "content": "file b", "tool_name": "read_file"}
            ],
            "tools": tools,
            "stream": false,
            "options": {"num_ctx": 16384, "temperature": 0.5, "num_predict": 256}
        })
    );
}

#[tokio::test]
async fn native_chat_plain_text_without_usage() {
    let (base, mock) = start(vec![Reply::json(json!({
        "message": {"role": "assistant", "content": "hello"},
        "done": true
    }))])
    .await;
    let client = OllamaClient::new(&settings(&base), None).unwrap();
    let messages = vec![Message::user("hi")];
    let response = client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("hello"));
    assert_eq!(response.usage, None);
    assert_eq!(response.finish_reason, None);
    // No tools and no options: neither key is sent; `stream` always is.
    assert_eq!(
        mock.body(0),
        json!({"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "stream": false})
    );
}

#[tokio::test]
async fn native_chat_ndjson_stream() {
    let lines = [
        json!({"message": {"role": "assistant", "content": "Let"}, "done": false}),
        json!({"message": {"role": "assistant", "content": " me — look"}, "done": false}),
        json!({"message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "read_file", "arguments": {"path": "x"}}}
        ]}, "done": false}),
        json!({"message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop",
               "prompt_eval_count": 30, "eval_count": 9}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    for every in [1, 5, 33, 4096] {
        let (base, mock) = start(vec![Reply::chunked("application/x-ndjson", &text, every)]).await;
        let client = OllamaClient::new(&settings(&base), Some(8192)).unwrap();
        let recorder = Recorder::default();
        let messages = vec![Message::user("hi")];
        let tools = tools();
        let response = client
            .chat(request(&messages, &tools, true), &recorder)
            .await
            .unwrap();
        assert_eq!(
            recorder.deltas(),
            ["Let", " me — look"],
            "chunk size {every}"
        );
        assert_eq!(response.content.as_deref(), Some("Let me — look"));
        assert_eq!(response.tool_calls.len(), 1);
        assert_eq!(response.tool_calls[0].arguments, "{\"path\":\"x\"}");
        assert_eq!(response.usage.map(|u| u.total_tokens), Some(39));
        assert_eq!(response.finish_reason.as_deref(), Some("stop"));
        assert_eq!(mock.body(0)["stream"], true);
        assert_eq!(mock.body(0)["options"], json!({"num_ctx": 8192}));
    }
}

#[tokio::test]
async fn stream_error_line_is_reported() {
    let text = "{\"message\":{\"content\":\"a\"},\"done\":false}\n{\"error\":\"out of memory\"}\n";
    let (base, _mock) = start(vec![Reply::chunked("application/x-ndjson", text, 8)]).await;
    let client = OllamaClient::new(&settings(&base), None).unwrap();
    let messages = vec![Message::user("hi")];
    let error = client
        .chat(request(&messages, &[], true), &NoopObserver)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ChatError::Decode { detail, .. } if detail.contains("out of memory")),
        "{error:?}"
    );
}

#[tokio::test]
async fn tools_unsupported() {
    let (base, mock) = start(vec![Reply::status(
        400,
        "{\"error\":\"registry.ollama.ai/library/gemma:2b does not support tools\"}",
    )])
    .await;
    let client = OllamaClient::new(&settings(&base), None).unwrap();
    let messages = vec![Message::user("hi")];
    let tools = tools();
    let error = client
        .chat(request(&messages, &tools, true), &NoopObserver)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ChatError::ToolsUnsupported {
            model: "test-model".into()
        }
    );
    assert!(error.is_model_unsupported());
    assert_eq!(mock.received().len(), 1, "not retried");
}

#[tokio::test]
async fn model_not_found() {
    let (base, _mock) = start(vec![Reply::status(
        404,
        "{\"error\":\"model \\\"test-model\\\" not found, try pulling it first\"}",
    )])
    .await;
    let client = OllamaClient::new(&settings(&base), None).unwrap();
    let messages = vec![Message::user("hi")];
    let error = client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ChatError::ModelNotFound {
            model: "test-model".into(),
            url: format!("{base}/api/chat"),
        }
    );
}

#[tokio::test]
async fn loading_model_500_is_retried() {
    let (base, mock) = start(vec![
        Reply::status(500, "{\"error\":\"llama runner process has terminated\"}"),
        Reply::json(json!({"message": {"content": "ready"}, "done": true})),
    ])
    .await;
    let client = OllamaClient::new(&settings(&base), None).unwrap();
    let messages = vec![Message::user("hi")];
    let response = client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("ready"));
    assert_eq!(mock.received().len(), 2);
}

#[tokio::test]
async fn list_models_reads_tags() {
    let (base, mock) = start(vec![Reply::json(json!({"models": [
        {"name": "qwen2.5:7b", "model": "qwen2.5:7b", "size": 4683087332u64,
         "details": {"format": "gguf", "family": "qwen2", "parameter_size": "7.6B", "quantization_level": "Q4_K_M"}},
        {"model": "tiny:latest"},
        {"name": ""}
    ]}))])
    .await;
    let client = OllamaClient::new(&settings(&format!("{base}/v1/")), None).unwrap();
    let models = client.list_models().await.unwrap();
    assert_eq!(
        models,
        vec![
            OllamaModel {
                name: "qwen2.5:7b".into(),
                parameter_size: Some("7.6B".into()),
                family: Some("qwen2".into()),
            },
            OllamaModel {
                name: "tiny:latest".into(),
                parameter_size: None,
                family: None,
            },
        ]
    );
    let got = &mock.received()[0];
    assert_eq!(
        (got.method.as_str(), got.path.as_str()),
        ("GET", "/api/tags")
    );
}

#[tokio::test]
async fn show_reads_capabilities() {
    let (base, mock) = start(vec![
        Reply::json(
            json!({"modelfile": "...", "details": {}, "capabilities": ["completion", "tools"]}),
        ),
        Reply::json(json!({"capabilities": ["completion", "vision"]})),
        Reply::json(json!({"modelfile": "...", "details": {}})),
        Reply::json(json!({"modelfile": "..."})),
        Reply::status(404, "{\"error\":\"model 'nope' not found\"}"),
    ])
    .await;
    let client = OllamaClient::new(&settings(&base), None).unwrap();
    assert_eq!(
        client.capabilities("qwen2.5").await.unwrap(),
        ["completion", "tools"]
    );
    assert_eq!(client.supports_tools("gemma").await.unwrap(), Some(false));
    assert_eq!(client.supports_tools("old").await.unwrap(), None);
    assert!(client.capabilities("old").await.unwrap().is_empty());
    let error = client.supports_tools("nope").await.unwrap_err();
    assert!(
        matches!(error, ChatError::ModelNotFound { ref model, .. } if model == "nope"),
        "{error:?}"
    );
    let got = &mock.received()[0];
    assert_eq!(
        (got.method.as_str(), got.path.as_str()),
        ("POST", "/api/show")
    );
    assert_eq!(got.body, json!({"model": "qwen2.5"}));
}

#[tokio::test]
async fn supports_tools_true() {
    let (base, _mock) = start(vec![Reply::json(
        json!({"capabilities": ["completion", "tools"]}),
    )])
    .await;
    let client = OllamaClient::new(&settings(&base), None).unwrap();
    assert_eq!(client.supports_tools("qwen2.5").await.unwrap(), Some(true));
}

/// Issue #24: `constrained_decoding: json_schema` on an Ollama key asks for the call through
/// `format` (a JSON Schema of the tools' call shapes), with the tools in the prompt, and
/// turns the JSON answer into a tool call.
#[tokio::test]
async fn issue_24_json_schema_goes_as_format() {
    let (base, mock) = start(vec![Reply::json(json!({
        "message": {"role": "assistant", "content": "{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}"},
        "done": true
    }))])
    .await;
    let mut http = settings(&base);
    http.constrained = fabric_llm::ConstrainedDecoding::JsonSchema;
    let client = OllamaClient::new(&http, Some(4096)).unwrap();
    let messages = vec![Message::user("read a")];
    let answer = client
        .chat(request(&messages, &tools(), false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(answer.tool_calls[0].name, "read_file");
    assert_eq!(answer.tool_calls[0].arguments, r#"{"path":"a"}"#);
    assert!(answer.constrained);
    let body = mock.body(0);
    assert!(body.get("tools").is_none(), "{body}");
    assert_eq!(
        body["format"]["anyOf"][0]["properties"]["name"]["const"],
        "read_file"
    );
    assert!(
        body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("- read_file:")
    );
}
