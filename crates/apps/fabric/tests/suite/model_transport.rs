//! How the fabric reaches a model server (ADR-127): its own HTTP/1.1 client for a plain
//! `http://` server, reqwest where the environment names a proxy.

use fabric_test_support::Turn;
use serde_json::json;

use super::fixture::Fixture;

/// A proxy in the environment is honoured: the model's address does not resolve, and the
/// run reaches the scripted server only because it is the proxy (reqwest sends the request
/// in absolute form, which the server routes by its path).
#[tokio::test(flavor = "multi_thread")]
async fn issue_45_a_model_server_behind_an_http_proxy_is_reached_through_the_proxy() {
    let fx = Fixture::new(vec![
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call("finish_task", json!({"summary": "through the proxy"})),
    ])
    .await;
    std::fs::write(
        &fx.config,
        "models:\n  test:\n    base_url: http://model.invalid/v1\n    model: qwen2.5:7b\n    backend: openai\n    timeout_s: 20\n    max_retries: 0\ndefault_model_key: test\nrouting_model_key: test\n",
    )
    .unwrap();
    let proxy = fx.server.root_url();
    let run = fx
        .fabric_with(
            &["run", "hello", "--pack", "engineering", "--json"],
            &[("HTTP_PROXY", proxy.as_str()), ("NO_PROXY", "")],
        )
        .await;
    assert_eq!(
        run.code(),
        0,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    assert_eq!(run.json()["_meta"]["status"], "completed");
    assert_eq!(fx.server.chat_request_count(), 2);

    // Without the proxy the same address is unreachable, and the message says so.
    let run = fx
        .fabric_with(
            &["run", "hello", "--pack", "engineering"],
            &[("NO_PROXY", "")],
        )
        .await;
    assert_eq!(run.code(), 3, "{}", run.stderr);
    assert!(
        run.stderr.contains("http://model.invalid"),
        "{}",
        run.stderr
    );
}

/// Several steps of one run against a plain `http://` server: every request gets its whole
/// answer (the connection kept between them carries no leftover of the one before).
#[tokio::test(flavor = "multi_thread")]
async fn issue_45_the_steps_of_a_run_each_get_their_own_answer_over_a_kept_connection() {
    let fx = Fixture::new(vec![
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call(
            "write_file",
            json!({"path": "a.txt", "content": "marker-7f3a"}),
        ),
        Turn::tool_call("read_file", json!({"path": "a.txt"})),
        Turn::tool_call("finish_task", json!({"summary": "three steps"})),
    ])
    .await;
    let result = fx.run_json("three steps", &[], 0).await;
    assert_eq!(result["_meta"]["status"], "completed");
    assert_eq!(fx.server.chat_request_count(), 4);
    let requests = fx.requests();
    let last = requests.last().unwrap().to_string();
    assert!(
        last.contains("marker-7f3a"),
        "the read's result reached the model: {last}"
    );
}
