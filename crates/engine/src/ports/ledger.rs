//! What each model key spent per day, kept in the store so every process (the CLI, servers,
//! workers sharing PostgreSQL) counts against the same daily budget (`daily_budget`;
//! docs/QUALITY.md).

use async_trait::async_trait;

use super::StoreError;

/// What one model key spent on one day.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DaySpend {
    /// Prompt and completion tokens.
    pub tokens: u64,
    /// US dollars, at the key's `price_per_mtok` (0 without a price).
    pub cost_usd: f64,
    /// Model calls.
    pub calls: u64,
}

/// The daily spend per model key.
#[async_trait]
pub trait SpendLedger: Send + Sync {
    /// Adds one call's spend to `model_key` on `day` (`YYYY-MM-DD` in the budget's time
    /// zone) and returns the day's new total, in one atomic step.
    async fn add_spend(
        &self,
        day: &str,
        model_key: &str,
        tokens: u64,
        cost_usd: f64,
    ) -> Result<DaySpend, StoreError>;

    /// What each model key spent on `day`, by key.
    async fn spend_on(&self, day: &str) -> Result<Vec<(String, DaySpend)>, StoreError>;
}
