//! A scripted model server, a temporary workspace and a config file pointing at the server.

use fabric_test_support::{Scenario, ScriptedServer, Turn};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) server: ScriptedServer,
    pub(crate) config: PathBuf,
}

/// A `bash -c` script that runs `first` (`ulimit -n 200`, say), then replaces the shell with
/// the program given as `$0` and its arguments: `bash -c SCRIPT fabric ARGS…`.
pub(crate) fn exec_after(first: &str) -> String {
    format!("{first} && exec \"$0\" \"$@\"")
}

pub(crate) struct Run {
    pub(crate) output: Output,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    pub(crate) fn code(&self) -> i32 {
        self.output.status.code().unwrap_or(-1)
    }

    /// Asserts the exit code, showing both streams when it differs.
    pub(crate) fn assert_code(&self, expected: i32) {
        assert_eq!(
            self.code(),
            expected,
            "stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON object ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

impl Fixture {
    pub(crate) async fn new(turns: Vec<Turn>) -> Self {
        Self::with_backend(Scenario::new(turns), "openai").await
    }

    pub(crate) async fn with_backend(scenario: Scenario, backend: &str) -> Self {
        let server = ScriptedServer::start(scenario)
            .await
            .expect("start scripted server");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("fabric.yaml");
        let yaml = format!(
            "models:\n  test:\n    base_url: {}\n    model: qwen2.5:7b\n    backend: {backend}\n    timeout_s: 20\n    max_retries: 2\ndefault_model_key: test\nrouting_model_key: test\n",
            server.base_url()
        );
        std::fs::write(&config, yaml).expect("write config");
        Self {
            dir,
            server,
            config,
        }
    }

    /// Adds top-level keys to the config file.
    pub(crate) fn append_config(&self, yaml: &str) {
        let mut text = std::fs::read_to_string(&self.config).expect("read config");
        text.push_str(yaml);
        std::fs::write(&self.config, text).expect("write config");
    }

    /// Trusts what the test's own directory ships that would run (project specialists'
    /// MCP servers, hooks): `trusted_projects` in the config (issue #43). Once per config.
    pub(crate) fn trust_own_files(&self) {
        let text = std::fs::read_to_string(&self.config).expect("read config");
        if !text.contains("\ntrusted_projects:") {
            self.append_config(&format!(
                "trusted_projects: [{}]\n",
                self.dir.path().display()
            ));
        }
    }

    /// Starts a second scripted server with `turns` and adds it to the config as the model
    /// key `cloud` (`big-cloud-model`, OpenAI wire), followed by the top-level `yaml`.
    pub(crate) async fn add_cloud(&self, turns: Vec<Turn>, yaml: &str) -> ScriptedServer {
        let cloud = ScriptedServer::start(Scenario::new(turns))
            .await
            .expect("start the cloud server");
        let config = std::fs::read_to_string(&self.config)
            .expect("read config")
            .replace(
                "default_model_key: test\n",
                &format!(
                    "  cloud:\n    base_url: {}\n    model: big-cloud-model\n    backend: openai\ndefault_model_key: test\n",
                    cloud.base_url()
                ),
            );
        std::fs::write(&self.config, config + yaml).expect("write config");
        cloud
    }

    /// Calls MCP tools through `fabric mcp` (stdio, plain JSON-RPC, the 2025-11-25
    /// revision): `calls` are `(tool, arguments)`, answered in order with each `result`.
    pub(crate) async fn mcp_calls(&self, calls: &[(&str, Value)]) -> Vec<Value> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let mut child = self
            .command(&["mcp"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("fabric mcp starts");
        let mut stdin = child.stdin.take().expect("stdin");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut messages = vec![
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}),
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ];
        for (n, (name, args)) in calls.iter().enumerate() {
            messages.push(serde_json::json!({"jsonrpc": "2.0", "id": n + 2,
                "method": "tools/call", "params": {"name": name, "arguments": args}}));
        }
        for message in messages {
            stdin
                .write_all(format!("{message}\n").as_bytes())
                .await
                .expect("write");
        }
        let mut answers = std::collections::BTreeMap::new();
        while answers.len() < calls.len() {
            let line = tokio::time::timeout(std::time::Duration::from_secs(60), lines.next_line())
                .await
                .expect("an answer within 60 s")
                .expect("read")
                .expect("a line");
            let message: Value = serde_json::from_str(&line).expect("json");
            if let Some(id) = message["id"].as_u64().filter(|id| *id >= 2) {
                answers.insert(id, message["result"].clone());
            }
        }
        let _ = child.start_kill();
        answers.into_values().collect()
    }

    pub(crate) fn workspace_root(&self) -> PathBuf {
        self.dir.path().join(".fabric")
    }

    pub(crate) async fn fabric(&self, args: &[&str]) -> Run {
        self.fabric_with(args, &[]).await
    }

    pub(crate) async fn fabric_with(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        self.fabric_within(args, env, 60).await
    }

    /// `fabric ARGS` with `env`, which must finish within `secs` seconds.
    pub(crate) async fn fabric_within(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
        secs: u64,
    ) -> Run {
        self.fabric_via(&[], args, env, secs).await
    }

    /// `fabric ARGS` started through the `wrapper` command line (`setpriv …`, which then
    /// runs the binary), with `env`; it must finish within `secs` seconds.
    pub(crate) async fn fabric_via(
        &self,
        wrapper: &[&str],
        args: &[&str],
        env: &[(&str, &str)],
        secs: u64,
    ) -> Run {
        let mut cmd = match wrapper.split_first() {
            None => self.command(args),
            Some((program, rest)) => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(rest)
                    .arg(env!("CARGO_BIN_EXE_fabric"))
                    .args(args)
                    .arg("--config")
                    .arg(&self.config)
                    .arg("--workspace")
                    .arg(self.workspace_root());
                self.isolate(&mut cmd);
                cmd
            }
        };
        for (k, v) in env {
            cmd.env(k, v);
        }
        let output = tokio::time::timeout(std::time::Duration::from_secs(secs), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("fabric finished within {secs} s"))
            .expect("fabric ran");
        Run {
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            output,
        }
    }

    /// The `fabric` command with this fixture's config and workspace, not yet started.
    pub(crate) fn command(&self, args: &[&str]) -> tokio::process::Command {
        self.command_in(&self.workspace_root(), args)
    }

    /// The `fabric` command with this fixture's config over another workspace root.
    pub(crate) fn command_in(&self, workspace: &Path, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_fabric"));
        cmd.args(args)
            .arg("--config")
            .arg(&self.config)
            .arg("--workspace")
            .arg(workspace);
        self.isolate(&mut cmd);
        cmd
    }

    /// What every `fabric` a test starts runs with: the test's directory, no colours, none
    /// of the environment's fabric settings.
    pub(crate) fn isolate(&self, cmd: &mut tokio::process::Command) {
        cmd.current_dir(self.dir.path())
            .env("NO_COLOR", "1")
            .env_remove("FABRIC_CONFIG_PATH")
            .env_remove("FABRIC_WORKSPACE")
            .env_remove("RUST_LOG")
            // The user-level specialists directory is under the test's own directory.
            .env("XDG_CONFIG_HOME", self.dir.path().join("xdg"))
            // So are MCP OAuth tokens (`fabric mcp login`): never the user's own.
            .env("XDG_STATE_HOME", self.dir.path().join("xdg-state"))
            .kill_on_drop(true);
    }

    /// Runs `fabric` on a terminal (a pseudo-terminal made by util-linux's `script`), typing
    /// `input`; returns the exit code and what the terminal showed.
    pub(crate) async fn on_terminal(&self, args: &[&str], input: &str) -> (i32, String) {
        let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
        let config = self.config.display().to_string();
        let workspace = self.workspace_root().display().to_string();
        let mut line: Vec<String> = vec![quote(env!("CARGO_BIN_EXE_fabric"))];
        line.extend(args.iter().map(|a| quote(a)));
        line.extend(["--config", &config, "--workspace", &workspace].map(quote));
        let mut cmd = tokio::process::Command::new("script");
        self.isolate(&mut cmd);
        cmd.args(["-qec", &line.join(" "), "/dev/null"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("script (util-linux)");
        {
            use tokio::io::AsyncWriteExt;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(input.as_bytes()).await.expect("type");
        }
        let out =
            tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
                .await
                .expect("the terminal session ended")
                .expect("script");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// Runs a task with `--json` and returns the result object, checking the exit code.
    pub(crate) async fn run_json(&self, prompt: &str, extra: &[&str], expected_code: i32) -> Value {
        let mut args = vec!["run", prompt, "--pack", "engineering", "--json"];
        args.extend_from_slice(extra);
        let run = self.fabric(&args).await;
        assert_eq!(
            run.code(),
            expected_code,
            "stdout:\n{}\nstderr:\n{}",
            run.stdout,
            run.stderr
        );
        let result = run.json();
        self.assert_replays(&result).await;
        result
    }

    /// Every run a test records this way is replayed with no model server (issue #12), and
    /// must go the same way. Runs that start child runs (sub-agents, critics) or use MCP
    /// servers are not replayed: offline runs do not start those.
    pub(crate) async fn assert_replays(&self, result: &Value) {
        let Some(id) = result["_meta"]["run_id"].as_str() else {
            return;
        };
        let events = self.runlog(result);
        let offline_cannot = events.iter().any(|e| {
            // Critics' reviews replay from their recorded verdicts (issue #26).
            matches!(e["kind"].as_str(), Some("mcp_server"))
                || e["payload"]["tool"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("agent__"))
        });
        if offline_cannot {
            return;
        }
        // In a copy of the workspace root, so the test's own listings do not see the replay.
        let copy = tempfile::tempdir().expect("tempdir");
        copy_dir(&self.workspace_root(), copy.path()).expect("copy the workspace root");
        let output = self
            .command_in(copy.path(), &["replay", id, "--json"])
            .output()
            .await
            .expect("fabric replay ran");
        let replay = Run {
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            output,
        };
        assert_eq!(
            replay.code(),
            0,
            "the replay of run {id} diverged:\n{}\n{}",
            replay.stdout,
            replay.stderr
        );
    }

    /// Every line of a run's runlog, each checked to be a JSON object with the public shape.
    pub(crate) fn runlog(&self, result: &Value) -> Vec<Value> {
        let run_id = result["_meta"]["run_id"].as_str().expect("run_id");
        read_runlog(
            &self
                .workspace_root()
                .join("runs")
                .join(run_id)
                .join("runlog.jsonl"),
        )
    }

    /// The chat request bodies the server received.
    pub(crate) fn requests(&self) -> Vec<Value> {
        self.server.requests().into_iter().map(|r| r.body).collect()
    }
}

/// A port nothing listens on (bound, then let go).
pub(crate) fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

/// Whether a process holding `marker` on its command line is there now.
pub(crate) fn process_with(marker: &str) -> bool {
    !pids_where("cmdline", |c| String::from_utf8_lossy(c).contains(marker)).is_empty()
}

/// The ids of the processes whose `/proc/PID/FILE` (`cmdline`, `environ`) `matches`.
pub(crate) fn pids_where(file: &str, matches: impl Fn(&[u8]) -> bool) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| std::fs::read(e.path().join(file)).is_ok_and(|c| matches(&c)))
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Whether a process holding `marker` on its command line is still there after up to 5 s
/// (a killed process takes a moment to go, longer on a loaded machine).
pub(crate) fn alive_with(marker: &str) -> bool {
    !gone_within(marker, std::time::Duration::from_secs(5))
}

/// Whether, within `limit`, no process holding `marker` on its command line is left: the
/// positive signal that a window in which such a process could still act has passed.
pub(crate) fn gone_within(marker: &str, limit: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while process_with(marker) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    true
}

/// Copies a directory tree (files and directories; the test workspaces hold nothing else
/// that matters to a replay).
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// For each `(yaml, expected)`: the config with `yaml` appended fails `fabric config
/// validate` (exit 2) with a message holding `expected`.
pub(crate) async fn assert_config_errors(cases: &[(&str, &str)]) {
    let fx = Fixture::new(Vec::new()).await;
    let base = std::fs::read_to_string(&fx.config).expect("read config");
    for (yaml, expected) in cases {
        std::fs::write(&fx.config, format!("{base}{yaml}")).expect("write config");
        let run = fx.fabric(&["config", "validate"]).await;
        assert_eq!(run.code(), 2, "{yaml}: {}{}", run.stdout, run.stderr);
        assert!(run.stderr.contains(expected), "{yaml}: {}", run.stderr);
    }
}

pub(crate) fn read_runlog(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(text.ends_with('\n'), "runlog ends with a newline");
    let events: Vec<Value> = text
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("line {}: {e}: {line}", i + 1));
            for key in ["seq", "ts", "kind", "step", "payload"] {
                assert!(v.get(key).is_some(), "line {} lacks `{key}`: {line}", i + 1);
            }
            assert_eq!(v["seq"].as_u64(), Some(i as u64), "seq is gapless");
            v
        })
        .collect();
    let terminal = events
        .iter()
        .filter(|e| e["kind"] == "run_complete" || e["kind"] == "run_failed")
        .count();
    let last = events.last().expect("non-empty runlog");
    // A run waiting for a person (issue #42) has no end yet: its last line is the question.
    if terminal == 0 && last["kind"] == "input_required" {
        return events;
    }
    assert_eq!(terminal, 1, "exactly one terminal event");
    assert!(
        last["kind"] == "run_complete" || last["kind"] == "run_failed",
        "terminal event is last"
    );
    events
}

pub(crate) fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["kind"].as_str()).collect()
}

pub(crate) fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// The content of the tool messages in the last request the model received.
pub(crate) fn tool_messages(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}
