//! The exporter: finished spans queue in a bounded channel (a full queue drops the span
//! and counts it, so a slow or unreachable collector never slows a run) and a task sends
//! them in batches, `POST {endpoint}` with the OTLP protobuf body.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::proto;
use crate::span::{Attr, Span, SpanSink};

/// Spans waiting at most; beyond, new ones are dropped.
const QUEUE: usize = 4096;
/// Spans per request at most.
const BATCH: usize = 512;
/// How long a span waits for companions before its batch is sent.
const LINGER: Duration = Duration::from_millis(500);
/// One export request's time limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

enum Message {
    Span(Box<Span>),
    Flush(oneshot::Sender<()>),
}

/// What was lost, for the report at the end.
#[derive(Debug, Default)]
pub struct Losses {
    /// Spans dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Spans in batches the collector did not take.
    pub failed: AtomicU64,
    warned: AtomicBool,
}

impl Losses {
    /// Warns once per process, on the first loss.
    fn warn_once(&self, what: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!("telemetry: {what}; further losses are only counted");
        }
    }
}

/// The sending half: what the tracer emits into.
#[derive(Clone)]
pub struct Exporter {
    tx: mpsc::Sender<Message>,
    losses: Arc<Losses>,
}

impl SpanSink for Exporter {
    fn emit(&self, span: Span) {
        if self.tx.try_send(Message::Span(Box::new(span))).is_err() {
            self.losses.dropped.fetch_add(1, Ordering::Relaxed);
            self.losses.warn_once(
                "the span queue is full (the collector is slow or unreachable); spans are dropped",
            );
        }
    }
}

impl Exporter {
    /// Starts the exporting task on the current runtime, sending to `url` (the whole
    /// `/v1/traces` URL) with `resource` attributes.
    pub fn start(url: String, resource: Vec<(String, Attr)>) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let losses = Arc::new(Losses::default());
        tokio::spawn(run(rx, url, resource, Arc::clone(&losses)));
        Self { tx, losses }
    }

    /// Sends what is queued and waits for it, at most `within` (at exit).
    pub async fn flush(&self, within: Duration) {
        let (ack, done) = oneshot::channel();
        let flushed = async {
            if self.tx.send(Message::Flush(ack)).await.is_ok() {
                let _ = done.await;
            }
        };
        if tokio::time::timeout(within, flushed).await.is_err() {
            tracing::warn!("telemetry: spans not sent within {within:?} at exit");
        }
        let (dropped, failed) = (
            self.losses.dropped.load(Ordering::Relaxed),
            self.losses.failed.load(Ordering::Relaxed),
        );
        if dropped + failed > 0 {
            tracing::warn!(dropped, failed, "telemetry: spans lost");
        }
    }

    /// What was lost so far.
    pub fn losses(&self) -> &Losses {
        &self.losses
    }
}

async fn run(
    mut rx: mpsc::Receiver<Message>,
    url: String,
    resource: Vec<(String, Attr)>,
    losses: Arc<Losses>,
) {
    let client = match reqwest::Client::builder().timeout(REQUEST_TIMEOUT).build() {
        Ok(client) => client,
        Err(e) => {
            tracing::warn!(error = %e, "telemetry: no HTTP client; traces are off");
            return;
        }
    };
    let mut batch: Vec<Span> = Vec::new();
    loop {
        let message = if batch.is_empty() {
            rx.recv().await
        } else {
            match tokio::time::timeout(LINGER, rx.recv()).await {
                Ok(message) => message,
                Err(_) => {
                    send(&client, &url, &resource, &mut batch, &losses).await;
                    continue;
                }
            }
        };
        match message {
            Some(Message::Span(span)) => {
                batch.push(*span);
                if batch.len() >= BATCH {
                    send(&client, &url, &resource, &mut batch, &losses).await;
                }
            }
            Some(Message::Flush(ack)) => {
                send(&client, &url, &resource, &mut batch, &losses).await;
                let _ = ack.send(());
            }
            None => {
                send(&client, &url, &resource, &mut batch, &losses).await;
                return;
            }
        }
    }
}

async fn send(
    client: &reqwest::Client,
    url: &str,
    resource: &[(String, Attr)],
    batch: &mut Vec<Span>,
    losses: &Losses,
) {
    if batch.is_empty() {
        return;
    }
    let failure = post(client, url, proto::export_request(resource, batch)).await;
    if let Some(why) = failure {
        losses
            .failed
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        losses.warn_once(&why);
    }
    batch.clear();
}

/// Posts one OTLP protobuf body; `None` when the collector took it, else why not.
async fn post(client: &reqwest::Client, url: &str, body: Vec<u8>) -> Option<String> {
    let sent = client
        .post(url)
        .header("content-type", "application/x-protobuf")
        .body(body)
        .send()
        .await;
    match sent {
        Ok(r) if r.status().is_success() => None,
        Ok(r) => Some(format!("the collector at {url} answered {}", r.status())),
        Err(e) => Some(format!("the collector at {url} cannot be reached: {e}")),
    }
}

/// What the metrics exporter reads each time: the run service's metrics now.
pub type Snapshot = Arc<dyn Fn() -> Vec<fabric_core::metrics::Family> + Send + Sync>;

/// Sends the metrics every interval, and on [`MetricsExporter::flush`].
pub struct MetricsExporter {
    flush: mpsc::Sender<oneshot::Sender<()>>,
}

impl MetricsExporter {
    /// Starts the exporting task on the current runtime: cumulative points from now, posted
    /// to `url` every `interval`.
    pub fn start(
        url: String,
        resource: Vec<(String, Attr)>,
        interval: Duration,
        snapshot: Snapshot,
    ) -> Self {
        let (flush, mut requests) = mpsc::channel::<oneshot::Sender<()>>(4);
        tokio::spawn(async move {
            let Ok(client) = reqwest::Client::builder().timeout(REQUEST_TIMEOUT).build() else {
                tracing::warn!("telemetry: no HTTP client; metrics are not exported");
                return;
            };
            let start = fabric_core::unix_now();
            let warned = AtomicBool::new(false);
            let mut tick = tokio::time::interval(interval);
            tick.tick().await;
            loop {
                let ack = tokio::select! {
                    _ = tick.tick() => None,
                    request = requests.recv() => match request {
                        Some(ack) => Some(ack),
                        None => return,
                    },
                };
                let body = proto::export_metrics_request(
                    &resource,
                    &snapshot(),
                    start,
                    fabric_core::unix_now(),
                );
                let failure = post(&client, &url, body).await;
                if let Some(why) = failure
                    && !warned.swap(true, Ordering::Relaxed)
                {
                    tracing::warn!(
                        "telemetry: metrics not sent: {why}; further failures are not reported"
                    );
                }
                if let Some(ack) = ack {
                    let _ = ack.send(());
                }
            }
        });
        Self { flush }
    }

    /// Sends the metrics now and waits for it, at most `within`.
    pub async fn flush(&self, within: Duration) {
        let (ack, done) = oneshot::channel();
        let flushed = async {
            if self.flush.send(ack).await.is_ok() {
                let _ = done.await;
            }
        };
        let _ = tokio::time::timeout(within, flushed).await;
    }
}
