//! The Anthropic client against the scripted server's `/v1/messages`, which speaks the
//! Messages API (and refuses requests without `anthropic-version` or `x-api-key`).

use fabric_domain::{Message, ToolCall};
use fabric_engine::{ChatClient, ChatError, NoopObserver};
use fabric_llm::{AnthropicClient, Backend, HttpSettings, build_client, build_embedder};
use fabric_test_support::{Scenario, ScriptedServer, Turn, UsageSpec};
use serde_json::{Value, json};

use crate::mock::{Recorder, request, settings};

/// Cargo sets this variable for test processes; it stands in for the key.
const KEY_VAR: &str = "CARGO_MANIFEST_DIR";

fn keyed(base: &str) -> HttpSettings {
    let mut s = settings(base);
    s.api_key_env = Some(KEY_VAR.to_owned());
    s
}

fn tools() -> Vec<Value> {
    vec![json!({"type": "function", "function": {
        "name": "write_file", "description": "Writes a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}})]
}

async fn server(turns: Vec<Turn>) -> ScriptedServer {
    ScriptedServer::start(Scenario::new(turns)).await.unwrap()
}

#[tokio::test]
async fn issue_11_a_whole_answer_with_a_tool_call_and_usage() {
    let mut turn = Turn::tool_call("write_file", json!({"path": "a.txt"}));
    turn.content = Some("Writing.".into());
    turn.usage = Some(UsageSpec {
        prompt_tokens: Some(50),
        completion_tokens: Some(7),
    });
    let server = server(vec![turn]).await;
    // The root without `/v1`, as Anthropic's own base URL is written.
    let client = AnthropicClient::new(&keyed(&server.root_url())).unwrap();
    assert_eq!(
        client.endpoint(),
        format!("{}/v1/messages", server.root_url())
    );
    let messages = vec![Message::system("be brief"), Message::user("write a.txt")];
    let answer = client
        .chat(request(&messages, &tools(), false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(answer.content.as_deref(), Some("Writing."));
    assert_eq!(answer.tool_calls.len(), 1);
    assert_eq!(answer.tool_calls[0].name, "write_file");
    assert_eq!(answer.tool_calls[0].arguments, r#"{"path":"a.txt"}"#);
    assert!(answer.tool_calls[0].id.starts_with("toolu_"));
    assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
    let usage = answer.usage.unwrap();
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (50, 7));
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.body["system"], "be brief");
    assert_eq!(sent.body["messages"][0]["role"], "user");
    assert_eq!(sent.body["tools"][0]["input_schema"]["type"], "object");
    assert!(sent.body["max_tokens"].as_u64().is_some());
}

#[tokio::test]
async fn issue_11_a_stream_with_tool_input_split_across_deltas() {
    let mut turn = Turn::tool_call(
        "write_file",
        json!({"path": "notes/long-name.txt", "content": "several words of content"}),
    );
    turn.content = Some("I will write the notes file now.".into());
    let server = server(vec![turn]).await;
    let client = AnthropicClient::new(&keyed(&server.base_url())).unwrap();
    let recorder = Recorder::default();
    let messages = vec![Message::user("go")];
    let answer = client
        .chat(request(&messages, &tools(), true), &recorder)
        .await
        .unwrap();
    assert!(recorder.deltas().len() >= 2, "{:?}", recorder.deltas());
    assert_eq!(
        recorder.deltas().concat(),
        "I will write the notes file now."
    );
    let args: Value = serde_json::from_str(&answer.tool_calls[0].arguments).unwrap();
    assert_eq!(
        args,
        json!({"path": "notes/long-name.txt", "content": "several words of content"})
    );
    assert!(answer.usage.is_some());
    assert_eq!(server.requests()[0].body["stream"], true);
}

#[tokio::test]
async fn issue_11_tool_results_go_back_as_blocks_of_one_user_message() {
    let server = server(vec![Turn::text("done")]).await;
    let client = AnthropicClient::new(&keyed(&server.base_url())).unwrap();
    let messages = vec![
        Message::user("go"),
        Message::assistant(
            None,
            vec![
                ToolCall {
                    id: "toolu_a".into(),
                    name: "write_file".into(),
                    arguments: r#"{"path":"a"}"#.into(),
                },
                ToolCall {
                    id: "toolu_b".into(),
                    name: "write_file".into(),
                    arguments: r#"{"path":"b"}"#.into(),
                },
            ],
        ),
        Message::tool_result("toolu_a", "ok"),
        Message::tool_result("toolu_b", "{\"error\": \"no\"}"),
    ];
    let answer = client
        .chat(request(&messages, &tools(), false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(answer.content.as_deref(), Some("done"));
    assert_eq!(answer.finish_reason.as_deref(), Some("stop"));
    let sent = &server.requests()[0].body;
    let m = sent["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!(m[1]["content"][0]["input"], json!({"path": "a"}));
    assert_eq!(m[2]["content"][0]["type"], "tool_result");
    assert_eq!(m[2]["content"][1]["tool_use_id"], "toolu_b");
}

#[tokio::test]
async fn issue_11_overloaded_and_rate_limited_are_retried_after_retry_after() {
    let overloaded = Turn {
        status: Some(529),
        body: Some("Overloaded".into()),
        retry_after_s: Some(1),
        ..Turn::default()
    };
    let limited = Turn {
        status: Some(429),
        body: Some("rate limited".into()),
        ..Turn::default()
    };
    let server = server(vec![overloaded, limited, Turn::text("finally")]).await;
    let client = AnthropicClient::new(&keyed(&server.base_url())).unwrap();
    let started = std::time::Instant::now();
    let messages = vec![Message::user("go")];
    let answer = client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(answer.content.as_deref(), Some("finally"));
    assert_eq!(server.chat_request_count(), 3);
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(900),
        "the server's Retry-After was waited for: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn issue_11_without_a_key_the_api_answers_401_and_the_error_names_it() {
    let server = server(vec![Turn::text("never")]).await;
    let mut s = settings(&server.base_url());
    s.api_key_env = Some("FABRIC_TEST_ANTHROPIC_KEY_THAT_IS_NOT_SET".into());
    let client = AnthropicClient::new(&s).unwrap();
    let messages = vec![Message::user("go")];
    let e = client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap_err();
    assert!(
        matches!(e, ChatError::Unauthorized { status: 401, .. }),
        "{e:?}"
    );
    assert_eq!(server.turns_used(), 0);
}

#[tokio::test]
async fn issue_11_the_backend_is_built_by_name_and_has_no_embeddings() {
    let server = server(vec![Turn::text("hi")]).await;
    let client = build_client(Backend::Anthropic, &keyed(&server.base_url()), None).unwrap();
    let messages = vec![Message::user("go")];
    let answer = client
        .chat(request(&messages, &[], false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(answer.content.as_deref(), Some("hi"));
    let e = build_embedder(Backend::Anthropic, &keyed(&server.base_url()))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("no embeddings API"), "{e}");
    let models = AnthropicClient::new(&keyed(&server.base_url()))
        .unwrap()
        .list_models()
        .await
        .unwrap();
    assert!(!models.is_empty());
}
