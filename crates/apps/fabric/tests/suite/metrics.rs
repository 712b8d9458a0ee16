//! `GET /metrics` of a real `fabric serve` (issue #13): a run with a tool call, a refusal
//! and a finish, then the exposition parsed line by line and its figures checked against
//! what the run did; the token guards it unless `server.metrics_public: true`.

use std::collections::BTreeMap;

use fabric_test_support::{Scenario, Turn};
use serde_json::json;

use super::serve_fixture::{Options, Served};

fn turns() -> Vec<Turn> {
    vec![
        Turn::tool_call("write_file", json!({"path": "a.txt", "content": "a"})),
        // Refused by the file tools: a tool error and a `path_escape` security event.
        Turn::tool_call(
            "write_file",
            json!({"path": "../escape.txt", "content": "x"}),
        ),
        Turn::tool_call("finish_task", json!({"summary": "done"})),
    ]
}

/// Parses the Prometheus text format strictly: every family announced by `# HELP` and
/// `# TYPE` before its samples, every sample `name{labels} value` with a number. Returns
/// the samples by their `name{labels}` text.
fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut typed: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            assert!(
                ["counter", "gauge", "histogram"].contains(&kind),
                "type of {name}: {kind}"
            );
            typed.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        assert!(
            !line.is_empty() && !line.starts_with('#'),
            "stray line `{line}`"
        );
        let (series, value) = line.rsplit_once(' ').expect("a sample and its value");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("value of `{line}`"));
        let name = series.split('{').next().unwrap();
        if series.contains('{') {
            assert!(series.ends_with('}'), "labels of `{line}`");
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| typed.get(*f).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(name);
        assert!(
            typed.contains_key(family),
            "`{name}` sampled before its # TYPE"
        );
        samples.insert(series.to_owned(), value);
    }
    samples
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_13_metrics_count_a_run_s_tools_tokens_steps_and_refusals() {
    let served = Served::with(
        Scenario::new(turns()),
        Options {
            auth: true,
            ..Options::default()
        },
    )
    .await;
    let (status, body) = served
        .post_json("/run", json!({"prompt": "write a", "pack": "engineering"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["_meta"]["status"], "completed", "{body}");

    // Without the token: refused like the rest of the API.
    let anonymous = served
        .http
        .get(served.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);

    let response = served.get("/metrics").send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    let m = parse(&text);
    let get = |series: &str| {
        *m.get(series)
            .unwrap_or_else(|| panic!("no `{series}` in\n{text}"))
    };
    assert_eq!(
        get("fabric_runs_total{status=\"completed\",specialist=\"engineering\"}"),
        1.0
    );
    assert_eq!(get("fabric_runs_started_total"), 1.0);
    assert_eq!(get("fabric_runs_in_flight"), 0.0);
    assert_eq!(get("fabric_tool_calls_total{tool=\"write_file\"}"), 2.0);
    assert_eq!(get("fabric_tool_calls_total{tool=\"finish_task\"}"), 1.0);
    assert_eq!(
        get("fabric_tool_errors_total{tool=\"write_file\",error_type=\"permission\"}"),
        1.0
    );
    assert_eq!(
        get("fabric_security_events_total{event_type=\"path_escape\"}"),
        1.0
    );
    assert_eq!(
        get("fabric_tool_duration_seconds_count{tool=\"write_file\"}"),
        2.0
    );
    assert_eq!(
        get("fabric_tool_duration_seconds_bucket{tool=\"write_file\",le=\"+Inf\"}"),
        2.0
    );
    // Three model calls, three steps (the last one ends with the run).
    assert_eq!(get("fabric_step_duration_seconds_count"), 3.0);
    assert_eq!(
        get(
            "gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name=\"chat\",model_key=\"test\"}"
        ),
        3.0
    );
    // The tokens the scripted server reported, summed over the three answers.
    let runlog = served.runlog(body["_meta"]["run_id"].as_str().unwrap());
    let input: u64 = runlog
        .iter()
        .filter(|e| e["kind"] == "llm_response")
        .filter_map(|e| e["payload"]["usage"]["prompt_tokens"].as_u64())
        .sum();
    assert!(input > 0, "the scripted server reports usage");
    #[allow(clippy::cast_precision_loss)]
    let input = input as f64;
    assert_eq!(
        get("fabric_tokens_total{model_key=\"test\",type=\"input\"}"),
        input
    );
    // Buckets are cumulative.
    let buckets: Vec<f64> = m
        .iter()
        .filter(|(k, _)| k.starts_with("fabric_step_duration_seconds_bucket{"))
        .map(|(_, v)| *v)
        .collect();
    assert!(buckets.len() > 10, "{text}");
    assert_eq!(buckets.iter().copied().fold(0.0, f64::max), 3.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_13_metrics_public_opens_only_metrics() {
    let served = Served::with(
        Scenario::new(turns()),
        Options {
            auth: true,
            config: "server:\n  metrics_public: true\n",
            ..Options::default()
        },
    )
    .await;
    let metrics = served
        .http
        .get(served.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status().as_u16(), 200);
    assert!(parse(&metrics.text().await.unwrap()).contains_key("fabric_runs_in_flight"));
    let runs = served.http.get(served.url("/runs")).send().await.unwrap();
    assert_eq!(runs.status().as_u16(), 401);
}
