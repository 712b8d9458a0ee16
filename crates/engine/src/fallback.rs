//! The cloud model a step falls back to, and when (seed 000 ADR-008): a leaf, shared by the
//! loop ([`crate::engine`]) and the quality gate ([`crate::gate`]), which both send steps to
//! it, so neither imports the other for it.

use fabric_domain::{FallbackReason, runlog};

use crate::params::ModelParams;
use crate::ports::{ChatClient, StoreError};
use crate::recorder::Recorder;

/// A stronger model a step goes to when the local one fails in a way it may fix (seed 000
/// ADR-008: by quality, never by a connection failure), up to a number of times per run.
pub struct Fallback<'a> {
    /// Its client.
    pub chat: &'a dyn ChatClient,
    /// Its model.
    pub model: &'a ModelParams,
    /// Its model key, for the runlog.
    pub model_key: &'a str,
    /// When steps go to it.
    pub policy: FallbackPolicy,
    /// The budget of the run's whole tree, which counts the fallbacks its runs take
    /// (members, critics and delegated children together).
    pub tree: &'a crate::budget::RunBudget,
}

/// When a run's steps go to the cloud model, and how often (config `cloud_fallback`), as
/// every layer from the preparer to the loop carries it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FallbackPolicy {
    /// Fall back when the local model answers without a tool call.
    pub no_tool_calls: bool,
    /// Fall back when the local model sent invalid arguments two steps in a row (the
    /// corrective error message did not help).
    pub malformed_args: bool,
    /// Fall back (for the repair) when the critic rejected the work.
    pub critic_rejected: bool,
    /// Most fallbacks in one run's tree: its members, its critic's reviews and the runs
    /// it delegates to, together.
    pub max_per_run: u32,
}

impl Fallback<'_> {
    /// Takes one fallback from the tree's allowance, when the cloud model may be asked
    /// (its daily budget is not spent).
    pub(crate) fn take(&self) -> bool {
        if let Some(why) = self.chat.unavailable() {
            tracing::debug!(model_key = self.model_key, "no cloud fallback: {why}");
            return false;
        }
        self.tree.take_fallback(self.policy.max_per_run)
    }
}

/// Records that a step goes to the cloud model, and why.
pub(crate) async fn record_fallback(
    rec: Recorder<'_>,
    step: u32,
    reason: FallbackReason,
    local: &ModelParams,
    fallback: &Fallback<'_>,
) -> Result<(), StoreError> {
    rec.record(
        Some(step),
        runlog::CloudFallback {
            reason: reason.as_str().to_owned(),
            local_model: local.name.clone(),
            cloud_model: fallback.model.name.clone(),
            cloud_model_key: fallback.model_key.to_owned(),
        },
    )
    .await
}
