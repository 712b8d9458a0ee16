//! `RunCatalog::stats`: figures per specialist, model key or tool, as SQL aggregates.

use std::collections::BTreeMap;

use fabric_core::{StatsGroup, StatsQuery, StatsRow, StoreError};
use fabric_domain::runlog::RunOrigin;

use crate::SqlStore;
use crate::db::{Arg, Row};
use crate::queries::parse_status;

/// Sums over the runs of a group (`r`), cast so both backends return 64-bit integers.
const RUN_FIGURES: &str = "COUNT(*) AS runs, \
     CAST(COALESCE(SUM(r.steps), 0) AS BIGINT) AS steps, \
     CAST(COALESCE(SUM(r.prompt_tokens), 0) AS BIGINT) AS prompt_tokens, \
     CAST(COALESCE(SUM(r.completion_tokens), 0) AS BIGINT) AS completion_tokens, \
     CAST(COALESCE(SUM(CASE WHEN r.ended_at IS NOT NULL THEN r.ended_at - r.started_at ELSE 0 END), 0) AS DOUBLE PRECISION) AS wall_s, \
     CAST(COALESCE(SUM(r.tool_calls), 0) AS BIGINT) AS tool_calls, \
     CAST(COALESCE(SUM(r.tool_errors), 0) AS BIGINT) AS tool_errors";

fn count(row: &Row, column: &str) -> Result<u64, sqlx::Error> {
    Ok(u64::try_from(row.int(column)?).unwrap_or_default())
}

pub(crate) async fn stats(
    store: &SqlStore,
    query: &StatsQuery,
) -> Result<Vec<StatsRow>, StoreError> {
    let mut args: Vec<Arg> = Vec::new();
    let mut filter = match query.since {
        Some(since) => {
            args.push(Arg::Real(since));
            " AND r.started_at >= $1".to_owned()
        }
        None => String::new(),
    };
    if !query.all {
        // What people's runs did, not replays, tests or evaluations (issue #26). The words
        // are the vocabulary's own (fixed snake_case), so they go in as literals.
        let counted: Vec<String> = RunOrigin::COUNTED_IN_STATS
            .iter()
            .map(|o| format!("'{}'", o.as_str()))
            .collect();
        filter.push_str(&format!(" AND r.origin IN ({})", counted.join(", ")));
    }
    let since = filter.as_str();
    // `g` is the grouping relation: (key, run_id) pairs.
    let group = match query.by {
        StatsGroup::Specialist => "SELECT specialist_id AS key, run_id FROM run_specialists",
        StatsGroup::Model => "SELECT model_key AS key, run_id FROM run_models",
        StatsGroup::Tool => {
            "SELECT DISTINCT tool AS key, run_id FROM events WHERE tool IS NOT NULL AND kind IN ('tool_call', 'tool_error')"
        }
    };
    let figures_sql = format!(
        "SELECT g.key AS key, {RUN_FIGURES} FROM ({group}) g JOIN runs r ON r.id = g.run_id WHERE 1 = 1{since} \
         GROUP BY g.key ORDER BY runs DESC, g.key"
    );
    let status_sql = format!(
        "SELECT g.key AS key, r.status AS status, COUNT(*) AS n FROM ({group}) g JOIN runs r ON r.id = g.run_id \
         WHERE 1 = 1{since} GROUP BY g.key, r.status"
    );
    let db = &store.inner.db;
    let figures = db
        .fetch_all(&figures_sql, args.clone())
        .await
        .map_err(|e| store.err(&e))?;
    let statuses = db
        .fetch_all(&status_sql, args.clone())
        .await
        .map_err(|e| store.err(&e))?;
    // For tools, calls and errors are the tool's own, not its runs' totals.
    let tool_counts: BTreeMap<String, (u64, u64)> = if query.by == StatsGroup::Tool {
        let sql = format!(
            "SELECT e.tool AS key, \
             CAST(SUM(CASE WHEN e.kind = 'tool_call' THEN 1 ELSE 0 END) AS BIGINT) AS calls, \
             CAST(SUM(CASE WHEN e.kind = 'tool_error' THEN 1 ELSE 0 END) AS BIGINT) AS errors \
             FROM events e JOIN runs r ON r.id = e.run_id \
             WHERE e.tool IS NOT NULL AND e.kind IN ('tool_call', 'tool_error'){since} GROUP BY e.tool"
        );
        db.fetch_all(&sql, args)
            .await
            .map_err(|e| store.err(&e))?
            .iter()
            .map(|r| Ok((r.text("key")?, (count(r, "calls")?, count(r, "errors")?))))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(|e| store.err(&e))?
    } else {
        BTreeMap::new()
    };

    let mut by_status: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for row in &statuses {
        let read = || -> Result<(String, String, u64), sqlx::Error> {
            Ok((row.text("key")?, row.text("status")?, count(row, "n")?))
        };
        let (key, status, n) = read().map_err(|e| store.err(&e))?;
        by_status.entry(key).or_default().insert(status, n);
    }

    let mut out = Vec::with_capacity(figures.len());
    for row in &figures {
        let mut read = || -> Result<StatsRow, sqlx::Error> {
            let key = row.text("key")?;
            let mut stats = StatsRow {
                runs: count(row, "runs")?,
                steps: count(row, "steps")?,
                prompt_tokens: count(row, "prompt_tokens")?,
                completion_tokens: count(row, "completion_tokens")?,
                wall_s: row.real("wall_s")?,
                tool_calls: count(row, "tool_calls")?,
                tool_errors: count(row, "tool_errors")?,
                ..StatsRow::default()
            };
            if let Some((calls, errors)) = tool_counts.get(&key) {
                stats.tool_calls = *calls;
                stats.tool_errors = *errors;
            }
            stats.by_status = by_status.remove(&key).unwrap_or_default();
            stats.key = key;
            Ok(stats)
        };
        let mut stats = read().map_err(|e| store.err(&e))?;
        let (ended, succeeded) =
            stats
                .by_status
                .iter()
                .fold((0_u64, 0_u64), |(ended, ok), (status, n)| {
                    let status = parse_status(status);
                    if status == fabric_domain::RunStatus::Running {
                        (ended, ok)
                    } else if status.is_success() {
                        (ended + n, ok + n)
                    } else {
                        (ended + n, ok)
                    }
                });
        stats.success_rate = (ended > 0).then(|| succeeded as f64 / ended as f64);
        stats.tool_error_rate =
            (stats.tool_calls > 0).then(|| stats.tool_errors as f64 / stats.tool_calls as f64);
        out.push(stats);
    }
    Ok(out)
}
