//! The `mcp_servers` key of a specialist, checked.

use fabric_domain::{
    DEFAULT_MCP_CALL_TIMEOUT_S, DEFAULT_MCP_STARTUP_TIMEOUT_S, McpElicitation, McpOAuth,
    McpOAuthGrant, McpServerSpec, McpTransport,
};
use serde::Deserialize;
use std::collections::BTreeMap;

use crate::dirs::expand_home;

/// One `mcp_servers` entry as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcpServer {
    pub(crate) name: Option<String>,
    pub(crate) transport: Option<String>,
    pub(crate) command: Option<String>,
    pub(crate) args: Option<Vec<String>>,
    pub(crate) env: Option<BTreeMap<String, String>>,
    pub(crate) pass_env: Option<Vec<String>>,
    pub(crate) cwd: Option<String>,
    pub(crate) url: Option<String>,
    pub(crate) headers: Option<BTreeMap<String, String>>,
    pub(crate) bearer_token_env: Option<String>,
    pub(crate) oauth: Option<RawMcpOAuth>,
    pub(crate) required: Option<bool>,
    pub(crate) startup_timeout_s: Option<u64>,
    pub(crate) call_timeout_s: Option<u64>,
    pub(crate) sampling: Option<bool>,
    pub(crate) elicitation: Option<McpElicitation>,
    pub(crate) pool: Option<bool>,
}

/// The `oauth` block of an http server as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcpOAuth {
    pub(crate) client_id: Option<String>,
    pub(crate) client_secret_env: Option<String>,
    pub(crate) client_metadata_url: Option<String>,
    pub(crate) scopes: Option<Vec<String>>,
    pub(crate) redirect_port: Option<u16>,
    pub(crate) grant: Option<McpOAuthGrant>,
}

/// `(key, problem)`: the key is relative to the entry, e.g. `mcp_servers[0].url`.
type Problem = (String, String);

/// Checks every entry: names, transports, the fields each transport needs and refuses,
/// timeouts, and that no two servers share a name.
pub(crate) fn check_servers(raw: Vec<RawMcpServer>) -> Result<Vec<McpServerSpec>, Problem> {
    let mut out: Vec<McpServerSpec> = Vec::new();
    for (i, server) in raw.into_iter().enumerate() {
        let at = |field: &str| format!("mcp_servers[{i}].{field}");
        let spec = check_server(server, &at)?;
        if out.iter().any(|s| s.name == spec.name) {
            return Err((
                at("name"),
                format!(
                    "two servers are named `{}`; names must be unique",
                    spec.name
                ),
            ));
        }
        out.push(spec);
    }
    Ok(out)
}

fn check_server(s: RawMcpServer, at: &dyn Fn(&str) -> String) -> Result<McpServerSpec, Problem> {
    let name = s.name.ok_or_else(|| {
        (
            at("name"),
            "every server needs a `name`, e.g. `github`".to_owned(),
        )
    })?;
    let valid = !name.is_empty()
        && !name.contains("__")
        && !name.starts_with('_')
        && !name.ends_with('_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid {
        return Err((
            at("name"),
            format!(
                "`{name}` is not a server name: use letters, digits, `-` and single `_` (tools are named `mcp__<server>__<tool>`)"
            ),
        ));
    }
    let kind = match (s.transport.as_deref(), &s.command, &s.url) {
        (Some(t), _, _) => t.to_owned(),
        (None, Some(_), None) => "stdio".to_owned(),
        (None, None, Some(_)) => "http".to_owned(),
        _ => {
            return Err((
                at("transport"),
                "say `transport: stdio` (with `command`) or `transport: http` (with `url`)"
                    .to_owned(),
            ));
        }
    };
    let transport = match kind.as_str() {
        "stdio" => {
            for (field, set) in [
                ("url", s.url.is_some()),
                ("headers", s.headers.is_some()),
                ("bearer_token_env", s.bearer_token_env.is_some()),
                ("oauth", s.oauth.is_some()),
            ] {
                if set {
                    return Err((
                        at(field),
                        format!(
                            "`{field}` belongs to `transport: http`; a stdio server takes command, args, env, pass_env and cwd"
                        ),
                    ));
                }
            }
            let command = s.command.filter(|c| !c.trim().is_empty()).ok_or_else(|| {
                (
                    at("command"),
                    "a stdio server needs `command`, e.g. `npx`".to_owned(),
                )
            })?;
            let pass_env = s.pass_env.unwrap_or_default();
            check_env_names(&pass_env, &at("pass_env"))?;
            McpTransport::Stdio {
                command,
                args: s.args.unwrap_or_default(),
                env: s.env.unwrap_or_default(),
                pass_env,
                cwd: s.cwd.map(|c| expand_home(&c)),
            }
        }
        "http" | "sse" => {
            for (field, set) in [
                ("command", s.command.is_some()),
                ("args", s.args.is_some()),
                ("env", s.env.is_some()),
                ("pass_env", s.pass_env.is_some()),
                ("cwd", s.cwd.is_some()),
            ] {
                if set {
                    return Err((
                        at(field),
                        format!(
                            "`{field}` belongs to `transport: stdio`; an http server takes url, headers and bearer_token_env"
                        ),
                    ));
                }
            }
            let url = s.url.ok_or_else(|| {
                (
                    at("url"),
                    "an http server needs `url`, e.g. `http://localhost:3000/mcp`".to_owned(),
                )
            })?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err((
                    at("url"),
                    format!("must start with http:// or https://, got `{url}`"),
                ));
            }
            if let Some(name) = &s.bearer_token_env {
                check_env_names(std::slice::from_ref(name), &at("bearer_token_env"))?;
            }
            let headers = s.headers.unwrap_or_default();
            let oauth = s.oauth.map(|o| check_oauth(o, &at)).transpose()?;
            if kind == "sse" {
                if oauth.is_some() {
                    return Err((
                        at("oauth"),
                        "`oauth` belongs to `transport: http` (streamable HTTP); a legacy sse server takes headers and bearer_token_env".to_owned(),
                    ));
                }
                McpTransport::Sse {
                    url,
                    headers,
                    bearer_token_env: s.bearer_token_env,
                }
            } else {
                if oauth.is_some() && s.bearer_token_env.is_some() {
                    return Err((
                        at("oauth"),
                        "a server takes either `bearer_token_env` (a token you manage) or `oauth` (tokens from `fabric mcp login`), not both".to_owned(),
                    ));
                }
                McpTransport::Http {
                    url,
                    headers,
                    bearer_token_env: s.bearer_token_env,
                    oauth,
                }
            }
        }
        other => {
            return Err((
                at("transport"),
                format!("must be `stdio` or `http`, got `{other}`"),
            ));
        }
    };
    let startup_timeout_s = range(
        s.startup_timeout_s.unwrap_or(DEFAULT_MCP_STARTUP_TIMEOUT_S),
        1,
        600,
        &at("startup_timeout_s"),
    )?;
    let call_timeout_s = range(
        s.call_timeout_s.unwrap_or(DEFAULT_MCP_CALL_TIMEOUT_S),
        1,
        3600,
        &at("call_timeout_s"),
    )?;
    Ok(McpServerSpec {
        name,
        transport,
        required: s.required.unwrap_or(false),
        startup_timeout_s,
        call_timeout_s,
        sampling: s.sampling.unwrap_or(true),
        elicitation: s.elicitation.unwrap_or_default(),
        pool: s.pool.unwrap_or(true),
    })
}

/// Checks an `oauth` block: a secret only with a client id, an HTTPS metadata document,
/// scopes without blanks, a port that is not 0.
fn check_oauth(o: RawMcpOAuth, at: &dyn Fn(&str) -> String) -> Result<McpOAuth, Problem> {
    if o.client_secret_env.is_some() && o.client_id.is_none() {
        return Err((
            at("oauth.client_secret_env"),
            "a client secret goes with a registered `client_id`; set `oauth.client_id` too"
                .to_owned(),
        ));
    }
    if let Some(name) = &o.client_secret_env {
        check_env_names(std::slice::from_ref(name), &at("oauth.client_secret_env"))?;
    }
    if let Some(url) = o.client_metadata_url.as_deref()
        && !url.starts_with("https://")
    {
        return Err((
            at("oauth.client_metadata_url"),
            format!("a client ID metadata document is served over https://, got `{url}`"),
        ));
    }
    let scopes = o.scopes.unwrap_or_default();
    if let Some(bad) = scopes
        .iter()
        .find(|s| s.is_empty() || s.contains(char::is_whitespace))
    {
        return Err((
            at("oauth.scopes"),
            format!("`{bad}` is not a scope: one word per entry, e.g. [repo, read:user]"),
        ));
    }
    let grant = o.grant.unwrap_or_default();
    if grant == McpOAuthGrant::ClientCredentials
        && (o.client_id.is_none() || o.client_secret_env.is_none())
    {
        return Err((
            at("oauth.grant"),
            "`client_credentials` exchanges a registered client's id and secret for a token: set `oauth.client_id` and `oauth.client_secret_env` too".to_owned(),
        ));
    }
    if o.redirect_port == Some(0) {
        return Err((
            at("oauth.redirect_port"),
            "leave `redirect_port` out for any free port; 0 is not a port to register".to_owned(),
        ));
    }
    Ok(McpOAuth {
        client_id: o.client_id,
        client_secret_env: o.client_secret_env,
        client_metadata_url: o.client_metadata_url,
        scopes,
        redirect_port: o.redirect_port,
        grant,
    })
}

fn check_env_names(names: &[String], at: &str) -> Result<(), Problem> {
    for name in names {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err((
                at.to_owned(),
                format!("`{name}` is not the name of an environment variable"),
            ));
        }
        if name.starts_with("LD_") || name.starts_with("DYLD_") {
            return Err((
                at.to_owned(),
                format!("`{name}` may not be passed: loader variables inject code into the server"),
            ));
        }
    }
    Ok(())
}

fn range(v: u64, min: u64, max: u64, at: &str) -> Result<u64, Problem> {
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err((
            at.to_owned(),
            format!("must be between {min} and {max}, got {v}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(f: impl FnOnce(&mut RawMcpServer)) -> RawMcpServer {
        let mut s = RawMcpServer {
            name: Some("fs".into()),
            command: Some("npx".into()),
            ..RawMcpServer::default()
        };
        f(&mut s);
        s
    }

    #[test]
    fn stdio_and_http_servers_are_checked_field_by_field() {
        let ok = check_servers(vec![server(|_| {})]).unwrap_or_default();
        assert_eq!(ok[0].transport.kind(), "stdio");
        assert_eq!(ok[0].startup_timeout_s, DEFAULT_MCP_STARTUP_TIMEOUT_S);
        let http = check_servers(vec![server(|s| {
            s.command = None;
            s.url = Some("https://x/mcp".into());
            s.bearer_token_env = Some("TOKEN".into());
        })])
        .unwrap_or_default();
        assert_eq!(http[0].transport.kind(), "http");
        let cases: Vec<(RawMcpServer, &str)> = vec![
            (
                server(|s| s.name = Some("a__b".into())),
                "mcp_servers[0].name",
            ),
            (
                server(|s| {
                    s.transport = Some("stdio".into());
                    s.url = Some("http://x".into());
                }),
                "mcp_servers[0].url",
            ),
            (
                server(|s| s.transport = Some("ws".into())),
                "mcp_servers[0].transport",
            ),
            (
                server(|s| s.startup_timeout_s = Some(0)),
                "mcp_servers[0].startup_timeout_s",
            ),
            (
                server(|s| s.pass_env = Some(vec!["LD_PRELOAD".into()])),
                "mcp_servers[0].pass_env",
            ),
            (
                server(|s| {
                    s.command = None;
                    s.transport = Some("http".into());
                    s.url = Some("ftp://x".into());
                }),
                "mcp_servers[0].url",
            ),
        ];
        for (raw, key) in cases {
            let err = check_servers(vec![raw]).err().unwrap_or_default();
            assert_eq!(err.0, key, "{}", err.1);
        }
        let dup = check_servers(vec![server(|_| {}), server(|_| {})])
            .err()
            .unwrap_or_default();
        assert!(dup.1.contains("unique"), "{}", dup.1);
    }

    fn http(f: impl FnOnce(&mut RawMcpOAuth)) -> RawMcpServer {
        let mut oauth = RawMcpOAuth::default();
        f(&mut oauth);
        server(|s| {
            s.command = None;
            s.url = Some("https://x/mcp".into());
            s.oauth = Some(oauth);
        })
    }

    #[test]
    fn an_oauth_block_is_checked_and_defaults_to_registration() {
        let none = check_servers(vec![server(|s| {
            s.command = None;
            s.url = Some("https://x/mcp".into());
        })])
        .unwrap_or_default();
        assert!(matches!(
            &none[0].transport,
            McpTransport::Http { oauth: None, .. }
        ));
        let set = check_servers(vec![http(|o| {
            o.client_id = Some("fabric".into());
            o.client_secret_env = Some("SECRET".into());
            o.scopes = Some(vec!["repo".into()]);
            o.redirect_port = Some(8976);
        })])
        .unwrap_or_default();
        let McpTransport::Http {
            oauth: Some(oauth), ..
        } = &set[0].transport
        else {
            panic!("no oauth block: {set:?}");
        };
        assert_eq!(oauth.client_id.as_deref(), Some("fabric"));
        assert_eq!(oauth.scopes, ["repo"]);
        assert_eq!(oauth.redirect_port, Some(8976));
        let cases: Vec<(RawMcpServer, &str)> = vec![
            (
                http(|o| o.client_secret_env = Some("SECRET".into())),
                "mcp_servers[0].oauth.client_secret_env",
            ),
            (
                http(|o| o.scopes = Some(vec!["read write".into()])),
                "mcp_servers[0].oauth.scopes",
            ),
            (
                http(|o| o.client_metadata_url = Some("http://x/c.json".into())),
                "mcp_servers[0].oauth.client_metadata_url",
            ),
            (
                http(|o| o.redirect_port = Some(0)),
                "mcp_servers[0].oauth.redirect_port",
            ),
            (
                http(|o| {
                    o.grant = Some(McpOAuthGrant::ClientCredentials);
                    o.client_id = Some("svc".into());
                }),
                "mcp_servers[0].oauth.grant",
            ),
            (
                {
                    let mut s = http(|_| {});
                    s.bearer_token_env = Some("TOKEN".into());
                    s
                },
                "mcp_servers[0].oauth",
            ),
            (
                server(|s| s.oauth = Some(RawMcpOAuth::default())),
                "mcp_servers[0].oauth",
            ),
        ];
        for (raw, key) in cases {
            let err = check_servers(vec![raw]).err().unwrap_or_default();
            assert_eq!(err.0, key, "{}", err.1);
        }
    }
}
