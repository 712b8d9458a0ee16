//! Progressive tool loading (`tool_loading: lazy`): the model starts with two meta-tools,
//! `search_tools` and `load_tool_schema`, besides `finish_task`. It searches the catalogue,
//! loads the schemas it needs, and each loaded tool stays callable for the rest of the run.
//! Small local models with short contexts can then use servers with hundreds of tools.
//!
//! It is one more [`ToolSource`] wrapped around the member's tools, so the loop does not
//! know about it: loading a schema bumps the version, and the next step offers the tool.
//!
//! Both meta-tools answer with the planner metadata of the contracts (seed 004: "meta-tools
//! expose this metadata for LLM planning"): prerequisites, next tools and the canonical
//! workflows a tool is a step of, so a model that plans with them learns which tools go
//! together before it loads them.

use async_trait::async_trait;
use fabric_domain::{ToolAnnotations, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::ports::{Tool, ToolContext, ToolError, ToolNotice, ToolSource, Withheld};
use crate::typed::{Typed, TypedTool};

/// The name of the search meta-tool.
pub(crate) const SEARCH_TOOLS: &str = "search_tools";
/// The name of the schema-loading meta-tool.
pub(crate) const LOAD_TOOL_SCHEMA: &str = "load_tool_schema";
/// Most matches `search_tools` returns when the call does not say.
const DEFAULT_MATCHES: usize = 8;

struct State {
    inner: Arc<dyn ToolSource>,
    loaded: Mutex<BTreeSet<String>>,
    generation: AtomicU64,
}

impl State {
    /// Marks a tool loaded; a new one changes the tool set's version.
    fn load(&self, name: &str) {
        let inserted = match self.loaded.lock() {
            Ok(mut loaded) => loaded.insert(name.to_owned()),
            Err(poisoned) => poisoned.into_inner().insert(name.to_owned()),
        };
        if inserted {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn loaded(&self) -> BTreeSet<String> {
        // A poisoned lock only means another thread panicked mid-insert; the set is intact.
        self.loaded
            .lock()
            .map(|l| l.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }
}

/// The lazy view of a member's tools.
pub struct LazyTools {
    state: Arc<State>,
    meta: Vec<Arc<dyn Tool>>,
}

impl LazyTools {
    /// Wraps the member's tools.
    pub fn new(inner: Arc<dyn ToolSource>) -> Self {
        let state = Arc::new(State {
            inner,
            loaded: Mutex::new(BTreeSet::new()),
            generation: AtomicU64::new(0),
        });
        let meta: Vec<Arc<dyn Tool>> = vec![
            Arc::new(Typed::new(SearchTools {
                state: state.clone(),
            })),
            Arc::new(Typed::new(LoadToolSchema {
                state: state.clone(),
            })),
        ];
        Self { state, meta }
    }

    /// The two meta-tools, for contract tests.
    pub fn meta_tools(&self) -> &[Arc<dyn Tool>] {
        &self.meta
    }
}

#[async_trait]
impl ToolSource for LazyTools {
    async fn start(&self, ctx: &ToolContext) -> Result<(), crate::ports::SourceError> {
        self.state.inner.start(ctx).await
    }

    fn version(&self) -> u64 {
        self.state
            .inner
            .version()
            .wrapping_add(self.state.generation.load(Ordering::Acquire))
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let loaded = self.state.loaded();
        let mut tools = self.meta.clone();
        tools.extend(
            self.state
                .inner
                .tools()
                .into_iter()
                .filter(|t| loaded.contains(&t.spec().name)),
        );
        tools
    }

    fn withheld(&self) -> Vec<Withheld> {
        let loaded = self.state.loaded();
        let mut withheld = self.state.inner.withheld();
        for tool in self.state.inner.tools() {
            if !loaded.contains(&tool.spec().name) {
                withheld.push((
                    tool.spec().name.clone(),
                    "its schema is not loaded yet; call load_tool_schema with its name first",
                ));
            }
        }
        withheld
    }

    fn take_notices(&self) -> Vec<ToolNotice> {
        self.state.inner.take_notices()
    }

    async fn noticed(&self) {
        self.state.inner.noticed().await;
    }

    /// A schema loaded before the run's process stopped is loaded again (by its tool's own
    /// name when the tool is known by now, as `load_tool_schema` would have done).
    fn replayed(&self, tool: &str, args: &Value) {
        if tool != LOAD_TOOL_SCHEMA {
            return;
        }
        let Some(name) = args.get("name").and_then(Value::as_str) else {
            return;
        };
        let tools = self.state.inner.tools();
        let name = tools
            .iter()
            .find(|t| t.spec().name == name || t.spec().answers_to(name))
            .map_or(name, |t| t.spec().name.as_str());
        self.state.load(name);
    }
}

/// The input of `search_tools`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchInput {
    /// Words describing what you need, e.g. "read file" or "create github issue".
    pub query: String,
    /// Most matches to return (default 8).
    #[serde(default)]
    pub limit: Option<u32>,
}

struct SearchTools {
    state: Arc<State>,
}

#[async_trait]
impl TypedTool for SearchTools {
    type Input = SearchInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_input::<SearchInput>(
            SEARCH_TOOLS,
            "Search the tools you can load, by words of what you need. Returns names, short descriptions, planner hints and the workflows (usual sequences of tools) they belong to; load a tool's schema with load_tool_schema before calling it.",
        )
        .example(json!({"query": "read a file"}))
        .annotate(ToolAnnotations {
            read_only: true,
            ..ToolAnnotations::default()
        })
        .plan(&[], &[LOAD_TOOL_SCHEMA])
    }

    async fn run(&self, input: SearchInput, _ctx: &ToolContext) -> Result<Value, ToolError> {
        let words: Vec<String> = input
            .query
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        let loaded = self.state.loaded();
        let mut scored: Vec<(usize, Arc<dyn Tool>)> = self
            .state
            .inner
            .tools()
            .into_iter()
            .map(|t| {
                let spec = t.spec();
                // A workflow's name is its steps' verbs ("search-fetch-cite"), so a query
                // for a step ("cite") finds the tools of that workflow.
                let workflows: Vec<&str> = spec
                    .planner
                    .workflows
                    .iter()
                    .map(|w| w.name.as_str())
                    .collect();
                let haystack =
                    format!("{} {} {}", spec.name, spec.description, workflows.join(" "))
                        .to_lowercase();
                let score = words
                    .iter()
                    .filter(|w| haystack.contains(w.as_str()))
                    .count();
                (score, t)
            })
            .filter(|(score, _)| *score > 0 || words.is_empty())
            .collect();
        // Best first; ties by name so the answer is stable.
        scored.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then_with(|| a.1.spec().name.cmp(&b.1.spec().name))
        });
        let limit = input
            .limit
            .map_or(DEFAULT_MATCHES, |l| l.clamp(1, 50) as usize);
        let total = scored.len();
        // Each workflow of the matches once, beside them: several matches are often steps
        // of the same workflow, and a small model's window should not hold it twice.
        let mut workflows = Map::new();
        let matches: Vec<Value> = scored
            .into_iter()
            .take(limit)
            .map(|(_, t)| {
                let spec = t.spec();
                let summary: String = spec.description.chars().take(200).collect();
                for w in &spec.planner.workflows {
                    workflows
                        .entry(w.name.clone())
                        .or_insert_with(|| json!(format!("{} ({})", w.sequence(), w.purpose)));
                }
                json!({
                    "name": spec.name,
                    "description": summary,
                    "read_only": spec.annotations.read_only,
                    "prerequisites": spec.planner.prerequisites,
                    "next_tools": spec.planner.next_tools,
                    "workflows": spec.planner.workflows.iter().map(|w| &w.name).collect::<Vec<_>>(),
                    "loaded": loaded.contains(&spec.name),
                })
            })
            .collect();
        if matches.is_empty() {
            return Ok(json!({
                "matches": [],
                "note": "no tool matches these words; try other or fewer words",
            }));
        }
        let mut answer = json!({"matches": matches, "total_matches": total});
        if !workflows.is_empty() {
            answer["workflows"] = Value::Object(workflows);
        }
        Ok(answer)
    }
}

/// The input of `load_tool_schema`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoadInput {
    /// The tool's name, as `search_tools` returned it.
    pub name: String,
}

struct LoadToolSchema {
    state: Arc<State>,
}

#[async_trait]
impl TypedTool for LoadToolSchema {
    type Input = LoadInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_input::<LoadInput>(
            LOAD_TOOL_SCHEMA,
            "Load the full schema of a tool found with search_tools. From your next call on, the tool is callable directly, for the rest of the task.",
        )
        .example(json!({"name": "read_file"}))
        .annotate(ToolAnnotations {
            read_only: true,
            ..ToolAnnotations::default()
        })
        .plan(&[SEARCH_TOOLS], &[])
    }

    async fn run(&self, input: LoadInput, _ctx: &ToolContext) -> Result<Value, ToolError> {
        let tools = self.state.inner.tools();
        let Some(tool) = tools
            .iter()
            .find(|t| t.spec().name == input.name)
            .or_else(|| tools.iter().find(|t| t.spec().answers_to(&input.name)))
        else {
            let why = self
                .state
                .inner
                .withheld()
                .into_iter()
                .find(|(name, _)| *name == input.name)
                .map(|(_, why)| why);
            return Err(ToolError::InvalidArguments(match why {
                Some(why) => format!("tool `{}` cannot be loaded in this run: {why}", input.name),
                None => format!(
                    "no tool `{}`; call search_tools to find the right name",
                    input.name
                ),
            }));
        };
        let spec = tool.spec();
        self.state.load(&spec.name);
        let mut answer = json!({
            "name": spec.name,
            "description": spec.model_description(),
            "input_schema": spec.input_schema,
            "note": format!("`{}` is loaded: call it directly from now on", spec.name),
        });
        // The description carries prerequisites and next tools but not workflows (they span
        // several tools; `ToolSpec::model_description`), so they come here, one line each.
        if !spec.planner.workflows.is_empty() {
            answer["workflows"] = spec.planner.workflows.iter().map(|w| w.summary()).collect();
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::budget::{Lineage, RunBudget};
    use crate::ports::StaticTools;
    use fabric_domain::{RunId, Workflow};
    use tokio_util::sync::CancellationToken;

    struct Named(ToolSpec);

    #[async_trait]
    impl Tool for Named {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<Value, ToolError> {
            Ok(Value::Null)
        }
    }

    fn tool(name: &str, description: &str, workflows: &[&Workflow]) -> Arc<dyn Tool> {
        let spec = ToolSpec::with_schema(name, description, json!({"type": "object"})).unwrap();
        let spec = workflows
            .iter()
            .fold(spec, |spec, w| spec.workflow((*w).clone()));
        Arc::new(Named(spec))
    }

    fn ctx() -> ToolContext {
        ToolContext {
            approved: false,
            sampler: None,
            live: None,
            run_id: RunId::parse("r1").unwrap(),
            workspace: std::env::temp_dir(),
            network_allowed: false,
            cancel: CancellationToken::new(),
            lineage: Lineage::root(Arc::new(RunBudget::new(2, None, None, None))),
        }
    }

    fn lazy() -> LazyTools {
        let cite = Workflow::new(
            "search-fetch-cite",
            "answer from the web",
            &[&["web_search"], &["fetch_url"], &["finish_task"]],
        );
        let tools = vec![
            tool("web_search", "Search the web.", &[&cite]),
            tool("fetch_url", "Fetch a web page.", &[&cite]),
            tool("read_file", "Read a file.", &[]),
        ];
        LazyTools::new(Arc::new(StaticTools::new(tools, Vec::new())))
    }

    async fn call(lazy: &LazyTools, name: &str, args: Value) -> Value {
        let meta = lazy.meta_tools().iter().find(|t| t.spec().name == name);
        meta.unwrap().call(args, &ctx()).await.unwrap()
    }

    #[tokio::test]
    async fn issue_26_search_tools_names_each_workflow_of_its_matches_once() {
        let lazy = lazy();
        let found = call(&lazy, SEARCH_TOOLS, json!({"query": "web"})).await;
        assert_eq!(found["total_matches"], 2, "{found}");
        for m in found["matches"].as_array().unwrap() {
            assert_eq!(m["workflows"], json!(["search-fetch-cite"]), "{m}");
        }
        assert_eq!(
            found["workflows"],
            json!({"search-fetch-cite": "web_search → fetch_url → finish_task (answer from the web)"})
        );
        // A step's verb finds the tools of the workflow; a tool of none has none.
        let cite = call(&lazy, SEARCH_TOOLS, json!({"query": "cite"})).await;
        assert_eq!(cite["total_matches"], 2, "{cite}");
        let read = call(&lazy, SEARCH_TOOLS, json!({"query": "file"})).await;
        assert_eq!(read["matches"][0]["name"], "read_file");
        assert_eq!(read["matches"][0]["workflows"], json!([]));
        assert!(read.get("workflows").is_none(), "{read}");
    }

    #[tokio::test]
    async fn issue_26_load_tool_schema_gives_the_workflows_of_the_tool() {
        let lazy = lazy();
        let loaded = call(&lazy, LOAD_TOOL_SCHEMA, json!({"name": "fetch_url"})).await;
        assert_eq!(
            loaded["workflows"],
            json!([
                "search-fetch-cite: web_search → fetch_url → finish_task (answer from the web)"
            ])
        );
        let plain = call(&lazy, LOAD_TOOL_SCHEMA, json!({"name": "read_file"})).await;
        assert!(plain.get("workflows").is_none(), "{plain}");
    }
}
