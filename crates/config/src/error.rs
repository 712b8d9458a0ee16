use std::path::PathBuf;
use thiserror::Error;

/// A configuration that cannot be used. Every message names the file, the key and the fix.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The named file does not exist.
    #[error(
        "config file {path} does not exist; fix the path in `--config` / FABRIC_CONFIG_PATH or create the file"
    )]
    NotFound {
        /// The path.
        path: PathBuf,
    },
    /// The file exists but cannot be read.
    #[error("cannot read config file {path}: {detail}")]
    Read {
        /// The path.
        path: PathBuf,
        /// The system's words.
        detail: String,
    },
    /// The file is not valid JSON or YAML.
    #[error("config file {path} is not valid {format}: {detail}")]
    Syntax {
        /// The path.
        path: PathBuf,
        /// `JSON` or `YAML`.
        format: &'static str,
        /// The parser's words, with line and column.
        detail: String,
    },
    /// A key is unknown or has a bad value.
    #[error("{source_name}: `{key}`: {detail}")]
    Invalid {
        /// The file, or `built-in defaults`.
        source_name: String,
        /// The dotted key path, e.g. `models.fast.temperature`.
        key: String,
        /// What is wrong and what is allowed.
        detail: String,
    },
    /// A markdown specialist file that cannot be used.
    #[error("{}: {detail}", file_location(.path, *.line))]
    SpecialistFile {
        /// The file.
        path: PathBuf,
        /// The line in the file, when the problem has one.
        line: Option<u64>,
        /// What is wrong and how to fix it.
        detail: String,
    },
    /// The user's store of trusted repositories cannot be read or written (issue #43).
    #[error("trusted repositories file {path}: {detail}")]
    Trust {
        /// The file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        detail: String,
    },
    /// A specialists directory that cannot be read.
    #[error("cannot read specialists directory {path}: {detail}")]
    SpecialistDir {
        /// The directory.
        path: PathBuf,
        /// The system's words, and the fix.
        detail: String,
    },
}

/// `path:line`, the form editors jump to.
fn file_location(path: &std::path::Path, line: Option<u64>) -> String {
    match line {
        Some(line) => format!("{}:{line}", path.display()),
        None => path.display().to_string(),
    }
}
