//! The URIs of the fabric's MCP resources (issue #29): `fabric://runs/{run_id}` and what is
//! under it. Parsing is pure; reading is [`crate::resources`]'s.

use fabric_domain::RunId;
use rmcp::ErrorData;

/// Where every resource URI of the fabric starts.
pub(crate) const PREFIX: &str = "fabric://runs/";

/// The URI templates (RFC 6570) `resources/templates/list` answers, with their names,
/// descriptions and MIME types.
pub(crate) const TEMPLATES: &[(&str, &str, &str, &str)] = &[
    (
        "fabric://runs/{run_id}",
        "run",
        "A run's summary: status, prompt, specialists, models, result, steps, usage",
        "application/json",
    ),
    (
        "fabric://runs/{run_id}/runlog",
        "runlog",
        "A run's runlog: one JSON event per line (docs/RUNLOG.md)",
        "application/jsonl",
    ),
    (
        "fabric://runs/{run_id}/files",
        "files",
        "The files of a run's workspace: {files: [paths], truncated}",
        "application/json",
    ),
    (
        "fabric://runs/{run_id}/files/{+path}",
        "file",
        "One file of a run's workspace (text, or base64 for other bytes); the path is relative to the workspace",
        "text/plain",
    ),
];

/// What a resource URI names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// The run's summary.
    Run(RunId),
    /// Its runlog.
    Runlog(RunId),
    /// The list of its workspace's files.
    Files(RunId),
    /// One file of its workspace, by its (decoded) path relative to the workspace.
    File(RunId, String),
}

impl Target {
    /// The run the target belongs to.
    pub(crate) fn run(&self) -> &RunId {
        match self {
            Self::Run(id) | Self::Runlog(id) | Self::Files(id) | Self::File(id, _) => id,
        }
    }
}

/// The URI of run `id`'s summary.
pub(crate) fn of_run(id: &RunId) -> String {
    format!("{PREFIX}{id}")
}

/// What `uri` names; an error that says which URIs exist otherwise.
pub(crate) fn parse(uri: &str) -> Result<Target, ErrorData> {
    let Some(rest) = uri.strip_prefix(PREFIX) else {
        return Err(unknown(uri));
    };
    let (id, below) = rest.split_once('/').unwrap_or((rest, ""));
    let id = RunId::parse(id)
        .map_err(|e| ErrorData::invalid_params(format!("resource `{uri}`: {e}"), None))?;
    match below {
        "" => Ok(Target::Run(id)),
        "runlog" => Ok(Target::Runlog(id)),
        "files" | "files/" => Ok(Target::Files(id)),
        _ => match below.strip_prefix("files/") {
            Some(path) => Ok(Target::File(id, decode(uri, path)?)),
            None => Err(unknown(uri)),
        },
    }
}

fn unknown(uri: &str) -> ErrorData {
    ErrorData::resource_not_found(
        format!(
            "no resource `{uri}`; the fabric's resources are fabric://runs/{{run_id}}, fabric://runs/{{run_id}}/runlog, fabric://runs/{{run_id}}/files and fabric://runs/{{run_id}}/files/{{path}} (resources/list names the runs)"
        ),
        not_found_data(uri),
    )
}

/// `path` with its percent-escapes decoded (`%20` is a space, `%2F` a slash): what a client
/// that expanded `{+path}` sent. Decoding first means an escaped `..` is refused like one
/// written plainly.
fn decode(uri: &str, path: &str) -> Result<String, ErrorData> {
    let bad = |why: &str| {
        ErrorData::invalid_params(
            format!("resource `{uri}`: {why}; escape only bytes of a UTF-8 path, as %XX"),
            None,
        )
    };
    let mut bytes = Vec::with_capacity(path.len());
    let mut rest = path.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        if first == b'%' {
            let hex = tail
                .get(..2)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| bad("a `%` is not followed by two hex digits"))?;
            bytes.push(hex);
            rest = &tail[2..];
        } else {
            bytes.push(first);
            rest = tail;
        }
    }
    String::from_utf8(bytes).map_err(|_| bad("the decoded path is not UTF-8"))
}

/// The data of a "resource not found" error: the URI asked for (SEP-2164).
pub(crate) fn not_found_data(uri: &str) -> Option<serde_json::Value> {
    Some(serde_json::json!({ "uri": uri }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> RunId {
        RunId::parse("20260101T000000Z-abcd").unwrap()
    }

    #[test]
    fn issue_29_parses_each_resource_uri() {
        let base = "fabric://runs/20260101T000000Z-abcd";
        assert_eq!(parse(base).unwrap(), Target::Run(id()));
        assert_eq!(
            parse(&format!("{base}/runlog")).unwrap(),
            Target::Runlog(id())
        );
        assert_eq!(
            parse(&format!("{base}/files")).unwrap(),
            Target::Files(id())
        );
        assert_eq!(
            parse(&format!("{base}/files/src/a%20b.rs")).unwrap(),
            Target::File(id(), "src/a b.rs".to_owned())
        );
        // Decoded, so the workspace's confinement sees the `..` and refuses it.
        assert_eq!(
            parse(&format!("{base}/files/%2e%2e/secret")).unwrap(),
            Target::File(id(), "../secret".to_owned())
        );
    }

    #[test]
    fn issue_29_refuses_other_uris_saying_which_exist() {
        for uri in [
            "file:///etc/passwd",
            "fabric://runs/20260101T000000Z-abcd/other",
        ] {
            let error = parse(uri).unwrap_err();
            assert!(
                error.message.contains("the fabric's resources are"),
                "{uri}"
            );
        }
        let error = parse("fabric://runs/no such/").unwrap_err();
        assert!(
            error.message.contains("invalid run id"),
            "{}",
            error.message
        );
        let error = parse("fabric://runs/20260101T000000Z-abcd/files/%zz").unwrap_err();
        assert!(
            error.message.contains("two hex digits"),
            "{}",
            error.message
        );
    }
}
