//! SASL settings per listener, as Kafka's `listener.name.<listener>.sasl.enabled.mechanisms`
//! and `listener.name.<listener>.oauthbearer.sasl.oauthbearer.*` overrides: the
//! broker-wide `sasl_enabled_mechanisms` and `sasl_oauthbearer_*` settings are the
//! default of every SASL listener, and a listener named in `listener_sasl_mechanisms` or
//! `listener_sasl_oauthbearer` replaces them for itself.
//!
//! Two shapes for each, so that a flag, an environment variable and the YAML file all
//! read naturally:
//! - `listener_sasl_mechanisms`: YAML `{SASL_SSL: [SCRAM-SHA-512, OAUTHBEARER]}`; a flag
//!   (repeated) `SASL_SSL=SCRAM-SHA-512,OAUTHBEARER`;
//! - `listener_sasl_oauthbearer`: YAML `{SASL_SSL: {expected_issuer: https://idp}}`; a flag
//!   (repeated) `SASL_SSL:expected_issuer=https://idp`. Each key is the name of a
//!   broker-wide `sasl_oauthbearer_*` setting without that prefix, so a setting added
//!   there can be overridden per listener without a line here.
//!
//! An override is resolved once at start against the listeners: naming an unknown
//! listener, a listener without SASL, an unknown mechanism or an unknown OAUTHBEARER
//! setting stops the broker with a message that says which.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::listeners::Listener;
use super::BrokerConfig;

/// The mechanisms Keel serves.
pub const SUPPORTED: [&str; 4] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];

/// The prefix of the broker-wide OAUTHBEARER settings a listener may override.
const OAUTHBEARER_PREFIX: &str = "sasl_oauthbearer_";

#[derive(Deserialize)]
#[serde(untagged)]
enum MapOrSpecs<T> {
    Map(BTreeMap<String, T>),
    Specs(Vec<String>),
    Spec(String),
}

impl<T> MapOrSpecs<T> {
    fn specs(self) -> Result<BTreeMap<String, T>, Vec<String>> {
        match self {
            MapOrSpecs::Map(map) => Ok(map),
            MapOrSpecs::Specs(specs) => Err(specs),
            MapOrSpecs::Spec(spec) => Err(vec![spec]),
        }
    }
}

/// `listener_sasl_mechanisms`: a map of listener to mechanisms (a list, or one
/// comma-separated string), or `LISTENER=M1,M2` specs.
pub fn deserialize_mechanisms<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Mechanisms {
        List(Vec<String>),
        Text(String),
    }
    let split = |text: &str| text.split(',').map(|m| m.trim().to_string()).filter(|m| !m.is_empty()).collect();
    match MapOrSpecs::<Mechanisms>::deserialize(d)?.specs() {
        Ok(map) => Ok(map
            .into_iter()
            .map(|(listener, m)| match m {
                Mechanisms::List(list) => (listener, list),
                Mechanisms::Text(text) => (listener, split(&text)),
            })
            .collect()),
        Err(specs) => {
            let mut out = BTreeMap::new();
            for spec in specs {
                let (listener, mechanisms) = spec.split_once('=').ok_or_else(|| {
                    serde::de::Error::custom(format!("{spec:?}: expected LISTENER=MECHANISM[,MECHANISM...]"))
                })?;
                out.insert(listener.trim().to_string(), split(mechanisms));
            }
            Ok(out)
        }
    }
}

/// `listener_sasl_oauthbearer`: a map of listener to a map of settings, or
/// `LISTENER:SETTING=VALUE` specs (values as text, typed when resolved).
pub fn deserialize_oauthbearer<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, BTreeMap<String, Value>>, D::Error> {
    match MapOrSpecs::<BTreeMap<String, Value>>::deserialize(d)?.specs() {
        Ok(map) => Ok(map),
        Err(specs) => {
            let mut out: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
            for spec in specs {
                let parsed = spec.split_once(':').and_then(|(l, rest)| rest.split_once('=').map(|(k, v)| (l, k, v)));
                let (listener, key, value) = parsed
                    .ok_or_else(|| serde::de::Error::custom(format!("{spec:?}: expected LISTENER:SETTING=VALUE")))?;
                out.entry(listener.trim().to_string())
                    .or_default()
                    .insert(key.trim().to_string(), Value::String(value.to_string()));
            }
            Ok(out)
        }
    }
}

/// The listener of `listeners` an override names (Kafka writes listener names in lower
/// case in `listener.name.<listener>.`: either case is taken); it must use SASL.
fn sasl_listener<'a>(listeners: &'a [Listener], name: &str, setting: &str) -> Result<&'a Listener, String> {
    let listener = listeners.iter().find(|l| l.name.eq_ignore_ascii_case(name)).ok_or_else(|| {
        let names: Vec<&str> = listeners.iter().map(|l| l.name.as_str()).collect();
        format!("{setting}: no listener is named {name} (listeners: {})", names.join(", "))
    })?;
    if !listener.protocol.uses_sasl() {
        return Err(format!("{setting}: listener {} does not use SASL", listener.name));
    }
    Ok(listener)
}

/// Checks a list of mechanisms: each supported.
fn check_supported(setting: &str, mechanisms: &[String]) -> Result<(), String> {
    match mechanisms.iter().find(|m| !SUPPORTED.contains(&m.as_str())) {
        Some(m) => Err(format!("{setting}: SASL mechanism {m} is not supported ({})", SUPPORTED.join(", "))),
        None => Ok(()),
    }
}

/// `mechanisms` in the order Kafka 4.x lists them in SaslHandshake answers: its
/// `SaslServerAuthenticator` copies the configured list into a `java.util.HashSet` and
/// back, so the order is by hash bucket of each name (Java's `String.hashCode`, spread
/// as `HashMap` spreads it, 16 buckets for a set this small), then as configured within
/// a bucket; duplicates are dropped. E.g. `SCRAM-SHA-256,SCRAM-SHA-512` is answered
/// `[SCRAM-SHA-512, SCRAM-SHA-256]`, as Kafka answers.
pub fn in_kafkas_order(mechanisms: &[String]) -> Vec<String> {
    const BUCKETS: u32 = 16;
    let bucket = |name: &str| {
        let h = name.encode_utf16().fold(0u32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as u32));
        (h ^ (h >> 16)) & (BUCKETS - 1)
    };
    let mut out: Vec<String> = Vec::with_capacity(mechanisms.len());
    for m in mechanisms {
        if !out.contains(m) {
            out.push(m.clone());
        }
    }
    // A stable sort keeps the configured order within a bucket.
    out.sort_by_key(|m| bucket(m));
    out
}

/// The mechanisms of every SASL listener, by listener name, in Kafka's order.
pub fn mechanisms_by_listener(
    config: &BrokerConfig,
    listeners: &[Listener],
) -> Result<BTreeMap<String, Vec<String>>, String> {
    check_supported("sasl_enabled_mechanisms", &config.sasl_enabled_mechanisms)?;
    let mut out: BTreeMap<String, Vec<String>> = listeners
        .iter()
        .filter(|l| l.protocol.uses_sasl())
        .map(|l| (l.name.clone(), in_kafkas_order(&config.sasl_enabled_mechanisms)))
        .collect();
    for (name, mechanisms) in &config.listener_sasl_mechanisms {
        let listener = sasl_listener(listeners, name, "listener_sasl_mechanisms")?;
        let setting = format!("listener_sasl_mechanisms {}", listener.name);
        check_supported(&setting, mechanisms)?;
        if mechanisms.is_empty() {
            // An override that offers nothing is a mistake, not a way to turn SASL off.
            return Err(format!("{setting}: no SASL mechanism given"));
        }
        out.insert(listener.name.clone(), in_kafkas_order(mechanisms));
    }
    Ok(out)
}

/// The configuration each SASL listener's OAUTHBEARER validator reads, by listener name.
pub fn oauthbearer_by_listener(
    config: &BrokerConfig,
    listeners: &[Listener],
) -> Result<BTreeMap<String, BrokerConfig>, String> {
    for name in config.listener_sasl_oauthbearer.keys() {
        sasl_listener(listeners, name, "listener_sasl_oauthbearer")?;
    }
    listeners
        .iter()
        .filter(|l| l.protocol.uses_sasl())
        .map(|l| Ok((l.name.clone(), oauthbearer_config(config, listeners, &l.name)?)))
        .collect()
}

/// The configuration one listener's OAUTHBEARER validator reads: `config` with that
/// listener's overrides in place of the broker-wide `sasl_oauthbearer_*` settings.
fn oauthbearer_config(config: &BrokerConfig, listeners: &[Listener], name: &str) -> Result<BrokerConfig, String> {
    let Some((_, overrides)) = config.listener_sasl_oauthbearer.iter().find(|(l, _)| l.eq_ignore_ascii_case(name))
    else {
        return Ok(config.clone());
    };
    let listener = sasl_listener(listeners, name, "listener_sasl_oauthbearer")?;
    let mut map = match serde_json::to_value(config) {
        Ok(Value::Object(map)) => map,
        _ => unreachable!("BrokerConfig serializes as a map"),
    };
    for (key, value) in overrides {
        let setting = format!("{OAUTHBEARER_PREFIX}{key}");
        if !map.contains_key(&setting) {
            return Err(format!("listener_sasl_oauthbearer {}: unknown OAUTHBEARER setting {key}", listener.name));
        }
        let typed = typed(&setting, value)
            .ok_or_else(|| format!("listener_sasl_oauthbearer {}: {value} is not a value of {key}", listener.name))?;
        map.insert(setting, typed);
    }
    let mut out: BrokerConfig =
        serde_json::from_value(Value::Object(map)).map_err(|e| format!("listener_sasl_oauthbearer {name}: {e}"))?;
    out.disk_write_bytes_per_second = config.disk_write_bytes_per_second;
    Ok(out)
}

/// `value` as setting `key` takes it: as given, else (text from a flag) read as YAML
/// (`true`, `30000`), else split at commas (a list).
fn typed(key: &str, value: &Value) -> Option<Value> {
    let fits = |v: &Value| {
        let one: Map<String, Value> = [(key.to_string(), v.clone())].into_iter().collect();
        serde_json::from_value::<BrokerConfig>(Value::Object(one)).is_ok()
    };
    if fits(value) {
        return Some(value.clone());
    }
    let text = value.as_str()?;
    let yaml = serde_yaml::from_str::<serde_yaml::Value>(text).ok().and_then(|v| serde_json::to_value(v).ok());
    let list = Value::Array(text.split(',').map(|s| Value::String(s.trim().to_string())).collect());
    yaml.into_iter().chain([list]).find(fits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::listeners::resolve;

    fn listeners() -> Vec<Listener> {
        resolve(
            &["PLAINTEXT://127.0.0.1:1".into(), "SASL_PLAINTEXT://127.0.0.1:2".into(), "SASL_SSL://127.0.0.1:3".into()],
            &[],
        )
        .unwrap()
    }

    #[test]
    fn mechanisms_per_listener_from_yaml_or_flags_with_the_broker_wide_default() {
        let yaml: BrokerConfig = serde_yaml::from_str("listener_sasl_mechanisms: {sasl_ssl: [SCRAM-SHA-512]}").unwrap();
        let flags: BrokerConfig = serde_json::from_value(serde_json::json!({
            "listener_sasl_mechanisms": ["SASL_SSL=SCRAM-SHA-512, OAUTHBEARER"]
        }))
        .unwrap();
        let by = mechanisms_by_listener(&yaml, &listeners()).unwrap();
        assert_eq!(by["SASL_SSL"], ["SCRAM-SHA-512"]);
        assert_eq!(by["SASL_PLAINTEXT"], ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"]);
        assert!(!by.contains_key("PLAINTEXT"));
        assert_eq!(mechanisms_by_listener(&flags, &listeners()).unwrap()["SASL_SSL"], ["SCRAM-SHA-512", "OAUTHBEARER"]);
        // The flag's form survives the round trip the configuration layers make.
        let again: BrokerConfig = serde_json::from_value(serde_json::to_value(&flags).unwrap()).unwrap();
        assert_eq!(again.listener_sasl_mechanisms, flags.listener_sasl_mechanisms);
    }

    #[test]
    fn mechanisms_are_listed_in_the_order_of_kafkas_hash_set() {
        let order = |m: &[&str]| in_kafkas_order(&m.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        // What Kafka 4.4.0 answered for `SCRAM-SHA-256,SCRAM-SHA-512`.
        assert_eq!(order(&["SCRAM-SHA-256", "SCRAM-SHA-512"]), ["SCRAM-SHA-512", "SCRAM-SHA-256"]);
        // PLAIN and SCRAM-SHA-512 share a bucket: configured order between them.
        assert_eq!(order(&["SCRAM-SHA-512", "OAUTHBEARER", "PLAIN"]), ["SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"]);
        assert_eq!(order(&["PLAIN", "SCRAM-SHA-256", "PLAIN"]), ["PLAIN", "SCRAM-SHA-256"]);
    }

    #[test]
    fn bad_overrides_are_refused_with_what_is_wrong() {
        let with = |m: &[(&str, &[&str])]| BrokerConfig {
            listener_sasl_mechanisms: m
                .iter()
                .map(|(l, ms)| (l.to_string(), ms.iter().map(|s| s.to_string()).collect()))
                .collect(),
            ..BrokerConfig::default()
        };
        let e = mechanisms_by_listener(&with(&[("SSL", &["PLAIN"])]), &listeners()).unwrap_err();
        assert!(e.contains("no listener is named SSL (listeners: PLAINTEXT, SASL_PLAINTEXT, SASL_SSL)"), "{e}");
        let e = mechanisms_by_listener(&with(&[("PLAINTEXT", &["PLAIN"])]), &listeners()).unwrap_err();
        assert!(e.contains("listener PLAINTEXT does not use SASL"), "{e}");
        let e = mechanisms_by_listener(&with(&[("SASL_SSL", &["GSSAPI"])]), &listeners()).unwrap_err();
        assert!(e.contains("listener_sasl_mechanisms SASL_SSL: SASL mechanism GSSAPI is not supported"), "{e}");
        let e = mechanisms_by_listener(&with(&[("SASL_SSL", &[])]), &listeners()).unwrap_err();
        assert!(e.contains("no SASL mechanism"), "{e}");
        let bad: Result<BrokerConfig, _> =
            serde_json::from_value(serde_json::json!({"listener_sasl_mechanisms": ["SASL_SSL"]}));
        assert!(bad.unwrap_err().to_string().contains("expected LISTENER=MECHANISM"));
    }

    #[test]
    fn oauthbearer_overrides_replace_the_broker_wide_settings_of_one_listener() {
        let flags: BrokerConfig = serde_json::from_value(serde_json::json!({
            "sasl_oauthbearer_expected_issuer": "https://everyone",
            "listener_sasl_oauthbearer": [
                "SASL_SSL:expected_issuer=https://idp",
                "SASL_SSL:expected_audience=a,b",
                "SASL_SSL:allow_unsecured=false",
                "SASL_SSL:clock_skew_ms=5000",
            ]
        }))
        .unwrap();
        let l = listeners();
        let ssl = oauthbearer_config(&flags, &l, "SASL_SSL").unwrap();
        assert_eq!(ssl.sasl_oauthbearer_expected_issuer.as_deref(), Some("https://idp"));
        assert_eq!(ssl.sasl_oauthbearer_expected_audience, ["a", "b"]);
        assert_eq!(
            (ssl.sasl_oauthbearer_allow_unsecured, ssl.sasl_oauthbearer_clock_skew_ms),
            (Some(false), Some(5000))
        );
        let plain = oauthbearer_config(&flags, &l, "SASL_PLAINTEXT").unwrap();
        assert_eq!(plain.sasl_oauthbearer_expected_issuer.as_deref(), Some("https://everyone"));
        let yaml: BrokerConfig =
            serde_yaml::from_str("listener_sasl_oauthbearer: {SASL_SSL: {expected_audience: [x]}}").unwrap();
        assert_eq!(oauthbearer_config(&yaml, &l, "SASL_SSL").unwrap().sasl_oauthbearer_expected_audience, ["x"]);
        let elsewhere: BrokerConfig = serde_yaml::from_str("listener_sasl_oauthbearer: {SSL: {}}").unwrap();
        let e = oauthbearer_by_listener(&elsewhere, &l).unwrap_err();
        assert!(e.contains("listener_sasl_oauthbearer: no listener is named SSL"), "{e}");
        let unknown: BrokerConfig = serde_yaml::from_str("listener_sasl_oauthbearer: {SASL_SSL: {issuer: x}}").unwrap();
        let e = oauthbearer_config(&unknown, &l, "SASL_SSL").unwrap_err();
        assert!(e.contains("unknown OAUTHBEARER setting issuer"), "{e}");
        let bad: BrokerConfig =
            serde_yaml::from_str("listener_sasl_oauthbearer: {SASL_SSL: {clock_skew_ms: soon}}").unwrap();
        assert!(oauthbearer_config(&bad, &l, "SASL_SSL").unwrap_err().contains("is not a value of clock_skew_ms"));
    }
}
