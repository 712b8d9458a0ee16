use super::*;
use fabric_engine::ToolDefinitions;
use serde_json::json;

struct Quiet;
impl ChatObserver for Quiet {
    fn on_text_delta(&self, _: &str) {}
}

const RESPONSE: &str = include_str!("../tests/fixtures/responses_function_call.response.json");
const STREAM: &str = include_str!("../tests/fixtures/responses_function_call.stream.txt");
const REQUEST: &str = include_str!("../tests/fixtures/responses_function_call.request.json");

fn weather_tools() -> ToolDefinitions {
    let documented: Value = serde_json::from_str(REQUEST).unwrap_or_default();
    let tool = &documented["tools"][0];
    ToolDefinitions::new(vec![crate::wire_tools::test_def(
        json!({"type": "function", "function": {
            "name": tool["name"], "description": tool["description"], "parameters": tool["parameters"],
        }}),
    )])
}

fn request<'a>(
    messages: &'a [Message],
    tools: &'a ToolDefinitions,
    stream: bool,
) -> ChatRequest<'a> {
    ChatRequest {
        model: "gpt-4.1",
        messages,
        tools,
        temperature: None,
        top_p: None,
        max_tokens: None,
        stream,
        vision: false,
    }
}

fn client(chaining: ResponseChaining) -> ResponsesClient {
    let mut settings = HttpSettings::new("http://127.0.0.1:9/v1");
    settings.chaining = chaining;
    ResponsesClient::new(&settings).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn issue_30_the_documented_request_is_what_the_client_sends() {
    let tools = weather_tools();
    let messages = [Message::user("What is the weather like in Paris today?")];
    let body = client(ResponseChaining::FullInput).body(&request(&messages, &tools, false), false);
    let sent = serde_json::to_value(&body).unwrap_or_default();
    let documented: Value = serde_json::from_str(REQUEST).unwrap_or_default();
    assert_eq!(sent["model"], documented["model"]);
    assert_eq!(sent["input"][0]["role"], "user");
    assert_eq!(
        sent["input"][0]["content"],
        documented["input"][0]["content"]
    );
    for key in ["type", "name", "description", "parameters"] {
        assert_eq!(sent["tools"][0][key], documented["tools"][0][key], "{key}");
    }
    // The whole conversation, kept by nobody.
    assert_eq!(sent["store"], false);
    assert_eq!(sent["include"], json!(["reasoning.encrypted_content"]));
    assert!(sent.get("previous_response_id").is_none());
}

#[test]
fn issue_30_the_documented_response_reads_as_one_call() {
    let answer: wire::Response = serde_json::from_str(RESPONSE).unwrap_or_default();
    let (response, turn) = whole_answer("u", answer).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].id, "call_12345xyz");
    assert_eq!(response.tool_calls[0].name, "get_weather");
    assert_eq!(
        response.tool_calls[0].arguments,
        r#"{"location":"Paris, France"}"#
    );
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    let usage = response.usage.unwrap_or_default();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens
        ),
        (291, 23, 314)
    );
    assert_eq!(response.prompt_cache.map(|c| c.evaluated_tokens), Some(291));
    assert_eq!(
        turn.response_id.as_deref(),
        Some("resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b")
    );
}

#[test]
fn issue_30_the_documented_stream_is_reassembled() {
    let mut state = StreamState::default();
    let mut parser = SseParser::default();
    let done = state
        .events("u", parser.push(STREAM.as_bytes()), &Quiet)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(done);
    let (response, turn) = state.finish("u").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.tool_calls.len(), 1, "{:?}", response.tool_calls);
    assert_eq!(response.tool_calls[0].id, "call_1234xyz");
    // Deltas and the `done` events say the same once: the arguments are not doubled.
    assert_eq!(
        response.tool_calls[0].arguments,
        r#"{"location":"Paris,  France"}"#
    );
    assert_eq!(response.usage.map(|u| u.total_tokens), Some(75));
    assert_eq!(turn.response_id.as_deref(), Some("resp_1234xyz"));
}

#[test]
fn issue_30_a_stream_of_whole_items_without_deltas_is_read() {
    let events = [
        r#"{"type":"response.output_item.done","output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"ENC","status":"completed"}}"#,
        r#"{"type":"response.output_item.done","output_index":1,"item":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Done."}]}}"#,
        r#"{"type":"response.output_item.done","output_index":2,"item":{"type":"function_call","call_id":"c1","name":"finish_task","arguments":{"summary":"ok"}}}"#,
        r#"{"type":"response.incomplete","response":{"id":"r2","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[]}}"#,
    ];
    let mut state = StreamState::default();
    let done = state
        .events(
            "u",
            events.iter().map(|e| (*e).to_owned()).collect(),
            &Quiet,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(done);
    let (response, turn) = state.finish("u").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.content.as_deref(), Some("Done."));
    assert_eq!(response.tool_calls[0].arguments, r#"{"summary":"ok"}"#);
    assert_eq!(response.finish_reason.as_deref(), Some("length"));
    // The reasoning item goes back as input, without its output-only status.
    assert_eq!(
        turn.reasoning,
        vec![json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "ENC"})]
    );
}

#[test]
fn issue_30_errors_keep_their_meaning() {
    let mut state = StreamState::default();
    let e = state
        .events(
            "u",
            vec![
                r#"{"type":"error","code":"rate_limit_exceeded","message":"Slow down"}"#.to_owned(),
            ],
            &Quiet,
        )
        .unwrap_err();
    assert!(matches!(e, ChatError::Status { status: 429, .. }), "{e:?}");
    let failed = r#"{"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":"invalid_prompt","message":"The prompt was refused."},"output":[]}}"#;
    let e = StreamState::default()
        .events("u", vec![failed.to_owned()], &Quiet)
        .unwrap_err();
    assert!(e.to_string().contains("The prompt was refused."), "{e}");
    let e = StreamState::default().finish("u").unwrap_err();
    assert!(e.to_string().contains("before `response.completed`"), "{e}");
}

/// The engine sends back what it received: the second request carries the reasoning items
/// before their turn (whole input), or only the tool's output after the turn's response id
/// (chained).
#[test]
fn issue_30_turns_are_sent_back_with_their_reasoning_or_chained() {
    let tools = weather_tools();
    let call = ToolCall {
        id: "call_1".into(),
        name: "get_weather".into(),
        arguments: r#"{"location":"Paris"}"#.into(),
    };
    let messages = [
        Message::system("Be brief."),
        Message::user("Weather in Paris?"),
        Message::assistant(None, vec![call.clone()]),
        Message::tool_result("call_1", "22C"),
    ];
    for chaining in [
        ResponseChaining::FullInput,
        ResponseChaining::PreviousResponseId,
    ] {
        let client = client(chaining);
        let reasoning =
            json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "E"});
        client.memory().keep(
            turn_key(None, std::slice::from_ref(&call)),
            Remembered {
                response_id: Some("resp_1".into()),
                reasoning: vec![reasoning.clone()],
            },
        );
        let chain = chaining == ResponseChaining::PreviousResponseId;
        let sent = serde_json::to_value(client.body(&request(&messages, &tools, false), chain))
            .unwrap_or_default();
        assert_eq!(sent["instructions"], "Be brief.");
        if chain {
            assert_eq!(sent["previous_response_id"], "resp_1");
            assert_eq!(sent["store"], true);
            assert_eq!(
                sent["input"],
                json!([{"type": "function_call_output", "call_id": "call_1", "output": "22C"}])
            );
        } else {
            assert!(sent.get("previous_response_id").is_none());
            let input = sent["input"].as_array().cloned().unwrap_or_default();
            let kinds: Vec<&str> = input
                .iter()
                .map(|i| i["type"].as_str().unwrap_or_default())
                .collect();
            assert_eq!(
                kinds,
                [
                    "message",
                    "reasoning",
                    "function_call",
                    "function_call_output"
                ]
            );
            assert_eq!(input[1], reasoning);
            assert_eq!(input[2]["call_id"], "call_1");
        }
    }
}

#[test]
fn issue_30_a_lost_chain_is_told_apart() {
    let lost = ChatError::Status {
        url: "u".into(),
        status: 400,
        body: "Previous response with id 'resp_x' not found.".into(),
    };
    assert!(lost_chain(&lost));
    let other = ChatError::Status {
        url: "u".into(),
        status: 400,
        body: "bad tools".into(),
    };
    assert!(!lost_chain(&other));
}

/// llama.cpp's stream names items by id and sends no output index: two calls stay two.
#[test]
fn issue_30_calls_known_by_item_id_alone_stay_apart() {
    let events = [
        r#"{"type":"response.output_item.added","item":{"type":"function_call","id":"fc_a","call_id":"a","name":"read_file","arguments":""}}"#,
        r#"{"type":"response.function_call_arguments.delta","item_id":"fc_a","delta":"{\"path\":"}"#,
        r#"{"type":"response.output_item.added","item":{"type":"function_call","id":"fc_b","call_id":"b","name":"list_files","arguments":""}}"#,
        r#"{"type":"response.function_call_arguments.delta","item_id":"fc_a","delta":"\"x\"}"}"#,
        r#"{"type":"response.function_call_arguments.delta","item_id":"fc_b","delta":"{}"}"#,
        r#"{"type":"response.output_item.done","item":{"type":"function_call","id":"fc_b","call_id":"b","name":"list_files","arguments":"{}"}}"#,
        r#"{"type":"response.completed","response":{"id":"r","status":"completed","output":[]}}"#,
    ];
    let mut state = StreamState::default();
    state
        .events(
            "u",
            events.iter().map(|e| (*e).to_owned()).collect(),
            &Quiet,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let (response, _) = state.finish("u").unwrap_or_else(|e| panic!("{e}"));
    let calls: Vec<(&str, &str)> = response
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(calls, [("a", r#"{"path":"x"}"#), ("b", "{}")]);
}

#[test]
fn issue_29_a_tool_s_images_follow_its_output_as_a_user_message() {
    use crate::images::fixture::{PLACEHOLDER, conversation, request};
    let messages = conversation();
    let body = |vision| {
        let body = client(ResponseChaining::FullInput).body(&request(&messages, vision), false);
        serde_json::to_value(&body).unwrap_or_default()
    };
    let sent = body(true);
    assert_eq!(sent["input"][2]["type"], "function_call_output");
    assert_eq!(
        sent["input"][3],
        json!({"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "The image the tool call `c1` returned:"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"}
        ]})
    );
    let plain = body(false);
    assert_eq!(plain["input"].as_array().map(Vec::len), Some(3));
    assert_eq!(plain["input"][2]["output"], PLACEHOLDER);
}
