//! The MCP client as the person a `run_task` run asks (issue #42): a question or an approval
//! goes to the client as an elicitation form, where the client declared it can answer one.

use async_trait::async_trait;
use fabric_core::ports::{Person, Reply};
use fabric_domain::runlog::{Decision, InputAnswered, InputKind, InputRequired};
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{Peer, RoleServer};
use serde_json::Value;

/// The client that called `run_task`, asked by elicitation.
pub(crate) struct Elicitor {
    peer: Peer<RoleServer>,
}

impl Elicitor {
    /// The client as a person to ask, when it declared it can answer a form.
    pub(crate) fn of(peer: &Peer<RoleServer>) -> Option<Self> {
        peer.peer_info()
            .is_some_and(|info| info.capabilities.elicitation.is_some())
            .then(|| Self { peer: peer.clone() })
    }
}

/// The form a request is asked as: an answer, or an approval's decision and reason.
fn form(request: &InputRequired) -> ElicitationSchema {
    let builder = ElicitationSchema::builder();
    let builder = match request.input {
        InputKind::Question => builder.required_string("answer"),
        InputKind::Approval => builder
            .required_string("decision")
            .optional_string("reason"),
    };
    // Only string properties, none twice: the checks of `build` hold by construction.
    builder.build_unchecked()
}

/// The question as the client shows it, with the choices and how to decide.
fn message(request: &InputRequired) -> String {
    let mut text = request.question.clone();
    if !request.choices.is_empty() {
        text.push_str(&format!(" (choices: {})", request.choices.join(", ")));
    }
    if request.input == InputKind::Approval {
        text.push_str(" Answer `decision` with approve, approve_for_run or deny.");
    }
    text
}

#[async_trait]
impl Person for Elicitor {
    async fn ask(&self, request: &InputRequired) -> Reply {
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message(request),
            requested_schema: form(request),
        };
        let result = match self.peer.create_elicitation(params).await {
            Ok(result) => result,
            Err(e) => {
                tracing::warn!(error = %e, "the MCP client did not answer an elicitation");
                return Reply::Unavailable(format!("the MCP client could not be asked: {e}"));
            }
        };
        if result.action != ElicitationAction::Accept {
            return Reply::Unavailable(
                "the person at the MCP client declined to answer".to_owned(),
            );
        }
        let field = |name: &str| {
            result
                .content
                .as_ref()
                .and_then(|c| c.get(name))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (answer, decision) = match request.input {
            InputKind::Question => (field("answer"), None),
            InputKind::Approval => match Decision::parse(&field("decision")) {
                Some(decision) => (field("reason"), Some(decision)),
                None => {
                    return Reply::Unavailable(
                        "the MCP client's answer to an approval decided nothing".to_owned(),
                    );
                }
            },
        };
        Reply::Answered(InputAnswered {
            call_id: request.call_id.clone(),
            answer,
            decision,
            by: "mcp".to_owned(),
        })
    }
}
