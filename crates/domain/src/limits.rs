//! What a run may spend, and how a task's complexity picks its model key: configuration the
//! config file holds and the run service's preparation reads, one type each (issue #41).

use serde::Serialize;

/// Model choice by task complexity (seed 003): a score from 0 to 100; at or above
/// `threshold` the `complex` key, below it the `simple` one (`complexity_routing`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComplexityRouting {
    /// The score from which a task counts as complex.
    pub threshold: u8,
    /// The model key of simple tasks (a small local model).
    pub simple: String,
    /// The model key of complex tasks (a strong model).
    pub complex: String,
}

/// Limits of one run tree (a run and its delegated children), enforced during a step too
/// (docs/QUALITY.md): `budget`, and a specialist's own in `specialist_budgets`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct BudgetLimits {
    /// Tokens (prompt and completion) at most.
    pub max_tokens: Option<u64>,
    /// US dollars at most (needs `price_per_mtok` on the model keys used).
    pub max_cost_usd: Option<f64>,
    /// Wall-clock seconds at most.
    pub max_wall_s: Option<u64>,
}

impl BudgetLimits {
    /// These limits with `own`'s in place of each one it sets.
    pub fn overlaid(self, own: &Self) -> Self {
        Self {
            max_tokens: own.max_tokens.or(self.max_tokens),
            max_cost_usd: own.max_cost_usd.or(self.max_cost_usd),
            max_wall_s: own.max_wall_s.or(self.max_wall_s),
        }
    }
}
