//! Hard budgets (issue #11): limits on tokens, dollars and time that hold during a step, not
//! only between steps, through the real binary against the scripted model server.

use fabric_test_support::{Turn, UsageSpec};
use serde_json::json;
use std::time::{Duration, Instant};

use super::fixture::{Fixture, of_kind};

fn used(turn: Turn, prompt: u64, completion: u64) -> Turn {
    Turn {
        usage: Some(UsageSpec {
            prompt_tokens: Some(prompt),
            completion_tokens: Some(completion),
        }),
        ..turn
    }
}

fn listing() -> Turn {
    Turn::tool_call("list_files", json!({}))
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_the_time_budget_stops_a_model_call_in_flight() {
    let mut slow = listing();
    slow.delay_ms = Some(5_000);
    let fx = Fixture::new(vec![slow]).await;
    fx.append_config("budget:\n  max_wall_s: 1\n");
    let started = Instant::now();
    let result = fx.run_json("list the files", &[], 5).await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "stopped at the limit, not after the call: {:?}",
        started.elapsed()
    );
    assert_eq!(result["_meta"]["status"], "budget_exceeded");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("time budget") && reason.contains("(1 s) ran out during a model call"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_the_token_budget_caps_each_call_and_is_never_passed() {
    let fx = Fixture::new(vec![
        used(listing(), 1_000, 200),
        used(listing(), 1_100, 200),
        used(listing(), 1_200, 200),
    ])
    .await;
    fx.append_config("budget:\n  max_tokens: 3000\n");
    let result = fx.run_json("list the files", &[], 5).await;
    assert_eq!(result["_meta"]["status"], "budget_exceeded");
    let total = result["_meta"]["usage"]["total_tokens"].as_u64().unwrap();
    assert!(total <= 3_000, "{total}");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(reason.contains("token budget"), "{reason}");
    // The second call asked for no more than what was left once its prompt is paid.
    let requests = fx.requests();
    assert_eq!(
        requests.len(),
        2,
        "the third call would have passed the budget"
    );
    let cap = requests[1]["max_tokens"].as_u64().unwrap();
    assert!(cap <= 3_000 - 1_200, "{cap}");
    assert!(of_kind(&fx.runlog(&result), "llm_request").len() == 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_the_cost_budget_prices_each_call_by_its_model_key() {
    let fx = Fixture::new(vec![
        used(listing(), 1_000, 500),
        used(listing(), 1_000, 500),
        used(listing(), 1_000, 500),
    ])
    .await;
    // $1 per 1,000 tokens each way: each call costs $1.50; $2.50 allows one and not a third.
    let yaml = std::fs::read_to_string(&fx.config).unwrap().replace(
        "    max_retries: 2\n",
        "    max_retries: 2\n    price_per_mtok: {input: 1000, output: 1000}\n",
    );
    std::fs::write(&fx.config, yaml + "budget:\n  max_cost_usd: 2.5\n").unwrap();
    let result = fx.run_json("list the files", &[], 5).await;
    assert_eq!(result["_meta"]["status"], "budget_exceeded");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("cost budget") && reason.contains("$2.5000"),
        "{reason}"
    );
    assert!(fx.requests().len() <= 2);

    // A dollar budget without a price is named as such, before anything runs.
    let fx = Fixture::new(vec![listing()]).await;
    fx.append_config("budget:\n  max_cost_usd: 1\n");
    let run = fx.fabric(&["run", "x", "--pack", "engineering"]).await;
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("needs a price") && run.stderr.contains("models.test"),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_the_old_delegation_budget_keys_still_work_with_a_warning() {
    let mut slow = listing();
    slow.delay_ms = Some(5_000);
    let fx = Fixture::new(vec![slow]).await;
    fx.append_config("delegation:\n  timeout_s: 1\n");
    let run = fx
        .fabric(&["run", "list", "--pack", "engineering", "--json"])
        .await;
    assert_eq!(run.code(), 5, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("`delegation.max_tokens` and `delegation.timeout_s` are deprecated"),
        "{}",
        run.stderr
    );
    assert_eq!(run.json()["_meta"]["status"], "budget_exceeded");
}
