//! One `LISTEN` connection per store, shared by every follower and worker of this process:
//! the notifications of `fabric_events` (a run wrote an event), `fabric_queue` (a run was
//! enqueued or handed back) and `fabric_cancel` (a run is to be cancelled), fanned out on a
//! broadcast channel. When the connection drops (PostgreSQL restarted), it reconnects and
//! says `Resync`: what was notified meanwhile is lost, so followers read again.

use sqlx::postgres::PgListener;
use std::time::Duration;
use tokio::sync::broadcast;

use crate::SqlStore;
use crate::db::Db;
use fabric_core::StoreError;

/// A notification, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Signal {
    /// Run (by id) wrote an event.
    Event(String),
    /// A run was enqueued or handed back.
    Enqueued,
    /// Run (by id) is to be cancelled.
    Cancel(String),
    /// The connection was lost and is back: notifications may have been missed.
    Resync,
}

/// The fan-out of one process's notifications.
#[derive(Debug)]
pub(crate) struct Listener {
    sender: broadcast::Sender<Signal>,
}

impl Listener {
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Signal> {
        self.sender.subscribe()
    }
}

impl SqlStore {
    /// The process's listener, connected on first use.
    pub(crate) async fn listener(&self) -> Result<&Listener, StoreError> {
        self.inner
            .listener
            .get_or_try_init(|| async {
                let Db::Postgres(pool) = &self.inner.db else {
                    return Err(StoreError::InvalidQuery(
                        "notifications need PostgreSQL".to_owned(),
                    ));
                };
                let mut listener = PgListener::connect_with(pool)
                    .await
                    .map_err(|e| self.err(&e))?;
                listener
                    .listen_all(["fabric_events", "fabric_queue", "fabric_cancel"])
                    .await
                    .map_err(|e| self.err(&e))?;
                // Room for bursts; a follower that falls behind reads again (`Lagged`).
                let (sender, _) = broadcast::channel(4_096);
                tokio::spawn(relay(listener, sender.clone(), self.inner.name.clone()));
                Ok(Listener { sender })
            })
            .await
    }
}

async fn relay(mut listener: PgListener, sender: broadcast::Sender<Signal>, store: String) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                let payload = notification.payload();
                let signal = match notification.channel() {
                    "fabric_events" => Signal::Event(
                        payload
                            .split_once(' ')
                            .map_or(payload, |(run, _)| run)
                            .to_owned(),
                    ),
                    "fabric_cancel" => Signal::Cancel(payload.to_owned()),
                    _ => Signal::Enqueued,
                };
                // Nobody listening is fine.
                let _ = sender.send(signal);
            }
            // The connection dropped; `try_recv` reconnects on the next call.
            Ok(None) => {
                tracing::warn!(store = %store, "the notification connection dropped; reconnecting");
                let _ = sender.send(Signal::Resync);
            }
            Err(e) => {
                tracing::warn!(store = %store, error = %e, "notifications are not answering; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                let _ = sender.send(Signal::Resync);
            }
        }
        if sender.receiver_count() == 0 && sender.is_empty() {
            // Keep listening anyway: followers subscribe and drop all the time.
        }
    }
}
