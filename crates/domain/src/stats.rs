//! How run statistics are grouped: one closed set, read by the CLI, HTTP and MCP front ends
//! and answered by the store.

use serde::Serialize;

/// How `fabric stats` (and `GET /stats`, the `run_stats` tool) groups runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatsGroup {
    /// By specialist (a task force counts for each member).
    #[default]
    Specialist,
    /// By model key.
    Model,
    /// By tool (calls and errors).
    Tool,
}

impl StatsGroup {
    /// Every grouping, in the order the CLI and the docs list them.
    pub const ALL: [Self; 3] = [Self::Specialist, Self::Model, Self::Tool];

    /// The words of [`Self::ALL`], for the CLI's list of choices.
    pub const WORDS: [&'static str; 3] = [
        Self::ALL[0].as_str(),
        Self::ALL[1].as_str(),
        Self::ALL[2].as_str(),
    ];

    /// The grouping's word: `specialist`, `model` or `tool`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Specialist => "specialist",
            Self::Model => "model",
            Self::Tool => "tool",
        }
    }

    /// The grouping a word names.
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|group| group.as_str() == word)
    }
}

#[cfg(test)]
mod tests {
    use super::StatsGroup;

    #[test]
    fn groups_round_trip_through_their_words_and_serde() {
        for group in StatsGroup::ALL {
            assert_eq!(StatsGroup::parse(group.as_str()), Some(group));
            assert_eq!(
                serde_json::to_value(group).unwrap(),
                serde_json::json!(group.as_str())
            );
        }
        assert_eq!(StatsGroup::WORDS, ["specialist", "model", "tool"]);
        assert_eq!(StatsGroup::parse("day"), None);
    }
}
