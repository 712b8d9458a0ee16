//! Across runs: `fabric logs search`, `fabric logs prune`, `fabric stats`,
//! `fabric index rebuild` and `fabric store migrate`, over the store's index.

use fabric_core::search::{SearchError, SearchRequest, results_json};
use fabric_core::{RunCatalog, StatsGroup, StatsQuery, StatsRow};
use fabric_domain::{RunStatus, parse_duration, parse_since};
use serde_json::json;

use fabric_config::Settings;

use crate::cli::{Cli, IndexCommand, StatsArgs, StoreCommand};
use crate::errors::UsageError;
use crate::render::{one_line, timestamp};
use crate::wiring;

/// Runs embedded by one `fabric index rebuild`, at most.
const REBUILD_EMBED_MAX: usize = 1_000_000;

fn since(text: Option<&str>) -> anyhow::Result<Option<f64>> {
    Ok(text
        .map(|t| {
            parse_since(t, fabric_core::unix_now()).map_err(|e| UsageError(format!("--since: {e}")))
        })
        .transpose()?)
}

/// The words of `fabric logs search`.
pub(crate) struct SearchArgs<'a> {
    pub(crate) query: &'a str,
    pub(crate) semantic: bool,
    pub(crate) specialist: Option<&'a String>,
    pub(crate) status: Option<&'a str>,
    pub(crate) since: Option<&'a str>,
    pub(crate) limit: usize,
    pub(crate) json: bool,
}

/// `fabric logs search`.
pub(crate) async fn search(settings: &Settings, args: SearchArgs<'_>) -> anyhow::Result<u8> {
    let status = args
        .status
        .map(|s| {
            serde_json::from_value::<RunStatus>(serde_json::Value::String(s.to_owned())).map_err(
                |_| {
                    UsageError(format!(
                        "--status: `{s}` is not a run status (completed, failed, cancelled, ...)"
                    ))
                },
            )
        })
        .transpose()?;
    if args.limit == 0 {
        return Err(UsageError("--limit must be at least 1".to_owned()).into());
    }
    let request = SearchRequest {
        text: args.query.to_owned(),
        semantic: args.semantic,
        specialist: args.specialist.cloned(),
        status,
        since: since(args.since)?,
        limit: args.limit,
    };
    let store = wiring::open_store(settings).await?;
    let search = wiring::run_search(settings, store)?;
    let results = search.search(&request).await.map_err(|e| match e {
        SearchError::Invalid(message) => anyhow::Error::from(UsageError(message)),
        other => anyhow::Error::from(other),
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results_json(&results))?);
        return Ok(0);
    }
    if let Some(note) = &results.note {
        eprintln!("note: {note}");
    }
    if results.hits.is_empty() {
        eprintln!("no run matches `{}`", args.query);
        return Ok(0);
    }
    let best = best_score(&results.hits);
    let rows: Vec<[String; 5]> = results
        .hits
        .iter()
        .map(|hit| {
            let text = hit
                .snippet
                .as_deref()
                .or(hit.run.summary.as_deref())
                .unwrap_or(&hit.run.prompt);
            [
                hit.run.id.to_string(),
                timestamp(hit.run.started_at),
                hit.run.status.to_string(),
                relevance(hit.score, best),
                one_line(text, 60),
            ]
        })
        .collect();
    print_table(
        &["RUN ID", "STARTED (UTC)", "STATUS", "RELEVANCE", "MATCH"],
        &rows,
    );
    eprintln!(
        "ranked by {}",
        json!(results.mode).as_str().unwrap_or("text")
    );
    Ok(0)
}

/// The best hit's score, when it is positive.
fn best_score(hits: &[fabric_core::SearchHit]) -> Option<f64> {
    hits.iter()
        .map(|h| h.score)
        .fold(None, |best: Option<f64>, s| {
            Some(best.map_or(s, |b| b.max(s)))
        })
        .filter(|&best| best > 0.0)
}

/// A hit's relevance as the table shows it: its score relative to the best hit's (1.00).
/// The stores' scores themselves are on no common scale, and SQLite's bm25 gives a word in
/// half the runs or more about 0.000001, which printed as 0.000 on every hit (issue #40);
/// `--json` gives them as they are.
fn relevance(score: f64, best: Option<f64>) -> String {
    match best {
        Some(best) if score.is_finite() => format!("{:.2}", (score / best).max(0.0)),
        _ => "-".to_owned(),
    }
}

/// `fabric logs prune`.
/// How `fabric logs prune` goes about it.
pub(crate) struct Prune {
    /// List, delete nothing.
    pub(crate) dry_run: bool,
    /// Ask on the terminal before deleting.
    pub(crate) ask: bool,
    /// Print JSON.
    pub(crate) json: bool,
}

pub(crate) async fn prune(settings: &Settings, older_than: &str, how: Prune) -> anyhow::Result<u8> {
    let age = parse_duration(older_than).map_err(|e| UsageError(format!("--older-than: {e}")))?;
    let store = wiring::open_store(settings).await?;
    let cutoff = fabric_core::unix_now() - age;
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    if how.dry_run || how.ask {
        let ids = store.prunable(cutoff).await?;
        if how.dry_run {
            if how.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &json!({"would_delete": ids.len(), "run_ids": ids, "dry_run": true})
                    )?
                );
            } else {
                for id in &ids {
                    println!("{id}");
                }
                eprintln!(
                    "would delete {} run{} started more than {older_than} ago (dry run: nothing deleted)",
                    ids.len(),
                    plural(ids.len())
                );
            }
            return Ok(0);
        }
        if ids.is_empty() {
            println!("no ended run started more than {older_than} ago; nothing to delete");
            return Ok(0);
        }
        let question = format!(
            "delete {} run{} started more than {older_than} ago, with their runlogs and workspaces? [y/N] ",
            ids.len(),
            plural(ids.len())
        );
        if !confirm(question).await? {
            eprintln!("nothing deleted");
            return Ok(0);
        }
    }
    let deleted = store.prune(cutoff).await?;
    if how.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"deleted": deleted.len(), "run_ids": deleted}))?
        );
    } else {
        println!(
            "deleted {} run{} started more than {older_than} ago",
            deleted.len(),
            plural(deleted.len())
        );
    }
    Ok(0)
}

/// Asks a yes/no question on the terminal; only `y` or `yes` is a yes.
async fn confirm(question: String) -> anyhow::Result<bool> {
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        eprint!("{question}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    Ok(matches!(answer.trim().to_lowercase().as_str(), "y" | "yes"))
}

/// `fabric stats`.
/// `fabric budget`: today's spend per model key, against its daily budget.
pub(crate) async fn budget(cli: &Cli, args: &crate::cli::BudgetArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    let store = wiring::open_store(&settings).await?;
    let report = crate::daily::report(&crate::daily::budgets(&settings, store)).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(0);
    }
    println!("{} ({} time)", report.day, report.timezone);
    if report.keys.is_empty() {
        eprintln!(
            "no daily budget is configured and nothing was counted today (see `daily_budget` in docs/CONFIG.md)"
        );
        return Ok(0);
    }
    let limit = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    let table: Vec<[String; 6]> = report
        .keys
        .iter()
        .map(|k| {
            [
                k.model_key.clone(),
                k.tokens.to_string(),
                limit(k.max_tokens.map(|m| m.to_string())),
                format!("{:.4}", k.cost_usd),
                limit(k.max_cost_usd.map(|m| format!("{m:.4}"))),
                if k.exhausted { "spent" } else { "ok" }.to_owned(),
            ]
        })
        .collect();
    print_table(
        &[
            "MODEL KEY",
            "TOKENS",
            "MAX TOKENS",
            "USD",
            "MAX USD",
            "STATE",
        ],
        &table,
    );
    Ok(0)
}

pub(crate) async fn stats(cli: &Cli, args: &StatsArgs) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    let by = args.by;
    let query = StatsQuery {
        by,
        since: since(args.since.as_deref())?,
        all: args.all,
    };
    let store = wiring::open_store(&settings).await?;
    let rows = store.stats(&query).await?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"by": by, "rows": rows}))?
        );
        return Ok(0);
    }
    if rows.is_empty() {
        eprintln!("no runs to count");
        return Ok(0);
    }
    let header = match by {
        StatsGroup::Specialist => "SPECIALIST",
        StatsGroup::Model => "MODEL KEY",
        StatsGroup::Tool => "TOOL",
    };
    let table: Vec<[String; 8]> = rows.iter().map(stats_row).collect();
    print_table(
        &[
            header,
            "RUNS",
            "SUCCESS",
            "STEPS",
            "TOKENS",
            "TIME (S)",
            "TOOL CALLS",
            "TOOL ERRORS",
        ],
        &table,
    );
    Ok(0)
}

fn stats_row(row: &StatsRow) -> [String; 8] {
    let percent =
        |r: Option<f64>| r.map_or_else(|| "-".to_owned(), |r| format!("{:.0}%", r * 100.0));
    [
        row.key.clone(),
        row.runs.to_string(),
        percent(row.success_rate),
        row.steps.to_string(),
        (row.prompt_tokens + row.completion_tokens).to_string(),
        format!("{:.1}", row.wall_s),
        row.tool_calls.to_string(),
        format!("{} ({})", row.tool_errors, percent(row.tool_error_rate)),
    ]
}

/// `fabric index rebuild`.
pub(crate) async fn index(cli: &Cli, command: &IndexCommand) -> anyhow::Result<u8> {
    let IndexCommand::Rebuild { json } = command;
    let settings = wiring::load_settings(cli)?;
    let store = wiring::open_store(&settings).await?;
    let reindexed = store.reindex().await?;
    let search = wiring::run_search(&settings, store.clone())?;
    let report = search.embed_missing(REBUILD_EMBED_MAX).await?;
    if *json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "store": RunCatalog::describe(store.as_ref()),
                "runs_reindexed": reindexed.runs,
                "runs_repaired": reindexed.repaired,
                "semantic": search.is_semantic(),
                "embedded": report.embedded,
                "embedding_stopped": report.stopped,
            }))?
        );
        if report.stopped.is_some() {
            return Ok(1);
        }
    } else {
        println!(
            "{}: {} runs brought up to date from their runlogs",
            RunCatalog::describe(store.as_ref()),
            reindexed.runs
        );
        if reindexed.repaired > 0 {
            println!(
                "{} of them repaired: the index had events their runlogs do not have, now replaced by the runlogs'",
                reindexed.repaired
            );
        }
        if search.is_semantic() {
            println!("{} runs embedded", report.embedded);
        } else {
            println!("no embedding model (run_index.embedding_model_key): search is by text only");
        }
        if let Some(why) = &report.stopped {
            eprintln!(
                "embedding stopped early: {why}; run `fabric index rebuild` again once the server answers"
            );
            return Ok(1);
        }
    }
    Ok(0)
}

/// `fabric store migrate`.
pub(crate) async fn store(cli: &Cli, command: &StoreCommand) -> anyhow::Result<u8> {
    let StoreCommand::Migrate = command;
    let settings = wiring::load_settings(cli)?;
    let store = wiring::open_store(&settings).await?;
    let version = store.migrate().await?;
    println!(
        "{}: schema at version {version}",
        RunCatalog::describe(store.as_ref())
    );
    Ok(0)
}

/// Prints rows under a header, each column as wide as its widest cell.
fn print_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == N {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}
