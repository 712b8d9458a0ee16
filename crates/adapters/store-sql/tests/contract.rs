//! The store's contract, the same suite against SQLite and PostgreSQL (a real server: a
//! throwaway cluster per test binary, a fresh database per test).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::cloned_ref_to_slice_refs
)]

mod common;

use common::{Script, TestStore, events, of_unknown_kind, run};
use fabric_core::{
    QueryEmbedding, RunCatalog, RunQuery, RunStore, SearchQuery, StatsGroup, StatsQuery, StoreError,
};
use fabric_domain::{RunEvent, RunId, RunStatus, RunSummary};
use fabric_store_fs::{FsRunStore, RUNLOG_FILE};
use std::io::Write;

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let store = crate::common::sqlite().await;
                    super::$name(&store).await;
                }
            )*
        }
        mod postgres {
            $(
                #[cfg_attr(fabric_no_postgres, ignore = "needs PostgreSQL: run scripts/install-test-deps.sh")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(store) = crate::common::postgres().await else { return };
                    super::$name(&store).await;
                }
            )*
        }
    };
}

contract!(
    a_finished_run_is_found_at_once_and_listed_after_a_flush,
    list_filters_and_pages_newest_first,
    search_finds_words_in_prompts_tools_and_results,
    search_words_are_never_query_syntax,
    semantic_and_hybrid_search,
    stats_by_specialist_model_and_tool,
    prune_deletes_ended_runs_everywhere,
    a_kill_between_the_two_writes_is_caught_up,
    a_running_runs_row_follows_its_events_within_a_second,
    runs_from_before_the_store_are_imported_on_first_open,
    events_come_from_the_database_when_the_runlog_is_elsewhere,
    issue_26_a_torn_but_whole_last_line_never_outlives_its_runlog,
    issue_26_liveness_follows_the_runlog_lock_and_the_queue_lease,
    issue_40_stopwords_are_left_out_of_a_query_on_both_stores,
);

fn all() -> RunQuery {
    RunQuery {
        limit: 100,
        ..RunQuery::default()
    }
}

async fn a_finished_run_is_found_at_once_and_listed_after_a_flush(t: &TestStore) {
    let s = &t.store;
    let id = common::run_unflushed(s, &Script::default()).await;
    // Found by id as finished at once: `get_run` reads the runlog, the source of truth.
    let found = s.get_run(&id).await.unwrap();
    assert_eq!(found.status, RunStatus::Completed);
    // Listed as finished once the index has caught up (the writer takes a run's end at once;
    // `flush` waits for it, as the run service does at shutdown).
    s.flush().await;
    let listed = s.list_runs(&all()).await.unwrap();
    assert_eq!(listed.len(), 1);
    let row = &listed[0];
    assert_eq!(row.id, id);
    assert_eq!(row.status, RunStatus::Completed);
    assert_eq!(row.prompt, "write hello world");
    assert_eq!(row.specialist_ids, ["engineering"]);
    assert_eq!(row.model_keys, ["default"]);
    assert_eq!(row.summary.as_deref(), Some("wrote hello.txt"));
    assert_eq!(row.usage.total_tokens, 120);
    assert_eq!((row.tool_calls, row.events), (1, 5));
    assert!(row.ended_at.is_some());
    // The row is exactly what folding the runlog gives.
    let events = s.read_events(&id).await.unwrap();
    assert_eq!(events, common::events(&id, &Script::default()));
    assert_eq!(*row, RunSummary::from_events(id.clone(), &events));
    assert_eq!(s.get_run(&id).await.unwrap(), *row);
    // The runlog is there, line for line.
    let text =
        std::fs::read_to_string(t.root().join("runs").join(id.as_str()).join(RUNLOG_FILE)).unwrap();
    assert_eq!(text.lines().count(), 5);
    assert!(matches!(
        s.get_run(&fabric_domain::RunId::parse("nope").unwrap())
            .await,
        Err(StoreError::NotFound(_))
    ));
}

async fn list_filters_and_pages_newest_first(t: &TestStore) {
    let s = &t.store;
    let a = run(
        s,
        &Script {
            specialist: "research",
            started_at: 1_000.0,
            ..Script::default()
        },
    )
    .await;
    let b = run(
        s,
        &Script {
            status: Some("llm_error"),
            started_at: 2_000.0,
            ..Script::default()
        },
    )
    .await;
    let c = run(
        s,
        &Script {
            status: None,
            started_at: 3_000.0,
            ..Script::default()
        },
    )
    .await;
    s.flush().await;
    let ids = |runs: Vec<RunSummary>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        ids(s.list_runs(&all()).await.unwrap()),
        [c.clone(), b.clone(), a.clone()]
    );
    let page = RunQuery {
        limit: 1,
        before: Some(c.clone()),
        ..RunQuery::default()
    };
    assert_eq!(ids(s.list_runs(&page).await.unwrap()), [b.clone()]);
    let running = RunQuery {
        statuses: vec![RunStatus::Running],
        ..all()
    };
    assert_eq!(ids(s.list_runs(&running).await.unwrap()), [c.clone()]);
    // Several statuses, filtered before the page is taken (issue #40: A2A's states).
    let ended = RunQuery {
        statuses: vec![RunStatus::LlmError, RunStatus::Completed],
        limit: 1,
        ..RunQuery::default()
    };
    assert_eq!(ids(s.list_runs(&ended).await.unwrap()), [b.clone()]);
    let research = RunQuery {
        specialist: Some("research".into()),
        ..all()
    };
    assert_eq!(ids(s.list_runs(&research).await.unwrap()), [a.clone()]);
    let engineering_before_c = RunQuery {
        specialist: Some("engineering".into()),
        before: Some(c.clone()),
        ..all()
    };
    assert_eq!(
        ids(s.list_runs(&engineering_before_c).await.unwrap()),
        [b.clone()]
    );
    let since = RunQuery {
        since: Some(1_500.0),
        ..all()
    };
    assert_eq!(ids(s.list_runs(&since).await.unwrap()), [c, b]);
    assert!(s.list_runs(&RunQuery::default()).await.unwrap().is_empty());
}

async fn search_finds_words_in_prompts_tools_and_results(t: &TestStore) {
    let s = &t.store;
    let zebra = run(
        s,
        &Script {
            prompt: "count the zebras crossing",
            ..Script::default()
        },
    )
    .await;
    let tool = run(
        s,
        &Script {
            prompt: "something else",
            tool: "fetch_url",
            tool_result: "the giraffe page says hello",
            specialist: "research",
            ..Script::default()
        },
    )
    .await;
    let failed = run(
        s,
        &Script {
            prompt: "giraffe census",
            status: Some("failed"),
            ..Script::default()
        },
    )
    .await;
    let query = |text: &str| SearchQuery {
        text: text.into(),
        limit: 10,
        ..SearchQuery::default()
    };
    let hits = s.search(&query("zebra")).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].run.id, zebra);
    assert!(hits[0].text_score.is_some() && hits[0].semantic_score.is_none());
    let snippet = hits[0].snippet.as_deref().unwrap();
    assert!(snippet.contains("[zebra"), "{snippet}");

    let giraffes = s.search(&query("giraffe")).await.unwrap();
    let mut found: Vec<_> = giraffes.iter().map(|h| h.run.id.clone()).collect();
    found.sort();
    assert_eq!(found, [tool.clone(), failed.clone()]);
    // Tool names are searchable too.
    let by_tool = s.search(&query("fetch_url")).await.unwrap();
    assert_eq!(by_tool[0].run.id, tool);
    // Filters.
    let research = SearchQuery {
        specialist: Some("research".into()),
        ..query("giraffe")
    };
    assert_eq!(s.search(&research).await.unwrap()[0].run.id, tool);
    let failed_only = SearchQuery {
        status: Some(RunStatus::Failed),
        ..query("giraffe")
    };
    let hits = s.search(&failed_only).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].run.id, failed);
    let later = SearchQuery {
        since: Some(2_000_000_000.0),
        ..query("giraffe")
    };
    assert!(s.search(&later).await.unwrap().is_empty());
    assert!(matches!(
        s.search(&query("  ")).await,
        Err(StoreError::InvalidQuery(_))
    ));
}

async fn search_words_are_never_query_syntax(t: &TestStore) {
    let s = &t.store;
    run(
        s,
        &Script {
            prompt: "near the river or the sea",
            ..Script::default()
        },
    )
    .await;
    // Every word must match, and no character is an operator (issue #27: checking only
    // that each query is accepted would pass with the syntax leaking through). The run's
    // words: near, the, river, or, sea.
    for (text, hits) in [
        // `OR` is a word, not OR: `x` does not match, so nothing does.
        (r#"river" OR "x"#, 0),
        // `*` is not a prefix: `riv*` finds nothing.
        ("riv*", 0),
        ("river*", 1),
        ("NEAR(river sea)", 1),
        // `-` is not NOT: the run has `river`.
        ("-river", 1),
        // `prompt:` is not a column filter: `prompt` is not a word of the run.
        ("prompt:river", 0),
        // `AND` as a word: a stopword, like `or` and `the`, left out on both stores
        // (issue #40), so `zebra` decides: nothing.
        ("river AND zebra", 0),
        ("'; DROP TABLE runs; --", 0),
        // `&`, `|`, `!`, `<->` are not tsquery operators: `x` and `y` do not match.
        ("river & sea | !x <-> y", 0),
        ("river & sea", 1),
    ] {
        let result = s
            .search(&SearchQuery {
                text: text.into(),
                limit: 5,
                ..SearchQuery::default()
            })
            .await;
        let found = result.as_ref().map(Vec::len);
        assert_eq!(found.ok(), Some(hits), "{text}: {result:?}");
    }
    let hits = s
        .search(&SearchQuery {
            text: "NEAR(river sea)".into(),
            limit: 5,
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(hits.len(), 1, "plain words near, river, sea all match");
    assert_eq!(s.list_runs(&all()).await.unwrap().len(), 1);
}

fn unit(i: usize, dims: usize) -> Vec<f32> {
    (0..dims).map(|d| if d == i { 1.0 } else { 0.05 }).collect()
}

async fn semantic_and_hybrid_search(t: &TestStore) {
    let s = &t.store;
    let a = run(
        s,
        &Script {
            prompt: "plan a trip to the mountains",
            ..Script::default()
        },
    )
    .await;
    let b = run(
        s,
        &Script {
            prompt: "summarise the quarterly report",
            ..Script::default()
        },
    )
    .await;
    let c = run(
        s,
        &Script {
            prompt: "mountains of paperwork",
            ..Script::default()
        },
    )
    .await;
    let running = run(
        s,
        &Script {
            status: None,
            ..Script::default()
        },
    )
    .await;
    s.flush().await;
    let missing = s.missing_embeddings("fake", 10).await.unwrap();
    let ids: Vec<_> = missing.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(
        ids,
        [a.clone(), b.clone(), c.clone()],
        "ended runs, oldest first"
    );
    assert!(missing[0].1.starts_with("plan a trip to the mountains\n"));
    s.put_embedding(&a, "fake", &unit(0, 8)).await.unwrap();
    s.put_embedding(&b, "fake", &unit(1, 8)).await.unwrap();
    s.put_embedding(&a, "other", &unit(1, 8)).await.unwrap();
    assert!(matches!(
        s.put_embedding(
            &fabric_domain::RunId::parse("ghost").unwrap(),
            "fake",
            &unit(0, 8)
        )
        .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(s.missing_embeddings("fake", 10).await.unwrap().len(), 1);
    let _ = running;

    let embedding = |i| QueryEmbedding {
        model: "fake".into(),
        vector: unit(i, 8),
    };
    let semantic = s
        .search(&SearchQuery {
            text: "anything".into(),
            embedding: Some(embedding(1)),
            semantic_only: true,
            limit: 10,
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    let order: Vec<_> = semantic.iter().map(|h| h.run.id.clone()).collect();
    assert_eq!(
        order,
        [b.clone(), a.clone()],
        "only runs with a vector of the model"
    );
    assert!(semantic[0].semantic_score.unwrap() > 0.99);

    // Hybrid: `c` has no embedding but matches the words; `a` matches both and comes first.
    let hybrid = s
        .search(&SearchQuery {
            text: "mountains".into(),
            embedding: Some(embedding(0)),
            limit: 10,
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    let order: Vec<_> = hybrid.iter().map(|h| h.run.id.clone()).collect();
    assert_eq!(order[0], a);
    assert!(order.contains(&c) && order.contains(&b));
    let c_hit = hybrid.iter().find(|h| h.run.id == c).unwrap();
    assert!(c_hit.text_score.is_some() && c_hit.semantic_score.is_none());
    // A filter applies to the vector ranking too.
    let filtered = s
        .search(&SearchQuery {
            text: String::new(),
            embedding: Some(embedding(1)),
            semantic_only: true,
            status: Some(RunStatus::Failed),
            limit: 10,
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert!(filtered.is_empty());
    assert!(matches!(
        s.search(&SearchQuery {
            text: "x".into(),
            semantic_only: true,
            limit: 3,
            ..SearchQuery::default()
        })
        .await,
        Err(StoreError::InvalidQuery(_))
    ));
}

async fn stats_by_specialist_model_and_tool(t: &TestStore) {
    let s = &t.store;
    run(s, &Script::default()).await;
    run(
        s,
        &Script {
            status: Some("max_steps_exceeded"),
            tool_error: true,
            tool_result: "boom",
            ..Script::default()
        },
    )
    .await;
    run(
        s,
        &Script {
            specialist: "research",
            model_key: "large",
            tool: "fetch_url",
            started_at: 1_800_000_000.0,
            ..Script::default()
        },
    )
    .await;
    s.flush().await;
    let stats = |by, since| StatsQuery {
        by,
        since,
        all: false,
    };
    let rows = s.stats(&stats(StatsGroup::Specialist, None)).await.unwrap();
    assert_eq!(rows.len(), 2);
    let eng = &rows[0];
    assert_eq!(eng.key, "engineering");
    assert_eq!(eng.runs, 2);
    assert_eq!(eng.by_status.get("completed"), Some(&1));
    assert_eq!(eng.by_status.get("max_steps_exceeded"), Some(&1));
    assert_eq!(eng.success_rate, Some(0.5));
    assert_eq!(
        (eng.steps, eng.prompt_tokens, eng.completion_tokens),
        (4, 200, 40)
    );
    assert!((eng.wall_s - 4.0).abs() < 1e-6, "{}", eng.wall_s);
    assert_eq!((eng.tool_calls, eng.tool_errors), (2, 1));
    assert_eq!(eng.tool_error_rate, Some(0.5));

    let models = s.stats(&stats(StatsGroup::Model, None)).await.unwrap();
    assert_eq!(
        models
            .iter()
            .map(|r| (r.key.as_str(), r.runs))
            .collect::<Vec<_>>(),
        [("default", 2), ("large", 1)]
    );
    let tools = s.stats(&stats(StatsGroup::Tool, None)).await.unwrap();
    let write = tools.iter().find(|r| r.key == "write_file").unwrap();
    assert_eq!((write.runs, write.tool_calls, write.tool_errors), (2, 2, 1));
    let fetch = tools.iter().find(|r| r.key == "fetch_url").unwrap();
    assert_eq!((fetch.runs, fetch.tool_calls, fetch.tool_errors), (1, 1, 0));
    let recent = s
        .stats(&stats(StatsGroup::Specialist, Some(1_750_000_000.0)))
        .await
        .unwrap();
    assert_eq!(recent.len(), 1);
    assert_eq!(recent[0].key, "research");
}

async fn prune_deletes_ended_runs_everywhere(t: &TestStore) {
    let s = &t.store;
    let old = run(
        s,
        &Script {
            prompt: "old zebra",
            started_at: 1_000.0,
            ..Script::default()
        },
    )
    .await;
    let old_running = run(
        s,
        &Script {
            status: None,
            started_at: 1_000.0,
            ..Script::default()
        },
    )
    .await;
    let new = run(
        s,
        &Script {
            started_at: 5_000.0,
            ..Script::default()
        },
    )
    .await;
    s.flush().await;
    s.put_embedding(&old, "fake", &[1.0, 0.0]).await.unwrap();
    let pruned = s.prune(2_000.0).await.unwrap();
    assert_eq!(pruned, [old.clone()]);
    assert!(!t.root().join("runs").join(old.as_str()).exists());
    let left: Vec<_> = s
        .list_runs(&all())
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(left, [new, old_running]);
    assert!(matches!(
        s.read_events(&old).await,
        Err(StoreError::NotFound(_))
    ));
    let hits = s
        .search(&SearchQuery {
            text: "zebra".into(),
            limit: 5,
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert!(hits.is_empty());
    assert!(s.missing_embeddings("fake", 10).await.unwrap().len() == 1);
    // Nothing is left to reindex from the pruned run.
    assert_eq!(s.reindex().await.unwrap().runs, 0);
}

async fn a_kill_between_the_two_writes_is_caught_up(t: &TestStore) {
    let s = &t.store;
    // A run that was going when the process died: its runlog got lines the store never saw.
    let script = Script {
        status: None,
        ..Script::default()
    };
    let new = s.create_run(fabric_core::new_run_id()).await.unwrap();
    let id = new.id.clone();
    let all_events = events(&id, &Script::default());
    for event in &all_events[..2] {
        new.log.append(event).await.unwrap();
    }
    s.flush().await;
    let _ = script;
    let path = t.root().join("runs").join(id.as_str()).join(RUNLOG_FILE);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    for event in &all_events[2..] {
        writeln!(file, "{}", serde_json::to_string(event).unwrap()).unwrap();
    }
    drop(file);
    let row = s.list_runs(&all()).await.unwrap().remove(0);
    assert_eq!((row.status, row.events), (RunStatus::Running, 2));

    // Open catches up a `running` run whose runlog is ahead.
    let reopened = t.reopen().await;
    let row = reopened.list_runs(&all()).await.unwrap().remove(0);
    assert_eq!((row.status, row.events), (RunStatus::Completed, 5));

    // An ended run the index is behind on (events lost in a failed batch) needs reindex.
    let second = run(&reopened, &Script::default()).await;
    let path = t
        .root()
        .join("runs")
        .join(second.as_str())
        .join(RUNLOG_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut extra = events(&second, &Script::default()).pop().unwrap();
    extra.seq = 5;
    extra.payload = of_unknown_kind(&extra);
    std::fs::write(
        &path,
        format!("{text}{}\n", serde_json::to_string(&extra).unwrap()),
    )
    .unwrap();
    assert_eq!(reopened.reindex().await.unwrap().runs, 1);
    assert_eq!(reopened.reindex().await.unwrap().runs, 0, "idempotent");
    let row = reopened
        .list_runs(&all())
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.id == second)
        .unwrap();
    assert_eq!(row.events, 6);
    // A run whose row never made it to the database at all.
    let fs = FsRunStore::new(t.root());
    let lost = run(&fs, &Script::default()).await;
    assert_eq!(reopened.reindex().await.unwrap().runs, 1);
    assert_eq!(
        reopened.get_run(&lost).await.unwrap().status,
        RunStatus::Completed
    );
    assert_eq!(reopened.list_runs(&all()).await.unwrap().len(), 3);
}

async fn runs_from_before_the_store_are_imported_on_first_open(t: &TestStore) {
    // Another root, filled by the file store only, like a `.fabric` from before #9.
    let old_root = t.root().join("old").join(".fabric");
    let fs = FsRunStore::new(&old_root);
    let a = run(&fs, &Script::default()).await;
    let b = run(
        &fs,
        &Script {
            prompt: "unfinished zebra",
            status: None,
            ..Script::default()
        },
    )
    .await;
    let store =
        fabric_store_sql::SqlStore::open_with(t.url.as_deref(), &old_root, common::options())
            .await
            .unwrap();
    let listed: Vec<_> = store
        .list_runs(&all())
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.id, r.status))
        .collect();
    assert_eq!(
        listed,
        [(b, RunStatus::Running), (a.clone(), RunStatus::Completed)]
    );
    let hits = store
        .search(&SearchQuery {
            text: "hello".into(),
            limit: 5,
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(hits[0].run.id, a);
    if t.url.is_none() {
        assert!(old_root.join(fabric_store_sql::SQLITE_FILE).is_file());
    }
}

async fn events_come_from_the_database_when_the_runlog_is_elsewhere(t: &TestStore) {
    let s = &t.store;
    let id = run(s, &Script::default()).await;
    let from_file = s.read_events(&id).await.unwrap();
    std::fs::remove_dir_all(t.root().join("runs").join(id.as_str())).unwrap();
    let from_db = s.read_events(&id).await.unwrap();
    assert_eq!(from_db, from_file);
    assert_eq!(
        s.get_run(&id).await.unwrap(),
        RunSummary::from_events(id.clone(), &from_file)
    );
}

/// The writer rewrites a running run's row at most once a second while its events arrive;
/// a run that then goes quiet (waiting on a slow model) is still listed with its progress
/// within about a second, and at once after a flush; a new process agrees.
async fn a_running_runs_row_follows_its_events_within_a_second(t: &TestStore) {
    let s = &t.store;
    let new = s.create_run(fabric_core::new_run_id()).await.unwrap();
    let all_events = events(&new.id, &Script::default());
    let going = &all_events[..all_events.len() - 1];
    assert!(going.len() > 2);
    // The first events and a flush: the row is written with them.
    for event in &going[..2] {
        new.log.append(event).await.unwrap();
    }
    s.flush().await;
    // The rest at once: their batch finds the row written under a second ago, so the row
    // is left behind them; then the run goes quiet. No flush: the writer's own timer
    // brings the row up to date.
    for event in &going[2..] {
        new.log.append(event).await.unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    let row = s.list_runs(&all()).await.unwrap().remove(0);
    assert_eq!(
        (row.status, row.events),
        (RunStatus::Running, going.len() as u64)
    );
    assert_eq!(row, RunSummary::from_events(new.id.clone(), going));
    // And a flush makes it current at once.
    new.log
        .append(&all_events[all_events.len() - 1])
        .await
        .unwrap();
    s.flush().await;
    let row = s.list_runs(&all()).await.unwrap().remove(0);
    assert_eq!(row.status, RunStatus::Completed);
    let reopened = t.reopen().await;
    let again = reopened.list_runs(&all()).await.unwrap().remove(0);
    assert_eq!(again, row);
}

/// The events the database has for a run, read with its runlog moved aside (a run's events
/// are otherwise read from its runlog).
async fn indexed(t: &TestStore, s: &fabric_store_sql::SqlStore, id: &RunId) -> Vec<RunEvent> {
    let path = t.root().join("runs").join(id.as_str()).join(RUNLOG_FILE);
    let aside = path.with_extension("aside");
    std::fs::rename(&path, &aside).unwrap();
    let events = s.read_events(id).await;
    std::fs::rename(&aside, &path).unwrap();
    events.unwrap()
}

/// What an older fabric's index may hold: `line` at `seq` of run `id`, whatever was there.
async fn plant(t: &TestStore, id: &RunId, event: &RunEvent) {
    use sqlx::Connection;
    let line = serde_json::to_string(event).unwrap();
    let seq = i64::try_from(event.seq).unwrap();
    // The same statements on either driver's connection.
    macro_rules! plant_on {
        ($conn:expr) => {{
            sqlx::query("DELETE FROM events WHERE run_id = $1 AND seq = $2")
                .bind(id.as_str())
                .bind(seq)
                .execute(&mut $conn)
                .await
                .unwrap();
            sqlx::query(
                "INSERT INTO events (run_id, seq, ts, kind, step, tool, line) VALUES ($1, $2, $3, $4, NULL, NULL, $5)",
            )
            .bind(id.as_str())
            .bind(seq)
            .bind(event.ts)
            .bind(event.kind().as_str())
            .bind(line)
            .execute(&mut $conn)
            .await
            .unwrap();
            $conn.close().await.unwrap();
        }};
    }
    match &t.url {
        None => {
            let mut conn = sqlx::SqliteConnection::connect_with(
                &sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(t.root().join(fabric_store_sql::SQLITE_FILE)),
            )
            .await
            .unwrap();
            plant_on!(conn);
        }
        Some(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            plant_on!(conn);
        }
    }
}

/// Issue #26 (found by the kill -9 soak): a process killed with its last line written whole
/// but without its newline. The store that opens next must not index that line: `fabric
/// resume` cuts it and writes another event at its `seq`, and the index kept the cut one for
/// good. And an index an older fabric damaged so is repaired by `fabric index rebuild`.
async fn issue_26_a_torn_but_whole_last_line_never_outlives_its_runlog(t: &TestStore) {
    let s = &t.store;
    let new = s.create_run(fabric_core::new_run_id()).await.unwrap();
    let id = new.id.clone();
    let script = events(&id, &Script::default());
    for event in &script[..2] {
        new.log.append(event).await.unwrap();
    }
    s.flush().await;
    drop(new);
    // Killed with the tool call written but for its newline.
    let path = t.root().join("runs").join(id.as_str()).join(RUNLOG_FILE);
    let torn = script[2].clone();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(serde_json::to_string(&torn).unwrap().as_bytes())
        .unwrap();
    drop(file);

    // A new process opens the store (catching up with running runs) and continues the run:
    // the torn line is cut, and the model asked again chose another call.
    let reopened = t.reopen().await;
    let run = reopened.reopen_run(&id).await.unwrap();
    let mut again = torn.clone();
    again.payload = fabric_domain::EventPayload::from_wire(
        "tool_call",
        serde_json::json!({"tool": "search_runs", "call_id": "c2", "args": {"query": "quokka"}}),
    );
    run.log.append(&again).await.unwrap();
    for event in &script[3..] {
        run.log.append(event).await.unwrap();
    }
    reopened.flush().await;
    drop(run);
    let logged = FsRunStore::new(t.root()).read_events(&id).await.unwrap();
    assert_eq!(logged[2], again);
    assert_eq!(
        indexed(t, &reopened, &id).await,
        logged,
        "the index has what the runlog has"
    );
    assert_eq!(reopened.get_run(&id).await.unwrap().events, 5);
    assert_eq!(
        reopened.reindex().await.unwrap(),
        fabric_core::Reindexed::default(),
        "nothing to repair"
    );

    // An index an older fabric left: the cut event at seq 2, and one past the runlog's end.
    plant(t, &id, &torn).await;
    let mut beyond = script[4].clone();
    beyond.seq = 5;
    beyond.payload = of_unknown_kind(&beyond);
    plant(t, &id, &beyond).await;
    assert_ne!(indexed(t, &reopened, &id).await, logged);
    assert_eq!(
        reopened.reindex().await.unwrap(),
        fabric_core::Reindexed {
            runs: 1,
            repaired: 1
        }
    );
    assert_eq!(indexed(t, &reopened, &id).await, logged);
    let row = reopened
        .list_runs(&all())
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.id == id)
        .unwrap();
    assert_eq!(row, RunSummary::from_events(id.clone(), &logged));
    assert_eq!(
        reopened.reindex().await.unwrap(),
        fabric_core::Reindexed::default(),
        "idempotent"
    );
    // The run's words are searched from the runlog's events, not the cut one's.
    let hits = reopened
        .search(&SearchQuery {
            text: "quokka".into(),
            limit: 5,
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
}

/// Issue #26: a run killed with `kill -9` showed `running` until resumed. A run's liveness
/// is its runlog's lock (held while its process lives, free once it is gone) and, for a
/// run of the queue (PostgreSQL), its lease: queued until a worker claims it, held while
/// the lease is current, queued again once it ran out.
async fn issue_26_liveness_follows_the_runlog_lock_and_the_queue_lease(t: &TestStore) {
    use fabric_core::{Liveness, RunQueue};
    let s = &t.store;
    let new = s.create_run(fabric_core::new_run_id()).await.unwrap();
    let id = new.id.clone();
    assert_eq!(s.liveness(&id).await, Liveness::Held);
    drop(new);
    assert_eq!(s.liveness(&id).await, Liveness::Interrupted);
    if !s.describe().starts_with("postgres") {
        return;
    }
    let queued = fabric_core::new_run_id();
    assert!(
        s.enqueue(&queued, &serde_json::json!({"prompt": "p"}), None)
            .await
            .unwrap()
    );
    assert_eq!(s.liveness(&queued).await, Liveness::Queued);
    let claimed = s
        .claim("w1", std::time::Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((&claimed.id, claimed.lease_expired), (&queued, false));
    assert_eq!(s.liveness(&queued).await, Liveness::Held);
    // A lease that runs out at once: the run waits to be taken over, and the next claim
    // says it took it from a worker whose lease expired.
    s.renew(
        "w1",
        &[(queued.clone(), claimed.fence)],
        std::time::Duration::ZERO,
    )
    .await
    .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(s.liveness(&queued).await, Liveness::Queued);
    let taken = s
        .claim("w2", std::time::Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((&taken.id, taken.lease_expired), (&queued, true));
}

/// Issue #40: PostgreSQL's `english` configuration drops stopwords that SQLite's FTS5
/// required, so `the sea` found a run without `the` on one store only. Both leave out the
/// same stopwords now, and a query of stopwords alone is refused on both, saying why.
async fn issue_40_stopwords_are_left_out_of_a_query_on_both_stores(t: &TestStore) {
    let s = &t.store;
    let waves = run(
        s,
        &Script {
            prompt: "a poem about waves and sea",
            summary: "wrote a poem",
            ..Script::default()
        },
    )
    .await;
    let calm = run(
        s,
        &Script {
            prompt: "the sea is calm",
            ..Script::default()
        },
    )
    .await;
    let query = |text: &str| SearchQuery {
        text: text.into(),
        limit: 10,
        ..SearchQuery::default()
    };
    let hits = s.search(&query("the sea")).await.unwrap();
    let mut found: Vec<_> = hits.iter().map(|h| h.run.id.clone()).collect();
    found.sort();
    let mut both = vec![waves.clone(), calm.clone()];
    both.sort();
    assert_eq!(found, both, "{hits:?}");
    let hits = s.search(&query("Calm, AND the sea")).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].run.id, calm);
    for (text, said) in [
        ("the", "`the` is too common"),
        ("The and", "`the`, `and` are too common"),
    ] {
        match s.search(&query(text)).await {
            Err(StoreError::InvalidQuery(message)) => {
                assert!(message.contains(said), "{text}: {message}");
                assert!(message.contains("give other words"), "{message}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
}
