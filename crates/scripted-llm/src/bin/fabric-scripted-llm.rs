//! `fabric-scripted-llm`: serves a scenario file as a fake Ollama / OpenAI-compatible model
//! server, so users can test their specialists against a scripted model.
//!
//! Prints `listening on http://HOST:PORT` once ready (scripts wait for that line, which matters
//! with `--port 0`), and stops on Ctrl-C or SIGTERM.

#![allow(clippy::print_stdout)]

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use fabric_scripted_llm::{Scenario, ScriptedServer};

/// Serve a scripted LLM conversation over Ollama's and OpenAI's HTTP APIs.
#[derive(Debug, Parser)]
#[command(name = "fabric-scripted-llm", version)]
struct Args {
    /// The scenario file, JSON or YAML.
    #[arg(long)]
    scenario: PathBuf,
    /// The port to listen on; 0 picks a free one (read it from the first line printed).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The length of the vectors `/api/embed` and `/v1/embeddings` answer with; overrides
    /// `embedding_dims` in the scenario (default 768).
    #[arg(long, value_name = "N")]
    embedding_dims: Option<usize>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut scenario = Scenario::from_file(&args.scenario)?;
    if let Some(dims) = args.embedding_dims {
        scenario.embedding_dims = dims;
    }
    let server = ScriptedServer::serve_on(scenario, (args.host.as_str(), args.port))
        .await
        .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    println!("listening on {}", server.root_url());
    // Whoever reads our stdout through a pipe must see the line now, not at exit.
    std::io::stdout().flush()?;
    wait_for_stop_signal().await?;
    server.shutdown().await;
    Ok(())
}

#[cfg(unix)]
async fn wait_for_stop_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result?,
        _ = term.recv() => {}
    }
    Ok(())
}

#[cfg(not(unix))]
async fn wait_for_stop_signal() -> anyhow::Result<()> {
    tokio::signal::ctrl_c().await?;
    Ok(())
}
