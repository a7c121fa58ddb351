//! Every rule that makes two correct answers from different brokers compare equal.
//!
//! All of them are here, one per field, each with its reason, so a reader can judge in
//! one place what the tester deliberately does not compare. The rules work on the
//! projected JSON (see `project.rs`) by field name: the projection uses Kafka's field
//! names, and each name below means the same thing wherever it appears.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Topic configs whose default value is the broker's own choice (Kafka's values are
/// tuned for a JVM broker with page-cache I/O; Keel picks its own). Their values are
/// compared only when the topic sets them explicitly, i.e. when the source is not
/// DEFAULT_CONFIG.
pub const BROKER_SPECIFIC_TOPIC_DEFAULTS: &[&str] = &[
    // Segment size and roll time follow each broker's storage layout.
    "segment.bytes",
    "segment.ms",
    // Kafka's default is 1048588 (1 MiB plus the record batch overhead); a broker may pick
    // another batch limit.
    "max.message.bytes",
];

/// Topic configs only Keel has (`write.caching`: acks=all answered before the fsync,
/// off by default). Kafka clients pass unknown config names through untouched, so an
/// extra name is harmless; it is left out of both sides' lists.
pub const KEEL_ONLY_TOPIC_CONFIGS: &[&str] = &["write.caching"];

/// DescribeConfigs' `config_source` for a value nobody set.
const DEFAULT_CONFIG_SOURCE: i64 = 5;
/// DescribeConfigs' `config_source` for a cluster-wide dynamic default. Kafka 4 writes
/// some defaults (`min.insync.replicas`) as cluster-level dynamic configs when its
/// storage is formatted, so a value nobody set shows this source there; Keel has the
/// same defaults built in (DEFAULT). Both count as "nobody set it".
const DYNAMIC_DEFAULT_BROKER_CONFIG_SOURCE: i64 = 3;
/// DescribeConfigs' `resource_type` for a broker.
const BROKER_RESOURCE: i64 = 4;

/// Rewrites one broker's projected answers. Keep one per broker for the whole run:
/// topic ids become symbols in order of first appearance, so equal behaviour gives
/// equal symbols on both sides.
#[derive(Default)]
pub struct Normalizer {
    topic_id_symbols: HashMap<String, String>,
    producer_id_symbols: HashMap<i64, String>,
    member_id_symbols: HashMap<String, String>,
    group_epoch_symbols: HashMap<i64, String>,
}

impl Normalizer {
    pub fn normalize(&mut self, value: Value) -> Value {
        match value {
            Value::Object(fields) => Value::Object(self.normalize_object(fields)),
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.normalize(v)).collect()),
            other => other,
        }
    }

    fn normalize_object(&mut self, fields: Map<String, Value>) -> Map<String, Value> {
        let is_broker_resource = fields.get("resource_type").and_then(Value::as_i64) == Some(BROKER_RESOURCE);
        let is_log_append_time_batch = fields.get("timestamp_type").and_then(Value::as_str) == Some("LogAppendTime");
        let mut out = Map::new();
        for (key, value) in fields {
            let value = match key.as_str() {
                // Quotas are per broker and not what is under test.
                "throttle_time_ms" => continue,
                // Error texts are free-form and differ between implementations; clients act
                // on the error code, which is compared.
                "error_message" => continue,
                // Each cluster has its own id, by construction.
                "cluster_id" => continue,
                // Where a broker listens is set by the harness, not by behaviour.
                "host" | "port" => continue,
                // Supported version ranges differ by design; the tester only sends versions
                // both brokers advertise, so the ranges themselves are not compared.
                "api_versions" => continue,
                // Leader epochs count leader changes and start wherever each broker's
                // replication protocol starts them (Kafka: 0 per partition; Keel: its Raft
                // term), so their values are not comparable.
                "leader_epoch" => continue,
                // Node ids are configuration; only "a node" versus "no node" (-1) matters.
                "node_id" | "leader_id" | "controller_id" => node(value),
                "replica_nodes"
                | "isr_nodes"
                | "adding_replicas"
                | "removing_replicas"
                | "eligible_leader_replicas"
                | "last_known_elr"
                | "offline_replicas" => node_list(value),
                // KIP-848 epochs are each coordinator's counters, which clients only echo
                // back: Kafka 4.4's first join of a group answers epoch 2, Keel's 1, and
                // both count up by one per change from there. Compared as symbols in
                // order of appearance, so "the same epoch", "a new epoch" and the special
                // values (0 joining, -1 left, -2 static leave) still compare.
                "member_epoch" | "group_epoch" | "assignment_epoch" => self.group_epoch(value),
                // A quorum voter is a node (DescribeQuorum).
                "replica_id" => node(value),
                // Topic ids are random UUIDs; compared as symbols by order of appearance.
                "topic_id" => self.topic_id(value),
                // Each broker hands out its own member ids (a group's leader is one);
                // compared as symbols by order of appearance.
                "member_id" | "leader" => self.member_id(value),
                // Each broker hands out its own producer ids; compared as symbols by order
                // of appearance, so "the same producer" is still compared.
                "producer_id" => self.producer_id(value),
                // The transaction coordinator's epoch (DescribeProducers) counts
                // coordinator moves, as leader epochs count leader changes.
                "coordinator_epoch" => continue,
                // When the transaction started is the coordinator's clock; only whether a
                // start is given (not -1) is compared.
                "transaction_start_time_ms" => set_or_unset(value),
                // The append time is the broker's clock; only whether one is given (not -1)
                // is compared.
                "log_append_time_ms" => set_or_unset(value),
                // A LogAppendTime batch's max timestamp is the broker's clock when it
                // appended the batch; compared by its form: milliseconds of a plausible
                // clock (a time in seconds, microseconds or the producer's own stays as
                // it is and differs).
                "max_timestamp" if is_log_append_time_batch => append_time_ms(value),
                // ListOffsets' timestamp of a record: the tester's, or the append time of a
                // LogAppendTime topic.
                "timestamp" => client_or_broker_clock(value),
                // A producer's last timestamp (DescribeProducers) is its last batch's, which
                // the tester stamps, or its last marker's, which is the broker's clock.
                "last_timestamp" => client_or_broker_clock(value),
                // A broker resource is named by its node id (see node ids above).
                "resource_name" if is_broker_resource => Value::String("<node>".into()),
                // DescribeProducers' producers come sorted by what they did (project.rs);
                // two that did the same are told apart only by their ids' symbols, so
                // they are sorted again once those are set.
                "active_producers" => sorted(self.normalize(value)),
                // A group's members come in each broker's order (a hash map's on Kafka);
                // sorted once their ids are symbols, set in order of first appearance.
                "members" => sorted(self.normalize(value)),
                "configs" => broker_specific_defaults(without_keel_only_configs(value)),
                "config_names" => without_keel_only_configs(value),
                _ => self.normalize(value),
            };
            out.insert(key, value);
        }
        out
    }

    fn producer_id(&mut self, value: Value) -> Value {
        let Some(id) = value.as_i64().filter(|id| *id >= 0) else { return value };
        let next = format!("<producer id #{}>", self.producer_id_symbols.len() + 1);
        Value::String(self.producer_id_symbols.entry(id).or_insert(next).clone())
    }

    fn member_id(&mut self, value: Value) -> Value {
        let Value::String(id) = value else { return value };
        if id.is_empty() {
            return Value::String(id);
        }
        let next = format!("<member id #{}>", self.member_id_symbols.len() + 1);
        Value::String(self.member_id_symbols.entry(id).or_insert(next).clone())
    }

    fn group_epoch(&mut self, value: Value) -> Value {
        let Some(epoch) = value.as_i64().filter(|epoch| *epoch > 0) else { return value };
        let next = format!("<group epoch #{}>", self.group_epoch_symbols.len() + 1);
        Value::String(self.group_epoch_symbols.entry(epoch).or_insert(next).clone())
    }

    fn topic_id(&mut self, value: Value) -> Value {
        let Value::String(id) = value else { return value };
        if id == uuid::Uuid::nil().to_string() {
            return Value::String("<no id>".into());
        }
        let next = format!("<topic id #{}>", self.topic_id_symbols.len() + 1);
        Value::String(self.topic_id_symbols.entry(id).or_insert(next).clone())
    }
}

/// The tester stamps its records before this (2024-01-01); a later timestamp is a
/// broker's clock, compared only as such.
const TESTER_CLOCK_BEFORE: i64 = 1_704_067_200_000;

fn client_or_broker_clock(value: Value) -> Value {
    match value.as_i64() {
        Some(t) if t >= TESTER_CLOCK_BEFORE => Value::String("<broker clock>".into()),
        _ => value,
    }
}

/// 2100-01-01 in milliseconds: a later "append time" is not in milliseconds.
const BROKER_CLOCK_BEFORE: i64 = 4_102_444_800_000;

fn append_time_ms(value: Value) -> Value {
    match value.as_i64() {
        Some(t) if (TESTER_CLOCK_BEFORE..BROKER_CLOCK_BEFORE).contains(&t) => Value::String("<append time, ms>".into()),
        _ => value,
    }
}

fn sorted(value: Value) -> Value {
    match value {
        Value::Array(mut items) => {
            items.sort_by_cached_key(|item| item.to_string());
            Value::Array(items)
        }
        other => other,
    }
}

fn node(value: Value) -> Value {
    match value.as_i64() {
        Some(id) if id >= 0 => Value::String("<node>".into()),
        _ => value,
    }
}

fn node_list(value: Value) -> Value {
    match value {
        Value::Array(ids) => Value::Array(ids.into_iter().map(node).collect()),
        other => other,
    }
}

fn set_or_unset(value: Value) -> Value {
    match value.as_i64() {
        Some(-1) => value,
        _ => Value::String("<set>".into()),
    }
}

/// Leaves out `KEEL_ONLY_TOPIC_CONFIGS`, from a list of names or a map by name.
fn without_keel_only_configs(value: Value) -> Value {
    match value {
        Value::Array(names) => Value::Array(
            names.into_iter().filter(|n| !n.as_str().is_some_and(|n| KEEL_ONLY_TOPIC_CONFIGS.contains(&n))).collect(),
        ),
        Value::Object(configs) => {
            Value::Object(configs.into_iter().filter(|(n, _)| !KEEL_ONLY_TOPIC_CONFIGS.contains(&n.as_str())).collect())
        }
        other => other,
    }
}

/// Drops the value of a broker-specific default (see `BROKER_SPECIFIC_TOPIC_DEFAULTS`),
/// and counts a cluster-wide dynamic default as a default.
fn broker_specific_defaults(value: Value) -> Value {
    let Value::Object(configs) = value else { return value };
    let configs = configs
        .into_iter()
        .map(|(name, mut entry)| {
            if entry["config_source"].as_i64() == Some(DYNAMIC_DEFAULT_BROKER_CONFIG_SOURCE) {
                entry["config_source"] = Value::from(DEFAULT_CONFIG_SOURCE);
            }
            let is_default = entry["config_source"].as_i64() == Some(DEFAULT_CONFIG_SOURCE);
            if is_default && BROKER_SPECIFIC_TOPIC_DEFAULTS.contains(&name.as_str()) {
                entry["value"] = Value::String("<broker default>".into());
            }
            (name, entry)
        })
        .collect();
    Value::Object(configs)
}
