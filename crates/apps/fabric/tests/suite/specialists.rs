//! Specialists as data, end to end: a markdown specialist under `<workspace>/specialists`,
//! the research specialist with and without the network, read-only specialists.

use axum::Router;
use axum::http::header;
use axum::routing::get;
use fabric_test_support::Turn;
use serde_json::{Value, json};

use super::fixture::{Fixture, of_kind};

const AUDITOR: &str = "---
name: auditor
description: Reads files and reports problems without changing anything.
tools: Read, Glob, Write, Grep
may_write: false
model: sonnet
color: green
---
You review files. Read them, then report what is wrong.
";

fn tool_names(request: &Value) -> Vec<String> {
    let mut names: Vec<String> = request["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| {
            t["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    names.sort_unstable();
    names
}

fn write_auditor(fx: &Fixture) {
    let dir = fx.workspace_root().join("specialists");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("auditor.md"), AUDITOR).expect("write auditor.md");
}

#[tokio::test]
async fn a_markdown_specialist_is_listed_shown_and_runs_read_only() {
    let fx = Fixture::new(vec![
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call("finish_task", json!({"summary": "nothing to report"})),
    ])
    .await;
    write_auditor(&fx);

    let list = fx.fabric(&["specialists", "list"]).await;
    assert_eq!(list.code(), 0, "{}", list.stderr);
    for id in ["engineering", "research", "enterprise_research", "auditor"] {
        assert!(list.stdout.contains(id), "{id} in:\n{}", list.stdout);
    }
    assert!(
        list.stdout.contains("specialists/auditor.md"),
        "{}",
        list.stdout
    );

    let show = fx
        .fabric(&["specialists", "show", "auditor", "--json"])
        .await;
    assert_eq!(show.code(), 0, "{}", show.stderr);
    let spec = show.json();
    assert_eq!(
        spec["system_prompt"],
        "You review files. Read them, then report what is wrong."
    );
    assert_eq!(
        spec["tools"],
        json!(["read_file", "list_files", "write_file"])
    );
    assert_eq!(spec["may_write"], false);
    assert_eq!(spec["sources"][0]["kind"], "file");
    let warnings = spec["warnings"].to_string();
    assert!(warnings.contains("`Grep` has no equivalent"), "{warnings}");

    let run = fx
        .fabric(&["run", "review the files", "--pack", "auditor", "--json"])
        .await;
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let result = run.json();
    assert_eq!(result["summary"], "nothing to report");
    assert_eq!(result["_meta"]["specialist_ids"], json!(["auditor"]));
    // may_write: false: the write tool it names is not offered at all.
    let requests = fx.requests();
    assert_eq!(
        tool_names(&requests[0]),
        ["finish_task", "list_files", "read_file"]
    );
    let system = requests[0]["messages"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(system.starts_with("You review files."), "{system}");
}

#[tokio::test]
async fn unknown_specialists_and_broken_files_are_usage_errors() {
    let fx = Fixture::new(vec![]).await;
    let show = fx.fabric(&["specialists", "show", "nobody"]).await;
    assert_eq!(show.code(), 2);
    assert!(
        show.stderr.contains("no specialist `nobody`"),
        "{}",
        show.stderr
    );

    let dir = fx.workspace_root().join("specialists");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("bad.md"),
        "---\ndescription: d\ntoolz: Read\n---\np\n",
    )
    .expect("write");
    let validate = fx.fabric(&["config", "validate"]).await;
    assert_eq!(validate.code(), 2);
    assert!(
        validate.stderr.contains("bad.md:3:") && validate.stderr.contains("`toolz`"),
        "{}",
        validate.stderr
    );
    std::fs::write(
        dir.join("bad.md"),
        "---\ndescription: d\ntools: [read_file, sing]\n---\np\n",
    )
    .expect("write");
    let validate = fx.fabric(&["config", "validate"]).await;
    assert_eq!(validate.code(), 2);
    assert!(
        validate.stderr.contains("unknown tool `sing`"),
        "{}",
        validate.stderr
    );
}

#[tokio::test]
async fn research_fetches_a_page_and_finishes_with_citations() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let page_url = format!("http://{}/paper", listener.local_addr().expect("addr"));
    let router = Router::new().route(
        "/paper",
        get(|| async {
            (
                [(header::CONTENT_TYPE, "text/html")],
                "<html><head><title>Paper</title></head><body><p>Ferris is a crab.</p></body></html>",
            )
        }),
    );
    tokio::spawn(async move { axum::serve(listener, router).await });

    let fx = Fixture::new(vec![
        Turn::tool_call("fetch_url", json!({"url": page_url})),
        Turn::tool_call(
            "finish_task",
            json!({
                "executive_summary": "Ferris is a crab.",
                "key_findings": ["Ferris is a crab"],
                "citations": [{"url": page_url, "claim": "Ferris is a crab"}]
            }),
        ),
    ])
    .await;
    // The page is on loopback, which fetch_url refuses unless the config allows it.
    fx.append_config("network:\n  allow_hosts: [\"127.0.0.1\"]\n");
    let run = fx
        .fabric(&[
            "run",
            "what is Ferris?",
            "--pack",
            "research",
            "--network-allowed",
            "--json",
        ])
        .await;
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["citations"][0]["url"], page_url);

    let requests = fx.requests();
    let names = tool_names(&requests[0]);
    assert!(
        names.contains(&"web_search".to_owned()) && names.contains(&"fetch_url".to_owned()),
        "{names:?}"
    );
    let events = fx.runlog(&result);
    let fetched = of_kind(&events, "tool_result");
    let text = fetched[0]["payload"].to_string();
    assert!(
        text.contains("Ferris is a crab.") && text.contains("fetched_at"),
        "{text}"
    );
}

#[tokio::test]
async fn without_the_network_research_gets_no_web_tools() {
    let fx = Fixture::new(vec![
        Turn::tool_call("list_files", json!({})),
        Turn::tool_call("finish_task", json!({"executive_summary": "no network"})),
    ])
    .await;
    let run = fx
        .fabric(&["run", "what is Ferris?", "--pack", "research", "--json"])
        .await;
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert_eq!(
        tool_names(&fx.requests()[0]),
        ["finish_task", "list_files", "read_file", "write_file"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn show_prints_every_layer() {
    let fx = Fixture::new(vec![]).await;
    let mut text = std::fs::read_to_string(&fx.config).unwrap();
    text.push_str("specialists:\n  engineering:\n    model_key: test\n");
    std::fs::write(&fx.config, text).unwrap();
    let show = fx.fabric(&["specialists", "show", "engineering"]).await;
    assert_eq!(show.code(), 0, "{}", show.stderr);
    let sources: Vec<&str> = show
        .stdout
        .lines()
        .filter(|l| l.starts_with("source:"))
        .collect();
    assert_eq!(sources.len(), 2, "{}", show.stdout);
    assert_eq!(sources[0], "source:        built-in");
    assert!(
        sources[1].starts_with("source:        config "),
        "{sources:?}"
    );
}
