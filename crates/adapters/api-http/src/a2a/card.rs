//! The agent card (`GET /.well-known/agent-card.json`): who this fabric is, one skill per
//! specialist, the JSON-RPC and HTTP+JSON interfaces, and the bearer scheme when the server
//! has a token.

use serde_json::{Value, json};

/// The protocol version this server speaks.
pub(crate) const PROTOCOL_VERSION: &str = "1.0";

/// What the binary tells the card about this fabric.
#[derive(Debug, Clone, Default)]
pub struct AgentCardInfo {
    /// The agent's name (`agent-fabric`).
    pub name: String,
    /// The fabric's version.
    pub version: String,
    /// One line on what it does.
    pub description: String,
    /// One skill per specialist.
    pub skills: Vec<A2aSkill>,
}

/// A specialist as an A2A skill.
#[derive(Debug, Clone, Default)]
pub struct A2aSkill {
    /// The specialist's id; a message that names it in `metadata.specialist` goes to it.
    pub id: String,
    /// Its one-line description.
    pub description: String,
    /// Its keywords, as tags.
    pub tags: Vec<String>,
    /// Example prompts.
    pub examples: Vec<String>,
}

/// The card, with the interface at `base` (`http://host:port`, as the client reached us).
pub(crate) fn card(info: &AgentCardInfo, base: &str, token: bool) -> Value {
    let skills: Vec<Value> = info
        .skills
        .iter()
        .map(|s| {
            json!({
                "id": s.id, "name": s.id, "description": s.description,
                "tags": s.tags, "examples": s.examples,
                "inputModes": ["text/plain", "application/json"],
                "outputModes": ["text/plain", "application/json"],
            })
        })
        .collect();
    let mut card = json!({
        "name": info.name,
        "description": info.description,
        "version": info.version,
        "supportedInterfaces": [
            {
                "url": format!("{base}/a2a"),
                "protocolBinding": "JSONRPC",
                "protocolVersion": PROTOCOL_VERSION,
            },
            {
                "url": format!("{base}{}", super::rest::PREFIX),
                "protocolBinding": "HTTP+JSON",
                "protocolVersion": PROTOCOL_VERSION,
            },
        ],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": skills,
    });
    if token {
        card["securitySchemes"] = json!({"bearer": {"httpAuthSecurityScheme": {
            "scheme": "Bearer",
            "description": "The token of `fabric serve` (`server.token`), as `Authorization: Bearer <token>`.",
        }}});
        card["securityRequirements"] = json!([{"schemes": {"bearer": {"list": []}}}]);
    }
    card
}
