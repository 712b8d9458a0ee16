//! The MCP servers an editor hands a session (`session/new`'s `mcpServers`: stdio, HTTP and
//! SSE), as the fabric's own server specs: each turn's run starts them and offers their tools.

use fabric_domain::{
    DEFAULT_MCP_CALL_TIMEOUT_S, DEFAULT_MCP_STARTUP_TIMEOUT_S, McpElicitation, McpServerSpec,
    McpTransport,
};
use serde_json::Value;
use std::collections::BTreeMap;

use crate::rpc::RpcError;

/// The servers of `session/new`'s `mcpServers` (absent: none).
pub(crate) fn servers(params: &Value) -> Result<Vec<McpServerSpec>, RpcError> {
    let Some(list) = params.get("mcpServers") else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| RpcError::invalid_params("`mcpServers` must be an array"))?;
    let mut specs: Vec<McpServerSpec> = Vec::new();
    for server in list {
        let spec = server_spec(server)?;
        if specs.iter().any(|s| s.name == spec.name) {
            return Err(RpcError::invalid_params(format!(
                "two MCP servers are named `{}` (after the fabric's spelling of names: letters, digits, `-`, single `_`); give them different names",
                spec.name
            )));
        }
        specs.push(spec);
    }
    Ok(specs)
}

fn server_spec(server: &Value) -> Result<McpServerSpec, RpcError> {
    let field = |key: &str| {
        server.get(key).and_then(Value::as_str).ok_or_else(|| {
            RpcError::invalid_params(format!("an MCP server needs `{key}` as a string"))
        })
    };
    let name = tool_name(field("name")?);
    let transport = match server.get("type").and_then(Value::as_str) {
        Some("http") => McpTransport::Http {
            url: field("url")?.to_owned(),
            headers: pairs(server.get("headers"))?,
            bearer_token_env: None,
            oauth: None,
        },
        Some("sse") => McpTransport::Sse {
            url: field("url")?.to_owned(),
            headers: pairs(server.get("headers"))?,
            bearer_token_env: None,
        },
        // A stdio server has no `type` in ACP v1.
        None | Some("stdio") => McpTransport::Stdio {
            command: field("command")?.to_owned(),
            args: strings(server.get("args"))?,
            env: pairs(server.get("env"))?,
            pass_env: Vec::new(),
            cwd: None,
        },
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "an MCP server of type `{}` is not taken: stdio, http or sse",
                fabric_domain::visible_line(other)
            )));
        }
    };
    Ok(McpServerSpec {
        name,
        transport,
        required: false,
        startup_timeout_s: DEFAULT_MCP_STARTUP_TIMEOUT_S,
        call_timeout_s: DEFAULT_MCP_CALL_TIMEOUT_S,
        sampling: true,
        elicitation: McpElicitation::default(),
        pool: true,
    })
}

/// A server's name as the fabric spells it in `mcp__<server>__<tool>`: lower-case letters,
/// digits and `-`, anything else a `-`.
fn tool_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.trim().chars() {
        let c = c.to_ascii_lowercase();
        let c = if c.is_ascii_alphanumeric() { c } else { '-' };
        if !(c == '-' && out.ends_with('-')) {
            out.push(c);
        }
    }
    let out = out.trim_matches('-').to_owned();
    if out.is_empty() {
        "editor".to_owned()
    } else {
        out
    }
}

/// ACP's `[{name, value}]` (environment variables, headers) as a map.
fn pairs(list: Option<&Value>) -> Result<BTreeMap<String, String>, RpcError> {
    let mut map = BTreeMap::new();
    for pair in list.and_then(Value::as_array).into_iter().flatten() {
        match (
            pair.get("name").and_then(Value::as_str),
            pair.get("value").and_then(Value::as_str),
        ) {
            (Some(name), Some(value)) => {
                map.insert(name.to_owned(), value.to_owned());
            }
            _ => {
                return Err(RpcError::invalid_params(
                    "an MCP server's `env` and `headers` are lists of {name, value} strings",
                ));
            }
        }
    }
    Ok(map)
}

fn strings(list: Option<&Value>) -> Result<Vec<String>, RpcError> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| RpcError::invalid_params("an MCP server's `args` must be strings"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn issue_44_an_editors_mcp_servers_become_server_specs() {
        let specs = servers(&json!({"mcpServers": [
            {"name": "Everything Server", "command": "npx", "args": ["-y", "x"], "env": [{"name": "A", "value": "1"}]},
            {"type": "http", "name": "gh", "url": "https://example.com/mcp", "headers": []},
        ]}));
        let specs = specs.unwrap_or_default();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].name, "everything-server");
        assert!(matches!(&specs[0].transport, McpTransport::Stdio { env, .. } if env["A"] == "1"));
        assert!(
            matches!(&specs[1].transport, McpTransport::Http { url, .. } if url.ends_with("/mcp"))
        );
        let twice = servers(&json!({"mcpServers": [
            {"name": "a", "command": "x", "args": [], "env": []},
            {"name": "A", "command": "y", "args": [], "env": []},
        ]}));
        assert!(twice.is_err_and(|e| e.code == -32602));
    }
}
