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
            for key in settings.inert_keys() {
                eprintln!(
                    "warning: `{key}` is set but has no effect yet: model bootstrap and task forces are not built"
                );
            }
        }
    }
    Ok(0)
}
