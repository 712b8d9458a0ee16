//! One member's tools as the loop sees them: its built-in tools plus whatever its tool
//! sources (MCP servers, delegation) offer, all under the same network and write rules.

use async_trait::async_trait;
use fabric_domain::{SpecialistSpec, ToolSpec};
use std::sync::Arc;

use crate::ports::{SourceError, Tool, ToolContext, ToolNotice, ToolSource, Withheld};

/// Why a tool is left out of a run, or `None` when the run and the specialist may use it.
pub(crate) fn withhold_reason(
    spec: &ToolSpec,
    specialist: &SpecialistSpec,
    network_allowed: bool,
) -> Option<&'static str> {
    let a = spec.annotations;
    if a.needs_network && !network_allowed {
        Some("it needs the network, which this run does not allow (`--network-allowed`)")
    } else if !a.read_only && !specialist.may_write {
        // A specialist that may not write gets no tool that could: only read-only ones.
        Some("this specialist may not write, and the tool is not read-only")
    } else {
        None
    }
}

/// Splits tools into those the run and the specialist may use and those left out, with the
/// reason, so a call to a left-out tool is answered with why.
pub(crate) fn split_allowed(
    tools: Vec<Arc<dyn Tool>>,
    specialist: &SpecialistSpec,
    network_allowed: bool,
) -> (Vec<Arc<dyn Tool>>, Vec<Withheld>) {
    let mut allowed = Vec::with_capacity(tools.len());
    let mut withheld = Vec::new();
    for tool in tools {
        match withhold_reason(tool.spec(), specialist, network_allowed) {
            Some(why) => withheld.push((tool.spec().name.clone(), why)),
            None => allowed.push(tool),
        }
    }
    (allowed, withheld)
}

/// A member's fixed tools and its growing sources, filtered by the same rules.
pub(crate) struct MemberTools {
    pub(crate) fixed: Vec<Arc<dyn Tool>>,
    pub(crate) fixed_withheld: Vec<Withheld>,
    pub(crate) sources: Vec<Arc<dyn ToolSource>>,
    pub(crate) specialist: std::sync::Arc<SpecialistSpec>,
    pub(crate) network_allowed: bool,
}

#[async_trait]
impl ToolSource for MemberTools {
    async fn start(&self, ctx: &ToolContext) -> Result<(), SourceError> {
        // Concurrently: one slow required server must not delay the start of another.
        let starts = self.sources.iter().map(|s| s.start(ctx));
        let results = futures_util::future::join_all(starts).await;
        let mut missing = Vec::new();
        for result in results {
            match result {
                Ok(()) => {}
                Err(SourceError::Unavailable(servers)) => missing.extend(servers),
                Err(SourceError::Cancelled) => return Err(SourceError::Cancelled),
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(SourceError::Unavailable(missing))
        }
    }

    fn version(&self) -> u64 {
        // Each source's version only grows, so their sum changes whenever one does.
        self.sources
            .iter()
            .fold(0u64, |sum, s| sum.wrapping_add(s.version()))
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools = self.fixed.clone();
        for source in &self.sources {
            tools.extend(source.tools().into_iter().filter(|t| {
                withhold_reason(t.spec(), &self.specialist, self.network_allowed).is_none()
            }));
        }
        tools
    }

    fn withheld(&self) -> Vec<Withheld> {
        let mut withheld = self.fixed_withheld.clone();
        for source in &self.sources {
            withheld.extend(source.withheld());
            for tool in source.tools() {
                if let Some(why) =
                    withhold_reason(tool.spec(), &self.specialist, self.network_allowed)
                {
                    withheld.push((tool.spec().name.clone(), why));
                }
            }
        }
        withheld
    }

    fn take_notices(&self) -> Vec<ToolNotice> {
        self.sources.iter().flat_map(|s| s.take_notices()).collect()
    }

    async fn noticed(&self) {
        if self.sources.is_empty() {
            return std::future::pending().await;
        }
        futures_util::future::select_all(self.sources.iter().map(|s| s.noticed())).await;
    }
}
