//! How the members of a task force work together: one closed set, read by the config, run by
//! the engine, and written to the runlog as its `task_force_mode` word.

use serde::Serialize;

use crate::runlog;

/// How the members of a task force work together (`task_force_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskForceMode {
    /// One after another, each given the previous one's finish payload.
    #[default]
    Sequential,
    /// At the same time (up to `max_parallel`), results merged in recruitment order.
    Parallel,
}

impl TaskForceMode {
    /// The mode a config word names: `sequential` or `parallel`.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "sequential" => Some(Self::Sequential),
            "parallel" => Some(Self::Parallel),
            _ => None,
        }
    }

    /// The mode as written in runlogs and config.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sequential => "sequential",
            Self::Parallel => "parallel",
        }
    }

    /// The mode a recorded run used, to go on as it began: `parallel` stays parallel, every
    /// other word (`single`, `sequential`, one this version does not know) is sequential.
    pub fn recorded(mode: &runlog::TaskForceMode) -> Self {
        match mode {
            runlog::TaskForceMode::Parallel => Self::Parallel,
            _ => Self::Sequential,
        }
    }
}

impl From<TaskForceMode> for runlog::TaskForceMode {
    fn from(mode: TaskForceMode) -> Self {
        match mode {
            TaskForceMode::Sequential => Self::Sequential,
            TaskForceMode::Parallel => Self::Parallel,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_reach_the_runlog() {
        for mode in [TaskForceMode::Sequential, TaskForceMode::Parallel] {
            assert_eq!(TaskForceMode::parse(mode.as_str()), Some(mode));
            let wire = runlog::TaskForceMode::from(mode);
            assert_eq!(wire.as_str(), mode.as_str());
            assert_eq!(TaskForceMode::recorded(&wire), mode);
            assert_eq!(
                serde_json::to_value(mode).unwrap(),
                serde_json::json!(mode.as_str())
            );
        }
        assert_eq!(TaskForceMode::parse("single"), None);
        assert_eq!(
            TaskForceMode::recorded(&runlog::TaskForceMode::Single),
            TaskForceMode::Sequential
        );
    }
}
