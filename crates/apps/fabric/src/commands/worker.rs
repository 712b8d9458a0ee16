//! `fabric worker`: takes queued runs from the shared PostgreSQL store and runs them
//! (docs/DURABILITY.md).

use fabric_core::service::{Worker, WorkerConfig, WorkerReport};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, WorkerArgs};
use crate::wiring;

pub(crate) async fn worker(cli: &Cli, args: &WorkerArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    crate::app::tools::keep_mcp_servers_warm(&settings);
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
    if let Some(said) = crate::open_files::warning(u64::from(args.concurrency), "--concurrency") {
        eprintln!("{said}");
    }
    let worker = Worker::new(
        service,
        queue,
        claims,
        WorkerConfig {
            id,
            concurrency: args.concurrency as usize,
            lease,
            idle_poll: Duration::from_secs(1),
            max_deaths: settings.store.max_worker_deaths,
            input_timeout: settings.server.input_timeout_s.map(Duration::from_secs),
        },
    )
    .reporting(Arc::new(|report: &WorkerReport| {
        eprintln!("{}", describe(report))
    }));
    let stop = CancellationToken::new();
    tokio::spawn(stop_on_signal(stop.clone()));
    worker.run(stop).await?;
    if let Some(telemetry) = &telemetry {
        telemetry.flush(Duration::from_secs(1)).await;
    }
    eprintln!("stopped; runs in flight went back to the queue");
    Ok(0)
}

/// One line on stderr for what the worker did with a run (issue #26).
fn describe(report: &WorkerReport) -> String {
    match report {
        WorkerReport::Claimed {
            id,
            specialists,
            lease_expired,
            resumed,
        } => {
            let who = if specialists.is_empty() {
                "specialist chosen by routing".to_owned()
            } else {
                specialists.join(", ")
            };
            let how = if *resumed {
                "; continuing from its last step"
            } else {
                ""
            };
            if *lease_expired {
                format!("took over run {id} ({who}) from a worker whose lease expired{how}")
            } else if *resumed {
                format!("claimed run {id} ({who}), handed back by a worker that stopped{how}")
            } else {
                format!("claimed run {id} ({who})")
            }
        }
        WorkerReport::Ended {
            id,
            status,
            elapsed,
        } => format!(
            "run {id} ended {} in {:.1} s",
            status.as_str(),
            elapsed.as_secs_f64()
        ),
        WorkerReport::HandedBack { id, reason } => {
            format!("run {id} went back to the queue for another worker: {reason}")
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_domain::{RunId, RunStatus};

    #[test]
    fn issue_26_each_report_is_one_line_that_names_the_run() {
        let id = RunId::parse("20261127-120000-000-abcdef").unwrap_or_else(|e| panic!("{e}"));
        let claimed = |lease_expired, resumed, specialists: &[&str]| WorkerReport::Claimed {
            id: id.clone(),
            specialists: specialists.iter().map(|s| (*s).to_owned()).collect(),
            lease_expired,
            resumed,
        };
        assert_eq!(
            describe(&claimed(false, false, &["engineering"])),
            format!("claimed run {id} (engineering)")
        );
        assert_eq!(
            describe(&claimed(false, false, &[])),
            format!("claimed run {id} (specialist chosen by routing)")
        );
        assert_eq!(
            describe(&claimed(true, true, &["a", "b"])),
            format!(
                "took over run {id} (a, b) from a worker whose lease expired; continuing from its last step"
            )
        );
        assert!(describe(&claimed(false, true, &["a"])).contains("handed back"));
        assert_eq!(
            describe(&WorkerReport::Ended {
                id: id.clone(),
                status: RunStatus::Completed,
                elapsed: Duration::from_millis(12_340),
            }),
            format!("run {id} ended completed in 12.3 s")
        );
    }
}
