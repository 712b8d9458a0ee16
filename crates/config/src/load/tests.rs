use super::*;
use crate::settings::{Backend, SearchProvider};

fn load(name: &str, text: &str) -> Result<Settings, ConfigError> {
    Settings::from_text(text, Path::new(name))
}

fn err(name: &str, text: &str) -> String {
    load(name, text).unwrap_err().to_string()
}

#[test]
fn no_file_gives_defaults() {
    let s = Settings::load(None).unwrap();
    assert_eq!(s.models["quality"].model, "qwen2.5:14b");
    assert_eq!(s.models["fast"].base_url, "http://localhost:11434/v1");
    assert_eq!(s.default_specialist, "engineering");
    assert_eq!(s.max_steps, 40);
    assert!(!s.network_allowed);
}

#[test]
fn missing_file_is_an_error_naming_it() {
    let e = Settings::load(Some(Path::new("/nonexistent/fabric.yaml"))).unwrap_err();
    assert!(
        e.to_string()
            .contains("/nonexistent/fabric.yaml does not exist"),
        "{e}"
    );
}

#[test]
fn yaml_and_json_merge_over_defaults() {
    let yaml = "models:\n  fast:\n    base_url: http://127.0.0.1:9/v1\n    model: tiny\n    backend: openai\nmax_steps: 7\n";
    let s = load("c.yaml", yaml).unwrap();
    assert_eq!(s.models["fast"].model, "tiny");
    assert_eq!(s.models["fast"].backend, Backend::OpenAi);
    assert_eq!(s.models["fast"].temperature, 0.1);
    assert_eq!(s.max_steps, 7);
    let json = r#"{"models": {"local": {"model": "m", "base_url": "http://x/v1"}}, "default_model_key": "local"}"#;
    let s = load("c.json", json).unwrap();
    assert_eq!(s.default_model_key, "local");
    assert_eq!(s.models["local"].backend, Backend::Ollama);
}

#[test]
fn unknown_keys_are_named_with_their_path() {
    let e = err("c.yaml", "modles: {}\n");
    assert!(
        e.contains("c.yaml: `(top level)`") || e.contains("modles"),
        "{e}"
    );
    assert!(e.contains("unknown field `modles`"), "{e}");
    let e = err("c.yaml", "models:\n  fast:\n    temprature: 0.5\n");
    assert!(
        e.contains("`models.fast.temprature`") && e.contains("expected one of `base_url`"),
        "{e}"
    );
}

#[test]
fn bad_values_name_key_and_allowed_range() {
    let e = err("c.yaml", "models:\n  fast:\n    temperature: 7\n");
    assert_eq!(
        e,
        "c.yaml: `models.fast.temperature`: must be between 0 and 2, got 7"
    );
    let e = err("c.yaml", "max_steps: 0\n");
    assert_eq!(e, "c.yaml: `max_steps`: must be between 1 and 1000, got 0");
    let e = err("c.yaml", "task_force_mode: both\n");
    assert!(
        e.contains("must be `sequential` or `parallel`, got `both`"),
        "{e}"
    );
    let e = err("c.yaml", "models:\n  fast:\n    backend: llamafile\n");
    assert!(
        e.contains(
            "must be `ollama`, `openai`, `anthropic` or `openai-responses`, got `llamafile`"
        ),
        "{e}"
    );
    let e = err("c.yaml", "max_steps: many\n");
    assert!(e.contains("`max_steps`"), "{e}");
    let e = err("c.yaml", "default_model_key: huge\n");
    assert!(
        e.contains("no model `huge`; the model keys are: fast, quality"),
        "{e}"
    );
    let e = err(
        "c.yaml",
        "models:\n  x:\n    base_url: localhost:1\n    model: m\n",
    );
    assert!(e.contains("must start with http://"), "{e}");
}

#[test]
fn syntax_errors_say_format_and_place() {
    let e = err("c.json", "{\"models\": ");
    assert!(
        e.contains("is not valid JSON") && e.contains("line 1"),
        "{e}"
    );
    let e = err("c.yaml", "models: [unclosed\n");
    assert!(e.contains("is not valid YAML"), "{e}");
}

#[test]
fn specialists_override_and_add_and_tools_are_checked() {
    let yaml = "specialists:\n  engineering:\n    tools: [read_file]\n  auditor:\n    description: Reviews code.\n    system_prompt: Review.\n    tools: [read_file, nope]\n";
    let s = load("c.yaml", yaml).unwrap();
    assert_eq!(
        s.specialist("engineering").unwrap().tools,
        vec!["read_file"]
    );
    assert!(
        s.specialist("engineering")
            .unwrap()
            .system_prompt
            .contains("engineering")
    );
    let e = s
        .check_tools(&[
            "read_file",
            "write_file",
            "web_search",
            "fetch_url",
            "list_files",
            "search_runs",
        ])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("specialists.auditor.tools[1]") && e.contains("unknown tool `nope`"),
        "{e}"
    );
    let e = err("c.yaml", "specialists:\n  x:\n    description: d\n");
    assert!(e.contains("needs a `system_prompt`"), "{e}");
    let e = err(
        "c.yaml",
        "specialists:\n  engineering:\n    finish_schema: {type: string}\n",
    );
    assert!(e.contains("finish_schema"), "{e}");
}

#[test]
fn empty_yaml_file_is_defaults() {
    let s = load("c.yaml", "").unwrap();
    assert_eq!(s.max_steps, 40);
}

const TOOLS: &[&str] = &[
    "shell",
    "read_file",
    "write_file",
    "list_files",
    "web_search",
    "fetch_url",
    "search_runs",
];

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), text).unwrap();
}

fn md(description: &str, prompt: &str) -> String {
    format!("---\ndescription: {description}\ntools: Read, Glob\n---\n{prompt}\n")
}

#[test]
fn precedence_builtin_user_project_config() {
    let tmp = tempfile::tempdir().unwrap();
    let user = tmp.path().join("user");
    let workspace = tmp.path().join("ws");
    write(&user, "auditor.md", &md("from user", "user prompt"));
    write(&user, "only_user.md", &md("only user", "p"));
    write(&user, "engineering.md", &md("user engineering", "p"));
    write(
        &workspace.join("specialists"),
        "auditor.md",
        &md("from project", "project prompt"),
    );
    let config = tmp.path().join("fabric.yaml");
    std::fs::write(&config, "specialists:\n  auditor:\n    model_key: fast\n").unwrap();
    let s = Settings::load_with(&LoadOptions {
        config: Some(config.clone()),
        workspace: Some(workspace.clone()),
        user_dir: Some(user.clone()),
        store_url: None,
    })
    .unwrap();
    s.check_tools(TOOLS).unwrap();
    let auditor = s.specialist("auditor").unwrap();
    assert_eq!(auditor.description, "from project", "project over user");
    assert_eq!(auditor.system_prompt, "project prompt");
    assert_eq!(
        auditor.model_key.as_deref(),
        Some("fast"),
        "config over files"
    );
    assert_eq!(auditor.tools, ["read_file", "list_files"]);
    let sources = &s.specialist_origin("auditor").unwrap().sources;
    assert_eq!(
        sources,
        &[
            SpecialistSource::File {
                path: user.join("auditor.md")
            },
            SpecialistSource::File {
                path: workspace.join("specialists").join("auditor.md")
            },
            SpecialistSource::Config { path: config },
        ]
    );
    assert_eq!(s.specialist("only_user").unwrap().description, "only user");
    assert_eq!(
        s.specialist("engineering").unwrap().description,
        "user engineering"
    );
    assert_eq!(
        s.specialist_ids()[0],
        "engineering",
        "a replaced built-in keeps its place"
    );
    assert_eq!(s.specialist_dirs, [user, workspace.join("specialists")]);
}

#[test]
fn specialist_dirs_replace_the_defaults_and_must_exist() {
    let tmp = tempfile::tempdir().unwrap();
    let mine = tmp.path().join("mine");
    write(&mine, "a.md", &md("a", "p"));
    let config = tmp.path().join("fabric.yaml");
    std::fs::write(&config, format!("specialist_dirs: [{}]\n", mine.display())).unwrap();
    let options = LoadOptions {
        config: Some(config.clone()),
        workspace: None,
        user_dir: Some(tmp.path().join("user")),
        store_url: None,
    };
    let s = Settings::load_with(&options).unwrap();
    assert!(s.specialist("a").is_some());
    assert_eq!(s.specialist_dirs, [mine]);
    std::fs::write(&config, "specialist_dirs: [/nonexistent/specs]\n").unwrap();
    let e = Settings::load_with(&options).unwrap_err().to_string();
    assert!(
        e.contains("/nonexistent/specs") && e.contains("does not exist"),
        "{e}"
    );
}

#[test]
fn broken_files_and_duplicates_are_errors_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ws").join("specialists");
    write(&dir, "a.md", "---\nname: same\ndescription: d\n---\np\n");
    write(&dir, "b.md", "---\nname: same\ndescription: d\n---\np\n");
    let options = LoadOptions {
        config: None,
        workspace: Some(tmp.path().join("ws")),
        user_dir: None,
        store_url: None,
    };
    let e = Settings::load_with(&options).unwrap_err().to_string();
    assert!(
        e.contains("b.md") && e.contains("also defined in") && e.contains("a.md"),
        "{e}"
    );
    std::fs::remove_file(dir.join("b.md")).unwrap();
    write(
        &dir,
        "c.md",
        "---\ndescription: d\nfinish_schema: {type: object, required: [x]}\n---\np\n",
    );
    let e = Settings::load_with(&options).unwrap_err().to_string();
    assert!(
        e.contains("c.md") && e.contains("`finish_schema`") && e.contains("`x`"),
        "{e}"
    );
    std::fs::write(
        dir.join("c.md"),
        "---\ndescription: d\ntools: [read_file, mcp__*]\n---\np\n",
    )
    .unwrap();
    let s = Settings::load_with(&options).unwrap();
    let e = s.check_tools(TOOLS).unwrap_err().to_string();
    assert!(
        e.contains("c.md: `tools[1]`") && e.contains("mcp__<server>__<tool>"),
        "{e}"
    );
}

#[test]
fn builtins_include_research_with_citations() {
    let s = Settings::defaults();
    s.check_tools(TOOLS).unwrap();
    let research = s.specialist("research").unwrap();
    assert_eq!(
        research.finish_schema["required"],
        serde_json::json!(["executive_summary"])
    );
    assert!(
        research.finish_schema["properties"]["citations"]["items"]["properties"]["url"].is_object()
    );
    let enterprise = s.specialist("enterprise_research").unwrap();
    // Issue #26: the run index exists; enterprise research searches past runs.
    assert!(enterprise.tools.iter().any(|t| t == "search_runs"));
    assert!(
        !enterprise
            .limitations
            .iter()
            .any(|l| l.contains("run index"))
    );
    for spec in &s.specialists {
        fabric_domain::check_finish_schema(&spec.finish_schema).unwrap();
    }
}

#[test]
fn web_search_and_fetch_settings_are_validated() {
    let s = load(
        "c.yaml",
        "web_search:\n  provider: brave\nfetch_url:\n  max_redirects: 2\n",
    )
    .unwrap();
    assert_eq!(s.web_search.provider, SearchProvider::Brave);
    assert_eq!(s.web_search.base_url, "https://api.search.brave.com");
    assert_eq!(
        s.web_search.api_key_env.as_deref(),
        Some("BRAVE_SEARCH_API_KEY")
    );
    assert_eq!(s.fetch_url.max_redirects, 2);
    let e = err("c.yaml", "web_search:\n  provider: google\n");
    assert!(
        e.contains("`web_search.provider`") && e.contains("`searxng` or `brave`"),
        "{e}"
    );
    let e = err("c.yaml", "web_search:\n  base_url: localhost:8080\n");
    assert!(e.contains("http://"), "{e}");
    let e = err("c.yaml", "fetch_url:\n  max_download_bytes: 10\n");
    assert!(e.contains("fetch_url.max_download_bytes"), "{e}");
}

#[test]
fn routing_and_parallel_limit_are_validated() {
    let s = Settings::from_text(
        "routing: llm\ntask_force_max_parallel: 4\ntask_force_mode: parallel\n",
        std::path::Path::new("f.yaml"),
    )
    .unwrap();
    assert_eq!(s.routing, crate::Routing::Llm);
    assert_eq!(s.task_force_max_parallel, 4);
    assert!(s.inert_keys().is_empty());
    let err = Settings::from_text("routing: magic\n", std::path::Path::new("f.yaml")).unwrap_err();
    assert!(
        err.to_string().contains("must be `keyword` or `llm`"),
        "{err}"
    );
    let err = Settings::from_text(
        "task_force_max_parallel: 0\n",
        std::path::Path::new("f.yaml"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("between 1 and 64"), "{err}");
}
#[test]
fn loader_variables_cannot_be_passed_to_tools() {
    let e = err("c.yaml", "shell:\n  pass_env: [CARGO_HOME, LD_PRELOAD]\n");
    assert!(
        e.contains("`shell.pass_env[1]`") && e.contains("LD_PRELOAD"),
        "{e}"
    );
}

#[test]
fn issue_11_complexity_routing_and_cloud_fallback_are_checked() {
    let s = load(
        "c.yaml",
        "complexity_routing: {simple: fast, complex: quality}\ncloud_fallback: {model_key: quality}\n",
    )
    .unwrap();
    let routing = s.complexity_routing.unwrap();
    assert_eq!((routing.threshold, routing.simple.as_str()), (60, "fast"));
    let fallback = s.cloud_fallback.unwrap();
    assert!(fallback.no_tool_calls && fallback.malformed_args);
    assert_eq!(fallback.max_per_run, 3);
    let e = err(
        "c.yaml",
        "complexity_routing: {threshold: 101, simple: fast, complex: quality}\n",
    );
    assert!(
        e.contains("`complexity_routing.threshold`: must be between 0 and 100"),
        "{e}"
    );
    let e = err("c.yaml", "complexity_routing: {simple: fast}\n");
    assert!(
        e.contains("`complexity_routing.complex`: must name a key"),
        "{e}"
    );
    let e = err("c.yaml", "cloud_fallback: {model_key: gpt}\n");
    assert!(
        e.contains("`cloud_fallback.model_key`: no model `gpt`"),
        "{e}"
    );
    let s = load(
        "c.yaml",
        "cloud_fallback: {model_key: quality, policy: [critic_rejected]}\n",
    )
    .unwrap();
    let fallback = s.cloud_fallback.unwrap();
    assert!(fallback.critic_rejected && !fallback.no_tool_calls);
    let e = err(
        "c.yaml",
        "cloud_fallback: {model_key: quality, policy: [when_sad]}\n",
    );
    assert!(
        e.contains("`cloud_fallback.policy[0]`") && e.contains("`critic_rejected`, got `when_sad`"),
        "{e}"
    );
    let e = err(
        "c.yaml",
        "cloud_fallback: {model_key: quality, policy: [sometimes]}\n",
    );
    assert!(
        e.contains(
            "must be `no_tool_calls`, `malformed_args` or `critic_rejected`, got `sometimes`"
        ),
        "{e}"
    );
}

#[test]
fn issue_14_one_server_has_one_request_limit() {
    let e = err(
        "c.yaml",
        "models:\n  a: {base_url: \"http://localhost:11434\", model: m, max_concurrent_requests: 2}\n  b: {base_url: \"http://127.0.0.1:11434/v1\", model: m, backend: openai, max_concurrent_requests: 3}\n",
    );
    assert!(
        e.contains("`models.b.max_concurrent_requests`") && e.contains("a server has one limit"),
        "{e}"
    );
    let s = load(
        "c.yaml",
        "models:\n  a: {base_url: \"http://localhost:11434\", model: m}\n  c: {base_url: \"http://gpu-box:8000/v1\", model: m, backend: openai}\n",
    )
    .unwrap();
    assert_eq!(
        s.models["a"].concurrent_requests(),
        Some(crate::DEFAULT_OLLAMA_PARALLEL)
    );
    // Issue #26: every backend has a limit by default, so 1,000 runs in flight do not each
    // hold a connection to a server that serves a few at a time.
    assert_eq!(
        s.models["c"].concurrent_requests(),
        Some(crate::DEFAULT_MAX_CONCURRENT_REQUESTS)
    );
}

/// Every key holding a closed set is read by serde through the domain's enum, and a word
/// outside the set is named with its key and every word of the set, as before issue #28.
#[test]
fn issue_28_every_closed_set_key_names_its_key_and_words() {
    let cases = [
        ("routing: fast\n", "routing", "`keyword` or `llm`", "fast"),
        (
            "task_force_mode: both\n",
            "task_force_mode",
            "`sequential` or `parallel`",
            "both",
        ),
        (
            "context_compaction: keep\n",
            "context_compaction",
            "`drop` or `summarize`",
            "keep",
        ),
        (
            "sandbox: loose\n",
            "sandbox",
            "`strict`, `workspace-write-network` or `off`",
            "loose",
        ),
        (
            "delegation:\n  workspace: mine\n",
            "delegation.workspace",
            "`separate` or `shared`",
            "mine",
        ),
        (
            "web_search:\n  provider: bing\n",
            "web_search.provider",
            "`searxng` or `brave`",
            "bing",
        ),
        (
            "models:\n  fast:\n    backend: llamafile\n",
            "models.fast.backend",
            "`ollama`, `openai`, `anthropic` or `openai-responses`",
            "llamafile",
        ),
        (
            "models:\n  fast:\n    constrained_decoding: always\n",
            "models.fast.constrained_decoding",
            "`off`, `json_schema` or `auto`",
            "always",
        ),
        (
            "cloud_fallback:\n  model_key: quality\n  policy: [no_tool_calls, sometimes]\n",
            "cloud_fallback.policy[1]",
            "`no_tool_calls`, `malformed_args` or `critic_rejected`",
            "sometimes",
        ),
        (
            "specialists:\n  engineering:\n    tool_loading: later\n",
            "specialists.engineering.tool_loading",
            "`eager` or `lazy`",
            "later",
        ),
        (
            "specialists:\n  engineering:\n    mcp_servers:\n      - {name: s, command: x, elicitation: ask}\n",
            "specialists.engineering.mcp_servers[0].elicitation",
            "`decline` or `defaults`",
            "ask",
        ),
    ];
    for (text, key, words, got) in cases {
        assert_eq!(
            err("c.yaml", text),
            format!("c.yaml: `{key}`: must be {words}, got `{got}`"),
            "{text}"
        );
    }
    // The seed's older names still read as the word they stand for.
    for alias in ["generic", "vllm", "openai"] {
        let s = load(
            "c.yaml",
            &format!("models:\n  fast:\n    backend: {alias}\n"),
        )
        .unwrap();
        assert_eq!(s.models["fast"].backend, Backend::OpenAi, "{alias}");
    }
    let s = load("c.yaml", "context_compaction: summarize\n").unwrap();
    assert!(s.summarize_compaction);
}

#[test]
fn issue_30_remote_agents_are_checked_and_named_in_delegates() {
    let s = load(
        "c.yaml",
        "agents:\n  poet:\n    url: http://127.0.0.1:9999/\n    token_env: POET_TOKEN\nspecialists:\n  engineering:\n    delegates: [poet]\n",
    )
    .unwrap();
    let poet = &s.agents["poet"];
    assert_eq!(poet.url, "http://127.0.0.1:9999");
    assert_eq!(poet.token_env.as_deref(), Some("POET_TOKEN"));
    assert_eq!(poet.timeout_s, 600);
    for (text, wanted) in [
        (
            "agents:\n  poet: {}\n",
            "c.yaml: `agents.poet.url`: is needed",
        ),
        (
            "agents:\n  poet:\n    url: ftp://x\n",
            "must start with http://",
        ),
        (
            "agents:\n  poet:\n    url: http://x\n    timeout_s: 0\n",
            "`agents.poet.timeout_s`: must be between 1 and 86400",
        ),
        (
            "agents:\n  'po et':\n    url: http://x\n",
            "names hold only letters",
        ),
        (
            "agents:\n  research:\n    url: http://x\n",
            "a specialist is called `research` too",
        ),
        (
            "specialists:\n  engineering:\n    delegates: [poet]\n",
            "no specialist or remote agent `poet`",
        ),
    ] {
        let e = err("c.yaml", text);
        assert!(e.contains(wanted), "{text}: {e}");
    }
}

#[test]
fn issue_29_servers_may_sample_and_decline_questions_unless_the_config_says_otherwise() {
    let servers = |text: &str| {
        load("c.yaml", text)
            .unwrap()
            .specialist("engineering")
            .unwrap()
            .tooling
            .mcp_servers
            .clone()
    };
    let default =
        servers("specialists:\n  engineering:\n    mcp_servers:\n      - {name: s, command: x}\n");
    assert!(default[0].sampling);
    assert_eq!(
        default[0].elicitation,
        fabric_domain::McpElicitation::Decline
    );
    let set = servers(
        "specialists:\n  engineering:\n    mcp_servers:\n      - {name: s, command: x, sampling: false, elicitation: defaults}\n",
    );
    assert!(!set[0].sampling);
    assert_eq!(set[0].elicitation, fabric_domain::McpElicitation::Defaults);
    assert!(
        err("c.yaml", "specialists:\n  engineering:\n    mcp_servers:\n      - {name: s, command: x, sampling: sometimes}\n")
            .contains("mcp_servers[0].sampling"),
    );
}

#[test]
fn issue_29_a_model_key_reads_images_only_when_it_says_so() {
    let s = load(
        "c.yaml",
        "models:\n  eyes:\n    model: llava\n    vision: true\n",
    )
    .unwrap();
    assert!(s.models["eyes"].vision);
    assert!(!s.models["fast"].vision, "off by default");
    let e = err("c.yaml", "models:\n  fast:\n    vision: sometimes\n");
    assert!(e.contains("models.fast.vision"), "{e}");
}

/// Issue #40: a plain `off` is a boolean to a YAML 1.1 parser; the keys whose words include
/// `off` read it (and `no`, `false`) as `off`, as CONFIG.md writes them, and `on`/`yes` as
/// the word that switches them on, where there is one.
#[test]
fn issue_40_plain_off_in_yaml_is_the_keys_off() {
    let s = load(
        "c.yaml",
        "sandbox: off\nsandbox_limits:\n  cgroup: off\nmodels:\n  fast:\n    constrained_decoding: off\n",
    )
    .unwrap();
    assert_eq!(s.sandbox.mode, crate::SandboxMode::Off);
    assert_eq!(s.sandbox.limits.cgroup, crate::SandboxCgroup::Off);
    assert_eq!(
        s.models["fast"].constrained_decoding,
        Some(fabric_domain::ConstrainedDecoding::Off)
    );
    let s = load("c.yaml", "sandbox: no\nsandbox_limits:\n  cgroup: yes\n").unwrap();
    assert_eq!(s.sandbox.mode, crate::SandboxMode::Off);
    assert_eq!(s.sandbox.limits.cgroup, crate::SandboxCgroup::Auto);
    let s = load("c.yaml", "sandbox: on\n").unwrap();
    assert_eq!(s.sandbox.mode, crate::SandboxMode::Strict);
    assert_eq!(
        err("c.yaml", "models:\n  fast:\n    constrained_decoding: on\n"),
        "c.yaml: `models.fast.constrained_decoding`: `true` (YAML also reads a plain `on` or `yes` so) does not say which: write `json_schema` or `auto`"
    );
    // Quoted, or in JSON, the words are read as before.
    let s = load(
        "c.json",
        r#"{"sandbox": "off", "sandbox_limits": {"cgroup": "required"}}"#,
    )
    .unwrap();
    assert_eq!(s.sandbox.mode, crate::SandboxMode::Off);
    assert_eq!(s.sandbox.limits.cgroup, crate::SandboxCgroup::Required);
}

#[test]
fn issue_43_the_hooks_key_is_claude_codes_shape_and_checked() {
    let yaml = r#"
hooks:
  PreToolUse:
    - matcher: "write_file|Bash"
      hooks:
        - type: command
          command: ./guard.sh
          timeout: 5
  Stop:
    - hooks:
        - type: command
          command: cargo test
"#;
    let s = load("c.yaml", yaml).unwrap();
    use fabric_domain::hooks::HookEvent;
    let pre = &s.hooks.events[&HookEvent::PreToolUse][0];
    assert_eq!(pre.matcher.as_deref(), Some("write_file|Bash"));
    assert_eq!(pre.hooks[0].timeout_s(), 5);
    assert_eq!(s.hooks.events[&HookEvent::Stop][0].hooks[0].timeout_s(), 60);
    let e = err("c.yaml", "hooks:\n  BeforeTool: []\n");
    assert!(
        e.contains("c.yaml: `hooks.BeforeTool`: unknown hook event `BeforeTool`"),
        "{e}"
    );
    let e = err(
        "c.yaml",
        "hooks:\n  PreToolUse:\n    - matcher: \"[\"\n      hooks: [{type: command, command: x}]\n",
    );
    assert!(
        e.contains("`hooks.PreToolUse[0].matcher`") && e.contains("regular expression"),
        "{e}"
    );
    let e = err(
        "c.yaml",
        "hooks:\n  Stop:\n    - hooks: [{type: command, command: x, timeout: 7200}]\n",
    );
    assert!(
        e.contains(
            "`hooks.Stop[0].hooks[0].timeout`: expected whole seconds from 1 to 3600, got 7200"
        ),
        "{e}"
    );
    let e = err(
        "c.yaml",
        "hooks:\n  Stop:\n    - hooks: [{type: prompt, prompt: p}]\n",
    );
    assert!(
        e.contains("hooks of type `prompt` are not supported"),
        "{e}"
    );
}

#[test]
fn issue_44_a_specialist_can_be_an_acp_agent() {
    let s = load(
        "f.yaml",
        "specialists:\n  notes:\n    description: An ACP agent.\n    acp: {command: node, args: [agent.mjs], env: {A: '1'}}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let notes = s.specialist("notes").expect("notes");
    let acp = notes.tooling.acp.as_ref().expect("acp");
    assert_eq!(acp.command, "node");
    assert_eq!(acp.args, ["agent.mjs"]);
    assert_eq!(acp.timeout_s, fabric_domain::DEFAULT_ACP_TIMEOUT_S);
    assert!(notes.tools.is_empty());
    let refused = err(
        "f.yaml",
        "specialists:\n  notes:\n    description: x\n    acp: {command: node, timeout_s: 0}\n",
    );
    assert!(
        refused.contains("specialists.notes.acp.timeout_s"),
        "{refused}"
    );
    let empty = err(
        "f.yaml",
        "specialists:\n  notes:\n    description: x\n    acp: {command: ' '}\n",
    );
    assert!(empty.contains("specialists.notes.acp.command"), "{empty}");
}
