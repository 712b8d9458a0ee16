use async_trait::async_trait;
use fabric_domain::EventKind;
use serde_json::Value;
use std::sync::Arc;
use thiserror::Error;

use super::{Tool, ToolContext};

/// Why a tool source did not start: the run cannot go on without what it lacks, so it
/// ends with this message as its reason.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SourceError {
    /// Tools the run cannot do without are not available (a required MCP server that did not
    /// start); one message per server, each naming it and why.
    #[error("{}", .0.join("; "))]
    Unavailable(Vec<String>),
    /// The run was cancelled while its tools were starting.
    #[error("the run was cancelled")]
    Cancelled,
}

impl SourceError {
    /// What the caller must do: try again once the servers are up, or nothing (cancelled).
    pub fn remedy(&self) -> crate::Remedy {
        match self {
            Self::Unavailable(_) => crate::Remedy::Retry,
            Self::Cancelled => crate::Remedy::Report,
        }
    }
}

/// A tool left out of a run, and why (e.g. it needs the network the run does not allow).
pub type Withheld = (String, &'static str);

/// Something a tool source noticed that belongs in the runlog (an MCP server that started,
/// failed or changed its tools). The loop records it like any other event.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolNotice {
    /// The runlog kind, e.g. [`EventKind::McpServer`].
    pub kind: EventKind,
    /// Its payload.
    pub payload: Value,
}

/// The set of tools one specialist's loop may call, which may grow or shrink while the run
/// goes on: MCP servers that finish starting late or announce `tools/list_changed`, schemas
/// loaded on demand. The loop reads it between steps and rebuilds the tool definitions only
/// when [`ToolSource::version`] changed; it never asks where a tool came from.
#[async_trait]
pub trait ToolSource: Send + Sync {
    /// Called once before the first model call. Sources that connect to something begin
    /// here, in the background; an `Err` (a required MCP server that did not start) ends the
    /// run with status `failed` and this message as its reason.
    async fn start(&self, _ctx: &ToolContext) -> Result<(), SourceError> {
        Ok(())
    }

    /// A number that changes whenever [`ToolSource::tools`] would answer differently.
    fn version(&self) -> u64;

    /// The tools callable now (without `finish_task`, which the loop adds).
    fn tools(&self) -> Vec<Arc<dyn Tool>>;

    /// Tools of the specialist that are not callable now, with the reason, so a call to one
    /// is answered with why rather than "unknown tool".
    fn withheld(&self) -> Vec<Withheld> {
        Vec::new()
    }

    /// Events noticed since the last call, oldest first.
    fn take_notices(&self) -> Vec<ToolNotice> {
        Vec::new()
    }

    /// Resolves when notices are waiting, so the loop records them while a long call still
    /// runs (an MCP server's progress and log messages, shown live by `--stream`). Sources
    /// that notice nothing during a call never resolve it.
    async fn noticed(&self) {
        std::future::pending::<()>().await;
    }

    /// A call that succeeded before the run's process stopped is being replayed from the
    /// runlog instead of run again: a source whose tool set that call changed (a schema
    /// loaded on demand) changes it again here.
    fn replayed(&self, tool: &str, args: &Value) {
        let _ = (tool, args);
    }
}

/// A fixed set of tools: the built-in ones of a specialist.
pub struct StaticTools {
    tools: Vec<Arc<dyn Tool>>,
    withheld: Vec<Withheld>,
}

impl StaticTools {
    /// The tools, and those left out with the reason.
    pub fn new(tools: Vec<Arc<dyn Tool>>, withheld: Vec<Withheld>) -> Self {
        Self { tools, withheld }
    }
}

impl ToolSource for StaticTools {
    fn version(&self) -> u64 {
        0
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools.clone()
    }

    fn withheld(&self) -> Vec<Withheld> {
        self.withheld.clone()
    }
}
