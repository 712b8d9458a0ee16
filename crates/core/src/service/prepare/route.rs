//! Who works on a request: the specialists it names (`--pack`), else routing (keywords, or
//! the routing model with keyword fallback).

use fabric_domain::Routing;
use fabric_domain::runlog::RoutingMethod;
use std::time::Duration;

use super::Preparation;
use crate::recruit::{self, LlmRouting, Roster, RoutingCall};
use crate::service::{ServiceError, TaskRequest};

/// Who works, how and why they were chosen, and the routing model's call if one was made.
pub(super) type Recruited = (Roster, Option<RoutingCall>);

impl Preparation {
    /// `--pack` names the specialists (one, or a task force in the order given); without it
    /// the router decides.
    pub(super) async fn recruit(&self, request: &TaskRequest) -> Result<Recruited, ServiceError> {
        if !request.specialists.is_empty() {
            let mut ids: Vec<String> = Vec::new();
            for id in &request.specialists {
                if ids.contains(id) {
                    return Err(super::InvalidRequest::PackTwice { id: id.clone() }.into());
                }
                ids.push(id.clone());
            }
            let reason = format!("--pack {}", ids.join(","));
            let recruitment = Roster::explicit(ids, reason);
            return Ok((recruitment, None));
        }
        let policy = &self.policy;
        let (decision, call) = match policy.routing {
            Routing::Keyword => {
                recruit::route(
                    &request.prompt,
                    &policy.specialists,
                    &policy.default_specialist,
                    None,
                )
                .await
            }
            Routing::Llm => self.llm_route(&request.prompt).await,
        };
        Ok((decision, call))
    }

    /// LLM routing on the routing model's own endpoint and model; any failure to even set
    /// it up is a fallback to keywords like any other routing failure.
    async fn llm_route(&self, prompt: &str) -> (Roster, Option<RoutingCall>) {
        let policy = &self.policy;
        let key = &policy.routing_model_key;
        let keywords = |why: String| {
            let mut d =
                recruit::route_by_keywords(prompt, &policy.specialists, &policy.default_specialist);
            d.routing_method = RoutingMethod::KeywordFallback;
            d.reason = format!("{why}; keyword routing: {}", d.reason);
            (d, None)
        };
        let Some(model) = policy.models.get(key) else {
            return keywords(format!("no routing model `{key}`"));
        };
        let setup = async {
            let choice = self.resolve(key, model).await?;
            let chat = self.ports.chats.chat(key)?;
            Ok::<_, crate::ports::SetupError>((choice, chat))
        };
        let (choice, chat) = match setup.await {
            Ok(ok) => ok,
            Err(e) => return keywords(format!("routing model `{key}` unusable ({e})")),
        };
        let routing = LlmRouting {
            model_key: key.clone(),
            model: choice.model,
            timeout: Duration::from_secs(model.timeout_s.min(60)),
        };
        recruit::route(
            prompt,
            &policy.specialists,
            &policy.default_specialist,
            Some((chat.as_ref(), &routing)),
        )
        .await
    }
}
