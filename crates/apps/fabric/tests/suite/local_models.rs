//! What small local models and their servers do (issue #12), through the real binary.

use fabric_test_support::{Scenario, Turn};
use serde_json::json;

use super::fixture::{Fixture, of_kind};

fn hermes_write() -> Turn {
    Turn::text(
        "I'll create it.\n<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"hello.txt\", \"content\": \"Hello\"}}\n</tool_call>",
    )
}

fn bare_finish() -> Turn {
    Turn::text("{\"name\": \"finish_task\", \"parameters\": {\"summary\": \"wrote hello.txt\"}}")
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_12_tool_calls_a_server_returned_as_text_are_repaired_on_ollama() {
    let fx =
        Fixture::with_backend(Scenario::new(vec![hermes_write(), bare_finish()]), "ollama").await;
    let result = fx.run_json("write hello.txt", &[], 0).await;
    assert_eq!(result["summary"], "wrote hello.txt");
    let workspace = std::path::PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(workspace.join("hello.txt")).unwrap(),
        "Hello"
    );
    let events = fx.runlog(&result);
    let repaired = of_kind(&events, "tool_call_repaired");
    assert_eq!(repaired.len(), 2);
    assert_eq!(repaired[0]["payload"]["format"], "hermes");
    assert_eq!(repaired[0]["payload"]["tools"], json!(["write_file"]));
    assert_eq!(repaired[0]["payload"]["call_ids"], json!(["repaired_0_0"]));
    assert_eq!(repaired[1]["payload"]["format"], "bare_json");
    let calls = of_kind(&events, "tool_call");
    assert_eq!(calls[0]["payload"]["call_id"], "repaired_0_0");
    assert!(of_kind(&events, "corrective_reprompt").is_empty());
    // The model is sent its call back as a proper call, with the text outside it.
    let second = &fx.requests()[1];
    let assistant = &second["messages"][2];
    assert_eq!(assistant["content"], "I'll create it.");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "write_file");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_12_repair_is_off_for_openai_compatible_servers_unless_configured() {
    // Off by default: the text is a text answer, and the model is asked to use its tools.
    let fx = Fixture::new(vec![hermes_write(), hermes_write()]).await;
    let result = fx.run_json("write hello.txt", &[], 0).await;
    assert_eq!(result["_meta"]["status"], "completed_without_finish");
    let events = fx.runlog(&result);
    assert!(of_kind(&events, "tool_call_repaired").is_empty());
    assert_eq!(of_kind(&events, "corrective_reprompt").len(), 1);

    // On when the model key says so.
    let fx = Fixture::new(vec![hermes_write(), bare_finish()]).await;
    let yaml = std::fs::read_to_string(&fx.config).unwrap().replace(
        "    max_retries: 2\n",
        "    max_retries: 2\n    tool_call_repair: true\n",
    );
    std::fs::write(&fx.config, yaml).unwrap();
    let result = fx.run_json("write hello.txt", &[], 0).await;
    assert_eq!(result["summary"], "wrote hello.txt");
    assert_eq!(of_kind(&fx.runlog(&result), "tool_call_repaired").len(), 2);
}
