//! Resource subscriptions (issue #29): a client that subscribed to a URI under a run gets
//! `notifications/resources/updated` for it after each event the run records, until the run
//! ends. The events come from the run's live event stream, the same one `GET
//! /runs/{id}/events` streams from (a run on a queue worker is followed too). A run that
//! is not going on here changes no more and sends nothing.
//!
//! Two ways in: `resources/subscribe` and `resources/unsubscribe` on a session of the
//! handshake revisions ([`Subscriptions`], one per session), and `subscriptions/listen` of
//! 2026-07-28, whose request lives as long as the subscription ([`listen`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

use fabric_core::service::RunService;
use fabric_domain::RunId;
use rmcp::model::{ResourceUpdatedNotificationParam, SubscriptionFilter};
use rmcp::service::{Peer, RoleServer, SubscriptionContext};
use tokio::task::JoinSet;
use tokio_util::task::AbortOnDropHandle;

use crate::uri;

/// Calls `changed` after each event run `id` records from now on, until the run ends here
/// or `changed` answers `false` (its client went away).
pub(crate) async fn each_change<F, Fut>(service: RunService, id: RunId, mut changed: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let Some(run) = service.follow(&id).await else {
        return;
    };
    // From the event after the last one now: a subscription reports changes, not history.
    let from = run.events().await.last().map_or(0, |e| e.seq + 1);
    let mut follower = run.follow(from);
    while follower.next().await.is_some() {
        if !changed().await {
            return;
        }
    }
}

/// The `resources/subscribe` subscriptions of one session, by URI; dropping one (by
/// unsubscribing, subscribing again, or the session ending) stops its task.
#[derive(Default)]
pub(crate) struct Subscriptions(Mutex<HashMap<String, AbortOnDropHandle<()>>>);

impl Subscriptions {
    /// Reports `uri` (of run `id`) to `peer` at each change of the run.
    pub(crate) fn add(&self, service: RunService, id: RunId, uri: String, peer: Peer<RoleServer>) {
        let reported = uri.clone();
        let task = tokio::spawn(each_change(service, id, move || {
            let (peer, uri) = (peer.clone(), reported.clone());
            async move {
                let param = ResourceUpdatedNotificationParam::new(uri);
                peer.notify_resource_updated(param).await.is_ok()
            }
        }));
        self.lock().insert(uri, AbortOnDropHandle::new(task));
    }

    /// Stops reporting `uri`; nothing to stop is not an error.
    pub(crate) fn remove(&self, uri: &str) {
        self.lock().remove(uri);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, AbortOnDropHandle<()>>> {
        // A map of task handles stays whole if a thread panicked holding it.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The part of a `subscriptions/listen` filter this server accepts: the fabric's own
/// resource URIs (well-formed, whether or not the run exists yet). The lists never change,
/// so no `list_changed` is accepted.
pub(crate) fn accepted(requested: &SubscriptionFilter) -> SubscriptionFilter {
    let uris: Vec<String> = requested
        .resource_subscriptions
        .iter()
        .flatten()
        .filter(|u| uri::parse(u).is_ok())
        .cloned()
        .collect();
    SubscriptionFilter::builder()
        .resource_subscriptions(uris)
        .build()
}

/// Serves one `subscriptions/listen` until the client cancels it.
pub(crate) async fn listen(service: &RunService, context: SubscriptionContext) {
    let mut tasks = JoinSet::new();
    for reported in context.accepted().resource_subscriptions.iter().flatten() {
        let Ok(target) = uri::parse(reported) else {
            continue;
        };
        let (sink, reported) = (context.sink().clone(), reported.clone());
        tasks.spawn(each_change(
            service.clone(),
            target.run().clone(),
            move || {
                let (sink, uri) = (sink.clone(), reported.clone());
                async move { sink.notify_resource_updated(uri).await.is_ok() }
            },
        ));
    }
    context.cancelled().await;
    // Dropping the set aborts what still runs.
    drop(tasks);
}
