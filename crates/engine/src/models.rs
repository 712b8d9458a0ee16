//! Choosing a model from what a server offers. Pure: the adapters list the models and ask
//! for their capabilities; this decides.
//!
//! The rule (ADR in docs/DECISIONS.md): the configured model when the server has it;
//! otherwise the best tool-capable chat model, where "best" is the largest one at or under
//! [`SIZE_CAP_B`] billion parameters (bigger models are usually too slow on a workstation),
//! else the smallest one above the cap; equal sizes go to the name that sorts first.
//! Embedding-only models are never chosen; models whose capabilities are unknown are used
//! only when no model is known to call tools.

use crate::ports::SetupError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Models above this many billion parameters are chosen only when nothing smaller can call
/// tools.
pub(crate) const SIZE_CAP_B: f64 = 14.9;

/// A model a server lists.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelCandidate {
    /// The name to ask for.
    pub name: String,
    /// The size as the server writes it (`7.6B`, `770M`), when known.
    pub parameter_size: Option<String>,
    /// The family (`qwen2`, `nomic-bert`), when known.
    pub family: Option<String>,
    /// What it can do (`completion`, `tools`, `embedding`); `None` when the server does not
    /// say.
    pub capabilities: Option<Vec<String>>,
    /// The context length it was trained for (Ollama's `/api/show`), when known.
    pub context_length: Option<u64>,
}

impl ModelCandidate {
    /// Whether the model only makes embeddings: it says so, or its name or family does.
    pub(crate) fn is_embedding_only(&self) -> bool {
        if let Some(caps) = &self.capabilities {
            let embeds = caps.iter().any(|c| c == "embedding");
            let chats = caps.iter().any(|c| c == "completion" || c == "tools");
            if embeds || chats {
                return embeds && !chats;
            }
        }
        let family = self.family.as_deref().unwrap_or_default().to_lowercase();
        self.name.to_lowercase().contains("embed") || family.contains("bert")
    }

    /// `Some(true)` when the server says the model calls tools, `None` when it does not say.
    pub fn supports_tools(&self) -> Option<bool> {
        self.capabilities
            .as_ref()
            .map(|caps| caps.iter().any(|c| c == "tools"))
    }

    /// The size in billions of parameters: from `parameter_size`, else from a `:7b`-style
    /// tag in the name.
    pub(crate) fn size_b(&self) -> Option<f64> {
        self.parameter_size
            .as_deref()
            .and_then(parse_size)
            .or_else(|| {
                let tag = self.name.rsplit(':').next()?;
                tag.split(['-', '_']).find_map(parse_size)
            })
    }
}

/// Parses a size such as `8.0B`, `7.6B`, `770M`, `1.5b`, `32K` into billions of parameters
/// (`8.0B` is 8.0, `770M` is 0.77). `None` for anything else.
pub(crate) fn parse_size(text: &str) -> Option<f64> {
    let text = text.trim();
    let unit = text.chars().last()?;
    let scale = match unit.to_ascii_uppercase() {
        'T' => 1000.0,
        'B' => 1.0,
        'M' => 0.001,
        'K' => 0.000_001,
        _ => return None,
    };
    let number: f64 = text[..text.len() - unit.len_utf8()].trim().parse().ok()?;
    (number.is_finite() && number > 0.0).then_some(number * scale)
}

/// The model chosen and why, in words for the user.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelChoice {
    /// The model name.
    pub model: String,
    /// Why this one.
    pub reason: String,
    /// Whether it differs from the configured model.
    pub substituted: bool,
}

/// Whether `name` is `configured`, allowing for Ollama's implicit `:latest` tag.
fn same_model(name: &str, configured: &str) -> bool {
    name == configured
        || name.strip_suffix(":latest") == Some(configured)
        || configured.strip_suffix(":latest") == Some(name)
}

/// Whether the server lists the configured model. When it does and [`choose_model`] still
/// refuses, pulling cannot help: the model is there and cannot call tools.
pub fn is_listed(configured: &str, listed: &[ModelCandidate]) -> bool {
    listed.iter().any(|m| same_model(&m.name, configured))
}

/// Picks the model to use. Errors say what the server has and what to do.
pub fn choose_model(
    configured: &str,
    listed: &[ModelCandidate],
) -> Result<ModelChoice, SetupError> {
    let same = |name: &str| same_model(name, configured);
    if let Some(found) = listed.iter().find(|m| same(&m.name)) {
        // The server says this model cannot call tools: every run on it would fail at the
        // first request (seed ADR-007), so say so now, with the installed ones that can.
        if found.supports_tools() == Some(false) {
            let capable: Vec<&str> = listed
                .iter()
                .filter(|m| m.supports_tools() == Some(true))
                .map(|m| m.name.as_str())
                .collect();
            let fix = if capable.is_empty() {
                "pull a tool-capable model such as qwen2.5:7b or llama3.1:8b (`ollama pull qwen2.5:7b`) and set it as `model`".to_owned()
            } else {
                format!(
                    "set `model` to one that can, such as {}",
                    capable.join(", ")
                )
            };
            return Err(SetupError::ModelUnavailable(format!(
                "`{configured}` is installed but cannot call tools, which agent-fabric requires; {fix}"
            )));
        }
        return Ok(ModelChoice {
            model: configured.to_owned(),
            reason: format!("`{configured}` is configured and installed"),
            substituted: false,
        });
    }
    if listed.is_empty() {
        return Err(SetupError::ModelUnavailable(format!(
            "the server has no models; pull one (`ollama pull {configured}`) or enable `auto_pull_if_missing`"
        )));
    }
    let chat: Vec<&ModelCandidate> = listed.iter().filter(|m| !m.is_embedding_only()).collect();
    let capable: Vec<&ModelCandidate> = chat
        .iter()
        .copied()
        .filter(|m| m.supports_tools() == Some(true))
        .collect();
    let (pool, known) = if capable.is_empty() {
        let unknown: Vec<&ModelCandidate> = chat
            .iter()
            .copied()
            .filter(|m| m.supports_tools().is_none())
            .collect();
        (unknown, false)
    } else {
        (capable, true)
    };
    let Some(best) = best_of(&pool) else {
        let names: Vec<&str> = listed.iter().map(|m| m.name.as_str()).collect();
        return Err(SetupError::ModelUnavailable(format!(
            "`{configured}` is not installed and none of the installed models can call tools ({}); pull a tool-capable model such as qwen2.5:7b or llama3.1:8b (`ollama pull qwen2.5:7b`)",
            names.join(", ")
        )));
    };
    let size = best
        .size_b()
        .map_or_else(|| "size unknown".to_owned(), |s| format!("{s}B"));
    let why = if known {
        format!("the largest tool-capable model at or under {SIZE_CAP_B}B parameters ({size})")
    } else {
        format!("the server does not report tool support; the largest chat model ({size})")
    };
    Ok(ModelChoice {
        model: best.name.clone(),
        reason: format!(
            "`{configured}` is not installed; using `{}`: {why}",
            best.name
        ),
        substituted: true,
    })
}

fn best_of<'a>(pool: &[&'a ModelCandidate]) -> Option<&'a ModelCandidate> {
    let key = |m: &ModelCandidate| -> (u8, f64) {
        match m.size_b() {
            Some(s) if s <= SIZE_CAP_B => (2, s),
            // Above the cap the smallest is best: negate so that larger sorts lower.
            Some(s) => (1, -s),
            None => (0, 0.0),
        }
    };
    pool.iter().copied().max_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0)
            .then(ka.1.total_cmp(&kb.1))
            // max_by keeps the last of equals: reverse names so the first name wins.
            .then(b.name.cmp(&a.name))
    })
}

/// One lock per kind of work (`pull URL MODEL`, `start URL`): concurrent preparations that
/// need the same pull pull once, each waiter looking at the models again before pulling.
/// Entries are a few bytes each and there is one per endpoint and model, so they are kept.
#[derive(Default)]
pub struct Flights(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl Flights {
    /// The lock that serialises `what`.
    pub fn lock_for(&self, what: String) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(map.entry(what).or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, size: &str, caps: Option<&[&str]>) -> ModelCandidate {
        ModelCandidate {
            name: name.into(),
            parameter_size: (!size.is_empty()).then(|| size.into()),
            family: None,
            capabilities: caps.map(|c| c.iter().map(|s| (*s).to_owned()).collect()),
            context_length: None,
        }
    }

    const TOOLS: Option<&[&str]> = Some(&["completion", "tools"]);
    const PLAIN: Option<&[&str]> = Some(&["completion"]);
    const EMBED: Option<&[&str]> = Some(&["embedding"]);

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("8.0B"), Some(8.0));
        assert_eq!(parse_size("7.6B"), Some(7.6));
        assert_eq!(parse_size("770M"), Some(0.77));
        assert_eq!(parse_size("1.5b"), Some(1.5));
        assert_eq!(parse_size("70B"), Some(70.0));
        for bad in ["", "B", "abc", "8.0", "-1B", "0B", "NaNB"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
        assert_eq!(m("qwen2.5:14b", "", None).size_b(), Some(14.0));
        assert_eq!(m("llama3.2:3b-instruct-q4", "", None).size_b(), Some(3.0));
    }

    #[test]
    fn configured_model_wins_when_installed() {
        let list = [
            m("qwen2.5:7b", "7.6B", TOOLS),
            m("llama3.1:8b", "8.0B", TOOLS),
        ];
        let c = choose_model("qwen2.5:7b", &list).unwrap();
        assert_eq!(c.model, "qwen2.5:7b");
        assert!(!c.substituted);
        assert_eq!(
            choose_model("llama3.1", &[m("llama3.1:latest", "8B", TOOLS)])
                .unwrap()
                .model,
            "llama3.1"
        );
    }

    #[test]
    fn the_largest_tool_capable_model_under_the_cap() {
        let list = [
            m("nomic-embed-text:latest", "137M", EMBED),
            m("gemma:2b", "2B", PLAIN),
            m("llama3.1:8b", "8.0B", TOOLS),
            m("qwen2.5:0.5b", "494.03M", TOOLS),
            m("qwen2.5:32b", "32.8B", TOOLS),
        ];
        let c = choose_model("qwen2.5:14b", &list).unwrap();
        assert_eq!(c.model, "llama3.1:8b");
        assert!(c.substituted);
        assert!(
            c.reason.contains("`qwen2.5:14b` is not installed"),
            "{}",
            c.reason
        );
        assert!(c.reason.contains("8B"), "{}", c.reason);
    }

    #[test]
    fn above_the_cap_the_smallest() {
        let list = [m("big:70b", "70B", TOOLS), m("mid:32b", "32B", TOOLS)];
        assert_eq!(choose_model("x", &list).unwrap().model, "mid:32b");
    }

    #[test]
    fn ties_go_to_the_first_name() {
        let list = [m("b:7b", "7B", TOOLS), m("a:7b", "7B", TOOLS)];
        assert_eq!(choose_model("x", &list).unwrap().model, "a:7b");
    }

    #[test]
    fn no_tool_capable_model_is_a_clear_error() {
        let list = [
            m("nomic-embed-text", "137M", EMBED),
            m("gemma:2b", "2B", PLAIN),
        ];
        let err = choose_model("qwen2.5:7b", &list).unwrap_err().to_string();
        assert!(
            err.contains("none of the installed models can call tools"),
            "{err}"
        );
        assert!(
            err.contains("gemma:2b") && err.contains("ollama pull"),
            "{err}"
        );
        let err = choose_model("qwen2.5:7b", &[]).unwrap_err().to_string();
        assert!(err.contains("no models"), "{err}");
    }

    #[test]
    fn unknown_capabilities_are_a_last_resort_and_embeddings_never() {
        let list = [
            m("all-minilm-embed", "23M", None),
            m("mystery:13b", "13B", None),
        ];
        let c = choose_model("x", &list).unwrap();
        assert_eq!(c.model, "mystery:13b");
        assert!(
            c.reason.contains("does not report tool support"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn a_configured_model_that_cannot_call_tools_is_refused_with_the_ones_that_can() {
        let listed = vec![
            m("sqlcoder:15b", "15B", PLAIN),
            m("qwen2.5:7b", "7.6B", TOOLS),
        ];
        let err = choose_model("sqlcoder:15b", &listed)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "`sqlcoder:15b` is installed but cannot call tools, which agent-fabric requires; set `model` to one that can, such as qwen2.5:7b"
        );
        // Unknown capabilities are not a refusal.
        let listed = vec![m("old:7b", "", None)];
        assert!(choose_model("old:7b", &listed).is_ok());
    }
}
