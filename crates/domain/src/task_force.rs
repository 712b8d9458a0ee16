//! How a task force is formed and works: how its members are chosen ([`Routing`]) and how they
//! work together ([`TaskForceMode`], read by the config, run by the engine, and written to the
//! runlog as its `task_force_mode` word).

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

closed_set! {
    /// How a prompt is routed to specialists when the run names none (ADR in DECISIONS.md).
    pub enum Routing {
        /// Whole-word keywords and a greedy cover: instant and deterministic.
        #[default]
        Keyword = "keyword",
        /// Ask the `routing_model_key` model; keywords decide when it fails.
        Llm = "llm",
    }
}

closed_set! {
    /// What happens to the oldest messages when a conversation outgrows the model's context
    /// window (`context_compaction`).
    pub enum ContextCompaction {
        /// Left out, with a note saying how many.
        #[default]
        Drop = "drop",
        /// Replaced by the model's own summary of them.
        Summarize = "summarize",
    }
}

impl TaskForceMode {
    /// The mode a recorded run used, to go on as it began: `parallel` stays parallel, every
    /// other word (`single`, `sequential`, one this version does not know) is sequential.
    pub fn recorded(mode: &runlog::TaskForceShape) -> Self {
        match mode {
            runlog::TaskForceShape::Parallel => Self::Parallel,
            _ => Self::Sequential,
        }
    }
}

impl From<TaskForceMode> for runlog::TaskForceShape {
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
            let wire = runlog::TaskForceShape::from(mode);
            assert_eq!(wire.as_str(), mode.as_str());
            assert_eq!(TaskForceMode::recorded(&wire), mode);
        }
        assert_eq!(Routing::WORDS, ["keyword", "llm"]);
        assert_eq!(Routing::parse("llm"), Some(Routing::Llm));
        assert_eq!(
            serde_json::to_value(Routing::Keyword).unwrap(),
            serde_json::json!("keyword")
        );
        assert_eq!(
            TaskForceMode::recorded(&runlog::TaskForceShape::Single),
            TaskForceMode::Sequential
        );
    }
}
