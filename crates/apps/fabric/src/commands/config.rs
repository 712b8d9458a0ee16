//! `fabric config show | validate`.

use crate::cli::{Cli, ConfigCommand};
use crate::wiring;

pub(crate) fn config(cli: &Cli, command: &ConfigCommand) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    match command {
        ConfigCommand::Show => {
            println!("{}", serde_json::to_string_pretty(&settings)?);
        }
        ConfigCommand::Validate => {
            let source = settings.source.as_ref().map_or_else(
                || "built-in defaults".to_owned(),
                |p| p.display().to_string(),
            );
            println!(
                "config OK: {source} ({} models, {} specialists)",
                settings.models.len(),
                settings.specialists.len()
            );
            for (id, origin) in &settings.specialist_origins {
                for warning in &origin.warnings {
                    eprintln!("warning: specialist `{id}`: {warning}");
                }
            }
            for warning in write_tools_of_readers(&settings) {
                eprintln!("warning: {warning}");
            }
            for key in settings.inert_keys() {
                eprintln!(
                    "warning: `{key}` is set but has no effect yet: model bootstrap and task forces are not built"
                );
            }
        }
    }
    Ok(0)
}

/// Specialists with `may_write: false` that list tools which write: they never get those
/// tools (a run leaves them out), which is worth knowing before a run.
fn write_tools_of_readers(settings: &fabric_config::Settings) -> Vec<String> {
    let policy = std::sync::Arc::new(fabric_tools::ToolPolicy::default());
    let sandbox: std::sync::Arc<dyn fabric_core::ProcessSandbox> =
        std::sync::Arc::new(fabric_tools::NoOsSandbox);
    settings
        .specialists
        .iter()
        .filter(|s| !s.may_write)
        .filter_map(|s| {
            let writers: Vec<&str> = s
                .tools
                .iter()
                .filter(|name| {
                    fabric_tools::builtin_tool(name, &policy, &sandbox)
                        .is_some_and(|t| !t.spec().annotations.read_only)
                })
                .map(String::as_str)
                .collect();
            (!writers.is_empty()).then(|| {
                format!(
                    "specialist `{}` has `may_write: false` but lists {}: runs leave them out; remove them from its `tools`, or set `may_write: true`",
                    s.id,
                    writers
                        .iter()
                        .map(|w| format!("`{w}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
        })
        .collect()
}
