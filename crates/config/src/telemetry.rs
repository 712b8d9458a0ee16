//! The `telemetry:` section: OpenTelemetry traces of runs over OTLP (issue #13).

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// Where and how runs' traces are exported. Off by default, and then nothing is built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TelemetryConfig {
    /// Export traces at all.
    pub enabled: bool,
    /// The OTLP/HTTP base URL (`/v1/traces` is appended); the environment's
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` takes precedence, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
    /// (the whole URL) over both.
    pub otlp_endpoint: String,
    /// Record prompts, model answers and tool arguments and results in spans (they may hold
    /// secrets and personal data).
    pub capture_content: bool,
    /// `service.name` of the resource; `OTEL_SERVICE_NAME` takes precedence.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            otlp_endpoint: "http://localhost:4318".to_owned(),
            capture_content: false,
            service_name: "agent-fabric".to_owned(),
        }
    }
}

/// The section as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTelemetry {
    pub(crate) enabled: Option<bool>,
    pub(crate) exporter: Option<String>,
    pub(crate) otlp_endpoint: Option<String>,
    pub(crate) capture_content: Option<bool>,
    pub(crate) service_name: Option<String>,
}

impl RawTelemetry {
    /// Overlays the file's values on `base`, checking each.
    pub(crate) fn merge(
        self,
        base: &mut TelemetryConfig,
        invalid: impl Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        overlay!(base, self; enabled);
        if let Some(exporter) = self.exporter {
            match exporter.as_str() {
                "otlp" | "otlp-http" => {}
                other => {
                    return Err(invalid(
                        "telemetry.exporter",
                        format!(
                            "must be `otlp` (OTLP over HTTP/protobuf, a collector's port 4318), got `{other}`; OTLP over gRPC is not supported"
                        ),
                    ));
                }
            }
        }
        if let Some(url) = self.otlp_endpoint {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid(
                    "telemetry.otlp_endpoint",
                    format!(
                        "must be an http:// or https:// URL such as http://localhost:4318, got `{url}`"
                    ),
                ));
            }
            base.otlp_endpoint = url.trim_end_matches('/').to_owned();
        }
        overlay!(base, self; capture_content);
        if let Some(name) = self.service_name {
            if name.trim().is_empty() {
                return Err(invalid(
                    "telemetry.service_name",
                    "must not be empty".to_owned(),
                ));
            }
            base.service_name = name;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::Settings;
    use std::path::Path;

    fn load(text: &str) -> Result<Settings, String> {
        Settings::from_text(text, Path::new("f.yaml")).map_err(|e| e.to_string())
    }

    #[test]
    fn the_section_is_read_and_checked() {
        let s = load("telemetry:\n  enabled: true\n  exporter: otlp\n  otlp_endpoint: http://collector:4318/\n  capture_content: true\n  service_name: fab\n").unwrap();
        assert!(s.telemetry.enabled);
        assert_eq!(s.telemetry.otlp_endpoint, "http://collector:4318");
        assert!(s.telemetry.capture_content);
        assert_eq!(s.telemetry.service_name, "fab");
        let default = load("").unwrap();
        assert!(!default.telemetry.enabled);
        for (yaml, key) in [
            ("telemetry:\n  exporter: grpc\n", "telemetry.exporter"),
            (
                "telemetry:\n  otlp_endpoint: collector:4318\n",
                "telemetry.otlp_endpoint",
            ),
            (
                "telemetry:\n  service_name: \" \"\n",
                "telemetry.service_name",
            ),
            ("telemetry:\n  enabld: true\n", "enabld"),
        ] {
            let err = load(yaml).unwrap_err();
            assert!(err.contains(key), "{yaml}: {err}");
        }
    }
}
