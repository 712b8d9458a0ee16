//! OpenTelemetry traces of runs (issue #13): an adapter that listens to every run's events
//! through the run service's [`fabric_core::EventSink`] port, builds spans by the GenAI
//! semantic conventions from them ([`span`]), and exports them over OTLP/HTTP protobuf
//! ([`export`], [`proto`]). The engine never sees a span; with telemetry off nothing here
//! is built.
//!
//! Configuration is the binary's: [`Telemetry::start`] takes the endpoint, the resource and
//! whether to capture content, already merged from the config file and the standard
//! `OTEL_*` variables ([`resource_from_env`], [`traces_url`]).

mod export;
mod proto;
pub mod span;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub use export::{Exporter, Losses, MetricsExporter, Snapshot};
pub use span::{Attr, Span, SpanSink, Tracer, parse_traceparent};

/// The errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// `OTEL_RESOURCE_ATTRIBUTES` is not `key=value,key=value`.
    #[error("OTEL_RESOURCE_ATTRIBUTES must be `key=value` pairs separated by commas, got `{0}`")]
    ResourceAttributes(String),
}

/// The tracer and its exporter, running, and the metrics exporter once started.
pub struct Telemetry {
    tracer: Arc<Tracer>,
    exporter: Exporter,
    metrics: std::sync::OnceLock<MetricsExporter>,
    options: TelemetryOptions,
}

/// What [`Telemetry::start`] needs.
#[derive(Debug, Clone)]
pub struct TelemetryOptions {
    /// The whole URL spans are posted to (`…/v1/traces`).
    pub traces_url: String,
    /// Resource attributes (`service.name` first).
    pub resource: Vec<(String, Attr)>,
    /// Prompts, answers, tool arguments and results in spans.
    pub capture_content: bool,
    /// Model key → `gen_ai.provider.name`.
    pub providers: HashMap<String, String>,
    /// The whole URL metrics are posted to (`…/v1/metrics`).
    pub metrics_url: String,
    /// How often metrics are sent (`OTEL_METRIC_EXPORT_INTERVAL`, 60 s).
    pub metrics_interval: Duration,
}

impl Telemetry {
    /// Starts the exporter on the current Tokio runtime.
    pub fn start(options: TelemetryOptions) -> Self {
        let exporter = Exporter::start(options.traces_url.clone(), options.resource.clone());
        let tracer = Arc::new(Tracer::new(
            Box::new(exporter.clone()),
            options.capture_content,
            options.providers.clone(),
        ));
        Self {
            tracer,
            exporter,
            metrics: std::sync::OnceLock::new(),
            options,
        }
    }

    /// Where the trace context of a run's model calls comes from (install it with
    /// `fabric_core::trace::install`).
    pub fn trace_source(&self) -> Arc<dyn fabric_core::trace::TraceSource> {
        Arc::clone(&self.tracer) as Arc<dyn fabric_core::trace::TraceSource>
    }

    /// Starts sending the metrics `snapshot` reads (the run service's) over OTLP; once.
    pub fn export_metrics(&self, snapshot: Snapshot) {
        let options = &self.options;
        self.metrics.get_or_init(|| {
            MetricsExporter::start(
                options.metrics_url.clone(),
                options.resource.clone(),
                options.metrics_interval,
                snapshot,
            )
        });
    }

    /// The sink the run service tells every event.
    pub fn sink(&self) -> Arc<dyn fabric_core::EventSink> {
        Arc::clone(&self.tracer) as Arc<dyn fabric_core::EventSink>
    }

    /// Sends the queued spans and the metrics now, waiting at most `within` for each.
    pub async fn flush(&self, within: Duration) {
        // Both at once, so a command waits at most `within` at exit, not once per signal.
        let metrics = async {
            if let Some(metrics) = self.metrics.get() {
                metrics.flush(within).await;
            }
        };
        tokio::join!(self.exporter.flush(within), metrics);
    }
}

/// The OTLP request body for `spans` with an empty resource: for the `event_cost` bench,
/// which measures the encoding without a collector.
#[doc(hidden)]
pub fn encode_for_bench(spans: &[Span]) -> Vec<u8> {
    proto::export_request(&[], spans)
}

/// The URL spans go to: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else
/// `OTEL_EXPORTER_OTLP_ENDPOINT` or `configured`, with `/v1/traces` appended.
pub fn traces_url(configured: &str, env: impl Fn(&str) -> Option<String>) -> String {
    signal_url(configured, env, "TRACES", "traces")
}

/// The URL metrics go to, as [`traces_url`] with `METRICS` and `/v1/metrics`.
pub fn metrics_url(configured: &str, env: impl Fn(&str) -> Option<String>) -> String {
    signal_url(configured, env, "METRICS", "metrics")
}

fn signal_url(
    configured: &str,
    env: impl Fn(&str) -> Option<String>,
    signal: &str,
    path: &str,
) -> String {
    if let Some(url) =
        env(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")).filter(|u| !u.is_empty())
    {
        return url;
    }
    let base = env("OTEL_EXPORTER_OTLP_ENDPOINT")
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| configured.to_owned());
    format!("{}/v1/{path}", base.trim_end_matches('/'))
}

/// `OTEL_METRIC_EXPORT_INTERVAL` (milliseconds), 60 s when unset or not a positive number.
pub fn metrics_interval(env: impl Fn(&str) -> Option<String>) -> Duration {
    const DEFAULT: Duration = Duration::from_secs(60);
    let Some(text) = env("OTEL_METRIC_EXPORT_INTERVAL") else {
        return DEFAULT;
    };
    match text.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Duration::from_millis(ms),
        // The OpenTelemetry spec: an invalid value is ignored with a warning.
        _ => {
            tracing::warn!(
                value = %text,
                "OTEL_METRIC_EXPORT_INTERVAL must be a positive number of milliseconds; using 60000"
            );
            DEFAULT
        }
    }
}

/// The resource: `service.name` (`OTEL_SERVICE_NAME`, else `configured`), `service.version`,
/// then `OTEL_RESOURCE_ATTRIBUTES` (`k=v,k2=v2`, values percent-decoded).
pub fn resource_from_env(
    configured: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Vec<(String, Attr)>, TelemetryError> {
    let name = env("OTEL_SERVICE_NAME")
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| configured.to_owned());
    let mut resource = vec![
        ("service.name".to_owned(), Attr::Str(name)),
        (
            "service.version".to_owned(),
            Attr::Str(env!("CARGO_PKG_VERSION").to_owned()),
        ),
    ];
    if let Some(list) = env("OTEL_RESOURCE_ATTRIBUTES").filter(|l| !l.trim().is_empty()) {
        for pair in list.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .filter(|(k, _)| !k.trim().is_empty())
                .ok_or_else(|| TelemetryError::ResourceAttributes(list.clone()))?;
            let key = key.trim();
            if key == "service.name" && resource.iter().any(|(k, _)| k == "service.name") {
                // OTEL_SERVICE_NAME and the config win over the list, as the spec says.
                continue;
            }
            resource.push((key.to_owned(), Attr::Str(percent_decode(value.trim()))));
        }
    }
    Ok(resource)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_standard_variables_override_the_config() {
        assert_eq!(
            traces_url("http://c:4318/", env(&[])),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            traces_url(
                "http://c:4318",
                env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://o:1")])
            ),
            "http://o:1/v1/traces"
        );
        assert_eq!(
            traces_url(
                "http://c:4318",
                env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t/x")])
            ),
            "http://t/x"
        );
        let r = resource_from_env(
            "agent-fabric",
            env(&[
                ("OTEL_SERVICE_NAME", "fab"),
                (
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "deployment.environment=prod,team=a%20b,service.name=x",
                ),
            ]),
        )
        .unwrap();
        assert_eq!(
            r[0],
            ("service.name".to_owned(), Attr::Str("fab".to_owned()))
        );
        assert!(r.contains(&("team".to_owned(), Attr::Str("a b".to_owned()))));
        assert!(r.contains(&(
            "deployment.environment".to_owned(),
            Attr::Str("prod".to_owned())
        )));
        assert_eq!(r.iter().filter(|(k, _)| k == "service.name").count(), 1);
        assert!(resource_from_env("a", env(&[("OTEL_RESOURCE_ATTRIBUTES", "novalue")])).is_err());
    }

    #[test]
    fn traceparent_is_read_strictly() {
        let (t, s) =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(t[0], 0x4b);
        assert_eq!(s[7], 0xb7);
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
            "garbage",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
    }
}
