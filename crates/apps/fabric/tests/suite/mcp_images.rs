//! Issue #29: an MCP tool's image reaches a model whose key says `vision: true`, in its
//! backend's shape, and only the placeholder text otherwise; the runlog never holds the
//! image. The real `server-everything` (`get-tiny-image`, `get-resource-links`) against the
//! scripted model server. Needs scripts/install-test-deps.sh.

use fabric_test_support::{Scenario, Turn};
use serde_json::{Value, json};

use super::fixture::{Fixture, of_kind};

/// The start of server-everything's tiny PNG, base64.
const PNG: &str = "iVBORw0KGgo";

/// A fixture on `backend` whose specialist `looker` has server-everything, its model key
/// reading images when `vision`; the model calls `tool` with `args`, then finishes.
async fn looking(backend: &str, vision: bool, tool: &str, args: Value) -> Option<Fixture> {
    let dir = fabric_test_support::test_deps()?;
    let script =
        dir.join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let turns = vec![
        Turn::tool_call(format!("mcp__everything__{tool}"), args),
        Turn::tool_call("finish_task", json!({"summary": "looked"})),
    ];
    let fx = Fixture::with_backend(Scenario::new(turns), backend).await;
    let yaml = std::fs::read_to_string(&fx.config).expect("read config");
    let yaml = yaml.replace(
        "    max_retries: 2\n",
        &format!("    max_retries: 2\n    vision: {vision}\n"),
    );
    std::fs::write(&fx.config, yaml).expect("write config");
    fx.trust_own_files();
    let specialists = fx.workspace_root().join("specialists");
    std::fs::create_dir_all(&specialists).expect("mkdir");
    let body = format!(
        "---
name: looker
description: Looks at pictures.
tools: [mcp__everything__get-*]
mcp_servers:
  - name: everything
    command: node
    args: [{}, stdio]
    required: true
    startup_timeout_s: 60
---
Look.
",
        script.display()
    );
    std::fs::write(specialists.join("looker.md"), body).expect("write specialist");
    Some(fx)
}

/// Runs the task; the runlog's `tool_result` of the MCP call, and the request the model got
/// after it.
async fn run(fx: &Fixture) -> (Value, Value) {
    // Anthropic's key is asked for before the first call; the scripted server takes any.
    let run = fx
        .fabric_with(
            &["run", "look at the picture", "--pack", "looker", "--json"],
            &[("ANTHROPIC_API_KEY", "scripted")],
        )
        .await;
    run.assert_code(0);
    let result = run.json();
    assert_eq!(result["summary"], "looked", "{result}");
    let events = fx.runlog(&result);
    let text = serde_json::to_string(&events).expect("runlog as text");
    assert!(!text.contains(PNG), "the runlog holds no image bytes");
    let tool_result = of_kind(&events, "tool_result")[0]["payload"].clone();
    let requests = fx.requests();
    (tool_result, requests[1].clone())
}

/// Where each backend carries the image in the request after the call.
fn image_in(backend: &str, request: &Value) -> Option<String> {
    let s = |v: &Value| v.as_str().map(str::to_owned);
    match backend {
        "openai" => {
            let turn = request["messages"].as_array()?.last()?;
            (turn["role"] == "user").then(|| s(&turn["content"][1]["image_url"]["url"]))?
        }
        "ollama" => {
            let tool = request["messages"]
                .as_array()?
                .iter()
                .find(|m| m["role"] == "tool")?;
            s(&tool["images"][0])
        }
        "anthropic" => {
            let turn = request["messages"].as_array()?.last()?;
            let result = turn["content"]
                .as_array()?
                .iter()
                .find(|b| b["type"] == "tool_result")?;
            let image = result["content"]
                .as_array()?
                .iter()
                .find(|b| b["type"] == "image")?;
            s(&image["source"]["data"])
        }
        "openai-responses" => {
            let item = request["input"].as_array()?.last()?;
            (item["role"] == "user").then(|| s(&item["content"][1]["image_url"]))?
        }
        _ => None,
    }
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_29_an_mcp_tool_s_image_reaches_a_vision_model_in_each_backend_s_shape() {
    for backend in ["openai", "ollama", "anthropic", "openai-responses"] {
        let Some(fx) = looking(backend, true, "get-tiny-image", json!({})).await else {
            return;
        };
        let (tool_result, request) = run(&fx).await;
        assert_eq!(tool_result["images"], json!(["image/png"]), "{backend}");
        let placeholder = tool_result["result"].as_str().unwrap_or_default();
        assert!(
            placeholder.contains("[image content, image/png, "),
            "{backend}: {placeholder}"
        );
        let image = image_in(backend, &request).unwrap_or_default();
        let expected = match backend {
            "openai" | "openai-responses" => format!("data:image/png;base64,{PNG}"),
            _ => PNG.to_owned(),
        };
        assert!(image.starts_with(&expected), "{backend}: {request}");
    }
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_29_without_vision_the_model_gets_the_placeholder_only() {
    for backend in ["openai", "ollama"] {
        let Some(fx) = looking(backend, false, "get-tiny-image", json!({})).await else {
            return;
        };
        let (tool_result, request) = run(&fx).await;
        assert!(tool_result.get("images").is_none(), "{tool_result}");
        assert_eq!(image_in(backend, &request), None, "{backend}");
        assert!(!request.to_string().contains(PNG), "{backend}: {request}");
        let tool = request["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["role"] == "tool")
            .cloned()
            .unwrap_or_default();
        assert_eq!(tool["content"], tool_result["result"], "{backend}");
    }
}

#[cfg_attr(
    fabric_no_mcp_deps,
    ignore = "needs the MCP test servers and clients: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_29_a_resource_link_tells_the_model_what_it_points_at() {
    let Some(fx) = looking("openai", false, "get-resource-links", json!({"count": 2})).await else {
        return;
    };
    let (tool_result, _) = run(&fx).await;
    let text = tool_result["result"].as_str().unwrap_or_default();
    // As server-everything describes them (its blob link says `text/plain` too).
    assert!(
        text.contains("[resource link demo://resource/dynamic/blob/1 (Blob Resource 1, text/plain): Resource 1: plaintext resource]"),
        "{text}"
    );
    assert!(
        text.contains("[resource link demo://resource/dynamic/text/2 (Text Resource 2, text/plain): Resource 2: plaintext resource]"),
        "{text}"
    );
}
