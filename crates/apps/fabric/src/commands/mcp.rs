//! `fabric mcp` (stdio) and the `/mcp` endpoint of `fabric serve`: the fabric as an MCP
//! server (docs/MCP.md). Runs go through the same run service as `fabric run` and HTTP.

use fabric_config::Settings;
use fabric_mcp::{FabricMcpServer, SpecialistList};

use crate::cli::Cli;
use crate::wiring;

/// `fabric mcp`: serve MCP on stdin/stdout until the client closes it.
pub(crate) async fn mcp(cli: &Cli) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    crate::app::tools::keep_mcp_servers_warm(&settings);
    // Its client drives runs as an HTTP client does: `project` only inside the roots.
    let fabric = wiring::fabric(&settings, wiring::served(&settings)).await?;
    let service = fabric.service.clone();
    let served = fabric_mcp::serve_stdio(server(&settings, &fabric)).await;
    // The client closed the connection: runs it started still record their end.
    service.shutdown(std::time::Duration::from_secs(10)).await;
    fabric.flush_telemetry().await;
    served?;
    Ok(0)
}

/// The MCP server over these settings, starting runs through the fabric's service (shared
/// with `fabric serve`, so its limits and shutdown drain cover MCP runs too).
pub(crate) fn server(settings: &Settings, fabric: &wiring::Fabric) -> FabricMcpServer {
    FabricMcpServer::new(
        fabric.service.clone(),
        fabric.search.clone(),
        SpecialistList::new(&settings.specialists, &settings.default_specialist),
        // Runs' workspaces, read for the MCP resources through the file tools' confinement.
        std::sync::Arc::new(fabric_tools::WorkspaceReader),
    )
}
