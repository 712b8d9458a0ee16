//! The cloud model a step falls back to, and when (seed 000 ADR-008): a leaf, shared by the
//! loop ([`crate::engine`]) and the quality gate ([`crate::gate`]), which both send steps to
//! it, so neither imports the other for it.

use fabric_domain::{FallbackPolicy, FallbackReason, runlog};
use std::sync::Arc;

use crate::budget::RunBudget;
use crate::params::ModelParams;
use crate::ports::{ChatClient, StoreError};
use crate::recorder::Recorder;

/// A stronger model a step goes to when the local one fails in a way it may fix (seed 000
/// ADR-008: by quality, never by a connection failure), up to a number of times per run
/// tree: the configuration's [`FallbackPolicy`] made ready by preparation, with its client
/// and how it is asked.
pub struct Fallback {
    /// Its client (metered against its key's daily budget).
    pub chat: Arc<dyn ChatClient>,
    /// Its model.
    pub model: ModelParams,
    /// Its key, when steps go to it, and how often.
    pub policy: FallbackPolicy,
}

impl Fallback {
    /// Takes one fallback from the allowance of the run's tree (`tree`, which counts the
    /// fallbacks of its members, critics and delegated children together), when the cloud
    /// model may be asked (its daily budget is not spent).
    pub(crate) fn take(&self, tree: &RunBudget) -> bool {
        if let Some(why) = self.chat.unavailable() {
            tracing::debug!(
                model_key = self.policy.model_key,
                "no cloud fallback: {why}"
            );
            return false;
        }
        tree.take_fallback(self.policy.max_per_run)
    }
}

/// Records that a step goes to the cloud model, and why.
pub(crate) async fn record_fallback(
    rec: Recorder<'_>,
    step: u32,
    reason: FallbackReason,
    local: &ModelParams,
    fallback: &Fallback,
) -> Result<(), StoreError> {
    rec.record(
        Some(step),
        runlog::CloudFallback {
            reason: reason.as_str().to_owned(),
            local_model: local.name.clone(),
            cloud_model: fallback.model.name.clone(),
            cloud_model_key: fallback.policy.model_key.clone(),
        },
    )
    .await
}
