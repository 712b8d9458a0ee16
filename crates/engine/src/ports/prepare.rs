//! The narrow ports run preparation needs from the outside (issue #28, step 2): a model
//! server to start, list and pull from, a client per model key, and each specialist's tools.
//! The binary implements them over its configuration and adapters; `service::prepare` holds
//! the policy that decides what to ask of them.

use async_trait::async_trait;
use fabric_domain::{SandboxMode, SpecialistSpec};
use std::path::Path;
use std::sync::Arc;
use thiserror::Error;

use super::{ChatClient, ProcessSandbox, RunSandbox, Stager, Tool, ToolSource};
use crate::delegate::ChildRunner;
use crate::models::ModelCandidate;

/// Why a preparation port failed, sorted by what the caller can do about it.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SetupError {
    /// The model cannot be used now (its server is down and cannot be started, a pull
    /// failed, no model fits): retry later or fix the server.
    #[error("{0}")]
    ModelUnavailable(String),
    /// What was asked for cannot be set up as given (an unknown tool, a sandbox this host
    /// cannot enforce, Podman missing for a container): the request or the config must
    /// change.
    #[error("{0}")]
    Refused(String),
    /// A fault inside the fabric (a client that cannot be built): report it.
    #[error("{0}")]
    Internal(String),
}

/// The model servers behind the model keys: start, list, pull. Listings are cached by the
/// implementation; every method is safe to call from concurrent preparations.
#[async_trait]
pub trait ModelResolver: Send + Sync {
    /// Starts `key`'s local server when it is down and the configuration allows it; `Ok`
    /// when there is nothing to start.
    async fn start(&self, key: &str) -> Result<(), SetupError>;

    /// The models `key`'s server offers, with what it reports about them.
    async fn list(&self, key: &str) -> Result<Arc<Vec<ModelCandidate>>, SetupError>;

    /// Pulls `model` onto `key`'s server.
    async fn pull(&self, key: &str, model: &str) -> Result<(), SetupError>;
}

/// The chat client of each model key.
pub trait ChatFactory: Send + Sync {
    /// The client of `key` (shared between runs by the implementation).
    fn chat(&self, key: &str) -> Result<Arc<dyn ChatClient>, SetupError>;

    /// How to supply the API key `key` needs and its environment lacks, if it lacks one.
    fn missing_api_key(&self, key: &str) -> Option<String> {
        let _ = key;
        None
    }
}

/// A run's hooks and what it records about them at its start (issue #43).
#[derive(Default)]
pub struct RunHooks {
    /// The hooks; `None`: none.
    pub hooks: Option<Arc<dyn crate::ports::Hooks>>,
    /// Recorded as `security_event`s right after `run_start` (an untrusted project's hooks).
    pub notices: Vec<super::SecurityNotice>,
}

/// The process sandbox of a run and the tools of its specialists.
#[async_trait]
pub trait ToolFactory: Send + Sync {
    /// The process sandbox for `mode` (the configured one when `None`) and its runlog
    /// record, or why this host cannot enforce it.
    fn sandbox(
        &self,
        mode: Option<SandboxMode>,
    ) -> Result<(Arc<dyn ProcessSandbox>, RunSandbox), SetupError>;

    /// Whether `specialist` can run on this host at all (a container image needs Podman).
    fn check(&self, specialist: &SpecialistSpec) -> Result<(), SetupError>;

    /// The tools of `specialist` in a run under `sandbox` (asked for as `mode`); delegate
    /// tools start their children through `children`.
    fn tools(
        &self,
        specialist: &SpecialistSpec,
        sandbox: (&Arc<dyn ProcessSandbox>, Option<SandboxMode>),
        children: &Arc<dyn ChildRunner>,
    ) -> Result<Vec<Arc<dyn Tool>>, SetupError>;

    /// The tool sources of `specialist` that grow while a run goes on (MCP servers).
    fn sources(&self, specialist: &SpecialistSpec) -> Vec<Arc<dyn ToolSource>>;

    /// The staging area a critic reviews work in.
    fn stager(&self) -> Arc<dyn Stager>;

    /// The hooks of a run from `sources` (issue #43: the config's, possibly none), for a run
    /// at `place`, where the factory may add the place's own (a trusted project's
    /// `.claude/settings.json`, `source: project`), with what the run should record about
    /// them (a project's hooks left out because it is not trusted). No hooks: no source has
    /// one, or this factory runs none.
    async fn hooks(
        &self,
        sources: Vec<crate::ports::HookSource>,
        place: crate::ports::HookPlace,
    ) -> RunHooks {
        let _ = (sources, place);
        RunHooks::default()
    }

    /// Kills what a stopped run's commands left running in `workspace`; their pids.
    async fn reap(&self, workspace: &Path) -> Vec<u32> {
        let _ = workspace;
        Vec::new()
    }
}
