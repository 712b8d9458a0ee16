//! OpenTelemetry traces end to end (issue #13): the `fabric` binary exports the spans of a
//! task force whose first member delegates to a sub-agent, over OTLP/HTTP protobuf, to a
//! real receiver built on the official protobuf definitions (`tests/otlp/receiver.py`,
//! PyPI `opentelemetry-proto`); the span tree is checked attribute by attribute. A
//! `traceparent` on `POST /run` becomes the run's parent, and an unreachable collector
//! changes nothing about a run.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};

use super::delegation::write_lead;
use super::fixture::Fixture;
use super::serve_fixture::{Options, Served};

/// The receiver, running; killed when dropped.
struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Receiver {
    /// Starts the receiver with the test deps' Python, or `None` after saying why.
    fn start() -> Option<Self> {
        let python = fabric_test_support::otlp_deps()?;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("spans.jsonl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/receiver.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the OTLP receiver starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the receiver prints its port");
        Some(Self {
            child,
            port,
            out,
            _dir: dir,
        })
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Everything received so far, one object a span or a metric.
    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The spans received so far.
    fn spans(&self) -> Vec<Value> {
        let mut all = self.received();
        all.retain(|r| r.get("span_id").is_some());
        all
    }

    /// The last export of metric `name`.
    fn metric(&self, name: &str) -> Option<Value> {
        self.received()
            .into_iter()
            .rev()
            .find(|r| r["metric"] == name)
    }
}

fn telemetry_yaml(endpoint: &str, capture: bool) -> String {
    format!(
        "telemetry:\n  enabled: true\n  otlp_endpoint: {endpoint}\n  capture_content: {capture}\n"
    )
}

/// The spans named `name`.
fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn one<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one `{name}` span: {spans:#?}");
    found[0]
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

#[cfg_attr(
    fabric_no_otlp,
    ignore = "needs the OTLP receiver's packages: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_13_a_task_force_with_a_sub_agent_is_one_trace_of_genai_spans() {
    let Some(receiver) = Receiver::start() else {
        return;
    };
    let fx = Fixture::new(vec![
        // The lead delegates; the child writes and finishes; the lead finishes.
        Turn::tool_call("agent__engineering", json!({"task": "Create hello.txt"})),
        Turn::tool_call(
            "write_file",
            json!({"path": "hello.txt", "content": "Hello"}),
        ),
        Turn::tool_call("finish_task", json!({"summary": "child wrote hello.txt"})),
        Turn::tool_call("finish_task", json!({"summary": "delegated"})),
        // The second member (engineering finishes only after using a tool).
        Turn::tool_call("list_files", json!({"path": "."})),
        Turn::tool_call("finish_task", json!({"summary": "checked"})),
    ])
    .await;
    write_lead(&fx);
    fx.append_config(&telemetry_yaml(&receiver.endpoint(), false));
    let run = fx
        .fabric_with(
            &["run", "make hello", "--pack", "lead,engineering", "--json"],
            &[
                ("OTEL_SERVICE_NAME", "fabric-under-test"),
                ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
            ],
        )
        .await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let run_id = run.json()["_meta"]["run_id"].as_str().unwrap().to_owned();
    // The exporter flushes before the command exits.
    let spans = receiver.spans();

    // One trace; every span of the fabric's scope and resource.
    let trace = spans[0]["trace_id"].as_str().unwrap();
    assert!(spans.iter().all(|s| s["trace_id"] == trace), "{spans:#?}");
    for s in &spans {
        assert_eq!(s["scope"], "agent-fabric");
        assert_eq!(s["resource"]["service.name"], "fabric-under-test");
        assert_eq!(s["resource"]["deployment.environment"], "test");
        assert!(s["end"].as_u64() >= s["start"].as_u64(), "{s}");
    }
    let by_id: HashMap<&str, &Value> = spans
        .iter()
        .map(|s| (s["span_id"].as_str().unwrap(), s))
        .collect();
    let parent_of = |s: &Value| by_id.get(s["parent"].as_str().unwrap()).copied();

    // The run: the trace's root.
    let root = one(&spans, "invoke_agent lead,engineering");
    assert_eq!(root["parent"], "");
    assert_eq!(attr(root, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(attr(root, "gen_ai.agent.name"), "lead,engineering");
    assert_eq!(attr(root, "gen_ai.conversation.id"), run_id.as_str());
    assert_eq!(attr(root, "fabric.status"), "completed");
    assert_eq!(attr(root, "fabric.depth"), 0);
    assert!(attr(root, "gen_ai.usage.input_tokens").as_i64() > Some(0));
    assert_eq!(root["status"]["code"], 0);
    // Routing, once for the run and once for the sub-agent's own run.
    let routes = named(&spans, "fabric.route");
    assert_eq!(routes.len(), 2);
    let route = routes
        .iter()
        .find(|s| s["parent"] == root["span_id"])
        .expect("the run's routing under it");
    assert_eq!(attr(route, "fabric.routing_method"), "explicit");

    // The members under the run.
    let lead = one(&spans, "invoke_agent lead");
    assert_eq!(lead["parent"], root["span_id"]);
    assert_eq!(attr(lead, "gen_ai.agent.name"), "lead");
    let members = named(&spans, "invoke_agent engineering");
    let member = members
        .iter()
        .find(|s| s["parent"] == root["span_id"])
        .expect("the engineering member under the run");

    // The sub-agent: its own run, under the lead's `execute_tool agent__engineering`.
    let delegate = one(&spans, "execute_tool agent__engineering");
    assert_eq!(delegate["parent"], lead["span_id"]);
    assert_eq!(attr(delegate, "gen_ai.tool.name"), "agent__engineering");
    assert_eq!(attr(delegate, "gen_ai.tool.type"), "function");
    assert!(
        !attr(delegate, "gen_ai.tool.call.id")
            .as_str()
            .unwrap()
            .is_empty()
    );
    let child = members
        .iter()
        .find(|s| s["parent"] == delegate["span_id"])
        .expect("the sub-agent's run under the tool call");
    assert_eq!(attr(child, "fabric.parent_run_id"), run_id.as_str());
    assert_eq!(attr(child, "fabric.depth"), 1);
    assert_ne!(attr(child, "gen_ai.conversation.id"), run_id.as_str());
    let write = one(&spans, "execute_tool write_file");
    assert_eq!(write["parent"], child["span_id"]);

    // Model calls: six, each a client span under the agent that made it.
    let chats = named(&spans, "chat qwen2.5:7b");
    assert_eq!(chats.len(), 6, "{spans:#?}");
    let mut under: HashMap<String, usize> = HashMap::new();
    for chat in &chats {
        assert_eq!(chat["kind"], 3, "SPAN_KIND_CLIENT");
        assert_eq!(attr(chat, "gen_ai.operation.name"), "chat");
        assert_eq!(attr(chat, "gen_ai.request.model"), "qwen2.5:7b");
        assert_eq!(attr(chat, "gen_ai.provider.name"), "openai");
        assert!(
            attr(chat, "gen_ai.usage.input_tokens").as_i64() > Some(0),
            "{chat}"
        );
        assert!(
            attr(chat, "gen_ai.usage.output_tokens").as_i64().is_some(),
            "{chat}"
        );
        assert!(
            attr(chat, "gen_ai.response.finish_reasons").is_array(),
            "{chat}"
        );
        let parent = parent_of(chat).expect("a chat has its agent as parent");
        *under
            .entry(parent["span_id"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    // Each model request carried its chat span as its trace context.
    let mut sent: Vec<String> = fx.server.traceparents();
    let mut expected: Vec<String> = chats
        .iter()
        .map(|c| format!("00-{trace}-{}-01", c["span_id"].as_str().unwrap()))
        .collect();
    // A first call's look at llama.cpp's `/props` (constrained_decoding: auto) goes out
    // under the same chat span.
    sent.sort();
    sent.dedup();
    expected.sort();
    assert_eq!(sent, expected, "the traceparent of every model request");
    assert_eq!(under[lead["span_id"].as_str().unwrap()], 2);
    assert_eq!(under[child["span_id"].as_str().unwrap()], 2);
    assert_eq!(under[member["span_id"].as_str().unwrap()], 2);
    // Nothing of the content without `capture_content`.
    for s in &spans {
        for key in [
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        ] {
            assert!(attr(s, key).is_null(), "{key} in {s}");
        }
    }
    // Every span but the root has its parent in the trace.
    for s in &spans {
        if s["span_id"] != root["span_id"] {
            assert!(parent_of(s).is_some(), "orphan {s}");
        }
    }

    // The GenAI metrics over OTLP, sent at exit: six chat calls of model key `test`.
    let duration = receiver
        .metric("gen_ai.client.operation.duration")
        .expect("the operation duration metric");
    assert_eq!(duration["kind"], "histogram");
    assert_eq!(duration["unit"], "s");
    assert_eq!(duration["temporality"], 2, "cumulative");
    let point = &duration["points"][0];
    assert_eq!(point["attributes"]["gen_ai.operation.name"], "chat");
    assert_eq!(point["attributes"]["model_key"], "test");
    assert_eq!(point["count"], 6);
    let buckets: u64 = point["bucket_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(buckets, 6, "{point}");
    assert_eq!(
        point["bucket_counts"].as_array().unwrap().len(),
        point["explicit_bounds"].as_array().unwrap().len() + 1
    );
    let usage = receiver
        .metric("gen_ai.client.token.usage")
        .expect("the token usage metric");
    assert_eq!(usage["unit"], "{token}");
    let input = usage["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["attributes"]["gen_ai.token.type"] == "input")
        .expect("input tokens");
    assert_eq!(input["count"], 6);
    assert_eq!(
        input["sum"].as_f64().unwrap() as i64,
        attr(root, "gen_ai.usage.input_tokens").as_i64().unwrap()
            + attr(child, "gen_ai.usage.input_tokens").as_i64().unwrap(),
        "the run's and the sub-agent's input tokens"
    );
    let runs = receiver.metric("fabric.runs").expect("runs by status");
    assert_eq!(runs["kind"], "sum");
    assert_eq!(runs["monotonic"], true);
    assert_eq!(runs["resource"]["service.name"], "fabric-under-test");
    let ended: i64 = runs["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p["value"]
                .as_str()
                .map_or_else(|| p["value"].as_i64().unwrap(), |v| v.parse().unwrap())
        })
        .sum();
    assert_eq!(ended, 2, "the run and its sub-agent: {runs}");
}

#[cfg_attr(
    fabric_no_otlp,
    ignore = "needs the OTLP receiver's packages: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_13_traceparent_on_post_run_becomes_the_run_s_parent_and_content_is_opt_in() {
    let Some(receiver) = Receiver::start() else {
        return;
    };
    let turns = vec![
        Turn::tool_call(
            "write_file",
            json!({"path": "a.txt", "content": "secret-ish"}),
        ),
        Turn::tool_call("write_file", json!({"path": "../x.txt", "content": "x"})),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ];
    let yaml: &'static str = Box::leak(telemetry_yaml(&receiver.endpoint(), true).into_boxed_str());
    let served = Served::with(
        Scenario::new(turns),
        Options {
            config: yaml,
            ..Options::default()
        },
    )
    .await;
    let response = served
        .post("/run")
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .json(&json!({"prompt": "write a", "pack": "engineering"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    // The server's exporter sends within its linger time.
    let mut spans = Vec::new();
    for _ in 0..50 {
        spans = receiver.spans();
        if spans
            .iter()
            .any(|s| s["name"] == "invoke_agent engineering")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let root = one(&spans, "invoke_agent engineering");
    assert_eq!(root["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(root["parent"], "00f067aa0ba902b7");
    assert_eq!(root["resource"]["service.name"], "agent-fabric");
    assert!(
        spans
            .iter()
            .all(|s| s["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736")
    );
    // With capture_content: the prompt, the answers, the arguments and results.
    assert!(
        attr(root, "gen_ai.input.messages")
            .as_str()
            .unwrap()
            .contains("write a")
    );
    let writes = named(&spans, "execute_tool write_file");
    assert_eq!(writes.len(), 2);
    let ok = writes.iter().find(|s| s["status"]["code"] == 0).unwrap();
    assert!(
        attr(ok, "gen_ai.tool.call.arguments")
            .as_str()
            .unwrap()
            .contains("secret-ish")
    );
    assert!(attr(ok, "gen_ai.tool.call.result").is_string());
    // The refused write: an error status with the model's message and the error type.
    let refused = writes.iter().find(|s| s["status"]["code"] == 2).unwrap();
    assert_eq!(attr(refused, "error.type"), "permission");
    assert!(!refused["status"]["message"].as_str().unwrap().is_empty());
    let chat = named(&spans, "chat qwen2.5:7b")[0];
    assert!(attr(chat, "gen_ai.output.messages").is_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_13_an_unreachable_collector_changes_nothing_about_a_run() {
    // A port nothing listens on: every export fails at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let fx = Fixture::new(vec![
        Turn::tool_call("write_file", json!({"path": "a.txt", "content": "a"})),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ])
    .await;
    fx.append_config(&telemetry_yaml(&format!("http://127.0.0.1:{port}"), false));
    let run = fx
        .fabric(&["run", "write a", "--pack", "engineering", "--json"])
        .await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.json()["_meta"]["status"], "completed");
    // Reported once per signal, naming the collector, then the spans' total at exit.
    for url in ["/v1/traces", "/v1/metrics"] {
        let reports = run.stderr.lines().filter(|l| l.contains(url)).count();
        assert_eq!(reports, 1, "{url} reported once: {}", run.stderr);
    }
    assert!(run.stderr.contains("spans lost"), "{}", run.stderr);
}

#[cfg_attr(
    fabric_no_otlp,
    ignore = "needs the OTLP receiver's packages: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_13_traceparent_in_mcp_run_task_meta_becomes_the_run_s_parent() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let Some(receiver) = Receiver::start() else {
        return;
    };
    let fx = Fixture::new(vec![
        Turn::tool_call("write_file", json!({"path": "a.txt", "content": "a"})),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ])
    .await;
    fx.append_config(&telemetry_yaml(&receiver.endpoint(), false));
    let mut child = fx
        .command(&["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("fabric mcp starts");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    // The MCP handshake, then run_task with the caller's trace context in `_meta` (SEP-414).
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "trace-test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_task", "arguments": {"prompt": "write a", "specialist": "engineering"}, "_meta": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}),
    ] {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    }
    let answer = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == 2 {
                return message;
            }
        }
        panic!("fabric mcp ended without answering run_task");
    })
    .await
    .expect("run_task answered within 60 s");
    assert!(answer["result"].is_object(), "{answer}");
    // Closing stdin ends the server, which sends its spans before exiting.
    drop(stdin);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait()).await;
    let spans = receiver.spans();
    let root = one(&spans, "invoke_agent engineering");
    assert_eq!(root["trace_id"], "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(root["parent"], "b7ad6b7169203331");
}

#[cfg_attr(
    fabric_no_otlp,
    ignore = "needs the OTLP receiver's packages: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_13_mcp_tool_calls_carry_the_tool_span_as_their_trace_context() {
    let Some(receiver) = Receiver::start() else {
        return;
    };
    let fx = Fixture::new(vec![
        Turn::tool_call("mcp__echo__meta", json!({})),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ])
    .await;
    fx.append_config(&telemetry_yaml(&receiver.endpoint(), false));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/meta_echo.py");
    fx.trust_own_files();
    let dir = fx.workspace_root().join("specialists");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("meta_user.md"),
        format!(
            "---\nname: meta_user\ndescription: Calls the meta echo server.\ntools: [mcp__echo__meta]\nmcp_servers:\n  - name: echo\n    command: python3\n    args: [{}]\n    required: true\n---\nCall the tool.\n",
            script.display()
        ),
    )
    .unwrap();
    let run = fx
        .fabric(&["run", "show meta", "--pack", "meta_user", "--json"])
        .await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let events = fx.runlog(&run.json());
    let result = events
        .iter()
        .find(|e| e["kind"] == "tool_result" && e["payload"]["tool"] == "mcp__echo__meta")
        .expect("the MCP tool answered");
    let text = result["payload"]["result"].to_string();
    let spans = receiver.spans();
    let tool = one(&spans, "execute_tool mcp__echo__meta");
    let expected = format!(
        "00-{}-{}-01",
        tool["trace_id"].as_str().unwrap(),
        tool["span_id"].as_str().unwrap()
    );
    assert!(text.contains(&expected), "{expected} in {text}");
}
