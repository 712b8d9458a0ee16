//! The Responses client against the scripted server's `/v1/responses`, which speaks the
//! Responses API (whole and streamed) and keeps its answers by id for chained requests.

use fabric_domain::{Message, ResponseChaining};
use fabric_engine::{ChatClient, ChatError, ChatResponse, NoopObserver};
use fabric_llm::{Backend, HttpSettings, ResponsesClient, build_client};
use fabric_test_support::scenario::TurnBy;
use fabric_test_support::{Scenario, ScriptedServer, Turn, UsageSpec};
use serde_json::{Value, json};

use crate::mock::{Recorder, request, settings};

fn tools() -> Vec<Value> {
    vec![json!({"type": "function", "function": {
        "name": "write_file", "description": "Writes a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}})]
}

fn chained(base: &str, chaining: ResponseChaining) -> HttpSettings {
    let mut s = settings(base);
    s.chaining = chaining;
    s
}

#[tokio::test]
async fn issue_30_a_whole_and_a_streamed_answer_with_a_call_text_and_usage() {
    for stream in [false, true] {
        let mut turn = Turn::tool_call("write_file", json!({"path": "a.txt"}));
        turn.content = Some("Writing the file now.".into());
        turn.usage = Some(UsageSpec {
            prompt_tokens: Some(50),
            completion_tokens: Some(7),
        });
        let server = ScriptedServer::start(Scenario::new(vec![turn]))
            .await
            .unwrap();
        let client = ResponsesClient::new(&settings(&server.base_url())).unwrap();
        assert_eq!(
            client.endpoint(),
            format!("{}/responses", server.base_url())
        );
        let messages = vec![Message::system("be brief"), Message::user("write a.txt")];
        let seen = Recorder::default();
        let answer = client
            .chat(request(&messages, &tools(), stream), &seen)
            .await
            .unwrap();
        assert_eq!(answer.content.as_deref(), Some("Writing the file now."));
        assert_eq!(answer.tool_calls.len(), 1, "{stream}");
        assert_eq!(answer.tool_calls[0].name, "write_file");
        assert_eq!(answer.tool_calls[0].arguments, r#"{"path":"a.txt"}"#);
        assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
        let usage = answer.usage.unwrap();
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (50, 7));
        if stream {
            let pieces = seen.0.lock().unwrap().clone();
            assert!(pieces.len() > 1, "text came in pieces: {pieces:?}");
            assert_eq!(pieces.concat(), "Writing the file now.");
        }
        let sent = &server.requests()[0];
        assert_eq!(sent.path, "/v1/responses");
        assert_eq!(sent.body["instructions"], "be brief");
        assert_eq!(
            sent.body["input"],
            json!([{"type": "message", "role": "user", "content": "write a.txt"}])
        );
        assert_eq!(sent.body["tools"][0]["name"], "write_file");
        assert_eq!(sent.body["tools"][0]["type"], "function");
        assert_eq!(sent.body["stream"], stream);
    }
}

/// Plays the engine: asks, records the answer and a tool result, asks again.
async fn three_turns(client: &dyn ChatClient, stream: bool) -> Vec<ChatResponse> {
    let mut messages = vec![Message::system("be brief"), Message::user("write a.txt")];
    let mut answers = Vec::new();
    for _ in 0..3 {
        let answer = client
            .chat(request(&messages, &tools(), stream), &NoopObserver)
            .await
            .unwrap();
        messages.push(Message::assistant(
            answer.content.clone(),
            answer.tool_calls.clone(),
        ));
        for call in &answer.tool_calls {
            messages.push(Message::tool_result(&call.id, "wrote 1 byte"));
        }
        answers.push(answer);
    }
    answers
}

fn conversation_turns() -> Scenario {
    let mut scenario = Scenario::new(vec![
        Turn::tool_call("write_file", json!({"path": "a.txt"})),
        Turn::tool_call("write_file", json!({"path": "b.txt"})),
        Turn::text("done"),
    ]);
    // Each request gets the turn its conversation is at: a request that lost its place in
    // the conversation would get the wrong one.
    scenario.turn_by = TurnBy::Conversation;
    scenario
}

#[tokio::test]
async fn issue_30_a_conversation_goes_whole_or_chained_by_previous_response_id() {
    for (chaining, stream) in [
        (ResponseChaining::FullInput, false),
        (ResponseChaining::FullInput, true),
        (ResponseChaining::PreviousResponseId, false),
        (ResponseChaining::PreviousResponseId, true),
    ] {
        let server = ScriptedServer::start(conversation_turns()).await.unwrap();
        let client = build_client(
            Backend::OpenAiResponses,
            &chained(&server.base_url(), chaining),
            None,
        )
        .unwrap();
        let answers = three_turns(client.as_ref(), stream).await;
        assert_eq!(answers[1].tool_calls[0].arguments, r#"{"path":"b.txt"}"#);
        assert_eq!(answers[2].content.as_deref(), Some("done"), "{chaining:?}");
        let sent = server.requests();
        assert_eq!(sent.len(), 3);
        let third = &sent[2].body;
        let kinds: Vec<&str> = third["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap_or_default())
            .collect();
        match chaining {
            ResponseChaining::FullInput => {
                assert_eq!(third["store"], false);
                assert!(third.get("previous_response_id").is_none());
                assert_eq!(
                    kinds,
                    [
                        "message",
                        "function_call",
                        "function_call_output",
                        "function_call",
                        "function_call_output"
                    ]
                );
            }
            ResponseChaining::PreviousResponseId => {
                assert_eq!(third["store"], true);
                // Chained to the second answer: only the tool's output goes.
                assert!(
                    third["previous_response_id"]
                        .as_str()
                        .is_some_and(|id| id.starts_with("resp_"))
                );
                assert_eq!(kinds, ["function_call_output"]);
                // The instructions are sent again: the API does not carry them over.
                assert_eq!(third["instructions"], "be brief");
                assert!(sent[0].body.get("previous_response_id").is_none());
            }
        }
    }
}

/// A server that no longer knows the answer a request is chained to (restarted, or it
/// expired the answer) refuses the chain; the client sends the conversation whole.
#[tokio::test]
async fn issue_30_a_chain_the_server_forgot_is_sent_whole() {
    let first = ScriptedServer::start(conversation_turns()).await.unwrap();
    let addr = first.addr();
    let client = build_client(
        Backend::OpenAiResponses,
        &chained(&first.base_url(), ResponseChaining::PreviousResponseId),
        None,
    )
    .unwrap();
    let mut messages = vec![Message::user("write a.txt")];
    let answer = client
        .chat(request(&messages, &tools(), false), &NoopObserver)
        .await
        .unwrap();
    first.shutdown().await;
    let second = ScriptedServer::start_on(conversation_turns(), addr)
        .await
        .unwrap();
    messages.push(Message::assistant(None, answer.tool_calls.clone()));
    messages.push(Message::tool_result(&answer.tool_calls[0].id, "ok"));
    let answer = client
        .chat(request(&messages, &tools(), false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(answer.tool_calls[0].arguments, r#"{"path":"b.txt"}"#);
    let sent = second.requests();
    assert_eq!(sent.len(), 2, "refused once, then sent whole");
    assert!(sent[0].body["previous_response_id"].is_string());
    assert!(sent[1].body.get("previous_response_id").is_none());
    assert_eq!(sent[1].body["input"].as_array().map(Vec::len), Some(3));
    // Sent whole but kept: the next call chains to that answer again.
    assert_eq!(sent[1].body["store"], true);
    messages.push(Message::assistant(None, answer.tool_calls.clone()));
    messages.push(Message::tool_result(&answer.tool_calls[0].id, "ok"));
    let answer = client
        .chat(request(&messages, &tools(), false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(answer.content.as_deref(), Some("done"));
    let sent = second.requests();
    assert_eq!(sent.len(), 3);
    assert!(
        sent[2].body["previous_response_id"].is_string(),
        "{}",
        sent[2].body
    );
    assert_eq!(sent[2].body["input"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn issue_30_server_errors_are_retried_and_refusals_name_the_cause() {
    let server = ScriptedServer::start(Scenario::new(vec![
        Turn::error(503, "busy"),
        Turn::text("fine"),
        Turn::error(400, r#"{"error": {"message": "Invalid schema for function 'write_file'.", "type": "invalid_request_error", "param": "tools", "code": "invalid_function_parameters"}}"#),
    ]))
    .await
    .unwrap();
    let client = ResponsesClient::new(&settings(&server.base_url())).unwrap();
    let messages = vec![Message::user("hi")];
    let answer = client
        .chat(request(&messages, &tools(), false), &NoopObserver)
        .await
        .unwrap();
    assert_eq!(answer.content.as_deref(), Some("fine"));
    let error = client
        .chat(request(&messages, &tools(), false), &NoopObserver)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ChatError::Status { status: 400, .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("Invalid schema for function"),
        "{error}"
    );
}
