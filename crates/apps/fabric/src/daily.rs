//! Daily budgets per model key (`daily_budget:`; issue #11, docs/QUALITY.md), as the binary
//! wires them: the core's [`DailyBudget`] over the store's spend ledger, with the configured
//! day zone as its clock, and its report as `fabric budget` and `GET /budget` show it.
//!
//! The day runs from midnight to midnight in `daily_budget_timezone`. `FABRIC_FAKE_NOW`
//! (Unix seconds or RFC 3339) sets the clock, for tests across midnight.

use async_trait::async_trait;
use chrono::{DateTime, FixedOffset, Local, Utc};
use fabric_api_http::{BudgetReport, BudgetSource, KeyBudget};
use fabric_config::{DayZone, Settings};
use fabric_core::budget::daily::{DailyBudget, DailyLimit, DayClock};
use fabric_core::ports::{SpendLedger, StoreError};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The variable that sets the clock of daily budgets (tests).
pub(crate) const FAKE_NOW_ENV: &str = "FABRIC_FAKE_NOW";

/// The daily budgets of `settings` over `ledger`.
pub(crate) fn budgets(settings: &Settings, ledger: Arc<dyn SpendLedger>) -> Arc<DailyBudget> {
    let limits = settings
        .daily_budget
        .iter()
        .map(|(key, l)| {
            let limit = DailyLimit {
                max_tokens: l.max_tokens,
                max_cost_usd: l.max_cost_usd,
            };
            (key.clone(), limit)
        })
        .collect();
    DailyBudget::new(
        ledger,
        limits,
        Arc::new(Zone(settings.daily_budget_timezone)),
    )
}

/// No daily budgets at all (offline runs: they make no model calls, so today's spend
/// must not change what they do).
pub(crate) fn off(ledger: Arc<dyn SpendLedger>) -> Arc<DailyBudget> {
    DailyBudget::new(ledger, BTreeMap::new(), Arc::new(Zone(DayZone::Utc)))
}

/// The configured day zone, read with the clock or `FABRIC_FAKE_NOW`.
struct Zone(DayZone);

impl DayClock for Zone {
    fn today(&self) -> String {
        day_of(now_unix(), self.0)
    }

    fn zone_name(&self) -> String {
        match self.0 {
            DayZone::Local => "local".to_owned(),
            DayZone::Utc => "UTC".to_owned(),
            DayZone::Offset(secs) => {
                let sign = if secs < 0 { '-' } else { '+' };
                let secs = secs.unsigned_abs();
                format!("{sign}{:02}:{:02}", secs / 3600, secs % 3600 / 60)
            }
        }
    }
}

/// Today's spend and limits as `fabric budget` and `GET /budget` show them.
pub(crate) async fn report(daily: &DailyBudget) -> Result<BudgetReport, StoreError> {
    let report = daily.report().await?;
    let keys = report
        .keys
        .into_iter()
        .map(|k| KeyBudget {
            model_key: k.model_key,
            tokens: k.spend.tokens,
            cost_usd: k.spend.cost_usd,
            calls: k.spend.calls,
            max_tokens: k.limit.max_tokens,
            max_cost_usd: k.limit.max_cost_usd,
            exhausted: k.exhausted,
        })
        .collect();
    Ok(BudgetReport {
        day: report.day,
        timezone: report.timezone,
        keys,
    })
}

/// The daily budgets as `GET /budget` reads them.
pub(crate) struct Reports(pub(crate) Arc<DailyBudget>);

#[async_trait]
impl BudgetSource for Reports {
    async fn today(&self) -> Result<BudgetReport, StoreError> {
        report(&self.0).await
    }
}

/// Now, in Unix seconds: `FABRIC_FAKE_NOW` when set (Unix seconds or RFC 3339).
fn now_unix() -> i64 {
    if let Ok(text) = std::env::var(FAKE_NOW_ENV) {
        let text = text.trim();
        if let Ok(secs) = text.parse::<i64>() {
            return secs;
        }
        if let Ok(at) = DateTime::parse_from_rfc3339(text) {
            return at.timestamp();
        }
        tracing::warn!(
            "{FAKE_NOW_ENV}={text} is neither Unix seconds nor RFC 3339; using the clock"
        );
    }
    Utc::now().timestamp()
}

/// The day of `unix` in `zone`.
fn day_of(unix: i64, zone: DayZone) -> String {
    let at = DateTime::from_timestamp(unix, 0).unwrap_or_default();
    let format = "%Y-%m-%d";
    match zone {
        DayZone::Local => at.with_timezone(&Local).format(format).to_string(),
        DayZone::Utc => at.format(format).to_string(),
        DayZone::Offset(secs) => match FixedOffset::east_opt(secs) {
            Some(offset) => at.with_timezone(&offset).format(format).to_string(),
            None => at.format(format).to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_turn_at_midnight_in_the_zone() {
        // 2026-11-23T23:30:00Z
        let t = 1_795_476_600;
        assert_eq!(day_of(t, DayZone::Utc), "2026-11-23");
        assert_eq!(day_of(t, DayZone::Offset(3600)), "2026-11-24");
        assert_eq!(day_of(t, DayZone::Offset(-5 * 3600)), "2026-11-23");
        assert_eq!(day_of(t + 1800, DayZone::Utc), "2026-11-24");
    }
}
