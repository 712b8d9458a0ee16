//! End-to-end tests of the scripted server through a real HTTP client.

// Helpers outside #[test] functions panic too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use fabric_scripted_llm::{OnExhausted, Scenario, ScriptedCall, ScriptedServer, Turn};
use serde_json::{Value, json};

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post(url: String, body: Value) -> (u16, Value) {
    let resp = client().post(url).json(&body).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

/// Reads a streamed body, returning the network chunks as they arrived.
async fn read_chunks(mut resp: reqwest::Response) -> Vec<String> {
    let mut chunks = Vec::new();
    while let Some(chunk) = resp.chunk().await.unwrap() {
        chunks.push(String::from_utf8(chunk.to_vec()).unwrap());
    }
    chunks
}

fn scenarios_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

#[tokio::test]
async fn turns_go_in_order_across_both_endpoints_and_are_recorded() {
    let server = ScriptedServer::start(Scenario::new(vec![
        Turn::text("one"),
        Turn::tool_call("read_file", json!({"path": "a.txt"})),
        Turn::text("three"),
    ]))
    .await
    .unwrap();

    let (status, first) = post(
        format!("{}/chat/completions", server.base_url()),
        json!({"model": "qwen2.5:7b", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(first["object"], "chat.completion");
    assert_eq!(first["model"], "qwen2.5:7b");
    assert_eq!(first["choices"][0]["message"]["content"], "one");
    assert_eq!(first["choices"][0]["finish_reason"], "stop");
    let usage = &first["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );

    let (status, second) = post(
        format!("{}/api/chat", server.root_url()),
        json!({"model": "qwen2.5:7b", "stream": false, "messages": []}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(second["done"], true);
    assert_eq!(second["done_reason"], "stop");
    let call = &second["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "read_file");
    assert_eq!(call["function"]["arguments"], json!({"path": "a.txt"}));
    assert!(call.get("id").is_none(), "native calls carry no id: {call}");
    assert!(second["prompt_eval_count"].as_u64().is_some());
    assert!(second["eval_count"].as_u64().is_some());

    let (_, third) = post(
        format!("{}/chat/completions", server.base_url()),
        json!({"model": "m", "messages": [], "marker": 3}),
    )
    .await;
    assert_eq!(third["choices"][0]["message"]["content"], "three");

    // Turns ran out: a 409 (not retried) that says how to serve more runs.
    let (status, exhausted) = post(
        format!("{}/api/chat", server.root_url()),
        json!({"model": "m", "stream": false}),
    )
    .await;
    assert_eq!(status, 409);
    let message = exhausted["error"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("scripted LLM server: scenario exhausted after 3 turns")
            && message.contains("turn_by: conversation"),
        "{exhausted}"
    );

    assert_eq!(server.chat_request_count(), 4);
    assert_eq!(server.turns_used(), 3);
    let requests = server.requests();
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/v1/chat/completions",
            "/api/chat",
            "/v1/chat/completions",
            "/api/chat"
        ]
    );
    assert_eq!(requests[0].body["messages"][0]["content"], "hi");
    assert_eq!(requests[2].body["marker"], 3);
    server.shutdown().await;
}

#[tokio::test]
async fn openai_stream_sends_real_fragments() {
    let mut scenario = Scenario::new(vec![Turn {
        content: Some("Let me look that up for you.".into()),
        tool_calls: vec![
            ScriptedCall::new(
                "search",
                json!({"query": "rust async runtimes", "limit": 5}),
            ),
            ScriptedCall::new("read_file", json!({"path": "notes.txt"})),
        ],
        ..Turn::default()
    }]);
    // A pause between events makes the split visible at the network level too.
    scenario.stream_delay_ms = 5;
    let server = ScriptedServer::start(scenario).await.unwrap();

    let resp = client()
        .post(format!("{}/chat/completions", server.base_url()))
        .json(&json!({"model": "m", "stream": true, "stream_options": {"include_usage": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let chunks = read_chunks(resp).await;
    assert!(chunks.len() > 5, "events arrived batched: {chunks:?}");

    let text = chunks.concat();
    let events: Vec<&str> = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").unwrap())
        .collect();
    assert_eq!(*events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );

    let content: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .filter(|s| !s.is_empty())
        .collect();
    assert!(content.len() >= 2, "content not split: {content:?}");
    assert_eq!(content.concat(), "Let me look that up for you.");

    // Reassemble the calls by index, as a client must.
    let mut calls: Vec<(Value, String)> = Vec::new();
    let mut fragments_per_call = [0usize; 2];
    for chunk in &chunks {
        let Some(deltas) = chunk["choices"][0]["delta"]["tool_calls"].as_array() else {
            continue;
        };
        assert_eq!(deltas.len(), 1);
        let delta = &deltas[0];
        let index = delta["index"].as_u64().unwrap() as usize;
        if delta.get("id").is_some() {
            assert_eq!(delta["type"], "function");
            assert_eq!(delta["function"]["arguments"], "");
            assert_eq!(index, calls.len());
            calls.push((delta.clone(), String::new()));
        } else {
            calls[index]
                .1
                .push_str(delta["function"]["arguments"].as_str().unwrap());
            fragments_per_call[index] += 1;
        }
    }
    assert_eq!(calls.len(), 2);
    assert!(
        fragments_per_call.iter().all(|&n| n >= 2),
        "{fragments_per_call:?}"
    );
    assert_eq!(calls[0].0["id"], "call_1_0");
    assert_eq!(calls[0].0["function"]["name"], "search");
    assert_eq!(calls[1].0["id"], "call_1_1");
    let args: Value = serde_json::from_str(&calls[0].1).unwrap();
    assert_eq!(args, json!({"query": "rust async runtimes", "limit": 5}));
    let args: Value = serde_json::from_str(&calls[1].1).unwrap();
    assert_eq!(args, json!({"path": "notes.txt"}));

    let finish: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finish, ["tool_calls"]);
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert!(usage_chunk["usage"]["total_tokens"].as_u64().unwrap() > 0);
    server.shutdown().await;
}

#[tokio::test]
async fn openai_stream_without_include_usage_sends_no_usage_chunk() {
    let server = ScriptedServer::start(Scenario::new(vec![Turn::text("hello there")]))
        .await
        .unwrap();
    let resp = client()
        .post(format!("{}/chat/completions", server.base_url()))
        .json(&json!({"model": "m", "stream": true}))
        .send()
        .await
        .unwrap();
    let text = read_chunks(resp).await.concat();
    assert!(!text.contains("\"usage\""), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn ollama_streams_ndjson_by_default() {
    let server = ScriptedServer::start(Scenario::new(vec![Turn {
        content: Some("Reading the file now, one moment.".into()),
        tool_calls: vec![ScriptedCall::new("read_file", json!({"path": "a.txt"}))],
        ..Turn::default()
    }]))
    .await
    .unwrap();
    // No "stream" field: real Ollama streams then.
    let resp = client()
        .post(format!("{}/api/chat", server.root_url()))
        .json(&json!({"model": "qwen2.5:7b", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/x-ndjson"
    );
    let text = read_chunks(resp).await.concat();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (last, rest) = lines.split_last().unwrap();
    assert_eq!(last["done"], true);
    assert_eq!(last["done_reason"], "stop");
    assert!(last["prompt_eval_count"].as_u64().is_some());
    assert!(last["eval_count"].as_u64().is_some());
    assert!(rest.iter().all(|l| l["done"] == false));

    let content: Vec<&str> = rest
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .filter(|s| !s.is_empty())
        .collect();
    assert!(content.len() >= 2, "{content:?}");
    assert_eq!(content.concat(), "Reading the file now, one moment.");
    let with_calls: Vec<&Value> = rest
        .iter()
        .filter(|l| l["message"].get("tool_calls").is_some())
        .collect();
    assert_eq!(with_calls.len(), 1);
    assert_eq!(
        with_calls[0]["message"]["tool_calls"][0]["function"],
        json!({"name": "read_file", "arguments": {"path": "a.txt"}})
    );
}

#[tokio::test]
async fn error_turns_answer_with_their_status_and_consume_a_turn() {
    let server = ScriptedServer::start(Scenario::new(vec![
        Turn::error(500, "model is loading"),
        Turn::error(400, "registry.ollama.ai/library/x does not support tools"),
        Turn::error(
            404,
            r#"{"error":"model \"x\" not found, try pulling it first"}"#,
        ),
        Turn::text("recovered"),
    ]))
    .await
    .unwrap();
    let chat = format!("{}/api/chat", server.root_url());
    let (status, body) = post(chat.clone(), json!({"stream": false})).await;
    assert_eq!((status, body), (500, json!({"error": "model is loading"})));

    let (status, body) = post(
        format!("{}/chat/completions", server.base_url()),
        json!({"model": "x"}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["message"],
        "registry.ollama.ai/library/x does not support tools"
    );

    // A JSON object body is sent verbatim.
    let (status, body) = post(chat.clone(), json!({"stream": false})).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"], "model \"x\" not found, try pulling it first");

    let (status, body) = post(chat, json!({"stream": false})).await;
    assert_eq!(status, 200);
    assert_eq!(body["message"]["content"], "recovered");
}

#[tokio::test]
async fn repeat_last_keeps_answering() {
    let mut scenario = Scenario::new(vec![Turn::text("first"), Turn::text("again")]);
    scenario.on_exhausted = OnExhausted::RepeatLast;
    let server = ScriptedServer::start(scenario).await.unwrap();
    let url = format!("{}/chat/completions", server.base_url());
    let mut answers = Vec::new();
    for _ in 0..4 {
        let (status, body) = post(url.clone(), json!({"model": "m"})).await;
        assert_eq!(status, 200);
        answers.push(
            body["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(answers, ["first", "again", "again", "again"]);
    assert_eq!(server.chat_request_count(), 4);
}

/// Issue #26: a server for long use (`fabric mock-llm`) answers the same but keeps no bodies,
/// so serving many runs does not grow its memory; it still counts them.
#[tokio::test]
async fn a_served_scenario_keeps_no_request_bodies() {
    let mut scenario = Scenario::new(vec![Turn::text("first")]);
    scenario.on_exhausted = OnExhausted::RepeatLast;
    let server = ScriptedServer::serve_on(scenario, ("127.0.0.1", 0))
        .await
        .unwrap();
    let url = format!("{}/chat/completions", server.base_url());
    for _ in 0..3 {
        let (status, body) = post(url.clone(), json!({"model": "m"})).await;
        assert_eq!(status, 200);
        assert_eq!(body["choices"][0]["message"]["content"], "first");
    }
    let (status, _) = post(
        format!("{}/embeddings", server.base_url()),
        json!({"model": "m", "input": "x"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(server.chat_request_count(), 3);
    assert!(server.requests().is_empty());
    assert!(server.embedding_requests().is_empty());
}

#[tokio::test]
async fn wire_quirks_are_scriptable() {
    let server = ScriptedServer::start(Scenario::new(vec![Turn {
        content_null: true,
        omit_usage: true,
        tool_calls: vec![
            ScriptedCall {
                arguments_raw: Some(r#"{"path": "a.txt""#.into()),
                omit_id: true,
                ..ScriptedCall::new("read_file", json!({}))
            },
            ScriptedCall {
                arguments_as_object: true,
                id: Some("custom".into()),
                ..ScriptedCall::new("search", json!({"q": "x"}))
            },
        ],
        ..Turn::default()
    }]))
    .await
    .unwrap();
    let (_, body) = post(
        format!("{}/chat/completions", server.base_url()),
        json!({"model": "m"}),
    )
    .await;
    assert!(body.get("usage").is_none(), "{body}");
    let message = &body["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null);
    let calls = message["tool_calls"].as_array().unwrap();
    assert!(calls[0].get("id").is_none());
    assert_eq!(calls[0]["function"]["arguments"], r#"{"path": "a.txt""#);
    assert_eq!(calls[1]["id"], "custom");
    assert_eq!(calls[1]["function"]["arguments"], json!({"q": "x"}));
}

#[tokio::test]
async fn model_endpoints_answer_like_ollama_and_openai() {
    let server = ScriptedServer::start(Scenario::default()).await.unwrap();
    let root = server.root_url();

    let health = client()
        .get(format!("{root}/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(health, "Ollama is running");

    let version: Value = client()
        .get(format!("{root}/api/version"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(version["version"].as_str().is_some());

    let tags: Value = client()
        .get(format!("{root}/api/tags"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let model = &tags["models"][0];
    assert_eq!(model["name"], "qwen2.5:7b");
    assert_eq!(model["model"], "qwen2.5:7b");
    assert!(model["size"].as_u64().unwrap() > 1_000_000_000);
    assert_eq!(model["details"]["parameter_size"], "7.6B");
    assert_eq!(model["details"]["family"], "qwen2");

    let (status, show) = post(format!("{root}/api/show"), json!({"model": "qwen2.5:7b"})).await;
    assert_eq!(status, 200);
    assert_eq!(show["capabilities"], json!(["completion", "tools"]));
    assert_eq!(show["details"]["parameter_size"], "7.6B");
    assert_eq!(show["model_info"], json!({}));

    let (status, missing) = post(format!("{root}/api/show"), json!({"name": "llama3:8b"})).await;
    assert_eq!(status, 404);
    assert_eq!(missing, json!({"error": "model 'llama3:8b' not found"}));

    let models: Value = client()
        .get(format!("{}/models", server.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "qwen2.5:7b", "{models}");
    assert_eq!(models["data"][0]["owned_by"], "scripted");

    // Metadata calls spend no turn and are not recorded.
    assert_eq!(server.chat_request_count(), 0);
}

#[tokio::test]
async fn example_scenarios_load_and_serve() {
    let yaml = Scenario::from_file(scenarios_dir().join("read-then-answer.yaml")).unwrap();
    assert_eq!(yaml.turns.len(), 3);
    assert_eq!(yaml.models.len(), 2);
    assert_eq!(yaml.models[1].capabilities, ["completion"]);
    assert_eq!(
        yaml.turns[0].tool_calls[0].arguments,
        json!({"path": "notes.txt"})
    );

    let json_scenario =
        Scenario::from_file(scenarios_dir().join("errors-then-recover.json")).unwrap();
    assert_eq!(json_scenario.on_exhausted, OnExhausted::RepeatLast);
    assert_eq!(json_scenario.turns[0].status, Some(500));

    let server = ScriptedServer::start(yaml).await.unwrap();
    let url = format!("{}/chat/completions", server.base_url());
    let (_, first) = post(url.clone(), json!({"model": "qwen2.5:7b"})).await;
    assert_eq!(
        first["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        r#"{"path":"notes.txt"}"#
    );
    let (_, second) = post(url.clone(), json!({"model": "qwen2.5:7b"})).await;
    assert_eq!(
        second["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        r#"{"path": "notes.txt""#
    );
    let (_, third) = post(url, json!({"model": "qwen2.5:7b"})).await;
    assert_eq!(third["usage"]["prompt_tokens"], 120);
    assert_eq!(third["usage"]["completion_tokens"], 9);
    assert_eq!(third["usage"]["total_tokens"], 129);
}

#[tokio::test]
async fn the_binary_serves_a_scenario_file() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let mut child = Command::new(env!("CARGO_BIN_EXE_fabric-scripted-llm"))
        .arg("--scenario")
        .arg(scenarios_dir().join("errors-then-recover.json"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let root = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
    assert!(root.starts_with("http://127.0.0.1:"), "{root}");

    let (status, body) = post(format!("{root}/api/chat"), json!({"stream": false})).await;
    assert_eq!((status, body), (500, json!({"error": "model is loading"})));
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test]
async fn shutdown_stops_serving() {
    let server = ScriptedServer::start(Scenario::default()).await.unwrap();
    let root = server.root_url();
    server.shutdown().await;
    assert!(client().get(root).send().await.is_err());
}

fn vector(value: &Value) -> Vec<f32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[tokio::test]
async fn both_embedding_endpoints_answer_hash_embeddings_for_any_input() {
    let server = ScriptedServer::start(Scenario::default()).await.unwrap();
    let texts = [
        "fix the flaky login test",
        "the login test is flaky, fix it",
        "plot quarterly revenue",
    ];

    let (status, ollama) = post(
        format!("{}/api/embed", server.root_url()),
        json!({"model": "nomic-embed-text", "input": texts}),
    )
    .await;
    assert_eq!(status, 200, "{ollama}");
    assert_eq!(ollama["model"], "nomic-embed-text");
    let vectors: Vec<Vec<f32>> = ollama["embeddings"]
        .as_array()
        .unwrap()
        .iter()
        .map(vector)
        .collect();
    assert_eq!(vectors.len(), 3);
    for (v, text) in vectors.iter().zip(texts) {
        assert_eq!(v.len(), fabric_scripted_llm::DEFAULT_EMBEDDING_DIMS);
        assert_eq!(
            *v,
            fabric_scripted_llm::hash_embedding(text, v.len()),
            "{text}"
        );
    }
    assert!(cosine(&vectors[0], &vectors[1]) > 0.6);
    assert!(cosine(&vectors[0], &vectors[2]).abs() < 0.2);

    // OpenAI's wire: one string is a list of one; `dimensions` is honoured.
    let (status, openai) = post(
        format!("{}/embeddings", server.base_url()),
        json!({"model": "text-embedding-3-small", "input": texts[0], "dimensions": 32}),
    )
    .await;
    assert_eq!(status, 200, "{openai}");
    assert_eq!(openai["object"], "list");
    assert_eq!(openai["data"][0]["index"], 0);
    assert_eq!(
        vector(&openai["data"][0]["embedding"]),
        fabric_scripted_llm::hash_embedding(texts[0], 32)
    );
    assert!(openai["usage"]["prompt_tokens"].as_u64().unwrap() > 0);

    assert_eq!(server.hits("/api/embed"), 1);
    assert_eq!(server.hits("/v1/embeddings"), 1);
    assert_eq!(server.embedding_request_count(), 2);
    assert_eq!(server.embedding_requests()[1].path, "/v1/embeddings");
    // Embeddings are not chat turns.
    assert_eq!(server.chat_request_count(), 0);
    assert_eq!(server.turns_used(), 0);
    server.shutdown().await;
}

#[tokio::test]
async fn embedding_dims_come_from_the_scenario() {
    let scenario = Scenario::from_yaml("embedding_dims: 8\n").unwrap();
    let server = ScriptedServer::start(scenario).await.unwrap();
    let (status, body) = post(
        format!("{}/api/embed", server.root_url()),
        json!({"model": "m", "input": ["a", "b"]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["embeddings"][1].as_array().unwrap().len(), 8);
    server.shutdown().await;
}

#[tokio::test]
async fn embeddings_can_be_down_from_the_scenario_or_at_run_time() {
    let scenario =
        Scenario::from_yaml("embeddings: down\nturns:\n  - content: still chatting\n").unwrap();
    let server = ScriptedServer::start(scenario).await.unwrap();
    let (status, body) = post(
        format!("{}/api/embed", server.root_url()),
        json!({"model": "m", "input": ["a"]}),
    )
    .await;
    assert_eq!(status, 503);
    assert!(body["error"].as_str().unwrap().contains("down"), "{body}");
    let (status, body) = post(
        format!("{}/embeddings", server.base_url()),
        json!({"model": "m", "input": ["a"]}),
    )
    .await;
    assert_eq!(status, 503);
    assert!(body["error"]["message"].as_str().unwrap().contains("down"));
    // Chat still works.
    let (status, _) = post(
        format!("{}/chat/completions", server.base_url()),
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200);

    server.set_embeddings_down(false);
    let (status, _) = post(
        format!("{}/embeddings", server.base_url()),
        json!({"model": "m", "input": ["a"]}),
    )
    .await;
    assert_eq!(status, 200);
    server.set_embeddings_down(true);
    let (status, _) = post(
        format!("{}/api/embed", server.root_url()),
        json!({"model": "m", "input": "a"}),
    )
    .await;
    assert_eq!(status, 503);
    // Refused requests are counted and recorded too.
    assert_eq!(server.hits("/api/embed"), 2);
    assert_eq!(server.embedding_request_count(), 4);
    server.shutdown().await;
}

#[tokio::test]
async fn malformed_embedding_requests_are_400() {
    let server = ScriptedServer::start(Scenario::default()).await.unwrap();
    for body in [
        json!({"input": ["a"]}),
        json!({"model": "m"}),
        json!({"model": "m", "input": [1, 2]}),
    ] {
        let (status, answer) = post(format!("{}/api/embed", server.root_url()), body).await;
        assert_eq!(status, 400, "{answer}");
    }
    server.shutdown().await;
}
