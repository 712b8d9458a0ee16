//! The command line: every flag here is a public contract (docs/CLI.md).

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use fabric_domain::{McpElicitation, McpOAuthGrant, SandboxMode, StatsGroup};
use std::path::PathBuf;

/// A flag whose choices are a domain set's words, read into the domain type: help, errors
/// and completions list `words`.
fn one_of<T>(
    words: &'static [&'static str],
    parse: fn(&str) -> Option<T>,
) -> impl TypedValueParser<Value = T>
where
    T: Clone + Send + Sync + 'static,
{
    PossibleValuesParser::new(words.iter().copied())
        .try_map(move |word| parse(&word).ok_or("not one of the words"))
}

/// agent-fabric: run tasks with specialist agents on local models.
#[derive(Debug, Parser)]
#[command(name = "fabric", version, about, long_about = None)]
pub(crate) struct Cli {
    /// Config file (JSON or YAML); built-in defaults when not given.
    #[arg(long, global = true, env = "FABRIC_CONFIG_PATH", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Directory holding runs (default `.fabric`, or `workspace` in the config).
    #[arg(long, global = true, env = "FABRIC_WORKSPACE", value_name = "DIR")]
    pub(crate) workspace: Option<PathBuf>,

    /// Print the fabric's own logs to stderr (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a task with a specialist agent.
    Run(RunArgs),
    /// Continue a run whose process stopped before its end (killed, crashed, a machine
    /// restarted), or every such run: recorded model answers are replayed, not asked again
    /// (docs/DURABILITY.md).
    Resume(ResumeArgs),
    /// Answer a run that waits for a person (status `input_required`: its model asked a
    /// question, or a call waits for approval); the run goes on here (docs/INTERACTIVE.md).
    Answer(AnswerArgs),
    /// Say something to a running run: its model gets it as a user message at its next step
    /// (docs/INTERACTIVE.md).
    Steer(SteerArgs),
    /// An interactive session on a terminal: each line a turn that continues the
    /// conversation, questions and approvals asked at the prompt, a line typed during a turn
    /// said to it, Ctrl-C cancelling the turn; `/diff`, `/apply`, `/discard`, `/fork`,
    /// `/exit`, `/help` (docs/INTERACTIVE.md).
    Chat(ChatArgs),
    /// Serve the Agent Client Protocol on stdin/stdout for an editor (Zed, JetBrains IDEs,
    /// Neovim): each session a conversation on the editor's directory, each prompt a turn
    /// that continues it (docs/ACP.md).
    Acp(AcpArgs),
    /// Take queued runs from the shared PostgreSQL store and run them (docs/DURABILITY.md):
    /// `fabric serve` with `store.queue: true` enqueues, any number of workers run.
    Worker(WorkerArgs),
    /// Show what a run on a project changed: the diff of its branch against its base
    /// (docs/PROJECTS.md).
    Diff(DiffArgs),
    /// Bring a run's changes into your working tree (uncommitted, for review), or with
    /// `--commit` as one commit on your current branch; refuses on conflict, writing nothing.
    Apply(ApplyArgs),
    /// Remove a run's worktree and branch (or its scratch history); the runlog stays.
    Discard(DiscardArgs),
    /// Trust what a repository ships that would run as you (its Claude Code hooks in
    /// `.claude/settings.json`, its project specialists' MCP servers): this version of it,
    /// by digest; a change asks again. `--list` shows trusted repositories, `--revoke`
    /// forgets one (docs/SECURITY.md).
    Trust(TrustArgs),
    /// Inspect past runs.
    #[command(subcommand)]
    Logs(LogsCommand),
    /// Show or check the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// List the specialists or show one.
    #[command(subcommand)]
    Specialists(SpecialistsCommand),
    /// Check that this machine can run tasks: config, model server, models, sandbox.
    Doctor,
    /// Serve the HTTP API (docs/HTTP.md), with MCP at `/mcp`.
    Serve(ServeArgs),
    /// Serve MCP on stdin/stdout: tools run_task, list_specialists, get_run, search_runs,
    /// run_stats, prune_runs (docs/MCP.md); with a subcommand, use an MCP server as a run
    /// would: log in with OAuth, list its tools, call one.
    Mcp(McpArgs),
    /// Figures of past runs per specialist, model key or tool (docs/STORE.md).
    Stats(StatsArgs),
    /// Today's spend per model key with a daily budget (`daily_budget`; docs/QUALITY.md).
    Budget(BudgetArgs),
    /// Re-run a recorded run with no model server: each model call gets its recorded
    /// answer, today's tools and validation do the rest; exits 1 where the run goes another
    /// way (docs/TESTING.md).
    Replay(ReplayArgs),
    /// Run scenario files (scripted model answers and expectations) against your
    /// specialists, with no model server; prints `N passed, N failed` (docs/TESTING.md).
    Test(TestArgs),
    /// Run a task suite against real model keys, each task `--repeat` times, and print per
    /// key the success rate, steps, tokens, time and prompt-cache hits (docs/LOCAL_MODELS.md);
    /// without a suite, the built-in one of easy engineering tasks.
    Eval(EvalArgs),
    /// Print the shell completion script for bash, zsh or fish, e.g.
    /// `fabric completions bash > ~/.local/share/bash-completion/completions/fabric`.
    Completions(CompletionsArgs),
    /// The run index: rebuild it from the runlogs and embed what is missing.
    #[command(subcommand)]
    Index(IndexCommand),
    /// The database behind the run store (docs/STORE.md).
    #[command(subcommand)]
    Store(StoreCommand),
    /// Serve a scripted model (the one the tests use) over Ollama's, OpenAI's and
    /// Anthropic's HTTP APIs: try the fabric with no model, or script the answers your
    /// specialists get (docs/TESTING.md). Without `--scenario`, a run that writes hello.txt.
    MockLlm(MockLlmArgs),
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct McpArgs {
    /// Without one, `fabric mcp` serves MCP on stdin/stdout.
    #[command(subcommand)]
    pub(crate) command: Option<McpCommand>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Authorize the fabric with a streamable HTTP server's OAuth (authorization code with
    /// PKCE): prints the URL to open, takes the redirect on 127.0.0.1, keeps the tokens for
    /// runs (docs/MCP.md "OAuth").
    Login(McpLoginArgs),
    /// Forget the OAuth tokens kept for a server.
    Logout(McpTargetArgs),
    /// Connect to a server as a run would and list the tools the fabric sees, with the ones
    /// it skips and why.
    Tools(McpToolsArgs),
    /// Connect to a server as a run would and call one of its tools; prints the result.
    Call(McpCallArgs),
}

/// Which server: a name from a specialist's `mcp_servers`, or `--url`.
#[derive(Debug, Args)]
pub(crate) struct McpTargetArgs {
    /// A server named in a specialist's `mcp_servers`.
    #[arg(required_unless_present = "url", conflicts_with = "url")]
    pub(crate) server: Option<String>,
    /// A streamable HTTP endpoint not in the config (its tools are `mcp__remote__<tool>`).
    #[arg(long, value_name = "URL")]
    pub(crate) url: Option<String>,
}

/// How to authorize when the config's `oauth` block does not say (or with `--url`).
#[derive(Debug, Args, Default)]
pub(crate) struct McpOAuthArgs {
    /// Follow the authorization URL from here instead of waiting for a person: for
    /// authorization servers that approve without one (test servers, the conformance
    /// suite); one that shows a login page fails with what it answered.
    #[arg(long)]
    pub(crate) no_browser: bool,
    /// A client id registered with the authorization server (else dynamic registration).
    #[arg(long, value_name = "ID")]
    pub(crate) client_id: Option<String>,
    /// The variable holding the secret of `--client-id`.
    #[arg(long, value_name = "VAR", requires = "client_id")]
    pub(crate) client_secret_env: Option<String>,
    /// The HTTPS address of the fabric's client ID metadata document.
    #[arg(long, value_name = "URL")]
    pub(crate) client_metadata_url: Option<String>,
    /// A scope to ask for (repeatable); default: what the server names.
    #[arg(long = "scope", value_name = "SCOPE")]
    pub(crate) scopes: Vec<String>,
    /// The local port for the redirect; default: any free one.
    #[arg(long, value_name = "PORT")]
    pub(crate) redirect_port: Option<u16>,
    /// `client_credentials`: no person logs in; the client's id and secret (`--client-id`,
    /// `--client-secret-env`) are exchanged for a token at each connection (SEP-1046).
    #[arg(long, value_name = "GRANT", value_parser = one_of(McpOAuthGrant::WORDS, McpOAuthGrant::parse))]
    pub(crate) grant: Option<McpOAuthGrant>,
}

#[derive(Debug, Args)]
pub(crate) struct McpLoginArgs {
    #[command(flatten)]
    pub(crate) target: McpTargetArgs,
    #[command(flatten)]
    pub(crate) oauth: McpOAuthArgs,
}

#[derive(Debug, Args)]
pub(crate) struct McpToolsArgs {
    #[command(flatten)]
    pub(crate) target: McpTargetArgs,
    #[command(flatten)]
    pub(crate) using: McpUseArgs,
}

#[derive(Debug, Args)]
pub(crate) struct McpCallArgs {
    /// `SERVER TOOL [JSON]`, or with `--url`: `TOOL [JSON]`. JSON is the tool's arguments,
    /// an object (default `{}`).
    #[arg(required = true, num_args = 1..=3, value_name = "[SERVER] TOOL [JSON]")]
    pub(crate) words: Vec<String>,
    /// A streamable HTTP endpoint not in the config (its tools are `mcp__remote__<tool>`).
    #[arg(long, value_name = "URL")]
    pub(crate) url: Option<String>,
    #[command(flatten)]
    pub(crate) using: McpUseArgs,
}

/// How `fabric mcp tools` and `call` use the server.
#[derive(Debug, Args)]
pub(crate) struct McpUseArgs {
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// When the server asks for authorization, log in (at most 3 times: a step-up to more
    /// scopes included) and try again, instead of failing.
    #[arg(long)]
    pub(crate) login: bool,
    /// How the server's forms (`elicitation/create`) are answered: `decline`, or `defaults`
    /// (the form's own defaults); default: the server's `elicitation`, else `decline`.
    #[arg(long, value_name = "HOW", value_parser = one_of(McpElicitation::WORDS, McpElicitation::parse))]
    pub(crate) elicitation: Option<McpElicitation>,
    #[command(flatten)]
    pub(crate) oauth: McpOAuthArgs,
}

#[derive(Debug, Args)]
pub(crate) struct MockLlmArgs {
    /// The scenario file, JSON or YAML (docs/TESTING.md); default: the built-in hello
    /// scenario, which serves any number of runs.
    #[arg(long, value_name = "FILE")]
    pub(crate) scenario: Option<std::path::PathBuf>,
    /// The port to listen on; 0 picks a free one (read it from the first line printed).
    #[arg(long, default_value_t = 11435)]
    pub(crate) port: u16,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: String,
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell.
    #[arg(value_parser = ["bash", "zsh", "fish"])]
    pub(crate) shell: String,
}

#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// The run to replay.
    pub(crate) run_id: String,
    /// `current`: today's definition of the specialists; `recorded`: only the tools the
    /// recording offered them.
    #[arg(long, default_value = "current", value_parser = ["current", "recorded"])]
    pub(crate) specialist_from: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct TestArgs {
    /// A scenario file, or a directory of them (`*.yaml`, `*.yml`, `*.json`); default
    /// `<workspace root>/tests`.
    pub(crate) path: Option<std::path::PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EvalArgs {
    /// A suite file (YAML or JSON: `tasks` with `prompt`, `files`, `expect`); default: the
    /// built-in suite of easy engineering tasks.
    pub(crate) suite: Option<std::path::PathBuf>,
    /// A model key to evaluate; repeat the flag for several (default: `default_model_key`).
    #[arg(long = "model-key", value_name = "KEY")]
    pub(crate) model_key: Vec<String>,
    /// How many times each task runs on each key.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) repeat: u32,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct BudgetArgs {
    /// Print JSON (as `GET /budget` answers) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// Group by `specialist`, `model` (model key) or `tool`.
    #[arg(long, default_value = "specialist", value_parser = one_of(StatsGroup::WORDS, StatsGroup::parse))]
    pub(crate) by: StatsGroup,
    /// Only runs started since: a date (2026-11-01), a UTC time (2026-11-01T12:00:00Z) or a
    /// duration back from now (7d).
    #[arg(long, value_name = "DATE")]
    pub(crate) since: Option<String>,
    /// Count replays, `fabric test` and `fabric eval` runs too.
    #[arg(long)]
    pub(crate) all: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum IndexCommand {
    /// Bring the index up to date with the runlogs on disk (runs it lacks or is behind on),
    /// then embed the runs that have no embedding yet.
    Rebuild {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum StoreCommand {
    /// Create or upgrade the store's tables (also done on every start).
    Migrate,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (default 127.0.0.1, or `server.host` in the config). Any
    /// address but a loopback one needs a token.
    #[arg(long, value_name = "HOST")]
    pub(crate) host: Option<String>,

    /// Port (default 8787, or `server.port`); 0 picks a free one. The first line on stdout
    /// is `listening on http://ADDRESS`.
    #[arg(long, value_name = "PORT")]
    pub(crate) port: Option<u16>,

    /// Environment variable holding the bearer token (default FABRIC_API_TOKEN, or
    /// `server.api_token_env`).
    #[arg(long, value_name = "NAME")]
    pub(crate) token_env: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// Runs at once in this worker.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) concurrency: u32,

    /// Seconds a claim holds without renewal (default `store.lease_s`, 30): a worker that
    /// stops renewing loses its runs after this, and another continues them.
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub(crate) lease_s: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct AnswerArgs {
    /// The run that waits (`fabric logs list --status input_required`).
    pub(crate) run_id: String,

    /// The answer; for an approval `approve`, `approve_for_run` or `deny`, optionally
    /// followed by a reason (`deny not on main`).
    pub(crate) answer: String,

    /// What the continued run does when it asks again: as `fabric run --on-question`.
    #[arg(long, value_name = "fail|wait|answer=TEXT")]
    pub(crate) on_question: Option<String>,

    /// Stream the model's text as it is generated (with --json: print every event as JSONL).
    #[arg(long)]
    pub(crate) stream: bool,

    /// Print JSON: the result plus `_meta`.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `fabric chat`.
#[derive(Debug, Args)]
pub(crate) struct ChatArgs {
    /// Work on this git repository: the first turn gets a worktree on its own branch, each
    /// later turn goes on on that branch (docs/PROJECTS.md).
    #[arg(long, value_name = "PATH")]
    pub(crate) project: Option<std::path::PathBuf>,

    /// The specialist(s) of the first turn, skipping routing (later turns go on with the
    /// specialist whose conversation they continue).
    #[arg(long = "pack", value_name = "ID[,ID...]", value_delimiter = ',')]
    pub(crate) specialists: Vec<String>,

    /// The model key from the config, for every turn.
    #[arg(long, value_name = "KEY")]
    pub(crate) model_key: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct AcpArgs {
    /// The specialist(s) of each session's first turn, skipping routing (later turns go
    /// on with the specialist whose conversation they continue).
    #[arg(long = "pack", value_name = "ID[,ID...]", value_delimiter = ',')]
    pub(crate) specialists: Vec<String>,

    /// The model key from the config, for every turn.
    #[arg(long, value_name = "KEY")]
    pub(crate) model_key: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct SteerArgs {
    /// The running run.
    pub(crate) run_id: String,

    /// What to say to it.
    pub(crate) text: String,
}

#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
    /// The run to continue (`fabric logs list` shows runs still `running`).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub(crate) run_id: Option<String>,

    /// Continue every run whose process is gone (a child run continues with its parent).
    #[arg(long)]
    pub(crate) all: bool,

    /// Stream the model's text as it is generated (with --json: print every event as JSONL).
    #[arg(long)]
    pub(crate) stream: bool,

    /// Print JSON: the result plus `_meta`, one object per run.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// What to do (optional with --resume-interrupted).
    #[arg(required_unless_present = "resume_interrupted")]
    pub(crate) prompt: Option<String>,

    /// First continue every run a stopped process left unfinished (as `fabric resume
    /// --all`), alongside this task; their outcomes go to stderr.
    #[arg(long)]
    pub(crate) resume_interrupted: bool,

    /// When the model asks (`ask_user`) or a call waits for approval and no terminal can
    /// answer (`--json`, or stdin is not a terminal): `fail` ends the run `unanswered`,
    /// `wait` leaves it waiting for `fabric answer` (exit code 9), `answer=TEXT` answers
    /// TEXT (approvals: approve). Without it the model is told no one can answer.
    #[arg(long, value_name = "fail|wait|answer=TEXT")]
    pub(crate) on_question: Option<String>,

    /// The specialist(s) to use, skipping routing: `engineering`, or a task force in order,
    /// `research,engineering`.
    #[arg(long = "pack", value_name = "ID[,ID...]", value_delimiter = ',')]
    pub(crate) specialists: Vec<String>,

    /// The model key from the config, e.g. `fast` or `quality`.
    #[arg(long, value_name = "KEY")]
    pub(crate) model_key: Option<String>,

    /// A model name on the key's server, used as given: skips model discovery.
    #[arg(long, value_name = "NAME")]
    pub(crate) model: Option<String>,

    /// Allow tools to use the network.
    #[arg(long, overrides_with = "no_network_allowed")]
    pub(crate) network_allowed: bool,

    /// Forbid tools to use the network (the default).
    #[arg(long, overrides_with = "network_allowed")]
    pub(crate) no_network_allowed: bool,

    /// Most model calls before the run stops (default 40).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) max_steps: Option<u32>,

    /// Stream the model's text as it is generated (with --json: print every event as JSONL).
    #[arg(long)]
    pub(crate) stream: bool,

    /// Print exactly one JSON object on stdout: the result plus `_meta`.
    #[arg(long)]
    pub(crate) json: bool,

    /// How tool processes are confined (default `strict`, or `sandbox` in the config):
    /// `strict` (workspace writable, no network for processes), `workspace-write-network`
    /// (processes may use the network when the run allows it), `off` (no OS sandbox; loudly
    /// recorded). See docs/SECURITY.md.
    #[arg(long, value_name = "MODE", value_parser = one_of(SandboxMode::WORDS, SandboxMode::parse))]
    pub(crate) sandbox: Option<SandboxMode>,

    /// Work on this git repository (any directory of its working tree): the run gets a
    /// worktree on its own branch `fabric/<run-id>`, every change is a commit, and the
    /// result is that branch to `fabric diff`, `apply` or `discard` (docs/PROJECTS.md).
    #[arg(long, value_name = "PATH")]
    pub(crate) project: Option<std::path::PathBuf>,

    /// With --project: start from this commit, branch or tag instead of `HEAD`.
    #[arg(long, value_name = "REF", requires = "project")]
    pub(crate) base: Option<String>,

    /// Go on with the conversation of the ended run RUN_ID: this prompt is its next user
    /// message; a project run works on that run's branch (docs/INTERACTIVE.md).
    #[arg(long = "continue", value_name = "RUN_ID", conflicts_with = "fork")]
    pub(crate) continue_run: Option<String>,

    /// Like --continue, on a new branch from RUN_ID's head; its own branch is left alone.
    #[arg(long, value_name = "RUN_ID")]
    pub(crate) fork: Option<String>,
}

impl RunArgs {
    /// The earlier run `--continue` or `--fork` names, if any.
    pub(crate) fn continues(
        &self,
    ) -> Result<Option<fabric_core::service::ContinueRequest>, crate::errors::UsageError> {
        let (id, fork) = match (&self.continue_run, &self.fork) {
            (Some(id), _) => (id, false),
            (None, Some(id)) => (id, true),
            (None, None) => return Ok(None),
        };
        let run_id = fabric_domain::RunId::parse(id)
            .map_err(|e| crate::errors::UsageError(format!("`{id}` is not a run id: {e}")))?;
        Ok(Some(fabric_core::service::ContinueRequest { run_id, fork }))
    }
}

/// `fabric diff`.
#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// The run.
    pub(crate) run_id: String,
    /// Only the files and their added and removed lines.
    #[arg(long)]
    pub(crate) stat: bool,
    /// Print one JSON object: branch, base, head, files.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `fabric apply`.
#[derive(Debug, Args)]
pub(crate) struct ApplyArgs {
    /// The run.
    pub(crate) run_id: String,
    /// Commit the changes onto the branch checked out in your repository instead of leaving
    /// them uncommitted.
    #[arg(long)]
    pub(crate) commit: bool,
}

/// `fabric trust`.
#[derive(Debug, Args)]
pub(crate) struct TrustArgs {
    /// A directory in the repository (default: the current directory).
    #[arg(conflicts_with = "list")]
    pub(crate) path: Option<PathBuf>,

    /// List the trusted repositories, and whether each is still the version trusted.
    #[arg(long)]
    pub(crate) list: bool,

    /// Forget the repository: what it ships will not run.
    #[arg(long, conflicts_with = "list")]
    pub(crate) revoke: bool,
}

/// `fabric discard`.
#[derive(Debug, Args)]
pub(crate) struct DiscardArgs {
    /// The run.
    pub(crate) run_id: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum LogsCommand {
    /// List runs, newest first.
    List {
        /// How many runs to show.
        #[arg(long, short = 'n', default_value_t = 20)]
        limit: usize,
        /// Every run, not only those people started: delegated runs, critics' reviews,
        /// replays, `fabric test` and `fabric eval` runs too, with their origin.
        #[arg(long)]
        all: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Find past runs by their prompt, result, tool calls and results; by meaning too when an
    /// embedding model is configured (`run_index.embedding_model_key`).
    Search {
        /// The words to look for.
        query: String,
        /// Rank by meaning only.
        #[arg(long)]
        semantic: bool,
        /// Only runs this specialist worked on.
        #[arg(long, value_name = "ID")]
        specialist: Option<String>,
        /// Only runs with this status (completed, failed, cancelled, ...).
        #[arg(long, value_name = "STATUS")]
        status: Option<String>,
        /// Only runs started since: a date (2026-11-01), a UTC time or a duration back from
        /// now (7d).
        #[arg(long, value_name = "DATE")]
        since: Option<String>,
        /// How many runs.
        #[arg(long, short = 'n', default_value_t = 10)]
        limit: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Delete ended runs (records, runlogs, workspaces) that started longer ago than a
    /// duration; runs still going are kept.
    Prune {
        /// 12h, 7d, 2w, ...
        #[arg(long, value_name = "DURATION")]
        older_than: String,
        /// Say which runs would be deleted, and delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Delete without asking (on a terminal, prune asks first).
        #[arg(long, short = 'y')]
        yes: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show the events of one run.
    Show {
        /// The run id (from `fabric logs list`).
        run_id: String,
        /// Only these kinds, comma-separated (e.g. `tool_call,tool_error`).
        #[arg(long, short = 'k', value_delimiter = ',')]
        kinds: Vec<String>,
        /// Print the raw JSONL lines.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the effective configuration as JSON.
    Show,
    /// Check the configuration and say what is wrong.
    Validate,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SpecialistsCommand {
    /// Every specialist: id, description, tools and where it comes from.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Everything about one specialist, including its prompt and finish schema.
    Show {
        /// The specialist's id.
        id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}
