use super::*;
use crate::{RunId, RunStatus, Usage};
use serde_json::json;

fn event(kind: EventKind, payload: Value) -> RunEvent {
    RunEvent {
        seq: 0,
        ts: 0.0,
        kind,
        step: None,
        payload,
    }
}

fn id(text: &str) -> RunId {
    RunId::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_payload_is_written_with_its_nulls_and_without_its_absent_fields() {
    let sandbox_off = SecurityEvent {
        event_type: SecurityEventType::SandboxOff,
        tool: None,
        call_id: None,
        attempted: "run_start".into(),
        error_message: "off".into(),
    };
    assert_eq!(sandbox_off.kind(), EventKind::SecurityEvent);
    assert_eq!(
        sandbox_off
            .to_json()
            .unwrap_or_else(|e| panic!("{e}"))
            .to_string(),
        r#"{"attempted":"run_start","error_message":"off","event_type":"sandbox_off","tool":null}"#
    );
}

#[test]
fn the_end_of_a_run_is_complete_exactly_when_it_has_a_result() {
    let mut end = RunEnd {
        run_id: id("r"),
        status: RunStatus::Partial,
        specialist_ids: vec!["a".into()],
        task_force_mode: TaskForceMode::Sequential,
        steps: 2,
        usage: Usage::default(),
        reason: None,
        result: Some(json!({"summary": "s"})),
    };
    assert_eq!(end.kind(), EventKind::RunComplete);
    end.status = RunStatus::BudgetExceeded;
    end.result = None;
    assert_eq!(end.kind(), EventKind::RunFailed);
    let json = end.to_json().unwrap_or_else(|e| panic!("{e}"));
    assert!(json.get("result").is_none());
    let back: RunEnd = event(EventKind::RunFailed, json)
        .payload_as()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, end);
}

#[test]
fn payloads_read_back_as_their_structs_ignoring_fields_they_do_not_know() {
    let start = event(
        EventKind::RunStart,
        json!({"run_id": "r1", "prompt": "p", "model_key": "k", "model": "m", "model_reason": null,
               "max_steps": 3, "network_allowed": false, "workspace": "/w", "sandbox": null,
               "parent_run_id": "r0", "depth": 1, "added_by_a_newer_fabric": true}),
    );
    let read: RunStart = start.payload_as().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read.parent_run_id, Some(id("r0")));
    assert_eq!(read.depth, 1);

    let member = event(
        EventKind::LlmResponse,
        json!({"content": null, "tool_calls": [{"call_id": "c", "name": "t", "arguments": "{}"}],
               "usage": null, "latency_ms": 1.5, "finish_reason": "stop", "pack_index": 2}),
    );
    let read: LlmResponse = member.payload_as().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read.tool_calls[0].call_id.as_deref(), Some("c"));
    assert_eq!(member.pack_index(), Some(2));
    assert!(member.payload_as::<RoutingResponse>().is_err());
}

#[test]
fn a_payload_of_another_kind_or_shape_is_an_error_not_a_panic() {
    let call = event(
        EventKind::ToolCall,
        json!({"tool": "t", "call_id": "c", "args": {}}),
    );
    let wrong_kind = call.payload_as::<ToolResult>();
    assert!(matches!(
        wrong_kind,
        Err(DomainError::InvalidPayload {
            kind: "tool_call",
            ..
        })
    ));
    let broken = event(EventKind::ToolError, json!({"tool": 3}));
    assert!(broken.payload_as::<ToolError>().is_err());
    let not_an_object = event(EventKind::PackStart, json!("text"));
    assert!(not_an_object.payload_as::<PackStart>().is_err());
}

#[test]
fn mcp_notices_carry_only_the_fields_of_their_status() {
    let mut ready = McpServer::new("gh", McpStatus::Ready, 7);
    ready.tools = Some(vec!["mcp__gh__me".into()]);
    ready.skipped = Some(vec![SkippedTool {
        tool: "x".into(),
        reason: "too long".into(),
    }]);
    assert_eq!(
        ready
            .to_json()
            .unwrap_or_else(|e| panic!("{e}"))
            .to_string(),
        r#"{"elapsed_ms":7,"server":"gh","skipped":[{"reason":"too long","tool":"x"}],"status":"ready","tools":["mcp__gh__me"]}"#
    );
}
