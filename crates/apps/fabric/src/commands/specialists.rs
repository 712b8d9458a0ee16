//! `fabric specialists list | show ID`.

use fabric_config::{Settings, SpecialistOrigin};
use fabric_domain::SpecialistSpec;
use serde_json::{Value, json};

use crate::cli::{Cli, SpecialistsCommand};
use crate::errors::UsageError;
use crate::wiring;

pub(crate) fn specialists(cli: &Cli, command: &SpecialistsCommand) -> anyhow::Result<u8> {
    let settings = wiring::load_settings(cli)?;
    match command {
        SpecialistsCommand::List { json } => {
            if *json {
                let list: Vec<Value> = settings
                    .specialists
                    .iter()
                    .map(|s| summary(&settings, s))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                for s in &settings.specialists {
                    println!(
                        "{:<22} {}\n{:<22} tools: {}; source: {}",
                        s.id,
                        s.description,
                        "",
                        s.tools.join(", "),
                        source(&settings, &s.id)
                    );
                }
            }
        }
        SpecialistsCommand::Show { id, json } => {
            let spec = settings.specialist(id).ok_or_else(|| {
                UsageError(format!(
                    "no specialist `{id}`; the specialists are: {}",
                    settings.specialist_ids().join(", ")
                ))
            })?;
            let origin = settings.specialist_origin(id).cloned().unwrap_or_default();
            if *json {
                let mut out = serde_json::to_value(spec)?;
                out["sources"] = serde_json::to_value(&origin.sources)?;
                out["warnings"] = json!(origin.warnings);
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                print_spec(spec, &origin)?;
            }
        }
    }
    Ok(0)
}

fn source(settings: &Settings, id: &str) -> String {
    settings
        .specialist_origin(id)
        .and_then(|o| o.sources.last())
        .map_or_else(|| "built-in".to_owned(), ToString::to_string)
}

fn summary(settings: &Settings, s: &SpecialistSpec) -> Value {
    json!({
        "id": s.id,
        "description": s.description,
        "tools": s.tools,
        "source": source(settings, &s.id),
    })
}

fn print_spec(s: &SpecialistSpec, origin: &SpecialistOrigin) -> anyhow::Result<()> {
    println!("id:            {}", s.id);
    println!("description:   {}", s.description);
    // Every layer that defined or changed it, lowest first: the last one wins.
    if origin.sources.is_empty() {
        println!("source:        built-in");
    }
    for layer in &origin.sources {
        println!("source:        {layer}");
    }
    println!("tools:         {}", s.tools.join(", "));
    println!("may_write:     {}", s.may_write);
    println!("needs_network: {}", s.needs_network);
    println!(
        "model_key:     {}",
        s.model_key.as_deref().unwrap_or("(the run's default)")
    );
    println!("capabilities:  {}", s.capabilities.join(", "));
    println!("keywords:      {}", s.keywords.join(", "));
    for l in &s.limitations {
        println!("limitation:    {l}");
    }
    for w in &origin.warnings {
        println!("warning:       {w}");
    }
    println!(
        "finish schema:\n{}",
        serde_json::to_string_pretty(&s.finish_schema)?
    );
    println!("system prompt:\n{}", s.system_prompt);
    Ok(())
}
