use super::*;
use fabric_domain::{EventKind, RunStatus};
use fabric_engine::RunLog;
use serde_json::json;

fn event(seq: u64, kind: EventKind, payload: serde_json::Value) -> RunEvent {
    RunEvent::from_wire(
        seq,
        1_700_000_000.0 + seq as f64,
        kind.as_str(),
        None,
        payload,
    )
}

#[tokio::test]
async fn create_append_read_list() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsRunStore::new(dir.path().join(".fabric"));
    let run = store.create_run(fabric_engine::new_run_id()).await.unwrap();
    assert!(run.workspace.is_dir());
    assert!(run.workspace.ends_with(format!("{}/workspace", run.id)));
    run.log
        .append(&event(
            0,
            EventKind::RunStart,
            json!({"prompt": "make hello"}),
        ))
        .await
        .unwrap();
    run.log
        .append(&event(
            1,
            EventKind::Recruitment,
            json!({"specialist_ids": ["engineering"]}),
        ))
        .await
        .unwrap();
    run.log
        .append(&event(
            2,
            EventKind::RunComplete,
            json!({"status": "completed", "result": {"summary": "done"}}),
        ))
        .await
        .unwrap();

    let events = store.read_events(&run.id).await.unwrap();
    assert_eq!(events.len(), 3);
    let text = std::fs::read_to_string(store.run_dir(&run.id).join(RUNLOG_FILE)).unwrap();
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }

    let listed = store
        .list_runs(&fabric_engine::RunQuery {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, RunStatus::Completed);
    assert_eq!(listed[0].summary.as_deref(), Some("done"));
    assert_eq!(listed[0].prompt, "make hello");
    assert_eq!(listed[0].specialist_ids, vec!["engineering".to_owned()]);
}

#[tokio::test]
async fn newest_first_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsRunStore::new(dir.path());
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            store
                .create_run(fabric_engine::new_run_id())
                .await
                .unwrap()
                .id,
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let listed = store
        .list_runs(&fabric_engine::RunQuery {
            limit: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
        vec![ids[2].clone(), ids[1].clone()]
    );
    assert_eq!(listed[0].status, RunStatus::Running);
}

#[tokio::test]
async fn unknown_run_is_not_found_and_empty_root_lists_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsRunStore::new(dir.path().join("missing"));
    assert!(
        store
            .list_runs(&fabric_engine::RunQuery {
                limit: 5,
                ..Default::default()
            })
            .await
            .unwrap()
            .is_empty()
    );
    let id = RunId::parse("nope").unwrap();
    assert!(matches!(
        store.read_events(&id).await,
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn partial_last_line_is_skipped_but_corrupt_middle_is_reported() {
    let path = Path::new("runlog.jsonl");
    let good = r#"{"seq":0,"ts":1.0,"kind":"run_start","step":null,"payload":{}}"#;
    let partial = format!("{good}\n{{\"seq\":1,\"ts\"");
    assert_eq!(log::parse_runlog(path, &partial).unwrap().len(), 1);
    let corrupt = format!("{good}\nnot json\n{good}\n");
    let err = log::parse_runlog(path, &corrupt).unwrap_err();
    assert!(err.to_string().contains("runlog.jsonl:2"), "{err}");
}

/// Issue #26: a last line that is whole JSON but lacks its newline is not an event of the
/// runlog either: continuing the run cuts it and writes another event at its `seq`, so a
/// reader that took it (the store's index) kept an event the runlog no longer has.
#[tokio::test]
async fn issue_26_a_whole_last_line_without_its_newline_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsRunStore::new(dir.path());
    let id = RunId::parse("20260101-000000-000-aaaaaaaa").unwrap();
    let run = store.create_run(id.clone()).await.unwrap();
    run.log
        .append(&event(0, EventKind::RunStart, json!({})))
        .await
        .unwrap();
    drop(run);
    let path = store.run_dir(&id).join(RUNLOG_FILE);
    let torn = serde_json::to_string(&event(1, EventKind::LlmRequest, json!({}))).unwrap();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut file, torn.as_bytes()).unwrap();
    drop(file);
    // Read as the resume will leave it: without the line it cuts.
    let read = store.read_events(&id).await.unwrap();
    assert_eq!(read.iter().map(|e| e.seq).collect::<Vec<_>>(), [0]);
    let lines = store.read_event_lines(&id).await.unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(
        lines[0].1,
        serde_json::to_string(&event(0, EventKind::RunStart, json!({}))).unwrap()
    );
    let (_, reopened) = store.reopen(&id).await.unwrap();
    drop(reopened);
    assert_eq!(store.read_events(&id).await.unwrap(), read);
    assert!(std::fs::read_to_string(&path).unwrap().ends_with("}\n"));
}

#[tokio::test]
async fn concurrent_appends_stay_whole_lines() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileRunLog::create(dir.path().join("log.jsonl"))
        .await
        .unwrap();
    let big = "x".repeat(100_000);
    let mut tasks = Vec::new();
    for i in 0..20 {
        let log = log.clone();
        let big = big.clone();
        tasks.push(tokio::spawn(async move {
            log.append(&event(i, EventKind::ToolResult, json!({"result": big})))
                .await
                .unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let text = std::fs::read_to_string(log.path()).unwrap();
    assert_eq!(text.lines().count(), 20);
    for line in text.lines() {
        serde_json::from_str::<RunEvent>(line).unwrap();
    }
}

#[tokio::test]
async fn a_corrupt_runlog_is_listed_as_unreadable_without_hiding_others() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsRunStore::new(dir.path());
    let good = store.create_run(fabric_engine::new_run_id()).await.unwrap();
    good.log
        .append(&event(0, EventKind::RunStart, json!({"prompt": "ok"})))
        .await
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let bad = store.create_run(fabric_engine::new_run_id()).await.unwrap();
    std::fs::write(store.run_dir(&bad.id).join(RUNLOG_FILE), "garbage\n{}\n").unwrap();
    let listed = store
        .list_runs(&fabric_engine::RunQuery {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].id, bad.id);
    assert_eq!(listed[0].status, RunStatus::Failed);
    assert!(
        listed[0]
            .summary
            .as_deref()
            .unwrap()
            .starts_with("unreadable runlog")
    );
    assert_eq!(listed[1].prompt, "ok");
}

#[tokio::test]
async fn issue_10_a_claimed_runlog_refuses_a_second_owner_and_is_free_once_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsRunStore::new(dir.path());
    let run = store.create_run(fabric_engine::new_run_id()).await.unwrap();
    let id = run.id.clone();
    assert!(store.claimed(&id).await);
    assert!(matches!(
        store.reopen_run(&id).await,
        Err(StoreError::Claimed(_))
    ));
    run.log
        .append(&event(0, EventKind::RunStart, json!({"prompt": "p"})))
        .await
        .unwrap();
    drop(run);
    assert!(!store.claimed(&id).await);
    assert_eq!(store.interrupted_runs().await.unwrap(), vec![id.clone()]);
    let again = store.reopen_run(&id).await.unwrap();
    assert!(store.claimed(&id).await);
    assert!(store.interrupted_runs().await.unwrap().is_empty());
    drop(again);
}

#[tokio::test]
async fn issue_10_reopening_cuts_a_half_written_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsRunStore::new(dir.path());
    let run = store.create_run(fabric_engine::new_run_id()).await.unwrap();
    let id = run.id.clone();
    run.log
        .append(&event(0, EventKind::RunStart, json!({"prompt": "p"})))
        .await
        .unwrap();
    drop(run);
    let path = store.run_dir(&id).join(RUNLOG_FILE);
    let mut text = std::fs::read_to_string(&path).unwrap();
    let whole = text.clone();
    text.push_str("{\"seq\":1,\"ts\":1.0,\"ki");
    std::fs::write(&path, text).unwrap();
    let again = store.reopen_run(&id).await.unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), whole);
    again
        .log
        .append(&event(1, EventKind::Recruitment, json!({})))
        .await
        .unwrap();
    assert_eq!(store.read_events(&id).await.unwrap().len(), 2);
}

#[tokio::test]
async fn issue_26_liveness_tells_a_held_run_from_one_whose_process_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsRunStore::new(dir.path());
    let run = store.create_run(fabric_engine::new_run_id()).await.unwrap();
    let id = run.id.clone();
    assert_eq!(store.liveness(&id).await, fabric_engine::Liveness::Held);
    drop(run);
    assert_eq!(
        store.liveness(&id).await,
        fabric_engine::Liveness::Interrupted
    );
    // Probing kept nothing: the run can be claimed right after, and is held again.
    let again = store.reopen_run(&id).await.unwrap();
    assert_eq!(store.liveness(&id).await, fabric_engine::Liveness::Held);
    drop(again);
    // No runlog here (a run of another machine sharing the database): nothing is claimed.
    let elsewhere = fabric_engine::new_run_id();
    assert_eq!(
        store.liveness(&elsewhere).await,
        fabric_engine::Liveness::Unknown
    );
}

#[tokio::test]
async fn issue_26_a_probe_at_the_moment_of_a_claim_does_not_make_it_fail() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsRunStore::new(dir.path());
    let run = store.create_run(fabric_engine::new_run_id()).await.unwrap();
    let id = run.id.clone();
    drop(run);
    // A lister's probe holds a shared lock for an instant; here it is stretched to 30 ms.
    let path = store.run_dir(&id).join(RUNLOG_FILE);
    let probe = std::fs::File::open(&path).unwrap();
    probe.lock_shared().unwrap();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(30));
        drop(probe);
    });
    let claimed = store.reopen_run(&id).await;
    releaser.join().unwrap();
    assert!(claimed.is_ok(), "{:?}", claimed.err());
}

#[test]
fn issue_45_out_of_descriptors_names_the_limit_to_raise() {
    for code in [24, 23] {
        let error = std::io::Error::from_raw_os_error(code);
        let said = io_error("cannot create", Path::new("/r/runlog.jsonl"), &error).to_string();
        assert!(
            said.starts_with("cannot create /r/runlog.jsonl: "),
            "{said}"
        );
        assert!(
            said.contains("raise the open-files hard limit (`ulimit -Hn`"),
            "{said}"
        );
        assert!(said.contains("server.max_runs_in_flight"), "{said}");
    }
    let other = io_error(
        "cannot create",
        Path::new("/r"),
        &std::io::Error::from_raw_os_error(13),
    );
    assert!(!other.to_string().contains("ulimit"), "{other}");
}
