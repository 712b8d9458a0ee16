//! Recruitment, task forces, model discovery, bootstrap and `fabric doctor`, end to end.

use fabric_test_support::{ModelInfo, Scenario, ScriptedServer, Turn};
use serde_json::{Value, json};

use super::fixture::{Fixture, alive_with, free_port, of_kind};

fn work(summary: &str) -> Vec<Turn> {
    vec![
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call("finish_task", json!({"summary": summary})),
    ]
}

fn append_config(fx: &Fixture, extra: &str) {
    let mut text = std::fs::read_to_string(&fx.config).unwrap();
    text.push_str(extra);
    std::fs::write(&fx.config, text).unwrap();
}

async fn run_json(fx: &Fixture, args: &[&str], code: i32) -> (Value, String) {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.push("--json");
    let run = fx.fabric(&all).await;
    assert_eq!(
        run.code(),
        code,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    (run.json(), run.stderr)
}

#[tokio::test(flavor = "multi_thread")]
async fn keyword_routing_without_pack() {
    let fx = Fixture::new(work("parser written")).await;
    let (result, _) = run_json(&fx, &["Implement a CSV parser with unit tests"], 0).await;
    let events = fx.runlog(&result);
    let r = &of_kind(&events, "recruitment")[0]["payload"];
    assert_eq!(r["routing_method"], "keyword");
    assert_eq!(r["specialist_ids"], json!(["engineering"]));
    let caps = r["required_capabilities"].as_array().unwrap();
    assert!(caps.contains(&json!("software_testing")), "{r}");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("`engineering` covers"),
        "{r}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_26_a_review_goes_to_the_read_only_reviewer_and_json_says_why() {
    // With the shipped specialists, "review the code" named `code` (engineering's) and
    // nothing the reviewer covers, so the engineer, who writes, got a review task.
    for prompt in ["review the code in this workspace", "audit this code"] {
        let fx = Fixture::new(vec![
            Turn::tool_call("list_files", json!({})),
            Turn::tool_call(
                "finish_task",
                json!({"approved": true, "findings": [], "summary": "nothing to fix"}),
            ),
        ])
        .await;
        let (result, _) = run_json(&fx, &[prompt], 0).await;
        assert_eq!(
            result["_meta"]["specialist_ids"],
            json!(["reviewer"]),
            "{result}"
        );
        let routing = &result["_meta"]["routing"];
        assert_eq!(routing["method"], "keyword", "{result}");
        let reason = routing["reason"].as_str().unwrap();
        assert!(
            reason.contains("`engineering` (which may write) was left out"),
            "{reason}"
        );
        // The model reason is there, null when no discovery chose the model.
        assert!(
            result["_meta"]
                .as_object()
                .unwrap()
                .contains_key("model_reason")
        );
        // Nothing in the request offers a tool that writes.
        let tools: Vec<String> = fx.requests()[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect();
        assert!(
            !tools.iter().any(|t| t == "write_file" || t == "shell"),
            "{tools:?}"
        );
    }
    // Asked for a change, the engineer takes it.
    let fx = Fixture::new(work("fixed")).await;
    let (result, _) = run_json(&fx, &["review the code and fix the bugs"], 0).await;
    assert_eq!(
        result["_meta"]["specialist_ids"],
        json!(["engineering"]),
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn llm_routing_uses_the_routing_model_and_is_recorded() {
    let mut turns = vec![Turn::tool_call(
        "route",
        json!({"specialist_ids": ["engineering"], "reason": "it is code"}),
    )];
    turns.extend(work("done"));
    let fx = Fixture::new(turns).await;
    append_config(&fx, "routing: llm\n");
    let (result, _) = run_json(&fx, &["Tell me a story"], 0).await;
    let events = fx.runlog(&result);
    let r = &of_kind(&events, "recruitment")[0]["payload"];
    assert_eq!(r["routing_method"], "llm", "{r}");
    assert!(r["reason"].as_str().unwrap().contains("it is code"));
    let routing = &of_kind(&events, "llm_response")[0]["payload"];
    assert_eq!(routing["purpose"], "routing");
    // The routing request offered exactly the `route` tool.
    let first = &fx.requests()[0];
    assert_eq!(first["tools"][0]["function"]["name"], "route");
}

#[tokio::test(flavor = "multi_thread")]
async fn llm_routing_falls_back_to_keywords_on_garbage() {
    let mut turns = vec![Turn::text("I would pick the best one!")];
    turns.extend(work("done"));
    let fx = Fixture::new(turns).await;
    append_config(&fx, "routing: llm\n");
    let (result, _) = run_json(&fx, &["Implement a parser"], 0).await;
    let events = fx.runlog(&result);
    let r = &of_kind(&events, "recruitment")[0]["payload"];
    assert_eq!(r["routing_method"], "keyword_fallback");
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.contains("not a JSON object") && reason.contains("keyword routing"),
        "{reason}"
    );
    assert!(of_kind(&events, "llm_response")[0]["payload"]["error"].is_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sequential_task_force_hands_over() {
    let mut turns = work("wrote hello.txt");
    turns.extend(work("reviewed: fine"));
    let fx = Fixture::new(turns).await;
    append_config(
        &fx,
        "specialists:\n  auditor:\n    description: Reviews.\n    system_prompt: You review.\n    tools: [read_file, list_files]\n    may_write: false\n",
    );
    let (result, _) = run_json(
        &fx,
        &["Write and review", "--pack", "engineering,auditor"],
        0,
    )
    .await;
    assert_eq!(
        result["_meta"]["specialist_ids"],
        json!(["engineering", "auditor"])
    );
    assert_eq!(
        result["summary"],
        "engineering: wrote hello.txt | auditor: reviewed: fine"
    );
    let auditor_first = fx.requests()[2].to_string();
    assert!(
        auditor_first.contains("HANDOFF from engineering"),
        "{auditor_first}"
    );
    assert!(auditor_first.contains("wrote hello.txt"));
    let events = fx.runlog(&result);
    let packs = of_kind(&events, "pack_start");
    assert_eq!(packs.len(), 2);
    assert_eq!(packs[1]["payload"]["pack_index"], 1);
    assert_eq!(
        of_kind(&events, "run_complete")[0]["payload"]["task_force_mode"],
        "sequential"
    );
}

fn models(list: &[(&str, &str, &[&str])]) -> Vec<ModelInfo> {
    list.iter()
        .map(|(name, size, caps)| {
            let mut m = ModelInfo::new(*name);
            m.parameter_size = (*size).to_owned();
            m.capabilities = caps.iter().map(|c| (*c).to_owned()).collect();
            m
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn discovery_picks_a_tool_capable_model_and_says_why() {
    let mut scenario = Scenario::new(work("ok"));
    scenario.models = models(&[
        ("nomic-embed-text:latest", "137M", &["embedding"]),
        ("gemma:2b", "2B", &["completion"]),
        ("llama3.1:8b", "8.0B", &["completion", "tools"]),
        ("qwen2.5:0.5b", "494.03M", &["completion", "tools"]),
    ]);
    let fx = Fixture::with_backend(scenario, "ollama").await;
    let text = std::fs::read_to_string(&fx.config)
        .unwrap()
        .replace("qwen2.5:7b", "qwen2.5:14b");
    std::fs::write(&fx.config, text + "auto_pull_if_missing: false\n").unwrap();
    let run = fx
        .fabric(&["run", "Implement it", "--pack", "engineering"])
        .await;
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("`qwen2.5:14b` is not installed; using `llama3.1:8b`"),
        "{}",
        run.stderr
    );
    let chat = fx
        .server
        .requests()
        .into_iter()
        .find(|r| r.path == "/api/chat")
        .unwrap();
    assert_eq!(chat.body["model"], "llama3.1:8b");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_26_doctor_says_what_runs_do_about_a_model_that_is_not_installed() {
    // Doctor said [FAIL] and exited 1, although discovery makes the runs work.
    let mut scenario = Scenario::new(vec![]);
    scenario.models = models(&[("llama3.1:8b", "8.0B", &["completion", "tools"])]);
    let fx = Fixture::with_backend(scenario, "ollama").await;
    let text = std::fs::read_to_string(&fx.config)
        .unwrap()
        .replace("qwen2.5:7b", "qwen2.5:14b");
    std::fs::write(&fx.config, text + "auto_pull_if_missing: false\n").unwrap();
    let run = fx.fabric(&["doctor"]).await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let line = run
        .stdout
        .lines()
        .find(|l| l.contains("model `test` present"))
        .unwrap_or_else(|| panic!("no present line:\n{}", run.stdout));
    assert!(
        line.starts_with("[warn]")
            && line.contains("`qwen2.5:14b` is not installed; using `llama3.1:8b`")
            && line.contains("runs will use `llama3.1:8b`; `ollama pull qwen2.5:14b` to use it"),
        "{line}"
    );
    // With nothing that calls tools and no pulling, no run can work: that fails.
    let mut scenario = Scenario::new(vec![]);
    scenario.models = models(&[("gemma:2b", "2B", &["completion"])]);
    let fx = Fixture::with_backend(scenario, "ollama").await;
    append_config(&fx, "auto_pull_if_missing: false\n");
    let run = fx.fabric(&["doctor"]).await;
    assert_eq!(run.code(), 1, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("[FAIL] model `test` present: `qwen2.5:7b` is not installed and none"),
        "{}",
        run.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_tool_capable_model_pulls_one_with_progress() {
    let mut scenario = Scenario::new(work("ok"));
    scenario.models = models(&[("gemma:2b", "2B", &["completion"])]);
    let fx = Fixture::with_backend(scenario, "ollama").await;
    let run = fx
        .fabric(&["run", "Implement it", "--pack", "engineering", "--json"])
        .await;
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("pulling `qwen2.5:7b`"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("pull qwen2.5:7b: success"),
        "{}",
        run.stderr
    );
    // Not a terminal: each status once, though the layer's status came in four lines.
    let layer = run
        .stderr
        .lines()
        .filter(|l| *l == "pull qwen2.5:7b: pulling 000000000000")
        .count();
    assert_eq!(layer, 1, "{}", run.stderr);
    assert_eq!(run.json()["_meta"]["model"], "qwen2.5:7b");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_down_local_server_is_started_and_polled() {
    let fx = Fixture::new(vec![]).await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    // The start command leaves a marker; the test then starts the server on the port, as a
    // real `ollama serve` would come up a moment after being started.
    let marker = fx.dir.path().join("started");
    std::fs::write(
        &fx.config,
        format!(
            "models:\n  test:\n    base_url: http://127.0.0.1:{port}\n    model: qwen2.5:7b\n    backend: ollama\n    max_retries: 0\ndefault_model_key: test\nrouting_model_key: test\nlocal_llm_start_cmd: [touch, {}]\nlocal_llm_start_timeout_s: 20\n",
            marker.display()
        ),
    )
    .unwrap();
    let starter = tokio::spawn(async move {
        while !marker.exists() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        ScriptedServer::start_on(Scenario::new(work("ok")), ("127.0.0.1", port))
            .await
            .unwrap()
    });
    let run = fx
        .fabric(&["run", "Implement it", "--pack", "engineering"])
        .await;
    let _server = starter.await.unwrap();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(run.stderr.contains("started `touch"), "{}", run.stderr);
    assert!(run.stderr.contains("model server is up"), "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_command_that_never_serves_fails_clearly() {
    let fx = Fixture::new(vec![]).await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    std::fs::write(
        &fx.config,
        format!("models:\n  test:\n    base_url: http://127.0.0.1:{port}\n    model: m\n    backend: ollama\ndefault_model_key: test\nrouting_model_key: test\nlocal_llm_start_cmd: [\"true\"]\nlocal_llm_start_timeout_s: 1\n"),
    )
    .unwrap();
    let run = fx.fabric(&["run", "x", "--pack", "engineering"]).await;
    // A model server that cannot be used is `llm_error` (3), as docs/CLI.md promises.
    assert_eq!(run.code(), 3, "{}", run.stderr);
    assert!(run.stderr.contains("nothing answered"), "{}", run.stderr);
    assert!(
        run.stderr.contains("local_llm_start_timeout_s"),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_14_a_server_that_never_answers_is_waited_for_aloud_then_stopped() {
    let fx = Fixture::new(vec![]).await;
    let port = free_port();
    let marker = format!("fabric-slow-server-{}", std::process::id());
    std::fs::write(
        &fx.config,
        format!("models:\n  test:\n    base_url: http://127.0.0.1:{port}\n    model: m\n    backend: ollama\ndefault_model_key: test\nrouting_model_key: test\nlocal_llm_start_cmd: [sh, -c, 'sleep 60; echo {marker}']\nlocal_llm_start_timeout_s: 6\n"),
    )
    .unwrap();
    let run = fx.fabric(&["run", "x", "--pack", "engineering"]).await;
    assert_eq!(run.code(), 3, "{}", run.stderr);
    assert!(run.stderr.contains("waiting up to 6 s"), "{}", run.stderr);
    assert!(
        run.stderr.contains("still waiting for `sh -c"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("so it was stopped again"),
        "{}",
        run.stderr
    );
    assert!(
        !alive_with(&marker),
        "the server it started was left running"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_14_without_ollama_installed_the_user_is_told_what_to_do() {
    let fx = Fixture::new(vec![]).await;
    let port = free_port();
    std::fs::write(
        &fx.config,
        format!("models:\n  local:\n    base_url: http://localhost:{port}\n    model: qwen2.5:7b\n    backend: ollama\ndefault_model_key: local\nrouting_model_key: local\n"),
    )
    .unwrap();
    // No `ollama` on this PATH (an empty directory).
    let empty = tempfile::tempdir().unwrap();
    let run = fx
        .fabric_with(
            &["run", "x", "--pack", "engineering", "--json"],
            &[("PATH", empty.path().to_str().unwrap())],
        )
        .await;
    assert_eq!(run.code(), 3, "{}", run.stderr);
    for words in [
        "Ollama is not installed",
        "https://ollama.com/download",
        "`models.local.base_url`",
        "No model at hand?",
    ] {
        assert!(run.stderr.contains(words), "{words}: {}", run.stderr);
    }
    assert_eq!(run.json()["error"]["code"], "llm_error");
    assert!(!run.stderr.contains("WARN"), "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_reports_each_check() {
    let fx = Fixture::with_backend(Scenario::new(vec![]), "ollama").await;
    let run = fx.fabric(&["doctor"]).await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    for line in [
        "[ok  ] config: valid",
        "[ok  ] model `test` server",
        "[ok  ] model `test` present",
        "[ok  ] model `test` tools: calls tools",
        "[skip] embeddings model: none configured",
        "[ok  ] store: sqlite:",
        "] landlock: ",
        "] sandbox: `strict` enforced on this host",
        "sandbox enforces: filesystem",
    ] {
        assert!(
            run.stdout.contains(line),
            "missing `{line}` in:\n{}",
            run.stdout
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_checks_the_specialists_model_keys_and_fails_on_a_down_server() {
    let fx = Fixture::with_backend(Scenario::new(vec![]), "ollama").await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let text = std::fs::read_to_string(&fx.config).unwrap().replace(
        "default_model_key",
        &format!(
            "  aux:\n    base_url: http://127.0.0.1:{port}/v1\n    model: m\n    backend: openai\ndefault_model_key"
        ),
    );
    std::fs::write(
        &fx.config,
        text + "specialists:\n  auditor:\n    description: Reviews.\n    system_prompt: You review.\n    tools: [read_file]\n    model_key: aux\n",
    )
    .unwrap();
    let run = fx.fabric(&["doctor"]).await;
    assert_eq!(run.code(), 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("[ok  ] model `test` server: http://127.0.0.1:"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("(used by the default)"),
        "{}",
        run.stdout
    );
    let fail = run
        .stdout
        .lines()
        .find(|l| l.starts_with("[FAIL] model `aux` server: "))
        .unwrap_or_else(|| panic!("no FAIL line for `aux`:\n{}", run.stdout));
    assert!(
        fail.ends_with(
            "(used by specialist `auditor`); check `models.aux.base_url` and that the server runs"
        ),
        "{fail}"
    );
    // The routing key is checked only when routing asks a model.
    assert_eq!(run.stdout.matches("model `test` server").count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parallel_task_force_runs_both_members_at_once_and_merges_in_order() {
    // Each member talks to its own scripted server, so their turns cannot interleave. The
    // first member is slow, the second fast: it finishes first, yet its section comes second.
    let slow: Vec<Turn> = work("engineering did it")
        .into_iter()
        .map(|mut t| {
            t.delay_ms = Some(400);
            t
        })
        .collect();
    let fx = Fixture::new(slow).await;
    let other = ScriptedServer::start(Scenario::new(work("reviewed: fine")))
        .await
        .unwrap();
    let text = std::fs::read_to_string(&fx.config).unwrap().replace(
        "default_model_key",
        &format!(
            "  other:\n    base_url: {}\n    model: qwen2.5:7b\n    backend: openai\ndefault_model_key",
            other.base_url()
        ),
    );
    std::fs::write(
        &fx.config,
        text + "task_force_mode: parallel\nspecialists:\n  auditor:\n    description: Reviews.\n    system_prompt: You review.\n    tools: [read_file, list_files]\n    may_write: false\n    model_key: other\n",
    )
    .unwrap();
    let (result, _) = run_json(
        &fx,
        &["Write and review", "--pack", "engineering,auditor"],
        0,
    )
    .await;
    assert_eq!(
        result["summary"],
        "engineering: engineering did it | auditor: reviewed: fine"
    );
    assert_eq!(result["task_force_mode"], "parallel");
    let sections = result["sections"].as_array().unwrap();
    assert_eq!(sections[0]["specialist_id"], "engineering");
    assert_eq!(sections[0]["result"]["summary"], "engineering did it");
    assert_eq!(sections[1]["specialist_id"], "auditor");
    assert_eq!(sections[1]["status"], "completed");
    // Each server answered its own member only; no hand-off in parallel mode.
    assert_eq!(fx.server.chat_request_count(), 2);
    assert_eq!(other.chat_request_count(), 2);
    assert!(!other.requests()[0].body.to_string().contains("HANDOFF"));
    // Overlap: the auditor finished before the engineer's first answer came back.
    let events = fx.runlog(&result);
    let seq_of = |kind: &str, pack: u64| {
        events
            .iter()
            .find(|e| e["kind"] == kind && e["payload"]["pack_index"] == pack)
            .and_then(|e| e["seq"].as_u64())
            .unwrap_or_else(|| panic!("no {kind} of member {pack}"))
    };
    let auditor_done = events
        .iter()
        .filter(|e| e["kind"] == "tool_call" && e["payload"]["pack_index"] == 1)
        .filter_map(|e| e["seq"].as_u64())
        .max()
        .unwrap();
    assert!(
        auditor_done < seq_of("llm_response", 0),
        "the members did not overlap: {events:#?}"
    );
    assert!(of_kind(&events, "task_force_parallel").len() == 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_discovery_reads_v1_models_and_never_swaps_the_model() {
    let mut scenario = Scenario::new(work("ok"));
    scenario.models = models(&[("listed-model", "7B", &[]), ("another", "1B", &[])]);
    let fx = Fixture::with_backend(scenario, "openai").await;
    // Listed: used as configured.
    let text = std::fs::read_to_string(&fx.config)
        .unwrap()
        .replace("qwen2.5:7b", "listed-model");
    std::fs::write(&fx.config, &text).unwrap();
    let run = fx
        .fabric(&["run", "Implement it", "--pack", "engineering"])
        .await;
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("engineering: model listed-model (`listed-model` as configured)"),
        "{}",
        run.stderr
    );
    assert_eq!(fx.server.hits("/v1/models"), 1);
    assert_eq!(fx.server.hits("/api/tags"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_discovery_says_when_the_model_is_not_listed() {
    let mut scenario = Scenario::new(work("ok"));
    scenario.models = models(&[("listed-model", "7B", &[])]);
    let fx = Fixture::with_backend(scenario, "openai").await;
    let run = fx
        .fabric(&["run", "Implement it", "--pack", "engineering"])
        .await;
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "`qwen2.5:7b` as configured (not in the server's model list; it may still answer)"
        ),
        "{}",
        run.stderr
    );
    let chat = &fx.requests()[0];
    assert_eq!(chat["model"], "qwen2.5:7b");
}

#[tokio::test(flavor = "multi_thread")]
async fn model_flag_skips_discovery() {
    let mut scenario = Scenario::new(work("ok"));
    scenario.models = models(&[("gemma:2b", "2B", &["completion"])]);
    let fx = Fixture::with_backend(scenario, "ollama").await;
    let run = fx
        .fabric(&[
            "run",
            "Implement it",
            "--pack",
            "engineering",
            "--model",
            "my-model:1b",
        ])
        .await;
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("`my-model:1b` given with --model; discovery skipped"),
        "{}",
        run.stderr
    );
    // No listing, no capability lookups, no pull although no listed model calls tools.
    for path in ["/api/tags", "/api/show", "/api/pull"] {
        assert_eq!(fx.server.hits(path), 0, "{path}");
    }
    let chat = fx
        .server
        .requests()
        .into_iter()
        .find(|r| r.path == "/api/chat")
        .unwrap();
    assert_eq!(chat.body["model"], "my-model:1b");
}

/// Two model keys on the scripted server and `complexity_routing` between them.
fn complexity_config(fx: &Fixture) {
    let base = fx.server.base_url();
    let yaml = format!(
        "models:\n  fast:\n    base_url: {base}\n    model: qwen2.5:7b\n    backend: openai\n  quality:\n    base_url: {base}\n    model: qwen2.5:7b\n    backend: openai\ndefault_model_key: fast\nrouting_model_key: fast\ncomplexity_routing:\n  threshold: 60\n  simple: fast\n  complex: quality\n"
    );
    std::fs::write(&fx.config, yaml).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_complexity_routing_picks_the_model_key_and_says_why() {
    let mut turns = work("hello written");
    turns.extend(work("refactored"));
    turns.extend(work("overridden"));
    let fx = Fixture::new(turns).await;
    complexity_config(&fx);

    let (simple, _) = run_json(
        &fx,
        &["Create hello.txt containing Hello", "--pack", "engineering"],
        0,
    )
    .await;
    assert_eq!(simple["_meta"]["model_key"], "fast");
    let events = fx.runlog(&simple);
    let reason = of_kind(&events, "run_start")[0]["payload"]["model_reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        reason.starts_with("complexity ") && reason.contains("< 60: fast"),
        "{reason}"
    );

    let hard = "Refactor the HTTP layer to async handlers, keep the public API backwards compatible, then add tests for every endpoint and benchmark the latency";
    let (complex, _) = run_json(&fx, &[hard, "--pack", "engineering"], 0).await;
    assert_eq!(complex["_meta"]["model_key"], "quality");
    let events = fx.runlog(&complex);
    let reason = of_kind(&events, "run_start")[0]["payload"]["model_reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        reason.contains("≥ 60: quality") && reason.contains("hard verbs"),
        "{reason}"
    );

    // `--model-key` wins over the score.
    let (forced, _) = run_json(
        &fx,
        &[hard, "--pack", "engineering", "--model-key", "fast"],
        0,
    )
    .await;
    assert_eq!(forced["_meta"]["model_key"], "fast");

    // A key that does not exist is named.
    let yaml = std::fs::read_to_string(&fx.config)
        .unwrap()
        .replace("complex: quality", "complex: strong");
    std::fs::write(&fx.config, yaml).unwrap();
    let bad = fx.fabric(&["run", "x", "--pack", "engineering"]).await;
    assert_eq!(bad.code(), 2);
    assert!(
        bad.stderr.contains("complexity_routing.complex")
            && bad.stderr.contains("no model `strong`"),
        "{}",
        bad.stderr
    );
}

/// The fixture's server as the local key `test`, a second scripted server as `cloud`, and
/// `cloud_fallback` to it.
async fn with_cloud(fx: &Fixture, cloud_turns: Vec<Turn>) -> ScriptedServer {
    let cloud = ScriptedServer::start(Scenario::new(cloud_turns))
        .await
        .unwrap();
    let yaml = format!(
        "models:\n  test:\n    base_url: {}\n    model: qwen2.5:7b\n    backend: openai\n    max_retries: 1\n  cloud:\n    base_url: {}\n    model: big-cloud-model\n    backend: openai\ndefault_model_key: test\nrouting_model_key: test\ncloud_fallback:\n  model_key: cloud\n  policy: [no_tool_calls, malformed_args]\n  max_per_run: 2\n",
        fx.server.base_url(),
        cloud.base_url()
    );
    std::fs::write(&fx.config, yaml).unwrap();
    cloud
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_a_step_without_a_tool_call_falls_back_to_the_cloud_model() {
    let fx = Fixture::new(vec![
        Turn::text("You should create the file hello.txt."),
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ])
    .await;
    let cloud = with_cloud(
        &fx,
        vec![Turn::tool_call(
            "write_file",
            json!({"path": "hello.txt", "content": "Hello"}),
        )],
    )
    .await;
    let (result, _) = run_json(&fx, &["make hello.txt", "--pack", "engineering"], 0).await;
    assert_eq!(result["_meta"]["status"], "completed");
    let events = fx.runlog(&result);
    let fallbacks = of_kind(&events, "cloud_fallback");
    assert_eq!(fallbacks.len(), 1);
    let p = &fallbacks[0]["payload"];
    assert_eq!(p["reason"], "no_tool_calls");
    assert_eq!(p["local_model"], "qwen2.5:7b");
    assert_eq!(p["cloud_model"], "big-cloud-model");
    assert_eq!(fallbacks[0]["step"], 0);
    assert_eq!(cloud.chat_request_count(), 1);
    // The step's answer is the cloud's: the file it wrote is there, and no corrective
    // reprompt was needed.
    assert!(of_kind(&events, "corrective_reprompt").is_empty());
    let workspace = std::path::PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(workspace.join("hello.txt")).unwrap(),
        "Hello"
    );
}

/// Issue #27: `cloud_fallback.max_per_run` caps a run's cloud calls: the third step without
/// a tool call stays with the local model (a corrective reprompt), not a third fallback.
#[tokio::test(flavor = "multi_thread")]
async fn issue_27_max_per_run_caps_the_cloud_fallbacks_of_a_run() {
    let fx = Fixture::new(vec![
        Turn::text("I would list the files first."),
        Turn::text("Then I would list them again."),
        Turn::text("And then I would be done."),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ])
    .await;
    let cloud = with_cloud(
        &fx,
        vec![
            Turn::tool_call("list_files", json!({"max_entries": 1})),
            Turn::tool_call("list_files", json!({"max_entries": 2})),
            Turn::tool_call("list_files", json!({"max_entries": 3})),
        ],
    )
    .await;
    let (result, _) = run_json(&fx, &["list the files", "--pack", "engineering"], 0).await;
    assert_eq!(result["_meta"]["status"], "completed");
    assert_eq!(cloud.chat_request_count(), 2, "max_per_run: 2");
    let events = fx.runlog(&result);
    let steps: Vec<&Value> = of_kind(&events, "cloud_fallback")
        .iter()
        .map(|e| &e["step"])
        .collect();
    assert_eq!(steps, [&json!(0), &json!(1)]);
    let reprompts = of_kind(&events, "corrective_reprompt");
    assert_eq!(
        reprompts.len(),
        1,
        "the third prose answer is corrected locally"
    );
    assert_eq!(reprompts[0]["step"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_invalid_arguments_twice_fall_back_and_a_server_error_never_does() {
    let fx = Fixture::new(vec![
        Turn::tool_call("write_file", json!({"pth": "a.txt"})),
        Turn::tool_call("write_file", json!({"file": "a.txt"})),
        // (step 2 goes to the cloud)
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ])
    .await;
    let cloud = with_cloud(
        &fx,
        vec![Turn::tool_call(
            "write_file",
            json!({"path": "a.txt", "content": "A"}),
        )],
    )
    .await;
    let (result, _) = run_json(&fx, &["write a.txt", "--pack", "engineering"], 0).await;
    let events = fx.runlog(&result);
    let fallbacks = of_kind(&events, "cloud_fallback");
    assert_eq!(fallbacks.len(), 1, "{fallbacks:?}");
    assert_eq!(fallbacks[0]["payload"]["reason"], "malformed_args");
    assert_eq!(fallbacks[0]["step"], 2);
    assert_eq!(cloud.chat_request_count(), 1);

    // A local server failing with 500 is an llm_error, never a reason to ask the cloud.
    let fx = Fixture::new(vec![
        Turn {
            status: Some(500),
            ..Turn::default()
        },
        Turn {
            status: Some(500),
            ..Turn::default()
        },
    ])
    .await;
    let cloud = with_cloud(&fx, vec![Turn::tool_call("list_files", json!({}))]).await;
    let (result, _) = run_json(&fx, &["write a.txt", "--pack", "engineering"], 3).await;
    assert_eq!(result["_meta"]["status"], "llm_error");
    assert_eq!(cloud.chat_request_count(), 0);
    assert!(of_kind(&fx.runlog(&result), "cloud_fallback").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_14_doctor_says_once_what_to_do_when_ollama_is_not_installed() {
    let fx = Fixture::new(vec![]).await;
    std::fs::write(
        &fx.config,
        format!(
            "models:\n  local:\n    base_url: http://localhost:{}\n    model: qwen2.5:7b\n    backend: ollama\ndefault_model_key: local\nrouting_model_key: local\n",
            free_port()
        ),
    )
    .unwrap();
    let empty = tempfile::tempdir().unwrap();
    let run = fx
        .fabric_with(&["doctor"], &[("PATH", empty.path().to_str().unwrap())])
        .await;
    assert_ne!(run.code(), 0, "{}", run.stdout);
    let line = run
        .stdout
        .lines()
        .find(|l| l.contains("model `local` server"))
        .unwrap_or_default();
    assert!(
        line.starts_with("[FAIL]")
            && line.contains("Ollama is not installed")
            && line.contains("https://ollama.com/download"),
        "{line}"
    );
    assert_eq!(
        line.matches("ollama serve").count(),
        0,
        "no advice to start what is not there: {line}"
    );
}
