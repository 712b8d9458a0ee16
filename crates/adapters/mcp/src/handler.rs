//! Our side of an MCP connection: it answers the server's notifications. Only
//! `tools/list_changed` matters here; it wakes the task that lists the tools again.

use rmcp::ClientHandler;
use rmcp::service::{NotificationContext, RoleClient};
use tokio::sync::mpsc;

/// The client handler of one server.
#[derive(Clone)]
pub(crate) struct Handler {
    /// Capacity 1: several announcements before the next listing are one relisting.
    pub(crate) tools_changed: mpsc::Sender<()>,
}

impl ClientHandler for Handler {
    /// Who we are to the server: the fabric by its name and version (rmcp's default names
    /// rmcp), asking in the `initialize` handshake for its newest revision, 2025-11-25
    /// (2026-07-28 has no `initialize`; issue #29).
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut info = rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::default(),
            rmcp::model::Implementation::new("agent-fabric", env!("CARGO_PKG_VERSION")),
        );
        info.protocol_version = rmcp::model::ProtocolVersion::V_2025_11_25;
        info
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // Full means a relisting is already pending, which will see this change too.
        let _ = self.tools_changed.try_send(());
    }
}
