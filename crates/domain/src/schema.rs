//! Checks a JSON value against a tool's input schema, with messages a small model can act on.
//!
//! We implement the subset of JSON Schema that tool contracts use (`type`, `properties`,
//! `required`, `additionalProperties`, `items`, `enum`, `const`, `anyOf`/`oneOf`, and the
//! numeric, length and size bounds) rather than pull in a full validator: the messages are
//! the product here ("parameter `path` must be a string, got 3"), and keywords outside the
//! subset are accepted without checking, never rejected. See ADR-004 in docs/DECISIONS.md.

use serde_json::Value;
use std::fmt::Write as _;

/// Longest rendering of a received value inside a message.
const MAX_VALUE_CHARS: usize = 80;

/// Every way `value` breaks `schema`, each as one sentence. Empty when it conforms.
pub fn violations(schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if !value.is_object() && schema.get("type").and_then(Value::as_str) == Some("object") {
        out.push(format!(
            "arguments must be a JSON object, got {}",
            render(value)
        ));
        return out;
    }
    check(schema, value, &mut Vec::new(), &mut out);
    out
}

/// Checks and joins the violations into one message, or `Ok` when the value conforms.
pub fn validate(schema: &Value, value: &Value) -> Result<(), crate::DomainError> {
    let found = violations(schema, value);
    if found.is_empty() {
        Ok(())
    } else {
        Err(crate::DomainError::InvalidArguments { violations: found })
    }
}

/// One step of the path from the arguments object to a nested value.
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

fn name(path: &[Seg<'_>]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(key) if out.is_empty() => out.push_str(key),
            Seg::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Seg::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

fn subject(path: &[Seg<'_>]) -> String {
    if path.is_empty() {
        "arguments".to_owned()
    } else {
        format!("parameter `{}`", name(path))
    }
}

fn check<'a>(schema: &'a Value, value: &'a Value, path: &mut Vec<Seg<'a>>, out: &mut Vec<String>) {
    let Some(schema) = schema.as_object() else {
        // `true` or a non-object schema accepts anything; `false` accepts nothing.
        if schema == &Value::Bool(false) {
            out.push(format!("{} is not allowed", subject(path)));
        }
        return;
    };

    if let Some(expected) = schema.get("type") {
        let allowed: Vec<&str> = match expected {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !allowed.is_empty() && !allowed.iter().any(|t| has_type(value, t)) {
            let (min, max) = bounds(schema);
            let phrases: Vec<String> = allowed
                .iter()
                .map(|t| match *t {
                    "integer" | "number" => number_phrase(type_phrase(&[*t]), min, max),
                    _ => type_phrase(&[*t]),
                })
                .collect();
            out.push(format!(
                "{} must be {}, got {}",
                subject(path),
                phrases.join(" or "),
                render(value)
            ));
            return;
        }
    }

    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let listed: Vec<String> = options.iter().map(render).collect();
        out.push(format!(
            "{} must be one of {}, got {}",
            subject(path),
            listed.join(", "),
            render(value)
        ));
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        out.push(format!(
            "{} must be {}, got {}",
            subject(path),
            render(constant),
            render(value)
        ));
    }

    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            let fits = branches.iter().any(|branch| {
                let mut scratch = Vec::new();
                check(branch, value, &mut Vec::new(), &mut scratch);
                scratch.is_empty()
            });
            if !fits && !branches.is_empty() {
                out.push(format!(
                    "{} does not match any allowed form, got {}",
                    subject(path),
                    render(value)
                ));
            }
        }
    }

    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for key in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(key) {
                        path.push(Seg::Key(key));
                        let wanted = properties
                            .and_then(|p| p.get(key))
                            .and_then(|s| s.get("type"))
                            .map(|t| format!(" ({})", type_phrase(&type_names(t))))
                            .unwrap_or_default();
                        out.push(format!(
                            "missing required parameter `{}`{wanted}",
                            name(path)
                        ));
                        path.pop();
                    }
                }
            }
            for (key, item) in map {
                path.push(Seg::Key(key));
                match properties.and_then(|p| p.get(key)) {
                    Some(sub) => check(sub, item, path, out),
                    None => match schema.get("additionalProperties") {
                        Some(Value::Bool(false)) => {
                            let known: Vec<String> = properties
                                .map(|p| p.keys().map(|k| format!("`{k}`")).collect())
                                .unwrap_or_default();
                            let hint = if known.is_empty() {
                                "this tool takes no parameters".to_owned()
                            } else {
                                format!("expected one of {}", known.join(", "))
                            };
                            out.push(format!("unknown parameter `{}`; {hint}", name(path)));
                        }
                        Some(extra @ Value::Object(_)) => check(extra, item, path, out),
                        _ => {}
                    },
                }
                path.pop();
            }
        }
        Value::Array(items) => {
            bound(
                schema,
                "minItems",
                "maxItems",
                items.len(),
                "items",
                path,
                out,
            );
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    check(item_schema, item, path, out);
                    path.pop();
                }
            }
        }
        Value::String(text) => {
            bound(
                schema,
                "minLength",
                "maxLength",
                text.chars().count(),
                "characters",
                path,
                out,
            );
        }
        Value::Number(number) => {
            let (min, max) = bounds(schema);
            if let Some(x) = number.as_f64()
                && (min.is_some_and(|min| x < min) || max.is_some_and(|max| x > max))
            {
                let noun = match schema.get("type").map(type_names) {
                    Some(types) if types.contains(&"integer") && !types.contains(&"number") => {
                        "an integer"
                    }
                    _ => "a number",
                };
                let allowed = match (min, max) {
                    (Some(min), Some(max)) => format!("{noun} between {min} and {max}"),
                    (Some(min), None) => format!("at least {min}"),
                    (None, _) => format!("at most {}", max.unwrap_or_default()),
                };
                out.push(format!("{} must be {allowed}, got {number}", subject(path)));
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

fn bound(
    schema: &serde_json::Map<String, Value>,
    min_key: &str,
    max_key: &str,
    len: usize,
    unit: &str,
    path: &[Seg<'_>],
    out: &mut Vec<String>,
) {
    let len = len as u64;
    if let Some(min) = schema.get(min_key).and_then(Value::as_u64)
        && len < min
    {
        out.push(format!(
            "{} must have at least {min} {unit}, got {len}",
            subject(path)
        ));
    }
    if let Some(max) = schema.get(max_key).and_then(Value::as_u64)
        && len > max
    {
        out.push(format!(
            "{} must have at most {max} {unit}, got {len}",
            subject(path)
        ));
    }
}

fn has_type(value: &Value, json_type: &str) -> bool {
    match json_type {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        // An unknown type name is the schema author's problem, not the model's.
        _ => true,
    }
}

fn type_names(t: &Value) -> Vec<&str> {
    match t {
        Value::String(s) => vec![s.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The `minimum` and `maximum` of a numeric schema.
fn bounds(schema: &serde_json::Map<String, Value>) -> (Option<f64>, Option<f64>) {
    (
        schema.get("minimum").and_then(Value::as_f64),
        schema.get("maximum").and_then(Value::as_f64),
    )
}

/// "an integer" with its range, so a refusal of a wrong type already says what fits:
/// "an integer between 1 and 600".
fn number_phrase(noun: String, min: Option<f64>, max: Option<f64>) -> String {
    match (min, max) {
        (Some(min), Some(max)) => format!("{noun} between {min} and {max}"),
        (Some(min), None) => format!("{noun} of at least {min}"),
        (None, Some(max)) => format!("{noun} of at most {max}"),
        (None, None) => noun,
    }
}

fn type_phrase(types: &[&str]) -> String {
    let phrases: Vec<&str> = types
        .iter()
        .map(|t| match *t {
            "object" => "an object",
            "array" => "an array",
            "string" => "a string",
            "boolean" => "a boolean (true or false)",
            "null" => "null",
            "number" => "a number",
            "integer" => "an integer",
            other => other,
        })
        .collect();
    phrases.join(" or ")
}

/// A value as it appears in a message: compact JSON, cut to a readable length.
fn render(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= MAX_VALUE_CHARS {
        text
    } else {
        let cut: String = text.chars().take(MAX_VALUE_CHARS).collect();
        format!("{cut}… ({} characters)", text.chars().count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "timeout_s": {"type": ["integer", "null"], "minimum": 1, "maximum": 600},
                "mode": {"enum": ["a", "b"]},
                "cmd": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "artifacts": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"]
                }}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    #[test]
    fn wrong_type_names_parameter_expected_type_and_value() {
        let err = validate(&schema(), &json!({"path": 3}))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "parameter `path` must be a string, got 3");
    }

    #[test]
    fn missing_required_names_the_type() {
        let err = validate(&schema(), &json!({})).unwrap_err().to_string();
        assert_eq!(err, "missing required parameter `path` (a string)");
    }

    #[test]
    fn unknown_parameter_lists_the_known_ones() {
        let err = validate(&schema(), &json!({"path": "a", "pth": "b"}))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("unknown parameter `pth`; expected one of "),
            "{err}"
        );
        assert!(
            err.contains("`path`") && err.contains("`timeout_s`"),
            "{err}"
        );
    }

    #[test]
    fn nested_paths_enum_bounds_and_nullable() {
        let v = json!({"path": "a", "mode": "c", "timeout_s": 0, "cmd": [],
                       "artifacts": [{"name": 1}, {}]});
        let found = violations(&schema(), &v);
        assert!(
            found.contains(&"parameter `mode` must be one of \"a\", \"b\", got \"c\"".to_owned()),
            "{found:?}"
        );
        assert!(
            found.contains(
                &"parameter `timeout_s` must be an integer between 1 and 600, got 0".to_owned()
            ),
            "{found:?}"
        );
        assert!(
            found.contains(&"parameter `cmd` must have at least 1 items, got 0".to_owned()),
            "{found:?}"
        );
        assert!(
            found.contains(&"parameter `artifacts[0].name` must be a string, got 1".to_owned()),
            "{found:?}"
        );
        assert!(
            found.contains(&"missing required parameter `artifacts[1].name` (a string)".to_owned()),
            "{found:?}"
        );
        assert!(validate(&schema(), &json!({"path": "a", "timeout_s": null})).is_ok());
    }

    #[test]
    fn issue_15_numbers_out_of_range_or_of_the_wrong_type_name_the_range() {
        for (value, expected) in [
            (
                json!(-1),
                "parameter `timeout_s` must be an integer between 1 and 600, got -1",
            ),
            (
                json!(99_999_999_999_999_999_999.0),
                "parameter `timeout_s` must be an integer between 1 and 600, got 1e+20",
            ),
            (
                json!("10"),
                "parameter `timeout_s` must be an integer between 1 and 600 or null, got \"10\"",
            ),
        ] {
            let err = validate(&schema(), &json!({"path": "a", "timeout_s": value}))
                .unwrap_err()
                .to_string();
            assert_eq!(err, expected);
        }
        let one_bound = json!({"type": "object", "properties": {
            "n": {"type": "integer", "minimum": 1},
            "x": {"type": "number", "maximum": 0.5}
        }});
        assert_eq!(
            validate(&one_bound, &json!({"n": 0}))
                .unwrap_err()
                .to_string(),
            "parameter `n` must be at least 1, got 0"
        );
        assert_eq!(
            validate(&one_bound, &json!({"n": "a"}))
                .unwrap_err()
                .to_string(),
            "parameter `n` must be an integer of at least 1, got \"a\""
        );
        assert_eq!(
            validate(&one_bound, &json!({"x": 2}))
                .unwrap_err()
                .to_string(),
            "parameter `x` must be at most 0.5, got 2"
        );
    }

    #[test]
    fn non_object_arguments_are_reported_whole() {
        let err = validate(&schema(), &json!([1, 2])).unwrap_err().to_string();
        assert_eq!(err, "arguments must be a JSON object, got [1,2]");
    }

    #[test]
    fn long_values_are_cut() {
        let long = "x".repeat(500);
        let err = validate(&schema(), &json!({"path": [long]}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("(504 characters)"), "{err}");
        assert!(err.len() < 200);
    }

    #[test]
    fn unknown_keywords_are_accepted() {
        let s = json!({"type": "object", "properties": {"u": {"type": "string", "format": "uri"}}});
        assert!(validate(&s, &json!({"u": "not a uri"})).is_ok());
    }
}
