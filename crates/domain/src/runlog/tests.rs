use super::*;
use crate::{RunEvent, RunId, RunStatus, Usage};
use serde_json::json;

fn event(kind: EventKind, payload: Value) -> RunEvent {
    RunEvent::from_wire(0, 0.0, kind.as_str(), None, payload)
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
        task_force_mode: TaskForceShape::Sequential,
        steps: 2,
        usage: Usage::default(),
        reason: None,
        result: Some(json!({"summary": "s"})),
        workspace: None,
    };
    assert_eq!(end.kind(), EventKind::RunComplete);
    end.status = RunStatus::BudgetExceeded;
    end.result = None;
    assert_eq!(end.kind(), EventKind::RunFailed);
    let json = end.to_json().unwrap_or_else(|e| panic!("{e}"));
    assert!(json.get("result").is_none());
    let back = event(EventKind::RunFailed, json).payload;
    assert_eq!(back, EventPayload::RunFailed(end));
}

#[test]
fn payloads_read_back_as_their_structs_ignoring_fields_they_do_not_know() {
    let start = event(
        EventKind::RunStart,
        json!({"run_id": "r1", "prompt": "p", "model_key": "k", "model": "m", "model_reason": null,
               "max_steps": 3, "network_allowed": false, "workspace": "/w", "sandbox": null,
               "parent_run_id": "r0", "depth": 1, "added_by_a_newer_fabric": true}),
    );
    let EventPayload::RunStart(read) = start.payload else {
        panic!("{start:?}")
    };
    assert_eq!(read.parent_run_id, Some(id("r0")));
    assert_eq!(read.depth, 1);

    let member = event(
        EventKind::LlmResponse,
        json!({"content": null, "tool_calls": [{"call_id": "c", "name": "t", "arguments": "{}"}],
               "usage": null, "latency_ms": 1.5, "finish_reason": "stop", "pack_index": 2}),
    );
    assert_eq!(member.member, Some(2));
    let EventPayload::LlmResponse(read) = member.payload else {
        panic!("{member:?}")
    };
    assert_eq!(read.tool_calls[0].call_id.as_deref(), Some("c"));
}

#[test]
fn a_payload_that_does_not_fit_is_kept_unreadable_not_an_error() {
    let line =
        r#"{"seq":4,"ts":1.0,"kind":"tool_error","step":2,"payload":{"pack_index":1,"tool":3}}"#;
    let broken: RunEvent = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(broken.kind(), EventKind::ToolError);
    assert_eq!(broken.member, Some(1));
    let EventPayload::Unreadable { kind, error, .. } = &broken.payload else {
        panic!("{broken:?}")
    };
    assert_eq!(*kind, EventKind::ToolError);
    assert!(error.contains("as ToolError: invalid type"), "{error}");
    // Written back as it was read.
    assert_eq!(serde_json::to_string(&broken).unwrap_or_default(), line);
    let not_an_object = event(EventKind::MemberStart, json!("text"));
    assert!(matches!(
        not_an_object.payload,
        EventPayload::Unreadable {
            kind: EventKind::MemberStart,
            ..
        }
    ));
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

#[test]
fn issue_45_a_shared_ready_notice_round_trips_and_old_ones_read_without_it() {
    let mut ready = McpServer::new("gh", McpStatus::Ready, 7);
    ready.warm = Some(true);
    ready.shared = Some(3);
    let json = ready.to_json().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json["shared"], 3);
    let back: McpServer = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, ready);
    let old: McpServer =
        serde_json::from_str(r#"{"elapsed_ms":7,"server":"gh","status":"ready","warm":true}"#)
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(old.shared, None);
}

/// Lines of the kinds the golden runlog has no example of, as the engine writes them (keys
/// sorted, optional fields as their structs write them).
const OTHER_KINDS: &str = r#"{"seq":0,"ts":1.0,"kind":"mcp_server","step":null,"payload":{"awaited":true,"elapsed_ms":0,"required":false,"server":"gh","status":"starting","transport":"stdio"}}
{"seq":1,"ts":1.0,"kind":"cloud_fallback","step":1,"payload":{"cloud_model":"big","cloud_model_key":"cloud","local_model":"small","pack_index":1,"reason":"no_tool_calls"}}
{"seq":2,"ts":1.0,"kind":"tool_call_repaired","step":1,"payload":{"call_ids":["repaired_1_0"],"format":"hermes","tools":["shell"]}}
{"seq":3,"ts":1.0,"kind":"context_compacted","step":2,"payload":{"cut_results":1,"dropped_messages":4,"mode":"summarize","room":3000,"shortened_results":2,"summary":"did things","summary_usage":{"completion_tokens":5,"prompt_tokens":50,"total_tokens":55},"tokens_after":900,"tokens_before":4000,"window":4096}}
{"seq":4,"ts":1.0,"kind":"critic_review","step":3,"payload":{"approved":false,"critic":"reviewer","critic_run_id":"r2","files":["a.rs"],"findings":[{"file":"a.rs","reason":"no test","severity":"error"},{"reason":"style","severity":"info"}],"max_rounds":2,"round":1,"staged_dir":"/ws/r/staged"}}
{"seq":5,"ts":1.0,"kind":"critic_review","step":5,"payload":{"applied":["a.rs"],"approved":true,"critic":"reviewer","critic_reason":"ok","critic_status":"completed","files":["a.rs",".env"],"findings":[],"max_rounds":2,"refused":[".env"],"round":2,"staged_dir":"/ws/r/staged"}}
{"seq":6,"ts":1.0,"kind":"repair_round","step":3,"payload":{"max_rounds":2,"model_key":"local","round":2}}
{"seq":7,"ts":1.0,"kind":"loop_detected","step":4,"payload":{"action":"nudged","args":{"cmd":"ls"},"call_id":"c4","message":"same call","repeats":3,"tool":"shell"}}
{"seq":8,"ts":1.0,"kind":"run_resumed","step":null,"payload":{"last_event_ts":1700000000.5,"previous_events":12,"reaped_processes":[41],"replayed_steps":3,"resumption":1,"run_id":"r"}}
{"seq":9,"ts":1.0,"kind":"llm_response","step":2,"payload":{"constrained":true,"content":"x","finish_reason":"length","full_content":"xyz","latency_ms":12.5,"prompt_cache":{"cached_tokens":10,"evaluated_tokens":5},"queued_ms":3,"tool_calls":[{"arguments":"{}","call_id":"c","full_arguments":"{ }","name":"t"}],"usage":null}}
{"seq":10,"ts":1.0,"kind":"run_failed","step":null,"payload":{"reason":"the run panicked","run_id":"r","status":"failed"}}
{"seq":11,"ts":1.0,"kind":"from_the_future","step":null,"payload":{"anything":[1,2]}}
{"seq":12,"ts":1.0,"kind":"workspace","step":null,"payload":{"base":"65ed7bf77d70c6daedef051a5d4c48660fa19401","branch":"fabric/r","dir":"/w/worktrees/r","origin":"project","repo":"/home/u/repo"}}
{"seq":13,"ts":1.0,"kind":"workspace","step":null,"payload":{"base":"65ed7bf77d70c6daedef051a5d4c48660fa19401","branch":"fabric/r","dir":"/w/runs/r/workspace","git_dir":"/w/runs/r/history","origin":"scratch","remote":"/srv/ws.git","restored_to":"fad5dbe49f3aa4d54cada359acdf43828c2be9e6"}}
{"seq":14,"ts":1.0,"kind":"checkpoint","step":0,"payload":{"call_id":"c1","commit":"fad5dbe49f3aa4d54cada359acdf43828c2be9e6","pushed":true,"tool":"write_file"}}
{"seq":15,"ts":1.0,"kind":"checkpoint","step":1,"payload":{"call_id":"c2","commit":null,"ignored":["target/"],"tool":"shell"}}
{"seq":16,"ts":1.0,"kind":"mcp_message","step":2,"payload":{"level":"info","logger":"files","message":"indexed 3 files","server":"helper","type":"log"}}
{"seq":17,"ts":1.0,"kind":"mcp_message","step":2,"payload":{"message":"half way","progress":1.0,"server":"helper","tool":"mcp__helper__index","total":2.0,"type":"progress"}}
{"seq":18,"ts":1.0,"kind":"mcp_request","step":2,"payload":{"method":"sampling/createMessage","model":"qwen3:8b","model_key":"local","outcome":"answered","server":"helper","usage":{"completion_tokens":4,"prompt_tokens":20,"total_tokens":24}}}
{"seq":19,"ts":1.0,"kind":"mcp_request","step":2,"payload":{"method":"elicitation/create","outcome":"declined","reason":"no one to ask","server":"helper"}}
{"seq":20,"ts":1.0,"kind":"run_complete","step":null,"payload":{"reason":null,"result":{"summary":"s"},"run_id":"r","specialist_ids":["engineering"],"status":"completed","steps":2,"task_force_mode":"single","usage":{"completion_tokens":1,"prompt_tokens":2,"total_tokens":3},"workspace":{"added":1,"base":"65ed7bf77d70c6daedef051a5d4c48660fa19401","branch":"fabric/r","files":["hello.txt"],"head":"fad5dbe49f3aa4d54cada359acdf43828c2be9e6","removed":0}}}
{"seq":21,"ts":1.0,"kind":"input_required","step":0,"payload":{"call_id":"c1","choices":["SQLite","PostgreSQL"],"expires_at":2.0,"input":"question","question":"Which database?"}}
{"seq":22,"ts":1.0,"kind":"input_required","step":0,"payload":{"arguments":{"cmd":["git","push"]},"call_id":"c2","input":"approval","question":"May `shell` run?","tool":"shell"}}
{"seq":23,"ts":1.0,"kind":"input_answered","step":0,"payload":{"answer":"not on main","by":"http","call_id":"c2","decision":"deny"}}
{"seq":24,"ts":1.0,"kind":"user_message","step":1,"payload":{"by":"cli","text":"also check the tests"}}
{"seq":25,"ts":1.0,"kind":"hook_run","step":1,"payload":{"call_id":"c3","command":"./guard.sh","duration_ms":12,"event":"PreToolUse","exit_code":0,"matcher":"Write|Edit","message":"write to b.txt instead","outcome":"rewritten","source":"config","tool":"write_file","updated_input":{"content":"x","path":"b.txt"}}}
{"seq":26,"ts":1.0,"kind":"hook_run","step":2,"payload":{"command":"sleep 100","detail":"killed after 1 s","duration_ms":1003,"event":"Stop","outcome":"timeout","source":"project"}}
{"seq":27,"ts":1.0,"kind":"hook_run","step":null,"payload":{"command":"./gate.sh","duration_ms":4,"event":"SessionStart","exit_code":0,"matcher":"startup","outcome":"stopped","source":"config","stop_reason":"the build is red","system_message":"disk 91% full"}}"#;

const GOLDEN: &str = include_str!("../../../core/tests/golden/runlog.jsonl");

#[test]
fn every_line_decodes_to_its_kind_and_encodes_back_byte_for_byte() {
    let mut seen = std::collections::BTreeSet::new();
    for line in GOLDEN.lines().chain(OTHER_KINDS.lines()) {
        let event: RunEvent = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            !matches!(event.payload, EventPayload::Unreadable { .. }),
            "{event:?}"
        );
        seen.insert(event.kind().as_str());
        // Typed, then written back from the struct: the very line (a newer kind's too).
        assert_eq!(
            serde_json::to_string(&event).unwrap_or_else(|e| panic!("{e}")),
            line
        );
    }
    for kind in EventKind::ALL {
        assert!(
            seen.contains(kind.as_str()),
            "no example of {}",
            kind.as_str()
        );
    }
}

#[test]
fn the_routing_call_and_a_panicked_run_get_their_own_variants() {
    let lines: Vec<RunEvent> = GOLDEN
        .lines()
        .chain(OTHER_KINDS.lines())
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let typed: Vec<EventPayload> = lines.into_iter().map(|e| e.payload).collect();
    for wanted in [
        |p: &EventPayload| matches!(p, EventPayload::RoutingRequest(_)),
        |p: &EventPayload| matches!(p, EventPayload::RoutingResponse(_)),
        |p: &EventPayload| matches!(p, EventPayload::LlmRequest(_)),
        |p: &EventPayload| matches!(p, EventPayload::RunAborted(_)),
        |p: &EventPayload| matches!(p, EventPayload::RunFailed(_)),
        |p: &EventPayload| matches!(p, EventPayload::Unknown { .. }),
    ] {
        assert!(typed.iter().any(wanted));
    }
    let broken = event(EventKind::RunFailed, json!({"status": "failed"}));
    assert!(matches!(
        &broken.payload,
        EventPayload::Unreadable { error, .. } if error.contains("as RunFailed:") && error.contains("; as RunAborted:")
    ));
    assert_eq!(broken.terminal_status(), Some(RunStatus::Failed));
}
