//! The sandbox modes: one closed set, parsed by the config and the CLI, enforced by the
//! sandbox adapter.

use serde::Serialize;

/// How tool processes are confined (docs/SECURITY.md), as chosen by `--sandbox` or `sandbox:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Read-only system, read-write workspace and private temp, no network for processes
    /// (even when the run allows the network: that is for the web tools).
    #[default]
    Strict,
    /// As strict, but processes may use TCP/UDP when the run allows the network.
    WorkspaceWriteNetwork,
    /// No OS sandbox: loudly recorded, never the default.
    Off,
}

impl SandboxMode {
    /// Every mode, in the order the CLI and the docs list them.
    pub const ALL: [Self; 3] = [Self::Strict, Self::WorkspaceWriteNetwork, Self::Off];

    /// The words of [`Self::ALL`], for the CLI's list of choices.
    pub const WORDS: [&'static str; 3] = [
        Self::ALL[0].as_str(),
        Self::ALL[1].as_str(),
        Self::ALL[2].as_str(),
    ];

    /// The name used on the command line, in the config and in the runlog.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Strict => "strict",
            Self::WorkspaceWriteNetwork => "workspace-write-network",
            Self::Off => "off",
        }
    }

    /// Parses `strict`, `workspace-write-network` or `off`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|mode| mode.as_str() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::SandboxMode;

    #[test]
    fn modes_round_trip_through_their_words_and_serde() {
        for mode in SandboxMode::ALL {
            assert_eq!(SandboxMode::parse(mode.as_str()), Some(mode));
            assert_eq!(
                serde_json::to_value(mode).unwrap(),
                serde_json::json!(mode.as_str())
            );
        }
        assert_eq!(
            SandboxMode::WORDS,
            ["strict", "workspace-write-network", "off"]
        );
        assert_eq!(SandboxMode::parse("loose"), None);
    }
}
