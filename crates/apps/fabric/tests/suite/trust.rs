//! Trust before a repository's files run anything (issue #43, ADR-116): a project
//! specialist's MCP servers do not start until `fabric trust` (or yes at the terminal's
//! question), run once trusted, and stop again when what they run changes; `--list` and
//! `--revoke`; hostile text from a repository reaches the terminal escaped.

use fabric_test_support::{Scenario, Turn, TurnBy};
use serde_json::json;
use std::path::{Path, PathBuf};

use super::fixture::{Fixture, of_kind};
use super::projects::{git, user_repo};

/// A project specialist whose MCP server leaves `marker` behind when it starts.
fn write_specialist(fx: &Fixture, marker: &Path, comment: &str) -> PathBuf {
    let dir = fx.workspace_root().join("specialists");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("mcp_user.md");
    std::fs::write(
        &file,
        format!(
            "---
name: mcp_user
description: Has a server. {comment}
tools: [list_files]
mcp_servers:
  - name: marker
    command: sh
    args: [-c, 'touch {}; sleep 60']
    startup_timeout_s: 1
---
Work.
",
            marker.display()
        ),
    )
    .expect("write specialist");
    file
}

fn turns() -> Vec<Turn> {
    // The model takes its time over the first step, so a server the run starts has run
    // its `touch` before the run ends and stops it, however loaded the machine (it was
    // not, once, under a parallel run of the suite).
    let mut first = Turn::tool_call("list_files", json!({}));
    first.delay_ms = Some(1_500);
    vec![
        first,
        Turn::tool_call("finish_task", json!({"summary": "listed"})),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_project_specialists_mcp_server_waits_for_trust_and_again_when_it_changes() {
    let fx = Fixture::new(turns()).await;
    let marker = fx.dir.path().join("server-started");
    write_specialist(&fx, &marker, "");
    let dir = fx.dir.path().to_str().expect("utf-8").to_owned();

    let refused = fx
        .fabric(&["run", "list", "--pack", "mcp_user", "--json"])
        .await;
    assert_ne!(refused.code(), 0, "{}", refused.stdout);
    let said = format!("{}{}", refused.stdout, refused.stderr);
    assert!(
        said.contains("is not trusted") && said.contains(&format!("fabric trust {dir}")),
        "{said}"
    );
    assert!(!marker.exists(), "the untrusted server ran");

    let trusted = fx.fabric(&["trust", &dir]).await;
    trusted.assert_code(0);
    assert!(
        trusted.stdout.contains(".fabric/specialists/mcp_user.md")
            && trusted.stdout.contains("trusted this version"),
        "{}",
        trusted.stdout
    );
    let ran = fx
        .fabric(&["run", "list", "--pack", "mcp_user", "--json"])
        .await;
    ran.assert_code(0);
    assert!(marker.exists(), "the trusted server did not start");

    // A new version of what would run is untrusted until trusted again.
    std::fs::remove_file(&marker).expect("rm");
    write_specialist(&fx, &marker, "Changed.");
    let again = fx
        .fabric(&["run", "list", "--pack", "mcp_user", "--json"])
        .await;
    assert_ne!(again.code(), 0, "{}", again.stdout);
    assert!(format!("{}{}", again.stdout, again.stderr).contains("it has changed"));
    assert!(!marker.exists());
    let list = fx.fabric(&["trust", "--list"]).await;
    list.assert_code(0);
    assert!(
        list.stdout.contains(&dir) && list.stdout.contains("changed since"),
        "{}",
        list.stdout
    );

    fx.fabric(&["trust", &dir]).await.assert_code(0);
    let revoked = fx.fabric(&["trust", "--revoke", &dir]).await;
    revoked.assert_code(0);
    assert!(
        revoked.stdout.contains("no longer trusted"),
        "{}",
        revoked.stdout
    );
    let refused = fx
        .fabric(&["run", "list", "--pack", "mcp_user", "--json"])
        .await;
    assert_ne!(refused.code(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_the_terminal_asks_at_the_first_run_and_a_yes_trusts() {
    let fx = Fixture::new(turns()).await;
    let marker = fx.dir.path().join("server-started");
    write_specialist(&fx, &marker, "");
    let (code, screen) = fx
        .on_terminal(&["run", "list", "--pack", "mcp_user"], "n\n")
        .await;
    assert!(
        screen.contains("Trust it?") && screen.contains("not trusted"),
        "{screen}"
    );
    assert_ne!(code, 0, "{screen}");
    assert!(!marker.exists());

    let (code, screen) = fx
        .on_terminal(&["run", "list", "--pack", "mcp_user"], "y\n")
        .await;
    assert_eq!(code, 0, "{screen}");
    assert!(marker.exists(), "{screen}");
    let store = fx.dir.path().join("xdg/agent-fabric/trusted.json");
    let text = std::fs::read_to_string(&store).expect("trusted.json");
    assert!(text.contains("mcp_user.md"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_what_a_repository_ships_reaches_the_terminal_escaped() {
    let fx = Fixture::new(turns()).await;
    let repo = fx.dir.path().join("repo");
    std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
    std::fs::create_dir_all(repo.join(".claude")).expect("mkdir");
    std::fs::write(
        repo.join(".claude/settings.json"),
        r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "echo \u001b]0;owned\u0007 \u001b[2J"}]}]}}"#,
    )
    .expect("write");
    let out = fx.fabric(&["trust", repo.to_str().expect("utf-8")]).await;
    out.assert_code(0);
    assert!(!out.stdout.contains('\u{1b}'), "{:?}", out.stdout);
    assert!(
        out.stdout.contains("PreToolUse (Bash): echo"),
        "{}",
        out.stdout
    );

    let nothing = fx.dir.path().join("plain");
    std::fs::create_dir_all(&nothing).expect("mkdir");
    let out = fx
        .fabric(&["trust", nothing.to_str().expect("utf-8")])
        .await;
    out.assert_code(0);
    assert!(out.stdout.contains("nothing to trust"), "{}", out.stdout);
}

/// A committed repository whose `.claude/settings.json` has a PostToolUse hook appending each
/// call's tool name to `log` (the hook's command written as Claude Code users write it).
fn repo_with_hooks(fx: &Fixture, log: &Path, extra: &str) -> PathBuf {
    let repo = user_repo(fx);
    std::fs::create_dir_all(repo.join(".claude")).expect("mkdir");
    let settings = json!({
        "permissions": {"allow": ["Bash(npm test)"]},
        "hooks": {"PostToolUse": [{"matcher": "Write|Edit", "hooks": [{
            "type": "command",
            "command": format!("jq -r .tool_name >> {}{extra}", log.display()),
            "timeout": 10
        }]}]}
    });
    std::fs::write(repo.join(".claude/settings.json"), settings.to_string()).expect("write");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "hooks"]);
    repo
}

fn write_turns() -> Vec<Turn> {
    vec![
        Turn::tool_call("write_file", json!({"path": "a.txt", "content": "a\n"})),
        Turn::tool_call(
            "finish_task",
            json!({"summary": "wrote", "artifacts": [], "next_steps": [], "notes": ""}),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_43_a_project_hook_does_not_run_before_fabric_trust_runs_after_and_stops_when_it_changes()
 {
    let mut scenario = Scenario::new(write_turns());
    scenario.turn_by = TurnBy::Conversation;
    let fx = Fixture::with_backend(scenario, "openai").await;
    let log = fx.dir.path().join("hook.log");
    let repo = repo_with_hooks(&fx, &log, "");
    let path = repo.to_str().expect("utf-8").to_owned();
    let args = ["--project", path.as_str()];
    let run = || fx.run_json("write a.txt", &args, 0);

    let result = run().await;
    assert!(!log.exists(), "an untrusted project's hook ran");
    let events = fx.runlog(&result);
    let notice = of_kind(&events, "security_event")
        .into_iter()
        .find(|e| e["payload"]["event_type"] == "untrusted_project")
        .expect("an untrusted_project security_event");
    let said = notice["payload"]["error_message"]
        .as_str()
        .expect("message");
    assert!(
        said.contains(".claude/settings.json") && said.contains("fabric trust"),
        "{said}"
    );
    assert!(of_kind(&events, "hook_run").is_empty());

    let trusted = fx.fabric(&["trust", &path]).await;
    trusted.assert_code(0);
    assert!(
        trusted
            .stdout
            .contains("PostToolUse (Write|Edit): jq -r .tool_name"),
        "{}",
        trusted.stdout
    );
    let result = run().await;
    assert_eq!(
        std::fs::read_to_string(&log).expect("the trusted hook ran"),
        "write_file\n"
    );
    let events = fx.runlog(&result);
    let ran = of_kind(&events, "hook_run");
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(ran[0]["payload"]["source"], "project");

    // A new version of the hooks is not trusted: it does not run.
    std::fs::remove_file(&log).expect("rm");
    let changed = repo_with_hooks(&fx, &log, " # changed");
    assert_eq!(changed, repo);
    let result = run().await;
    assert!(!log.exists(), "a changed project hook ran");
    let events = fx.runlog(&result);
    assert!(
        of_kind(&events, "security_event")
            .iter()
            .any(|e| e["payload"]["error_message"]
                .as_str()
                .is_some_and(|m| m.contains("it has changed"))),
        "{events:?}"
    );
}
