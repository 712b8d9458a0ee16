//! A member's quality gate: its staging area and the critic that reviews it.
//!
//! The critic is a specialist like any other, run as a child of the run (its own runlog, its
//! own model key, paid from the run's budget) in the staging area, so its read-only tools
//! see the files as they would be after the changes. Its finish payload is the verdict:
//! `approved`, and `findings` with severity, file and reason.

use async_trait::async_trait;
use fabric_domain::{RunStatus, runlog};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

use super::MemberCritic;
use crate::gate::{FinishGate, Verdict};
use crate::ports::{Staged, StagedDiff, StagingError, ToolContext};

/// Most characters of the finish payload shown to the critic.
const MAX_PAYLOAD_CHARS: usize = 8_000;

/// The gate over one member's staging area.
pub(super) struct CriticGate {
    critic: MemberCritic,
    staged: Arc<dyn Staged>,
    /// The task the member was given.
    prompt: String,
    /// The member whose work is reviewed.
    specialist: String,
    /// The run's versioned workspace: the critic also sees what its branch already changes
    /// against its base (earlier members' work), so it reviews the run's whole diff.
    branch: Option<Arc<dyn crate::ports::Workspace>>,
}

impl CriticGate {
    /// Opens the member's staging area (created as a copy of the workspace, or reopened as
    /// left when the run is continued) and the gate over it.
    pub(super) async fn open(
        critic: &MemberCritic,
        ctx: &ToolContext,
        prompt: &str,
        specialist: &str,
        index: Option<u32>,
        branch: Option<Arc<dyn crate::ports::Workspace>>,
    ) -> Result<Self, StagingError> {
        let name = format!("{}-{}", ctx.run_id, index.unwrap_or(0));
        let staged = critic
            .stager
            .stage(&ctx.workspace, &name)
            .await
            .map_err(|e| e.context("cannot stage the workspace for the critic gate"))?;
        Ok(Self {
            critic: critic.clone(),
            staged,
            prompt: prompt.to_owned(),
            specialist: specialist.to_owned(),
            branch,
        })
    }

    /// The member's tool context: the same run, working in the staging area.
    pub(super) fn context(&self, ctx: &ToolContext) -> ToolContext {
        ToolContext {
            approved: false,
            workspace: self.staged.dir().to_path_buf(),
            ..ctx.clone()
        }
    }

    /// What the critic is asked. Deterministic for the same work, so a review cut short by a
    /// stopped process is found and continued.
    fn task(
        &self,
        payload: &Value,
        diff: &StagedDiff,
        round: u32,
        earlier: Option<&str>,
    ) -> String {
        let answer = serde_json::to_string_pretty(payload).unwrap_or_else(|_| payload.to_string());
        let answer = crate::recorder::truncate(&answer, MAX_PAYLOAD_CHARS);
        let changes = if diff.changes.is_empty() {
            "(no file was added, changed or deleted)".to_owned()
        } else {
            diff.text.clone()
        };
        let earlier = earlier
            .map(|d| {
                format!(
                    "## What the run's branch already changes against its base (earlier work, applied)\n{}\n\n",
                    crate::recorder::truncate(d, MAX_PAYLOAD_CHARS)
                )
            })
            .unwrap_or_default();
        format!(
            "Review the work of the specialist `{}` before it is applied to the workspace (review {round} of {}).\n\n## The task it was given\n{}\n\n## Its answer (its finish_task payload)\n{answer}\n\n{earlier}## The changes it staged\n{changes}\n\nYour workspace shows the files as they will be if you approve. Check the changes against the task, then call finish_task with `approved` (true or false), `findings` (severity, file, reason) and a one-sentence `summary`.",
            self.specialist,
            self.critic.max_rounds,
            self.prompt.trim(),
        )
    }

    fn review(
        &self,
        round: u32,
        critic_run_id: Option<fabric_domain::RunId>,
        diff: &StagedDiff,
    ) -> runlog::CriticReview {
        runlog::CriticReview {
            round,
            max_rounds: self.critic.max_rounds,
            critic: self.critic.specialist.clone(),
            critic_run_id,
            approved: false,
            critic_status: None,
            critic_reason: None,
            findings: Vec::new(),
            files: diff.changes.iter().map(|c| c.path.clone()).collect(),
            applied: Vec::new(),
            refused: Vec::new(),
            staged_dir: self.staged.dir().to_path_buf(),
        }
    }

    fn kept(&self) -> String {
        format!(
            "the staged changes were not applied and are kept in {}",
            self.staged.dir().display()
        )
    }
}

#[async_trait]
impl FinishGate for CriticGate {
    fn critic(&self) -> &str {
        &self.critic.specialist
    }

    fn max_rounds(&self) -> u32 {
        self.critic.max_rounds
    }

    fn staged_dir(&self) -> &Path {
        self.staged.dir()
    }

    async fn review(&self, payload: &Value, round: u32, ctx: &ToolContext) -> Verdict {
        let critic = &self.critic.specialist;
        let diff = match self.staged.diff().await {
            Ok(diff) => diff,
            Err(e) => {
                return Verdict::Failed {
                    review: None,
                    status: RunStatus::Failed,
                    reason: format!("cannot read the staged changes for the critic: {e}"),
                };
            }
        };
        // What the branch changes so far; a diff git cannot give is left out of the review,
        // which still has the staged changes.
        let earlier = match &self.branch {
            Some(branch) => branch.diff().await.ok().filter(|d| !d.trim().is_empty()),
            None => None,
        };
        let task = self.task(payload, &diff, round, earlier.as_deref());
        // A review that was under way when the run's process stopped goes on; otherwise
        // the critic starts, in the staging area.
        let runner = &self.critic.runner;
        let outcome = match runner.resume_child(critic, &task, ctx).await {
            Some(outcome) => outcome,
            None => runner.run_child_in_workspace(critic, task, ctx).await,
        };
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(e) => {
                return Verdict::Failed {
                    review: None,
                    status: RunStatus::QualityGateFailed,
                    reason: format!(
                        "the critic `{critic}` could not start: {e}; {}",
                        self.kept()
                    ),
                };
            }
        };
        let mut review = self.review(round, Some(outcome.run_id.clone()), &diff);
        if !outcome.status.is_success() {
            // Recorded, so a replay gives the same non-verdict (issue #27).
            review.critic_status = Some(outcome.status);
            review.critic_reason.clone_from(&outcome.reason);
            let (status, why) = match outcome.status {
                RunStatus::Cancelled => (RunStatus::Cancelled, "the run was cancelled".to_owned()),
                RunStatus::BudgetExceeded => (
                    RunStatus::BudgetExceeded,
                    outcome.reason.clone().unwrap_or_default(),
                ),
                other => (
                    RunStatus::QualityGateFailed,
                    format!(
                        "the critic `{critic}` gave no verdict: its run {} ended {other}{}",
                        outcome.run_id,
                        outcome
                            .reason
                            .as_deref()
                            .map(|r| format!(" ({r})"))
                            .unwrap_or_default()
                    ),
                ),
            };
            return Verdict::Failed {
                review: Some(review),
                status,
                reason: format!("{why}; {}", self.kept()),
            };
        }
        // The critic's answer (its finish payload, the JSON its schema asks for).
        let verdict = &outcome.payload;
        review.findings = findings_of(verdict);
        // Only an explicit `true` approves: a critic that answered in prose did not.
        review.approved = verdict.get("approved") == Some(&Value::Bool(true));
        if !review.approved {
            return Verdict::Rejected(review);
        }
        for change in &diff.changes {
            match change.protected {
                Some(_) => review.refused.push(change.path.clone()),
                None => review.applied.push(change.path.clone()),
            }
        }
        Verdict::Approved(review)
    }

    async fn apply(&self) -> Result<(), StagingError> {
        self.staged.apply().await.map(|_| ())
    }

    async fn discard(&self) {
        self.staged.discard().await;
    }
}

/// The critic's findings, read leniently: an entry without a reason is kept with its JSON
/// as the reason, so nothing the critic said is lost.
fn findings_of(payload: &Value) -> Vec<runlog::Finding> {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut findings: Vec<runlog::Finding> = payload
        .get("findings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|f| runlog::Finding {
            severity: text(f, "severity").unwrap_or_else(|| "error".to_owned()),
            file: text(f, "file"),
            reason: text(f, "reason").unwrap_or_else(|| f.to_string()),
        })
        .collect();
    // A critic that ended in prose (no finish_task): its text is the one finding.
    if findings.is_empty()
        && payload.get("approved").is_none()
        && let Some(summary) = text(payload, "summary")
    {
        findings.push(runlog::Finding {
            severity: "error".to_owned(),
            file: None,
            reason: summary,
        });
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn findings_are_read_leniently() {
        let f = findings_of(&json!({"approved": false, "findings": [
            {"severity": "error", "file": "a.py", "reason": "off by one"},
            {"file": "b.py"}
        ]}));
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].file.as_deref(), Some("a.py"));
        assert_eq!(f[1].severity, "error");
        assert_eq!(f[1].reason, r#"{"file":"b.py"}"#);
        let prose = findings_of(&json!({"summary": "the tests fail", "notes": "built from text"}));
        assert_eq!(prose.len(), 1);
        assert!(findings_of(&json!({"approved": true, "findings": []})).is_empty());
    }
}
