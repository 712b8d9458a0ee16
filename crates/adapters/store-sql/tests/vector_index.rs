//! Semantic search through the IVF index (ADR-041, ADR-042), on both backends: with the
//! threshold lowered so a CI-sized store is indexed and retrained, and a short tail so puts
//! pack their lists, search must find ≥ 95 % of the exact top 10 with the calibrated probe
//! count, report exact similarities, find a re-embedded run once by its new vector, honour
//! filters, and survive a prune.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::cast_precision_loss
)]

mod common;

use common::{Script, events};
use fabric_core::{QueryEmbedding, RunCatalog, RunStore, SearchQuery, new_run_id};
use fabric_domain::RunStatus;
use fabric_store_sql::{SqlStore, StoreOptions};
use fabric_test_support::hash_embedding;

const MODEL: &str = "hash-64";
const DIMS: usize = 64;
const RUNS: usize = 1_000;
const TOPICS: &[&[&str]] = &[
    &[
        "invoice", "billing", "payment", "refund", "ledger", "receipt",
    ],
    &["kubernetes", "cluster", "helm", "ingress", "pod", "node"],
    &["recipe", "kitchen", "oven", "baking", "flour", "sauce"],
    &[
        "travel", "flight", "hotel", "booking", "passport", "airport",
    ],
    &["garden", "tomato", "soil", "compost", "seeds", "greenhouse"],
];

fn text(i: usize) -> String {
    let topic = TOPICS[i % TOPICS.len()];
    (0..6)
        .map(|k| topic[(i * 7 + k * (i / 5 + 3)) % topic.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

async fn indexed_semantic_search(url: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        vector_index_min: 250,
        vector_tail_max: 4,
        ..common::options()
    };
    let store = SqlStore::open_with(url, dir.path(), options).await.unwrap();
    let mut all = Vec::new();
    for i in 0..RUNS {
        let new = store.create_run(new_run_id()).await.unwrap();
        let prompt = text(i);
        let status = if i % 10 == 0 { "failed" } else { "completed" };
        let script = Script {
            prompt: &prompt,
            status: Some(status),
            summary: "",
            ..Script::default()
        };
        for event in events(&new.id, &script) {
            new.log.append(&event).await.unwrap();
        }
        let vector = hash_embedding(&prompt, DIMS);
        store.put_embedding(&new.id, MODEL, &vector).await.unwrap();
        all.push((new.id, vector, status));
    }
    // Trained at 250, retrained at 500 and 1,000: √1000 ≈ 32 lists, packed in chunks.
    let info = store.vector_index(MODEL).await.unwrap().unwrap();
    assert_eq!((info.vectors, info.lists), (RUNS, 32), "{info:?}");
    assert!((8..=32).contains(&info.probes), "{info:?}");
    assert!(info.chunks > 0 && info.tail == 0, "{info:?}");
    let mut recall = 0.0;
    let queries = 40;
    for q in 0..queries {
        let query = hash_embedding(&text(q * 13 + 1), DIMS);
        let mut exact: Vec<(f32, &str)> = all
            .iter()
            .map(|(id, v, _)| (v.iter().zip(&query).map(|(a, b)| a * b).sum(), id.as_str()))
            .collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0));
        let hits = store
            .search(&SearchQuery {
                embedding: Some(QueryEmbedding {
                    model: MODEL.into(),
                    vector: query.clone(),
                }),
                semantic_only: true,
                limit: 10,
                ..SearchQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(hits.len(), 10);
        // The reported similarity is the exact cosine (hash embeddings are unit vectors).
        for hit in &hits {
            let exact_score = exact
                .iter()
                .find(|(_, id)| *id == hit.run.id.as_str())
                .unwrap()
                .0;
            assert!((hit.semantic_score.unwrap() - f64::from(exact_score)).abs() < 1e-4);
        }
        // Ties at the 10th place make a set comparison unfair: compare scores instead.
        let tenth = exact[9].0;
        let found = hits
            .iter()
            .filter(|h| h.semantic_score.unwrap() >= f64::from(tenth) - 1e-6)
            .count();
        recall += found.min(10) as f64 / 10.0;
    }
    let recall = recall / queries as f64;
    assert!(recall >= 0.95, "recall@10 = {recall}");

    // Puts after training go to the tails, and a tail of 4 is packed.
    let mut more = Vec::new();
    for i in RUNS..RUNS + 100 {
        let new = store.create_run(new_run_id()).await.unwrap();
        let prompt = text(i);
        for event in events(
            &new.id,
            &Script {
                prompt: &prompt,
                ..Script::default()
            },
        ) {
            new.log.append(&event).await.unwrap();
        }
        store
            .put_embedding(&new.id, MODEL, &hash_embedding(&prompt, DIMS))
            .await
            .unwrap();
        more.push(new.id);
    }
    let after = store.vector_index(MODEL).await.unwrap().unwrap();
    assert!(after.chunks > info.chunks, "{info:?} then {after:?}");
    assert!(after.tail < 4 * after.lists, "{after:?}");

    // A run embedded again (already packed in a chunk) is found once, by its new vector.
    let again = hash_embedding("a completely different question about sailing", DIMS);
    store.put_embedding(&all[0].0, MODEL, &again).await.unwrap();
    let hits = store
        .search(&SearchQuery {
            embedding: Some(QueryEmbedding {
                model: MODEL.into(),
                vector: again.clone(),
            }),
            semantic_only: true,
            limit: 10,
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(hits[0].run.id, all[0].0);
    assert!((hits[0].semantic_score.unwrap() - 1.0).abs() < 1e-4);
    assert_eq!(hits.iter().filter(|h| h.run.id == all[0].0).count(), 1);

    // Filters: only failed runs (a tenth), still ten of them, all failed.
    let failed = store
        .search(&SearchQuery {
            embedding: Some(QueryEmbedding {
                model: MODEL.into(),
                vector: hash_embedding(&text(3), DIMS),
            }),
            semantic_only: true,
            status: Some(RunStatus::Failed),
            limit: 10,
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(failed.len(), 10);
    assert!(failed.iter().all(|h| h.run.status == RunStatus::Failed));

    // A fresh process sees the same index; pruning everything drops the lists.
    store.close().await;
    let store = SqlStore::open_with(url, dir.path(), common::options())
        .await
        .unwrap();
    let pruned = store.prune(f64::MAX).await.unwrap();
    assert_eq!(pruned.len(), RUNS + more.len());
    let none = store
        .search(&SearchQuery {
            embedding: Some(QueryEmbedding {
                model: MODEL.into(),
                vector: hash_embedding(&text(1), DIMS),
            }),
            semantic_only: true,
            limit: 10,
            ..SearchQuery::default()
        })
        .await
        .unwrap();
    assert!(none.is_empty());
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_indexed_semantic_search() {
    indexed_semantic_search(None).await;
}

#[cfg_attr(
    fabric_no_postgres,
    ignore = "needs PostgreSQL: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_indexed_semantic_search() {
    let url = match fabric_test_support::shared_cluster() {
        Ok(cluster) => cluster.create_database().unwrap(),
        Err(e) => {
            eprintln!(
                "SKIPPED: PostgreSQL vector index test: {e}; run scripts/install-test-deps.sh"
            );
            return;
        }
    };
    indexed_semantic_search(Some(&url)).await;
}
