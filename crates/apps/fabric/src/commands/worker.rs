//! `fabric worker`: takes queued runs from the shared PostgreSQL store and runs them
//! (docs/DURABILITY.md).

use fabric_core::service::{Worker, WorkerConfig};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, WorkerArgs};
use crate::wiring;

pub(crate) async fn worker(cli: &Cli, args: &WorkerArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    wiring::require_postgres(
        &settings,
        "a worker takes runs from a shared PostgreSQL store",
        "with SQLite, `fabric serve` runs and continues runs itself",
    )?;
    let (service, queue, claims, telemetry) = wiring::worker_service(&settings).await?;
    let lease = Duration::from_secs(args.lease_s.unwrap_or(settings.store.lease_s));
    let id = format!(
        "{}:{}:{}",
        hostname(),
        std::process::id(),
        &fabric_core::new_run_id().as_str()[19..]
    );
    eprintln!(
        "worker {id}: taking runs from {} ({} at once, lease {} s)",
        settings
            .store
            .redacted_url()
            .unwrap_or_else(|| "the store".to_owned()),
        args.concurrency,
        lease.as_secs()
    );
    let worker = Worker::new(
        service,
        queue,
        claims,
        WorkerConfig {
            id,
            concurrency: args.concurrency as usize,
            lease,
            idle_poll: Duration::from_secs(1),
        },
    );
    let stop = CancellationToken::new();
    tokio::spawn(stop_on_signal(stop.clone()));
    worker.run(stop).await?;
    if let Some(telemetry) = &telemetry {
        telemetry.flush(Duration::from_secs(1)).await;
    }
    eprintln!("stopped; runs in flight went back to the queue");
    Ok(0)
}

/// The machine's name, for the worker's id.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".to_owned())
}

/// SIGTERM or Ctrl-C stops taking runs and hands those in flight back.
async fn stop_on_signal(stop: CancellationToken) {
    super::serve::terminated().await;
    eprintln!("stopping: no new runs; handing runs in flight back to the queue");
    stop.cancel();
}
