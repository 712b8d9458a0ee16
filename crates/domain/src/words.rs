//! Closed sets of words: each an enum whose words are written once, with the list of them
//! (for the CLI's choices), both directions of conversion and serde through the words.

/// Declares a closed set: the enum, `ALL`, `WORDS`, `as_str`, `parse`, `Serialize` and
/// `Deserialize`. A variant may take older names after its word (`OpenAi = "openai" |
/// "generic"`): `parse` and serde read them, `WORDS` and `as_str` give only the word.
/// A word outside the set fails to deserialize with the config's message, "must be `a`,
/// `b` or `c`, got `x`", so every key holding a closed set explains itself the same way.
macro_rules! closed_set {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal $(| $alias:literal)*, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in the order the CLI and the docs list them.
            pub const ALL: &'static [Self] = &[$( Self::$variant, )+];

            /// The words of [`Self::ALL`], for the CLI's list of choices.
            pub const WORDS: &'static [&'static str] = &[$( $text, )+];

            /// The value's word, as the CLI, the config and the runlog write it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $text, )+
                }
            }

            /// The value a word names.
            pub fn parse(word: &str) -> Option<Self> {
                match word {
                    $( $text $(| $alias)* => Some(Self::$variant), )+
                    _ => None,
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let word = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                Self::parse(&word).ok_or_else(|| {
                    serde::de::Error::custom($crate::words::not_one_of(Self::WORDS, &word))
                })
            }
        }
    };
}

/// The message for a word outside a closed set: "must be `a`, `b` or `c`, got `x`".
pub(crate) fn not_one_of(words: &[&str], got: &str) -> String {
    let quoted: Vec<String> = words.iter().map(|w| format!("`{w}`")).collect();
    let choices = match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    format!("must be {choices}, got `{got}`")
}

pub(crate) use closed_set;

#[cfg(test)]
mod tests {
    use crate::{
        ConstrainedDecoding, DelegationWorkspace, SandboxMode, SearchProvider, StatsGroup,
        TaskForceMode,
    };

    fn round_trips<T>(all: &[T], words: &[&str], as_str: fn(T) -> &'static str)
    where
        T: Copy + PartialEq + std::fmt::Debug + serde::Serialize,
    {
        assert_eq!(all.len(), words.len());
        for (&value, &word) in all.iter().zip(words) {
            assert_eq!(as_str(value), word);
            assert_eq!(
                serde_json::to_value(value).unwrap(),
                serde_json::json!(word)
            );
        }
    }

    #[test]
    fn every_set_round_trips_through_its_words_and_serde() {
        round_trips(SandboxMode::ALL, SandboxMode::WORDS, SandboxMode::as_str);
        round_trips(StatsGroup::ALL, StatsGroup::WORDS, StatsGroup::as_str);
        round_trips(
            TaskForceMode::ALL,
            TaskForceMode::WORDS,
            TaskForceMode::as_str,
        );
        assert_eq!(
            SandboxMode::WORDS,
            ["strict", "workspace-write-network", "off"]
        );
        assert_eq!(StatsGroup::WORDS, ["specialist", "model", "tool"]);
        assert_eq!(TaskForceMode::WORDS, ["sequential", "parallel"]);
        round_trips(
            ConstrainedDecoding::ALL,
            ConstrainedDecoding::WORDS,
            ConstrainedDecoding::as_str,
        );
        assert_eq!(ConstrainedDecoding::WORDS, ["off", "json_schema", "auto"]);
        round_trips(
            DelegationWorkspace::ALL,
            DelegationWorkspace::WORDS,
            DelegationWorkspace::as_str,
        );
        assert_eq!(DelegationWorkspace::WORDS, ["separate", "shared"]);
        round_trips(
            SearchProvider::ALL,
            SearchProvider::WORDS,
            SearchProvider::as_str,
        );
        assert_eq!(SearchProvider::WORDS, ["searxng", "brave"]);
        for word in SandboxMode::WORDS {
            assert_eq!(
                SandboxMode::parse(word).map(SandboxMode::as_str),
                Some(*word)
            );
        }
        assert_eq!(SandboxMode::parse("loose"), None);
        assert_eq!(StatsGroup::parse("day"), None);
        assert_eq!(TaskForceMode::parse("single"), None);
    }
}
