//! One connection to a 2026-07-28 server lent to many runs at once (issue #45, ADR-122).
//!
//! Each run holding a share of the connection is a *route*: its own [`Handler`] (its roots,
//! model, answers, runlog), registered under a number for as long as the run holds it. What
//! the server sends goes back to the run whose request it names, never to a guessed one:
//!
//! - input requests of a multi-round call (SEP-2322: sampling, elicitation, roots) are
//!   answered inside the caller's own `call_tool`, so the caller's route is known there
//!   ([`CALLER`], set around each call);
//! - progress names its request's progress token: the outgoing request carries its route in
//!   a private `_meta` key, which [`Routed`] takes off before the request is written and
//!   keeps as "this token is this route's";
//! - a request or notification that names no request of a route (a log line, a request on
//!   the wire outside a call) is dropped or refused, logged at debug.
//!
//! Request ids are the connection's own (rmcp numbers them per connection), so they are
//! unique whatever the number of runs.

use rmcp::RoleClient;
use rmcp::model::{ClientRequest, GetMeta, JsonRpcMessage, ProgressToken};
use rmcp::transport::{TokioChildProcess, Transport};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::handler::Handler;
use crate::source::lock;

/// The private `_meta` key a run's request carries until [`Routed`] takes it off.
pub(crate) const ROUTE_KEY: &str = "dev.agent-fabric/route";

tokio::task_local! {
    /// The route of the run whose call is being driven in this task.
    pub(crate) static CALLER: u64;
}

/// The runs sharing one connection, and the progress tokens of their requests.
#[derive(Default)]
pub(crate) struct Routes {
    runs: Mutex<HashMap<u64, Handler>>,
    tokens: Mutex<HashMap<ProgressToken, u64>>,
}

impl Routes {
    /// Registers a run's handler under `route`.
    pub(crate) fn add(&self, route: u64, handler: Handler) {
        lock(&self.runs).insert(route, handler);
    }

    /// Forgets a run and the tokens of its requests.
    pub(crate) fn remove(&self, route: u64) {
        lock(&self.runs).remove(&route);
        lock(&self.tokens).retain(|_, r| *r != route);
    }

    /// The handler of the run whose call is driven in this task, if it still holds a share.
    pub(crate) fn caller(&self) -> Option<Handler> {
        let route = CALLER.try_with(|r| *r).ok()?;
        lock(&self.runs).get(&route).cloned()
    }

    /// The handler of the run whose request carried `token`.
    pub(crate) fn by_token(&self, token: &ProgressToken) -> Option<Handler> {
        let route = *lock(&self.tokens).get(token)?;
        lock(&self.runs).get(&route).cloned()
    }

    /// Every run holding a share (for what concerns them all: the tool list changed).
    pub(crate) fn all(&self) -> Vec<Handler> {
        lock(&self.runs).values().cloned().collect()
    }

    /// Takes the route off an outgoing request and keeps its progress token as the route's.
    fn note(&self, request: &mut ClientRequest) {
        // The route is in the call's own `_meta`; rmcp keeps the progress token it adds in
        // the request's extensions, merged into `_meta` when written.
        let ClientRequest::CallToolRequest(call) = request else {
            return;
        };
        let route = call.params.meta.as_mut().and_then(|m| m.remove(ROUTE_KEY));
        let Some(route) = route.and_then(|v| v.as_u64()) else {
            return;
        };
        if let Some(token) = request.get_meta().get_progress_token() {
            lock(&self.tokens).insert(token, route);
        }
    }

    /// How many runs hold a share.
    pub(crate) fn len(&self) -> usize {
        lock(&self.runs).len()
    }
}

/// A stdio transport that notes each outgoing request's route before writing it.
pub(crate) struct Routed {
    pub(crate) inner: TokioChildProcess,
    pub(crate) routes: Arc<Routes>,
}

impl Transport<RoleClient> for Routed {
    type Error = <TokioChildProcess as Transport<RoleClient>>::Error;

    fn send(
        &mut self,
        mut item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(request) = &mut item {
            self.routes.note(&mut request.request);
        }
        self.inner.send(item)
    }

    fn receive(
        &mut self,
    ) -> impl Future<Output = Option<rmcp::service::RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
