//! The summary of a run whose runlog cannot be read.

use fabric_domain::{RunId, RunStatus, RunSummary};
use fabric_engine::StoreError;

/// Listed as failed, with what is wrong, so the user can find and inspect it.
pub(crate) fn unreadable(id: RunId, error: &StoreError) -> RunSummary {
    let mut summary = RunSummary::new(id);
    summary.status = RunStatus::Failed;
    summary.summary = Some(format!("unreadable runlog: {error}"));
    summary
}
