//! The OTLP trace and metrics requests, encoded by hand in protobuf's wire format: the few
//! messages of `opentelemetry/proto/collector/{trace,metrics}/v1/*.proto` an export needs,
//! with their field numbers, so no code generator or protobuf runtime is built into the
//! binary.

use fabric_core::metrics::{Family, Kind, PointValue};

use crate::span::{Attr, Span};

/// Wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
/// `AGGREGATION_TEMPORALITY_CUMULATIVE`: every point counts from the process's start.
const CUMULATIVE: u64 = 2;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        // Truncation intended: the low seven bits, with the continuation bit.
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from(field << 3 | wire));
}

fn bytes(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    tag(out, field, LEN);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    bytes(out, field, s.as_bytes());
}

/// A nested message: encoded into its own buffer, then written length-prefixed.
fn message(out: &mut Vec<u8>, field: u32, build: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    build(&mut inner);
    bytes(out, field, &inner);
}

fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, FIXED64);
    out.extend_from_slice(&v.to_le_bytes());
}

/// `AnyValue`: string 1, bool 2, int 3, double 4, array 5.
fn any_value(out: &mut Vec<u8>, value: &Attr) {
    match value {
        Attr::Str(s) => string(out, 1, s),
        Attr::Bool(b) => {
            tag(out, 2, VARINT);
            varint(out, u64::from(*b));
        }
        Attr::Int(i) => {
            tag(out, 3, VARINT);
            // Two's complement, as protobuf encodes int64.
            varint(out, *i as u64);
        }
        Attr::Double(d) => {
            tag(out, 4, FIXED64);
            out.extend_from_slice(&d.to_le_bytes());
        }
        Attr::StrArray(items) => message(out, 5, |array| {
            for item in items {
                message(array, 1, |v| string(v, 1, item));
            }
        }),
    }
}

/// `KeyValue`: key 1, value 2.
fn key_value(out: &mut Vec<u8>, field: u32, key: &str, value: &Attr) {
    message(out, field, |kv| {
        string(kv, 1, key);
        message(kv, 2, |v| any_value(v, value));
    });
}

fn nanos(seconds: f64) -> u64 {
    // Event times are seconds since the epoch; negative or absurd ones become 0.
    if seconds.is_finite() && seconds > 0.0 {
        (seconds * 1e9) as u64
    } else {
        0
    }
}

/// `Span`: trace_id 1, span_id 2, parent_span_id 4, name 5, kind 6, start 7, end 8,
/// attributes 9, status 15 (message 2, code 3: 1 ok, 2 error).
fn span(out: &mut Vec<u8>, s: &Span) {
    message(out, 2, |m| {
        bytes(m, 1, &s.trace_id);
        bytes(m, 2, &s.span_id);
        if let Some(parent) = &s.parent {
            bytes(m, 4, parent);
        }
        string(m, 5, &s.name);
        tag(m, 6, VARINT);
        varint(m, u64::from(s.kind as u8));
        fixed64(m, 7, nanos(s.start));
        fixed64(m, 8, nanos(s.end.max(s.start)));
        for (key, value) in &s.attributes {
            key_value(m, 9, key, value);
        }
        if let Some(error) = &s.error {
            message(m, 15, |status| {
                string(status, 2, error);
                tag(status, 3, VARINT);
                varint(status, 2);
            });
        }
    });
}

/// An `ExportTraceServiceRequest` of one resource (its attributes) and one scope.
pub(crate) fn export_request(resource: &[(String, Attr)], spans: &[Span]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 * spans.len() + 128);
    // resource_spans 1 { resource 1 { attributes 1 }, scope_spans 2 { scope 1, spans 2 } }
    message(&mut out, 1, |rs| {
        resource_and_scope(rs, resource, |ss| {
            for s in spans {
                span(ss, s);
            }
        });
    });
    out
}

/// `Resource` (attributes 1) and `InstrumentationScope` (name 1, version 2): the first two
/// fields of both `ResourceSpans`/`ScopeSpans` and `ResourceMetrics`/`ScopeMetrics`.
fn resource_and_scope(
    out: &mut Vec<u8>,
    resource: &[(String, Attr)],
    items: impl FnOnce(&mut Vec<u8>),
) {
    message(out, 1, |r| {
        for (key, value) in resource {
            key_value(r, 1, key, value);
        }
    });
    message(out, 2, |scoped| {
        message(scoped, 1, |scope| {
            string(scope, 1, "agent-fabric");
            string(scope, 2, env!("CARGO_PKG_VERSION"));
        });
        items(scoped);
    });
}

/// `NumberDataPoint`: start 2, time 3, as_double 4, as_int 6 (sfixed64), attributes 7.
fn number_point(
    out: &mut Vec<u8>,
    labels: &[(&str, String)],
    value: &PointValue,
    start: u64,
    now: u64,
) {
    message(out, 1, |p| {
        fixed64(p, 2, start);
        fixed64(p, 3, now);
        match value {
            PointValue::Int(n) => fixed64(p, 6, *n),
            // Two's complement, as sfixed64 is written.
            PointValue::Signed(n) => fixed64(p, 6, *n as u64),
            PointValue::Float(x) => {
                tag(p, 4, FIXED64);
                p.extend_from_slice(&x.to_le_bytes());
            }
            PointValue::Histogram(_) => {}
        }
        for (key, v) in labels {
            key_value(p, 7, key, &Attr::Str(v.clone()));
        }
    });
}

/// An `ExportMetricsServiceRequest` of one resource and one scope: each family a `Metric`
/// (name 1, description 2, unit 3) holding a `Gauge` (5), a monotonic cumulative `Sum` (7)
/// or a cumulative `Histogram` (9).
pub(crate) fn export_metrics_request(
    resource: &[(String, Attr)],
    families: &[Family],
    start: f64,
    now: f64,
) -> Vec<u8> {
    let (start, now) = (nanos(start), nanos(now));
    let mut out = Vec::with_capacity(4096);
    message(&mut out, 1, |rm| {
        resource_and_scope(rm, resource, |sm| {
            for f in families.iter().filter(|f| !f.points.is_empty()) {
                message(sm, 2, |m| {
                    string(m, 1, f.otel_name);
                    string(m, 2, f.help);
                    string(m, 3, f.unit);
                    let field = match f.kind {
                        Kind::Gauge => 5,
                        Kind::Counter => 7,
                        Kind::Histogram => 9,
                    };
                    message(m, field, |data| {
                        for point in &f.points {
                            match &point.value {
                                PointValue::Histogram(h) => message(data, 1, |p| {
                                    fixed64(p, 2, start);
                                    fixed64(p, 3, now);
                                    fixed64(p, 4, h.count);
                                    tag(p, 5, FIXED64);
                                    p.extend_from_slice(&h.sum.to_le_bytes());
                                    // Packed: one count per bound, then the bucket above the last.
                                    let above =
                                        h.count.saturating_sub(h.counts.iter().sum::<u64>());
                                    let counts: Vec<u8> = h
                                        .counts
                                        .iter()
                                        .chain(std::iter::once(&above))
                                        .flat_map(|n| n.to_le_bytes())
                                        .collect();
                                    bytes(p, 6, &counts);
                                    let bounds: Vec<u8> =
                                        h.bounds.iter().flat_map(|b| b.to_le_bytes()).collect();
                                    bytes(p, 7, &bounds);
                                    for (key, v) in &point.labels {
                                        key_value(p, 9, key, &Attr::Str(v.clone()));
                                    }
                                }),
                                value => number_point(data, &point.labels, value, start, now),
                            }
                        }
                        if f.kind != Kind::Gauge {
                            tag(data, 2, VARINT);
                            varint(data, CUMULATIVE);
                        }
                        if f.kind == Kind::Counter {
                            tag(data, 3, VARINT);
                            varint(data, 1);
                        }
                    });
                });
            }
        });
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_little_endian_base_128() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        out.clear();
        varint(&mut out, u64::MAX);
        assert_eq!(out.len(), 10);
        out.clear();
        any_value(&mut out, &Attr::Int(-1));
        assert_eq!(out[0], 3 << 3);
        assert_eq!(out.len(), 11);
    }

    #[test]
    fn a_string_attribute_is_a_nested_key_value() {
        let mut out = Vec::new();
        key_value(&mut out, 9, "k", &Attr::Str("v".to_owned()));
        // field 9 LEN, 8 bytes: key "k" (0a 01 6b), value (12 03 { 0a 01 76 }).
        assert_eq!(
            out,
            [0x4a, 0x08, 0x0a, 0x01, b'k', 0x12, 0x03, 0x0a, 0x01, b'v']
        );
    }
}
