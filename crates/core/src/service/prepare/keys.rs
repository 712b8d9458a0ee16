//! Which model key a member runs on: `--model-key` first, then the specialist's own key,
//! then the task's complexity, then the default; a key whose daily budget is spent gives way
//! to one with budget left (one a person named is refused instead).

use fabric_domain::SpecialistSpec;

use super::Preparation;
use crate::service::{DailySpent, ServiceError, TaskRequest};

impl Preparation {
    /// The key complexity routing picks for `prompt`, and why; scored once per task, used
    /// by members whose specialist names no model key.
    pub(super) fn by_complexity(&self, prompt: &str) -> Option<(String, String)> {
        let routing = self.policy.complexity.as_ref()?;
        let complexity = crate::recruit::complexity::score(prompt);
        let (key, relation) = if complexity.score >= routing.threshold {
            (routing.complex.clone(), "≥")
        } else {
            (routing.simple.clone(), "<")
        };
        let why = format!(
            "complexity {} {relation} {}: {key} ({})",
            complexity.score,
            routing.threshold,
            complexity.explain()
        );
        Some((key, why))
    }

    /// The member's model key and, when routing chose it, why.
    pub(super) async fn model_key(
        &self,
        specialist: &SpecialistSpec,
        request: &TaskRequest,
        by_complexity: &Option<(String, String)>,
    ) -> Result<(String, Option<String>), ServiceError> {
        let (key, routed) = self.first_choice(specialist, request, by_complexity);
        // A continued run goes on with the keys it recorded.
        if request.continued {
            return Ok((key, routed));
        }
        let Some((key, why)) = self.instead_of(&key, request.model_key.is_some()).await? else {
            return Ok((key, routed));
        };
        let why = match routed {
            Some(before) => format!("{before}; {why}"),
            None => why,
        };
        Ok((key, Some(why)))
    }

    /// The member's key before daily budgets have their say, and why routing chose it.
    fn first_choice(
        &self,
        specialist: &SpecialistSpec,
        request: &TaskRequest,
        by_complexity: &Option<(String, String)>,
    ) -> (String, Option<String>) {
        match (&request.model_key, &specialist.model_key, by_complexity) {
            (Some(key), _, _) | (None, Some(key), _) => (key.clone(), None),
            (None, None, Some((key, why))) => (key.clone(), Some(why.clone())),
            (None, None, None) => (self.policy.default_model_key.clone(), None),
        }
    }

    /// The model keys a request runs on for certain, known before anything is prepared: the
    /// key it names, or its pack's keys when no daily budget can move a member to another
    /// key. Their API keys are checked before the run is prepared (issue #40); the keys
    /// routing picks are checked as each member is prepared.
    pub(super) fn certain_keys(&self, request: &TaskRequest) -> Vec<String> {
        if let Some(key) = &request.model_key {
            return vec![key.clone()];
        }
        if !self.ports.daily.is_off() {
            return Vec::new();
        }
        let by_complexity = self.by_complexity(&request.prompt);
        request
            .specialists
            .iter()
            .filter_map(|id| self.policy.specialist(id))
            .map(|s| self.first_choice(s, request, &by_complexity).0)
            .collect()
    }

    /// Refuses a model key whose API key variable is unset, naming the variable and the fix:
    /// a configuration error, not a model failure (issue #40).
    pub(super) fn api_key_of(&self, key: &str, request: &TaskRequest) -> Result<(), ServiceError> {
        match self.ports.chats.missing_api_key(key) {
            Some(fix) if !super::offline(request) => Err(ServiceError::Misconfigured {
                key: key.to_owned(),
                fix,
            }),
            _ => Ok(()),
        }
    }

    /// When `key`'s daily budget is spent: the key to use instead and why (complexity
    /// routing's `simple` key, else the default key, whichever has budget left), or the
    /// refusal when no key is left or the person `named` the key. `None`: `key` may be used.
    async fn instead_of(
        &self,
        key: &str,
        named: bool,
    ) -> Result<Option<(String, String)>, ServiceError> {
        let daily = &self.ports.daily;
        if daily.is_off() {
            return Ok(None);
        }
        let Some(why) = daily.spent(key).await.map_err(ServiceError::Store)? else {
            return Ok(None);
        };
        if named {
            return Err(ServiceError::BudgetSpent(DailySpent::Named {
                why,
                zone: daily.zone_name(),
                key: key.to_owned(),
            }));
        }
        let candidates = self
            .policy
            .complexity
            .as_ref()
            .map(|r| r.simple.clone())
            .into_iter()
            .chain(std::iter::once(self.policy.default_model_key.clone()));
        for candidate in candidates.filter(|c| c != key) {
            if daily
                .spent(&candidate)
                .await
                .map_err(ServiceError::Store)?
                .is_none()
            {
                return Ok(Some((
                    candidate.clone(),
                    format!("{why}: `{candidate}` instead"),
                )));
            }
        }
        Err(ServiceError::BudgetSpent(DailySpent::NoneLeft {
            why,
            zone: daily.zone_name(),
        }))
    }
}
