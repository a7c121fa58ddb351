//! Where each broker setting comes from. Four layers, the later winning:
//! Keel's defaults, then the YAML file (`--config`), then `KEEL_<SETTING>` environment
//! variables (`KEEL_SMP=2`, `KEEL_DATA_DIR=/a`, `KEEL_TOPIC_DEFAULTS='{log.retention.ms: 60000}'`),
//! then command-line flags. So a flag beats the environment, which beats the file.
//!
//! The layers are merged as JSON objects keyed by the YAML names of `BrokerConfig`
//! rather than field by field in code: a setting added to `BrokerConfig` gets its
//! environment variable and its place in `keel config print` without a line here. A
//! layer replaces a setting whole (a `topic_defaults` map from the environment replaces
//! the file's), as Kafka's own override layers do.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::BrokerConfig;

/// The layer a setting's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    Default,
    Yaml,
    Env,
    Flag,
}

impl Layer {
    pub fn name(self) -> &'static str {
        match self {
            Layer::Default => "default",
            Layer::Yaml => "yaml",
            Layer::Env => "env",
            Layer::Flag => "flag",
        }
    }
}

/// The effective configuration and, per setting, its value and the layer it came from.
pub struct Resolved {
    pub config: BrokerConfig,
    pub settings: BTreeMap<String, (Value, Layer)>,
}

/// `value` of setting `key` as shown to people (`keel config print`, the admin API's
/// `/v1/config`): the admin token and users' passwords are replaced by `<redacted>`.
pub fn redacted(key: &str, value: &Value) -> Value {
    let hide_last = |user: &Value| match user.as_str().and_then(|u| u.rsplit_once(':')) {
        Some((name, _)) => Value::String(format!("{name}:<redacted>")),
        None => Value::String("<redacted>".into()),
    };
    match (key, value) {
        ("admin_token", Value::String(_)) => Value::String("<redacted>".into()),
        ("plain_users" | "scram_users", Value::Array(users)) => Value::Array(users.iter().map(hide_last).collect()),
        _ => value.clone(),
    }
}

/// The environment variable that sets `key`: `KEEL_` and the key in upper case.
pub fn env_name(key: &str) -> String {
    format!("KEEL_{}", key.to_uppercase())
}

/// Merges the layers: `yaml` is the file's path, `env` the process environment (or a
/// test's), `flags` the settings given on the command line under their YAML names.
pub fn resolve(
    yaml: Option<&Path>,
    env: &BTreeMap<String, String>,
    flags: Map<String, Value>,
) -> Result<Resolved, String> {
    let defaults = match serde_json::to_value(BrokerConfig::default()) {
        Ok(Value::Object(map)) => map,
        _ => unreachable!("BrokerConfig serializes as a map"),
    };
    let mut settings: BTreeMap<String, (Value, Layer)> =
        defaults.iter().map(|(k, v)| (k.clone(), (v.clone(), Layer::Default))).collect();
    if let Some(path) = yaml {
        for (key, value) in yaml_layer(path, &defaults)? {
            settings.insert(key, (value, Layer::Yaml));
        }
    }
    for key in defaults.keys() {
        if let Some(text) = env.get(&env_name(key)) {
            settings.insert(key.clone(), (env_value(key, text)?, Layer::Env));
        }
    }
    for (key, value) in flags {
        assert!(defaults.contains_key(&key), "flag {key} names no setting of BrokerConfig");
        settings.insert(key, (value, Layer::Flag));
    }
    let merged: Map<String, Value> = settings.iter().map(|(k, (v, _))| (k.clone(), v.clone())).collect();
    let config = serde_json::from_value(Value::Object(merged)).map_err(|e| format!("configuration: {e}"))?;
    Ok(Resolved { config, settings })
}

/// The process environment's `KEEL_*` variables.
pub fn process_env() -> BTreeMap<String, String> {
    std::env::vars().filter(|(k, _)| k.starts_with("KEEL_")).collect()
}

fn yaml_layer(path: &Path, known: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let parsed: serde_yaml::Value =
        serde_yaml::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))?;
    let map = match serde_json::to_value(parsed) {
        Ok(Value::Object(map)) => map,
        Ok(Value::Null) => Map::new(),
        _ => return Err(format!("parsing {}: expected a map of settings", path.display())),
    };
    let mut out = Map::new();
    for (key, value) in map {
        let key = if key == "data_dirs" { "data_dir".to_string() } else { key };
        if !known.contains_key(&key) {
            let hint = did_you_mean(&key, known.keys().map(String::as_str))
                .map(|k| format!(" (did you mean {k}?)"))
                .unwrap_or_default();
            return Err(format!("{}: unknown setting {key}{hint}", path.display()));
        }
        check_one(&key, &value).map_err(|e| format!("{}: {key}: {e}", path.display()))?;
        out.insert(key, value);
    }
    Ok(out)
}

/// An environment value read as YAML (`2`, `true`, `[/a, /b]`, `{k: v}`), or as the
/// plain string when that is what the setting takes (`KEEL_CPUSET=2`).
fn env_value(key: &str, text: &str) -> Result<Value, String> {
    let parsed = serde_yaml::from_str::<serde_yaml::Value>(text).ok().and_then(|v| serde_json::to_value(v).ok());
    let as_string = Value::String(text.to_string());
    match parsed {
        Some(v) if check_one(key, &v).is_ok() => Ok(v),
        _ => check_one(key, &as_string).map(|_| as_string).map_err(|e| format!("{}={text:?}: {e}", env_name(key))),
    }
}

/// Whether `value` is a valid value of setting `key` on its own.
fn check_one(key: &str, value: &Value) -> Result<(), String> {
    let one: Map<String, Value> = [(key.to_string(), value.clone())].into_iter().collect();
    serde_json::from_value::<BrokerConfig>(Value::Object(one)).map(|_| ()).map_err(|e| e.to_string())
}

/// The closest of `candidates` to `name` when it is close enough to be a typo: at most
/// a third of its characters differ.
pub fn did_you_mean<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d > 0 && *d <= name.chars().count().div_ceil(3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb)).min(above + 1).min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn flags_beat_env_beat_yaml_beat_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keel.yaml");
        std::fs::write(&file, "smp: 3\nmemory: 3G\nnum_partitions: 4\ndata_dirs: /y\n").unwrap();
        let flags: Map<String, Value> = [("smp".to_string(), json!(5))].into_iter().collect();
        let r = resolve(Some(&file), &env(&[("KEEL_SMP", "4"), ("KEEL_MEMORY", "4G"), ("KEEL_CPUSET", "2")]), flags)
            .unwrap();
        assert_eq!((r.config.smp, r.config.memory.as_str()), (5, "4G"));
        assert_eq!((r.config.num_partitions, r.config.cpuset.as_deref()), (4, Some("2")));
        assert_eq!(r.config.data_dirs, vec![std::path::PathBuf::from("/y")]);
        assert_eq!(r.settings["smp"].1, Layer::Flag);
        assert_eq!(r.settings["memory"].1, Layer::Env);
        assert_eq!(r.settings["num_partitions"].1, Layer::Yaml);
        assert_eq!(r.settings["kafka_addr"].1, Layer::Default);
    }

    #[test]
    fn bad_values_and_unknown_keys_name_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keel.yaml");
        std::fs::write(&file, "num_partition: 3\n").unwrap();
        let e = resolve(Some(&file), &BTreeMap::new(), Map::new()).err().unwrap();
        assert!(e.contains("unknown setting num_partition (did you mean num_partitions?)"), "{e}");
        let e = resolve(None, &env(&[("KEEL_SMP", "two")]), Map::new()).err().unwrap();
        assert!(e.starts_with("KEEL_SMP=\"two\""), "{e}");
        let r = resolve(None, &env(&[("KEEL_DATA_DIR", "[/a, /b]")]), Map::new()).unwrap();
        assert_eq!(r.config.data_dirs.len(), 2);
    }

    #[test]
    fn suggestions_only_for_near_misses() {
        let names = ["retention.ms", "retention.bytes", "segment.ms"];
        assert_eq!(did_you_mean("retention.mss", names.into_iter()), Some("retention.ms"));
        assert_eq!(did_you_mean("retension.bytes", names.into_iter()), Some("retention.bytes"));
        assert_eq!(did_you_mean("foo", names.into_iter()), None);
    }
}
