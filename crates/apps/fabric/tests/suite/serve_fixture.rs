//! A real `fabric serve` on an ephemeral port against the scripted model server, a real
//! HTTP client, and a small SSE reader.

use fabric_test_support::{Scenario, Turn};
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::fixture::Fixture;

pub(crate) const TOKEN: &str = "test-token-0123456789";

pub(crate) struct Served {
    /// Shared by every API node of one test (`Served::another_node`).
    pub(crate) fx: std::sync::Arc<Fixture>,
    pub(crate) child: Child,
    pub(crate) base: String,
    pub(crate) http: reqwest::Client,
    pub(crate) token: Option<&'static str>,
}

/// Options of one server.
#[derive(Default)]
pub(crate) struct Options {
    /// Extra YAML appended to the config.
    pub(crate) config: &'static str,
    /// Serve with [`TOKEN`] required.
    pub(crate) auth: bool,
    /// Rewrites the whole config (the scripted server's URL and the YAML) before serving.
    pub(crate) rewrite: Option<fn(&str, &str) -> String>,
    /// Where the server's stderr goes (its log); discarded without.
    pub(crate) stderr: Option<std::path::PathBuf>,
    /// Shell commands run before the server replaces the shell (`ulimit -Sn 256`, say).
    pub(crate) shell_first: Option<&'static str>,
}

impl Served {
    pub(crate) async fn start(turns: Vec<Turn>) -> Self {
        Self::with(Scenario::new(turns), Options::default()).await
    }

    pub(crate) async fn with(scenario: Scenario, options: Options) -> Self {
        let fx = Fixture::with_backend(scenario, "openai").await;
        Self::on(fx, options).await
    }

    /// Serves an existing fixture's config and workspace.
    pub(crate) async fn on(fx: Fixture, options: Options) -> Self {
        Self::node(std::sync::Arc::new(fx), options).await
    }

    /// A second `fabric serve` over the same config and workspace (another API node of one
    /// shared store).
    pub(crate) async fn another_node(&self) -> Self {
        self.another_node_with(Options::default()).await
    }

    /// [`Self::another_node`] with `options` (a token, say).
    pub(crate) async fn another_node_with(&self, options: Options) -> Self {
        Self::node(std::sync::Arc::clone(&self.fx), options).await
    }

    async fn node(fx: std::sync::Arc<Fixture>, options: Options) -> Self {
        if !options.config.is_empty() {
            let mut yaml = std::fs::read_to_string(&fx.config).unwrap();
            yaml.push_str(options.config);
            std::fs::write(&fx.config, yaml).unwrap();
        }
        if let Some(rewrite) = options.rewrite {
            let yaml = std::fs::read_to_string(&fx.config).unwrap();
            std::fs::write(&fx.config, rewrite(&fx.server.base_url(), &yaml)).unwrap();
        }
        let mut cmd = match options.shell_first {
            Some(first) => {
                let mut cmd = Command::new("bash");
                cmd.arg("-c")
                    .arg(super::fixture::exec_after(first))
                    .arg(env!("CARGO_BIN_EXE_fabric"));
                cmd
            }
            None => Command::new(env!("CARGO_BIN_EXE_fabric")),
        };
        cmd.args(["serve", "--port", "0", "--token-env", "FABRIC_TEST_TOKEN"])
            .arg("--config")
            .arg(&fx.config)
            .arg("--workspace")
            .arg(fx.workspace_root())
            .current_dir(fx.dir.path())
            .env("NO_COLOR", "1")
            .env_remove("FABRIC_CONFIG_PATH")
            .env_remove("FABRIC_WORKSPACE")
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(match &options.stderr {
                Some(path) => Stdio::from(std::fs::File::create(path).expect("server log")),
                None => Stdio::null(),
            })
            .kill_on_drop(true);
        if options.auth {
            cmd.env("FABRIC_TEST_TOKEN", TOKEN);
        } else {
            cmd.env_remove("FABRIC_TEST_TOKEN");
        }
        let mut child = cmd.spawn().expect("fabric serve starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("fabric serve printed its address within 30 s")
            .expect("read stdout")
            .expect("a first line");
        let base = first
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {first}"))
            .to_owned();
        // Keep draining stdout so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            fx,
            child,
            base,
            http: reqwest::Client::new(),
            token: options.auth.then_some(TOKEN),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.authed(self.http.get(self.url(path)))
    }

    pub(crate) fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.authed(self.http.post(self.url(path)))
    }

    fn authed(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// POSTs a JSON body and returns the status and the JSON answer.
    pub(crate) async fn post_json(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self.post(path).json(&body).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub(crate) async fn get_json(&self, path: &str) -> (u16, Value) {
        let response = self.get(path).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Starts a run in the background and returns its id.
    pub(crate) async fn start_run(&self, prompt: &str) -> String {
        let (status, body) = self
            .post_json(
                "/runs",
                serde_json::json!({"prompt": prompt, "pack": "engineering"}),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        body["run_id"].as_str().unwrap().to_owned()
    }

    /// Opens an SSE follow of a run's events.
    pub(crate) async fn follow(&self, run_id: &str, last_event_id: Option<u64>) -> SseReader {
        let mut request = self
            .get(&format!("/runs/{run_id}/events"))
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        SseReader::new(response)
    }

    /// Cancels a running run whose stream `reader` follows, and checks that it ended
    /// `cancelled` within 5 s, in its stream, its status and its runlog.
    pub(crate) async fn cancel_promptly(&self, run_id: &str, reader: &mut SseReader) {
        let started = std::time::Instant::now();
        let response = self
            .post(&format!("/runs/{run_id}/cancel"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202);
        let rest = reader.rest().await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "cancel was prompt: {:?}",
            started.elapsed()
        );
        let last = rest.last().unwrap().json();
        assert_eq!(last["kind"], "run_failed");
        assert_eq!(last["payload"]["status"], "cancelled");
        self.wait_status(run_id, "cancelled").await;
        assert_eq!(
            self.runlog(run_id).last().unwrap()["payload"]["status"],
            "cancelled"
        );
    }

    /// Waits until the run's status is `expected` (30 s: a loaded machine runs slowly).
    pub(crate) async fn wait_status(&self, run_id: &str, expected: &str) -> Value {
        let mut last = Value::Null;
        for _ in 0..600 {
            let (code, body) = self.get_json(&format!("/runs/{run_id}/status")).await;
            assert_eq!(code, 200, "{body}");
            if body["status"] == expected {
                return body;
            }
            last = body;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let kinds: Vec<Value> = self
            .runlog(run_id)
            .iter()
            .map(|e| serde_json::json!([e["kind"], e["payload"]["status"], e["payload"]["reason"]]))
            .collect();
        panic!(
            "run {run_id} never reached {expected}: its status is {last}; its runlog: {kinds:?}"
        );
    }

    pub(crate) fn runlog(&self, run_id: &str) -> Vec<Value> {
        super::fixture::read_runlog(
            &self
                .fx
                .workspace_root()
                .join("runs")
                .join(run_id)
                .join("runlog.jsonl"),
        )
    }
}

/// One SSE frame.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    pub(crate) id: Option<String>,
    pub(crate) event: Option<String>,
    pub(crate) data: String,
}

impl Frame {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{e}: {}", self.data))
    }
}

/// Reads SSE frames from a response as they arrive (comments and keep-alives skipped).
pub(crate) struct SseReader {
    response: reqwest::Response,
    buffer: FrameBuffer,
}

/// Bytes of an SSE stream as they arrive, cut into whole frames. Bytes, not text: a chunk
/// may end inside a multi-byte character, and only a whole frame is decoded.
#[derive(Default)]
pub(crate) struct FrameBuffer {
    bytes: Vec<u8>,
}

impl FrameBuffer {
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
    }

    /// The next whole frame, if one has arrived (comment-only blocks are skipped).
    pub(crate) fn next_frame(&mut self) -> Option<Frame> {
        while let Some(end) = self.bytes.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = self.bytes.drain(..end + 2).collect();
            let text = std::str::from_utf8(&block).expect("an SSE frame is UTF-8");
            if let Some(frame) = parse(text) {
                return Some(frame);
            }
        }
        None
    }
}

impl SseReader {
    pub(crate) fn new(response: reqwest::Response) -> Self {
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Self {
            response,
            buffer: FrameBuffer::default(),
        }
    }

    /// The next frame, or `None` when the server ended the stream.
    pub(crate) async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(frame) = self.buffer.next_frame() {
                return Some(frame);
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.response.chunk())
                .await
                .expect("an SSE chunk within 30 s")
                .expect("reading the stream")?;
            self.buffer.push(&chunk);
        }
    }

    /// Every remaining frame until the server ends the stream.
    pub(crate) async fn rest(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        while let Some(frame) = self.next().await {
            frames.push(frame);
        }
        frames
    }
}

fn parse(block: &str) -> Option<Frame> {
    let mut frame = Frame {
        id: None,
        event: None,
        data: String::new(),
    };
    let mut has_data = false;
    for line in block.lines() {
        if line.starts_with(':') || line.is_empty() {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => frame.id = Some(value.to_owned()),
            "event" => frame.event = Some(value.to_owned()),
            "data" => {
                if has_data {
                    frame.data.push('\n');
                }
                frame.data.push_str(value);
                has_data = true;
            }
            _ => {}
        }
    }
    has_data.then_some(frame)
}

/// Checks that frames carry exactly the runlog's lines, with `id` = seq and `event` = kind.
pub(crate) fn assert_frames_match_runlog(frames: &[Frame], runlog: &[Value], first_seq: u64) {
    let expected: Vec<&Value> = runlog
        .iter()
        .filter(|e| e["seq"].as_u64().unwrap() >= first_seq)
        .collect();
    assert_eq!(frames.len(), expected.len(), "{frames:#?}");
    for (frame, line) in frames.iter().zip(expected) {
        assert_eq!(frame.id.as_deref(), Some(line["seq"].to_string().as_str()));
        assert_eq!(frame.event.as_deref(), line["kind"].as_str());
        assert_eq!(&frame.json(), line, "the SSE data is the runlog line");
    }
}

#[test]
fn a_character_split_across_chunks_is_read_whole() {
    let frame = "id: 1\nevent: tool_result\ndata: {\"text\":\"h\u{e9}llo \u{4e16}\u{754c}\"}\n\n";
    let bytes = frame.as_bytes();
    // Cut inside every multi-byte character in turn.
    for cut in 1..bytes.len() {
        let mut buffer = FrameBuffer::default();
        buffer.push(&bytes[..cut]);
        let early = buffer.next_frame();
        buffer.push(&bytes[cut..]);
        let frame = early.or_else(|| buffer.next_frame()).expect("one frame");
        assert_eq!(
            frame.json()["text"],
            "h\u{e9}llo \u{4e16}\u{754c}",
            "cut at {cut}"
        );
    }
}
