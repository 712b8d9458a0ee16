//! Daily budgets per model key (`daily_budget:`; issue #11, docs/QUALITY.md): what each key
//! spent today is kept in the store, so every process sharing it counts against one budget.
//!
//! A key's spend is recorded after each of its model calls (a decorator around its client,
//! only for keys with a daily budget). When a run is prepared, a key whose budget is spent is
//! replaced by a local one (complexity routing's `simple` key, else the default key) or, for
//! the cloud fallback, switched off, and the run's `model_reason` says so; when no key is
//! left the run is refused. A cloud fallback is also not taken once this process saw the
//! key's budget spent. A run under way is not stopped by the daily budget (its own `budget:`
//! stops runs).
//!
//! The day runs from midnight to midnight in `daily_budget_timezone`. `FABRIC_FAKE_NOW`
//! (Unix seconds or RFC 3339) sets the clock, for tests across midnight.

use async_trait::async_trait;
use chrono::{DateTime, FixedOffset, Local, Utc};
use fabric_api_http::{BudgetReport, BudgetSource, KeyBudget};
use fabric_config::{DailyLimit, DayZone, Settings};
use fabric_core::budget::Price;
use fabric_core::ports::{DaySpend, SpendLedger, StoreError};
use fabric_core::{ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The variable that sets the clock of daily budgets (tests).
pub(crate) const FAKE_NOW_ENV: &str = "FABRIC_FAKE_NOW";

/// The daily budgets of one configuration over one store.
pub(crate) struct Daily {
    ledger: Arc<dyn SpendLedger>,
    limits: BTreeMap<String, DailyLimit>,
    zone: DayZone,
    /// Per key, the day this process saw its budget spent, and why: every run of the
    /// process takes no more cloud fallbacks on it that day.
    spent: Mutex<BTreeMap<String, (String, String)>>,
    /// Spends of calls cut off midway, recorded beside the run; awaited at exit.
    pending: tokio_util::task::TaskTracker,
}

impl Daily {
    /// Waits until the spends of cut-off calls are recorded (at exit).
    pub(crate) async fn settle(&self) {
        self.pending.close();
        self.pending.wait().await;
    }

    pub(crate) fn new(settings: &Settings, ledger: Arc<dyn SpendLedger>) -> Arc<Self> {
        Arc::new(Self {
            ledger,
            limits: settings.daily_budget.clone(),
            zone: settings.daily_budget_timezone,
            spent: Mutex::new(BTreeMap::new()),
            pending: tokio_util::task::TaskTracker::new(),
        })
    }

    /// No daily budgets at all (offline runs: they make no model calls, so today's spend
    /// must not change what they do).
    pub(crate) fn off(ledger: Arc<dyn SpendLedger>) -> Arc<Self> {
        Arc::new(Self {
            ledger,
            limits: BTreeMap::new(),
            zone: DayZone::Utc,
            spent: Mutex::new(BTreeMap::new()),
            pending: tokio_util::task::TaskTracker::new(),
        })
    }

    /// Whether no key has a daily budget.
    pub(crate) fn is_off(&self) -> bool {
        self.limits.is_empty()
    }

    fn lock_spent(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (String, String)>> {
        self.spent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Today, `YYYY-MM-DD` in the budget's zone.
    pub(crate) fn today(&self) -> String {
        day_of(now_unix(), self.zone)
    }

    /// The zone, as shown to people.
    pub(crate) fn zone_name(&self) -> String {
        match self.zone {
            DayZone::Local => "local".to_owned(),
            DayZone::Utc => "UTC".to_owned(),
            DayZone::Offset(secs) => {
                let sign = if secs < 0 { '-' } else { '+' };
                let secs = secs.unsigned_abs();
                format!("{sign}{:02}:{:02}", secs / 3600, secs % 3600 / 60)
            }
        }
    }

    /// Why `key` may not be used today, when its daily budget is spent.
    pub(crate) async fn spent(&self, key: &str) -> Result<Option<String>, StoreError> {
        let Some(limit) = self.limits.get(key) else {
            return Ok(None);
        };
        let today = self.today();
        let spend = self
            .ledger
            .spend_on(&today)
            .await?
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, s)| s)
            .unwrap_or_default();
        Ok(exceeded(key, limit, &spend, &today))
    }

    /// `inner` counting its spend against `key`'s daily budget, when the key has one.
    pub(crate) fn meter(
        self: &Arc<Self>,
        key: &str,
        price: Option<Price>,
        inner: Arc<dyn ChatClient>,
    ) -> Arc<dyn ChatClient> {
        match self.limits.get(key) {
            Some(limit) => Arc::new(Metered {
                inner,
                spender: Arc::new(Spender {
                    key: key.to_owned(),
                    limit: *limit,
                    price,
                    daily: Arc::clone(self),
                }),
            }),
            None => inner,
        }
    }

    /// Today's spend and limits, every key with a budget or a spend.
    pub(crate) async fn report(&self) -> Result<BudgetReport, StoreError> {
        let today = self.today();
        let spent: BTreeMap<String, DaySpend> =
            self.ledger.spend_on(&today).await?.into_iter().collect();
        let mut keys: Vec<String> = self.limits.keys().cloned().collect();
        keys.extend(
            spent
                .keys()
                .filter(|k| !self.limits.contains_key(*k))
                .cloned(),
        );
        keys.sort();
        let rows = keys
            .into_iter()
            .map(|key| {
                let spend = spent.get(&key).copied().unwrap_or_default();
                let limit = self.limits.get(&key).copied().unwrap_or_default();
                let exhausted = exceeded(&key, &limit, &spend, &today).is_some();
                KeyBudget {
                    model_key: key,
                    tokens: spend.tokens,
                    cost_usd: spend.cost_usd,
                    calls: spend.calls,
                    max_tokens: limit.max_tokens,
                    max_cost_usd: limit.max_cost_usd,
                    exhausted,
                }
            })
            .collect();
        Ok(BudgetReport {
            day: today,
            timezone: self.zone_name(),
            keys: rows,
        })
    }
}

#[async_trait]
impl BudgetSource for Daily {
    async fn today(&self) -> Result<BudgetReport, StoreError> {
        self.report().await
    }
}

/// Why a key is out of budget, if it is.
fn exceeded(key: &str, limit: &DailyLimit, spend: &DaySpend, day: &str) -> Option<String> {
    if let Some(max) = limit.max_tokens
        && spend.tokens >= max
    {
        return Some(format!(
            "the daily budget of `{key}` is spent ({} of {max} tokens on {day})",
            spend.tokens
        ));
    }
    if let Some(max) = limit.max_cost_usd
        && spend.cost_usd >= max
    {
        return Some(format!(
            "the daily budget of `{key}` is spent (${:.4} of ${max:.4} on {day})",
            spend.cost_usd
        ));
    }
    None
}

/// What counts a call against a key's daily budget, owned, so it can outlive the call.
#[derive(Clone)]
struct Spender {
    key: String,
    limit: DailyLimit,
    price: Option<Price>,
    daily: Arc<Daily>,
}

impl Spender {
    async fn spend(&self, usage: fabric_domain::Usage) {
        let day = self.daily.today();
        let cost = self.price.map_or(0.0, |p| p.of(usage));
        match self
            .daily
            .ledger
            .add_spend(&day, &self.key, usage.total_tokens, cost)
            .await
        {
            Ok(total) => {
                if let Some(why) = exceeded(&self.key, &self.limit, &total, &day) {
                    self.daily.lock_spent().insert(self.key.clone(), (day, why));
                }
            }
            // The answer stands: a store that cannot count must not fail the run.
            Err(e) => {
                tracing::warn!(model_key = %self.key, "cannot record the daily spend: {e}")
            }
        }
    }
}

/// Counts the streamed text of a call, and when the call is dropped before its answer, spends
/// an estimate (four characters a token) of the prompt and of the text received.
struct CutOff<'a> {
    spender: Option<Arc<Spender>>,
    prompt_chars: usize,
    received: std::sync::atomic::AtomicUsize,
    inner: &'a dyn ChatObserver,
}

impl ChatObserver for CutOff<'_> {
    fn on_text_delta(&self, delta: &str) {
        self.received
            .fetch_add(delta.len(), std::sync::atomic::Ordering::Relaxed);
        self.inner.on_text_delta(delta);
    }
}

impl Drop for CutOff<'_> {
    fn drop(&mut self) {
        let Some(spender) = self.spender.take() else {
            return;
        };
        let received = self.received.load(std::sync::atomic::Ordering::Relaxed);
        if received == 0 {
            // Nothing streamed: a call cancelled before its answer began.
            return;
        }
        let usage = fabric_domain::Usage::from_counts(
            (self.prompt_chars / 4) as u64,
            (received / 4) as u64,
            None,
        );
        // Dropped inside the runtime (the run's task): the spend is recorded beside it, and
        // the process waits for it before it exits (`Daily::settle`).
        if tokio::runtime::Handle::try_current().is_ok() {
            let pending = spender.daily.pending.clone();
            pending.spawn(async move { spender.spend(usage).await });
        }
    }
}

/// A client whose calls are counted against its key's daily budget.
struct Metered {
    inner: Arc<dyn ChatClient>,
    // Shared with a cut-off call's guard, which may outlive the call.
    spender: Arc<Spender>,
}

#[async_trait]
impl ChatClient for Metered {
    async fn chat(
        &self,
        request: ChatRequest<'_>,
        observer: &dyn ChatObserver,
    ) -> Result<ChatResponse, ChatError> {
        // A streamed answer the run stops midway (its own budget) drops this future before
        // any usage arrives: the guard then counts what was sent and received (issue #26).
        let mut cut_off = CutOff {
            spender: Some(Arc::clone(&self.spender)),
            prompt_chars: request
                .messages
                .iter()
                .map(|m| m.content.as_deref().map_or(0, str::len))
                .sum::<usize>()
                + request.tools.byte_len(),
            received: std::sync::atomic::AtomicUsize::new(0),
            inner: observer,
        };
        let answer = self.inner.chat(request, &cut_off).await;
        cut_off.spender = None;
        if let Ok(response) = &answer
            && let Some(usage) = response.usage
        {
            self.spender.spend(usage).await;
        }
        answer
    }

    fn unavailable(&self) -> Option<String> {
        let today = self.spender.daily.today();
        match self.spender.daily.lock_spent().get(&self.spender.key) {
            Some((day, why)) if *day == today => Some(why.clone()),
            _ => None,
        }
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

    #[test]
    fn a_limit_is_spent_at_its_value() {
        let limit = DailyLimit {
            max_tokens: Some(100),
            max_cost_usd: None,
        };
        let mut spend = DaySpend {
            tokens: 99,
            ..DaySpend::default()
        };
        assert!(exceeded("cloud", &limit, &spend, "d").is_none());
        spend.tokens = 100;
        let why = exceeded("cloud", &limit, &spend, "d").unwrap_or_default();
        assert_eq!(
            why,
            "the daily budget of `cloud` is spent (100 of 100 tokens on d)"
        );
    }
}
