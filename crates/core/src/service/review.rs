//! A person reviewing an ended run's changes (issue #42, the web viewer): its changes against
//! its base file by file, or one checkpoint's against the one before it.

use fabric_domain::{EventPayload, RunEvent, RunId};

use super::{InvalidRequest, ServiceError};
use crate::ports::{CommitId, FileDiff};

/// An ended run's changes, per file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDiff {
    /// The run's branch.
    pub branch: String,
    /// The commit it started from.
    pub base: String,
    /// Its last checkpoint (the base when it changed nothing).
    pub head: String,
    /// The commits its `checkpoint` events recorded, in order.
    pub checkpoints: Vec<String>,
    /// The checkpoint asked for, as recorded; `None` for the whole run.
    pub checkpoint: Option<String>,
    /// The commit the changes are from: the base, or the checkpoint before the one asked for
    /// (for the first, where the run started: its base, or the head of the run it continues).
    pub from: String,
    /// The commit they are to: the head, or the checkpoint asked for.
    pub to: String,
    /// The changed files in path order.
    pub files: Vec<FileDiff>,
}

impl super::RunService {
    /// The changes of an ended run with a versioned workspace (`Ok(None)`: it has none):
    /// against its base, or `checkpoint`'s (a commit its runlog recorded, or a prefix of at
    /// least 7 characters naming one) against the checkpoint before.
    pub async fn run_diff(
        &self,
        id: &RunId,
        checkpoint: Option<&str>,
    ) -> Result<Option<RunDiff>, ServiceError> {
        let (events, history) = self.read_ended_run(id).await?;
        let Some((versioning, spec)) = self.spec_of_history(id, &history)? else {
            return Ok(None);
        };
        let ws = versioning.open_ended(&spec).await?;
        let checkpoints = recorded_checkpoints(&events);
        let head = ws.head().await.map_err(super::Fault::Workspace)?;
        let (from, to, asked) = match checkpoint {
            None => (ws.base().to_string(), head.to_string(), None),
            Some(asked) => {
                let i = find_checkpoint(id, &checkpoints, asked)?;
                let start = history
                    .workspace
                    .as_ref()
                    .and_then(|w| w.restored_to.clone())
                    .unwrap_or_else(|| ws.base().to_string());
                let from = i.checked_sub(1).map_or(start, |p| checkpoints[p].clone());
                (from, checkpoints[i].clone(), Some(checkpoints[i].clone()))
            }
        };
        let files = ws
            .diff_files(&CommitId(from.clone()), &CommitId(to.clone()))
            .await
            .map_err(super::Fault::Workspace)?;
        Ok(Some(RunDiff {
            branch: ws.branch().to_owned(),
            base: ws.base().to_string(),
            head: head.to_string(),
            checkpoints,
            checkpoint: asked,
            from,
            to,
            files,
        }))
    }
}

/// The commits of a runlog's `checkpoint` events, in order.
fn recorded_checkpoints(events: &[RunEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::Checkpoint(c) => c.commit.clone(),
            _ => None,
        })
        .collect()
}

/// Where `asked` is among the run's checkpoints: the commit, or a prefix of 7 or more
/// characters naming one only.
fn find_checkpoint(id: &RunId, checkpoints: &[String], asked: &str) -> Result<usize, ServiceError> {
    let asked_lower = asked.to_ascii_lowercase();
    let found: Vec<usize> = checkpoints
        .iter()
        .enumerate()
        .filter(|(_, c)| asked_lower.len() >= 7 && c.starts_with(&asked_lower))
        .map(|(i, _)| i)
        .collect();
    match found.as_slice() {
        [i] => Ok(*i),
        // One commit recorded twice (a resumed run) is the first time it was recorded.
        [i, rest @ ..] if rest.iter().all(|j| checkpoints[*j] == checkpoints[*i]) => Ok(*i),
        _ => Err(InvalidRequest::NoSuchCheckpoint {
            id: id.clone(),
            commit: asked.to_owned(),
            known: if checkpoints.is_empty() {
                "it recorded none (it changed no file)".to_owned()
            } else {
                format!(
                    "its checkpoints are {} (the `commit` of its `checkpoint` events; give one whole, or 7 or more of its first characters naming it alone)",
                    checkpoints.join(", ")
                )
            },
        }
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_42_a_checkpoint_is_found_by_a_prefix_naming_it_alone() {
        let id = RunId::parse("20261206-120000-000-0123abcd").unwrap();
        let commits = vec!["abcdef0123".to_owned(), "abcdef9999".to_owned()];
        assert_eq!(find_checkpoint(&id, &commits, "abcdef9").unwrap(), 1);
        assert_eq!(find_checkpoint(&id, &commits, "ABCDEF0123").unwrap(), 0);
        assert_eq!(find_checkpoint(&id, &commits, "abcdef0").unwrap(), 0);
        // Too short, unknown.
        for asked in ["abcdef", "1234567"] {
            let error = find_checkpoint(&id, &commits, asked).unwrap_err();
            assert!(
                error.to_string().contains("abcdef0123, abcdef9999"),
                "{error}"
            );
        }
        let none = find_checkpoint(&id, &[], "abcdef0").unwrap_err();
        assert!(none.to_string().contains("recorded none"), "{none}");
    }
}
