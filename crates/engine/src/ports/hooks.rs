//! Lifecycle hooks (issue #43, docs/HOOKS.md): the loop fires an event, whoever implements
//! this runs the hooks that apply and says what each came to. The loop neither knows that
//! hooks are processes nor where they were configured; it records each [`HookRun`] and acts
//! on their [`fabric_domain::hooks::HookVerdict`], which it reads from those records alone,
//! so a replay that hands back the recorded runs decides the same.

use async_trait::async_trait;
use fabric_domain::hooks::{HookEvent, HookInput, HooksConfig};
use fabric_domain::runlog::HookRun;
use std::path::PathBuf;
use std::sync::Arc;

/// A run's hooks.
#[async_trait]
pub trait Hooks: Send + Sync {
    /// Whether any hook applies to `event` with this matcher target (a tool's name, a start's
    /// source); the loop builds no input and records nothing otherwise.
    fn wants(&self, event: HookEvent, target: Option<&str>) -> bool;

    /// Runs the hooks `input` applies to (in parallel), one record each in the configured
    /// order. Never fails: a hook that cannot start, hangs, crashes or answers garbage is a
    /// record with its typed outcome, and the action goes ahead (ADR-110).
    async fn fire(&self, input: &HookInput) -> Vec<HookRun>;
}

/// Hooks from one place, as the run service hands them to the runner.
#[derive(Debug, Clone)]
pub struct HookSource {
    /// Where they were configured: `config` (the fabric's config file) or `project` (a
    /// trusted project's `.claude/settings.json`); recorded as `hook_run.source`.
    pub name: &'static str,
    /// The hooks.
    pub config: Arc<HooksConfig>,
}

/// What the runner needs to know of the run its hooks work for, besides each event's input.
#[derive(Debug, Clone, Default)]
pub struct HookPlace {
    /// The project's root (`CLAUDE_PROJECT_DIR`); `None`: a scratch run, whose workspace
    /// stands for it.
    pub project: Option<PathBuf>,
}
