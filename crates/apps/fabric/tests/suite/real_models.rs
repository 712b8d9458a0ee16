//! The real binary against real model servers with a real small model (issue #24):
//! llama.cpp's `llama-server` and llama-cpp-python's server, both serving SmolLM2-135M.
//!
//! These assert on the fabric's behaviour, never on the model's wisdom: a 135M model fails
//! most tasks, and that is fine. Whatever it does, a run ends with a typed status and a
//! valid runlog, the second model call after tool results works, and what the servers
//! report (the window, the prompt cache) is read. Few and short: the model is fast, but CI
//! time is shared.

use fabric_test_support::llama::{LlamaKind, LlamaServer, MODEL_ALIAS};
use serde_json::Value;

use super::fixture::{Fixture, of_kind};

/// A fixture whose model key points at `server` (the scripted server stays idle), with
/// `extra` lines under the key.
async fn against(server: &LlamaServer, extra: &str) -> Fixture {
    let fx = Fixture::new(Vec::new()).await;
    let yaml = format!(
        "models:\n  test:\n    base_url: {}\n    model: {MODEL_ALIAS}\n    backend: openai\n    timeout_s: 120\n    max_retries: 1\n    max_tokens: 256\n    temperature: 0\n{extra}default_model_key: test\nrouting_model_key: test\n",
        server.base_url()
    );
    std::fs::write(&fx.config, yaml).unwrap();
    fx
}

/// [`against`] on the Responses API (`backend: openai-responses`).
async fn on_responses(server: &LlamaServer, extra: &str) -> Fixture {
    let fx = against(server, extra).await;
    let text = std::fs::read_to_string(&fx.config)
        .unwrap()
        .replace("    backend: openai\n", "    backend: openai-responses\n");
    std::fs::write(&fx.config, text).unwrap();
    fx
}

/// One real model server at a time: each takes both cores, and two at once (with the rest
/// of the suite beside them) made calls slow enough to change what a test saw in CI.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A server of `kind`, started once no other test holds one; the turn is held until the
/// returned guard drops (declare it first, so the server stops before the turn passes).
async fn start(kind: LlamaKind, ctx: u32) -> (tokio::sync::MutexGuard<'static, ()>, LlamaServer) {
    let turn = ONE_AT_A_TIME.lock().await;
    let server = tokio::task::spawn_blocking(move || LlamaServer::start(kind, ctx))
        .await
        .expect("starting the server")
        .unwrap_or_else(|e| panic!("{e}"));
    (turn, server)
}

/// Runs `prompt` on the engineering specialist; the exit code must be the status's, and
/// the runlog (checked line by line by the fixture) must end with one terminal event.
async fn run(
    fx: &Fixture,
    server: &LlamaServer,
    prompt: &str,
    extra: &[&str],
) -> (Value, Vec<Value>) {
    let mut args = vec!["run", prompt, "--pack", "engineering", "--json"];
    args.extend_from_slice(extra);
    let run = fx.fabric_within(&args, &[], 300).await;
    // With `--stream`, every event comes first as a JSON line; the result is the last line.
    let last = run.stdout.trim().lines().last().unwrap_or_default();
    let result: Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("no result line ({e}):\n{}\n{}", run.stdout, run.stderr));
    let status = result["_meta"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let expected = match status.as_str() {
        "completed" | "completed_without_finish" => 0,
        "llm_error" => 3,
        "max_steps_exceeded" | "budget_exceeded" | "context_window_exceeded" | "stalled" => 5,
        other => panic!(
            "unexpected status `{other}`: {}\n{}\nserver log:\n{}",
            run.stdout,
            run.stderr,
            server.log()
        ),
    };
    assert_eq!(run.code(), expected, "{}\n{}", run.stdout, run.stderr);
    let events = fx.runlog(&result);
    let terminal = events
        .iter()
        .filter(|e| matches!(e["kind"].as_str(), Some("run_complete" | "run_failed")))
        .count();
    assert_eq!(terminal, 1, "one terminal event");
    assert_eq!(events.last().unwrap()["payload"]["status"], status.as_str());
    (result, events)
}

/// The repetition breaker on whatever the model did: after every third identical call in a
/// row with an identical result, a `loop_detected` note follows; no fourth identical call
/// ran.
fn repeats_were_caught(events: &[Value]) {
    let mut last: Option<(Value, Value, Value)> = None;
    let mut streak = 0;
    let mut args = std::collections::HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let p = &e["payload"];
        match e["kind"].as_str() {
            Some("tool_call") => {
                args.insert(p["call_id"].clone(), (p["tool"].clone(), p["args"].clone()));
            }
            Some("tool_result" | "tool_error") if p["tool"] != "finish_task" => {
                let Some((tool, a)) = args.get(&p["call_id"]).cloned() else {
                    continue;
                };
                let outcome = p
                    .get("result")
                    .or(p.get("error_message"))
                    .cloned()
                    .unwrap_or_default();
                let key = (tool, a, outcome);
                if p["error_message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("not run: "))
                {
                    continue;
                }
                streak = if last.as_ref() == Some(&key) {
                    streak + 1
                } else {
                    1
                };
                last = Some(key);
                assert!(streak <= 3, "a fourth identical call ran: {e}");
                if streak == 3 {
                    assert_eq!(events[i + 1]["kind"], "loop_detected", "{}", events[i + 1]);
                    assert_eq!(events[i + 1]["payload"]["action"], "nudged");
                }
            }
            _ => {}
        }
    }
}

/// Every model call got an answer: no `llm_error`, and every `llm_request` has its
/// `llm_response`.
fn every_call_answered(result: &Value, events: &[Value], server: &LlamaServer) {
    assert_ne!(
        result["_meta"]["status"],
        "llm_error",
        "{}\nserver log:\n{}",
        result["_meta"]["reason"],
        server.log()
    );
    assert_eq!(
        of_kind(events, "llm_request").len(),
        of_kind(events, "llm_response").len()
    );
    repeats_were_caught(events);
}

#[cfg_attr(
    fabric_no_llama,
    ignore = "needs llama.cpp and the small model: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_24_llama_server_runs_with_calls_after_tool_results_streamed_and_cached() {
    // The model's template cannot call tools: with `--jinja` (llama-server's default) the
    // server takes `tools` and the model answers in prose. `auto` (the default) reads that
    // from `/props` and asks by JSON schema, so the model calls a tool on the first step and
    // the second call carries its result.
    let (_turn, server) = start(LlamaKind::LlamaServer { jinja: true }, 4096).await;
    let fx = against(&server, "").await;
    for stream in [false, true] {
        let extra: &[&str] = if stream {
            &["--max-steps", "3", "--stream"]
        } else {
            &["--max-steps", "3"]
        };
        let (result, events) = run(
            &fx,
            &server,
            "Create hello.txt containing Hello World",
            extra,
        )
        .await;
        every_call_answered(&result, &events, &server);
        let responses = of_kind(&events, "llm_response");
        assert!(
            !responses[0]["payload"]["tool_calls"]
                .as_array()
                .unwrap()
                .is_empty(),
            "a constrained answer is a call: {}",
            responses[0]
        );
        assert!(responses.len() >= 2, "a second call after the tool result");
        // llama.cpp reports its prompt cache; from the second step on, the stable prefix
        // (system prompt, task, first answer) is served from it.
        let second = &responses[1]["payload"]["prompt_cache"];
        assert!(
            second["cached_tokens"].as_u64() > Some(0),
            "stream {stream}: {second}"
        );
    }
}

#[cfg_attr(
    fabric_no_llama,
    ignore = "needs llama.cpp and the small model: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_24_llama_cpp_python_takes_a_second_call_after_tool_calls() {
    // Native tool calling through its `chatml-function-calling` format (`auto` keeps it, as
    // the server takes `tools`). It answered HTTP 500 to the `null` content the fabric sent
    // beside tool calls, so every run's second call failed.
    let (_turn, server) = start(LlamaKind::Python, 4096).await;
    let fx = against(&server, "").await;
    let (result, events) = run(
        &fx,
        &server,
        "Create hello.txt containing Hello World",
        &["--max-steps", "3"],
    )
    .await;
    every_call_answered(&result, &events, &server);
    let responses = of_kind(&events, "llm_response");
    let called = |n: usize| {
        responses[n]["payload"]["tool_calls"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
    };
    assert!(
        called(0),
        "at temperature 0 this model calls a tool first: {}",
        responses[0]
    );
    assert!(
        responses.len() >= 2,
        "the call after the tool result was answered"
    );
    // Streamed: this server answers a streamed request with tools by an empty 200; the
    // request is asked again whole and the run goes on.
    let (result, events) = run(
        &fx,
        &server,
        "Create hello.txt containing Hello World",
        &["--max-steps", "2", "--stream"],
    )
    .await;
    every_call_answered(&result, &events, &server);
    // What the model does next is its own (the server's prompt cache may shift its
    // numbers); that the re-asked request was answered is the fabric's part.
    assert!(
        !of_kind(&events, "llm_response").is_empty(),
        "the re-asked request was answered: {result}"
    );
}

#[cfg_attr(
    fabric_no_llama,
    ignore = "needs llama.cpp and the small model: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_24_the_window_is_read_from_the_server() {
    // No `context_window` in the config: llama.cpp's /props says 512, which the task and
    // the tools do not fit, so the run ends before anything is sent.
    let (turn, server) = start(LlamaKind::LlamaServer { jinja: true }, 512).await;
    let fx = against(&server, "").await;
    let (result, events) = run(&fx, &server, "Create hello.txt containing Hello World", &[]).await;
    assert_eq!(result["_meta"]["status"], "context_window_exceeded");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(reason.contains("context window of 512 tokens"), "{reason}");
    assert!(of_kind(&events, "llm_request").is_empty());
    drop(server);
    drop(turn);
    // A window that holds the task but not many steps: whatever the model does, what is sent
    // fits the window the server reported (compacted when it must), and the server never
    // refuses a prompt as too long.
    let (_turn, server) = start(LlamaKind::LlamaServer { jinja: true }, 3072).await;
    let fx = against(&server, "").await;
    let (result, events) = run(
        &fx,
        &server,
        "Write notes.txt with a long paragraph about rivers, then read it back",
        &["--max-steps", "12"],
    )
    .await;
    every_call_answered(&result, &events, &server);
    assert_eq!(
        of_kind(&events, "pack_start")[0]["payload"]["context_window"],
        3072
    );
    assert_ne!(
        result["_meta"]["status"], "context_window_exceeded",
        "{result}"
    );
    for e in of_kind(&events, "context_compacted") {
        assert!(e["payload"]["tokens_after"].as_u64() <= e["payload"]["room"].as_u64());
    }
}

#[cfg_attr(
    fabric_no_llama,
    ignore = "needs llama.cpp and the small model: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_24_fabric_eval_runs_the_shipped_suite_on_a_real_model() {
    // Without `--jinja` the server refuses `tools`; `auto` switches to JSON schema.
    let (_turn, server) = start(LlamaKind::LlamaServer { jinja: false }, 4096).await;
    let fx = against(&server, "").await;
    let run = fx.fabric_within(&["eval", "--json"], &[], 600).await;
    assert_eq!(
        run.code(),
        0,
        "{}\n{}\n{}",
        run.stdout,
        run.stderr,
        server.log()
    );
    let report = run.json();
    let key = &report["model_keys"][0];
    assert_eq!(key["runs"], 4);
    for attempt in key["attempts"].as_array().unwrap() {
        assert_ne!(attempt["status"], "llm_error", "{attempt}");
        assert!(attempt["steps"].as_u64() >= Some(1), "{attempt}");
    }
    // The server reports its prompt cache, so the report has a hit rate.
    assert!(key["cache_hit_rate"].as_f64().is_some(), "{key}");
}

/// Issue #27: compaction keeps the prompt and the answer inside the window together, by a
/// tokenizer that is not the fabric's estimate: the small model's own, through
/// `llama-server`'s `/tokenize`. Every request of a compacted 60-step run (scripted, on a
/// 4,096-token window) is written out as the model's ChatML would show it, with the tool
/// definitions beside it, counted, and added to the answer's share (`num_predict`).
#[cfg_attr(
    fabric_no_llama,
    ignore = "needs llama.cpp and the small model: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_27_compacted_prompts_and_their_answers_fit_the_window_by_a_real_tokenizer() {
    let requests =
        super::local_models::long_run_on_a_small_window(fabric_test_support::TurnBy::Order).await;
    let (_turn, server) = start(LlamaKind::LlamaServer { jinja: true }, 4096).await;
    let root = server.base_url().trim_end_matches("/v1").to_owned();
    let client = reqwest::Client::new();
    let count = |text: String| {
        let client = client.clone();
        let url = format!("{root}/tokenize");
        async move {
            let answer: Value = client
                .post(url)
                .json(&serde_json::json!({"content": text, "parse_special": true}))
                .send()
                .await
                .expect("/tokenize answered")
                .json()
                .await
                .expect("/tokenize JSON");
            answer["tokens"].as_array().map_or(0, Vec::len)
        }
    };
    let mut most = 0;
    for (i, request) in requests.iter().enumerate() {
        let mut chatml = String::new();
        for message in request["messages"].as_array().unwrap() {
            let role = message["role"].as_str().unwrap_or("user");
            let content = message["content"].as_str().unwrap_or_default();
            let calls = message
                .get("tool_calls")
                .map(Value::to_string)
                .unwrap_or_default();
            chatml.push_str(&format!("<|im_start|>{role}\n{content}{calls}<|im_end|>\n"));
        }
        chatml.push_str("<|im_start|>assistant\n");
        let prompt = count(chatml).await + count(request["tools"].to_string()).await;
        let answer = request["options"]["num_predict"].as_u64().unwrap() as usize;
        assert!(
            prompt + answer <= 4096,
            "request {i}: {prompt} prompt tokens + {answer} for the answer > 4096"
        );
        most = most.max(prompt + answer);
    }
    // Not vacuous: the run came near the window (compaction had work to do).
    assert!(most > 2048, "the largest request took only {most} tokens");
}

#[cfg_attr(
    fabric_no_llama,
    ignore = "needs llama.cpp and the small model: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_30_llama_server_speaks_the_responses_api_whole_streamed_and_unchained() {
    // llama.cpp's `/v1/responses` takes the whole conversation and refuses
    // `previous_response_id` as unsupported: a key that asks for chaining falls back to
    // the whole conversation after the first refusal, and no call fails.
    let (_turn, server) = start(LlamaKind::LlamaServer { jinja: true }, 4096).await;
    // Two runs of two steps: the machine's two cores are shared with the rest of the suite.
    for (chaining, extra) in [
        ("full_input", &["--max-steps", "2"][..]),
        (
            "previous_response_id",
            &["--max-steps", "2", "--stream"][..],
        ),
    ] {
        let fx = on_responses(&server, &format!("    response_chaining: {chaining}\n")).await;
        let (result, events) = run(
            &fx,
            &server,
            "Create hello.txt containing Hello World",
            extra,
        )
        .await;
        every_call_answered(&result, &events, &server);
        let responses = of_kind(&events, "llm_response");
        assert_eq!(
            responses.len(),
            2,
            "{chaining} {extra:?}: a second call after the first answer"
        );
        for r in &responses {
            assert!(
                r["payload"]["usage"]["prompt_tokens"].as_u64() > Some(0),
                "{r}"
            );
        }
    }
}

#[cfg_attr(
    fabric_no_llama,
    ignore = "needs llama.cpp and the small model: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_llama_server_calls_tools_through_the_responses_api_by_json_schema() {
    // SmolLM2's template cannot call tools, and llama.cpp's `/v1/responses` ignores
    // `text.format`: before, `openai-responses` refused constrained decoding and the model
    // answered in prose. `auto` reads `/props` and sends the schema as `response_format`
    // too, which llama.cpp enforces: the first answer is a tool call.
    let (_turn, server) = start(LlamaKind::LlamaServer { jinja: true }, 4096).await;
    let fx = on_responses(&server, "    constrained_decoding: auto\n").await;
    let (result, events) = run(
        &fx,
        &server,
        "Create hello.txt containing Hello World",
        &["--max-steps", "2"],
    )
    .await;
    every_call_answered(&result, &events, &server);
    let first = &of_kind(&events, "llm_response")[0]["payload"];
    assert_eq!(first["constrained"], true, "{first}");
    assert!(
        first["tool_calls"]
            .as_array()
            .is_some_and(|c| !c.is_empty()),
        "the model called a tool: {first}"
    );
}
