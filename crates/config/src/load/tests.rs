use super::*;

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
    assert_eq!(s.models["fast"].backend, Backend::Openai);
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
    assert!(e.contains("must be `ollama` or `openai`"), "{e}");
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
    let yaml = "specialists:\n  engineering:\n    tools: [read_file]\n  reviewer:\n    description: Reviews code.\n    system_prompt: Review.\n    tools: [read_file, nope]\n";
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
        .check_tools(&["read_file", "write_file"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("specialists.reviewer.tools[1]") && e.contains("unknown tool `nope`"),
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

#[test]
fn loader_variables_cannot_be_passed_to_tools() {
    let e = err("c.yaml", "shell:\n  pass_env: [CARGO_HOME, LD_PRELOAD]\n");
    assert!(
        e.contains("`shell.pass_env[1]`") && e.contains("LD_PRELOAD"),
        "{e}"
    );
}
