use std::time::{Duration, Instant};

use fabric_domain::{Message, ToolCall, Usage};
use fabric_engine::{ChatClient, ChatError, NoopObserver};
use fabric_llm::{Backend, HttpSettings, OpenAiClient, build_client};
use serde_json::{Value, json};

use crate::mock::{Recorder, Reply, request, settings, start};

fn user() -> Vec<Message> {
    vec![Message::user("hi")]
}

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {"name": "read_file", "description": "Reads a file.", "parameters": {"type": "object"}}}),
    ]
}

fn answer(message: Value) -> Value {
    json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]})
}

async fn chat_once(reply: Reply) -> Result<fabric_engine::ChatResponse, ChatError> {
    let (base, _mock) = start(vec![reply]).await;
    let client = OpenAiClient::new(&settings(&format!("{base}/v1"))).unwrap();
    client
        .chat(request(&user(), &[], false), &NoopObserver)
        .await
}

#[tokio::test]
async fn plain_response_and_request_shape() {
    let (base, mock) = start(vec![Reply::json(json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop", "logprobs": null}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        "system_fingerprint": "unknown extra field"
    }))])
    .await;
    // Trailing slash on the base URL is tolerated.
    let client = OpenAiClient::new(&settings(&format!("{base}/v1/"))).unwrap();
    let messages = user();
    let response = client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("Hello"));
    assert!(response.tool_calls.is_empty());
    assert_eq!(response.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        response.usage,
        Some(Usage {
            prompt_tokens: 5,
            completion_tokens: 2,
            total_tokens: 7
        })
    );
    let got = &mock.received()[0];
    assert_eq!(
        (got.method.as_str(), got.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        got.body,
        json!({"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "stream": false})
    );
}

#[tokio::test]
async fn request_with_tools_history_and_sampling() {
    let (base, mock) = start(vec![Reply::json(answer(json!({"content": "ok"})))]).await;
    let client = OpenAiClient::new(&settings(&base)).unwrap();
    let messages = vec![
        Message::user("go"),
        Message::assistant(
            None,
            vec![ToolCall {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: "{\"path\":\"a\"}".into(),
            }],
        ),
        Message::tool_result("c1", "contents"),
    ];
    let tools = tools();
    let mut req = request(&messages, &tools, false);
    req.temperature = Some(0.5);
    req.top_p = Some(0.75);
    req.max_tokens = Some(100);
    client.chat(req, &NoopObserver).await.unwrap();
    let body = mock.body(0);
    assert_eq!(body["tools"], json!(tools));
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["temperature"], 0.5);
    assert_eq!(body["top_p"], 0.75);
    assert_eq!(body["max_tokens"], 100);
    // Issue #24: `""`, not `null`, beside tool calls (llama-cpp-python answers 500 to null).
    assert_eq!(body["messages"][1]["content"], "");
    assert_eq!(
        body["messages"][1]["tool_calls"],
        json!([{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}])
    );
    assert_eq!(
        body["messages"][2],
        json!({"role": "tool", "content": "contents", "tool_call_id": "c1"})
    );
}

#[tokio::test]
async fn arguments_as_object_become_text() {
    let response = chat_once(Reply::json(answer(json!({
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": {"path": "a.txt", "n": 2}}}]
    }))))
    .await
    .unwrap();
    assert_eq!(response.content, None);
    let call = &response.tool_calls[0];
    assert_eq!((call.id.as_str(), call.name.as_str()), ("c1", "read_file"));
    let parsed: Value = serde_json::from_str(&call.arguments).unwrap();
    assert_eq!(parsed, json!({"path": "a.txt", "n": 2}));
}

#[tokio::test]
async fn invalid_argument_text_is_kept_verbatim() {
    let response = chat_once(Reply::json(answer(json!({
        "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{\"path\": 'a'"}}]
    }))))
    .await
    .unwrap();
    assert_eq!(response.tool_calls[0].arguments, "{\"path\": 'a'");
}

#[tokio::test]
async fn missing_and_empty_ids_are_generated_and_distinct() {
    let response = chat_once(Reply::json(answer(json!({
        "tool_calls": [
            {"function": {"name": "a", "arguments": "{}"}},
            {"id": "", "function": {"name": "b", "arguments": "{}"}}
        ]
    }))))
    .await
    .unwrap();
    let ids: Vec<&str> = response.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert!(ids.iter().all(|id| id.starts_with("call_")), "{ids:?}");
    assert_ne!(ids[0], ids[1]);
}

#[tokio::test]
async fn content_null_with_tool_call() {
    let response = chat_once(Reply::json(answer(json!({
        "role": "assistant", "content": null,
        "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}]
    }))))
    .await
    .unwrap();
    assert_eq!(response.content, None);
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn two_tool_calls_keep_their_order() {
    let response = chat_once(Reply::json(answer(json!({
        "content": "Let me look.",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "first", "arguments": "{\"n\":1}"}},
            {"id": "b", "type": "function", "function": {"name": "second", "arguments": "{\"n\":2}"}}
        ]
    }))))
    .await
    .unwrap();
    assert_eq!(response.content.as_deref(), Some("Let me look."));
    let names: Vec<&str> = response
        .tool_calls
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["first", "second"]);
    assert_eq!(response.tool_calls[1].arguments, "{\"n\":2}");
}

#[tokio::test]
async fn usage_and_finish_reason_missing() {
    let response = chat_once(Reply::json(
        json!({"choices": [{"message": {"content": "hi"}}]}),
    ))
    .await
    .unwrap();
    assert_eq!(response.content.as_deref(), Some("hi"));
    assert_eq!(response.usage, None);
    assert_eq!(response.finish_reason, None);
}

#[tokio::test]
async fn no_choices_is_a_decode_error() {
    let error = chat_once(Reply::json(json!({"object": "chat.completion"})))
        .await
        .unwrap_err();
    assert!(matches!(error, ChatError::Decode { .. }), "{error:?}");
    let error = chat_once(Reply::status(200, "<html>not json</html>"))
        .await
        .unwrap_err();
    assert!(matches!(error, ChatError::Decode { .. }), "{error:?}");
}

/// A stream whose tool call arguments come in fragments, with a comment, `\r\n` line ends,
/// a usage-only last chunk and `[DONE]`.
const TOOL_STREAM: &str = concat!(
    ": OPENROUTER PROCESSING\r\n\r\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"\"}}]}}]}\r\n\r\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"pa\"}}]}}]}\r\n\r\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"function\":{\"name\":\"list_dir\",\"arguments\":\"{\\\"dir\\\":\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"th\\\": \\\"é.txt\\\"}\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"\\\".\\\"}\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":7,\"total_tokens\":18}}\n\n",
    "data: [DONE]\n\n",
);

#[tokio::test]
async fn streamed_tool_call_fragments_split_anywhere() {
    // Several chunk sizes put network boundaries inside lines, inside `\r\n`, inside the
    // two-byte `é` and between frames.
    for every in [5, 13, 64, 4096] {
        let (base, mock) = start(vec![Reply::chunked(
            "text/event-stream",
            TOOL_STREAM,
            every,
        )])
        .await;
        let client = OpenAiClient::new(&settings(&base)).unwrap();
        let recorder = Recorder::default();
        let messages = user();
        let tools = tools();
        let response = client
            .chat(request(&messages, &tools, true), &recorder)
            .await
            .unwrap();
        assert_eq!(response.content, None, "chunk size {every}");
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCall {
                    id: "call_a".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\": \"é.txt\"}".into()
                },
                ToolCall {
                    id: "call_b".into(),
                    name: "list_dir".into(),
                    arguments: "{\"dir\":\".\"}".into()
                },
            ],
            "chunk size {every}"
        );
        assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(response.usage.map(|u| u.total_tokens), Some(18));
        assert!(recorder.deltas().is_empty());
        let body = mock.body(0);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
    }
}

#[tokio::test]
async fn streamed_text_deltas_reach_the_observer() {
    let stream = concat!(
        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\" wörld\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let (base, _mock) = start(vec![Reply::pieces(
        "text/event-stream",
        &[&stream[..20], &stream[20..90], &stream[90..]],
    )])
    .await;
    let client = OpenAiClient::new(&settings(&base)).unwrap();
    let recorder = Recorder::default();
    let messages = user();
    let response = client
        .chat(request(&messages, &[], true), &recorder)
        .await
        .unwrap();
    assert_eq!(recorder.deltas(), ["Hel", "lo", " wörld"]);
    assert_eq!(response.content.as_deref(), Some("Hello wörld"));
    assert_eq!(response.finish_reason.as_deref(), Some("stop"));
    // No usage chunk: usage is simply unknown.
    assert_eq!(response.usage, None);
}

#[tokio::test]
async fn streamed_calls_without_index_use_id_or_position() {
    let stream = concat!(
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"x\",\"function\":{\"name\":\"g\",\"arguments\":\"{\\\"b\\\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"x\",\"function\":{\"arguments\":\":2}\"}}]}}]}\n\n",
    );
    // No `[DONE]`: the end of the body ends the stream too.
    let (base, _mock) = start(vec![Reply::chunked("text/event-stream", stream, 5)]).await;
    let client = OpenAiClient::new(&settings(&base)).unwrap();
    let messages = user();
    let response = client
        .chat(request(&messages, &[], true), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(response.tool_calls.len(), 2);
    assert_eq!(response.tool_calls[0].arguments, "{\"a\":1}");
    assert!(response.tool_calls[0].id.starts_with("call_"));
    assert_eq!(response.tool_calls[1].id, "x");
    assert_eq!(response.tool_calls[1].arguments, "{\"b\":2}");
}

#[tokio::test]
async fn stream_request_answered_whole_is_accepted() {
    let (base, _mock) = start(vec![Reply::json(answer(json!({"content": "whole"})))]).await;
    let client = OpenAiClient::new(&settings(&base)).unwrap();
    let recorder = Recorder::default();
    let messages = user();
    let response = client
        .chat(request(&messages, &[], true), &recorder)
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("whole"));
    assert_eq!(recorder.deltas(), ["whole"]);
}

#[tokio::test]
async fn sse_mislabelled_as_json_is_still_read_as_a_stream() {
    let stream =
        "\n: ping\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n";
    let (base, _mock) = start(vec![Reply::chunked("application/json", stream, 1)]).await;
    let client = OpenAiClient::new(&settings(&base)).unwrap();
    let recorder = Recorder::default();
    let messages = user();
    let response = client
        .chat(request(&messages, &[], true), &recorder)
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("a"));
    assert_eq!(recorder.deltas(), ["a"]);
}

#[tokio::test]
async fn server_error_then_success_is_retried() {
    let (base, mock) = start(vec![
        Reply::status(500, "{\"error\":\"loading model\"}"),
        Reply::status(503, "busy"),
        Reply::json(answer(json!({"content": "finally"}))),
    ])
    .await;
    let client = OpenAiClient::new(&settings(&base)).unwrap();
    let messages = user();
    let response = client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("finally"));
    assert_eq!(mock.received().len(), 3);
}

#[tokio::test]
async fn streaming_request_is_retried_before_the_stream_starts() {
    let (base, mock) = start(vec![
        Reply::status(502, "bad gateway"),
        Reply::chunked(
            "text/event-stream",
            "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n",
            10,
        ),
    ])
    .await;
    let client = OpenAiClient::new(&settings(&base)).unwrap();
    let messages = user();
    let recorder = Recorder::default();
    let response = client
        .chat(request(&messages, &[], true), &recorder)
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("ok"));
    assert_eq!(recorder.deltas(), ["ok"]);
    assert_eq!(mock.received().len(), 2);
}

#[tokio::test]
async fn server_errors_until_retries_are_exhausted() {
    let long_body = "x".repeat(5000);
    let (base, mock) = start(vec![Reply::status(500, &long_body); 5]).await;
    let client = OpenAiClient::new(&settings(&base)).unwrap();
    let messages = user();
    let error = client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap_err();
    let ChatError::RetriesExhausted { attempts, last } = error else {
        panic!("expected RetriesExhausted, got {error:?}");
    };
    assert_eq!(attempts, 3);
    let ChatError::Status { status, body, .. } = *last else {
        panic!("expected Status, got {last:?}");
    };
    assert_eq!(status, 500);
    assert!(body.chars().count() <= 501, "body is cut");
    assert_eq!(mock.received().len(), 3);
}

#[tokio::test]
async fn too_many_requests_honours_retry_after() {
    let (base, mock) = start(vec![
        Reply::status(429, "{\"error\":\"rate limited\"}").header("retry-after", "1"),
        Reply::json(answer(json!({"content": "ok"}))),
    ])
    .await;
    let client = OpenAiClient::new(&settings(&base)).unwrap();
    let messages = user();
    let started = Instant::now();
    let response = client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap();
    // The backoff in tests is 1 ms, so a pause this long can only be the server's wish.
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(response.content.as_deref(), Some("ok"));
    assert_eq!(mock.received().len(), 2);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let (base, mock) = start(vec![
        Reply::status(400, "{\"error\":{\"message\":\"bad request\"}}"),
        Reply::json(answer(json!({"content": "never"}))),
    ])
    .await;
    let client = OpenAiClient::new(&settings(&base)).unwrap();
    let messages = user();
    let error = client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ChatError::Status { status: 400, .. }),
        "{error:?}"
    );
    assert_eq!(mock.received().len(), 1);
}

#[tokio::test]
async fn connection_refused_is_unreachable_and_fast() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut s = settings(&format!("http://127.0.0.1:{port}/v1"));
    s.max_retries = 0;
    let client = OpenAiClient::new(&s).unwrap();
    let messages = user();
    let started = Instant::now();
    let error = client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    let ChatError::Unreachable { url, detail } = &error else {
        panic!("expected Unreachable, got {error:?}");
    };
    assert_eq!(url, &format!("http://127.0.0.1:{port}/v1/chat/completions"));
    assert!(!detail.is_empty());
    assert!(error.is_retryable());
}

#[tokio::test]
async fn slow_server_times_out() {
    let (base, _mock) = start(vec![
        Reply::json(answer(json!({"content": "late"}))).delayed(Duration::from_secs(3)),
    ])
    .await;
    let mut s = settings(&base);
    s.timeout_s = 1;
    s.max_retries = 0;
    let client = OpenAiClient::new(&s).unwrap();
    let messages = user();
    let error = client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ChatError::Timeout { seconds: 1, .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn unauthorized_and_model_not_found_are_named() {
    let error = chat_once(Reply::status(401, "{\"error\":\"invalid key\"}"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ChatError::Unauthorized { status: 401, .. }),
        "{error:?}"
    );
    let error = chat_once(Reply::status(
        404,
        "{\"error\":{\"message\":\"The model `test-model` does not exist\",\"code\":\"model_not_found\"}}",
    ))
    .await
    .unwrap_err();
    assert!(
        matches!(error, ChatError::ModelNotFound { ref model, .. } if model == "test-model"),
        "{error:?}"
    );
    // A bare 404 is more likely a wrong path than a missing model.
    let error = chat_once(Reply::status(404, "404 page not found"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ChatError::Status { status: 404, .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn api_key_is_sent_and_never_shown() {
    // Cargo sets this variable for test processes; using it spares an unsafe `set_var`.
    let var = "CARGO_MANIFEST_DIR";
    let key = std::env::var(var).unwrap();
    let (base, mock) = start(vec![Reply::json(answer(json!({"content": "ok"})))]).await;
    let mut s = settings(&base);
    s.api_key_env = Some(var.to_owned());
    let client = OpenAiClient::new(&s).unwrap();
    let messages = user();
    client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap();
    let sent = mock.received()[0].headers["authorization"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(sent, format!("Bearer {key}"));
    let shown = format!("{client:?} {client:#?} {s:?}");
    assert!(!shown.contains(&key), "the key leaked into Debug: {shown}");
    assert!(shown.contains("redacted"));
}

#[tokio::test]
async fn unset_api_key_variable_sends_no_header() {
    let (base, mock) = start(vec![Reply::json(answer(json!({"content": "ok"})))]).await;
    let mut s = settings(&base);
    s.api_key_env = Some("FABRIC_LLM_TEST_VARIABLE_THAT_IS_NOT_SET".to_owned());
    let client = OpenAiClient::new(&s).unwrap();
    let messages = user();
    client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap();
    assert!(!mock.received()[0].headers.contains_key("authorization"));
}

#[tokio::test]
async fn build_client_picks_the_backend() {
    let (base, mock) = start(vec![
        Reply::json(answer(json!({"content": "openai"}))),
        Reply::json(json!({"message": {"role": "assistant", "content": "ollama"}, "done": true})),
    ])
    .await;
    let messages = user();
    let openai = build_client(Backend::OpenAi, &settings(&format!("{base}/v1")), None).unwrap();
    let a = openai
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap();
    let ollama = build_client(
        Backend::Ollama,
        &settings(&format!("{base}/v1")),
        Some(4096),
    )
    .unwrap();
    let b = ollama
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(a.content.as_deref(), Some("openai"));
    assert_eq!(b.content.as_deref(), Some("ollama"));
    let paths: Vec<String> = mock.received().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/v1/chat/completions", "/api/chat"]);
}

#[test]
fn bad_base_url_is_refused() {
    let error = OpenAiClient::new(&HttpSettings::new("localhost:11434")).unwrap_err();
    assert!(error.to_string().contains("localhost:11434"));
}

/// Issue #24: a server whose template has no tool calling refuses `tools`; with
/// `constrained_decoding: auto` the client asks for the call as JSON that matches the
/// tools' call shapes instead, and keeps doing so.
#[tokio::test]
async fn issue_24_auto_asks_by_json_schema_once_the_server_refuses_tools() {
    let refusal = || {
        Reply::status(
            500,
            r#"{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}"#,
        )
    };
    let call = |content: &str| {
        Reply::json(
            json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}),
        )
    };
    let (base, mock) = start(vec![
        // `GET /props`: a server that has none.
        Reply::status(404, r#"{"error": "not found"}"#),
        refusal(),
        refusal(),
        refusal(),
        call(r#"{"name": "read_file", "arguments": {"path": "a.txt"}}"#),
        call("I would rather talk."),
    ])
    .await;
    let mut http = settings(&format!("{base}/v1"));
    http.constrained = fabric_llm::ConstrainedDecoding::Auto;
    let client = OpenAiClient::new(&http).unwrap();
    let messages = user();
    let first = client
        .chat(request(&messages, &tools(), false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(first.content, None);
    assert_eq!(first.tool_calls.len(), 1);
    assert_eq!(first.tool_calls[0].name, "read_file");
    assert_eq!(first.tool_calls[0].arguments, r#"{"path":"a.txt"}"#);
    // The constrained request: no `tools`, a schema of the call shapes, the tools in the
    // system prompt.
    assert_eq!(mock.received()[0].path, "/props");
    let body = mock.body(4);
    assert!(body.get("tools").is_none(), "{body}");
    assert_eq!(body["response_format"]["type"], "json_schema");
    let shapes = &body["response_format"]["json_schema"]["schema"]["anyOf"];
    assert_eq!(shapes[0]["properties"]["name"]["const"], "read_file");
    assert_eq!(body["messages"][0]["role"], "system");
    assert!(
        body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("- read_file:")
    );
    // The next call goes constrained at once; prose stays prose for the engine to answer.
    let second = client
        .chat(request(&messages, &tools(), false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(second.content.as_deref(), Some("I would rather talk."));
    assert!(second.tool_calls.is_empty());
    assert_eq!(mock.received().len(), 6);
    assert!(mock.body(5).get("response_format").is_some());
}

/// llama.cpp's server with `--jinja` takes `tools` even when the model's template cannot
/// call them, and the model answers in prose; its `/props` says so, and `auto` believes it.
#[tokio::test]
async fn issue_24_auto_reads_the_templates_abilities_from_props() {
    let (base, mock) = start(vec![
        Reply::json(json!({"chat_template_caps": {"supports_tools": false, "supports_tool_calls": false}, "default_generation_settings": {"n_ctx": 4096}})),
        Reply::json(json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"name\": \"read_file\", \"arguments\": {}}"}, "finish_reason": "stop"}]})),
    ])
    .await;
    let mut http = settings(&format!("{base}/v1"));
    http.constrained = fabric_llm::ConstrainedDecoding::Auto;
    let client = OpenAiClient::new(&http).unwrap();
    let answer = client
        .chat(request(&user(), &tools(), false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(answer.tool_calls[0].name, "read_file");
    let body = mock.body(1);
    assert!(body.get("tools").is_none());
    assert_eq!(body["response_format"]["type"], "json_schema");
}

/// Without `auto`, the refusal is the error it always was.
#[tokio::test]
async fn issue_24_off_keeps_the_servers_refusal() {
    let refusal = || {
        Reply::status(
            500,
            r#"{"error":{"message":"tools param requires --jinja flag"}}"#,
        )
    };
    let (base, _mock) = start(vec![refusal(), refusal(), refusal()]).await;
    let client = OpenAiClient::new(&settings(&format!("{base}/v1"))).unwrap();
    let error = client
        .chat(request(&user(), &tools(), false), &NoopObserver)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("--jinja"), "{error}");
}

/// Issue #24: llama.cpp's server answers 503 "Loading model" while it loads; that is waited
/// for without using up the retries.
#[tokio::test]
async fn issue_24_a_server_loading_its_model_is_waited_for() {
    let loading = || {
        Reply::status(
            503,
            r#"{"error":{"message":"Loading model","type":"unavailable_error","code":503}}"#,
        )
    };
    let (base, mock) = start(vec![
        loading(),
        loading(),
        loading(),
        loading(),
        Reply::json(answer(json!({"role": "assistant", "content": "ready"}))),
    ])
    .await;
    // Two retries would not cover four refusals.
    let client = OpenAiClient::new(&settings(&format!("{base}/v1"))).unwrap();
    let response = client
        .chat(request(&user(), &[], false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("ready"));
    assert_eq!(mock.received().len(), 5);
}

/// Issue #24: llama-cpp-python answers a streamed request with tools by an empty 200; the
/// request is sent again, not streamed.
#[tokio::test]
async fn issue_24_an_empty_stream_is_asked_again_whole() {
    let (base, mock) = start(vec![
        Reply::pieces("text/event-stream", &[]),
        Reply::json(answer(json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        ]}))),
    ])
    .await;
    let client = OpenAiClient::new(&settings(&format!("{base}/v1"))).unwrap();
    let response = client
        .chat(request(&user(), &tools(), true), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(response.tool_calls[0].name, "read_file");
    assert_eq!(mock.body(0)["stream"], true);
    assert_eq!(mock.body(1)["stream"], false);
    assert!(mock.body(1).get("stream_options").is_none());
}
