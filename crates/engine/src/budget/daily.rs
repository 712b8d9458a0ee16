//! Daily budgets per model key (`daily_budget:`; issue #11, docs/QUALITY.md): what each key
//! spent today is kept by a [`SpendLedger`] (the store), so every process sharing it counts
//! against one budget.
//!
//! A key's spend is recorded after each of its model calls ([`DailyBudget::meter`], a
//! decorator around its client, only for keys with a daily budget). When a run is prepared,
//! a key whose budget is spent is replaced by another or, for the cloud fallback, switched
//! off (`service::prepare`). A cloud fallback is also not taken once this process saw the
//! key's budget spent. A run under way is not stopped by the daily budget (its own
//! [`RunBudget`](super::RunBudget) stops runs).
//!
//! The day and its zone come from a [`DayClock`] the binary supplies (the configured zone,
//! and a fake clock for tests across midnight).

use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::Price;
use crate::ports::{
    ChatClient, ChatError, ChatObserver, ChatRequest, ChatResponse, DaySpend, SpendLedger,
    StoreError,
};

/// What one model key may spend per day (`daily_budget:`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DailyLimit {
    /// Tokens (prompt and completion) per day.
    pub max_tokens: Option<u64>,
    /// US dollars per day (needs the key's price).
    pub max_cost_usd: Option<f64>,
}

/// Which day it is where the budgets are kept.
pub trait DayClock: Send + Sync {
    /// Today, `YYYY-MM-DD` in the budgets' zone.
    fn today(&self) -> String;

    /// The zone, as shown to people (`local`, `UTC`, `+02:00`).
    fn zone_name(&self) -> String;
}

/// One key's day, for `fabric budget` and `GET /budget`.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyDay {
    /// The model key.
    pub model_key: String,
    /// What it spent today.
    pub spend: DaySpend,
    /// Its limits (none: no budget).
    pub limit: DailyLimit,
    /// Whether a limit is reached.
    pub exhausted: bool,
}

/// Today's spend and limits.
#[derive(Debug, Clone, PartialEq)]
pub struct DailyReport {
    /// `YYYY-MM-DD`.
    pub day: String,
    /// The zone the day is counted in.
    pub timezone: String,
    /// Every key with a budget or a spend, by name.
    pub keys: Vec<KeyDay>,
}

/// The daily budgets of one configuration over one ledger.
pub struct DailyBudget {
    ledger: Arc<dyn SpendLedger>,
    limits: BTreeMap<String, DailyLimit>,
    clock: Arc<dyn DayClock>,
    /// Per key, the day this process saw its budget spent, and why: every run of the
    /// process takes no more cloud fallbacks on it that day.
    spent: Mutex<BTreeMap<String, (String, String)>>,
    /// Spends of calls cut off midway, recorded beside the run; awaited at exit.
    pending: tokio_util::task::TaskTracker,
}

impl DailyBudget {
    /// The budgets `limits` (none: daily budgets are off) counted in `ledger`.
    pub fn new(
        ledger: Arc<dyn SpendLedger>,
        limits: BTreeMap<String, DailyLimit>,
        clock: Arc<dyn DayClock>,
    ) -> Arc<Self> {
        Arc::new(Self {
            ledger,
            limits,
            clock,
            spent: Mutex::new(BTreeMap::new()),
            pending: tokio_util::task::TaskTracker::new(),
        })
    }

    /// Waits until the spends of cut-off calls are recorded (at exit).
    pub async fn settle(&self) {
        self.pending.close();
        self.pending.wait().await;
    }

    /// Whether no key has a daily budget.
    pub fn is_off(&self) -> bool {
        self.limits.is_empty()
    }

    fn lock_spent(&self) -> MutexGuard<'_, BTreeMap<String, (String, String)>> {
        self.spent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Today, `YYYY-MM-DD` in the budget's zone.
    pub fn today(&self) -> String {
        self.clock.today()
    }

    /// The zone, as shown to people.
    pub fn zone_name(&self) -> String {
        self.clock.zone_name()
    }

    /// Why `key` may not be used today, when its daily budget is spent.
    pub async fn spent(&self, key: &str) -> Result<Option<String>, StoreError> {
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
    pub fn meter(
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
    pub async fn report(&self) -> Result<DailyReport, StoreError> {
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
        let keys = keys
            .into_iter()
            .map(|key| {
                let spend = spent.get(&key).copied().unwrap_or_default();
                let limit = self.limits.get(&key).copied().unwrap_or_default();
                let exhausted = exceeded(&key, &limit, &spend, &today).is_some();
                KeyDay {
                    model_key: key,
                    spend,
                    limit,
                    exhausted,
                }
            })
            .collect();
        Ok(DailyReport {
            day: today,
            timezone: self.zone_name(),
            keys,
        })
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
struct Spender {
    key: String,
    limit: DailyLimit,
    price: Option<Price>,
    daily: Arc<DailyBudget>,
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
    received: AtomicUsize,
    inner: &'a dyn ChatObserver,
}

impl ChatObserver for CutOff<'_> {
    fn on_text_delta(&self, delta: &str) {
        self.received.fetch_add(delta.len(), Ordering::Relaxed);
        self.inner.on_text_delta(delta);
    }
}

impl Drop for CutOff<'_> {
    fn drop(&mut self) {
        let Some(spender) = self.spender.take() else {
            return;
        };
        let received = self.received.load(Ordering::Relaxed);
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
        // the process waits for it before it exits (`DailyBudget::settle`).
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
            received: AtomicUsize::new(0),
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

#[cfg(test)]
mod tests {
    use super::*;

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
