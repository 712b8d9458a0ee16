//! Recruitment: which specialist, or which task force, works on a prompt, and why.
//!
//! Three ways, recorded in the `recruitment` event as `routing_method`:
//! - `explicit`: the caller named the specialists (`--pack a,b`); no routing at all.
//! - `keyword`: capabilities inferred from the prompt by whole-word matching
//!   ([`keywords`]), then a greedy set cover over the specialists' capabilities.
//! - `llm`: the routing model is asked for `{specialist_ids, reason}`; its answer is
//!   validated (known ids only). On any failure the keyword router decides, with
//!   `routing_method: keyword_fallback` and the failure in the reason.
//!
//! Everything here is pure except [`route_with_llm`], which talks to the model only through
//! the [`ChatClient`] port, so the whole module is tested with plain values and a fake model.

pub mod complexity;
pub mod keywords;
mod llm;

use fabric_domain::SpecialistSpec;
use fabric_domain::runlog::RoutingMethod;
use std::sync::Arc;

pub use keywords::CapabilityMap;
pub use llm::{LlmRouting, ROUTE_TOOL, RoutingCall, RoutingFailure, parse_answer, route_with_llm};

use crate::ChatClient;

/// The outcome of recruitment: who works, how they were chosen and why. The one type from
/// routing to the task force; the `recruitment` event records it (with the task force's
/// mode) as `runlog::Recruitment`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roster {
    /// The chosen specialists, in the order they work (sequential task forces) or report
    /// (parallel ones).
    pub specialist_ids: Vec<String>,
    /// `explicit`, `keyword`, `llm` or `keyword_fallback`.
    pub routing_method: RoutingMethod,
    /// Capabilities inferred from the prompt (by keywords, whatever the method).
    pub required_capabilities: Vec<String>,
    /// Why these specialists, in words.
    pub reason: String,
}

impl Roster {
    /// The specialists `specialist_ids`, named by the caller (`--pack`, a test) for `reason`:
    /// no routing, no capabilities inferred.
    pub fn explicit(specialist_ids: Vec<String>, reason: impl Into<String>) -> Self {
        Self {
            specialist_ids,
            routing_method: RoutingMethod::Explicit,
            required_capabilities: Vec::new(),
            reason: reason.into(),
        }
    }
}

/// Keyword routing over `specialists` (in configuration order). `default_id` works when the
/// prompt names no capability and no specialist keyword.
///
/// The order of a task force is the order in which the prompt first mentions what each
/// member was picked for ("research X, then implement it" puts research first); equal
/// positions keep configuration order.
pub fn route_by_keywords(
    prompt: &str,
    specialists: &[Arc<SpecialistSpec>],
    default_id: &str,
) -> Roster {
    let map = CapabilityMap::with_specialists(specialists);
    let inferred = map.infer(prompt);
    let required: Vec<String> = inferred.iter().map(|(c, _)| c.clone()).collect();
    let words = keywords::words(prompt);
    let cover = keywords::greedy_cover(specialists, &required, &words);

    if cover.is_empty() {
        return by_own_keywords(specialists, &words, default_id, required);
    }

    let position = |caps: &[String]| {
        caps.iter()
            .filter_map(|c| inferred.iter().find(|(x, _)| x == c).map(|(_, at)| *at))
            .min()
            .unwrap_or(usize::MAX)
    };
    let mut ordered: Vec<keywords::Pick> = cover;
    let dropped_writers = only_look(specialists, &words, &mut ordered);
    ordered.sort_by(|a, b| {
        position(&a.covers)
            .cmp(&position(&b.covers))
            .then(a.index.cmp(&b.index))
    });
    let parts: Vec<String> = ordered
        .iter()
        .map(|p| {
            let mut part = format!(
                "`{}` covers {}",
                specialists[p.index].id,
                p.covers.join(", ")
            );
            if let Some(tie) = &p.tie {
                part.push_str(&format!(" ({tie})"));
            }
            part
        })
        .collect();
    let uncovered: Vec<&String> = required
        .iter()
        .filter(|c| !ordered.iter().any(|p| p.covers.contains(c)))
        .collect();
    let mut reason = format!(
        "prompt asks for {}; {}",
        required.join(", "),
        parts.join("; ")
    );
    if !uncovered.is_empty() {
        let names: Vec<&str> = uncovered.iter().map(|c| c.as_str()).collect();
        reason.push_str(&format!("; no specialist covers {}", names.join(", ")));
    }
    if !dropped_writers.is_empty() {
        reason.push_str(&format!(
            "; the task only asks to look, so {} (which may write) was left out",
            dropped_writers
                .iter()
                .map(|id| format!("`{id}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Roster {
        specialist_ids: ordered
            .iter()
            .map(|p| specialists[p.index].id.clone())
            .collect(),
        routing_method: RoutingMethod::Keyword,
        required_capabilities: required,
        reason,
    }
}

/// No capability anyone covers: the specialist whose own keywords fit best, else the
/// default. Ties go to configuration order.
fn by_own_keywords(
    specialists: &[Arc<SpecialistSpec>],
    words: &[String],
    default_id: &str,
    required: Vec<String>,
) -> Roster {
    let mut scored: Vec<(usize, usize)> = specialists
        .iter()
        .enumerate()
        .map(|(i, s)| (i, keywords::keyword_score(s, words)))
        .filter(|(_, score)| *score > 0)
        .collect();
    // Best first: the highest score, then configuration order.
    scored.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let (id, reason) = match scored.first() {
        Some(&(i, score)) => {
            let mut reason = format!(
                "no capability keyword in the prompt; `{}` matched {score} of its own keywords",
                specialists[i].id
            );
            if let Some(&(other, _)) = scored.get(1).filter(|(_, s)| *s == score) {
                reason.push_str(&format!(
                    " (tied with `{}`, which matched as many; `{}` is listed first in the configuration)",
                    specialists[other].id, specialists[i].id
                ));
            }
            (specialists[i].id.clone(), reason)
        }
        None => (
            default_id.to_owned(),
            format!(
                "no capability or specialist keyword in the prompt; using the default specialist `{default_id}`"
            ),
        ),
    };
    Roster {
        specialist_ids: vec![id],
        routing_method: RoutingMethod::Keyword,
        required_capabilities: required,
        reason,
    }
}

/// A task that only asks to look (review, audit, explain) is not handed to a specialist
/// that writes when one that only reads covers part of it: "review the code for bugs" must
/// not bring in an engineer who may change the code. Returns the writers left out.
fn only_look(
    specialists: &[Arc<SpecialistSpec>],
    words: &[String],
    ordered: &mut Vec<keywords::Pick>,
) -> Vec<String> {
    let mut dropped_writers: Vec<String> = Vec::new();
    if !keywords::reads_only(words) {
        return dropped_writers;
    }
    if ordered.iter().any(|p| !specialists[p.index].may_write) {
        ordered.retain(|p| {
            let keep = !specialists[p.index].may_write;
            if !keep {
                dropped_writers.push(specialists[p.index].id.clone());
            }
            keep
        });
    } else if let Some(reader) = best_reader(specialists, words) {
        // Only writers cover the task's capabilities, yet a read-only specialist answers to
        // its words ("review the code" names `code`, which engineering covers, and `review`,
        // which the reviewer answers to): the reader takes it alone.
        dropped_writers = ordered
            .iter()
            .map(|p| specialists[p.index].id.clone())
            .collect();
        let covers = ordered.iter().flat_map(|p| p.covers.clone()).collect();
        *ordered = vec![keywords::Pick {
            index: reader,
            covers,
            tie: Some(format!(
                "it only reads and answers to {} of its keywords",
                keywords::keyword_score(&specialists[reader], words)
            )),
        }];
    }
    dropped_writers
}

/// The read-only specialist whose own keywords fit the prompt best (configuration order on a
/// tie), if any matches at all.
fn best_reader(specialists: &[Arc<SpecialistSpec>], words: &[String]) -> Option<usize> {
    specialists
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.may_write)
        .map(|(i, s)| (i, keywords::keyword_score(s, words)))
        .filter(|(_, score)| *score > 0)
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(i, _)| i)
}

/// LLM routing with keyword fallback: asks the routing model, and on any failure decides by
/// keywords and says why. Returns the decision and the model call, for the runlog.
pub async fn route(
    prompt: &str,
    specialists: &[Arc<SpecialistSpec>],
    default_id: &str,
    llm: Option<(&dyn ChatClient, &LlmRouting)>,
) -> (Roster, Option<RoutingCall>) {
    let by_keywords = route_by_keywords(prompt, specialists, default_id);
    let Some((chat, settings)) = llm else {
        return (by_keywords, None);
    };
    let call = route_with_llm(chat, settings, prompt, specialists).await;
    match &call.outcome {
        Ok((ids, reason)) => (
            Roster {
                specialist_ids: ids.clone(),
                routing_method: RoutingMethod::Llm,
                required_capabilities: by_keywords.required_capabilities,
                reason: format!("routing model `{}`: {reason}", settings.model),
            },
            Some(call),
        ),
        Err(failure) => (
            Roster {
                routing_method: RoutingMethod::KeywordFallback,
                reason: format!(
                    "LLM routing failed ({failure}); keyword routing: {}",
                    by_keywords.reason
                ),
                ..by_keywords
            },
            Some(call),
        ),
    }
}

#[cfg(test)]
mod tests;
