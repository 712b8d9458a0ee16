//! Issue #9 end to end: runs go to the store (SQLite by default, no set-up), and are listed,
//! searched (text, hybrid, semantic with the scripted server's embeddings), counted and
//! pruned through the real binary; an embedding server that is down never fails a run.

use fabric_test_support::Turn;
use serde_json::{Value, json};

use super::fixture::Fixture;

/// One run's turns: write `file` with `content`, then finish with `summary`.
fn run_turns(file: &str, content: &str, summary: &str) -> Vec<Turn> {
    vec![
        Turn::tool_call("write_file", json!({"path": file, "content": content})),
        Turn::tool_call(
            "finish_task",
            json!({"summary": summary, "artifacts": [file], "next_steps": [], "notes": ""}),
        ),
    ]
}

/// Three runs in a row, each with its own prompt and result.
fn three_runs() -> Vec<Turn> {
    let mut turns = run_turns(
        "invoices.py",
        "import csv  # parse the invoice export",
        "Parsed the CSV invoice export into totals",
    );
    turns.extend(run_turns(
        "poem.txt",
        "The sea is wide",
        "Wrote a short poem about the sea",
    ));
    turns.extend(run_turns(
        "notes.md",
        "meeting notes",
        "Summarised the meeting notes",
    ));
    turns
}

const PROMPTS: [&str; 3] = [
    "Parse the CSV invoice export and total it",
    "Write a short poem about the sea",
    "Summarise the meeting notes",
];

async fn run_all(fx: &Fixture) -> Vec<String> {
    let mut ids = Vec::new();
    for prompt in PROMPTS {
        let result = fx.run_json(prompt, &[], 0).await;
        ids.push(result["_meta"]["run_id"].as_str().unwrap().to_owned());
    }
    ids
}

async fn json_of(fx: &Fixture, args: &[&str]) -> Value {
    let run = fx.fabric(args).await;
    assert_eq!(
        run.code(),
        0,
        "{args:?}\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", run.stdout))
}

#[tokio::test(flavor = "multi_thread")]
async fn issue9_runs_are_listed_searched_counted_and_pruned_from_the_store() {
    let fx = Fixture::new(three_runs()).await;
    let ids = run_all(&fx).await;
    // SQLite under the workspace root, created on first use with no set-up.
    assert!(fx.workspace_root().join("fabric.db").is_file());

    let listed = json_of(&fx, &["logs", "list", "--json"]).await;
    let listed_ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    let newest_first: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    assert_eq!(listed_ids, newest_first);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "completed")
    );

    // Full text over prompts, results and tool calls: "invoice" is in the first run only.
    let found = json_of(&fx, &["logs", "search", "invoice", "--json"]).await;
    assert_eq!(found["mode"], "text");
    let hits = found["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{found}");
    assert_eq!(hits[0]["run_id"], ids[0].as_str());
    // A word only in a tool call's arguments.
    let found = json_of(&fx, &["logs", "search", "wide", "--json"]).await;
    assert_eq!(found["hits"][0]["run_id"], ids[1].as_str(), "{found}");
    // Query syntax is taken as plain words, never as SQL or FTS operators.
    for hostile in ["\"unbalanced", "x' OR 1=1 --", "NEAR(a b)", "a:b -c"] {
        let run = fx.fabric(&["logs", "search", hostile, "--json"]).await;
        assert_eq!(run.code(), 0, "{hostile}: {}", run.stderr);
    }
    // Nothing but punctuation has no words to look for: the user is told so.
    let run = fx.fabric(&["logs", "search", "*"]).await;
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert!(run.stderr.contains("words"), "{}", run.stderr);
    // Filters.
    let none = json_of(
        &fx,
        &["logs", "search", "poem", "--status", "failed", "--json"],
    )
    .await;
    assert!(none["hits"].as_array().unwrap().is_empty(), "{none}");
    let bad = fx
        .fabric(&["logs", "search", "poem", "--status", "nope"])
        .await;
    assert_eq!(bad.code(), 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("--status"), "{}", bad.stderr);
    let semantic = fx.fabric(&["logs", "search", "poem", "--semantic"]).await;
    assert_eq!(semantic.code(), 2, "{}", semantic.stderr);
    assert!(
        semantic.stderr.contains("run_index.embedding_model_key"),
        "{}",
        semantic.stderr
    );

    let stats = json_of(&fx, &["stats", "--json"]).await;
    let row = &stats["rows"][0];
    assert_eq!(row["key"], "engineering", "{stats}");
    assert_eq!(row["runs"], 3);
    assert_eq!(row["success_rate"], 1.0);
    assert_eq!(row["steps"], 6);
    let by_tool = json_of(&fx, &["stats", "--by", "tool", "--json"]).await;
    let write = by_tool["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "write_file")
        .unwrap_or_else(|| panic!("no write_file row: {by_tool}"));
    assert_eq!(write["tool_calls"], 3);
    assert_eq!(write["tool_errors"], 0);
    let table = fx.fabric(&["stats"]).await;
    assert!(table.stdout.contains("engineering"), "{}", table.stdout);

    // Nothing is old enough to prune at first; then everything is.
    let kept = json_of(&fx, &["logs", "prune", "--older-than", "1d", "--json"]).await;
    assert_eq!(kept["deleted"], 0);
    // Issue #26: `--dry-run` lists, and on a terminal prune asks; either deletes nothing.
    let dry = json_of(
        &fx,
        &["logs", "prune", "--older-than", "0s", "--dry-run", "--json"],
    )
    .await;
    assert_eq!(dry["would_delete"], 3, "{dry}");
    let dry = fx
        .fabric(&["logs", "prune", "--older-than", "0s", "--dry-run"])
        .await;
    assert_eq!(dry.stdout.lines().count(), 3, "{}", dry.stdout);
    assert!(dry.stderr.contains("would delete 3 runs"), "{}", dry.stderr);
    let (code, shown) = fx
        .on_terminal(&["logs", "prune", "--older-than", "0s"], "n\n")
        .await;
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains(
            "delete 3 runs started more than 0s ago, with their runlogs and workspaces? [y/N]"
        ) && shown.contains("nothing deleted"),
        "{shown}"
    );
    for id in &ids {
        assert!(
            fx.workspace_root().join("runs").join(id).exists(),
            "{id} deleted"
        );
    }
    let pruned = json_of(&fx, &["logs", "prune", "--older-than", "0s", "--json"]).await;
    assert_eq!(pruned["deleted"], 3, "{pruned}");
    for id in &ids {
        assert!(
            !fx.workspace_root().join("runs").join(id).exists(),
            "{id} left on disk"
        );
    }
    let listed = json_of(&fx, &["logs", "list", "--json"]).await;
    assert!(listed.as_array().unwrap().is_empty(), "{listed}");
    let bad = fx.fabric(&["logs", "prune", "--older-than", "soon"]).await;
    assert_eq!(bad.code(), 2, "{}", bad.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue9_semantic_and_hybrid_search_with_embeddings_made_when_runs_end() {
    let fx = Fixture::new(three_runs()).await;
    fx.append_config("run_index:\n  embedding_model_key: test\n  embedding_model: embed-test\n");
    let ids = run_all(&fx).await;
    // Each run was embedded when it ended.
    assert_eq!(fx.server.embedding_request_count(), 3);

    let semantic = json_of(&fx, &["logs", "search", "sea poem", "--semantic", "--json"]).await;
    assert_eq!(semantic["mode"], "semantic");
    assert_eq!(semantic["hits"][0]["run_id"], ids[1].as_str(), "{semantic}");
    // Issue #26: every run has some similarity to any query; those under the floor
    // (`run_index.min_similarity`) are no match by meaning.
    for hit in semantic["hits"].as_array().unwrap() {
        // In semantic mode the score is the similarity.
        assert!(hit["score"].as_f64() >= Some(0.3), "{semantic}");
    }
    assert!(semantic["hits"].as_array().unwrap().len() < 3, "{semantic}");

    let hybrid = json_of(&fx, &["logs", "search", "invoice totals", "--json"]).await;
    assert_eq!(hybrid["mode"], "hybrid");
    assert_eq!(hybrid["hits"][0]["run_id"], ids[0].as_str(), "{hybrid}");

    // Nonsense matches nothing, and says so.
    for args in [
        vec!["logs", "search", "zzzqqq"],
        vec!["logs", "search", "zzzqqq", "--semantic"],
    ] {
        let none = fx.fabric(&args).await;
        assert_eq!(none.code(), 0, "{}", none.stderr);
        assert!(none.stdout.trim().is_empty(), "{args:?}: {}", none.stdout);
        assert!(
            none.stderr.contains("no run matches `zzzqqq`"),
            "{}",
            none.stderr
        );
    }
    // The floor is the config's: at -1 every run is a match by meaning again.
    fx.append_config("  min_similarity: -1\n");
    let all = json_of(&fx, &["logs", "search", "zzzqqq", "--semantic", "--json"]).await;
    assert_eq!(all["hits"].as_array().unwrap().len(), 3, "{all}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue9_an_embedding_server_that_is_down_never_fails_a_run() {
    let fx = Fixture::new(run_turns("a.txt", "alpha", "Wrote alpha")).await;
    fx.append_config("run_index:\n  embedding_model_key: test\n  embedding_model: embed-test\n");
    fx.server.set_embeddings_down(true);
    let result = fx
        .run_json("Write alpha into a.txt", &["--max-steps", "5"], 0)
        .await;
    let id = result["_meta"]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(result["_meta"]["status"], "completed");

    // Still found, by text, and the search says why.
    let found = json_of(&fx, &["logs", "search", "alpha", "--json"]).await;
    assert_eq!(found["mode"], "text");
    assert!(
        found["note"].as_str().unwrap().contains("embed-test"),
        "{found}"
    );
    assert_eq!(found["hits"][0]["run_id"], id.as_str());
    let semantic = fx.fabric(&["logs", "search", "alpha", "--semantic"]).await;
    assert_eq!(semantic.code(), 1, "{}", semantic.stderr);
    assert!(
        semantic.stderr.contains("embed-test"),
        "{}",
        semantic.stderr
    );

    // Embedded later, once the server answers.
    let rebuild = fx.fabric(&["index", "rebuild", "--json"]).await;
    assert_eq!(
        rebuild.code(),
        1,
        "the server is still down: {}",
        rebuild.stdout
    );
    fx.server.set_embeddings_down(false);
    let rebuilt = json_of(&fx, &["index", "rebuild", "--json"]).await;
    assert_eq!(rebuilt["embedded"], 1, "{rebuilt}");
    let semantic = json_of(&fx, &["logs", "search", "alpha", "--semantic", "--json"]).await;
    assert_eq!(semantic["hits"][0]["run_id"], id.as_str());
}

#[tokio::test(flavor = "multi_thread")]
async fn issue9_runs_from_before_the_store_are_indexed_on_first_use() {
    let fx = Fixture::new(Vec::new()).await;
    let id = "20250101-120000-000-0ld0run0";
    let dir = fx.workspace_root().join("runs").join(id);
    std::fs::create_dir_all(dir.join("workspace")).unwrap();
    let lines = [
        json!({"seq": 0, "ts": 1735732800.0, "kind": "run_start", "step": null, "payload": {"run_id": id, "prompt": "An old legacy task about zebras", "model_key": "test", "model": "m"}}),
        json!({"seq": 1, "ts": 1735732801.0, "kind": "recruitment", "step": null, "payload": {"specialist_ids": ["engineering"]}}),
        json!({"seq": 2, "ts": 1735732802.0, "kind": "run_complete", "step": null, "payload": {"run_id": id, "status": "completed", "steps": 1, "result": {"summary": "zebras counted"}}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("runlog.jsonl"), text).unwrap();

    let listed = json_of(&fx, &["logs", "list", "--json"]).await;
    assert_eq!(listed[0]["run_id"], id, "{listed}");
    assert_eq!(listed[0]["status"], "completed");
    let found = json_of(&fx, &["logs", "search", "zebras", "--json"]).await;
    assert_eq!(found["hits"][0]["run_id"], id, "{found}");
    let shown = fx.fabric(&["logs", "show", id, "--json"]).await;
    assert_eq!(shown.stdout.lines().count(), 3, "{}", shown.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue9_store_migrate_and_a_corrupt_store_say_what_to_do() {
    let fx = Fixture::new(Vec::new()).await;
    let migrated = fx.fabric(&["store", "migrate"]).await;
    assert_eq!(migrated.code(), 0, "{}", migrated.stderr);
    assert!(
        migrated.stdout.contains("schema at version"),
        "{}",
        migrated.stdout
    );
    // A file damaged for good: no write-ahead log left to recover pages from.
    for side in ["fabric.db-wal", "fabric.db-shm"] {
        let _ = std::fs::remove_file(fx.workspace_root().join(side));
    }
    std::fs::write(
        fx.workspace_root().join("fabric.db"),
        b"this is not a database",
    )
    .unwrap();
    for args in [
        &["logs", "list"][..],
        &["run", "x", "--pack", "engineering"][..],
    ] {
        let run = fx.fabric(args).await;
        assert_ne!(run.code(), 0, "{args:?}");
        assert!(run.stderr.contains("fabric.db"), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("fabric index rebuild"),
            "{args:?}: {}",
            run.stderr
        );
    }
}

/// A specialist that looks up what was done before.
const RECALLER: &str = "\
---
name: recaller
description: Answers from what earlier runs did.
tools: [search_runs]
---
Search earlier runs, then answer.
";

#[tokio::test(flavor = "multi_thread")]
async fn issue9_a_specialist_finds_an_earlier_run_with_the_search_runs_tool() {
    let mut turns = run_turns(
        "invoices.py",
        "import csv",
        "Parsed the CSV invoice export into totals",
    );
    turns.push(Turn::tool_call(
        "search_runs",
        json!({"query": "invoice export", "limit": 3}),
    ));
    // A wrong argument gets an exact message the model can act on.
    turns.push(Turn::tool_call(
        "search_runs",
        json!({"query": "invoice", "status": "great"}),
    ));
    turns.push(Turn::tool_call(
        "finish_task",
        json!({"summary": "It was done before", "artifacts": [], "next_steps": [], "notes": ""}),
    ));
    let fx = Fixture::new(turns).await;
    let dir = fx.workspace_root().join("specialists");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("recaller.md"), RECALLER).unwrap();
    let first = fx.run_json(PROMPTS[0], &[], 0).await;
    let first_id = first["_meta"]["run_id"].as_str().unwrap();

    let run = fx
        .fabric(&[
            "run",
            "Did we parse invoices before?",
            "--pack",
            "recaller",
            "--json",
        ])
        .await;
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let events = fx.runlog(&run.json());
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool_result" && e["payload"]["tool"] == "search_runs")
        .collect();
    let text = results[0]["payload"]["result"].to_string();
    assert!(text.contains(first_id), "{text}");
    let error = events
        .iter()
        .find(|e| e["kind"] == "tool_error" && e["payload"]["tool"] == "search_runs")
        .unwrap_or_else(|| panic!("no tool_error for the bad status"));
    let message = error["payload"]["error_message"].as_str().unwrap();
    assert!(
        message.contains("`status`") && message.contains("great"),
        "{message}"
    );
}

/// The same commands against a real PostgreSQL, chosen by `FABRIC_STORE_URL`: runs made by
/// two machines (two workspace roots) sharing one database are listed, searched and shown
/// from either.
#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue9_the_binary_runs_on_postgresql_chosen_by_fabric_store_url() {
    let url = match fabric_test_support::shared_cluster() {
        Ok(cluster) => cluster.create_database().unwrap(),
        Err(e) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!(
                    "SKIPPED: PostgreSQL end-to-end test: {e}; run scripts/install-test-deps.sh (FABRIC_REQUIRE_TEST_DEPS=1 makes this a failure)"
                );
            }
            return;
        }
    };
    let env = [("FABRIC_STORE_URL", url.as_str())];
    let here = Fixture::new(run_turns("a.txt", "alpha", "Wrote the alpha file")).await;
    let there = Fixture::new(run_turns("b.txt", "beta", "Wrote the beta file")).await;
    let migrated = here.fabric_with(&["store", "migrate"], &env).await;
    assert_eq!(migrated.code(), 0, "{}", migrated.stderr);
    assert!(
        migrated.stdout.starts_with("postgres://"),
        "{}",
        migrated.stdout
    );
    assert!(!here.workspace_root().join("fabric.db").exists());

    let mut ids = Vec::new();
    for (fx, prompt) in [(&here, "Write alpha"), (&there, "Write beta")] {
        let run = fx
            .fabric_with(&["run", prompt, "--pack", "engineering", "--json"], &env)
            .await;
        assert_eq!(run.code(), 0, "{}", run.stderr);
        ids.push(run.json()["_meta"]["run_id"].as_str().unwrap().to_owned());
    }
    // Both runs, from the first machine, and the other machine's events from the database.
    let listed = here.fabric_with(&["logs", "list", "--json"], &env).await;
    let listed: Value = serde_json::from_str(listed.stdout.trim()).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    let found = here
        .fabric_with(&["logs", "search", "beta", "--json"], &env)
        .await;
    let found: Value = serde_json::from_str(found.stdout.trim()).unwrap();
    assert_eq!(found["hits"][0]["run_id"], ids[1].as_str(), "{found}");
    // The table's relevance (issue #40): ts_rank's score relative to the best hit's.
    let table = here.fabric_with(&["logs", "search", "beta"], &env).await;
    table.assert_code(0);
    let row = table.stdout.lines().nth(1).unwrap_or_default();
    assert_eq!(
        row.split_whitespace().nth(4),
        Some("1.00"),
        "{}",
        table.stdout
    );
    let shown = here
        .fabric_with(&["logs", "show", &ids[1], "--json"], &env)
        .await;
    assert_eq!(shown.code(), 0, "{}", shown.stderr);
    let lines: Vec<Value> = shown
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.first().unwrap()["kind"], "run_start");
    assert_eq!(lines.last().unwrap()["kind"], "run_complete");
    let stats = here.fabric_with(&["stats", "--json"], &env).await;
    let stats: Value = serde_json::from_str(stats.stdout.trim()).unwrap();
    assert_eq!(stats["rows"][0]["runs"], 2, "{stats}");

    // A PostgreSQL that is not there: the message names it (never a password) and the fix.
    let down = "postgres://fabric:secret@127.0.0.1:9/nowhere";
    let run = here
        .fabric_with(&["logs", "list"], &[("FABRIC_STORE_URL", down)])
        .await;
    assert_ne!(run.code(), 0);
    assert!(run.stderr.contains("127.0.0.1:9"), "{}", run.stderr);
    assert!(!run.stderr.contains("secret"), "{}", run.stderr);
}

/// A tmpfs of `size` mounted on `dir` for the test's life, or `None` (after a loud SKIP)
/// where this host does not let the test mount one.
struct TinyDisk(std::path::PathBuf);

impl TinyDisk {
    fn mount(dir: &std::path::Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status();
        if status.is_ok_and(|s| s.success()) {
            return Some(Self(dir.to_path_buf()));
        }
        // CI runs as root and must not pass this test by skipping it.
        assert!(
            std::env::var("FABRIC_REQUIRE_TEST_DEPS").as_deref() != Ok("1"),
            "the full-disk test could not mount a tmpfs; it needs root with CAP_SYS_ADMIN"
        );
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "SKIPPED: the full-disk test needs to mount a tmpfs (root with CAP_SYS_ADMIN); this host refused"
            );
        }
        None
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// Fills the disk holding `dir` until it refuses another byte.
fn fill(dir: &std::path::Path) {
    use std::io::Write;
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    let block = vec![0u8; 4096];
    while filler.write_all(&block).is_ok() {}
    let _ = filler.flush();
}

#[tokio::test(flavor = "multi_thread")]
async fn issue9_a_full_disk_is_named_with_the_fix_and_loses_no_run() {
    let fx = Fixture::new(run_turns("a.txt", "alpha", "Wrote alpha")).await;
    let Some(_disk) = TinyDisk::mount(&fx.workspace_root(), "2m") else {
        return;
    };
    let migrated = fx.fabric(&["store", "migrate"]).await;
    assert_eq!(migrated.code(), 0, "{}", migrated.stderr);
    fill(&fx.workspace_root());

    let run = fx
        .fabric(&["run", "Write alpha", "--pack", "engineering"])
        .await;
    assert_ne!(run.code(), 0, "a run on a full disk cannot succeed");
    assert!(
        run.stderr.contains("free space"),
        "the message says what to do: {}",
        run.stderr
    );

    // Space again: nothing half-written is listed as a finished run, and runs work.
    std::fs::remove_file(fx.workspace_root().join("filler")).unwrap();
    let listed = json_of(&fx, &["logs", "list", "--json"]).await;
    for run in listed.as_array().unwrap() {
        assert_ne!(run["status"], "completed", "{listed}");
    }
    let result = fx.run_json("Write alpha", &[], 0).await;
    assert_eq!(result["_meta"]["status"], "completed");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_26_replays_are_not_listed_or_counted_as_peoples_runs() {
    // A replay that called no model added a run and its tokens to `logs list` and
    // `fabric stats`, and its model reason said `--model` was given.
    let fx = Fixture::new(run_turns("a.txt", "alpha", "Wrote alpha")).await;
    let result = fx
        .run_json("Write alpha into a.txt", &["--max-steps", "5"], 0)
        .await;
    let id = result["_meta"]["run_id"].as_str().unwrap().to_owned();
    let replay = fx.fabric(&["replay", &id, "--json"]).await;
    assert_eq!(replay.code(), 0, "{}\n{}", replay.stdout, replay.stderr);

    let listed = json_of(&fx, &["logs", "list", "--json"]).await;
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["run_id"], id.as_str());
    assert_eq!(listed[0]["origin"], "user");
    let all = json_of(&fx, &["logs", "list", "--all", "--json"]).await;
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 2, "{all:?}");
    let replayed = all.iter().find(|r| r["run_id"] != id.as_str()).unwrap();
    assert_eq!(replayed["origin"], "replay");
    let table = fx.fabric(&["logs", "list", "--all"]).await;
    assert!(
        table.stdout.contains("ORIGIN") && table.stdout.contains("replay"),
        "{}",
        table.stdout
    );

    // The replay's runlog says what it is, and why its model.
    let replay_log = super::fixture::read_runlog(
        &fx.workspace_root()
            .join("runs")
            .join(replayed["run_id"].as_str().unwrap())
            .join("runlog.jsonl"),
    );
    let start = &replay_log[0]["payload"];
    assert_eq!(start["origin"], "replay");
    assert!(
        start["model_reason"]
            .as_str()
            .unwrap()
            .contains("as recorded"),
        "{start}"
    );

    // Stats count the person's run only, unless asked.
    let stats = json_of(&fx, &["stats", "--json"]).await;
    assert_eq!(stats["rows"][0]["runs"], 1, "{stats}");
    let stats = json_of(&fx, &["stats", "--all", "--json"]).await;
    assert_eq!(stats["rows"][0]["runs"], 2, "{stats}");
}

/// Issue #40: the table of `fabric logs search` showed `SCORE 0.000` on every hit: SQLite's
/// bm25 scores a word found in half the runs or more about 0.000001. It shows each hit's
/// relevance relative to the best hit's; `--json` keeps the scores themselves.
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_logs_search_shows_each_hits_relevance() {
    let fx = Fixture::new(three_runs()).await;
    run_all(&fx).await;
    // `file` is in every run (each called write_file).
    let found = json_of(&fx, &["logs", "search", "file", "--json"]).await;
    let scores: Vec<f64> = found["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["score"].as_f64().unwrap())
        .collect();
    assert_eq!(scores.len(), 3, "{found}");
    assert!(scores.iter().all(|&s| s > 0.0 && s < 0.001), "{scores:?}");
    let table = fx.fabric(&["logs", "search", "file"]).await;
    table.assert_code(0);
    let mut lines = table.stdout.lines();
    let header = lines.next().unwrap();
    assert!(header.contains("RELEVANCE"), "{header}");
    let shown: Vec<f64> = lines
        .map(|l| l.split_whitespace().nth(4).unwrap().parse().unwrap())
        .collect();
    assert_eq!(shown.len(), 3, "{}", table.stdout);
    assert_eq!(shown[0], 1.0, "{}", table.stdout);
    for (s, raw) in shown.iter().zip(&scores) {
        assert!(*s > 0.0, "{}", table.stdout);
        assert!((s - raw / scores[0]).abs() < 0.006, "{}", table.stdout);
    }
}
