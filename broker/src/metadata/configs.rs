//! Topic configs Keel knows: their defaults, the broker setting each falls back to, and
//! validation. Unknown names are refused (INVALID_CONFIG), as Kafka does.

use std::collections::BTreeMap;

use super::Metadata;
use crate::config::BrokerConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    Long,
    Str,
    Bool,
    Ratio,
    List,
}

pub struct TopicConfigDef {
    pub name: &'static str,
    pub default: &'static str,
    /// The broker config a topic inherits this from ("" for none).
    pub broker_name: &'static str,
    pub kind: Kind,
}

const fn def(name: &'static str, default: &'static str, broker_name: &'static str, kind: Kind) -> TopicConfigDef {
    TopicConfigDef { name, default, broker_name, kind }
}

/// Every topic config Kafka 4.x defines, in its order, with its default. Those Keel
/// does not act on (compression levels, remote and tiered storage, throttles, the
/// dead-letter queue) are accepted, stored and described all the same, so tools
/// that copy configs between clusters work; docs/compatibility.md lists them.
pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    def("cleanup.policy", "delete", "log.cleanup.policy", Kind::List),
    def("compression.gzip.level", "-1", "compression.gzip.level", Kind::Int),
    def("compression.lz4.level", "9", "compression.lz4.level", Kind::Int),
    def("compression.type", "producer", "compression.type", Kind::Str),
    def("compression.zstd.level", "3", "compression.zstd.level", Kind::Int),
    def("delete.retention.ms", "86400000", "log.cleaner.delete.retention.ms", Kind::Long),
    def("errors.deadletterqueue.group.enable", "false", "", Kind::Bool),
    def("file.delete.delay.ms", "60000", "log.segment.delete.delay.ms", Kind::Long),
    def("flush.messages", "9223372036854775807", "log.flush.interval.messages", Kind::Long),
    def("flush.ms", "9223372036854775807", "log.flush.interval.ms", Kind::Long),
    def("follower.replication.throttled.replicas", "", "", Kind::List),
    def("index.interval.bytes", "4096", "log.index.interval.bytes", Kind::Int),
    def("leader.replication.throttled.replicas", "", "", Kind::List),
    def("local.retention.bytes", "-2", "log.local.retention.bytes", Kind::Long),
    def("local.retention.ms", "-2", "log.local.retention.ms", Kind::Long),
    def("max.compaction.lag.ms", "9223372036854775807", "log.cleaner.max.compaction.lag.ms", Kind::Long),
    def("max.decompressed.message.bytes", "2147483639", "max.decompressed.message.bytes", Kind::Int),
    def("max.message.bytes", "1048588", "message.max.bytes", Kind::Int),
    def("message.timestamp.after.max.ms", "3600000", "log.message.timestamp.after.max.ms", Kind::Long),
    def("message.timestamp.before.max.ms", "9223372036854775807", "log.message.timestamp.before.max.ms", Kind::Long),
    def("message.timestamp.type", "CreateTime", "log.message.timestamp.type", Kind::Str),
    def("min.cleanable.dirty.ratio", "0.5", "log.cleaner.min.cleanable.ratio", Kind::Ratio),
    def("min.compaction.lag.ms", "0", "log.cleaner.min.compaction.lag.ms", Kind::Long),
    def("min.insync.replicas", "1", "min.insync.replicas", Kind::Int),
    def("preallocate", "false", "log.preallocate", Kind::Bool),
    def("remote.copy.lag.bytes", "-1", "log.remote.copy.lag.bytes", Kind::Long),
    def("remote.copy.lag.ms", "0", "log.remote.copy.lag.ms", Kind::Long),
    def("remote.log.copy.disable", "false", "", Kind::Bool),
    def("remote.log.delete.on.disable", "false", "", Kind::Bool),
    def("remote.storage.enable", "false", "", Kind::Bool),
    def("retention.bytes", "-1", "log.retention.bytes", Kind::Long),
    def("retention.ms", "604800000", "log.retention.ms", Kind::Long),
    def("segment.bytes", "1073741824", "log.segment.bytes", Kind::Int),
    def("segment.index.bytes", "10485760", "log.index.size.max.bytes", Kind::Int),
    def("segment.jitter.ms", "0", "log.roll.jitter.ms", Kind::Long),
    def("segment.ms", "604800000", "log.roll.ms", Kind::Long),
    def("unclean.leader.election.enable", "false", "unclean.leader.election.enable", Kind::Bool),
    // Keel's own: answer acks=-1 before the fsync (trade-off at `TopicSettings::write_caching`).
    def("write.caching", "false", "write.caching.default", Kind::Bool),
];

/// One static broker setting as DescribeConfigs reports it.
pub struct StaticConfig {
    pub name: &'static str,
    pub value: String,
    pub kind: Kind,
    /// Unchanged from Keel's default (source DEFAULT rather than STATIC_BROKER_CONFIG).
    pub default: bool,
}

/// The broker's static settings under Kafka's names, as DescribeConfigs reports them
/// for the broker resource beside the topic fallbacks. Admin tools read some of them
/// (`advertised.listeners`, `log.dirs`) and fail when they are missing.
pub fn static_broker_configs(c: &BrokerConfig) -> Vec<StaticConfig> {
    let d = BrokerConfig::default();
    let setting = |name, value: String, kind, default| StaticConfig { name, value, kind, default };
    let num = |name, kind, value: i64, default: i64| setting(name, value.to_string(), kind, value == default);
    let listener = |addr: &str| format!("PLAINTEXT://{addr}");
    let dirs = |c: &BrokerConfig| c.data_dirs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(",");
    let advertised = c.advertised_kafka_addr.as_deref().unwrap_or(&c.kafka_addr);
    let mut out = vec![
        num("node.id", Kind::Int, c.node_id.into(), d.node_id.into()),
        num("broker.id", Kind::Int, c.node_id.into(), d.node_id.into()),
        setting("listeners", listener(&c.kafka_addr), Kind::List, c.kafka_addr == d.kafka_addr),
        setting("advertised.listeners", listener(advertised), Kind::List, advertised == d.kafka_addr),
        setting("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT".into(), Kind::List, true),
        setting("inter.broker.listener.name", "PLAINTEXT".into(), Kind::Str, true),
        setting("process.roles", "broker,controller".into(), Kind::List, true),
        setting("log.dirs", dirs(c), Kind::List, c.data_dirs == d.data_dirs),
        num("num.partitions", Kind::Int, c.num_partitions.into(), d.num_partitions.into()),
        setting(
            "auto.create.topics.enable",
            c.auto_create_topics.to_string(),
            Kind::Bool,
            c.auto_create_topics == d.auto_create_topics,
        ),
        setting("default.replication.factor", "1".into(), Kind::Int, true),
        num(
            "offsets.topic.num.partitions",
            Kind::Int,
            c.offsets_topic_partitions.into(),
            d.offsets_topic_partitions.into(),
        ),
        num(
            "transaction.state.log.num.partitions",
            Kind::Int,
            c.transaction_topic_partitions.into(),
            d.transaction_topic_partitions.into(),
        ),
        num(
            "transaction.max.timeout.ms",
            Kind::Int,
            c.transaction_max_timeout_ms.into(),
            d.transaction_max_timeout_ms.into(),
        ),
        num("offsets.retention.minutes", Kind::Int, c.offsets_retention_ms / 60_000, d.offsets_retention_ms / 60_000),
        num("socket.request.max.bytes", Kind::Int, c.request_bytes_max as i64, d.request_bytes_max as i64),
        num("max.connections", Kind::Int, c.connections_max as i64, d.connections_max as i64),
        num(
            "max.connection.creation.rate",
            Kind::Int,
            c.max_connection_creation_rate.map_or(i32::MAX.into(), i64::from),
            i32::MAX.into(),
        ),
        num("fetch.max.bytes", Kind::Int, c.fetch_max_bytes as i64, d.fetch_max_bytes as i64),
        num(
            "group.initial.rebalance.delay.ms",
            Kind::Int,
            c.group_initial_rebalance_delay_ms.into(),
            d.group_initial_rebalance_delay_ms.into(),
        ),
        num(
            "group.min.session.timeout.ms",
            Kind::Int,
            c.group_min_session_timeout_ms.into(),
            d.group_min_session_timeout_ms.into(),
        ),
        num(
            "group.max.session.timeout.ms",
            Kind::Int,
            c.group_max_session_timeout_ms.into(),
            d.group_max_session_timeout_ms.into(),
        ),
        num(
            "group.consumer.session.timeout.ms",
            Kind::Int,
            c.group_consumer_session_timeout_ms.into(),
            d.group_consumer_session_timeout_ms.into(),
        ),
        num(
            "group.consumer.heartbeat.interval.ms",
            Kind::Int,
            c.group_consumer_heartbeat_interval_ms.into(),
            d.group_consumer_heartbeat_interval_ms.into(),
        ),
        num("producer.id.expiration.ms", Kind::Int, c.producer_id_expiration_ms, d.producer_id_expiration_ms),
        num("replica.lag.time.max.ms", Kind::Long, c.replica_lag_time_max_ms as i64, d.replica_lag_time_max_ms as i64),
        setting(
            "auto.leader.rebalance.enable",
            c.auto_leader_rebalance_enable.to_string(),
            Kind::Bool,
            c.auto_leader_rebalance_enable == d.auto_leader_rebalance_enable,
        ),
        num(
            "leader.imbalance.check.interval.seconds",
            Kind::Long,
            (c.leader_imbalance_check_interval_ms / 1000) as i64,
            (d.leader_imbalance_check_interval_ms / 1000) as i64,
        ),
        num(
            "broker.session.timeout.ms",
            Kind::Int,
            c.broker_session_timeout_ms as i64,
            d.broker_session_timeout_ms as i64,
        ),
    ];
    if !c.peers.is_empty() {
        out.push(setting("controller.quorum.voters", c.peers.join(","), Kind::List, false));
    }
    out
}

pub fn topic_def(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

pub fn broker_def(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| !d.broker_name.is_empty() && d.broker_name == name)
}

/// Kafka's message for an unknown topic config name, with the closest known name when
/// it looks like a typo: "Unknown topic config name: retention.mss (did you mean
/// retention.ms?)".
pub fn unknown_topic_config(name: &str) -> String {
    unknown_config_among(name, TOPIC_CONFIGS.iter().map(|d| d.name))
}

/// "Unknown topic config name: X", with " (did you mean Y?)" when one of `known` is close.
fn unknown_config_among<'a>(name: &str, known: impl Iterator<Item = &'a str>) -> String {
    let hint = crate::config::sources::did_you_mean(name, known)
        .map(|known| format!(" (did you mean {known}?)"))
        .unwrap_or_default();
    format!("Unknown topic config name: {name}{hint}")
}

/// Checks a topic config value; returns a message for INVALID_CONFIG.
pub fn validate_topic_config(name: &str, value: &str) -> Result<(), String> {
    let d = topic_def(name).ok_or_else(|| unknown_topic_config(name))?;
    let ok = match d.kind {
        Kind::Int => value.parse::<i32>().is_ok(),
        Kind::Long => value.parse::<i64>().is_ok(),
        Kind::Bool => value == "true" || value == "false",
        Kind::Ratio => value.parse::<f64>().map(|r| (0.0..=1.0).contains(&r)).unwrap_or(false),
        Kind::List if name == "cleanup.policy" => {
            value.split(',').all(|p| matches!(p.trim(), "delete" | "compact" | ""))
        }
        Kind::List => true,
        Kind::Str => match name {
            "message.timestamp.type" => value == "CreateTime" || value == "LogAppendTime",
            "compression.type" => matches!(value, "producer" | "uncompressed" | "gzip" | "snappy" | "lz4" | "zstd"),
            _ => true,
        },
    };
    if !ok {
        return Err(format!("Invalid value {value} for configuration {name}"));
    }
    if name == "max.message.bytes" && value.parse::<i32>().map(|v| v < 0).unwrap_or(true) {
        return Err(format!("Invalid value {value} for configuration {name}: must be at least 0"));
    }
    if name == "min.insync.replicas" && value.parse::<i32>().map(|v| v < 1).unwrap_or(true) {
        return Err(format!("Invalid value {value} for configuration {name}: must be at least 1"));
    }
    Ok(())
}

/// The value in force for a topic config and where it comes from: the topic's own,
/// else the broker's dynamic default (IncrementalAlterConfigs on the broker), else its
/// static one (`topic_defaults` at start), else Kafka's default.
pub fn effective<'a>(
    name: &str,
    topic: &'a BTreeMap<String, String>,
    broker: &'a BTreeMap<String, String>,
) -> Option<(String, Source)> {
    let d = topic_def(name)?;
    if let Some(v) = topic.get(name) {
        return Some((v.clone(), Source::Topic));
    }
    if let Some(v) = broker.get(d.broker_name) {
        return Some((v.clone(), Source::Broker));
    }
    if let Some(v) = static_topic_defaults().get(d.broker_name) {
        return Some((v.clone(), Source::StaticBroker));
    }
    Some((d.default.to_string(), Source::Default))
}

/// Cluster-level configs Kafka's controller records when it first activates
/// (KIP-966: `min.insync.replicas`, which eligible leader replicas read from the
/// cluster level), each with the broker's static default or Kafka's. Adds those
/// missing from the metadata's dynamic broker configs, as cluster-level defaults;
/// true if any was.
pub fn add_cluster_defaults(meta: &mut Metadata) -> bool {
    const RECORDED: &[&str] = &["min.insync.replicas"];
    let mut added = false;
    for name in RECORDED {
        if !meta.broker_configs.contains_key(*name) {
            let value = static_topic_defaults()
                .get(*name)
                .cloned()
                .unwrap_or_else(|| topic_def(name).expect("a topic config").default.to_string());
            meta.broker_configs.insert(name.to_string(), value);
            meta.cluster_defaults.insert(name.to_string());
            added = true;
        }
    }
    added
}

/// `source` as DescribeConfigs reports a value of the broker-level config
/// `broker_name`: a dynamic broker config the controller recorded as a cluster-level
/// default, and nobody altered since, is [`Source::ClusterDefault`].
pub fn reported(source: Source, broker_name: &str, meta: &Metadata) -> Source {
    if source == Source::Broker && meta.cluster_defaults.contains(broker_name) {
        Source::ClusterDefault
    } else {
        source
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Topic,
    Broker,
    /// A dynamic broker config recorded as a cluster-level default (KIP-966).
    ClusterDefault,
    StaticBroker,
    Default,
}

/// The broker's static topic defaults (`topic_defaults`), by broker config name; set
/// once at start, before any shard runs, and read-only after.
static STATIC_TOPIC_DEFAULTS: std::sync::OnceLock<BTreeMap<String, String>> = std::sync::OnceLock::new();

pub fn static_topic_defaults() -> &'static BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    STATIC_TOPIC_DEFAULTS.get().unwrap_or(&EMPTY)
}

/// `topic_defaults` of the configuration by broker config name: each key is Kafka's
/// broker name (`log.retention.ms`) or the topic name it falls back from
/// (`retention.ms`); unknown names and bad values are refused with the name.
pub fn normalize_topic_defaults(given: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (key, value) in given {
        let def = broker_def(key).or_else(|| topic_def(key)).ok_or_else(|| {
            // Either form is accepted here, so either is a candidate for the hint.
            let names = TOPIC_CONFIGS.iter().flat_map(|d| [d.name, d.broker_name]).filter(|n| !n.is_empty());
            format!("topic_defaults: {}", unknown_config_among(key, names))
        })?;
        if def.broker_name.is_empty() {
            return Err(format!("topic_defaults: {key} has no broker-wide default in Kafka; set it per topic"));
        }
        validate_topic_config(def.name, value).map_err(|e| format!("topic_defaults: {e}"))?;
        out.insert(def.broker_name.to_string(), value.clone());
    }
    Ok(out)
}

/// Installs the static topic defaults; called once at start.
pub fn set_static_topic_defaults(c: &BrokerConfig) -> Result<(), String> {
    let defaults = normalize_topic_defaults(&c.topic_defaults)?;
    // A second call (never made by `keel serve`) keeps the first values.
    let _ = STATIC_TOPIC_DEFAULTS.set(defaults);
    Ok(())
}

/// Topic settings the data path reads on every produce, resolved once per change.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicSettings {
    pub max_message_bytes: usize,
    pub log_append_time: bool,
    pub segment_bytes: u64,
    pub segment_ms: i64,
    /// `cleanup.policy` contains `delete` / `compact`.
    pub cleanup_delete: bool,
    pub cleanup_compact: bool,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub delete_retention_ms: i64,
    pub min_compaction_lag_ms: i64,
    pub min_cleanable_dirty_ratio: f64,
    /// `min.insync.replicas`: acks=-1 produce is refused (NOT_ENOUGH_REPLICAS, nothing
    /// appended) while the partition has fewer in-sync replicas.
    pub min_insync_replicas: usize,
    /// `write.caching` (topic) / `write.caching.default` (broker), off by default:
    /// acks=-1 is answered once the batch is appended in memory, before the flush loop
    /// writes and fsyncs it. The trade-off: an acknowledged record is lost if the
    /// process or the machine dies before that flush pass completes, a window of one
    /// pass (the fsync latency, a few milliseconds; longer while the disk stalls, and
    /// never more than `UNFLUSHED_BYTES_MAX` per partition, since produce waits past
    /// it). Consumers are unaffected: the high watermark still moves only after the
    /// fsync, so no consumer ever reads a record a crash takes back.
    pub write_caching: bool,
    /// `compression.type`: the codec batches are stored with (0 none, 1 gzip, 2 snappy,
    /// 3 lz4, 4 zstd), or None ("producer") to keep the producer's.
    pub compression: Option<i16>,
}

impl TopicSettings {
    pub fn resolve(topic: &BTreeMap<String, String>, broker: &BTreeMap<String, String>) -> TopicSettings {
        let get = |n: &str| effective(n, topic, broker).map(|(v, _)| v).unwrap_or_default();
        TopicSettings {
            max_message_bytes: get("max.message.bytes").parse().unwrap_or(1_048_588),
            log_append_time: get("message.timestamp.type") == "LogAppendTime",
            segment_bytes: get("segment.bytes").parse::<u64>().unwrap_or(1 << 30).max(4096),
            segment_ms: get("segment.ms").parse::<i64>().unwrap_or(604_800_000).max(1),
            cleanup_delete: get("cleanup.policy").split(',').any(|p| p.trim() == "delete"),
            cleanup_compact: get("cleanup.policy").split(',').any(|p| p.trim() == "compact"),
            retention_ms: get("retention.ms").parse().unwrap_or(604_800_000),
            retention_bytes: get("retention.bytes").parse().unwrap_or(-1),
            delete_retention_ms: get("delete.retention.ms").parse().unwrap_or(86_400_000),
            min_compaction_lag_ms: get("min.compaction.lag.ms").parse().unwrap_or(0),
            min_cleanable_dirty_ratio: get("min.cleanable.dirty.ratio").parse().unwrap_or(0.5),
            min_insync_replicas: get("min.insync.replicas").parse::<usize>().unwrap_or(1).max(1),
            write_caching: get("write.caching") == "true",
            compression: match get("compression.type").as_str() {
                "uncompressed" => Some(0),
                "gzip" => Some(1),
                "snappy" => Some(2),
                "lz4" => Some(3),
                "zstd" => Some(4),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn validation_and_inheritance() {
        assert!(validate_topic_config("retention.ms", "1000").is_ok());
        assert!(validate_topic_config("retention.ms", "x").is_err());
        assert!(validate_topic_config("nope", "1").is_err());
        assert!(validate_topic_config("cleanup.policy", "compact,delete").is_ok());
        assert!(validate_topic_config("min.insync.replicas", "2").is_ok());
        assert!(validate_topic_config("min.insync.replicas", "0").is_err());
        let mut broker = BTreeMap::new();
        broker.insert("message.max.bytes".to_string(), "2000".to_string());
        let topic = BTreeMap::new();
        assert_eq!(effective("max.message.bytes", &topic, &broker), Some(("2000".into(), Source::Broker)));
        assert_eq!(TopicSettings::resolve(&topic, &broker).max_message_bytes, 2000);
    }

    #[test]
    fn unknown_names_suggest_the_closest() {
        let e = validate_topic_config("retention.mss", "1").unwrap_err();
        assert_eq!(e, "Unknown topic config name: retention.mss (did you mean retention.ms?)");
        assert_eq!(validate_topic_config("zzz", "1").unwrap_err(), "Unknown topic config name: zzz");
        let given: BTreeMap<String, String> = [("retention.ms", "5"), ("log.segment.bytes", "4096")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let n = normalize_topic_defaults(&given).unwrap();
        assert_eq!(n.keys().collect::<Vec<_>>(), ["log.retention.ms", "log.segment.bytes"]);
        let bad: BTreeMap<String, String> = [("log.retention.mss".to_string(), "1".to_string())].into();
        assert!(normalize_topic_defaults(&bad).unwrap_err().ends_with("(did you mean log.retention.ms?)"));
    }

    #[test]
    fn storage_settings_resolve() {
        let broker = BTreeMap::new();
        let s = TopicSettings::resolve(&BTreeMap::new(), &broker);
        assert!(s.cleanup_delete && !s.cleanup_compact && !s.write_caching);
        assert_eq!((s.retention_ms, s.retention_bytes), (604_800_000, -1));
        let topic: BTreeMap<String, String> =
            [("cleanup.policy", "compact,delete"), ("retention.bytes", "1000"), ("write.caching", "true")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let s = TopicSettings::resolve(&topic, &broker);
        assert!(s.cleanup_delete && s.cleanup_compact && s.write_caching);
        assert_eq!(s.retention_bytes, 1000);
    }
}
