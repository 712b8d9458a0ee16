//! One module per command.

mod acp;
mod attend;
mod catalog;
mod chat;
mod config;
mod doctor;
mod eval;
mod follow;
mod logs;
mod mcp;
mod mcp_client;
mod mock_llm;
mod project;
mod replay;
mod resume;
mod run;
mod serve;
mod specialists;
mod test;
mod trust;
mod worker;

use crate::cli::{Cli, Command};

/// Runs the command and returns the process exit code.
pub(crate) async fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    match &cli.command {
        Command::Run(args) => run::run(&cli, args).await,
        Command::Resume(args) => resume::resume(&cli, args).await,
        Command::Answer(args) => attend::answer(&cli, args).await,
        Command::Steer(args) => attend::steer(&cli, args).await,
        Command::Chat(args) => chat::chat(&cli, args).await,
        Command::Acp(args) => acp::acp(&cli, args).await,
        Command::Worker(args) => worker::worker(&cli, args).await,
        Command::Logs(command) => logs::logs(&cli, command).await,
        Command::Diff(args) => project::diff(&cli, args).await,
        Command::Apply(args) => project::apply(&cli, args).await,
        Command::Discard(args) => project::discard(&cli, args).await,
        Command::Trust(args) => trust::trust(&cli, args),
        Command::Config(command) => config::config(&cli, command),
        Command::Specialists(command) => specialists::specialists(&cli, command),
        Command::Doctor => doctor::doctor(&cli).await,
        Command::Serve(args) => serve::serve(&cli, args).await,
        Command::Mcp(args) => match &args.command {
            None => mcp::mcp(&cli).await,
            Some(command) => mcp_client::mcp_client(&cli, command).await,
        },
        Command::Stats(args) => catalog::stats(&cli, args).await,
        Command::Budget(args) => catalog::budget(&cli, args).await,
        Command::Replay(args) => replay::replay(&cli, args).await,
        Command::Test(args) => test::test(&cli, args).await,
        Command::Eval(args) => eval::eval(&cli, args).await,
        Command::Completions(args) => Ok(completions(&args.shell)),
        Command::Index(command) => catalog::index(&cli, command).await,
        Command::Store(command) => catalog::store(&cli, command).await,
        Command::MockLlm(args) => mock_llm::mock_llm(args).await,
    }
}

/// Prints the completion script for `shell` (bash, zsh or fish; clap checked the name).
fn completions(shell: &str) -> u8 {
    use clap::CommandFactory;
    use clap_complete::Shell;
    let shell = match shell {
        "zsh" => Shell::Zsh,
        "fish" => Shell::Fish,
        _ => Shell::Bash,
    };
    let mut command = Cli::command();
    // Generated into memory, then written: clap_complete panics on a failed write, and a
    // closed pipe (`fabric completions bash | head`) ends the command quietly (issue #26).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "fabric", &mut script);
    use std::io::Write;
    match std::io::stdout().write_all(&script) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("error: cannot write the completion script: {e}");
            1
        }
    }
}
