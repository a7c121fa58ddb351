//! The list of divergences the project has looked at and accepted, from `accepted.txt`.
//!
//! One line per accepted divergence: `API | field path pattern | reason`. The pattern is
//! matched against the whole path of a differing field; `*` stands for any run of
//! characters (array indexes included). A divergent answer counts as accepted only when
//! every one of its differing fields matches a line for its API, so an accepted
//! difference cannot hide a new one in the same answer. The reason is mandatory: an
//! entry nobody can justify should not be there.

use crate::diff::FieldDiff;

pub struct Accepted {
    pub api: String,
    pub pattern: String,
    pub reason: String,
}

pub fn parse(text: &str) -> Result<Vec<Accepted>, String> {
    let mut entries = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let parts: Vec<&str> = line.splitn(3, '|').map(str::trim).collect();
        match parts.as_slice() {
            [api, pattern, reason] if !api.is_empty() && !pattern.is_empty() && !reason.is_empty() => entries
                .push(Accepted { api: api.to_string(), pattern: pattern.to_string(), reason: reason.to_string() }),
            _ => return Err(format!("accepted list line {}: expected `API | path pattern | reason`", number + 1)),
        }
    }
    Ok(entries)
}

/// The accepted entry covering this field of an `api` answer, if any.
pub fn covering<'a>(entries: &'a [Accepted], api: &str, field: &FieldDiff) -> Option<&'a Accepted> {
    entries.iter().find(|e| e.api == api && matches(&e.pattern, field))
}

/// A pattern is a field path, optionally followed by `: KAFKA -> KEEL`, globs over the
/// two values as compact JSON (`topics[*].error_code: 3 -> 0`), so that one known
/// difference can be accepted without hiding others in the same field.
fn matches(pattern: &str, field: &FieldDiff) -> bool {
    match pattern.split_once(": ") {
        None => glob(pattern, &field.path),
        Some((path, values)) => {
            let Some((kafka, keel)) = values.split_once(" -> ") else { return false };
            glob(path, &field.path) && glob(kafka, &field.kafka.to_string()) && glob(keel, &field.keel.to_string())
        }
    }
}

/// `*` matches any run of characters, everything else matches itself.
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else { return false };
            (0..=rest.len()).filter(|&i| rest.is_char_boundary(i)).any(|i| glob(tail, &rest[i..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn values_narrow_a_pattern() {
        use super::{matches, FieldDiff};
        let diff = |kafka: i64, keel: i64| FieldDiff {
            path: "topics[1].error_code".into(),
            kafka: serde_json::Value::from(kafka),
            keel: serde_json::Value::from(keel),
        };
        assert!(matches("topics[*].error_code: 3 -> 0", &diff(3, 0)));
        assert!(!matches("topics[*].error_code: 3 -> 0", &diff(17, 3)));
        assert!(matches("topics[*].error_code", &diff(17, 3)));
    }

    #[test]
    fn star_spans_indexes_and_dots() {
        assert!(glob("responses[*].partitions[*].error_code", "responses[0].partitions[12].error_code"));
        assert!(glob("config_names*", "results[0].config_names[3]".trim_start_matches("results[0].")));
        assert!(!glob("topics[*].error_code", "topics[0].name"));
    }
}
