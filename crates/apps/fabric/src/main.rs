//! `fabric`: the agent-fabric command.
//!
//! The only crate that names concrete adapters together: it parses the command line, loads
//! the settings, wires the LLM client, the built-in tools and the run store into the core's
//! run service (`RunService`), renders what happens for a person (or as JSON for a program),
//! and maps how the run ended to an exit code (docs/CLI.md). All logic lives in the libraries.
// The binary is the one place that talks to the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod app;
mod cli;
mod commands;
mod daily;
mod errors;
mod offline;
mod open_files;
mod render;
mod wiring;

use clap::Parser;
use std::process::ExitCode;

/// The most threads the runtime of a serving command starts for blocking work (tokio's
/// default is 512). That work is short file and process work: a run's directory, runlog and
/// lock, a tool's file access, a git command. A burst of thousands of runs arriving at once
/// started all 512, each with its stack and its allocator arena, 1–2 KiB of every run in flight
/// (issue #45); past this many, the work waits its turn in tokio's queue.
const BLOCKING_THREADS: usize = 64;

fn main() -> ExitCode {
    quiet_on_broken_pipe();
    let cli = cli::Cli::parse();
    init_tracing(cli.verbose);
    // `fabric run` and `fabric resume` wait on one run (or a few) whose work is waiting for
    // the model, the tools and the store's own threads: on the calling thread they save the
    // worker threads' start and, at every step, the wake-ups of tasks handed between them
    // (issue #26). Everything else (`serve`, `worker`, `mcp`, `eval`, ...) serves many at once.
    let mut builder = match &cli.command {
        cli::Command::Run(_) | cli::Command::Resume(_) | cli::Command::Answer(_) => {
            tokio::runtime::Builder::new_current_thread()
        }
        _ => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.max_blocking_threads(BLOCKING_THREADS);
            // Each run in flight holds descriptors for its life (ADR-132).
            if let Some(raised) = open_files::raise() {
                tracing::debug!(before = raised.before, now = raised.now, "open-files limit");
            }
            builder
        }
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // `fabric run --json` promises one JSON object on stdout, also when nothing could run.
    let json_errors = match &cli.command {
        cli::Command::Run(args) => args.json,
        cli::Command::Resume(args) => args.json,
        cli::Command::Answer(args) => args.json,
        _ => false,
    };
    match runtime.block_on(commands::dispatch(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            // Errors carry what tools, servers and git said: shown, never obeyed (ADR-089).
            eprintln!(
                "error: {}",
                fabric_domain::visible_text(&format!("{error:#}"))
            );
            if json_errors {
                println!("{}", errors::json_error(&error));
            }
            ExitCode::from(errors::exit_code(&error))
        }
    }
}

/// Output into a pipe whose reader has gone (`fabric logs list | head`) ends the command
/// quietly with exit 0, as ripgrep does, instead of the panic `println!` raises on `EPIPE`
/// (issue #26). SIGPIPE itself stays ignored: a tool server or client that goes away must
/// not kill `fabric serve`.
fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to std") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// The fabric's own diagnostics go to stderr, off unless asked for (`-v`) or set with
/// `RUST_LOG`, so they never mix with results on stdout.
fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(console::colors_enabled_stderr())
        .try_init();
}
