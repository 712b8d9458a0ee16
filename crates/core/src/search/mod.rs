//! Search over past runs ("what did we do last time?"): by text always, and by meaning when
//! an embedding model is configured. Runs are embedded when they end, off the run's critical
//! path; a run whose embedding failed (the server was down) is still found by text and is
//! embedded later ([`RunSearch::embed_missing`], `fabric index rebuild`, `fabric serve` on
//! start).
//!
//! The store ranks ([`RunCatalog::search`]); this module decides what to ask for: text only,
//! hybrid (text and vectors, the default when embeddings exist), or vectors only
//! (`--semantic`), and turns the query into a vector with the same model the runs were
//! embedded with.

use async_trait::async_trait;
use fabric_domain::{RunId, RunStatus};
use serde::Serialize;
use std::sync::Arc;
use thiserror::Error;

use crate::ports::{
    EmbeddingClient, QueryEmbedding, RunCatalog, SearchHit, SearchQuery, StoreError,
};
use crate::service::RunEnded;

mod tool;

pub use tool::{
    SEARCH_RUNS_TOOL, SearchRunsInput, SearchRunsTool, results_json, search_runs_spec,
    since_parameter,
};

/// Runs embedded per call when catching up, so one slow batch never holds much.
const EMBED_BATCH: usize = 32;

/// The embedding model runs and queries are embedded with.
#[derive(Clone)]
pub struct Embedding {
    /// Its server.
    pub client: Arc<dyn EmbeddingClient>,
    /// The model's name on that server.
    pub model: String,
    /// The similarity a run needs to be a match by meaning (`run_index.min_similarity`):
    /// every run has some similarity to any query, so without a floor a search for
    /// nonsense lists them all.
    pub min_similarity: f64,
}

/// What a person or a specialist asks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchRequest {
    /// The words.
    pub text: String,
    /// Rank by meaning only (`--semantic`); needs an embedding model.
    pub semantic: bool,
    /// Only runs this specialist worked on.
    pub specialist: Option<String>,
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs started at or after this time (seconds since the Unix epoch).
    pub since: Option<f64>,
    /// At most this many hits.
    pub limit: usize,
}

/// How the hits were ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// Full-text rank only.
    Text,
    /// Full-text and embedding ranks fused.
    Hybrid,
    /// Embedding similarity only.
    Semantic,
}

/// The hits, and how they were found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchResults {
    /// How they were ranked.
    pub mode: SearchMode,
    /// Best first.
    pub hits: Vec<SearchHit>,
    /// Why the mode is not what was asked for (the embedding server did not answer).
    pub note: Option<String>,
}

/// Why a search could not be answered.
#[derive(Debug, Error)]
pub enum SearchError {
    /// The request is wrong as given.
    #[error("{0}")]
    Invalid(String),
    /// A semantic search whose query could not be embedded.
    #[error(
        "the embedding model `{model}` could not embed the query: {detail}; search without --semantic to rank by text"
    )]
    EmbeddingUnavailable {
        /// The model.
        model: String,
        /// What went wrong.
        detail: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The embedding model did not embed a text, in its words (a run left findable by text).
    #[error("{0}")]
    Embedding(String),
}

impl SearchError {
    /// What the caller must do: fix the request, search again later or by text (the
    /// embedding model did not answer), or what the store says.
    pub fn remedy(&self) -> crate::Remedy {
        match self {
            Self::Invalid(_) => crate::Remedy::FixInput,
            Self::EmbeddingUnavailable { .. } | Self::Embedding(_) => crate::Remedy::Retry,
            Self::Store(e) => e.remedy(),
        }
    }
}

/// How a catch-up went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EmbedReport {
    /// Runs embedded.
    pub embedded: usize,
    /// Why it stopped early (the server failed), if it did.
    pub stopped: Option<String>,
}

/// Search over a catalog, with an optional embedding model.
#[derive(Clone)]
pub struct RunSearch {
    catalog: Arc<dyn RunCatalog>,
    embedding: Option<Embedding>,
}

impl RunSearch {
    /// Search over `catalog`; semantic when `embedding` is given.
    pub fn new(catalog: Arc<dyn RunCatalog>, embedding: Option<Embedding>) -> Self {
        Self { catalog, embedding }
    }

    /// The catalog searched.
    pub fn catalog(&self) -> &Arc<dyn RunCatalog> {
        &self.catalog
    }

    /// Whether runs and queries are embedded.
    pub fn is_semantic(&self) -> bool {
        self.embedding.is_some()
    }

    /// Finds runs: hybrid when an embedding model is configured and answers, text
    /// otherwise, vectors only when asked.
    pub async fn search(&self, request: &SearchRequest) -> Result<SearchResults, SearchError> {
        let text = request.text.trim();
        if text.is_empty() {
            return Err(SearchError::Invalid(
                "the search is empty; give the words to look for".to_owned(),
            ));
        }
        if request.limit == 0 {
            return Err(SearchError::Invalid(
                "the limit must be at least 1".to_owned(),
            ));
        }
        let mut query = SearchQuery {
            text: text.to_owned(),
            embedding: None,
            semantic_only: request.semantic,
            specialist: request.specialist.clone(),
            status: request.status,
            since: request.since,
            limit: request.limit,
        };
        let (mode, note) = match &self.embedding {
            None if request.semantic => {
                return Err(SearchError::Invalid(
                    "semantic search needs an embedding model: set `run_index.embedding_model_key` in the config to a model key whose server makes embeddings".to_owned(),
                ));
            }
            None => (SearchMode::Text, None),
            Some(embedding) => match embed_one(embedding, text).await {
                Ok(vector) => {
                    query.embedding = Some(QueryEmbedding {
                        model: embedding.model.clone(),
                        vector,
                    });
                    let mode = if request.semantic {
                        SearchMode::Semantic
                    } else {
                        SearchMode::Hybrid
                    };
                    (mode, None)
                }
                Err(detail) if request.semantic => {
                    return Err(SearchError::EmbeddingUnavailable {
                        model: embedding.model.clone(),
                        detail: detail.to_string(),
                    });
                }
                Err(detail) => (
                    SearchMode::Text,
                    Some(format!(
                        "the embedding model `{}` did not answer ({detail}); ranked by text only",
                        embedding.model
                    )),
                ),
            },
        };
        // Some hits may fall under the floor: ask for more, to still give `limit`.
        if let (Some(_), Some(_)) = (&query.embedding, &self.embedding) {
            query.limit = request.limit.saturating_mul(2).min(request.limit + 200);
        }
        let mut hits = self.catalog.search(&query).await.map_err(|e| match e {
            // The store's own words for a query it cannot run (only punctuation, say).
            StoreError::InvalidQuery(message) => SearchError::Invalid(message),
            other => SearchError::Store(other),
        })?;
        if let (Some(_), Some(embedding)) = (&query.embedding, &self.embedding) {
            hits.retain(|hit| {
                hit.text_score.is_some()
                    || hit
                        .semantic_score
                        .is_some_and(|s| s >= embedding.min_similarity)
            });
            hits.truncate(request.limit);
        }
        Ok(SearchResults { mode, hits, note })
    }

    /// Embeds one ended run (its prompt and result). `Ok(false)` when no embedding model is
    /// configured.
    pub(crate) async fn embed_run(&self, id: &RunId) -> Result<bool, SearchError> {
        let Some(embedding) = &self.embedding else {
            return Ok(false);
        };
        let run = self.catalog.get_run(id).await?;
        let vector = embed_one(embedding, &run.embedding_text()).await?;
        self.catalog
            .put_embedding(id, &embedding.model, &vector)
            .await?;
        Ok(true)
    }

    /// Embeds ended runs that have no embedding yet, in batches, until none is left, `max`
    /// runs are done, or the server fails (reported, never an error: the runs stay findable
    /// by text and are embedded on the next catch-up).
    pub async fn embed_missing(&self, max: usize) -> Result<EmbedReport, StoreError> {
        let mut report = EmbedReport::default();
        let Some(embedding) = &self.embedding else {
            return Ok(report);
        };
        while report.embedded < max {
            let batch = EMBED_BATCH.min(max - report.embedded);
            let missing = self
                .catalog
                .missing_embeddings(&embedding.model, batch)
                .await?;
            if missing.is_empty() {
                break;
            }
            let texts: Vec<String> = missing.iter().map(|(_, text)| text.clone()).collect();
            let vectors = match embedding.client.embed(&embedding.model, &texts).await {
                Ok(vectors) if vectors.len() == texts.len() => vectors,
                Ok(vectors) => {
                    report.stopped = Some(format!(
                        "the embedding model `{}` answered {} vectors for {} texts",
                        embedding.model,
                        vectors.len(),
                        texts.len()
                    ));
                    break;
                }
                Err(e) => {
                    report.stopped = Some(e.to_string());
                    break;
                }
            };
            for ((id, _), vector) in missing.iter().zip(&vectors) {
                self.catalog
                    .put_embedding(id, &embedding.model, vector)
                    .await?;
                report.embedded += 1;
            }
        }
        Ok(report)
    }
}

async fn embed_one(embedding: &Embedding, text: &str) -> Result<Vec<f32>, SearchError> {
    let mut vectors = embedding
        .client
        .embed(&embedding.model, &[text.to_owned()])
        .await
        .map_err(|e| SearchError::Embedding(e.to_string()))?;
    match vectors.pop() {
        Some(vector) if vectors.is_empty() && !vector.is_empty() => Ok(vector),
        _ => Err(SearchError::Embedding(format!(
            "the embedding model `{}` did not answer one vector",
            embedding.model
        ))),
    }
}

/// Each ended run is embedded in the background; a failure is logged and left for the next
/// catch-up.
#[async_trait]
impl RunEnded for RunSearch {
    async fn run_ended(&self, id: RunId) {
        match self.embed_run(&id).await {
            Ok(_) => {}
            Err(error) => tracing::warn!(
                run_id = %id,
                %error,
                "run not embedded; it is found by text, and embedded by `fabric index rebuild` or when `fabric serve` starts"
            ),
        }
    }
}
