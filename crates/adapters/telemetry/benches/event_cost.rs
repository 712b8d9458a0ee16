//! What watching a run costs per event (issue #13): the events of a 100-step run (model
//! request and answer, tool call and result per step) fed to the metrics that are always
//! on, and to the tracer with its OTLP exporter's queue and encoding (telemetry on), N
//! times; mean time per event. With telemetry off the tracer is not built at all.
//!
//! Run: `cargo bench -p fabric-telemetry --bench event_cost` (`BENCH_RUNS`, 2000).
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::sync::Mutex;
use std::time::Instant;

use fabric_core::EventSink;
use fabric_core::metrics::Metrics;
use fabric_domain::{EventKind, RunEvent, RunId};
use fabric_telemetry::{Span, SpanSink, Tracer};
use serde_json::json;

/// Keeps the spans, as the exporter's queue would, and encodes them in batches of 512.
struct Batching(Mutex<Vec<Span>>);

impl SpanSink for Batching {
    fn emit(&self, span: Span) {
        let mut batch = self.0.lock().unwrap();
        batch.push(span);
        if batch.len() >= 512 {
            let body = fabric_telemetry::encode_for_bench(&batch);
            std::hint::black_box(body);
            batch.clear();
        }
    }
}

fn events(steps: usize) -> Vec<RunEvent> {
    // Full payloads, as the fabric writes them: the sinks decode each one.
    let ev = fabric_fakes::sample;
    let mut out = vec![
        ev(
            EventKind::RunStart,
            1.0,
            json!({"model_key": "local", "depth": 0, "prompt": "p"}),
        ),
        ev(
            EventKind::Recruitment,
            1.0,
            json!({"specialist_ids": ["engineering"], "routing_method": "explicit"}),
        ),
        ev(
            EventKind::MemberStart,
            1.0,
            json!({"model_key": "local", "specialist_id": "engineering"}),
        ),
    ];
    for i in 0..steps {
        let t = 1.0 + i as f64;
        let call = format!("c{i}");
        out.push(ev(EventKind::LlmRequest, t, json!({"model": "qwen2.5:7b"})));
        out.push(ev(EventKind::LlmResponse, t + 0.5, json!({"latency_ms": 500, "finish_reason": "tool_calls", "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940}})));
        out.push(ev(
            EventKind::ToolCall,
            t + 0.5,
            json!({"tool": "shell", "call_id": call, "args": {"cmd": ["true"]}}),
        ));
        out.push(ev(
            EventKind::ToolResult,
            t + 0.6,
            json!({"tool": "shell", "call_id": call, "result": "ok"}),
        ));
    }
    out.push(ev(EventKind::RunComplete, 200.0, json!({"status": "completed", "specialist_ids": ["engineering"], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})));
    out
}

fn per_event(sink: &dyn EventSink, runs: usize, events: &[RunEvent]) -> f64 {
    let ids: Vec<RunId> = (0..runs)
        .map(|i| RunId::parse(&format!("20260101-000000-000-{i:08x}")).unwrap())
        .collect();
    let started = Instant::now();
    for id in &ids {
        for e in events {
            sink.observe(id, e);
        }
    }
    started.elapsed().as_secs_f64() * 1e9 / (runs * events.len()) as f64
}

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let events = events(100);
    let metrics = Metrics::new();
    let tracer = Tracer::new(
        Box::new(Batching(Mutex::new(Vec::new()))),
        false,
        [("local".to_owned(), "ollama".to_owned())].into(),
    );
    // Warm-up.
    per_event(&metrics, 50, &events);
    per_event(&tracer, 50, &events);
    let m = per_event(&metrics, runs, &events);
    let t = per_event(&tracer, runs, &events);
    println!(
        "event_cost: {runs} runs of {} events (100 steps with a tool call each), mean per event",
        events.len()
    );
    println!("  metrics (always on):                       {m:7.0} ns");
    println!("  tracer + OTLP encoding (telemetry on):     {t:7.0} ns");
    println!(
        "  per step (4 events), telemetry on:         {:7.2} µs",
        (m + t) * 4.0 / 1000.0
    );
}
