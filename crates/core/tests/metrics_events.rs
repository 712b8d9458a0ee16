//! The metrics of the routing call, MCP servers going up and down, a tool's result and a
//! panicked run's stand-in end: the whole exposition, so that a change in how the metrics
//! read events shows here.
#![allow(clippy::unwrap_used)]

use fabric_core::EventSink;
use fabric_core::metrics::{Gauges, Metrics};
use fabric_domain::{EventKind, RunEvent, RunId};
use serde_json::json;

#[test]
fn routing_mcp_tools_and_a_panicked_run() {
    let m = Metrics::new();
    let (a, b) = (
        RunId::parse("20260101-000000-000-cccccccc").unwrap(),
        RunId::parse("20260101-000000-000-dddddddd").unwrap(),
    );
    let ev = fabric_fakes::sample;
    for (run, e) in [
        (
            &a,
            ev(EventKind::RunStart, 1.0, json!({"model_key": "local"})),
        ),
        (
            &a,
            ev(
                EventKind::LlmRequest,
                1.0,
                json!({"purpose": "routing", "model_key": "router", "model": "tiny"}),
            ),
        ),
        (
            &a,
            ev(
                EventKind::LlmResponse,
                1.2,
                json!({"purpose": "routing", "model": "tiny", "content": null, "tool_calls": [], "latency_ms": 200.0, "error": null}),
            ),
        ),
        (
            &a,
            ev(
                EventKind::McpServer,
                1.3,
                json!({"server": "gh", "status": "starting"}),
            ),
        ),
        (
            &a,
            ev(
                EventKind::McpServer,
                1.4,
                json!({"server": "gh", "status": "ready"}),
            ),
        ),
        (
            &a,
            ev(
                EventKind::McpServer,
                1.4,
                json!({"server": "db", "status": "tools_changed"}),
            ),
        ),
        (
            &a,
            ev(
                EventKind::McpServer,
                1.5,
                json!({"server": "db", "status": "stopped"}),
            ),
        ),
        (
            &a,
            ev(EventKind::MemberStart, 2.0, json!({"model_key": "member"})),
        ),
        (&a, ev(EventKind::LlmRequest, 2.0, json!({}))),
        (
            &a,
            ev(
                EventKind::LlmResponse,
                3.0,
                json!({"latency_ms": 1000.0, "usage": {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42}}),
            ),
        ),
        (
            &a,
            ev(
                EventKind::ToolCall,
                3.0,
                json!({"tool": "read_file", "call_id": "c"}),
            ),
        ),
        (
            &a,
            ev(
                EventKind::ToolResult,
                3.3,
                json!({"tool": "read_file", "call_id": "c"}),
            ),
        ),
        (&a, ev(EventKind::LoopDetected, 3.3, json!({}))),
        (&b, ev(EventKind::RunResumed, 5.0, json!({}))),
        (
            &b,
            ev(
                EventKind::McpServer,
                5.0,
                json!({"server": "gh", "status": "ready"}),
            ),
        ),
        (&b, ev(EventKind::LlmRequest, 5.0, json!({}))),
        (
            &b,
            ev(
                EventKind::RunFailed,
                6.0,
                json!({"status": "max_steps_exceeded", "specialist_ids": ["x", "y"]}),
            ),
        ),
        // A host's stand-in for a panicked run: no specialists, no usage.
        (
            &a,
            RunEvent::from_wire(
                0,
                4.0,
                EventKind::RunFailed.as_str(),
                None,
                json!({"run_id": a.as_str(), "status": "failed", "reason": "it panicked"}),
            ),
        ),
    ] {
        m.observe(run, &e);
    }
    let text = m.render(Gauges { runs_in_flight: 0 });
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.ends_with(" 0"))
        .collect();
    let want = [
        "fabric_runs_started_total 2",
        "fabric_runs_total{status=\"failed\",specialist=\"\"} 1",
        "fabric_runs_total{status=\"max_steps_exceeded\",specialist=\"x,y\"} 1",
        "fabric_tool_calls_total{tool=\"read_file\"} 1",
        "fabric_tokens_total{model_key=\"member\",type=\"input\"} 40",
        "fabric_tokens_total{model_key=\"member\",type=\"output\"} 2",
    ];
    for line in want {
        assert!(lines.contains(&line), "missing `{line}` in\n{text}");
    }
    for line in [
        "fabric_mcp_servers_up{server=\"gh\"} 0",
        "fabric_mcp_servers_up{server=\"db\"} 0",
        "fabric_step_duration_seconds_count 2",
        "fabric_step_duration_seconds_sum 3",
        "fabric_tool_duration_seconds_count{tool=\"read_file\"} 1",
        "gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name=\"chat\",model_key=\"router\"} 1",
        "gen_ai_client_operation_duration_seconds_sum{gen_ai_operation_name=\"chat\",model_key=\"router\"} 0.2",
        "gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name=\"chat\",model_key=\"member\"} 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in\n{text}"
        );
    }
}
