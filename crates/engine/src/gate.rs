//! The quality gate (seed 003: the critic before writes; docs/QUALITY.md): when a
//! specialist with a critic calls `finish_task`, its staged work is reviewed before the run
//! may complete. Approved work is applied to the workspace and the run completes; rejected
//! work goes back to the specialist as the `finish_task` result, with the findings, for
//! another round; after the last round the run ends `quality_gate_failed`.
//!
//! The loop only sees [`FinishGate`]: it does not know who reviews or where the work is
//! staged ([`crate::execute`] builds the gate over a critic child run and a staging area).

use async_trait::async_trait;
use fabric_domain::{FallbackReason, RunStatus, runlog};
use serde_json::Value;

use crate::fallback::{Fallback, record_fallback};
use crate::params::ModelParams;
use crate::ports::{StoreError, ToolContext};
use crate::recorder::Recorder;

/// What a review decided.
pub enum Verdict {
    /// The work was approved; `applied` and `refused` say what applying it will do.
    Approved(runlog::CriticReview),
    /// The work was rejected; the findings say why.
    Rejected(runlog::CriticReview),
    /// No verdict could be reached (the critic's run failed, the staging area is broken):
    /// the run ends with `status` and `reason`; the review, when there was one, is recorded.
    Failed {
        /// What the review got to, if anything.
        review: Option<runlog::CriticReview>,
        /// How the run ends.
        status: RunStatus,
        /// Why.
        reason: String,
    },
}

/// Reviews a specialist's work when it calls `finish_task`.
#[async_trait]
pub(crate) trait FinishGate: Send + Sync {
    /// The critic's specialist id.
    fn critic(&self) -> &str;

    /// Reviews at most (`max_repair_rounds`).
    fn max_rounds(&self) -> u32;

    /// Where the work is staged, for messages.
    fn staged_dir(&self) -> &std::path::Path;

    /// Reviews the work behind `payload` (review `round`, from 1).
    async fn review(&self, payload: &Value, round: u32, ctx: &ToolContext) -> Verdict;

    /// Applies the approved work to the workspace (idempotent); the error says why not and
    /// whether any of it was applied.
    async fn apply(&self) -> Result<(), crate::ports::StagingError>;

    /// Drops the staged work once the run recorded its completion.
    async fn discard(&self);
}

/// One member's gate and where its reviews stand.
pub(crate) struct GateState<'a> {
    /// The gate.
    pub gate: &'a dyn FinishGate,
    /// Reviews done already (a continued run replays them).
    pub rounds_done: u32,
    /// Whether the repair under way runs on the cloud model (`critic_rejected`).
    pub repair_on_cloud: bool,
    /// The member's own model key, for `repair_round`.
    pub model_key: &'a str,
    /// Whether the last review approved the work (a run continued after its process
    /// stopped between the approval and the completion): it is applied, not reviewed again.
    pub approved: bool,
}

/// What the loop does after a review.
pub(crate) enum Passage {
    /// Record the `finish_task` result and complete.
    Complete,
    /// Tell the model this (as the `finish_task` result) and let it repair.
    Repair(String),
    /// End the run.
    End(RunStatus, String),
}

impl GateState<'_> {
    /// Reviews a `finish_task` payload and records the review.
    pub(crate) async fn pass(
        &mut self,
        payload: &Value,
        ctx: &ToolContext,
        rec: Recorder<'_>,
        step: u32,
    ) -> Result<Passage, StoreError> {
        if self.approved {
            return Ok(self.apply().await);
        }
        self.rounds_done += 1;
        self.repair_on_cloud = false;
        let round = self.rounds_done;
        let max = self.gate.max_rounds();
        let verdict = self.gate.review(payload, round, ctx).await;
        let review = match verdict {
            Verdict::Approved(review) => {
                // Recorded before applying: a run that stops while applying is continued
                // by applying again, not by a second review.
                rec.record(Some(step), review.clone()).await?;
                for path in &review.refused {
                    rec.record(
                        Some(step),
                        runlog::SecurityEvent {
                            event_type: runlog::SecurityEventType::ProtectedPath,
                            tool: None,
                            call_id: None,
                            attempted: path.clone(),
                            error_message: format!(
                                "the staged change to `{path}` was not applied: the path is protected (protected_paths); the other approved changes were"
                            ),
                        },
                    )
                    .await?;
                }
                self.approved = true;
                return Ok(self.apply().await);
            }
            Verdict::Failed {
                review,
                status,
                reason,
            } => {
                if let Some(review) = review {
                    rec.record(Some(step), review).await?;
                }
                return Ok(Passage::End(status, reason));
            }
            Verdict::Rejected(review) => review,
        };
        rec.record(Some(step), review.clone()).await?;
        let findings = render_findings(&review.findings);
        if round >= max {
            return Ok(Passage::End(
                RunStatus::QualityGateFailed,
                format!(
                    "the critic `{}` rejected the work {round} time(s) (max_repair_rounds: {max}); the staged changes were not applied and are kept in {} for inspection. Last findings:\n{findings}",
                    self.gate.critic(),
                    self.gate.staged_dir().display()
                ),
            ));
        }
        Ok(Passage::Repair(format!(
            "finish_task was not accepted: the critic `{}` rejected your work (review {round} of {max}); nothing was applied yet. Fix every finding below, check the result with the tools, then call finish_task again:\n{findings}",
            self.gate.critic()
        )))
    }

    /// Applies approved work: the run completes, or fails saying why the work did not land.
    async fn apply(&self) -> Passage {
        match self.gate.apply().await {
            Ok(()) => Passage::Complete,
            Err(e) => Passage::End(
                RunStatus::Failed,
                format!(
                    "the critic `{}` approved the work, but applying it failed: {e}; the staged changes are kept in {}",
                    self.gate.critic(),
                    self.gate.staged_dir().display()
                ),
            ),
        }
    }

    /// Drops the staged work of a completed member.
    pub(crate) async fn discard(&self) {
        self.gate.discard().await;
    }

    /// Starts the repair after a rejection: recorded as `repair_round`, on the cloud model
    /// when the policy says so and the run has a fallback left.
    pub(crate) async fn begin_repair(
        &mut self,
        rec: Recorder<'_>,
        step: u32,
        local: &ModelParams,
        (fallback, tree): (Option<&Fallback>, &crate::budget::RunBudget),
    ) -> Result<(), StoreError> {
        let cloud = fallback.filter(|f| f.policy.critic_rejected && f.take(tree));
        rec.record(
            Some(step),
            runlog::RepairRound {
                round: self.rounds_done + 1,
                max_rounds: self.gate.max_rounds(),
                model_key: cloud
                    .map_or(self.model_key, |f| &f.policy.model_key)
                    .to_owned(),
            },
        )
        .await?;
        if let Some(f) = cloud {
            record_fallback(rec, step, FallbackReason::CriticRejected, local, f).await?;
            self.repair_on_cloud = true;
        }
        Ok(())
    }
}

/// The findings as the specialist reads them: one line each.
fn render_findings(findings: &[runlog::Finding]) -> String {
    if findings.is_empty() {
        return "- (the critic gave no findings; read its reasons in its run and check the work against the task)".to_owned();
    }
    findings
        .iter()
        .map(|f| match &f.file {
            Some(file) => format!("- [{}] {file}: {}", f.severity, f.reason),
            None => format!("- [{}] {}", f.severity, f.reason),
        })
        .collect::<Vec<_>>()
        .join("\n")
}
