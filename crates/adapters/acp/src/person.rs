//! The person at the editor: a turn's approvals and questions asked as ACP
//! `session/request_permission` (docs/ACP.md).

use async_trait::async_trait;
use fabric_core::ports::{Person, Reply};
use fabric_domain::runlog::{Decision, InputAnswered, InputKind, InputRequired};
use serde_json::{Value, json};
use std::sync::Arc;

use crate::rpc::Peer;

/// Who answered, as `input_answered.by` records it.
const BY: &str = "acp";

/// Asks the editor of one session.
pub(crate) struct AtEditor {
    peer: Arc<Peer>,
    session: String,
}

impl AtEditor {
    pub(crate) fn new(peer: Arc<Peer>, session: String) -> Self {
        Self { peer, session }
    }
}

#[async_trait]
impl Person for AtEditor {
    async fn ask(&self, request: &InputRequired) -> Reply {
        let Some(options) = options(request) else {
            return Reply::Unavailable(NO_CHOICES.to_owned());
        };
        let params = json!({
            "sessionId": self.session,
            "toolCall": {
                "toolCallId": request.call_id,
                "title": fabric_domain::visible_line(&request.question),
                "status": "pending",
                "rawInput": request.arguments,
            },
            "options": options,
        });
        match self
            .peer
            .request("session/request_permission", params)
            .await
        {
            Ok(answer) => reply(request, &answer),
            Err(e) => Reply::Unavailable(format!(
                "the editor did not answer the request for permission: {}",
                e.message
            )),
        }
    }
}

/// What the model is told of a question without choices.
const NO_CHOICES: &str =
    "the person at the editor can only pick one of the answers offered: ask again with `choices`";

/// The options offered: an approval's three decisions, a question's choices; `None` for a
/// question without choices (ACP v1 takes no free text).
fn options(request: &InputRequired) -> Option<Vec<Value>> {
    match request.input {
        InputKind::Approval => Some(vec![
            option(Decision::Approve.as_str(), "Allow once", "allow_once"),
            option(
                Decision::ApproveForRun.as_str(),
                "Allow always (this turn)",
                "allow_always",
            ),
            option(Decision::Deny.as_str(), "Reject", "reject_once"),
        ]),
        InputKind::Question if request.choices.is_empty() => None,
        InputKind::Question => Some(
            request
                .choices
                .iter()
                .enumerate()
                .map(|(i, choice)| {
                    option(
                        &format!("choice-{i}"),
                        &fabric_domain::visible_line(choice),
                        "allow_once",
                    )
                })
                .collect(),
        ),
    }
}

fn option(id: &str, name: &str, kind: &str) -> Value {
    json!({"optionId": id, "name": name, "kind": kind})
}

/// The editor's answer to `request`.
fn reply(request: &InputRequired, answer: &Value) -> Reply {
    let outcome = &answer["outcome"];
    let chosen = match (outcome["outcome"].as_str(), outcome["optionId"].as_str()) {
        (Some("selected"), Some(id)) => id,
        _ => {
            return Reply::Unavailable("the person at the editor cancelled the request".to_owned());
        }
    };
    let answered = |answer: String, decision| {
        Reply::Answered(InputAnswered {
            call_id: request.call_id.clone(),
            answer,
            decision,
            by: BY.to_owned(),
        })
    };
    match request.input {
        InputKind::Approval => match Decision::parse(chosen) {
            Some(Decision::Deny) => answered(
                "the person at the editor rejected it".to_owned(),
                Some(Decision::Deny),
            ),
            Some(decision) => answered(String::new(), Some(decision)),
            None => Reply::Unavailable(format!("the editor chose no option offered ({chosen})")),
        },
        InputKind::Question => chosen
            .strip_prefix("choice-")
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| request.choices.get(i))
            .map_or_else(
                || Reply::Unavailable(format!("the editor chose no option offered ({chosen})")),
                |choice| answered(choice.clone(), None),
            ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval() -> InputRequired {
        InputRequired {
            call_id: "c1".to_owned(),
            input: InputKind::Approval,
            question: "may shell run?".to_owned(),
            choices: Vec::new(),
            tool: Some("shell".to_owned()),
            arguments: None,
            expires_at: None,
        }
    }

    #[test]
    fn issue_44_an_editors_choice_is_the_approvals_decision() {
        let picked = |id: &str| json!({"outcome": {"outcome": "selected", "optionId": id}});
        let decided = |answer: &Value| match reply(&approval(), answer) {
            Reply::Answered(a) => a.decision,
            _ => None,
        };
        assert_eq!(decided(&picked("approve")), Some(Decision::Approve));
        assert_eq!(
            decided(&picked("approve_for_run")),
            Some(Decision::ApproveForRun)
        );
        assert_eq!(decided(&picked("deny")), Some(Decision::Deny));
        let cancelled = reply(&approval(), &json!({"outcome": {"outcome": "cancelled"}}));
        assert!(matches!(cancelled, Reply::Unavailable(_)));
    }

    #[test]
    fn issue_44_a_question_without_choices_is_not_asked_of_the_editor() {
        let mut question = approval();
        question.input = InputKind::Question;
        assert!(options(&question).is_none());
        question.choices = vec!["red".to_owned(), "blue".to_owned()];
        let answer = json!({"outcome": {"outcome": "selected", "optionId": "choice-1"}});
        assert!(matches!(reply(&question, &answer), Reply::Answered(a) if a.answer == "blue"));
    }
}
