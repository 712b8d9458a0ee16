//! `fabric acp`: the fabric as an Agent Client Protocol agent on stdin/stdout, for editors
//! (docs/ACP.md). Turns go through the same run service as `fabric run` and `fabric chat`.

use fabric_core::service::ServiceConfig;

use super::follow::EMBED_GRACE;
use crate::cli::{AcpArgs, Cli};
use crate::wiring;

/// `fabric acp`: serve ACP until the editor closes stdin.
pub(crate) async fn acp(cli: &Cli, args: &AcpArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    crate::app::tools::keep_mcp_servers_warm(&settings);
    // A local process of the person at the editor, as `fabric chat` is: any directory.
    let fabric = wiring::fabric(&settings, ServiceConfig::default()).await?;
    let defaults = fabric_acp::Defaults {
        specialists: args.specialists.clone(),
        model_key: args.model_key.clone(),
    };
    let served = fabric_acp::serve(
        fabric.service.clone(),
        defaults,
        env!("CARGO_PKG_VERSION"),
        tokio::io::stdin(),
        tokio::io::stdout(),
    )
    .await;
    fabric.service.shutdown(EMBED_GRACE).await;
    fabric.flush_telemetry().await;
    served?;
    Ok(0)
}
