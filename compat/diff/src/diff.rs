//! Field-by-field comparison of two normalised answers.
//!
//! The result is a list of paths (`topics[0].partitions[1].error_code`) with both values,
//! rather than a yes/no, so that a divergence can be matched against the accepted list
//! field by field and a reader sees at once what differs.

use serde_json::Value;

#[derive(Clone, Debug)]
pub struct FieldDiff {
    pub path: String,
    pub kafka: Value,
    pub keel: Value,
}

/// Every leaf where `kafka` and `keel` differ. A field present on one side only is
/// reported with `null` on the other; arrays of different lengths are compared element
/// by element up to the longer one.
pub fn diff(kafka: &Value, keel: &Value) -> Vec<FieldDiff> {
    let mut out = Vec::new();
    walk("", kafka, keel, &mut out);
    out
}

fn walk(path: &str, kafka: &Value, keel: &Value, out: &mut Vec<FieldDiff>) {
    match (kafka, keel) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let child = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                walk(&child, a.get(key).unwrap_or(&Value::Null), b.get(key).unwrap_or(&Value::Null), out);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let child = format!("{path}[{i}]");
                walk(&child, a.get(i).unwrap_or(&Value::Null), b.get(i).unwrap_or(&Value::Null), out);
            }
        }
        _ if kafka == keel => {}
        _ => out.push(FieldDiff { path: path.to_string(), kafka: kafka.clone(), keel: keel.clone() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reports_each_differing_leaf_with_its_path() {
        let kafka = json!({ "topics": [{ "error_code": 17, "name": "x" }] });
        let keel = json!({ "topics": [{ "error_code": 0, "name": "x" }], "extra": 1 });
        let diffs = diff(&kafka, &keel);
        let paths: Vec<&str> = diffs.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["extra", "topics[0].error_code"]);
    }
}
