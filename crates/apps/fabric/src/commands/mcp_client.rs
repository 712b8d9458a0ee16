//! `fabric mcp login|logout|tools|call`: the fabric as an MCP client from the command line.
//! Each goes through what a run uses: an `McpTools` of one server (connection, lifecycle,
//! OAuth tokens, tool conversion), so what these print is what a run's model would see.

use anyhow::Context as _;
use fabric_core::{Tool, ToolContext, ToolSource};
use fabric_domain::runlog::McpStatus;
use fabric_domain::{
    DEFAULT_MCP_CALL_TIMEOUT_S, DEFAULT_MCP_STARTUP_TIMEOUT_S, EventPayload, McpOAuth,
    McpOAuthGrant, McpServerSpec, McpTransport, RunId, SpecialistSpec, mcp_tool_name,
};
use fabric_mcp::{Challenge, McpTools};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

use crate::cli::{Cli, McpCallArgs, McpCommand, McpLoginArgs, McpOAuthArgs, McpTargetArgs};
use crate::errors::UsageError;
use crate::wiring;

/// The name of a server given by `--url`: its tools are `mcp__remote__<tool>`.
const REMOTE: &str = "remote";
/// Authorizations one command may go through (`--login`): a first login and two step-ups,
/// then it stops, so a server that is never satisfied cannot loop it (2025-11-25's scope
/// challenge handling).
const MAX_LOGINS: u32 = 3;

pub(crate) async fn mcp_client(cli: &Cli, command: &McpCommand) -> anyhow::Result<u8> {
    match command {
        McpCommand::Login(args) => login(cli, args).await,
        McpCommand::Logout(target) => logout(cli, target),
        McpCommand::Tools(args) => {
            let spec = server_spec(
                cli,
                args.target.server.as_deref(),
                args.target.url.as_deref(),
            )?;
            let spec = answering(spec, &args.using);
            let mut session = Session::new(&spec, &args.using.oauth, args.using.login)?;
            let source = session.start().await?;
            print_tools(&spec, &source, args.using.json)?;
            Ok(0)
        }
        McpCommand::Call(args) => call(cli, args).await,
    }
}

async fn login(cli: &Cli, args: &McpLoginArgs) -> anyhow::Result<u8> {
    let spec = server_spec(
        cli,
        args.target.server.as_deref(),
        args.target.url.as_deref(),
    )?;
    let mut session = Session::new(&spec, &args.oauth, true)?;
    if session.oauth.grant == McpOAuthGrant::ClientCredentials {
        // Nothing to approve and nothing kept: connecting checks the id and secret.
        session.start().await?;
        println!(
            "MCP server `{}` takes client credentials: each connection gets its own token from the client's id and secret, so there is no login to keep; they work",
            spec.name
        );
        return Ok(0);
    }
    let logged_in = session.login(None).await?;
    println!(
        "logged in to MCP server `{}`; tokens kept in {} (scopes: {})",
        spec.name,
        logged_in.token_file.display(),
        shown_scopes(&logged_in.scopes)
    );
    Ok(0)
}

fn logout(cli: &Cli, target: &McpTargetArgs) -> anyhow::Result<u8> {
    let spec = server_spec(cli, target.server.as_deref(), target.url.as_deref())?;
    let url = http_url(&spec)?;
    if fabric_mcp::logout(&spec.name, url, &token_dir()?)? {
        println!(
            "logged out of MCP server `{}`: its tokens are removed",
            spec.name
        );
    } else {
        println!(
            "no tokens were kept for MCP server `{}` at {url}",
            spec.name
        );
    }
    Ok(0)
}

async fn call(cli: &Cli, args: &McpCallArgs) -> anyhow::Result<u8> {
    let (server, tool, arguments) = call_words(&args.words, args.url.is_some())?;
    let arguments = parse_arguments(arguments)?;
    let spec = answering(server_spec(cli, server, args.url.as_deref())?, &args.using);
    let name = mcp_tool_name(&spec.name, tool);
    let mut session = Session::new(&spec, &args.using.oauth, args.using.login)?;
    loop {
        let source = session.start().await?;
        let Some(found) = source.tools().into_iter().find(|t| t.spec().name == name) else {
            let names: Vec<String> = source
                .tools()
                .iter()
                .map(|t| t.spec().name.clone())
                .collect();
            return Err(UsageError(format!(
                "MCP server `{}` has no tool `{tool}` the fabric can use; it has: {}",
                spec.name,
                shown_list(&names)
            ))
            .into());
        };
        match found.call(arguments.clone(), &context()).await {
            Ok(result) => {
                print_result(&name, &result, args.using.json)?;
                return Ok(0);
            }
            Err(e) if session.may_retry(&source).await? => {
                tracing::debug!(error = %e, "the call was refused for authorization; logged in again");
            }
            Err(e) => {
                let why = source
                    .challenge(&spec.name)
                    .map(|c| format!(" (the server answered `{}`)", c.header()))
                    .unwrap_or_default();
                eprintln!("{e}{why}");
                return Ok(1);
            }
        }
    }
}

/// One command's connections to one server, logging in again when the server asks and
/// `--login` allows it.
struct Session<'a> {
    /// The server as the command names it.
    spec: &'a McpServerSpec,
    /// The same with the command line's `oauth` over the config's: what connects.
    connecting: McpServerSpec,
    oauth: McpOAuth,
    unattended: bool,
    may_login: bool,
    logins: u32,
    token_dir: PathBuf,
}

impl<'a> Session<'a> {
    fn new(spec: &'a McpServerSpec, args: &McpOAuthArgs, may_login: bool) -> anyhow::Result<Self> {
        let oauth = oauth_of(spec, args);
        let mut connecting = spec.clone();
        // The same as the config's unless a flag changed it: no block and an empty one are
        // read alike.
        if let McpTransport::Http { oauth: held, .. } = &mut connecting.transport {
            *held = Some(oauth.clone());
        }
        Ok(Self {
            spec,
            connecting,
            oauth,
            unattended: args.no_browser,
            may_login,
            logins: 0,
            token_dir: token_dir()?,
        })
    }

    /// The server connected and its tools listed, as at the start of a run.
    async fn start(&mut self) -> anyhow::Result<McpTools> {
        loop {
            let source = McpTools::new(&specialist_for(&self.connecting)?)
                .with_spawn_hook(fabric_sandbox::dies_with_the_fabric)
                .with_token_dir(self.token_dir.clone());
            match source.start(&context()).await {
                Ok(()) => return Ok(source),
                Err(e) if self.may_retry(&source).await? => {
                    tracing::debug!(error = %e, "the server asked for authorization; logged in");
                }
                Err(e) => return Err(UsageError(e.to_string()).into()),
            }
        }
    }

    /// Logs in when the server refused for want of authorization and logins are left.
    async fn may_retry(&mut self, source: &McpTools) -> anyhow::Result<bool> {
        let Some(challenge) = source.challenge(&self.spec.name) else {
            return Ok(false);
        };
        // A token from client credentials that is refused is not one a login would fix.
        if !self.may_login
            || self.logins >= MAX_LOGINS
            || self.oauth.grant == McpOAuthGrant::ClientCredentials
        {
            return Ok(false);
        }
        self.logins += 1;
        let logged_in = self.login(Some(&challenge)).await?;
        eprintln!(
            "logged in to MCP server `{}` (scopes: {})",
            self.spec.name,
            shown_scopes(&logged_in.scopes)
        );
        Ok(true)
    }

    async fn login(&self, challenge: Option<&Challenge>) -> anyhow::Result<fabric_mcp::LoggedIn> {
        let url = http_url(self.spec)?;
        let request = fabric_mcp::LoginRequest {
            server: &self.spec.name,
            url,
            oauth: &self.oauth,
            token_dir: &self.token_dir,
            challenge,
            unattended: self.unattended,
        };
        let unattended = self.unattended;
        let show = |url: &str| {
            if unattended {
                eprintln!("following the authorization URL (--no-browser): {url}");
            } else {
                eprintln!("Open this URL in a browser to authorize the fabric:\n\n  {url}\n");
            }
        };
        Ok(fabric_mcp::login(&request, show).await?)
    }
}

/// The server with `--elicitation` over its own setting.
fn answering(mut spec: McpServerSpec, using: &crate::cli::McpUseArgs) -> McpServerSpec {
    if let Some(how) = using.elicitation {
        spec.elicitation = how;
    }
    spec
}

/// The server a command names: a configured one by name, or one made from `--url`.
fn server_spec(
    cli: &Cli,
    server: Option<&str>,
    url: Option<&str>,
) -> anyhow::Result<McpServerSpec> {
    if let Some(url) = url {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(UsageError(format!(
                "--url must be a streamable HTTP endpoint starting with http:// or https://, got `{url}`"
            ))
            .into());
        }
        return Ok(McpServerSpec {
            name: REMOTE.to_owned(),
            transport: McpTransport::Http {
                url: url.to_owned(),
                headers: Default::default(),
                bearer_token_env: None,
                oauth: None,
            },
            required: true,
            startup_timeout_s: DEFAULT_MCP_STARTUP_TIMEOUT_S,
            call_timeout_s: DEFAULT_MCP_CALL_TIMEOUT_S,
            // No run lends a model here: a server's sampling request is refused saying so.
            sampling: true,
            elicitation: Default::default(),
            pool: false,
        });
    }
    let name = server.unwrap_or_default();
    let settings = wiring::load_settings(cli)?;
    let configured: Vec<&McpServerSpec> = settings
        .specialists
        .iter()
        .flat_map(|s| s.tooling.mcp_servers.iter())
        .collect();
    match configured.iter().find(|s| s.name == name) {
        // The command waits for it, as a run waits for a required server.
        Some(spec) => Ok(McpServerSpec {
            required: true,
            ..(*spec).clone()
        }),
        None => {
            let mut names: Vec<String> = configured.iter().map(|s| s.name.clone()).collect();
            names.sort();
            names.dedup();
            Err(UsageError(if names.is_empty() {
                format!(
                    "no MCP server `{name}`: no specialist declares `mcp_servers` (docs/MCP.md); or give the endpoint with --url"
                )
            } else {
                format!(
                    "no MCP server `{name}`; the specialists' servers are: {}; or give an endpoint with --url",
                    names.join(", ")
                )
            })
            .into())
        }
    }
}

/// The config's `oauth` block with the command line's flags over it.
fn oauth_of(spec: &McpServerSpec, args: &McpOAuthArgs) -> McpOAuth {
    let mut oauth = match &spec.transport {
        McpTransport::Http { oauth: Some(o), .. } => o.clone(),
        _ => McpOAuth::default(),
    };
    if args.client_id.is_some() {
        oauth.client_id.clone_from(&args.client_id);
        oauth.client_secret_env.clone_from(&args.client_secret_env);
    }
    if args.client_metadata_url.is_some() {
        oauth
            .client_metadata_url
            .clone_from(&args.client_metadata_url);
    }
    if !args.scopes.is_empty() {
        oauth.scopes.clone_from(&args.scopes);
    }
    if args.redirect_port.is_some() {
        oauth.redirect_port = args.redirect_port;
    }
    if let Some(grant) = args.grant {
        oauth.grant = grant;
    }
    oauth
}

fn http_url(spec: &McpServerSpec) -> anyhow::Result<&str> {
    match &spec.transport {
        McpTransport::Http { url, .. } => Ok(url),
        other => Err(UsageError(format!(
            "MCP server `{}` is a {} server; OAuth login is for streamable HTTP servers (`transport: http`)",
            spec.name,
            other.kind()
        ))
        .into()),
    }
}

fn token_dir() -> anyhow::Result<PathBuf> {
    fabric_config::mcp_token_dir().ok_or_else(|| {
        UsageError(
            "neither XDG_STATE_HOME nor HOME is set to an absolute path: the fabric has nowhere to keep MCP tokens".to_owned(),
        )
        .into()
    })
}

/// A specialist with just this server and every one of its tools, as a run sees them.
fn specialist_for(spec: &McpServerSpec) -> anyhow::Result<SpecialistSpec> {
    let mut specialist = fabric_config::builtin_specialists()
        .into_iter()
        .next()
        .context("the fabric has no built-in specialist to lend the server to")?;
    specialist.tools = Vec::new();
    specialist.tooling.mcp_servers = vec![spec.clone()];
    Ok(specialist)
}

fn context() -> ToolContext {
    ToolContext {
        approved: false,
        // Not a run: nothing is recorded under this id.
        run_id: RunId::parse("mcp-cli").unwrap_or_else(|_| unreachable!("a valid id")),
        workspace: std::env::current_dir().unwrap_or_default(),
        network_allowed: true,
        cancel: Default::default(),
        lineage: Default::default(),
        sampler: None,
        live: None,
    }
}

/// `SERVER TOOL [JSON]`, or `TOOL [JSON]` with `--url`.
fn call_words(
    words: &[String],
    by_url: bool,
) -> anyhow::Result<(Option<&str>, &str, Option<&str>)> {
    let word = |i: usize| words.get(i).map(String::as_str);
    match (by_url, words.len()) {
        (true, 1 | 2) => Ok((None, words[0].as_str(), word(1))),
        (false, 2 | 3) => Ok((word(0), words[1].as_str(), word(2))),
        (true, _) => Err(UsageError(
            "with --url, give `TOOL [JSON]`: the server is the URL".to_owned(),
        )
        .into()),
        (false, _) => Err(UsageError(
            "give `SERVER TOOL [JSON]`, e.g. `fabric mcp call github get_me`, or `--url URL TOOL [JSON]`".to_owned(),
        )
        .into()),
    }
}

/// The tool's arguments: a JSON object, `{}` when not given.
fn parse_arguments(text: Option<&str>) -> anyhow::Result<Value> {
    let Some(text) = text else {
        return Ok(json!({}));
    };
    match serde_json::from_str::<Value>(text) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(other) => Err(UsageError(format!(
            "the arguments must be a JSON object, e.g. '{{\"path\": \".\"}}', got {other}"
        ))
        .into()),
        Err(e) => Err(UsageError(format!(
            "the arguments are not JSON ({e}); give an object, e.g. '{{\"path\": \".\"}}'"
        ))
        .into()),
    }
}

fn print_tools(spec: &McpServerSpec, source: &McpTools, as_json: bool) -> anyhow::Result<()> {
    let tools: Vec<Arc<dyn Tool>> = source.tools();
    // The server's notices arrive as JSON, read here once into their structs.
    let skipped: Vec<Value> = source
        .take_notices()
        .into_iter()
        .filter_map(
            |n| match EventPayload::from_wire(n.kind.as_str(), n.payload) {
                EventPayload::McpServer(notice) if notice.status == McpStatus::Ready => {
                    notice.skipped
                }
                _ => None,
            },
        )
        .flatten()
        .filter_map(|skipped| serde_json::to_value(skipped).ok())
        .collect();
    if as_json {
        let listed: Vec<Value> = tools
            .iter()
            .map(|t| {
                let s = t.spec();
                json!({"name": s.name, "description": s.description, "input_schema": s.input_schema})
            })
            .collect();
        let out = json!({"server": spec.name, "tools": listed, "skipped": skipped});
        println!(
            "{}",
            serde_json::to_string_pretty(&out).context("the tools as JSON")?
        );
        return Ok(());
    }
    println!("MCP server `{}`: {} tools", spec.name, tools.len());
    for tool in &tools {
        let s = tool.spec();
        println!(
            "  {:<40} {}",
            s.name,
            crate::render::one_line(&s.description, 80)
        );
    }
    for skip in &skipped {
        println!(
            "  skipped {}: {}",
            skip["tool"].as_str().unwrap_or_default(),
            skip["reason"].as_str().unwrap_or_default()
        );
    }
    Ok(())
}

fn print_result(name: &str, result: &Value, as_json: bool) -> anyhow::Result<()> {
    if as_json {
        let out = json!({"tool": name, "result": result});
        println!(
            "{}",
            serde_json::to_string_pretty(&out).context("the result as JSON")?
        );
    } else {
        match result.as_str() {
            Some(text) => println!("{text}"),
            None => println!("{result}"),
        }
    }
    Ok(())
}

fn shown_scopes(scopes: &[String]) -> String {
    if scopes.is_empty() {
        "none named".to_owned()
    } else {
        scopes.join(" ")
    }
}

fn shown_list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
