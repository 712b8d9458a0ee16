//! Hard budgets (issue #11): limits on tokens, dollars and time that hold during a step, not
//! only between steps, through the real binary against the scripted model server.

use fabric_test_support::{Turn, UsageSpec};
use serde_json::json;
use std::time::{Duration, Instant};

use super::fixture::{Fixture, assert_config_errors, of_kind};

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

/// Issue #27: the time budget also ends a tool call in flight, and its process with it.
#[tokio::test(flavor = "multi_thread")]
async fn issue_27_the_time_budget_stops_a_tool_in_flight_and_its_process() {
    // A duration no other process on the machine sleeps, to find this one by.
    let seconds = format!("29.{:03}", std::process::id() % 1000);
    let fx = Fixture::new(vec![Turn::tool_call(
        "shell",
        json!({"cmd": ["sh", "-c", format!("sleep {seconds}; touch late.txt")]}),
    )])
    .await;
    fx.append_config("budget:\n  max_wall_s: 1\nshell:\n  allowed_commands: [sh, sleep, touch]\n");
    let started = Instant::now();
    let result = fx.run_json("wait a while", &[], 5).await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "stopped at the limit, not after the tool: {:?}",
        started.elapsed()
    );
    assert_eq!(result["_meta"]["status"], "budget_exceeded");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("(1 s) ran out during the tool `shell`"),
        "{reason}"
    );
    // The command is gone once the run has answered (within a moment for the kernel to
    // reap it), not left sleeping until it would have written its file.
    let sleeping = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
            std::fs::read(entry.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&seconds))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while sleeping() {
        assert!(
            Instant::now() < deadline,
            "`sleep {seconds}` still runs after the run ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    // Issue #27: the dollars spent, priced as the docs say, never pass the limit: the
    // first call cost $1.50 and the $1.00 left cannot pay for the next one's prompt.
    let usage = &result["_meta"]["usage"];
    let spent = usage["prompt_tokens"].as_u64().unwrap() as f64 / 1_000.0
        + usage["completion_tokens"].as_u64().unwrap() as f64 / 1_000.0;
    assert!(
        spent <= 2.5,
        "${spent} spent under a limit of $2.50: {usage}"
    );
    assert_eq!(spent, 1.5, "{usage}");
    assert_eq!(fx.requests().len(), 1);

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

/// The fixture's server as the local key `test`, a second scripted server as `cloud` that
/// complexity routing sends every task to, `cloud_fallback` to it, and a daily budget of
/// 100 cloud tokens, days in UTC.
async fn with_daily_cloud(
    fx: &Fixture,
    cloud_turns: Vec<Turn>,
) -> fabric_test_support::ScriptedServer {
    fx.add_cloud(
        cloud_turns,
        "complexity_routing: {threshold: 0, simple: test, complex: cloud}\ncloud_fallback: {model_key: cloud}\ndaily_budget:\n  cloud: {max_tokens: 100}\ndaily_budget_timezone: UTC\n",
    )
    .await
}

fn finish() -> Turn {
    Turn::tool_call("finish_task", json!({"summary": "done"}))
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_the_daily_budget_is_shared_by_processes_and_resets_at_midnight() {
    let fx = Fixture::new(vec![listing(), finish(), listing(), finish()]).await;
    let cloud = with_daily_cloud(
        &fx,
        vec![
            used(listing(), 50, 10),
            used(finish(), 50, 10),
            listing(),
            finish(),
        ],
    )
    .await;
    let before_midnight = [("FABRIC_FAKE_NOW", "2026-11-23T23:58:00Z")];
    let run = |env: [(&'static str, &'static str); 1]| {
        let fx = &fx;
        async move {
            let run = fx
                .fabric_with(
                    &["run", "list the files", "--pack", "engineering", "--json"],
                    &env,
                )
                .await;
            (run.code(), run.json(), run.stderr)
        }
    };

    // First process: the task goes to the cloud key and spends 120 of its 100 tokens.
    let (code, first, stderr) = run(before_midnight).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(first["_meta"]["model_key"], "cloud");
    assert_eq!(cloud.chat_request_count(), 2);
    let budget = fx
        .fabric_with(&["budget", "--json"], &before_midnight)
        .await;
    let report = budget.json();
    assert_eq!(report["day"], "2026-11-23");
    assert_eq!(report["timezone"], "UTC");
    assert_eq!(report["keys"][0]["model_key"], "cloud");
    assert_eq!(report["keys"][0]["tokens"], 120);
    assert_eq!(report["keys"][0]["calls"], 2);
    assert_eq!(report["keys"][0]["exhausted"], true);
    let table = fx.fabric_with(&["budget"], &before_midnight).await;
    assert!(
        table.stdout.contains("cloud") && table.stdout.contains("spent"),
        "{}",
        table.stdout
    );

    // A second process, the same day: routing and the fallback use the local key, and the
    // runlog says why.
    let (code, second, stderr) = run(before_midnight).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(second["_meta"]["model_key"], "test");
    assert_eq!(cloud.chat_request_count(), 2, "the cloud was not asked");
    let start = &fx.runlog(&second)[0]["payload"];
    let reason = start["model_reason"].as_str().unwrap();
    assert!(
        reason.contains(
            "the daily budget of `cloud` is spent (120 of 100 tokens on 2026-11-23): `test` instead"
        ) && reason.contains("cloud fallback to `cloud` off"),
        "{reason}"
    );
    // Asked for by name, the spent key refuses the run, saying when it resets.
    let named = fx
        .fabric_with(
            &["run", "x", "--pack", "engineering", "--model-key", "cloud"],
            &before_midnight,
        )
        .await;
    assert_eq!(named.code(), 5, "{}", named.stderr);
    assert!(
        named
            .stderr
            .contains("the daily budget of `cloud` is spent")
            && named.stderr.contains("resets at midnight (UTC time)"),
        "{}",
        named.stderr
    );

    // After midnight the cloud key has its budget again.
    let (code, third, stderr) = run([("FABRIC_FAKE_NOW", "2026-11-24T00:01:00Z")]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(third["_meta"]["model_key"], "cloud");
    assert_eq!(cloud.chat_request_count(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_when_no_key_has_budget_left_the_run_refuses_to_start() {
    let fx = Fixture::new(vec![used(listing(), 30, 10), used(finish(), 30, 10)]).await;
    let _cloud = with_daily_cloud(&fx, vec![used(listing(), 90, 20), used(finish(), 90, 20)]).await;
    let yaml = std::fs::read_to_string(&fx.config).unwrap().replace(
        "  cloud: {max_tokens: 100}\n",
        "  cloud: {max_tokens: 100}\n  test: {max_tokens: 50}\n",
    );
    std::fs::write(&fx.config, yaml).unwrap();
    let now = [("FABRIC_FAKE_NOW", "1795473000")];
    // The cloud run spends the cloud budget, then a local run (named) the local one.
    let first = fx
        .fabric_with(&["run", "a", "--pack", "engineering"], &now)
        .await;
    assert_eq!(first.code(), 0, "{}", first.stderr);
    let second = fx
        .fabric_with(
            &["run", "b", "--pack", "engineering", "--model-key", "test"],
            &now,
        )
        .await;
    assert_eq!(second.code(), 0, "{}", second.stderr);
    let third = fx
        .fabric_with(&["run", "c", "--pack", "engineering", "--json"], &now)
        .await;
    assert_eq!(third.code(), 5, "{}", third.stderr);
    assert!(
        third
            .stderr
            .contains("no other model key has budget left today"),
        "{}",
        third.stderr
    );
    assert_eq!(third.json()["error"]["code"], "budget_exceeded");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_a_specialist_budget_replaces_the_top_level_one() {
    let fx = Fixture::new(vec![
        used(listing(), 1_000, 200),
        used(listing(), 1_000, 200),
        used(listing(), 1_000, 200),
    ])
    .await;
    fx.append_config(
        "budget:\n  max_tokens: 100000\nspecialists:\n  engineering:\n    budget: {max_tokens: 1500}\n",
    );
    let result = fx.run_json("list the files", &[], 5).await;
    assert_eq!(result["_meta"]["status"], "budget_exceeded");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(reason.contains("1500"), "{reason}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_26_config_validate_refuses_a_dollar_budget_without_a_price() {
    // `config validate` said OK, then `fabric run` refused the same file.
    assert_config_errors(&[
        (
            "budget:\n  max_cost_usd: 1\n",
            "`budget.max_cost_usd`: needs a price for every model key its runs may use, and `test` (`default_model_key`) has none",
        ),
        (
            "specialists:\n  engineering:\n    budget: {max_cost_usd: 1}\n",
            "`specialists.engineering.budget.max_cost_usd`: needs a price",
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_daily_budget_keys_are_checked() {
    assert_config_errors(&[
        (
            "daily_budget:\n  gpt: {max_tokens: 10}\n",
            "`daily_budget.gpt`: no model `gpt`",
        ),
        (
            "daily_budget:\n  test: {}\n",
            "needs `max_tokens` or `max_cost_usd`",
        ),
        (
            "daily_budget:\n  test: {max_cost_usd: 5}\n",
            "needs a price",
        ),
        (
            "daily_budget_timezone: Mars/Olympus\n",
            "must be `local`, `UTC` or an offset",
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_get_budget_reports_todays_spend_behind_the_token() {
    use super::serve_fixture::{Options, Served};
    let fx = Fixture::new(vec![]).await;
    let _cloud = with_daily_cloud(&fx, vec![used(listing(), 50, 10), used(finish(), 50, 10)]).await;
    let served = Served::on(
        fx,
        Options {
            auth: true,
            ..Options::default()
        },
    )
    .await;
    let (status, body) = served
        .post_json(
            "/run",
            json!({"prompt": "list the files", "pack": "engineering"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, report) = served.get_json("/budget").await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["keys"][0]["model_key"], "cloud");
    assert_eq!(report["keys"][0]["tokens"], 120);
    assert_eq!(report["keys"][0]["max_tokens"], 100);
    assert_eq!(report["keys"][0]["exhausted"], true);
    assert_eq!(report["timezone"], "UTC");
    // Named, the spent key is refused with its own code.
    let (status, body) = served
        .post_json(
            "/run",
            json!({"prompt": "x", "pack": "engineering", "model_key": "cloud"}),
        )
        .await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "daily_budget_spent");
    let anonymous = reqwest::get(served.url("/budget")).await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_a_streamed_answer_is_counted_as_it_arrives() {
    // A server that ignores `max_tokens`: 8,000 characters in 12 pieces, 300 ms apart.
    let mut scenario = fabric_test_support::Scenario::new(vec![Turn::text("word ".repeat(1_600))]);
    scenario.stream_delay_ms = 300;
    let fx = Fixture::with_backend(scenario, "openai").await;
    fx.append_config("budget:\n  max_tokens: 1600\n");
    let started = Instant::now();
    let run = fx
        .fabric(&["run", "say many words", "--pack", "engineering", "--stream"])
        .await;
    assert_eq!(run.code(), 5, "{}\n{}", run.stdout, run.stderr);
    assert!(
        started.elapsed() < Duration::from_millis(2_500),
        "stopped while streaming, not after the whole answer: {:?}",
        started.elapsed()
    );
    assert!(
        run.stderr.contains("while it streamed, and was stopped"),
        "{}",
        run.stderr
    );
}

/// `fabric run "say many words" --stream --json` with `env`, which a budget stops (exit 5):
/// its result, the last line.
pub(crate) async fn stopped_stream(fx: &Fixture, env: &[(&str, &str)]) -> serde_json::Value {
    let args = [
        "run",
        "say many words",
        "--pack",
        "engineering",
        "--stream",
        "--json",
    ];
    let run = fx.fabric_with(&args, env).await;
    assert_eq!(run.code(), 5, "{}\n{}", run.stdout, run.stderr);
    let last = run.stdout.trim().lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_26_what_a_stopped_stream_took_is_counted_in_the_run_and_the_day() {
    // `_meta.usage` showed 0 tokens after about 2,500 were streamed, and the day's spend
    // missed them too.
    let mut scenario = fabric_test_support::Scenario::new(vec![Turn::text("word ".repeat(1_600))]);
    scenario.stream_delay_ms = 100;
    let fx = Fixture::with_backend(scenario, "openai").await;
    fx.append_config(
        "budget:\n  max_tokens: 1600\ndaily_budget:\n  test: {max_tokens: 1000000}\ndaily_budget_timezone: UTC\n",
    );
    let result = stopped_stream(&fx, &[]).await;
    let usage = &result["_meta"]["usage"];
    // The prompt and what streamed before the stop: past the budget of 1,600 it broke.
    assert!(usage["completion_tokens"].as_u64() > Some(100), "{usage}");
    assert!(usage["prompt_tokens"].as_u64() > Some(0), "{usage}");
    assert!(usage["total_tokens"].as_u64() > Some(1_600), "{usage}");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("estimated from the prompt sent and the text received"),
        "{reason}"
    );
    // The run's end in the store says the same (what `fabric stats` sums).
    let events = fx.runlog(&result);
    assert_eq!(events.last().unwrap()["payload"]["usage"], *usage);
    // And the day's spend of the key counts the cut-off call.
    let mut spent = 0;
    for _ in 0..50 {
        let report = fx.fabric(&["budget", "--json"]).await.json();
        spent = report["keys"][0]["tokens"].as_u64().unwrap_or(0);
        if spent > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        spent >= 1_000,
        "the day's spend missed the streamed answer: {spent}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_a_continued_run_keeps_its_key_whatever_the_daily_budget_says() {
    let fx = Fixture::new(vec![]).await;
    let mut slow_finish = finish();
    slow_finish.delay_ms = Some(10_000);
    // The first answer alone spends the cloud key's day; the run is killed while it waits
    // for the second.
    let cloud = with_daily_cloud(&fx, vec![used(listing(), 90, 20), slow_finish, finish()]).await;
    let now = ("FABRIC_FAKE_NOW", "2026-11-23T12:00:00Z");
    let mut cmd = fx.command(&["run", "list the files", "--pack", "engineering", "--json"]);
    cmd.env(now.0, now.1)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let runs = fx.workspace_root().join("runs");
    let mut id = None;
    for _ in 0..1_000 {
        let found = std::fs::read_dir(&runs)
            .into_iter()
            .flatten()
            .flatten()
            .find_map(|e| e.file_name().into_string().ok());
        if let Some(run) = &found {
            let text =
                std::fs::read_to_string(runs.join(run).join("runlog.jsonl")).unwrap_or_default();
            // The runlog records the request before it is sent: wait until the server has
            // it too, or the resumed run would take the slow answer in its place.
            if text
                .lines()
                .any(|l| l.contains("\"llm_request\"") && l.contains("\"step\":1"))
                && cloud.chat_request_count() == 2
            {
                id = found;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let id = id.expect("the run reached its second model call");
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let resumed = fx.fabric_with(&["resume", &id, "--json"], &[now]).await;
    assert_eq!(resumed.code(), 0, "{}\n{}", resumed.stdout, resumed.stderr);
    let result = resumed.json();
    assert_eq!(result["_meta"]["status"], "completed");
    assert_eq!(result["_meta"]["model_key"], "cloud");
    assert_eq!(
        fx.server.chat_request_count(),
        0,
        "the local model was never asked"
    );
    assert_eq!(cloud.chat_request_count(), 3);
    // A replay makes no model call, so today's spent budget does not change it either.
    let replay = fx.fabric_with(&["replay", &id, "--json"], &[now]).await;
    assert_eq!(replay.code(), 0, "{}\n{}", replay.stdout, replay.stderr);
}
