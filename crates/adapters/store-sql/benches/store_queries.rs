//! The store's queries at scale (issue #9): with N synthetic runs (default 100,000;
//! `BENCH_RUNS`) and their 768-dimension embeddings, p50/p99 of the first page of
//! `list_runs`, full-text search, semantic search and hybrid search, each in a warm store
//! (what `fabric serve` sees) and in a store opened afresh per query (what one CLI process
//! sees: `SqlStore::open` + the query), on SQLite and on PostgreSQL, plus semantic
//! recall@10 against the exact ranking.
//!
//! The fill takes the real write path: `create_run` + `RunLog::append` (runlog file first,
//! then the writer), 32 runs at a time, then `missing_embeddings` + `put_embedding` as the
//! embedder does, then `reindex` (`fabric index rebuild`). Filled stores are kept under
//! `~/.cache/agent-fabric/bench-store/` (PostgreSQL's cluster under
//! `/var/tmp/agent-fabric-bench/`) and reused (`BENCH_REFILL=1` refills).
//!
//! Run: `cargo bench -p fabric-store-sql --bench store_queries`; `BENCH_ADAPTERS=sqlite`
//! (or `postgres`), `BENCH_QUERIES=200`. Figures in docs/BENCHMARKS.md.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::cast_precision_loss,
    missing_docs
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fabric_core::{QueryEmbedding, RunCatalog, RunQuery, RunStore, SearchQuery, new_run_id};
use fabric_domain::{EventKind, RunEvent, RunId};
use fabric_store_sql::SqlStore;
use fabric_test_support::{PgCluster, hash_embedding};
use serde_json::json;

const MODEL: &str = "bench-hash-768";
const DIMS: usize = 768;
const CONCURRENCY: usize = 32;

/// Topics: runs of one topic share most of their words, so neighbours are meaningful.
const TOPICS: &[&[&str]] = &[
    &[
        "invoice", "billing", "payment", "refund", "ledger", "tax", "receipt", "currency",
    ],
    &[
        "kubernetes",
        "deployment",
        "cluster",
        "helm",
        "ingress",
        "pod",
        "autoscaling",
        "node",
    ],
    &[
        "postgres",
        "migration",
        "schema",
        "index",
        "vacuum",
        "replica",
        "query",
        "table",
    ],
    &[
        "frontend",
        "react",
        "component",
        "stylesheet",
        "layout",
        "button",
        "modal",
        "render",
    ],
    &[
        "security",
        "vulnerability",
        "audit",
        "token",
        "password",
        "encryption",
        "certificate",
        "firewall",
    ],
    &[
        "marketing",
        "campaign",
        "newsletter",
        "audience",
        "conversion",
        "landing",
        "brand",
        "funnel",
    ],
    &[
        "recipe",
        "kitchen",
        "ingredients",
        "oven",
        "baking",
        "flour",
        "sauce",
        "dinner",
    ],
    &[
        "travel",
        "itinerary",
        "flight",
        "hotel",
        "booking",
        "passport",
        "luggage",
        "airport",
    ],
    &[
        "python",
        "pandas",
        "dataframe",
        "notebook",
        "plot",
        "regression",
        "numpy",
        "csv",
    ],
    &[
        "legal",
        "contract",
        "clause",
        "liability",
        "agreement",
        "compliance",
        "license",
        "court",
    ],
    &[
        "hiring",
        "interview",
        "candidate",
        "resume",
        "onboarding",
        "salary",
        "recruiter",
        "offer",
    ],
    &[
        "rust", "borrow", "lifetime", "trait", "cargo", "async", "compiler", "crate",
    ],
    &[
        "weather",
        "forecast",
        "rainfall",
        "temperature",
        "storm",
        "humidity",
        "climate",
        "wind",
    ],
    &[
        "music", "playlist", "guitar", "chord", "melody", "album", "concert", "lyrics",
    ],
    &[
        "fitness",
        "workout",
        "running",
        "muscle",
        "nutrition",
        "protein",
        "cardio",
        "stretching",
    ],
    &[
        "logistics",
        "shipment",
        "warehouse",
        "inventory",
        "pallet",
        "courier",
        "tracking",
        "freight",
    ],
    &[
        "email",
        "inbox",
        "reply",
        "thread",
        "attachment",
        "calendar",
        "meeting",
        "invite",
    ],
    &[
        "physics",
        "quantum",
        "particle",
        "energy",
        "momentum",
        "relativity",
        "photon",
        "wave",
    ],
    &[
        "garden",
        "tomato",
        "soil",
        "compost",
        "seeds",
        "watering",
        "pruning",
        "greenhouse",
    ],
    &[
        "support",
        "ticket",
        "customer",
        "complaint",
        "escalation",
        "sla",
        "chatbot",
        "feedback",
    ],
];
const VERBS: &[&str] = &[
    "write",
    "fix",
    "review",
    "summarise",
    "plan",
    "draft",
    "analyse",
    "update",
    "check",
    "explain",
];
const FILLER: &[&str] = &[
    "quickly", "report", "notes", "list", "the", "weekly", "new", "old", "team", "project",
    "draft", "final", "small", "large", "urgent", "simple",
];
const SPECIALISTS: &[&str] = &["engineering", "research", "writing", "ops"];
const TOOLS: &[&str] = &["read_file", "write_file", "shell", "http_get", "search_web"];

/// splitmix64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

/// `count` words: mostly the topic's, some filler.
fn words(rng: &mut Rng, topic: &[&str], count: usize) -> String {
    (0..count)
        .map(|_| {
            if rng.below(4) == 0 {
                rng.pick(FILLER)
            } else {
                rng.pick(topic)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn ev(seq: u64, ts: f64, kind: EventKind, payload: serde_json::Value) -> RunEvent {
    RunEvent::from_wire(seq, ts, kind.as_str(), Some(0), payload)
}

/// A realistic run's events: start, recruitment, 1-3 tool calls and results, completion.
fn run_events(rng: &mut Rng, id: &RunId) -> Vec<RunEvent> {
    let topic = TOPICS[rng.below(TOPICS.len())];
    let verb = rng.pick(VERBS);
    let (prompt_words, summary_words) = (8 + rng.below(8), 6 + rng.below(6));
    let prompt = format!("{verb} {}", words(rng, topic, prompt_words));
    let summary = format!("done: {}", words(rng, topic, summary_words));
    let t = fabric_store_sql_now();
    let mut out = vec![
        ev(
            0,
            t,
            EventKind::RunStart,
            json!({"run_id": id.as_str(), "prompt": prompt, "model_key": "default", "model": "qwen2.5:7b", "parent_run_id": null}),
        ),
        ev(
            1,
            t,
            EventKind::Recruitment,
            json!({"specialist_ids": [rng.pick(SPECIALISTS)]}),
        ),
    ];
    let calls = 1 + rng.below(3);
    for c in 0..calls {
        let tool = rng.pick(TOOLS);
        let seq = 2 + 2 * c as u64;
        out.push(ev(seq, t, EventKind::ToolCall, json!({"tool": tool, "call_id": format!("c{c}"), "args": {"path": format!("{}.md", rng.pick(topic))}})));
        out.push(ev(
            seq + 1,
            t,
            EventKind::ToolResult,
            json!({"tool": tool, "call_id": format!("c{c}"), "result": words(rng, topic, 12)}),
        ));
    }
    out.push(ev(2 + 2 * calls as u64, t, EventKind::RunComplete, json!({"run_id": id.as_str(), "status": "completed", "steps": calls + 1, "reason": null,
        "usage": {"prompt_tokens": 900, "completion_tokens": 120, "total_tokens": 1020}, "result": {"summary": summary}})));
    out
}

fn fabric_store_sql_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Fills through the real path; returns (runs/s, embeddings/s, reindex time).
async fn fill(store: &SqlStore, n: usize) -> (f64, f64, Duration) {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..CONCURRENCY {
        let store = store.clone();
        let count = n / CONCURRENCY + usize::from(worker < n % CONCURRENCY);
        tasks.spawn(async move {
            let mut rng = Rng(worker as u64 * 7919 + 1);
            for _ in 0..count {
                let new = store.create_run(new_run_id()).await.unwrap();
                for event in run_events(&mut rng, &new.id) {
                    new.log.append(&event).await.unwrap();
                }
            }
        });
    }
    let mut done = 0;
    while tasks.join_next().await.is_some() {
        done += 1;
        println!(
            "  fill: {done}/{CONCURRENCY} workers done after {:.0?}",
            started.elapsed()
        );
    }
    store.flush().await;
    let runs_per_s = n as f64 / started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut embedded = 0;
    loop {
        let missing = store.missing_embeddings(MODEL, 1000).await.unwrap();
        if missing.is_empty() {
            break;
        }
        // Four at a time, as an embedder with a few requests in flight would put them.
        embedded += missing.len();
        let mut puts = tokio::task::JoinSet::new();
        for chunk in missing.chunks(missing.len().div_ceil(4)) {
            let (store, chunk) = (store.clone(), chunk.to_vec());
            puts.spawn(async move {
                for (id, text) in chunk {
                    store
                        .put_embedding(&id, MODEL, &hash_embedding(&text, DIMS))
                        .await
                        .unwrap();
                }
            });
        }
        while puts.join_next().await.is_some() {}
        if embedded % 10_000 < 1000 {
            println!("  embedded {embedded} after {:.0?}", started.elapsed());
        }
    }
    let embeds_per_s = embedded as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    store.reindex().await.unwrap();
    (runs_per_s, embeds_per_s, started.elapsed())
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    List,
    Text,
    Semantic,
    Hybrid,
}

const KINDS: [(Kind, &str); 4] = [
    (Kind::List, "list first page (20)"),
    (Kind::Text, "full-text search"),
    (Kind::Semantic, "semantic search"),
    (Kind::Hybrid, "hybrid search"),
];

/// The i-th query's text: two or three words of one topic.
fn query_text(i: usize) -> String {
    let mut rng = Rng(0xC0FFEE + i as u64);
    let topic = TOPICS[rng.below(TOPICS.len())];
    let count = 2 + rng.below(2);
    (0..count)
        .map(|_| rng.pick(topic))
        .collect::<Vec<_>>()
        .join(" ")
}

fn search_query(kind: Kind, i: usize, limit: usize) -> SearchQuery {
    let text = query_text(i);
    let embedding = (kind != Kind::Text).then(|| QueryEmbedding {
        model: MODEL.into(),
        vector: hash_embedding(&text, DIMS),
    });
    SearchQuery {
        text,
        embedding,
        semantic_only: kind == Kind::Semantic,
        limit,
        ..SearchQuery::default()
    }
}

async fn one(store: &SqlStore, kind: Kind, i: usize) -> usize {
    if kind == Kind::List {
        let page = RunQuery {
            limit: 20,
            ..RunQuery::default()
        };
        store.list_runs(&page).await.unwrap().len()
    } else {
        store
            .search(&search_query(kind, i, 10))
            .await
            .unwrap()
            .len()
    }
}

fn percentiles(mut xs: Vec<Duration>) -> (f64, f64) {
    xs.sort();
    let at = |q: f64| xs[((xs.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3;
    (at(0.5), at(0.99))
}

/// Recall@10 of semantic search against the exact cosine ranking over every run's vector.
async fn recall(store: &SqlStore, queries: usize) -> f64 {
    let mut all: Vec<(String, Vec<f32>)> = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .list_runs(&RunQuery {
                limit: 1000,
                before: before.clone(),
                ..RunQuery::default()
            })
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        before = Some(last.id.clone());
        all.extend(page.iter().map(|s| {
            (
                s.id.as_str().to_owned(),
                hash_embedding(&s.embedding_text(), DIMS),
            )
        }));
    }
    let mut total = 0.0;
    for i in 0..queries {
        let q = search_query(Kind::Semantic, i, 10);
        let v = &q.embedding.as_ref().unwrap().vector;
        let mut exact: Vec<(f32, &str)> = all
            .iter()
            .map(|(id, x)| {
                (
                    x.iter().zip(v).map(|(a, b)| a * b).sum::<f32>(),
                    id.as_str(),
                )
            })
            .collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0));
        let truth: Vec<&str> = exact.iter().take(10).map(|(_, id)| *id).collect();
        let got = store.search(&q).await.unwrap();
        let found = got
            .iter()
            .filter(|h| truth.contains(&h.run.id.as_str()))
            .count();
        total += found as f64 / 10.0;
    }
    total / queries as f64
}

fn dir_size(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_dir() {
        std::fs::read_dir(path)
            .map(|d| d.filter_map(Result::ok).map(|e| dir_size(&e.path())).sum())
            .unwrap_or(0)
    } else {
        meta.len()
    }
}

async fn bench_adapter(
    name: &str,
    url: Option<&str>,
    root: &Path,
    db_size: impl Fn() -> u64,
    n: usize,
    queries: usize,
) {
    let marker = root.join("bench-filled.txt");
    if !marker.exists() || std::env::var("BENCH_REFILL").as_deref() == Ok("1") {
        println!("{name}: filling {n} runs (real write path) ...");
        let store = SqlStore::open(url, root).await.unwrap();
        let started = Instant::now();
        let (runs_s, embeds_s, reindex) = fill(&store, n).await;
        store.close().await;
        let text = format!(
            "{name}: filled {n} runs in {:.0?}: {runs_s:.0} runs/s (create_run + append), {embeds_s:.0} embeddings/s (put_embedding), reindex {reindex:.1?}\n",
            started.elapsed()
        );
        std::fs::write(&marker, &text).unwrap();
    }
    print!("{}", std::fs::read_to_string(&marker).unwrap());
    let store = SqlStore::open(url, root).await.unwrap();
    let started = Instant::now();
    let changed = store.reindex().await.unwrap().runs;
    println!(
        "{name}: reindex on an up-to-date store: {:.1?} ({changed} runs)",
        started.elapsed()
    );
    println!(
        "{name}: database {:.0} MB, runs/ {:.0} MB",
        db_size() as f64 / 1e6,
        dir_size(&root.join("runs")) as f64 / 1e6
    );
    println!(
        "{name}: vector index: {:?}",
        store.vector_index(MODEL).await.unwrap()
    );
    println!(
        "{name}: semantic recall@10 vs exact: {:.3}",
        recall(&store, 100).await
    );

    println!(
        "{:<10} {:<22} {:>9} {:>9} {:>9} {:>9}",
        "adapter", "query", "warm p50", "warm p99", "fresh p50", "fresh p99"
    );
    for (kind, label) in KINDS {
        one(&store, kind, 0).await; // warm-up
        let mut warm = Vec::new();
        for i in 0..queries {
            let t = Instant::now();
            one(&store, kind, i).await;
            warm.push(t.elapsed());
        }
        // A fresh store that loads every vector takes seconds per query: fewer of those.
        let t = Instant::now();
        let s = SqlStore::open(url, root).await.unwrap();
        one(&s, kind, 0).await;
        s.close().await;
        let fresh_queries = if t.elapsed() > Duration::from_millis(500) {
            20
        } else {
            queries
        };
        let mut fresh = Vec::new();
        for i in 0..fresh_queries {
            let t = Instant::now();
            let s = SqlStore::open(url, root).await.unwrap();
            one(&s, kind, i).await;
            fresh.push(t.elapsed());
            s.close().await;
        }
        let (w50, w99) = percentiles(warm);
        let (f50, f99) = percentiles(fresh);
        println!(
            "{name:<10} {label:<22} {w50:>9.2} {w99:>9.2} {f50:>9.2} {f99:>9.2}{}",
            if fresh_queries < queries {
                format!(" (fresh: {fresh_queries} queries)")
            } else {
                String::new()
            }
        );
    }
    store.close().await;
}

fn cache_dir() -> PathBuf {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/tmp".into());
    PathBuf::from(home).join(".cache/agent-fabric/bench-store")
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let n = env("BENCH_RUNS", 100_000);
    let queries = env("BENCH_QUERIES", 200);
    let adapters = std::env::var("BENCH_ADAPTERS").unwrap_or_else(|_| "sqlite,postgres".into());
    let base = cache_dir();
    if std::env::var("BENCH_REFILL").as_deref() == Ok("1") {
        let _ = std::fs::remove_dir_all(base.join(format!("sqlite-{n}")));
        let _ = std::fs::remove_dir_all(base.join(format!("postgres-{n}")));
    }
    println!("store queries: {n} runs, {DIMS}-dimension embeddings, {queries} queries each (ms)");
    if adapters.contains("sqlite") {
        let root = base.join(format!("sqlite-{n}"));
        std::fs::create_dir_all(&root).unwrap();
        let db = root.join(fabric_store_sql::SQLITE_FILE);
        let size = || {
            ["", "-wal"]
                .iter()
                .map(|s| dir_size(Path::new(&format!("{}{s}", db.display()))))
                .sum()
        };
        bench_adapter("sqlite", None, &root, size, n, queries).await;
    }
    if adapters.contains("postgres") {
        let dir = base.join(format!("postgres-{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        // The server runs as `postgres`, which cannot enter root's home: its data lives in
        // /var/tmp (kept across runs, like the rest of the cache).
        let cluster_dir = PathBuf::from(format!("/var/tmp/agent-fabric-bench/postgres-{n}"));
        if std::env::var("BENCH_REFILL").as_deref() == Ok("1") {
            let _ = std::fs::remove_dir_all(&cluster_dir);
        }
        std::fs::create_dir_all(cluster_dir.parent().unwrap()).unwrap();
        let cluster = PgCluster::start_persistent(&cluster_dir).unwrap();
        let url = if dir.join("root").exists() {
            cluster.url("fabric_bench")
        } else {
            let url = cluster.create_named_database("fabric_bench").unwrap();
            std::fs::create_dir_all(dir.join("root")).unwrap();
            url
        };
        let data = cluster_dir.join("data");
        bench_adapter(
            "postgres",
            Some(&url),
            &dir.join("root"),
            || dir_size(&data),
            n,
            queries,
        )
        .await;
        drop(cluster);
    }
}
