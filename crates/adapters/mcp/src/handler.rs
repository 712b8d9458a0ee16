//! Our side of an MCP connection: it answers the server's notifications. Only
//! `tools/list_changed` matters here; it wakes the task that lists the tools again.

use rmcp::ClientHandler;
use rmcp::service::{NotificationContext, RoleClient};
use tokio::sync::mpsc;

/// The client handler of one server.
pub(crate) struct Handler {
    /// Capacity 1: several announcements before the next listing are one relisting.
    pub(crate) tools_changed: mpsc::Sender<()>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // Full means a relisting is already pending, which will see this change too.
        let _ = self.tools_changed.try_send(());
    }
}
