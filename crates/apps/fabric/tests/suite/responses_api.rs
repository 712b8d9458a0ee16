//! The Responses API backend (issue #30) through the real binary: the scripted server speaks
//! `/v1/responses`, whole and streamed, and keeps its answers by id, so a chained run that
//! completes proves `previous_response_id` named a real answer.

use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};

use super::fixture::{Fixture, of_kind};

fn turns() -> Vec<Turn> {
    let mut write = Turn::tool_call(
        "write_file",
        json!({"path": "hello.txt", "content": "Hello from Responses"}),
    );
    write.content = Some("I will write the file.".into());
    vec![
        write,
        Turn::tool_call("finish_task", json!({"summary": "wrote hello.txt"})),
    ]
}

fn kinds(body: &Value) -> Vec<String> {
    body["input"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| i["type"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_30_a_run_on_the_responses_backend_whole_streamed_and_chained() {
    for (stream, chained) in [(false, false), (true, false), (false, true), (true, true)] {
        let fx = Fixture::with_backend(Scenario::new(turns()), "openai-responses").await;
        if chained {
            let text = std::fs::read_to_string(&fx.config).unwrap().replace(
                "    backend: openai-responses\n",
                "    backend: openai-responses\n    response_chaining: previous_response_id\n",
            );
            std::fs::write(&fx.config, text).unwrap();
        }
        let mut args = vec!["run", "write hello.txt", "--pack", "engineering", "--json"];
        if stream {
            args.push("--stream");
        }
        let run = fx.fabric(&args).await;
        let case = format!("stream {stream}, chained {chained}");
        assert_eq!(run.code(), 0, "{case}: {}\n{}", run.stdout, run.stderr);
        let last = run.stdout.lines().last().unwrap_or_default();
        let result: Value = serde_json::from_str(last).unwrap();
        assert_eq!(result["summary"], "wrote hello.txt", "{case}");
        let workspace = std::path::PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
        assert_eq!(
            std::fs::read_to_string(workspace.join("hello.txt")).unwrap(),
            "Hello from Responses"
        );
        let requests = fx.server.requests();
        assert!(requests.iter().all(|r| r.path == "/v1/responses"), "{case}");
        assert_eq!(requests[0].body["stream"], stream, "{case}");
        assert!(
            requests[0].body["instructions"]
                .as_str()
                .is_some_and(|i| !i.is_empty())
        );
        let second = &requests[1].body;
        if chained {
            // Only the tool's output, after the answer the server keeps.
            assert!(
                second["previous_response_id"].is_string(),
                "{case}: {second}"
            );
            assert_eq!(kinds(second), ["function_call_output"], "{case}");
        } else {
            assert!(second.get("previous_response_id").is_none(), "{case}");
            assert_eq!(
                kinds(second),
                [
                    "message",
                    "message",
                    "function_call",
                    "function_call_output"
                ],
                "{case}: the task, the model's text, its call and the result"
            );
        }
        let events = fx.runlog(&result);
        let responses = of_kind(&events, "llm_response");
        assert_eq!(responses[0]["payload"]["finish_reason"], "tool_calls");
        assert!(
            responses[0]["payload"]["usage"]["prompt_tokens"]
                .as_u64()
                .unwrap()
                > 0
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_30_response_chaining_on_another_backend_is_refused_by_name() {
    let fx = Fixture::with_backend(Scenario::new(turns()), "openai").await;
    let text = std::fs::read_to_string(&fx.config).unwrap().replace(
        "    backend: openai\n",
        "    backend: openai\n    response_chaining: previous_response_id\n",
    );
    std::fs::write(&fx.config, text).unwrap();
    let run = fx.fabric(&["run", "hi", "--json"]).await;
    assert_ne!(run.code(), 0);
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(
        all.contains("models.test.response_chaining") && all.contains("backend: openai-responses"),
        "{all}"
    );
    assert!(fx.server.requests().is_empty());
}
