//! The critic gate (issue #11): a specialist with a critic writes into a staging area; the
//! critic reviews the staged changes when it calls `finish_task`; approved changes are
//! applied, rejected ones go back for repair, and after `max_repair_rounds` rejections the
//! run ends `quality_gate_failed` with the workspace untouched. Through the real binary,
//! the specialist and its critic both answered by the scripted model server, in order.

use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};
use std::path::PathBuf;

use super::fixture::{Fixture, assert_config_errors, of_kind, read_runlog, tool_messages};

const GATED: &str = "specialists:\n  engineering:\n    critic: reviewer\n";

fn write(path: &str, content: &str) -> Turn {
    Turn::tool_call("write_file", json!({"path": path, "content": content}))
}

fn finish(summary: &str) -> Turn {
    Turn::tool_call(
        "finish_task",
        json!({"summary": summary, "artifacts": ["hello.py"]}),
    )
}

/// The critic's two turns: a look at the files, then its verdict.
fn review(approved: bool, reason: &str) -> [Turn; 2] {
    let findings = if approved {
        json!([])
    } else {
        json!([{"severity": "error", "file": "hello.py", "reason": reason}])
    };
    [
        Turn::tool_call("read_file", json!({"path": "hello.py"})),
        Turn::tool_call(
            "finish_task",
            json!({"approved": approved, "findings": findings, "summary": reason}),
        ),
    ]
}

/// Runs "write hello.py printing hello" with the critic gate on, expecting exit `code`.
async fn gated_hello(turns: Vec<Turn>, code: i32) -> (Fixture, Value) {
    let fx = Fixture::new(turns).await;
    fx.append_config(GATED);
    let result = fx
        .run_json("write hello.py printing hello", &[], code)
        .await;
    (fx, result)
}

fn workspace_of(result: &Value) -> PathBuf {
    PathBuf::from(result["_meta"]["workspace"].as_str().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_a_critic_rejects_twice_then_approves_and_only_then_the_work_lands() {
    let mut turns = vec![write("hello.py", "print(1)\n"), finish("first try")];
    turns.extend(review(false, "it prints 1; the task asks for hello"));
    turns.extend([write("hello.py", "print('helo')\n"), finish("second try")]);
    turns.extend(review(false, "`helo` is misspelt"));
    turns.extend([write("hello.py", "print('hello')\n"), finish("fixed")]);
    turns.extend(review(true, "prints hello"));
    let (fx, result) = gated_hello(turns, 0).await;
    assert_eq!(result["_meta"]["status"], "completed");
    assert_eq!(result["summary"], "fixed");
    // Exactly the approved content, nothing staged on the way.
    let workspace = workspace_of(&result);
    assert_eq!(
        std::fs::read_to_string(workspace.join("hello.py")).unwrap(),
        "print('hello')\n"
    );
    // Issue #26: the staging area is gone, `staged/` included (an empty one stayed).
    let run_dir = workspace.parent().unwrap();
    assert!(!run_dir.join("staged").exists(), "{}", run_dir.display());

    let events = fx.runlog(&result);
    let reviews = of_kind(&events, "critic_review");
    let verdicts: Vec<(u64, bool)> = reviews
        .iter()
        .map(|e| {
            (
                e["payload"]["round"].as_u64().unwrap(),
                e["payload"]["approved"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(verdicts, [(1, false), (2, false), (3, true)]);
    assert_eq!(reviews[0]["payload"]["critic"], "reviewer");
    assert_eq!(reviews[0]["payload"]["max_rounds"], 3);
    assert_eq!(reviews[0]["payload"]["files"], json!(["hello.py"]));
    assert_eq!(
        reviews[0]["payload"]["findings"][0]["reason"],
        "it prints 1; the task asks for hello"
    );
    assert_eq!(reviews[2]["payload"]["applied"], json!(["hello.py"]));
    let repairs = of_kind(&events, "repair_round");
    assert_eq!(repairs.len(), 2);
    assert_eq!(repairs[0]["payload"]["round"], 2);
    assert_eq!(repairs[0]["payload"]["model_key"], "test");
    let errors = of_kind(&events, "tool_error");
    let rejected: Vec<&&Value> = errors
        .iter()
        .filter(|e| e["payload"]["error_type"] == "rejected")
        .collect();
    assert_eq!(rejected.len(), 2);
    assert_eq!(rejected[0]["payload"]["tool"], "finish_task");

    // The specialist was told the findings as its finish_task result.
    let requests = fx.requests();
    let told = tool_messages(&requests[4]).join("\n");
    assert!(
        told.contains("rejected your work (review 1 of 3)")
            && told.contains("[error] hello.py: it prints 1; the task asks for hello"),
        "{told}"
    );

    // Each review is a child run of the critic, in the staging area, that saw the staged
    // file (not the workspace, which was empty until approval).
    let critic_run = reviews[0]["payload"]["critic_run_id"].as_str().unwrap();
    let critic_log = read_runlog(
        &fx.workspace_root()
            .join("runs")
            .join(critic_run)
            .join("runlog.jsonl"),
    );
    let start = &critic_log[0]["payload"];
    assert_eq!(start["parent_run_id"], result["_meta"]["run_id"]);
    assert_eq!(
        start["workspace"], reviews[0]["payload"]["staged_dir"],
        "the critic works in the staging area"
    );
    let read = of_kind(&critic_log, "tool_result");
    assert!(
        read[0]["payload"]["result"]
            .as_str()
            .unwrap()
            .contains("print(1)"),
        "{read:?}"
    );
    // The critic was given the task, the payload and the diff.
    let asked = requests[2]["messages"][1]["content"].as_str().unwrap();
    assert!(
        asked.contains("write hello.py printing hello")
            && asked.contains("\"summary\": \"first try\"")
            && asked.contains("--- /dev/null\n+++ b/hello.py\n@@ -0,0 +1,1 @@\n+print(1)"),
        "{asked}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_three_rejections_end_quality_gate_failed_with_the_work_kept_not_applied() {
    let mut turns = Vec::new();
    for n in 1..=3 {
        turns.extend([write("hello.py", &format!("print({n})\n")), finish("try")]);
        turns.extend(review(false, "still wrong"));
    }
    let (fx, result) = gated_hello(turns, 8).await;
    assert_eq!(result["_meta"]["status"], "quality_gate_failed");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("rejected the work 3 time(s) (max_repair_rounds: 3)")
            && reason.contains("still wrong"),
        "{reason}"
    );
    let workspace = workspace_of(&result);
    assert!(
        !workspace.join("hello.py").exists(),
        "the workspace is untouched"
    );
    let events = fx.runlog(&result);
    let reviews = of_kind(&events, "critic_review");
    assert_eq!(reviews.len(), 3);
    let staged = PathBuf::from(reviews[2]["payload"]["staged_dir"].as_str().unwrap());
    assert!(reason.contains(&staged.display().to_string()), "{reason}");
    assert_eq!(
        std::fs::read_to_string(staged.join("hello.py")).unwrap(),
        "print(3)\n",
        "the last staged work is kept for inspection"
    );
    assert_eq!(of_kind(&events, "repair_round").len(), 2);
    let end = events.last().unwrap();
    assert_eq!(end["kind"], "run_failed");
    assert_eq!(end["payload"]["status"], "quality_gate_failed");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_staged_writes_stay_under_the_sandbox_and_protected_paths_never_land() {
    let turns = vec![
        // Refused in the staging area exactly as in a workspace.
        write("../escape.txt", "x"),
        write("a.txt", "A\n"),
        // The shell's writes are staged too, including into `.git/hooks`.
        Turn::tool_call("shell", json!({"cmd": ["mkdir", "-p", ".git/hooks"]})),
        Turn::tool_call(
            "shell",
            json!({"cmd": ["cp", "a.txt", ".git/hooks/pre-commit"]}),
        ),
        finish("done"),
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call(
            "finish_task",
            json!({"approved": true, "findings": [], "summary": "fine"}),
        ),
    ];
    let fx = Fixture::new(turns).await;
    fx.append_config(GATED);
    let result = fx.run_json("write a.txt", &[], 0).await;
    let events = fx.runlog(&result);
    let security: Vec<&str> = of_kind(&events, "security_event")
        .iter()
        .filter_map(|e| e["payload"]["event_type"].as_str())
        .collect();
    assert!(security.contains(&"path_escape"), "{security:?}");
    assert!(security.contains(&"protected_path"), "{security:?}");
    let workspace = workspace_of(&result);
    assert!(!workspace.parent().unwrap().join("escape.txt").exists());
    assert_eq!(
        std::fs::read_to_string(workspace.join("a.txt")).unwrap(),
        "A\n"
    );
    assert!(
        !workspace.join(".git").exists(),
        "a staged hook is never applied"
    );
    let review = &of_kind(&events, "critic_review")[0]["payload"];
    // Issue #15: the shell removes the `.git/` a command created in the staging area right
    // after the command (a `protected_path` event, checked above), so the `cp` into it finds
    // no directory and the critic never sees a hook: nothing is left to refuse (issue #27:
    // this accepted a refused hook too, which would mean the removal stopped working).
    assert!(review.get("refused").is_none(), "{review}");
    assert_eq!(review["applied"], json!(["a.txt"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_a_rejected_repair_goes_to_the_cloud_model() {
    let mut turns = vec![write("hello.py", "print(1)\n"), finish("first")];
    turns.extend(review(false, "wrong output"));
    // (the repair runs on the cloud model)
    turns.extend(review(true, "good"));
    let fx = Fixture::new(turns).await;
    let cloud = fx
        .add_cloud(
            vec![
                write("hello.py", "print('hello')\n"),
                finish("repaired by the cloud"),
            ],
            &format!("{GATED}cloud_fallback:\n  model_key: cloud\n  policy: [critic_rejected]\n"),
        )
        .await;
    let result = fx.run_json("write hello.py printing hello", &[], 0).await;
    assert_eq!(result["summary"], "repaired by the cloud");
    assert_eq!(cloud.chat_request_count(), 2);
    let events = fx.runlog(&result);
    let fallbacks = of_kind(&events, "cloud_fallback");
    assert_eq!(fallbacks.len(), 1);
    assert_eq!(fallbacks[0]["payload"]["reason"], "critic_rejected");
    assert_eq!(fallbacks[0]["payload"]["cloud_model"], "big-cloud-model");
    let repair = &of_kind(&events, "repair_round")[0]["payload"];
    assert_eq!(repair["model_key"], "cloud");
    assert_eq!(
        std::fs::read_to_string(workspace_of(&result).join("hello.py")).unwrap(),
        "print('hello')\n"
    );
}

/// Issue #27: a critic that answers in prose gave no verdict: only an explicit
/// `approved: true` lets the work land, so prose is a rejection, its text the finding.
#[tokio::test(flavor = "multi_thread")]
async fn issue_27_a_critic_answering_in_prose_rejects_with_its_words() {
    let mut turns = vec![write("hello.py", "print(1)\n"), finish("first")];
    // Asked once more to use its tools, the critic answers in prose again, and its run ends
    // `completed_without_finish`.
    turns.push(Turn::text("It looks wrong."));
    turns.push(Turn::text("It prints 1, not hello."));
    turns.extend([write("hello.py", "print('hello')\n"), finish("second")]);
    turns.extend(review(true, "good"));
    let (fx, result) = gated_hello(turns, 0).await;
    assert_eq!(result["summary"], "second");
    let events = fx.runlog(&result);
    let reviews = of_kind(&events, "critic_review");
    assert_eq!(reviews.len(), 2);
    let first = &reviews[0]["payload"];
    assert_eq!(first["approved"], false, "{first}");
    assert_eq!(
        first["findings"][0]["reason"], "It prints 1, not hello.",
        "{first}"
    );
    assert!(first.get("applied").is_none(), "{first}");
    assert_eq!(reviews[1]["payload"]["applied"], json!(["hello.py"]));
    assert_eq!(of_kind(&events, "repair_round").len(), 1);
    assert_eq!(
        std::fs::read_to_string(workspace_of(&result).join("hello.py")).unwrap(),
        "print('hello')\n"
    );
}

/// Issue #27: a critic whose run fails gives no verdict, and the work is not applied: the
/// run ends `quality_gate_failed` naming the critic's run, with the staged work kept.
#[tokio::test(flavor = "multi_thread")]
async fn issue_27_a_critic_whose_run_fails_gives_no_verdict_and_nothing_lands() {
    let turns = vec![
        write("hello.py", "print(1)\n"),
        finish("first"),
        // The critic's model call is refused (400 is not retried).
        Turn::error(400, "the critic's model is misconfigured"),
    ];
    let (fx, result) = gated_hello(turns, 8).await;
    assert_eq!(result["_meta"]["status"], "quality_gate_failed");
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("the critic `reviewer` gave no verdict: its run")
            && reason.contains("ended llm_error"),
        "{reason}"
    );
    assert!(!workspace_of(&result).join("hello.py").exists());
    let events = fx.runlog(&result);
    let review = &of_kind(&events, "critic_review")[0]["payload"];
    assert_eq!(review["approved"], false, "{review}");
    let staged = PathBuf::from(review["staged_dir"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(staged.join("hello.py")).unwrap(),
        "print(1)\n",
        "the staged work is kept for inspection"
    );
    assert!(reason.contains(&staged.display().to_string()), "{reason}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_a_critic_must_exist_only_read_and_give_a_verdict() {
    assert_config_errors(&[
        (
            "specialists:\n  engineering:\n    critic: nobody\n",
            "no specialist `nobody`",
        ),
        (
            "specialists:\n  engineering:\n    critic: research\n",
            "may write files",
        ),
        (
            "specialists:\n  engineering:\n    critic: engineering\n",
            "cannot review its own work",
        ),
        (
            "specialists:\n  engineering:\n    max_repair_rounds: 2\n",
            "has no `critic`",
        ),
        (
            "specialists:\n  engineering:\n    critic: reviewer\n    max_repair_rounds: 0\n",
            "between 1 and 10",
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_the_readme_quality_example_is_a_valid_config() {
    let block = readme_quality_example();
    let fx = Fixture::new(vec![]).await;
    std::fs::write(&fx.config, block).unwrap();
    let run = fx.fabric(&["config", "validate"]).await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let shown = fx.fabric(&["config", "show"]).await.json();
    assert_eq!(shown["cloud_fallback"]["critic_rejected"], true);
    assert_eq!(shown["models"]["cloud"]["backend"], "anthropic");
}

/// The README's quality example, as written there.
fn readme_quality_example() -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../README.md"))
            .unwrap();
    readme
        .split("<!-- quality-example -->\n```yaml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README has the quality example")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_26_the_readme_fizzbuzz_example_writes_runs_its_test_and_lands() {
    // `python3` was not on the shell's allowlist, so the example could not run its test.
    let fizzbuzz = "def fizzbuzz(n):\n    if n % 15 == 0:\n        return 'FizzBuzz'\n    if n % 3 == 0:\n        return 'Fizz'\n    if n % 5 == 0:\n        return 'Buzz'\n    return str(n)\n";
    let test = "from fizzbuzz import fizzbuzz\nassert [fizzbuzz(i) for i in (1, 3, 5, 15)] == ['1', 'Fizz', 'Buzz', 'FizzBuzz']\nprint('fizzbuzz test passed')\n";
    let turns = vec![
        write("fizzbuzz.py", fizzbuzz),
        write("test_fizzbuzz.py", test),
        Turn::tool_call("shell", json!({"cmd": ["python3", "test_fizzbuzz.py"]})),
        Turn::tool_call(
            "finish_task",
            json!({"summary": "fizzbuzz with a passing test", "artifacts": ["fizzbuzz.py", "test_fizzbuzz.py"]}),
        ),
        Turn::tool_call("read_file", json!({"path": "fizzbuzz.py"})),
        Turn::tool_call(
            "finish_task",
            json!({"approved": true, "findings": [], "summary": "correct, and tested"}),
        ),
    ];
    let fx = Fixture::with_backend(Scenario::new(turns), "ollama").await;
    let url = fx.server.base_url();
    let config = readme_quality_example()
        .replace("http://localhost:11434", &url)
        .replace("https://api.anthropic.com", &url);
    std::fs::write(&fx.config, config).unwrap();
    let shown = fx.fabric(&["config", "show"]).await.json();
    let allowed = shown["shell"]["allowed_commands"].as_array().unwrap();
    for program in ["python3", "pytest", "ls", "cargo"] {
        assert!(allowed.contains(&json!(program)), "{program}: {allowed:?}");
    }
    let run = fx
        .fabric_with(
            &[
                "run",
                "Write fizzbuzz.py and a test for it, run the test",
                "--pack",
                "engineering",
                "--json",
            ],
            &[("ANTHROPIC_API_KEY", "sk-ant-test")],
        )
        .await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    let events = fx.runlog(&result);
    let ran = of_kind(&events, "tool_result")
        .into_iter()
        .find(|e| e["payload"]["tool"] == "shell")
        .unwrap_or_else(|| panic!("the test did not run: {events:?}"));
    let output = ran["payload"].to_string();
    assert!(output.contains("fizzbuzz test passed"), "{output}");
    assert_eq!(
        std::fs::read_to_string(workspace_of(&result).join("fizzbuzz.py")).unwrap(),
        fizzbuzz
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_11_the_critic_gate_works_on_the_ollama_and_anthropic_wires() {
    for backend in ["ollama", "anthropic"] {
        let mut turns = vec![write("hello.py", "print(1)\n"), finish("first try")];
        turns.extend(review(false, "it prints 1"));
        turns.extend([write("hello.py", "print('hello')\n"), finish("fixed")]);
        turns.extend(review(true, "prints hello"));
        let fx = Fixture::with_backend(Scenario::new(turns), backend).await;
        fx.append_config(GATED);
        let run = fx
            .fabric_with(
                &["run", "write hello.py", "--pack", "engineering", "--json"],
                &[("ANTHROPIC_API_KEY", "sk-ant-test")],
            )
            .await;
        assert_eq!(run.code(), 0, "{backend}: {}\n{}", run.stdout, run.stderr);
        let result = run.json();
        assert_eq!(result["summary"], "fixed", "{backend}");
        assert_eq!(
            std::fs::read_to_string(workspace_of(&result).join("hello.py")).unwrap(),
            "print('hello')\n",
            "{backend}"
        );
        let events = fx.runlog(&result);
        let verdicts: Vec<bool> = of_kind(&events, "critic_review")
            .iter()
            .map(|e| e["payload"]["approved"].as_bool().unwrap())
            .collect();
        assert_eq!(verdicts, [false, true], "{backend}");
    }
}

/// Issue #40: a critic whose run failed is printed as a failure with how its run ended, not
/// as a rejection with 0 findings.
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_a_critic_that_failed_is_printed_as_a_failure_not_a_rejection() {
    let fx = Fixture::new(vec![
        write("hello.py", "print(1)\n"),
        finish("first"),
        Turn::error(400, "the critic's model is misconfigured"),
    ])
    .await;
    fx.append_config(GATED);
    let run = fx
        .fabric(&[
            "run",
            "write hello.py printing hello",
            "--pack",
            "engineering",
        ])
        .await;
    run.assert_code(8);
    let shown = format!("{}{}", run.stdout, run.stderr);
    let line = shown
        .lines()
        .find(|l| l.contains("⚖ critic reviewer"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        line.contains("critic reviewer failed (review 1 of 3): its run ended llm_error"),
        "{line}"
    );
    assert!(line.contains("no verdict"), "{line}");
    assert!(!shown.contains("rejected"), "{shown}");
}

/// Issue #40: the diff a critic reviews is in its task, so it may give its verdict at once,
/// without first using another tool.
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_a_critic_may_give_its_verdict_at_once() {
    let turns = vec![
        write("hello.py", "print('hello')\n"),
        finish("done"),
        Turn::tool_call(
            "finish_task",
            json!({"approved": true, "findings": [], "summary": "prints hello"}),
        ),
    ];
    let (fx, result) = gated_hello(turns, 0).await;
    assert_eq!(result["summary"], "done");
    let events = fx.runlog(&result);
    let review = &of_kind(&events, "critic_review")[0]["payload"];
    assert_eq!(review["approved"], true, "{review}");
    assert_eq!(review["applied"], json!(["hello.py"]));
    assert_eq!(
        std::fs::read_to_string(workspace_of(&result).join("hello.py")).unwrap(),
        "print('hello')\n"
    );
}
