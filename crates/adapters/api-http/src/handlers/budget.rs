//! `GET /budget`: what each model key with a daily budget spent today (`daily_budget`).

use async_trait::async_trait;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::ErrorBody;
use crate::{ApiError, AppState};

/// Today's spend per model key.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BudgetReport {
    /// The day, `YYYY-MM-DD` in `timezone`.
    pub day: String,
    /// Where the day begins: `local`, `UTC` or an offset such as `+02:00`.
    pub timezone: String,
    /// Every key with a daily budget or a spend today, by key.
    pub keys: Vec<KeyBudget>,
}

/// One model key's day.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KeyBudget {
    /// The model key.
    pub model_key: String,
    /// Tokens spent today (prompt and completion).
    pub tokens: u64,
    /// US dollars spent today, at the key's `price_per_mtok` (0 without one).
    pub cost_usd: f64,
    /// Model calls today.
    pub calls: u64,
    /// The daily token limit, if any.
    pub max_tokens: Option<u64>,
    /// The daily dollar limit, if any.
    pub max_cost_usd: Option<f64>,
    /// Whether the budget is spent: runs use another key, the cloud fallback is off.
    pub exhausted: bool,
}

/// What the server reports at `GET /budget`; the binary computes it over its store.
#[async_trait]
pub trait BudgetSource: Send + Sync {
    /// Today's spend, or why the store could not be read.
    async fn today(&self) -> Result<BudgetReport, fabric_core::StoreError>;
}

/// Today's spend per model key with a daily budget (`daily_budget`), and the limits.
#[utoipa::path(
    get,
    path = "/budget",
    tag = "server",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Today's spend and limits per model key", body = BudgetReport),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 500, description = "`internal`: the store could not be read", body = ErrorBody),
    )
)]
pub(crate) async fn budget(
    State(state): State<AppState>,
) -> Result<axum::Json<BudgetReport>, ApiError> {
    match &state.inner.budget {
        Some(source) => source
            .today()
            .await
            .map(axum::Json)
            // Whatever the store said, a 500 with its words, as before the error was typed.
            .map_err(|e| ApiError::Internal(e.to_string())),
        None => Ok(axum::Json(BudgetReport {
            day: String::new(),
            timezone: String::new(),
            keys: Vec::new(),
        })),
    }
}
