//! The ports: traits the engine calls and adapters implement, held as `Arc<dyn Port>`.

mod chat;
mod embed;
mod files;
mod hooks;
mod ledger;
mod observer;
mod person;
mod prepare;
mod queue;
mod sampler;
mod sandbox;
mod source;
mod staging;
mod store;
mod tool;
mod workspace;

pub use chat::{
    ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse, ToolDef, ToolDefinitions,
};
pub use embed::EmbeddingClient;
pub use files::WorkspaceFiles;
pub use hooks::{HookPlace, HookSource, Hooks};
pub use ledger::{DaySpend, SpendLedger};
pub use observer::{EventSink, NoopObserver, RunObserver};
pub use person::{InboxItem, Person, Reply};
pub use prepare::{ChatFactory, ModelResolver, RunHooks, SetupError, ToolFactory};
pub use queue::{ClaimedRun, QueueSignal, QueuedCancel, Release, Renewal, RunQueue};
pub use sampler::{SampleError, SampleRequest, Sampled, Sampler};
pub use sandbox::{
    CommandWatch, NoOsSandbox, ProcessSandbox, RunSandbox, SandboxGuard, SecurityNotice,
};
pub use source::{SourceError, StaticTools, ToolNotice, ToolSource, Withheld};
pub use staging::{Applied, ChangeKind, Staged, StagedChange, StagedDiff, Stager, StagingError};
pub use store::{
    Liveness, NewRun, PruneHook, QueryEmbedding, Reindexed, RunCatalog, RunLog, RunQuery, RunStore,
    SearchHit, SearchQuery, StatsGroup, StatsQuery, StatsRow, StoreError,
};
pub use tool::{Tool, ToolContext, ToolError, ToolOutput};
pub use workspace::{
    AppliedRun, ApplyMode, Checkpointed, CommitId, DiffStat, FileDiff, FileStat, StepNote,
    Workspace, WorkspaceError, WorkspaceOrigin, WorkspaceSpec, Workspaces, remote_shown,
};
