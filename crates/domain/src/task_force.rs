//! How the members of a task force work together: one closed set, read by the config, run by
//! the engine, and written to the runlog as its `task_force_mode` word.

use crate::runlog;
use crate::words::closed_set;

closed_set! {
    /// How the members of a task force work together (`task_force_mode`).
    pub enum TaskForceMode {
        /// One after another, each given the previous one's finish payload.
        #[default]
        Sequential = "sequential",
        /// At the same time (up to `max_parallel`), results merged in recruitment order.
        Parallel = "parallel",
    }
}

impl TaskForceMode {
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
    fn modes_reach_the_runlog_and_come_back() {
        for &mode in TaskForceMode::ALL {
            let wire = runlog::TaskForceMode::from(mode);
            assert_eq!(wire.as_str(), mode.as_str());
            assert_eq!(TaskForceMode::recorded(&wire), mode);
        }
        assert_eq!(
            TaskForceMode::recorded(&runlog::TaskForceMode::Single),
            TaskForceMode::Sequential
        );
    }
}
