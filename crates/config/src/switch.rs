//! Keys whose words include `off`, read also from the booleans YAML 1.1 makes of them
//! (issue #40). A YAML 1.1 parser reads a plain `off`, `no` or `false` as `false`, and `on`,
//! `yes` or `true` as `true`, so `sandbox: off` written as CONFIG.md writes it reached the
//! key as a boolean and was refused. `false` is the key's `off`; `true` is the word the key
//! switches on with, or refused with the words to write when no word means "on" (ADR-093).

use serde::de::{Deserialize, DeserializeOwned, Deserializer, Error};
use serde_json::Value;

use crate::security::{SandboxCgroup, SandboxMode};
use fabric_domain::ConstrainedDecoding;

/// A key's value that has an `off` word.
pub(crate) trait Switch: DeserializeOwned {
    /// What `false` (`off`, `no`) means.
    const OFF: Self;
    /// What `true` (`on`, `yes`) means, or why it is refused.
    fn on() -> Result<Self, &'static str>;
}

impl Switch for SandboxMode {
    const OFF: Self = Self::Off;
    fn on() -> Result<Self, &'static str> {
        Ok(Self::Strict)
    }
}

impl Switch for SandboxCgroup {
    const OFF: Self = Self::Off;
    fn on() -> Result<Self, &'static str> {
        Ok(Self::Auto)
    }
}

impl Switch for ConstrainedDecoding {
    const OFF: Self = Self::Off;
    fn on() -> Result<Self, &'static str> {
        Err(
            "`true` (YAML also reads a plain `on` or `yes` so) does not say which: write `json_schema` or `auto`",
        )
    }
}

/// `deserialize_with` of an optional [`Switch`] key: its words, or a boolean.
pub(crate) fn optional<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Switch,
{
    match Value::deserialize(deserializer)? {
        Value::Bool(false) => Ok(Some(T::OFF)),
        Value::Bool(true) => T::on().map(Some).map_err(D::Error::custom),
        Value::Null => Ok(None),
        word => T::deserialize(word).map(Some).map_err(D::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Keys {
        #[serde(default, deserialize_with = "optional")]
        sandbox: Option<SandboxMode>,
        #[serde(default, deserialize_with = "optional")]
        cgroup: Option<SandboxCgroup>,
        #[serde(default, deserialize_with = "optional")]
        decoding: Option<ConstrainedDecoding>,
    }

    fn keys(json: Value) -> Result<Keys, serde_json::Error> {
        serde_json::from_value(json)
    }

    #[test]
    fn issue_40_booleans_read_as_the_keys_words() {
        let k = keys(serde_json::json!({"sandbox": false, "cgroup": false, "decoding": false}))
            .unwrap();
        assert_eq!(k.sandbox, Some(SandboxMode::Off));
        assert_eq!(k.cgroup, Some(SandboxCgroup::Off));
        assert_eq!(k.decoding, Some(ConstrainedDecoding::Off));
        let k = keys(serde_json::json!({"sandbox": true, "cgroup": true})).unwrap();
        assert_eq!(k.sandbox, Some(SandboxMode::Strict));
        assert_eq!(k.cgroup, Some(SandboxCgroup::Auto));
        assert_eq!(k.decoding, None);
        let k = keys(serde_json::json!({"sandbox": "workspace-write-network"})).unwrap();
        assert_eq!(k.sandbox, Some(SandboxMode::WorkspaceWriteNetwork));
        let e = keys(serde_json::json!({"decoding": true}))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("write `json_schema` or `auto`"), "{e}");
    }
}
