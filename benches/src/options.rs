//! What a load run is made of: client settings and the shape of the load.
//!
//! librdkafka's defaults differ from the Java client's in ways that change
//! benchmark results (Nagle, in-flight requests, buffer memory). We set the
//! Java defaults explicitly so `keel-bench` and Kafka's own ProducerPerformance
//! put the same kind of load on a broker; everything else is a flag.

use clap::{Args, ValueEnum};
use rdkafka::ClientConfig;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How record keys are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyMode {
    /// No key: the client's sticky partitioner fills one batch at a time.
    None,
    /// Keys cycle through `key_space` distinct values (OMB's KEY_ROUND_ROBIN).
    RoundRobin,
    /// A uniformly random key out of `key_space` for each record.
    Random,
}

/// Producer and connection settings shared by every client of a run.
#[derive(Clone, Debug, Args, Serialize, Deserialize)]
pub struct ClientOptions {
    /// Bootstrap address of the broker under test (host:port[,host:port]).
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Producer acks: 0, 1 or all.
    #[arg(long, default_value = "all")]
    pub acks: String,
    /// Compression codec: none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    pub compression: String,
    /// How long a producer waits to fill a batch (linger.ms).
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Largest batch a producer builds per partition, in bytes (batch.size).
    #[arg(long, default_value_t = 65536)]
    pub batch_size: u64,
    /// Idempotent producer (the Java client's default since Kafka 3.0).
    #[arg(long, default_value_t = false)]
    pub idempotence: bool,
    /// Extra librdkafka property for every client, `key=value` (repeatable).
    #[arg(short = 'X', long = "property", value_parser = parse_key_value)]
    pub properties: Vec<(String, String)>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            bootstrap: "127.0.0.1:9092".into(),
            acks: "all".into(),
            compression: "none".into(),
            linger_ms: 5,
            batch_size: 65536,
            idempotence: false,
            properties: Vec::new(),
        }
    }
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected key=value, got {text:?}")),
    }
}

impl ClientOptions {
    fn base_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.bootstrap)
            // The Java client always sets TCP_NODELAY.
            .set("socket.nagle.disable", "true")
            .set("log_level", "3");
        config
    }

    fn apply_properties(&self, config: &mut ClientConfig) {
        for (key, value) in &self.properties {
            config.set(key, value);
        }
    }

    /// Configuration for one producer, with Java-client defaults where
    /// librdkafka's own differ.
    pub fn producer_config(&self) -> ClientConfig {
        let mut config = self.base_config();
        config
            .set("acks", &self.acks)
            .set("compression.type", &self.compression)
            .set("linger.ms", self.linger_ms.to_string())
            .set("batch.size", self.batch_size.to_string())
            .set("batch.num.messages", "1000000")
            .set("enable.idempotence", self.idempotence.to_string())
            // Java: max.in.flight.requests.per.connection=5, buffer.memory=32 MiB.
            .set("max.in.flight.requests.per.connection", "5")
            .set("queue.buffering.max.kbytes", "32768")
            .set("queue.buffering.max.messages", "1000000")
            .set("message.timeout.ms", "120000");
        self.apply_properties(&mut config);
        config
    }

    /// Configuration for one consumer that uses `assign()` only (no group).
    ///
    /// librdkafka refuses `assign()` without a `group.id`, so one is set; it is
    /// never joined (no subscribe) and no offset is committed or fetched, since
    /// every assignment carries an explicit start offset.
    pub fn consumer_config(&self) -> ClientConfig {
        let mut config = self.base_config();
        config
            .set("group.id", "keel-bench-assign-only")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", "500")
            .set("fetch.min.bytes", "1")
            .set("auto.offset.reset", "earliest");
        self.apply_properties(&mut config);
        config
    }

    /// Configuration for the admin client that creates topics.
    pub fn admin_config(&self) -> ClientConfig {
        let mut config = self.base_config();
        self.apply_properties(&mut config);
        config
    }
}

/// The whole shape of one load run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadSpec {
    /// Topics written round-robin by every producer and read by every consumer.
    pub topics: Vec<String>,
    /// Partitions per topic (used when the generator creates the topics).
    pub partitions: u32,
    /// Topic configs set at creation, e.g. `retention.bytes`.
    pub topic_configs: Vec<(String, String)>,
    /// Independent producer clients (one connection set each).
    pub producers: usize,
    /// Consumer clients; partitions are split among them; 0 = no end-to-end.
    pub consumers: usize,
    /// Target rate in records per second over all producers; 0 = max rate.
    pub rate: f64,
    /// Time before measurement starts; nothing sent then is measured.
    #[serde(with = "seconds")]
    pub warmup: Duration,
    /// Measured time (sending stops at warm-up + duration).
    #[serde(with = "seconds")]
    pub duration: Duration,
    /// Stop after this many records in total instead of at the end of duration.
    pub records: Option<u64>,
    /// Record value size in bytes (at least the 8-byte timestamp header).
    pub size: usize,
    pub keys: KeyMode,
    /// Distinct keys for `round-robin` and `random`.
    pub key_space: u64,
    /// Consumers start this long after producers (builds a backlog).
    #[serde(with = "seconds")]
    pub consumer_delay: Duration,
    /// How long consumers may take after the last send to catch up.
    #[serde(with = "seconds")]
    pub drain_timeout: Duration,
    pub client: ClientOptions,
}

impl Default for LoadSpec {
    fn default() -> Self {
        LoadSpec {
            topics: vec!["keel-bench".into()],
            partitions: 6,
            topic_configs: Vec::new(),
            producers: 1,
            consumers: 1,
            rate: 0.0,
            warmup: Duration::from_secs(5),
            duration: Duration::from_secs(30),
            records: None,
            size: 1024,
            keys: KeyMode::None,
            key_space: 10_000,
            consumer_delay: Duration::ZERO,
            drain_timeout: Duration::from_secs(30),
            client: ClientOptions::default(),
        }
    }
}

impl LoadSpec {
    /// Payload bytes one record carries (value only; keys are small and counted apart).
    pub fn payload_bytes(&self) -> usize {
        self.size.max(crate::PAYLOAD_HEADER_BYTES)
    }

    /// Whether the producers pace themselves (open loop) or send flat out.
    pub fn is_fixed_rate(&self) -> bool {
        self.rate > 0.0
    }
}

/// Serialize a `Duration` as fractional seconds in results files.
pub mod seconds {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(value.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(deserializer)?;
        Ok(Duration::from_secs_f64(secs.max(0.0)))
    }
}

/// Parse `30`, `30s`, `500ms`, `2m` into a duration.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(split) => text.split_at(split),
        None => (text, "s"),
    };
    let value: f64 = number.parse().map_err(|_| format!("bad duration {text:?}"))?;
    let secs = match unit {
        "ms" => value / 1000.0,
        "s" | "" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("bad duration unit in {text:?}")),
    };
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("30").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("3 parsecs").is_err());
    }

    #[test]
    fn key_values_parse() {
        assert_eq!(parse_key_value("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert!(parse_key_value("=x").is_err());
    }
}
