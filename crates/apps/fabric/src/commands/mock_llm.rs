//! `fabric mock-llm`: the scripted model server of the test suite, shipped in the binary
//! (issue #26), so `cargo install` users can try the fabric with no model and script the
//! answers their specialists get. Prints `listening on http://HOST:PORT` once ready (scripts
//! wait for that line, which matters with `--port 0`), and stops on Ctrl-C or SIGTERM.

use std::io::Write;

use anyhow::Context;
use fabric_scripted_llm::{Scenario, ScriptedServer};

use crate::cli::MockLlmArgs;
use crate::errors::UsageError;

pub(crate) async fn mock_llm(args: &MockLlmArgs) -> anyhow::Result<u8> {
    let scenario = match &args.scenario {
        Some(path) => Scenario::from_file(path).map_err(|e| {
            UsageError(format!(
                "--scenario {}: {e}; docs/TESTING.md describes the format",
                path.display()
            ))
        })?,
        None => Scenario::hello().context("the built-in hello scenario")?,
    };
    let server = ScriptedServer::serve_on(scenario, (args.host.as_str(), args.port))
        .await
        .map_err(|e| {
            UsageError(format!(
                "cannot listen on {}:{} ({e}); pick another with --port (0 for any free one)",
                args.host, args.port
            ))
        })?;
    println!("listening on {}", server.root_url());
    eprintln!(
        "try it: a model key with base_url {}/v1, backend openai, any model name (or {} for Ollama's API); Ctrl-C stops it",
        server.root_url(),
        server.root_url()
    );
    // Whoever reads our stdout through a pipe must see the line now, not at exit.
    std::io::stdout().flush()?;
    super::serve::terminated().await;
    server.shutdown().await;
    Ok(0)
}
