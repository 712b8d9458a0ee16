//! What small local models and their servers do (issue #12), through the real binary.

use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};

use super::fixture::{Fixture, of_kind};

fn hermes_write() -> Turn {
    Turn::text(
        "I'll create it.\n<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"hello.txt\", \"content\": \"Hello\"}}\n</tool_call>",
    )
}

fn bare_finish() -> Turn {
    Turn::text("{\"name\": \"finish_task\", \"parameters\": {\"summary\": \"wrote hello.txt\"}}")
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_12_tool_calls_a_server_returned_as_text_are_repaired_on_ollama() {
    let fx =
        Fixture::with_backend(Scenario::new(vec![hermes_write(), bare_finish()]), "ollama").await;
    let result = fx.run_json("write hello.txt", &[], 0).await;
    assert_eq!(result["summary"], "wrote hello.txt");
    let workspace = std::path::PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(workspace.join("hello.txt")).unwrap(),
        "Hello"
    );
    let events = fx.runlog(&result);
    let repaired = of_kind(&events, "tool_call_repaired");
    assert_eq!(repaired.len(), 2);
    assert_eq!(repaired[0]["payload"]["format"], "hermes");
    assert_eq!(repaired[0]["payload"]["tools"], json!(["write_file"]));
    assert_eq!(repaired[0]["payload"]["call_ids"], json!(["repaired_0_0"]));
    assert_eq!(repaired[1]["payload"]["format"], "bare_json");
    let calls = of_kind(&events, "tool_call");
    assert_eq!(calls[0]["payload"]["call_id"], "repaired_0_0");
    assert!(of_kind(&events, "corrective_reprompt").is_empty());
    // The model is sent its call back as a proper call, with the text outside it.
    let second = &fx.requests()[1];
    let assistant = &second["messages"][2];
    assert_eq!(assistant["content"], "I'll create it.");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "write_file");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_12_repair_is_off_for_openai_compatible_servers_unless_configured() {
    // Off by default: the text is a text answer, and the model is asked to use its tools.
    let fx = Fixture::new(vec![hermes_write(), hermes_write()]).await;
    let result = fx.run_json("write hello.txt", &[], 0).await;
    assert_eq!(result["_meta"]["status"], "completed_without_finish");
    let events = fx.runlog(&result);
    assert!(of_kind(&events, "tool_call_repaired").is_empty());
    assert_eq!(of_kind(&events, "corrective_reprompt").len(), 1);

    // On when the model key says so.
    let fx = Fixture::new(vec![hermes_write(), bare_finish()]).await;
    let yaml = std::fs::read_to_string(&fx.config).unwrap().replace(
        "    max_retries: 2\n",
        "    max_retries: 2\n    tool_call_repair: true\n",
    );
    std::fs::write(&fx.config, yaml).unwrap();
    let result = fx.run_json("write hello.txt", &[], 0).await;
    assert_eq!(result["summary"], "wrote hello.txt");
    assert_eq!(of_kind(&fx.runlog(&result), "tool_call_repaired").len(), 2);
}

/// An Ollama fixture whose model reports a trained context of `tokens`.
async fn small_window(turns: Vec<Turn>, tokens: u64) -> Fixture {
    small_window_by(turns, tokens, fabric_test_support::TurnBy::Order).await
}

async fn small_window_by(
    turns: Vec<Turn>,
    tokens: u64,
    turn_by: fabric_test_support::TurnBy,
) -> Fixture {
    let mut scenario = Scenario::new(turns);
    scenario.turn_by = turn_by;
    for model in &mut scenario.models {
        model.context_length = Some(tokens);
    }
    Fixture::with_backend(scenario, "ollama").await
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_12_a_long_run_is_compacted_to_fit_a_small_context_window() {
    long_run_on_a_small_window(fabric_test_support::TurnBy::Order).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_26_the_scripted_server_goes_on_after_compaction_with_turn_by_conversation() {
    // It picked the answer by the assistant messages in the request, which compaction
    // lowers, so it answered old turns again until `max_steps`.
    long_run_on_a_small_window(fabric_test_support::TurnBy::Conversation).await;
}

/// Runs a 60-step conversation on a 4,096-token window (compacted along the way), checks
/// it with the fabric's own estimate, and returns the requests the model server received
/// (issue #27 measures them again with a real tokenizer: `real_models.rs`).
pub(super) async fn long_run_on_a_small_window(turn_by: fabric_test_support::TurnBy) -> Vec<Value> {
    let content = "line of the notes file, with enough words to take room\n".repeat(28);
    let mut turns = vec![Turn::tool_call(
        "write_file",
        json!({"path": "notes.txt", "content": content}),
    )];
    // Two spellings of one path, in turns: not the repetition the breaker stops.
    for i in 0..58 {
        let path = if i % 2 == 0 {
            "notes.txt"
        } else {
            "./notes.txt"
        };
        turns.push(Turn::tool_call("read_file", json!({"path": path})));
    }
    turns.push(Turn::tool_call(
        "finish_task",
        json!({"summary": "read it 58 times"}),
    ));
    let fx = small_window_by(turns, 4096, turn_by).await;
    let result = fx
        .run_json("read the notes again and again", &["--max-steps", "60"], 0)
        .await;
    assert_eq!(result["_meta"]["status"], "completed");
    assert_eq!(result["_meta"]["steps"], 60);
    let events = fx.runlog(&result);
    let compacted = of_kind(&events, "context_compacted");
    assert!(
        !compacted.is_empty(),
        "the conversation had to be compacted"
    );
    for event in &compacted {
        let p = &event["payload"];
        assert_eq!(p["window"], 4096);
        assert!(p["tokens_after"].as_u64() <= p["room"].as_u64(), "{p}");
        assert_eq!(p["mode"], "drop");
    }
    assert!(
        compacted
            .iter()
            .any(|e| e["payload"]["dropped_messages"].as_u64() > Some(0))
    );
    // Every request kept the system prompt and the task, and stayed bounded.
    let requests = fx.requests();
    assert_eq!(requests.len(), 60);
    for (i, request) in requests.iter().enumerate() {
        let messages = request["messages"].as_array().unwrap();
        assert_eq!(messages[0]["role"], "system", "request {i}");
        assert_eq!(
            messages[1]["content"], "read the notes again and again",
            "request {i}"
        );
        let bytes: usize = messages
            .iter()
            .map(|m| m["content"].as_str().map_or(0, str::len))
            .sum::<usize>()
            + request["tools"].to_string().len();
        assert!(bytes / 3 < 4096, "request {i} has {bytes} bytes");
        assert_eq!(request["options"]["num_ctx"], 16384);
        // The answer may take only its share, so prompt and answer fit the window.
        assert!(
            request["options"]["num_predict"].as_u64() <= Some(1024),
            "{}",
            request["options"]
        );
    }
    // The last result was always whole.
    let last = requests[59]["messages"]
        .as_array()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    assert_eq!(last["content"].as_str().map(str::len), Some(content.len()));
    requests
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_26_a_file_larger_than_the_window_is_read_in_parts() {
    // Reading a 12,000-character file on a 4,096-token window ended the run
    // `context_window_exceeded`: the latest result was kept whole.
    let content: String = (1..=200)
        .map(|n| format!("line {n}: the river runs to the sea, and the sea is not full\n"))
        .collect();
    assert!(content.len() > 12_000);
    let turns = vec![
        Turn::tool_call("write_file", json!({"path": "big.txt", "content": content})),
        Turn::tool_call("read_file", json!({"path": "big.txt"})),
        Turn::tool_call(
            "read_file",
            json!({"path": "big.txt", "offset": 150, "limit": 20}),
        ),
        Turn::tool_call("finish_task", json!({"summary": "read it in parts"})),
    ];
    let fx = small_window(turns, 4096).await;
    let result = fx.run_json("summarise big.txt", &[], 0).await;
    assert_eq!(result["_meta"]["status"], "completed", "{result}");
    let events = fx.runlog(&result);
    let cut: Vec<_> = of_kind(&events, "context_compacted")
        .into_iter()
        .filter(|e| e["payload"]["cut_results"].as_u64() > Some(0))
        .collect();
    assert!(!cut.is_empty(), "the big result was cut");
    for e in &cut {
        assert!(e["payload"]["tokens_after"].as_u64() <= e["payload"]["room"].as_u64());
    }
    // The model saw the start of the file and the call that reads on.
    let requests = fx.requests();
    let after_read = requests[2]["messages"].as_array().unwrap();
    let seen = after_read.last().unwrap()["content"].as_str().unwrap();
    assert!(seen.starts_with("line 1: the river"), "{seen}");
    assert!(
        seen.contains("cut to fit the model's context window: showing lines 1–")
            && seen.contains("\"offset\":")
            && seen.contains("reads the next part"),
        "{seen}"
    );
    // The ranged read answered with its lines and where they are.
    let ranged = after_read.len();
    let last = requests[3]["messages"].as_array().unwrap();
    assert!(last.len() >= ranged);
    let part = last.last().unwrap()["content"].as_str().unwrap();
    assert!(part.starts_with("line 150: "), "{part}");
    assert!(
        part.ends_with(
            "[lines 150–169 of 200 (12092 bytes); read_file with {\"limit\":20,\"offset\":170,\"path\":\"big.txt\"} reads the next part]"
        ),
        "{part}"
    );
    // The runlog keeps the whole result: only the prompt was cut.
    let read = of_kind(&events, "tool_result")
        .into_iter()
        .find(|e| e["payload"]["tool"] == "read_file")
        .unwrap();
    assert!(read["payload"].to_string().contains("line 200: "));
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_12_what_cannot_fit_the_window_ends_with_a_typed_status() {
    let fx = small_window(vec![Turn::tool_call("list_files", json!({}))], 600).await;
    let result = fx.run_json("list the files", &[], 5).await;
    assert_eq!(result["_meta"]["status"], "context_window_exceeded");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(reason.contains("context window of 600 tokens"), "{reason}");
    assert_eq!(
        fx.server.chat_request_count(),
        0,
        "nothing was sent to be cut"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_24_an_openai_compatible_server_reports_its_window_in_props() {
    let mut scenario = Scenario::new(vec![
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call("finish_task", json!({"summary": "listed"})),
    ]);
    scenario.models[0].context_length = Some(600);
    let fx = Fixture::with_backend(scenario, "openai").await;
    let result = fx.run_json("list the files", &[], 5).await;
    assert_eq!(result["_meta"]["status"], "context_window_exceeded");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(reason.contains("context window of 600 tokens"), "{reason}");
    assert_eq!(fx.server.chat_request_count(), 0);
    // A configured window wins over the reported one.
    let yaml = std::fs::read_to_string(&fx.config).unwrap().replace(
        "    max_retries: 2\n",
        "    max_retries: 2\n    context_window: 100000\n",
    );
    std::fs::write(&fx.config, yaml).unwrap();
    let result = fx.run_json("list the files", &[], 0).await;
    assert_eq!(result["_meta"]["status"], "completed");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_14_requests_to_a_local_server_queue_for_its_slots() {
    let mut scenario = Scenario::new(vec![
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ]);
    scenario.turn_by = fabric_test_support::TurnBy::Conversation;
    scenario.latency_ms = 200;
    let fx = Fixture::with_backend(scenario, "ollama").await;
    let yaml = std::fs::read_to_string(&fx.config).unwrap().replace(
        "    max_retries: 2\n",
        "    max_retries: 2\n    max_concurrent_requests: 1\n",
    );
    let member = |id: &str| {
        format!(
            "  {id}:\n    description: Lists.\n    system_prompt: List the files.\n    tools: [list_files]\n"
        )
    };
    std::fs::write(
        &fx.config,
        format!(
            "{yaml}task_force_mode: parallel\nspecialists:\n{}{}{}",
            member("a"),
            member("b"),
            member("c")
        ),
    )
    .unwrap();
    let run = fx
        .fabric(&["run", "list the files", "--pack", "a,b,c", "--json"])
        .await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let events = fx.runlog(&run.json());
    let waits: Vec<u64> = of_kind(&events, "llm_response")
        .iter()
        .filter_map(|e| e["payload"]["queued_ms"].as_u64())
        .collect();
    // Three members, one slot: while one asks, the others wait their turn, and say so.
    assert!(waits.len() >= 2, "{waits:?}");
    assert!(waits.iter().any(|w| *w >= 150), "{waits:?}");
}

/// Issue #24: on a CPU, re-reading the prompt is most of a step, and a server's prompt cache
/// serves only an unchanged prefix. Each request must start with the whole previous one,
/// byte for byte (no timestamps, no reordered tools), when nothing had to be compacted.
#[tokio::test(flavor = "multi_thread")]
async fn issue_24_each_request_extends_the_previous_one_byte_for_byte() {
    let fx = Fixture::new(vec![
        Turn::tool_call("write_file", json!({"path": "a.txt", "content": "one"})),
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call("read_file", json!({"path": "a.txt"})),
        Turn::tool_call("write_file", json!({"path": "b.txt", "content": "two"})),
        Turn::tool_call("finish_task", json!({"summary": "wrote a and b"})),
    ])
    .await;
    let result = fx.run_json("write a.txt and b.txt", &[], 0).await;
    assert_eq!(result["_meta"]["status"], "completed");
    let requests = fx.requests();
    assert_eq!(requests.len(), 5);
    for pair in requests.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        assert_eq!(before["tools"].to_string(), after["tools"].to_string());
        let old = before["messages"].as_array().unwrap();
        let new = after["messages"].as_array().unwrap();
        assert!(new.len() > old.len());
        for (a, b) in old.iter().zip(new) {
            assert_eq!(a.to_string(), b.to_string(), "an earlier message changed");
        }
    }
}

/// Issue #24: the loop aids' and constrained decoding's keys are checked, with the fix.
#[tokio::test(flavor = "multi_thread")]
async fn issue_24_loop_aid_and_constrained_decoding_keys_are_checked() {
    super::fixture::assert_config_errors(&[
        (
            "specialists:\n  engineering: {repeat_limit: 1000}\n",
            "`specialists.engineering.repeat_limit`: must be between 0 and 100, got 1000",
        ),
        (
            "specialists:\n  engineering: {require_finish: maybe}\n",
            "require_finish",
        ),
    ])
    .await;
    for (backend, word, expected) in [
        (
            "openai",
            "maybe",
            "must be `off`, `json_schema` or `auto`, got `maybe`",
        ),
        (
            "anthropic",
            "json_schema",
            "this key's backend takes only `off`",
        ),
        (
            "ollama",
            "auto",
            "this key's backend takes `off` or `json_schema`",
        ),
    ] {
        let fx = Fixture::with_backend(Scenario::new(Vec::new()), backend).await;
        let yaml = std::fs::read_to_string(&fx.config).unwrap().replace(
            "    max_retries: 2\n",
            &format!("    max_retries: 2\n    constrained_decoding: {word}\n"),
        );
        std::fs::write(&fx.config, yaml).unwrap();
        let run = fx.fabric(&["config", "validate"]).await;
        assert_eq!(run.code(), 2, "{backend} {word}: {}", run.stderr);
        assert!(
            run.stderr.contains(expected),
            "{backend} {word}: {}",
            run.stderr
        );
    }
}

/// Issue #40: a first answer in prose cut by the server's token limit (`finish_reason:
/// length`) was kept whole after the corrective reprompt and ended a 4,096-token run at step
/// 1 with `context_window_exceeded`; it is cut to fit like any oversized turn.
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_a_first_answer_cut_by_the_token_limit_is_cut_to_fit() {
    let mut prose =
        Turn::text("The river runs to the sea, and yet the sea is not full. ".repeat(160));
    prose.finish_reason = Some("length".into());
    let turns = vec![
        prose,
        Turn::tool_call("write_file", json!({"path": "sea.txt", "content": "full"})),
        Turn::tool_call("finish_task", json!({"summary": "wrote sea.txt"})),
    ];
    let fx = small_window(turns, 4096).await;
    let result = fx.run_json("write sea.txt", &[], 0).await;
    assert_eq!(result["_meta"]["status"], "completed", "{result}");
    let events = fx.runlog(&result);
    let cut = of_kind(&events, "context_compacted");
    assert!(
        cut.iter()
            .any(|e| e["payload"]["cut_results"].as_u64() > Some(0)),
        "{cut:?}"
    );
    // The model saw its answer's start and a note, then the corrective message.
    let requests = fx.requests();
    let second = requests[1]["messages"].as_array().unwrap();
    let answer = second
        .iter()
        .find(|m| m["role"] == "assistant")
        .and_then(|m| m["content"].as_str())
        .unwrap();
    assert!(answer.starts_with("The river runs"), "{answer}");
    assert!(
        answer.ends_with("more characters of this answer cut to fit the model's context window]"),
        "{answer}"
    );
}
