use super::*;
use serde_json::json;

fn read(text: &str) -> ReadHooks {
    HooksConfig::from_claude_settings(text).unwrap_or_else(|e| panic!("{e}"))
}

fn commands(hooks: &HooksConfig, event: HookEvent, target: Option<&str>) -> Vec<String> {
    hooks
        .applicable(event, target)
        .iter()
        .map(|a| a.hook.command.clone())
        .collect()
}

/// The quickstart of Claude Code's hooks guide (docs.claude.com/en/docs/claude-code/hooks-guide):
/// log every Bash command.
const GUIDE_LOG_BASH: &str = r#"{
  "hooks": {
    "PreToolUse": [
      {
        "matcher": "Bash",
        "hooks": [
          {
            "type": "command",
            "command": "jq -r '\"\\(.tool_input.command) - \\(.tool_input.description // \"No description\")\"' >> ~/.claude/bash-command-log.txt"
          }
        ]
      }
    ]
  }
}"#;

/// The guide's code formatting hook: prettier on TypeScript files after each edit.
const GUIDE_FORMAT_TS: &str = r#"{
  "hooks": {
    "PostToolUse": [
      {
        "matcher": "Edit|MultiEdit|Write",
        "hooks": [
          {
            "type": "command",
            "command": "jq -r '.tool_input.file_path' | { read file_path; if echo \"$file_path\" | grep -q '\\.ts$'; then npx prettier --write \"$file_path\"; fi; }"
          }
        ]
      }
    ]
  }
}"#;

/// The guide's file protection hook.
const GUIDE_PROTECT_FILES: &str = r#"{
  "hooks": {
    "PreToolUse": [
      {
        "matcher": "Edit|MultiEdit|Write",
        "hooks": [
          {
            "type": "command",
            "command": "python3 -c \"import json, sys; data=json.load(sys.stdin); path=data.get('tool_input',{}).get('file_path',''); sys.exit(2 if any(p in path for p in ['.env', 'package-lock.json', '.git/']) else 0)\""
          }
        ]
      }
    ]
  }
}"#;

/// The reference's shapes: project scripts through `$CLAUDE_PROJECT_DIR`, events without a
/// matcher, MCP tools by pattern, a notification (which the fabric never fires), a `prompt`
/// hook (which it does not run), and a settings file's other keys.
const REFERENCE_SETTINGS: &str = r#"{
  "$schema": "https://json.schemastore.org/claude-code-settings.json",
  "permissions": {
    "allow": ["Bash(npm run lint)", "Bash(npm run test:*)"],
    "deny": ["Read(./.env)"]
  },
  "env": {"CLAUDE_CODE_ENABLE_TELEMETRY": "1"},
  "hooks": {
    "PostToolUse": [
      {
        "matcher": "Write|Edit",
        "hooks": [
          {
            "type": "command",
            "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/check-style.sh"
          }
        ]
      }
    ],
    "PreToolUse": [
      {
        "matcher": "mcp__memory__.*",
        "hooks": [
          {"type": "command", "command": "echo 'Memory operation initiated' >> ~/mcp-operations.log"}
        ]
      },
      {
        "matcher": "mcp__.*__write.*",
        "hooks": [
          {"type": "command", "command": "/home/user/scripts/validate-mcp-write.py"}
        ]
      }
    ],
    "UserPromptSubmit": [
      {
        "hooks": [
          {"type": "command", "command": "/path/to/prompt-validator.py"}
        ]
      }
    ],
    "Stop": [
      {
        "hooks": [
          {"type": "prompt", "prompt": "Evaluate if Claude should stop: $ARGUMENTS", "timeout": 30}
        ]
      }
    ],
    "Notification": [
      {
        "matcher": "",
        "hooks": [
          {"type": "command", "command": "notify-send 'Claude Code' 'Awaiting your input'"}
        ]
      }
    ],
    "SessionStart": [
      {
        "matcher": "startup",
        "hooks": [
          {"type": "command", "command": "echo 'Remember: run the tests'", "timeout": 10}
        ]
      }
    ]
  }
}"#;

#[test]
fn issue_43_claude_code_docs_examples_parse_as_they_are() {
    let log = read(GUIDE_LOG_BASH);
    assert!(log.warnings.is_empty(), "{:?}", log.warnings);
    let bash = commands(&log.config, HookEvent::PreToolUse, Some("shell"));
    assert_eq!(bash.len(), 1);
    assert!(bash[0].starts_with("jq -r '\"\\(.tool_input.command)"));
    assert!(commands(&log.config, HookEvent::PreToolUse, Some("write_file")).is_empty());
    assert_eq!(
        log.config.events[&HookEvent::PreToolUse][0].hooks[0].timeout_s(),
        60
    );

    let format = read(GUIDE_FORMAT_TS);
    assert_eq!(
        commands(&format.config, HookEvent::PostToolUse, Some("write_file")).len(),
        1
    );
    assert!(commands(&format.config, HookEvent::PostToolUse, Some("shell")).is_empty());

    let protect = read(GUIDE_PROTECT_FILES);
    assert_eq!(
        commands(&protect.config, HookEvent::PreToolUse, Some("write_file")).len(),
        1
    );

    let reference = read(REFERENCE_SETTINGS);
    let hooks = &reference.config;
    assert_eq!(
        commands(hooks, HookEvent::PostToolUse, Some("write_file")).len(),
        1
    );
    assert_eq!(
        commands(
            hooks,
            HookEvent::PreToolUse,
            Some("mcp__memory__create_entities")
        ),
        vec!["echo 'Memory operation initiated' >> ~/mcp-operations.log"]
    );
    assert_eq!(
        commands(hooks, HookEvent::PreToolUse, Some("mcp__fs__write_file")),
        vec!["/home/user/scripts/validate-mcp-write.py"]
    );
    assert!(commands(hooks, HookEvent::PreToolUse, Some("shell")).is_empty());
    assert_eq!(commands(hooks, HookEvent::UserPromptSubmit, None).len(), 1);
    assert_eq!(
        commands(hooks, HookEvent::SessionStart, Some("startup")).len(),
        1
    );
    assert!(commands(hooks, HookEvent::SessionStart, Some("resume")).is_empty());
    // Kept, though the fabric never fires it.
    assert_eq!(commands(hooks, HookEvent::Notification, None).len(), 1);
    assert!(!HookEvent::Notification.fires());
    // The prompt hook is skipped, with its key named.
    assert!(!hooks.events.contains_key(&HookEvent::Stop));
    assert_eq!(reference.warnings.len(), 1, "{:?}", reference.warnings);
    assert!(reference.warnings[0].contains("hooks.Stop[0].hooks[0].type"));
    assert!(reference.warnings[0].contains("`prompt`"));
}

#[test]
fn issue_43_the_config_refuses_what_a_project_file_skips() {
    let bad = [
        (
            json!({"PreToolUze": []}),
            "hooks.PreToolUze",
            "unknown hook event",
        ),
        (
            json!({"PreToolUse": [{"matcher": "(", "hooks": [{"type": "command", "command": "x"}]}]}),
            "hooks.PreToolUse[0].matcher",
            "not a valid regular expression",
        ),
        (
            json!({"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": 0}]}]}),
            "hooks.Stop[0].hooks[0].timeout",
            "from 1 to 3600",
        ),
        (
            json!({"Stop": [{"hooks": [{"type": "prompt", "prompt": "p"}]}]}),
            "hooks.Stop[0].hooks[0].type",
            "`prompt` are not supported",
        ),
    ];
    for (value, key, words) in bad {
        let refused = HooksConfig::read(&value, Strictness::Refuse)
            .err()
            .unwrap_or_else(|| panic!("{value} was accepted"))
            .to_string();
        assert!(
            refused.contains(key) && refused.contains(words),
            "{refused}"
        );
        let skipped = HooksConfig::read(&value, Strictness::Skip).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(skipped.warnings.len(), 1, "{value}");
    }
    // Milliseconds written as seconds: kept in a project file, at the longest timeout.
    let ms = json!({"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": 5000}]}]});
    let read = HooksConfig::read(&ms, Strictness::Skip).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        read.config.events[&HookEvent::Stop][0].hooks[0].timeout,
        Some(3600)
    );
}

#[test]
fn issue_43_matchers_are_exact_names_alternatives_patterns_or_all() {
    let m = |pattern: &str, tool: &str| matches(Some(pattern), tool, HookEvent::PreToolUse);
    assert!(m("*", "shell") && m("", "shell"));
    assert!(m("shell", "shell") && !m("shel", "shell"));
    assert!(m("write_file|shell", "shell"));
    assert!(m("Bash", "shell") && m("Write", "write_file") && !m("Bash", "write_file"));
    assert!(m("mcp__github__.*", "mcp__github__create_issue"));
    assert!(!m("mcp__github__.*", "mcp__gitlab__create_issue"));
    assert!(m("^write_", "write_file") && m("Notebook.*|Wri.*", "write_file"));
}

fn exit(code: i32, stdout: &str, stderr: &str) -> HookExit {
    HookExit::Exited {
        code,
        stdout: stdout.into(),
        stderr: stderr.into(),
    }
}

#[test]
fn issue_43_answers_read_as_claude_code_reads_them() {
    let pre = HookEvent::PreToolUse;
    let blocked = HookAnswer::read(pre, &exit(2, "", "no rm -rf\n"));
    assert_eq!(
        (blocked.outcome, blocked.message.as_deref()),
        (HookOutcome::Blocked, Some("no rm -rf"))
    );
    let failed = HookAnswer::read(pre, &exit(1, "", "oops"));
    assert_eq!(failed.outcome, HookOutcome::Error);
    assert!(failed.message.is_none());
    let deny = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "deny", "permissionDecisionReason": "not on main"}});
    let denied = HookAnswer::read(pre, &exit(0, &deny.to_string(), ""));
    assert_eq!(
        (denied.outcome, denied.message.as_deref()),
        (HookOutcome::Denied, Some("not on main"))
    );
    let rewrite = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "updatedInput": {"path": "b.txt", "content": "x"}}});
    let rewritten = HookAnswer::read(pre, &exit(0, &rewrite.to_string(), ""));
    assert_eq!(rewritten.outcome, HookOutcome::Rewritten);
    assert_eq!(
        rewritten.updated_input,
        Some(json!({"path": "b.txt", "content": "x"}))
    );
    let garbage = HookAnswer::read(pre, &exit(0, "{not json", ""));
    assert_eq!(garbage.outcome, HookOutcome::InvalidOutput);
    let odd = json!({"hookSpecificOutput": {"permissionDecision": "maybe"}});
    assert_eq!(
        HookAnswer::read(pre, &exit(0, &odd.to_string(), "")).outcome,
        HookOutcome::InvalidOutput
    );
    assert_eq!(
        HookAnswer::read(pre, &HookExit::TimedOut(1)).outcome,
        HookOutcome::Timeout
    );
    // Plain text is context where Claude Code takes it as such, ignored elsewhere.
    let said = HookAnswer::read(HookEvent::SessionStart, &exit(0, "use tabs\n", ""));
    assert_eq!(said.message.as_deref(), Some("use tabs"));
    assert!(
        HookAnswer::read(HookEvent::PostToolUse, &exit(0, "formatted", ""))
            .message
            .is_none()
    );
    let stop = json!({"decision": "block", "reason": "the tests fail"});
    let kept = HookAnswer::read(HookEvent::Stop, &exit(0, &stop.to_string(), ""));
    assert_eq!(
        (kept.outcome, kept.message.as_deref()),
        (HookOutcome::Blocked, Some("the tests fail"))
    );
    // SessionEnd cannot block: exit 2 is an error there.
    assert_eq!(
        HookAnswer::read(HookEvent::SessionEnd, &exit(2, "", "x")).outcome,
        HookOutcome::Error
    );
}

fn run(outcome: HookOutcome, message: Option<&str>, input: Option<Value>) -> HookRun {
    HookRun {
        event: "PreToolUse".into(),
        source: "config".into(),
        matcher: None,
        command: "c".into(),
        tool: None,
        call_id: None,
        duration_ms: 1,
        exit_code: Some(0),
        outcome,
        message: message.map(str::to_owned),
        updated_input: input,
        detail: None,
        stop_reason: None,
        system_message: None,
    }
}

#[test]
fn issue_43_continue_false_stops_over_any_decision_and_system_message_is_the_users() {
    // `continue: false` wins over `decision: block` (a Stop hook's, which would keep the run
    // going) and over a PreToolUse decision; `stopReason` is the user's, not the model's.
    let stop = json!({"continue": false, "stopReason": "the build is red",
        "decision": "block", "reason": "keep going"});
    let stopped = HookAnswer::read(HookEvent::Stop, &exit(0, &stop.to_string(), ""));
    assert_eq!(stopped.outcome, HookOutcome::Stopped);
    assert_eq!(stopped.stop_reason.as_deref(), Some("the build is red"));
    assert!(stopped.message.is_none(), "nothing for the model");
    let pre = json!({"continue": false, "hookSpecificOutput": {"permissionDecision": "allow"}});
    let pre = HookAnswer::read(HookEvent::PreToolUse, &exit(0, &pre.to_string(), ""));
    assert_eq!((pre.outcome, pre.stop_reason), (HookOutcome::Stopped, None));
    // `continue: true` is the default; anything but a boolean does not fit.
    let goes_on = json!({"continue": true, "systemMessage": "disk 91% full",
        "hookSpecificOutput": {"additionalContext": "ctx"}});
    let read = HookAnswer::read(HookEvent::SessionStart, &exit(0, &goes_on.to_string(), ""));
    assert_eq!(read.outcome, HookOutcome::Ok);
    assert_eq!(read.message.as_deref(), Some("ctx"));
    assert_eq!(read.system_message.as_deref(), Some("disk 91% full"));
    let odd = json!({"continue": "no"});
    assert_eq!(
        HookAnswer::read(HookEvent::Stop, &exit(0, &odd.to_string(), "")).outcome,
        HookOutcome::InvalidOutput
    );
    // One hook's stop stops the event, whatever the others decided.
    let verdict = HookVerdict::of(&[
        run(HookOutcome::Allowed, None, None),
        run(HookOutcome::Stopped, None, None),
        run(HookOutcome::Blocked, Some("no"), None),
    ]);
    assert!(verdict.stopped);
    assert!(!HookVerdict::of(&[run(HookOutcome::Ok, Some("c"), None)]).stopped);
}

#[test]
fn issue_43_deny_wins_over_ask_over_allow_and_contexts_add_up() {
    let verdict = HookVerdict::of(&[
        run(HookOutcome::Allowed, Some("fine"), None),
        run(HookOutcome::Denied, Some("no"), None),
        run(HookOutcome::Asked, Some("ask"), None),
        run(HookOutcome::Timeout, None, None),
    ]);
    assert_eq!(
        verdict.permission,
        Some((Permission::Deny, Some("no".into())))
    );
    let verdict = HookVerdict::of(&[
        run(HookOutcome::Allowed, None, None),
        run(HookOutcome::Asked, Some("ask"), None),
        run(HookOutcome::Rewritten, None, Some(json!({"a": 1}))),
        run(HookOutcome::Ok, Some("one"), None),
        run(HookOutcome::Ok, Some("two"), None),
    ]);
    assert_eq!(
        verdict.permission,
        Some((Permission::Ask, Some("ask".into())))
    );
    assert_eq!(verdict.updated_input, Some(json!({"a": 1})));
    assert_eq!(verdict.context_text().as_deref(), Some("one\ntwo"));
    assert!(verdict.blocked.is_none());
}

#[test]
fn issue_43_the_stdin_holds_claude_codes_fields() {
    let mut input = HookInput::new(HookEvent::PreToolUse, "r1", "/w");
    input.tool_name = Some("shell".into());
    input.tool_input = Some(json!({"cmd": ["ls"]}));
    input.tool_use_id = Some("c1".into());
    let json = serde_json::to_value(&input).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        json,
        json!({"session_id": "r1", "transcript_path": "", "cwd": "/w",
               "hook_event_name": "PreToolUse", "permission_mode": "default",
               "tool_name": "shell", "tool_input": {"cmd": ["ls"]}, "tool_use_id": "c1"})
    );
    assert_eq!(input.target(), Some("shell"));
}
