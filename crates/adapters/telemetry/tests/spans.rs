//! The spans of the routing call, an MCP server's start and a child run, with content
//! captured: every attribute, so that a change in how the tracer reads events shows here.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fabric_domain::{EventKind, RunEvent, RunId};
use fabric_telemetry::{Attr, Span, SpanSink, Tracer};
use serde_json::json;

#[derive(Default, Clone)]
struct Collect(Arc<Mutex<Vec<Span>>>);

impl SpanSink for Collect {
    fn emit(&self, span: Span) {
        self.0.lock().unwrap().push(span);
    }
}

fn id(n: u8) -> RunId {
    RunId::parse(&format!("20260101-000000-000-bbbbbbb{n}")).unwrap()
}

/// Each span as `name [attributes] error`, in the order they ended.
fn described(spans: &[Span]) -> Vec<String> {
    spans
        .iter()
        .map(|s| {
            let attrs: Vec<String> = s
                .attributes
                .iter()
                .filter(|(k, _)| k != "gen_ai.conversation.id" && k != "fabric.run_id")
                .map(|(k, v)| match v {
                    Attr::Str(v) => format!("{k}={v}"),
                    Attr::Int(v) => format!("{k}={v}"),
                    Attr::Double(v) => format!("{k}={v}"),
                    Attr::Bool(v) => format!("{k}={v}"),
                    Attr::StrArray(v) => format!("{k}={}", v.join("|")),
                })
                .collect();
            format!(
                "{} {}-{} [{}] {:?}",
                s.name,
                s.start,
                s.end,
                attrs.join(" "),
                s.error
            )
        })
        .collect()
}

#[test]
fn routing_mcp_and_a_child_run_with_content() {
    let spans = Collect::default();
    let tracer = Tracer::new(
        Box::new(spans.clone()),
        true,
        HashMap::from([("router".to_owned(), "ollama".to_owned())]),
    );
    let (parent, child) = (id(1), id(2));
    let ev = fabric_fakes::sample;
    for (run, e) in [
        (
            &parent,
            ev(
                EventKind::RunStart,
                1.0,
                json!({"model_key": "local", "prompt": "do it"}),
            ),
        ),
        (
            &parent,
            ev(
                EventKind::LlmRequest,
                1.0,
                json!({"purpose": "routing", "model_key": "router", "model": "tiny"}),
            ),
        ),
        (
            &parent,
            ev(
                EventKind::LlmResponse,
                1.5,
                json!({"purpose": "routing", "model": "tiny", "content": "eng", "tool_calls": [{"name": "route", "arguments": "{}"}], "latency_ms": 5.0, "error": "not a specialist"}),
            ),
        ),
        (
            &parent,
            ev(
                EventKind::Recruitment,
                1.5,
                json!({"specialist_ids": ["eng"], "routing_method": "keyword_fallback"}),
            ),
        ),
        (
            &parent,
            ev(
                EventKind::MemberStart,
                1.6,
                json!({"specialist_id": "eng", "model_key": "local"}),
            ),
        ),
        (
            &parent,
            ev(
                EventKind::McpServer,
                2.0,
                json!({"server": "gh", "status": "starting", "elapsed_ms": 0}),
            ),
        ),
        (
            &parent,
            ev(
                EventKind::McpServer,
                2.5,
                json!({"server": "gh", "status": "ready", "elapsed_ms": 500, "tools": ["mcp__gh__me"]}),
            ),
        ),
        (
            &parent,
            ev(
                EventKind::McpServer,
                2.6,
                json!({"server": "db", "status": "timeout", "elapsed_ms": 100, "error": "slow"}),
            ),
        ),
        (
            &parent,
            ev(
                EventKind::CloudFallback,
                2.7,
                json!({"cloud_model_key": "cloud"}),
            ),
        ),
        (
            &parent,
            ev(EventKind::LlmRequest, 3.0, json!({"model": "big"})),
        ),
        (
            &parent,
            ev(
                EventKind::LlmResponse,
                3.5,
                json!({"content": null, "tool_calls": [{"call_id": "a", "name": "agent__helper", "arguments": "{}"}], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}, "finish_reason": "tool_calls", "latency_ms": 500.0}),
            ),
        ),
        (
            &parent,
            ev(
                EventKind::ToolCall,
                3.5,
                json!({"tool": "agent__helper", "call_id": "a", "args": {"task": "help"}}),
            ),
        ),
        (
            &child,
            ev(
                EventKind::RunStart,
                3.6,
                json!({"model_key": "local", "prompt": "help", "parent_run_id": parent.as_str(), "depth": 1}),
            ),
        ),
        (
            &child,
            ev(
                EventKind::RunFailed,
                3.7,
                json!({"status": "llm_error", "reason": "down", "specialist_ids": ["helper"]}),
            ),
        ),
        (
            &parent,
            ev(
                EventKind::ToolResult,
                3.8,
                json!({"tool": "agent__helper", "call_id": "a", "result": {"done": false}}),
            ),
        ),
        (
            &parent,
            ev(EventKind::LlmRequest, 4.0, json!({"model": "small"})),
        ),
        // A host's stand-in for a panicked run: no specialists, no usage.
        (
            &parent,
            RunEvent::from_wire(
                0,
                4.5,
                EventKind::RunFailed.as_str(),
                None,
                json!({"run_id": parent.as_str(), "status": "failed", "reason": "the run panicked"}),
            ),
        ),
    ] {
        tracer.observe(run, &e);
    }
    let spans = spans.0.lock().unwrap();
    let got = described(&spans);
    let want = [
        "chat tiny 1-1.5 [gen_ai.operation.name=chat gen_ai.request.model=tiny gen_ai.provider.name=ollama fabric.model_key=router fabric.purpose=routing gen_ai.output.messages=[{\"parts\":[{\"content\":\"eng\",\"type\":\"text\"}],\"role\":\"assistant\",\"tool_calls\":[{\"arguments\":\"{}\",\"name\":\"route\"}]}] error.type=routing_answer_unused] Some(\"not a specialist\")",
        "fabric.route 1-1.5 [fabric.routing_method=keyword_fallback fabric.specialist_ids=eng] None",
        "fabric.mcp.start gh 2-2.5 [fabric.mcp.server=gh fabric.mcp.status=ready] None",
        "fabric.mcp.start db 2.5-2.6 [fabric.mcp.server=db fabric.mcp.status=timeout] Some(\"slow\")",
        "chat big 3-3.5 [gen_ai.operation.name=chat gen_ai.request.model=big fabric.model_key=cloud gen_ai.usage.input_tokens=7 gen_ai.usage.output_tokens=3 gen_ai.response.finish_reasons=tool_calls gen_ai.output.messages=[{\"parts\":[{\"content\":null,\"type\":\"text\"}],\"role\":\"assistant\",\"tool_calls\":[{\"arguments\":\"{}\",\"call_id\":\"a\",\"name\":\"agent__helper\"}]}]] None",
        "invoke_agent helper 3.6-3.7 [gen_ai.operation.name=invoke_agent fabric.depth=1 fabric.parent_run_id=20260101-000000-000-bbbbbbb1 gen_ai.input.messages=[{\"parts\":[{\"content\":\"help\",\"type\":\"text\"}],\"role\":\"user\"}] gen_ai.agent.name=helper gen_ai.usage.input_tokens=0 gen_ai.usage.output_tokens=0 error.type=llm_error fabric.status=llm_error] Some(\"llm_error: down\")",
        "execute_tool agent__helper 3.5-3.8 [gen_ai.operation.name=execute_tool gen_ai.tool.name=agent__helper gen_ai.tool.call.id=a gen_ai.tool.type=function gen_ai.tool.call.arguments={\"task\":\"help\"} gen_ai.tool.call.result={\"done\":false}] None",
        "chat small 4-4.5 [gen_ai.operation.name=chat gen_ai.request.model=small fabric.model_key=local] Some(\"the run ended first\")",
        "invoke_agent eng 1-4.5 [gen_ai.operation.name=invoke_agent fabric.depth=0 gen_ai.input.messages=[{\"parts\":[{\"content\":\"do it\",\"type\":\"text\"}],\"role\":\"user\"}] gen_ai.agent.name=eng error.type=failed fabric.status=failed] Some(\"failed: the run panicked\")",
    ];
    for (i, (got, want)) in got.iter().zip(want).enumerate() {
        assert_eq!(got, want, "span {i}");
    }
    assert_eq!(got.len(), want.len(), "{got:#?}");
    // The child's root hangs under the parent's delegating call, in the parent's trace.
    let call = spans
        .iter()
        .find(|s| s.name == "execute_tool agent__helper")
        .unwrap();
    let child_root = spans
        .iter()
        .find(|s| s.name == "invoke_agent helper")
        .unwrap();
    assert_eq!(child_root.parent, Some(call.span_id));
    assert_eq!(child_root.trace_id, call.trace_id);
}
