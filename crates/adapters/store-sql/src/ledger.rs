//! The daily spend per model key (`daily_spend`, schema 6): one row per day and key,
//! updated by an atomic upsert, so processes sharing the database never lose a call.

use async_trait::async_trait;
use fabric_core::ports::{DaySpend, SpendLedger, StoreError};

use crate::SqlStore;
use crate::db::{Arg, Row};

fn spend(row: &Row) -> Result<DaySpend, sqlx::Error> {
    Ok(DaySpend {
        tokens: u64::try_from(row.int("tokens")?).unwrap_or(0),
        cost_usd: row.real("cost_usd")?,
        calls: u64::try_from(row.int("calls")?).unwrap_or(0),
    })
}

#[async_trait]
impl SpendLedger for SqlStore {
    async fn add_spend(
        &self,
        day: &str,
        model_key: &str,
        tokens: u64,
        cost_usd: f64,
    ) -> Result<DaySpend, StoreError> {
        let rows = self
            .inner
            .db
            .fetch_all(
                "INSERT INTO daily_spend (day, model_key, tokens, cost_usd, calls) VALUES ($1, $2, $3, $4, 1) \
                 ON CONFLICT (day, model_key) DO UPDATE SET tokens = daily_spend.tokens + excluded.tokens, \
                 cost_usd = daily_spend.cost_usd + excluded.cost_usd, calls = daily_spend.calls + 1 \
                 RETURNING tokens, cost_usd, calls",
                vec![
                    Arg::from(day),
                    Arg::from(model_key),
                    Arg::Int(i64::try_from(tokens).unwrap_or(i64::MAX)),
                    Arg::Real(cost_usd),
                ],
            )
            .await
            .map_err(|e| self.err(&e))?;
        match rows.first() {
            Some(row) => spend(row).map_err(|e| self.err(&e)),
            None => Ok(DaySpend::default()),
        }
    }

    async fn spend_on(&self, day: &str) -> Result<Vec<(String, DaySpend)>, StoreError> {
        let rows = self
            .inner
            .db
            .fetch_all(
                "SELECT model_key, tokens, cost_usd, calls FROM daily_spend WHERE day = $1 ORDER BY model_key",
                vec![Arg::from(day)],
            )
            .await
            .map_err(|e| self.err(&e))?;
        rows.iter()
            .map(|row| Ok((row.text("model_key")?, spend(row)?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(|e| self.err(&e))
    }
}
