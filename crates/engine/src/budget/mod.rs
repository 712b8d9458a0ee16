//! What a tree of runs may spend together, and where a run sits in its tree. A leaf module:
//! the tool context (a port) carries a [`Lineage`], and the engine charges its [`RunBudget`],
//! without either depending on delegation itself. [`daily`] holds what each model key may
//! spend per day, across runs and processes.

pub mod daily;

use fabric_domain::{RunId, Usage};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Which limit of a run tree's budget is used up: the run ends `budget_exceeded` with this
/// message as its reason (so it stays exactly as written here).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BudgetSpent {
    /// The tree's time is up.
    #[error("the time budget of this run and the runs it delegated to ({seconds} s) is used up")]
    Time {
        /// The time budget, in seconds.
        seconds: u64,
    },
    /// The tree's tokens are used up.
    #[error(
        "the token budget of this run and the runs it delegated to is used up ({used} of {max} tokens)"
    )]
    Tokens {
        /// Tokens used.
        used: u64,
        /// The limit.
        max: u64,
    },
    /// The tree's dollars are spent.
    #[error(
        "the cost budget of this run and the runs it delegated to is used up (${spent:.4} of ${max:.4})"
    )]
    Cost {
        /// Dollars spent.
        spent: f64,
        /// The limit.
        max: f64,
    },
    /// The tree made as many model calls as it may.
    #[error(
        "the step budget of this run and the runs it delegated to is used up ({max} model calls)"
    )]
    Steps {
        /// The limit.
        max: u32,
    },
    /// The tokens left do not leave room for the next call's answer.
    #[error(
        "the token budget of this run and the runs it delegated to would be exceeded by the next model call ({used} of {max} tokens used, its prompt is about {prompt_tokens})"
    )]
    NoRoomForTokens {
        /// Tokens used.
        used: u64,
        /// The limit.
        max: u64,
        /// The next call's prompt, estimated.
        prompt_tokens: u64,
    },
    /// The dollars left do not pay for the next call's answer.
    #[error(
        "the cost budget of this run and the runs it delegated to (${max:.4}) would be exceeded by the next model call (${spent:.4} spent)"
    )]
    NoRoomForCost {
        /// The limit.
        max: f64,
        /// Dollars spent.
        spent: f64,
    },
}

pub use fabric_domain::Price;

/// What a tree of runs (a run and every run it delegated to) may spend together.
#[derive(Debug)]
pub struct RunBudget {
    max_depth: u32,
    max_steps: Option<u32>,
    max_tokens: Option<u64>,
    max_cost_usd: Option<f64>,
    time: Option<Duration>,
    deadline: Option<Instant>,
    steps: AtomicU32,
    tokens: AtomicU64,
    /// Spent, in billionths of a dollar (an atomic integer; a float has no atomic add).
    cost_nano_usd: AtomicU64,
    /// Steps the tree's runs handed to the cloud model (`cloud_fallback.max_per_run` caps
    /// the tree, critics' and children's runs included).
    fallbacks: AtomicU32,
}

impl RunBudget {
    /// A budget: delegation depth cap, and optional limits on model calls, tokens and time
    /// for the whole tree.
    pub fn new(
        max_depth: u32,
        max_steps: Option<u32>,
        max_tokens: Option<u64>,
        time: Option<Duration>,
    ) -> Self {
        Self {
            max_depth,
            max_steps,
            max_tokens,
            max_cost_usd: None,
            time,
            deadline: time.map(|t| Instant::now() + t),
            steps: AtomicU32::new(0),
            tokens: AtomicU64::new(0),
            cost_nano_usd: AtomicU64::new(0),
            fallbacks: AtomicU32::new(0),
        }
    }

    /// With a limit in dollars (the model keys' `price_per_mtok` price each call).
    pub fn with_cost_limit(mut self, max_cost_usd: Option<f64>) -> Self {
        self.max_cost_usd = max_cost_usd;
        self
    }

    /// Takes one cloud fallback for the tree, if fewer than `max` were taken.
    pub(crate) fn take_fallback(&self, max: u32) -> bool {
        self.fallbacks
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Cloud fallbacks the tree took.
    /// Only the unit tests read it.
    #[cfg(test)]
    pub(crate) fn fallbacks_taken(&self) -> u32 {
        self.fallbacks.load(Ordering::Acquire)
    }

    /// When the time budget runs out, if there is one.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Why the run stops when the deadline passes during a step.
    pub(crate) fn time_reason(&self, during: &str) -> String {
        format!(
            "the time budget of this run and the runs it delegated to ({} s) ran out during {during}",
            self.time.map_or(0, |t| t.as_secs())
        )
    }

    /// Charges a model call: its tokens, and its cost when the model key has a price.
    pub fn charge(&self, usage: Usage, price: Option<Price>) {
        self.charge_tokens(usage.total_tokens);
        if let Some(price) = price {
            let nano = (price.of(usage) * 1e9).round();
            self.cost_nano_usd
                .fetch_add(nano.max(0.0) as u64, Ordering::AcqRel);
        }
    }

    /// Dollars spent so far by the whole tree.
    pub fn cost_usd(&self) -> f64 {
        self.cost_nano_usd.load(Ordering::Acquire) as f64 / 1e9
    }

    /// Whether the token or cost limit applies to calls at `price` (so their answers are
    /// capped, and a streamed answer is counted as it arrives).
    pub(crate) fn limits_answers(&self, price: Option<Price>) -> bool {
        self.max_tokens.is_some() || (self.max_cost_usd.is_some() && price.is_some())
    }

    /// The most completion tokens the next call may ask for so that the token and cost
    /// limits hold, given its prompt (estimated) and the model's own `wanted` limit; `Err`
    /// when not even a short answer fits.
    pub(crate) fn cap_completion(
        &self,
        wanted: Option<u32>,
        prompt_tokens: impl FnOnce() -> u64,
        price: Option<Price>,
    ) -> Result<Option<u32>, BudgetSpent> {
        /// An answer shorter than this is not worth asking for.
        const MIN_ANSWER: u64 = 16;
        if !self.limits_answers(price) {
            // Nothing to cap by: the prompt is not even measured.
            return Ok(wanted);
        }
        let prompt_tokens = prompt_tokens();
        let mut cap: Option<u64> = wanted.map(u64::from);
        if let Some(max) = self.max_tokens {
            let left = max.saturating_sub(self.tokens.load(Ordering::Acquire));
            let room = left.saturating_sub(prompt_tokens);
            if room < MIN_ANSWER {
                return Err(BudgetSpent::NoRoomForTokens {
                    used: max - left,
                    max,
                    prompt_tokens,
                });
            }
            cap = Some(cap.map_or(room, |c| c.min(room)));
        }
        if let (Some(max), Some(price)) = (self.max_cost_usd, price) {
            let left = (max - self.cost_usd()).max(0.0);
            let prompt_cost = prompt_tokens as f64 * price.input_per_mtok / 1_000_000.0;
            let room = if price.output_per_mtok > 0.0 {
                ((left - prompt_cost).max(0.0) * 1_000_000.0 / price.output_per_mtok) as u64
            } else {
                u64::MAX
            };
            if room < MIN_ANSWER {
                return Err(BudgetSpent::NoRoomForCost {
                    max,
                    spent: self.cost_usd(),
                });
            }
            cap = Some(cap.map_or(room, |c| c.min(room)));
        }
        Ok(cap.map(|c| u32::try_from(c).unwrap_or(u32::MAX)))
    }

    /// No limits besides the default depth cap.
    pub fn unlimited() -> Self {
        Self::new(
            fabric_domain::DEFAULT_MAX_DELEGATION_DEPTH,
            None,
            None,
            None,
        )
    }

    /// Takes one model call from the budget, or says which limit is used up.
    pub fn take_step(&self) -> Result<(), BudgetSpent> {
        if let Some(deadline) = self.deadline
            && Instant::now() >= deadline
        {
            let seconds = self.time.map_or(0, |t| t.as_secs());
            return Err(BudgetSpent::Time { seconds });
        }
        if let Some(max) = self.max_tokens {
            let used = self.tokens.load(Ordering::Acquire);
            if used >= max {
                return Err(BudgetSpent::Tokens { used, max });
            }
        }
        if let Some(max) = self.max_cost_usd {
            let spent = self.cost_usd();
            if spent >= max {
                return Err(BudgetSpent::Cost { spent, max });
            }
        }
        let used = self.steps.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(max) = self.max_steps
            && used > max
        {
            return Err(BudgetSpent::Steps { max });
        }
        Ok(())
    }

    /// Charges tokens a model call used.
    pub(crate) fn charge_tokens(&self, tokens: u64) {
        self.tokens.fetch_add(tokens, Ordering::AcqRel);
    }

    /// Model calls made so far by the whole tree.
    /// Only the unit tests read it.
    #[cfg(test)]
    pub(crate) fn steps_used(&self) -> u32 {
        self.steps.load(Ordering::Acquire)
    }

    /// The depth cap.
    pub fn max_depth(&self) -> u32 {
        self.max_depth
    }
}

/// Where a run sits in its tree.
#[derive(Debug, Clone)]
pub struct Lineage {
    /// 0 for a run a person started, 1 for its children, and so on.
    pub depth: u32,
    /// The run that delegated this one.
    pub parent_run_id: Option<RunId>,
    /// Shared by the whole tree.
    pub budget: Arc<RunBudget>,
}

impl Default for Lineage {
    fn default() -> Self {
        Self::root(Arc::new(RunBudget::unlimited()))
    }
}

impl Lineage {
    /// A run a person started.
    pub fn root(budget: Arc<RunBudget>) -> Self {
        Self {
            depth: 0,
            parent_run_id: None,
            budget,
        }
    }

    /// The lineage of a child of `parent`, one level deeper, on the same budget.
    pub fn child(&self, parent: RunId) -> Self {
        Self {
            depth: self.depth + 1,
            parent_run_id: Some(parent),
            budget: self.budget.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_26_cloud_fallbacks_are_counted_per_tree() {
        // A critic's or a delegated child's run has the child lineage of the run it serves:
        // its fallbacks count against the same `max_per_run` (it used to have its own).
        let root = Lineage::root(Arc::new(RunBudget::unlimited()));
        let critic = root.child(RunId::parse("20261127-000000-000-deadbeef").unwrap());
        assert!(critic.budget.take_fallback(2));
        assert!(root.budget.take_fallback(2));
        assert!(!critic.budget.take_fallback(2), "a third in the tree");
        assert!(!root.budget.take_fallback(2));
        assert_eq!(root.budget.fallbacks_taken(), 2);
        assert!(!RunBudget::unlimited().take_fallback(0), "none allowed");
    }

    fn usage(prompt: u64, completion: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
        }
    }

    #[test]
    fn issue_11_the_next_answer_is_capped_to_what_the_tokens_left_allow() {
        let budget = RunBudget::new(2, None, Some(1_000), None);
        assert_eq!(
            budget.cap_completion(Some(4_096), || 100, None),
            Ok(Some(900))
        );
        assert_eq!(
            budget.cap_completion(Some(500), || 100, None),
            Ok(Some(500))
        );
        budget.charge(usage(700, 100), None);
        assert_eq!(budget.cap_completion(None, || 100, None), Ok(Some(100)));
        let refused = budget
            .cap_completion(None, || 190, None)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("800 of 1000 tokens used"), "{refused}");
    }

    #[test]
    fn issue_11_dollars_are_counted_by_price_and_refuse_the_step_once_spent() {
        let price = Price {
            input_per_mtok: 2.0,
            output_per_mtok: 8.0,
        };
        let budget = RunBudget::new(2, None, None, None).with_cost_limit(Some(0.01));
        // 1,000 prompt tokens cost $0.002: $0.008 left buys 1,000 completion tokens.
        assert_eq!(
            budget.cap_completion(None, || 1_000, Some(price)),
            Ok(Some(1_000))
        );
        budget.charge(usage(1_000, 1_000), Some(price));
        assert!((budget.cost_usd() - 0.01).abs() < 1e-9);
        let spent = budget.take_step().unwrap_err();
        assert!(matches!(spent, BudgetSpent::Cost { .. }), "{spent}");
        assert!(spent.to_string().contains("cost budget"));
    }
}
