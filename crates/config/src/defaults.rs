//! The built-in configuration: what a user gets with no config file at all.

use fabric_domain::SpecialistSpec;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::settings::{Backend, ModelConfig, Settings, ShellConfig, TaskForceMode};

const OLLAMA_URL: &str = "http://localhost:11434/v1";

pub(crate) fn ollama_model(model: &str, max_tokens: u32) -> ModelConfig {
    ModelConfig {
        base_url: OLLAMA_URL.to_owned(),
        model: model.to_owned(),
        backend: Backend::Ollama,
        api_key_env: None,
        temperature: 0.1,
        top_p: 0.9,
        max_tokens,
        timeout_s: 300,
        num_ctx: 16_384,
        max_retries: 3,
    }
}

/// The finish schema of the engineering specialist: what it hands back when done.
pub fn engineering_finish_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "summary": {"type": "string", "description": "What was done and how it was checked, in a few sentences."},
            "artifacts": {"type": "array", "items": {"type": "string"}, "description": "Paths of the files created or changed, relative to the workspace."},
            "next_steps": {"type": "array", "items": {"type": "string"}, "description": "What a person should do next, if anything."},
            "notes": {"type": "string", "description": "Caveats, assumptions, anything the user should know."}
        },
        "required": ["summary"],
        "additionalProperties": false
    })
}

const ENGINEERING_PROMPT: &str = "\
You are the engineering specialist of agent-fabric: a careful software engineer.
Work in small verified steps: plan briefly, make the change with the tools, then check it \
(read the file back, list the workspace, run the program or its tests with `shell`).
Rules:
- Every action is a tool call. `shell` takes a program and its arguments as a list, \
for example {\"cmd\": [\"ls\", \"-la\"]}; there is no shell syntax such as pipes or `&&`.
- Paths are relative to the workspace.
- Never deploy, publish or push anything; propose it in next_steps for a person to do.
- Do not delete or overwrite work you did not create.
When the task is done and checked, call finish_task with a short summary, the artifacts you \
created or changed, and next steps.";

/// The specialists every installation has.
pub fn builtin_specialists() -> Vec<SpecialistSpec> {
    vec![SpecialistSpec {
        id: "engineering".to_owned(),
        description: "Plans, implements, tests and reviews code and files in its workspace."
            .to_owned(),
        keywords: [
            "code",
            "implement",
            "build",
            "script",
            "program",
            "file",
            "test",
            "debug",
            "refactor",
            "function",
        ]
        .map(str::to_owned)
        .to_vec(),
        capabilities: ["code_execution", "file_io", "software_testing"]
            .map(str::to_owned)
            .to_vec(),
        system_prompt: ENGINEERING_PROMPT.to_owned(),
        tools: ["shell", "read_file", "write_file", "list_files"]
            .map(str::to_owned)
            .to_vec(),
        finish_schema: engineering_finish_schema(),
        model_key: None,
        may_write: true,
        needs_network: false,
    }]
}

impl Settings {
    /// The built-in settings.
    pub fn defaults() -> Self {
        let mut models = BTreeMap::new();
        models.insert("fast".to_owned(), ollama_model("qwen2.5:7b", 1200));
        models.insert("quality".to_owned(), ollama_model("qwen2.5:14b", 2400));
        Self {
            models,
            default_model_key: "quality".to_owned(),
            specialists: builtin_specialists(),
            default_specialist: "engineering".to_owned(),
            routing_model_key: "fast".to_owned(),
            task_force_mode: TaskForceMode::Sequential,
            local_llm_ensure_available: true,
            local_llm_start_cmd: vec!["ollama".to_owned(), "serve".to_owned()],
            local_llm_start_timeout_s: 90,
            auto_pull_if_missing: true,
            auto_pull_model: "qwen2.5:7b".to_owned(),
            max_steps: 40,
            network_allowed: false,
            shell: ShellConfig {
                allowed_commands: None,
                timeout_s: 120,
                pass_env: Vec::new(),
            },
            workspace: PathBuf::from(".fabric"),
            server: crate::ServerConfig::default(),
            source: None,
        }
    }
}
