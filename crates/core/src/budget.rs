//! What a tree of runs may spend together, and where a run sits in its tree. A leaf module:
//! the tool context (a port) carries a [`Lineage`], and the engine charges its [`RunBudget`],
//! without either depending on delegation itself.

use fabric_domain::RunId;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What a tree of runs (a run and every run it delegated to) may spend together.
#[derive(Debug)]
pub struct RunBudget {
    max_depth: u32,
    max_steps: Option<u32>,
    max_tokens: Option<u64>,
    deadline: Option<Instant>,
    steps: AtomicU32,
    tokens: AtomicU64,
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
            deadline: time.map(|t| Instant::now() + t),
            steps: AtomicU32::new(0),
            tokens: AtomicU64::new(0),
        }
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
    pub fn take_step(&self) -> Result<(), String> {
        if let Some(deadline) = self.deadline
            && Instant::now() >= deadline
        {
            return Err(
                "the time budget of this run and the runs it delegated to is used up".to_owned(),
            );
        }
        if let Some(max) = self.max_tokens {
            let used = self.tokens.load(Ordering::Acquire);
            if used >= max {
                return Err(format!(
                    "the token budget of this run and the runs it delegated to is used up ({used} of {max} tokens)"
                ));
            }
        }
        let used = self.steps.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(max) = self.max_steps
            && used > max
        {
            return Err(format!(
                "the step budget of this run and the runs it delegated to is used up ({max} model calls)"
            ));
        }
        Ok(())
    }

    /// Charges tokens a model call used.
    pub fn charge_tokens(&self, tokens: u64) {
        self.tokens.fetch_add(tokens, Ordering::AcqRel);
    }

    /// Model calls made so far by the whole tree.
    pub fn steps_used(&self) -> u32 {
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
