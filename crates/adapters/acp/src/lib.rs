//! `fabric-acp`: the Agent Client Protocol (ACP, JSON-RPC 2.0 over stdio) for agent-fabric:
//! the fabric as an agent an editor (Zed, JetBrains IDEs, Neovim) drives (`fabric acp`).
//!
//! Where it sits: a driving adapter beside `fabric-api-http` and `fabric-mcp`; it depends on
//! `fabric-core` (the run service) and `fabric-domain` only, and the binary wires it.
//! Each session is a conversation on the editor's `cwd`, each `session/prompt` a run that
//! continues the previous one (`TaskRequest::continues`), its events sent back as
//! `session/update` notifications (docs/ACP.md, ADR-112).
//!
//! And the other way round: [`AcpAgentTool`], an ACP agent as a specialist another one
//! delegates to (`agent__<id>`).
//!
//! Layout: [`rpc`] (the JSON-RPC framing and the peer), `agent` (the methods), `session`
//! (sessions and their turns), `updates` (a turn's events as updates), `person` (questions
//! and approvals at the editor), `servers` (the editor's MCP servers), `history` (sessions
//! from the store), `apply` (`/apply` over unsaved buffers), `client` (an ACP agent as a
//! specialist).

mod agent;
mod apply;
mod client;
mod error;
mod history;
mod person;
pub mod rpc;
mod servers;
mod session;
mod updates;

pub use agent::{AcpAgent, Defaults, PROTOCOL_VERSION};
pub use client::AcpAgentTool;
pub use error::AcpError;

use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use rpc::{Incoming, Peer};

/// Serves ACP on `input` and `output` until the client closes `input`; requests are
/// answered concurrently (a `session/cancel` reaches a prompt that runs), every line written
/// in order. When the client goes, the service's runs are cancelled and each records its
/// end before this returns.
pub async fn serve<R, W>(
    service: fabric_core::service::RunService,
    defaults: Defaults,
    version: &str,
    input: R,
    output: W,
) -> Result<(), AcpError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_lines(rx, output));
    let peer = Arc::new(Peer::new(tx));
    let agent = Arc::new(AcpAgent::new(
        service.clone(),
        peer.clone(),
        defaults,
        version,
    ));
    let mut lines = BufReader::new(input).lines();
    while let Some(line) = lines.next_line().await.map_err(AcpError::Read)? {
        if !line.trim().is_empty() {
            dispatch(&agent, &peer, Incoming::parse(&line));
        }
    }
    service.begin_shutdown();
    drop(agent);
    drop(peer);
    writer.await.map_err(|_| AcpError::WriterPanicked)?
}

fn dispatch(agent: &Arc<AcpAgent>, peer: &Arc<Peer>, incoming: Incoming) {
    match incoming {
        Incoming::Request { id, method, params } => {
            let (agent, peer) = (agent.clone(), peer.clone());
            tokio::spawn(async move {
                let answer = agent.request(&method, params).await;
                peer.respond(id, answer);
            });
        }
        Incoming::Notification { method, params } => agent.notification(&method, &params),
        Incoming::Response { id, result } => peer.answered(&id, result),
        Incoming::Invalid { id, error } => peer.respond(id, Err(error)),
    }
}

pub(crate) async fn write_lines<W: AsyncWrite + Unpin>(
    mut lines: mpsc::UnboundedReceiver<String>,
    mut output: W,
) -> Result<(), AcpError> {
    while let Some(line) = lines.recv().await {
        output
            .write_all(line.as_bytes())
            .await
            .map_err(AcpError::Write)?;
        output.write_all(b"\n").await.map_err(AcpError::Write)?;
        output.flush().await.map_err(AcpError::Write)?;
    }
    Ok(())
}
