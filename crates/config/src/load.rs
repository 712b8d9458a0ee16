//! Reading the file and merging it over the defaults, checking every value on the way.

use fabric_domain::{check_tool_pattern, is_tool_pattern};
use serde_json::Value;
use std::path::{Path, PathBuf};

use crate::dirs::{LoadOptions, read_specialist_dir};
use crate::error::ConfigError;
use crate::markdown::parse_markdown;
use crate::raw::RawConfig;
use crate::settings::{Settings, SpecialistSource};

impl Settings {
    /// The defaults, overlaid with the file at `path` when one is given. Markdown specialist
    /// directories are not read; [`Settings::load_with`] reads them.
    ///
    /// A path that does not exist is an error: a user who names a file means it.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        match path {
            None => Ok(Self::defaults()),
            Some(path) => Self::from_text(&read_config(path)?, path),
        }
    }

    /// Everything, in precedence order: built-in specialists < the user directory < the
    /// project directory (`<workspace>/specialists`) < the config file's `specialists:`
    /// (`specialist_dirs` in the file replaces the two directories). Other keys: defaults <
    /// the file < `options.workspace`.
    pub fn load_with(options: &LoadOptions) -> Result<Self, ConfigError> {
        let raw = match &options.config {
            Some(path) => parse_raw(&read_config(path)?, path)?,
            None => RawConfig::default(),
        };
        Self::assemble(raw, options.config.as_deref(), Some(options))
    }

    /// Parses `text` as the file at `path` (the extension picks JSON or YAML), without
    /// reading specialist directories.
    pub fn from_text(text: &str, path: &Path) -> Result<Self, ConfigError> {
        Self::assemble(parse_raw(text, path)?, Some(path), None)
    }

    fn assemble(
        mut raw: RawConfig,
        source: Option<&Path>,
        options: Option<&LoadOptions>,
    ) -> Result<Self, ConfigError> {
        let mut settings = Self::defaults();
        settings.source = source.map(Path::to_path_buf);
        let merger = Merger {
            source_name: settings.source_name(),
        };
        let file_specialists = raw.specialists.take();
        let dirs = raw.specialist_dirs.take();
        merger.apply(&mut settings, raw)?;
        if let Some(options) = options {
            if let Some(workspace) = &options.workspace {
                settings.workspace = workspace.clone();
            }
            if let Some(url) = &options.store_url {
                let url = crate::store::check_url(url, |detail| ConfigError::Invalid {
                    source_name: format!("environment variable {}", crate::STORE_URL_ENV),
                    key: "store.url".to_owned(),
                    detail,
                })?;
                settings.store.url = Some(url);
            }
            let (dirs, required) = match dirs {
                Some(dirs) => (merger.dirs(&dirs)?, true),
                None => {
                    let project = settings.workspace.join("specialists");
                    (
                        options.user_dir.iter().cloned().chain([project]).collect(),
                        false,
                    )
                }
            };
            for dir in &dirs {
                load_dir(&mut settings, dir, required)?;
            }
            settings.specialist_dirs = dirs;
        } else if let Some(dirs) = dirs {
            merger.dirs(&dirs)?;
        }
        if let Some(specialists) = file_specialists {
            for (id, raw_spec) in specialists {
                merger.specialist(&mut settings, &id, raw_spec, &format!("specialists.{id}"))?;
                if let Some(path) = &settings.source {
                    let source = SpecialistSource::Config { path: path.clone() };
                    settings
                        .specialist_origins
                        .entry(id)
                        .or_default()
                        .sources
                        .push(source);
                }
            }
        }
        merger.cross_check(&settings)?;
        // The budget keys under `delegation:` are the old spelling of `budget:`; still read.
        let d = &settings.delegation;
        if d.max_tokens.is_some() || d.timeout_s.is_some() {
            settings.deprecations.push(
                "`delegation.max_tokens` and `delegation.timeout_s` are deprecated: use `budget.max_tokens` and `budget.max_wall_s` (docs/QUALITY.md)".to_owned(),
            );
            settings.budget.max_tokens = settings.budget.max_tokens.or(d.max_tokens);
            settings.budget.max_wall_s = settings.budget.max_wall_s.or(d.timeout_s);
        }
        Ok(settings)
    }

    /// Checks that every specialist's tools exist among `known_tools`, and that tool
    /// patterns (`mcp__github__*`) have the MCP shape. The binary calls this with the names
    /// of the tools it can build. The message names the file the specialist came from.
    pub fn check_tools(&self, known_tools: &[&str]) -> Result<(), ConfigError> {
        for specialist in &self.specialists {
            let (source_name, prefix) = match self
                .specialist_origin(&specialist.id)
                .and_then(|o| o.sources.last())
            {
                Some(SpecialistSource::File { path }) => {
                    (path.display().to_string(), String::new())
                }
                _ => (
                    self.source_name(),
                    format!("specialists.{}.", specialist.id),
                ),
            };
            for (i, tool) in specialist.tools.iter().enumerate() {
                let problem = if is_tool_pattern(tool) {
                    check_tool_pattern(tool).err().map(|e| e.to_string())
                } else if let Some(rest) = tool.strip_prefix(fabric_domain::MCP_TOOL_PREFIX) {
                    // One MCP tool by its full name: `mcp__<server>__<tool>`.
                    match rest.split_once("__") {
                        Some((server, name)) if !server.is_empty() && !name.is_empty() => None,
                        _ => Some(format!(
                            "`{tool}` is not an MCP tool name; expected `mcp__<server>__<tool>` or a pattern such as `mcp__github__*`"
                        )),
                    }
                } else if known_tools.contains(&tool.as_str()) {
                    None
                } else {
                    Some(format!(
                        "unknown tool `{tool}`; the known tools are: {} (MCP tools are named by patterns such as `mcp__github__*`)",
                        known_tools.join(", ")
                    ))
                };
                if let Some(detail) = problem {
                    return Err(ConfigError::Invalid {
                        source_name,
                        key: format!("{prefix}tools[{i}]"),
                        detail,
                    });
                }
            }
        }
        Ok(())
    }

    fn source_name(&self) -> String {
        self.source.as_ref().map_or_else(
            || "built-in defaults".to_owned(),
            |p| p.display().to_string(),
        )
    }
}

fn read_config(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ConfigError::NotFound {
            path: path.to_path_buf(),
        },
        _ => ConfigError::Read {
            path: path.to_path_buf(),
            detail: e.to_string(),
        },
    })
}

fn parse_raw(text: &str, path: &Path) -> Result<RawConfig, ConfigError> {
    parse_document(text, path)
}

/// Parses a JSON (by extension) or YAML document into `T`, with the config's error messages:
/// the file, the format and the key at fault. Also used for `fabric test` scenario files.
pub fn parse_document<T: serde::de::DeserializeOwned>(
    text: &str,
    path: &Path,
) -> Result<T, ConfigError> {
    let is_json = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let value: Value = if is_json {
        serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            format: "JSON",
            detail: e.to_string(),
        })?
    } else {
        serde_saphyr::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            format: "YAML",
            detail: e.to_string(),
        })?
    };
    // An empty YAML file is `null`: the same as no keys at all.
    let value = if value.is_null() {
        Value::Object(Default::default())
    } else {
        value
    };
    let source_name = path.display().to_string();
    serde_path_to_error::deserialize(value).map_err(|e| {
        let key = e.path().to_string();
        ConfigError::Invalid {
            source_name,
            key: if key == "." {
                "(top level)".to_owned()
            } else {
                key
            },
            detail: e.into_inner().to_string(),
        }
    })
}

/// Reads one directory's markdown specialists over `settings`. A file replaces a
/// specialist of the same id from a lower layer entirely (a file is a whole definition);
/// two files of one directory with the same id are an error.
fn load_dir(settings: &mut Settings, dir: &Path, required: bool) -> Result<(), ConfigError> {
    let mut seen: Vec<(String, PathBuf)> = Vec::new();
    for (path, text) in read_specialist_dir(dir, required)? {
        let parsed = parse_markdown(&text, &path)?;
        if let Some((_, other)) = seen.iter().find(|(id, _)| *id == parsed.id) {
            return Err(ConfigError::SpecialistFile {
                path: path.clone(),
                line: None,
                detail: format!(
                    "specialist `{}` is also defined in {}; rename one (`name:` in the front matter)",
                    parsed.id,
                    other.display()
                ),
            });
        }
        let merger = Merger {
            source_name: path.display().to_string(),
        };
        // Replaced in place, so listings keep the built-in order.
        let position = settings.specialists.iter().position(|s| s.id == parsed.id);
        settings.specialists.retain(|s| s.id != parsed.id);
        merger.specialist(settings, &parsed.id, parsed.raw, "")?;
        if let Some(i) = position
            && let Some(spec) = settings.specialists.pop()
        {
            settings.specialists.insert(i, spec);
        }
        let origin = settings
            .specialist_origins
            .entry(parsed.id.clone())
            .or_default();
        origin
            .sources
            .push(SpecialistSource::File { path: path.clone() });
        origin.warnings = parsed.warnings;
        seen.push((parsed.id, path));
    }
    Ok(())
}

struct Merger {
    source_name: String,
}

impl Merger {
    fn invalid(&self, key: impl Into<String>, detail: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            source_name: self.source_name.clone(),
            key: key.into(),
            detail: detail.into(),
        }
    }

    fn range(&self, key: &str, v: u64, min: u64, max: u64) -> Result<u64, ConfigError> {
        if (min..=max).contains(&v) {
            Ok(v)
        } else {
            Err(self.invalid(key, format!("must be between {min} and {max}, got {v}")))
        }
    }

    /// The number the file gives for `key`, if any, checked to lie in `min..=max` and in the
    /// settings' type `T`, so no key spells out its own check and cast.
    fn within<T: TryFrom<u64>>(
        &self,
        key: &str,
        value: Option<impl Into<u64>>,
        min: u64,
        max: u64,
    ) -> Result<Option<T>, ConfigError> {
        let Some(v) = value.map(Into::into) else {
            return Ok(None);
        };
        let v = self.range(key, v, min, max)?;
        // Every `max` fits its key's type; were one not to, the answer is the same refusal.
        T::try_from(v)
            .map(Some)
            .map_err(|_| self.invalid(key, format!("must be between {min} and {max}, got {v}")))
    }
}

mod checks;
mod keys;
mod model;
mod specialist;
#[cfg(test)]
mod tests;
