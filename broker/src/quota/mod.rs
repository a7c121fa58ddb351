//! Client quotas as Kafka keeps them: byte-rate limits for producers and consumers
//! per user and client id (`producer_byte_rate`, `consumer_byte_rate`), request and
//! mutation rates, connection creation rates per IP; set with AlterClientQuotas and
//! read with DescribeClientQuotas. This module holds the quotas' entities and values,
//! their validation and precedence, and the rate sensors; `crate::throttle` enforces
//! them.
//!
//! The quotas live in the cluster metadata (replicated with it in a cluster), as
//! KRaft keeps its QuotaRecords.

pub mod rate;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use rate::Kind;

pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";
pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";

/// The name of one entity type in a quota entity: a user, client id or IP, or that
/// type's default (Kafka's `<default>`, a null name on the wire).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Name {
    Default,
    Named(String),
}

impl Name {
    pub fn from_wire(name: Option<&str>) -> Name {
        name.map_or(Name::Default, |n| Name::Named(n.to_string()))
    }

    pub fn to_wire(&self) -> Option<&str> {
        match self {
            Name::Default => None,
            Name::Named(n) => Some(n),
        }
    }
}

/// A quota entity: which of user, client id and IP it names (Kafka's
/// ClientQuotaEntity, a map from entity type to name).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Entity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<Name>,
}

impl Entity {
    /// The entity of `(type, name)` pairs as a request carries them; a type named
    /// twice keeps its last name, as Kafka's map does. Unknown types are an error.
    pub fn from_parts<'a>(parts: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> Result<Entity, String> {
        let mut entity = Entity::default();
        let mut any = false;
        for (entity_type, name) in parts {
            any = true;
            let slot = match entity_type {
                USER => &mut entity.user,
                CLIENT_ID => &mut entity.client_id,
                IP => &mut entity.ip,
                other => return Err(format!("Unhandled client quota entity type: {other}")),
            };
            *slot = Some(Name::from_wire(name));
        }
        if !any {
            return Err("Invalid empty client quota entity".into());
        }
        Ok(entity)
    }

    /// `(type, name)` pairs, in a fixed order.
    pub fn parts(&self) -> Vec<(&'static str, Option<&str>)> {
        [(USER, &self.user), (CLIENT_ID, &self.client_id), (IP, &self.ip)]
            .into_iter()
            .filter_map(|(t, n)| n.as_ref().map(|n| (t, n.to_wire())))
            .collect()
    }

    fn get(&self, entity_type: &str) -> Option<&Name> {
        match entity_type {
            USER => self.user.as_ref(),
            CLIENT_ID => self.client_id.as_ref(),
            IP => self.ip.as_ref(),
            _ => None,
        }
    }

    fn len(&self) -> usize {
        self.parts().len()
    }
}

/// The quotas set on one entity, by key.
pub type Values = BTreeMap<String, f64>;

/// How a quota key's value is checked (Kafka's QuotaConfigs types: LONG and INT
/// take whole numbers, DOUBLE any).
enum KeyType {
    Whole,
    Double,
}

/// The keys an entity may carry, by the entity types it names (Kafka's
/// ClientQuotaControlManager), or the refusal.
fn keys_for(entity: &Entity) -> Result<&'static [(&'static str, KeyType)], String> {
    const CLIENT_KEYS: &[(&str, KeyType)] = &[
        (PRODUCER_BYTE_RATE, KeyType::Whole),
        (CONSUMER_BYTE_RATE, KeyType::Whole),
        (REQUEST_PERCENTAGE, KeyType::Double),
        (CONTROLLER_MUTATION_RATE, KeyType::Double),
    ];
    const IP_KEYS: &[(&str, KeyType)] = &[(CONNECTION_CREATION_RATE, KeyType::Whole)];
    match (&entity.user, &entity.client_id, &entity.ip) {
        (_, _, None) if entity.user.is_some() || entity.client_id.is_some() => Ok(CLIENT_KEYS),
        (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
            Err("Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId".into())
        }
        // Kafka also resolves host names here; a reactor does not block on DNS, so
        // only IP addresses are taken.
        (None, None, Some(Name::Named(addr))) if addr.parse::<std::net::IpAddr>().is_err() => {
            Err(format!("{addr} is not a valid IP or resolvable host."))
        }
        (None, None, Some(_)) => Ok(IP_KEYS),
        _ => Err("Invalid empty client quota entity".into()),
    }
}

/// Checks an alteration of one entity as Kafka's controller does: the entity, then
/// each key set (removals are not checked). `Err` is the INVALID_REQUEST message.
pub fn validate(entity: &Entity, ops: &[(String, Option<f64>)]) -> Result<(), String> {
    for (entity_type, name) in entity.parts() {
        if name == Some("") {
            return Err(format!("Empty {entity_type} not supported"));
        }
    }
    let keys = keys_for(entity)?;
    for (key, value) in ops {
        let Some(value) = value else { continue };
        let Some((_, kind)) = keys.iter().find(|(k, _)| k == key) else {
            return Err(format!("Invalid configuration key {key}"));
        };
        let whole = match kind {
            KeyType::Double => true,
            KeyType::Whole => {
                let epsilon = 1e-6;
                ((value + epsilon).trunc() - value).abs() <= epsilon
            }
        };
        if !whole {
            return Err(format!("{key} cannot be a fractional value."));
        }
    }
    Ok(())
}

/// Applies ops to an entity's values: `None` removes a key.
pub fn apply(values: &mut Values, ops: &[(String, Option<f64>)]) {
    for (key, value) in ops {
        match value {
            Some(v) => {
                values.insert(key.clone(), *v);
            }
            None => {
                values.remove(key);
            }
        }
    }
}

/// One component of a DescribeClientQuotas filter.
pub enum Match {
    /// A type's exact name, or its default (`Name::Default`).
    Exact(Name),
    /// Any entity naming this type, default or not.
    Specified,
}

/// Kafka's filter match types.
pub const MATCH_EXACT: i8 = 0;
pub const MATCH_DEFAULT: i8 = 1;
pub const MATCH_SPECIFIED: i8 = 2;

/// Why a DescribeClientQuotas filter is refused.
pub enum FilterError {
    Invalid(String),
    /// An entity type Kafka does not know (UNSUPPORTED_VERSION, as Kafka answers).
    Unsupported(String),
}

/// Parses DescribeClientQuotas filter components, as Kafka's ClientQuotasImage.
pub fn parse_filter<'a>(
    components: impl IntoIterator<Item = (&'a str, i8, Option<&'a str>)>,
) -> Result<Vec<(&'a str, Match)>, FilterError> {
    let mut filter: Vec<(&str, Match)> = Vec::new();
    for (entity_type, match_type, name) in components {
        if entity_type.is_empty() {
            return Err(FilterError::Invalid("Invalid empty entity type.".into()));
        }
        if filter.iter().any(|(t, _)| *t == entity_type) {
            return Err(FilterError::Invalid(format!(
                "Entity type {entity_type} cannot appear more than once in the filter."
            )));
        }
        if ![USER, CLIENT_ID, IP].contains(&entity_type) {
            return Err(FilterError::Unsupported(format!("Unsupported entity type {entity_type}")));
        }
        let m = match (match_type, name) {
            (MATCH_EXACT, Some(n)) => Match::Exact(Name::Named(n.to_string())),
            (MATCH_EXACT, None) => {
                return Err(FilterError::Invalid(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                ))
            }
            (MATCH_DEFAULT, None) => Match::Exact(Name::Default),
            (MATCH_DEFAULT, Some(_)) => {
                return Err(FilterError::Invalid(
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.".into(),
                ))
            }
            (MATCH_SPECIFIED, None) => Match::Specified,
            (MATCH_SPECIFIED, Some(_)) => {
                return Err(FilterError::Invalid(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.".into(),
                ))
            }
            (other, _) => return Err(FilterError::Invalid(format!("Unknown match type {other}"))),
        };
        filter.push((entity_type, m));
    }
    let has = |t: &str| filter.iter().any(|(ft, _)| *ft == t);
    if has(IP) && (has(USER) || has(CLIENT_ID)) {
        return Err(FilterError::Invalid(
            "Invalid entity filter component combination. IP filter component should not be used with user or \
             clientId filter component."
                .into(),
        ));
    }
    Ok(filter)
}

/// Whether an entity passes a parsed filter: every component matches, and with
/// `strict` the entity names no other type. An empty filter matches everything
/// unless strict.
pub fn matches(entity: &Entity, filter: &[(&str, Match)], strict: bool) -> bool {
    if filter.is_empty() {
        return !strict;
    }
    let each = filter.iter().all(|(t, m)| match (entity.get(t), m) {
        (Some(name), Match::Exact(want)) => name == want,
        (Some(_), Match::Specified) => true,
        (None, _) => false,
    });
    each && (!strict || entity.len() == filter.len())
}

/// The quota of `key` that applies to a client, and the identity its traffic is
/// measured under, in Kafka's order of precedence:
/// user and client id, user and default client, user, default user and client id,
/// default user and default client, default user, client id, default client.
/// The measured identity keeps the user and client id a matching entity names
/// (a default stands for each user or client apart), and "" for a type the entity
/// does not name, as Kafka's quota metric tags.
pub fn resolve(quotas: &[(Entity, Values)], key: &str, user: &str, client_id: &str) -> Option<(f64, (String, String))> {
    let named = |n: &str| Some(Name::Named(n.to_string()));
    let (u, c, d) = (named(user), named(client_id), Some(Name::Default));
    let order = [
        (u.clone(), c.clone()),
        (u.clone(), d.clone()),
        (u.clone(), None),
        (d.clone(), c.clone()),
        (d.clone(), d.clone()),
        (d.clone(), None),
        (None, c.clone()),
        (None, d.clone()),
    ];
    for (user_name, client_name) in order {
        let entity = Entity { user: user_name, client_id: client_name, ip: None };
        let Ok(i) = quotas.binary_search_by(|(e, _)| e.cmp(&entity)) else { continue };
        if let Some(bound) = quotas[i].1.get(key) {
            let tag = |named: bool, value: &str| if named { value.to_string() } else { String::new() };
            return Some((*bound, (tag(entity.user.is_some(), user), tag(entity.client_id.is_some(), client_id))));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(user: Option<Name>, client: Option<Name>) -> Entity {
        Entity { user, client_id: client, ip: None }
    }

    #[test]
    fn precedence_follows_kafka_and_defaults_measure_each_client_apart() {
        let n = |s: &str| Some(Name::Named(s.into()));
        let v = |x: f64| Values::from([(PRODUCER_BYTE_RATE.to_string(), x)]);
        let mut quotas = vec![
            (entity(None, Some(Name::Default)), v(8.0)),
            (entity(Some(Name::Default), None), v(6.0)),
            (entity(n("alice"), None), v(3.0)),
            (entity(n("alice"), n("app")), v(1.0)),
        ];
        quotas.sort_by(|a, b| a.0.cmp(&b.0));
        let r = |u: &str, c: &str| resolve(&quotas, PRODUCER_BYTE_RATE, u, c);
        assert_eq!(r("alice", "app"), Some((1.0, ("alice".into(), "app".into()))));
        assert_eq!(r("alice", "other"), Some((3.0, ("alice".into(), String::new()))));
        assert_eq!(r("bob", "app"), Some((6.0, ("bob".into(), String::new()))));
        assert_eq!(resolve(&quotas, CONSUMER_BYTE_RATE, "bob", "app"), None);
        quotas.retain(|(e, _)| e.user.is_none());
        assert_eq!(resolve(&quotas, PRODUCER_BYTE_RATE, "bob", "app"), Some((8.0, (String::new(), "app".into()))));
    }

    #[test]
    fn alterations_are_checked_as_kafka_checks_them() {
        let user = Entity::from_parts([(USER, Some("alice"))]).unwrap();
        let set = |k: &str, v: f64| vec![(k.to_string(), Some(v))];
        assert!(validate(&user, &set(PRODUCER_BYTE_RATE, 1024.0)).is_ok());
        assert_eq!(
            validate(&user, &set(PRODUCER_BYTE_RATE, 1.5)).unwrap_err(),
            "producer_byte_rate cannot be a fractional value."
        );
        assert_eq!(validate(&user, &set("bogus", 1.0)).unwrap_err(), "Invalid configuration key bogus");
        assert!(validate(&user, &[("bogus".to_string(), None)]).is_ok());
        let ip = Entity::from_parts([(IP, Some("127.0.0.1"))]).unwrap();
        assert!(validate(&ip, &set(CONNECTION_CREATION_RATE, 10.0)).is_ok());
        assert!(validate(&ip, &set(PRODUCER_BYTE_RATE, 10.0)).is_err());
        let mixed = Entity::from_parts([(USER, Some("a")), (IP, Some("127.0.0.1"))]).unwrap();
        assert!(validate(&mixed, &[]).unwrap_err().starts_with("Invalid quota entity combination"));
        assert_eq!(Entity::from_parts([]).unwrap_err(), "Invalid empty client quota entity");
        assert_eq!(
            Entity::from_parts([("group", Some("g"))]).unwrap_err(),
            "Unhandled client quota entity type: group"
        );
        let empty = Entity::from_parts([(CLIENT_ID, Some(""))]).unwrap();
        assert_eq!(validate(&empty, &[]).unwrap_err(), "Empty client-id not supported");
    }

    #[test]
    fn filters_match_exact_default_and_specified_names() {
        let alice_app = Entity::from_parts([(USER, Some("alice")), (CLIENT_ID, Some("app"))]).unwrap();
        let default_user = Entity::from_parts([(USER, None)]).unwrap();
        let f = |c: Vec<(&'static str, i8, Option<&'static str>)>| parse_filter(c).ok().unwrap();
        let user_specified = f(vec![(USER, MATCH_SPECIFIED, None)]);
        assert!(matches(&alice_app, &user_specified, false));
        assert!(!matches(&alice_app, &user_specified, true));
        assert!(matches(&default_user, &user_specified, true));
        assert!(matches(&default_user, &f(vec![(USER, MATCH_DEFAULT, None)]), true));
        assert!(!matches(&alice_app, &f(vec![(USER, MATCH_EXACT, Some("bob"))]), false));
        assert!(matches(&alice_app, &[], false));
        assert!(!matches(&alice_app, &[], true));
        assert!(matches!(parse_filter([(USER, MATCH_EXACT, None)]), Err(FilterError::Invalid(_))));
        assert!(matches!(parse_filter([("group", MATCH_SPECIFIED, None)]), Err(FilterError::Unsupported(_))));
        assert!(matches!(
            parse_filter([(USER, MATCH_SPECIFIED, None), (IP, MATCH_SPECIFIED, None)]),
            Err(FilterError::Invalid(_))
        ));
    }
}
