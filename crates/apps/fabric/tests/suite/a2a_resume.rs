//! An A2A task survives what its run survives (issue #30): `fabric serve` stopped mid-task
//! (SIGTERM, `server.on_shutdown: suspend`) and started again continues the run under the
//! same task id; a client that re-subscribes sees the continued run to its end, and GetTask
//! answers for it throughout.

use std::time::Duration;

use serde_json::{Value, json};

use super::a2a_server::{call, message, rpc, scenario};
use super::serve_fixture::{Options, Served};

/// `SubscribeToTask` on `id`: once the server answered with a stream, a task collecting
/// every `data:` frame until it ends; else the JSON-RPC answer (an error).
async fn subscribe(
    served: &Served,
    id: &str,
) -> Result<tokio::task::JoinHandle<Vec<Value>>, Value> {
    let mut response = call(served, "SubscribeToTask", json!({"id": id})).await;
    let streamed = response.headers()["content-type"]
        .to_str()
        .is_ok_and(|k| k.starts_with("text/event-stream"));
    if !streamed {
        return Err(response.json().await.unwrap_or(Value::Null));
    }
    Ok(tokio::spawn(async move {
        let mut text = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            text.extend_from_slice(&chunk);
        }
        String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| serde_json::from_str(d.trim()).unwrap_or_else(|e| panic!("{e}: {d}")))
            .collect()
    }))
}

/// The task state of each frame (the task, or a status update).
fn states(frames: &[Value]) -> Vec<&str> {
    frames
        .iter()
        .filter_map(|f| {
            f.pointer("/result/task/status/state")
                .or(f.pointer("/result/statusUpdate/status/state"))
                .and_then(Value::as_str)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_30_a_task_resumed_after_a_restart_keeps_its_id_and_is_followed_to_its_end() {
    let mut first = Served::with(
        scenario(),
        Options {
            auth: true,
            config: "server:\n  on_shutdown: suspend\n",
            ..Options::default()
        },
    )
    .await;
    let sent = rpc(
        &first,
        "SendMessage",
        message("Create hello.txt", Some("conv-r")),
    )
    .await;
    let id = sent["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{sent}"))
        .to_owned();
    // Stopped while the model takes its time over the second step (2.5 s, by script).
    let runlog = first
        .fx
        .workspace_root()
        .join("runs")
        .join(&id)
        .join("runlog.jsonl");
    for _ in 0..500 {
        let text = std::fs::read_to_string(&runlog).unwrap_or_default();
        if text.matches("\"kind\":\"llm_request\"").count() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = subscribe(&first, &id)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pid = first.child.id().expect("pid").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(killed.is_ok_and(|s| s.success()));
    tokio::time::timeout(Duration::from_secs(30), first.child.wait())
        .await
        .expect("serve exits")
        .expect("wait");
    // The stream of the suspended task ends without a final state: the task is not over.
    let before = before.await.expect("the first stream");
    let seen = states(&before);
    assert_eq!(seen.first(), Some(&"TASK_STATE_WORKING"), "{before:?}");
    assert!(
        seen.iter().all(|s| *s == "TASK_STATE_WORKING"),
        "a suspended task is still working: {before:?}"
    );

    // Started again, the server continues the run: the same task, followed to its end.
    let second = first
        .another_node_with(Options {
            auth: true,
            ..Options::default()
        })
        .await;
    let after = resubscribe(&second, &id)
        .await
        .await
        .expect("the second stream");
    assert_eq!(after[0]["result"]["task"]["id"], id.as_str(), "{after:?}");
    assert_eq!(
        after[0]["result"]["task"]["contextId"], "conv-r",
        "{after:?}"
    );
    let seen = states(&after);
    assert_eq!(seen.last(), Some(&"TASK_STATE_COMPLETED"), "{after:?}");
    let artifact = after
        .iter()
        .find_map(|f| f.pointer("/result/artifactUpdate/artifact"))
        .unwrap_or_else(|| panic!("no artifact: {after:?}"));
    assert_eq!(artifact["parts"][0]["text"], "wrote the file");
    let task = rpc(&second, "GetTask", json!({"id": id})).await;
    assert_eq!(
        task["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{task}"
    );
    assert_eq!(task["result"]["contextId"], "conv-r", "{task}");
    let events = second.runlog(&id);
    assert_eq!(
        events.iter().filter(|e| e["kind"] == "run_resumed").count(),
        1,
        "one run, continued once"
    );
}

/// SubscribeToTask on `id` until the server has taken the run up again (it continues the
/// runs left at its start, in the background); GetTask says working meanwhile.
async fn resubscribe(served: &Served, id: &str) -> tokio::task::JoinHandle<Vec<Value>> {
    let mut refused = Value::Null;
    for _ in 0..100 {
        let task = rpc(served, "GetTask", json!({"id": id})).await;
        assert_eq!(
            task["result"]["status"]["state"], "TASK_STATE_WORKING",
            "{task}"
        );
        match subscribe(served, id).await {
            Ok(frames) => return frames,
            Err(answer) => refused = answer,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} was not taken up again within 5 s: {refused}");
}
