//! What one shard records on its data path: per API request counts, bytes and
//! latency, bytes in and out per topic, produce batch sizes, fsync and group-commit
//! figures.
//!
//! Every counter carries the label `shard="N"`, so no two shards ever add to the same
//! counter: each handle is the shard's own, registered on the shard's thread (so its
//! memory comes from that thread's allocator arena), looked up once and cached here.
//! Recording a request is then a few uncontended atomic adds and one histogram
//! increment: no lock, no map lookup by key string, no allocation (after the first
//! request of each API and the first bytes of each topic).
//!
//! Topic labels are bounded: a shard gives series of their own to the first
//! [`TOPICS_WITH_SERIES_MAX`] topics it sees; bytes of any later topic are counted
//! under `topic="_other"`. Series of a deleted topic stay until the process restarts.
//!
//! With `metrics: false` (`--metrics off`) every handle is a no-op and nothing is
//! recorded: the switch that measures what recording costs.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use metrics::{Counter, Label};

use super::distribution::{Distribution, Percentiles};

/// Topics a shard gives series of their own; later ones share `topic="_other"`.
pub const TOPICS_WITH_SERIES_MAX: usize = 1000;
/// The label of the topics past [`TOPICS_WITH_SERIES_MAX`].
pub const OTHER_TOPICS: &str = "_other";

/// Highest latency a request histogram tells apart (an hour, in µs).
const LATENCY_US_MAX: u64 = 3_600_000_000;
/// Highest batch size told apart.
const BATCH_BYTES_MAX: u64 = 1 << 30;
/// API keys are below this.
const API_KEYS: usize = 128;

pub struct ShardMetrics {
    enabled: bool,
    shard: String,
    apis: RefCell<Vec<Option<ApiMetrics>>>,
    topics: RefCell<HashMap<String, TopicMetrics>>,
    other_topics: RefCell<Option<TopicMetrics>>,
    produce_batch_bytes: RefCell<Distribution>,
    fsync_us: RefCell<Distribution>,
    flush_pass_logs: RefCell<Distribution>,
    flush_pass_bytes: RefCell<Distribution>,
    flush_pass_seconds: metrics::Histogram,
}

struct ApiMetrics {
    requests: Counter,
    request_bytes: Counter,
    response_bytes: Counter,
    latency_us: Distribution,
}

#[derive(Clone)]
struct TopicMetrics {
    bytes_in: Counter,
    records_in: Counter,
    batches_in: Counter,
    bytes_out: Counter,
}

/// The distributions of one shard at a scrape.
#[derive(Debug, Clone, Default)]
pub struct Distributions {
    /// Request latency in µs, by API name.
    pub request_latency_us: Vec<(String, Percentiles)>,
    pub produce_batch_bytes: Percentiles,
    pub fsync_us: Percentiles,
    pub flush_pass_logs: Percentiles,
    pub flush_pass_bytes: Percentiles,
}

impl ShardMetrics {
    pub fn new(shard: usize, enabled: bool) -> ShardMetrics {
        let shard = shard.to_string();
        let flush_pass_seconds = if enabled {
            metrics::histogram!(super::names::FLUSH_PASS_SECONDS, "shard" => shard.clone())
        } else {
            metrics::Histogram::noop()
        };
        ShardMetrics {
            enabled,
            shard,
            apis: RefCell::new((0..API_KEYS).map(|_| None).collect()),
            topics: RefCell::new(HashMap::new()),
            other_topics: RefCell::new(None),
            produce_batch_bytes: RefCell::new(Distribution::new(BATCH_BYTES_MAX)),
            fsync_us: RefCell::new(Distribution::new(LATENCY_US_MAX)),
            flush_pass_logs: RefCell::new(Distribution::new(1 << 20)),
            flush_pass_bytes: RefCell::new(Distribution::new(BATCH_BYTES_MAX)),
            flush_pass_seconds,
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// One request answered (or a produce with acks=0 done): `response_bytes` is 0
    /// when nothing was sent.
    pub fn request(&self, api: ApiKey, request_bytes: usize, response_bytes: usize, latency: Duration) {
        if !self.enabled {
            return;
        }
        let mut apis = self.apis.borrow_mut();
        let Some(slot) = apis.get_mut(api as i16 as usize) else { return };
        let m = slot.get_or_insert_with(|| {
            let labels = vec![Label::new("shard", self.shard.clone()), Label::new("api", api_name(api))];
            use super::names::*;
            ApiMetrics {
                requests: metrics::counter!(REQUESTS, labels.clone()),
                request_bytes: metrics::counter!(REQUEST_BYTES, labels.clone()),
                response_bytes: metrics::counter!(RESPONSE_BYTES, labels),
                latency_us: Distribution::new(LATENCY_US_MAX),
            }
        });
        m.requests.increment(1);
        m.request_bytes.increment(request_bytes as u64);
        m.response_bytes.increment(response_bytes as u64);
        m.latency_us.record(latency.as_micros() as u64);
    }

    /// Batches of `bytes` holding `records` records appended to a partition of `topic`.
    pub fn produced(&self, topic: &str, bytes: usize, records: u64, batches: u64) {
        if !self.enabled {
            return;
        }
        self.produce_batch_bytes.borrow_mut().record(bytes as u64);
        self.with_topic(topic, |t| {
            t.bytes_in.increment(bytes as u64);
            t.records_in.increment(records);
            t.batches_in.increment(batches);
        });
    }

    /// Record bytes of `topic` sent to a fetching client.
    pub fn fetched(&self, topic: &str, bytes: usize) {
        if !self.enabled || bytes == 0 {
            return;
        }
        self.with_topic(topic, |t| t.bytes_out.increment(bytes as u64));
    }

    pub fn fsync(&self, took: Duration) {
        if self.enabled {
            self.fsync_us.borrow_mut().record(took.as_micros() as u64);
        }
    }

    pub fn flush_pass(&self, report: keel_storage::flush::PassReport) {
        if !self.enabled {
            return;
        }
        self.flush_pass_logs.borrow_mut().record(report.logs as u64);
        self.flush_pass_bytes.borrow_mut().record(report.bytes);
        self.flush_pass_seconds.record(report.duration.as_secs_f64());
    }

    /// Starts a new percentile window (the shard's timer calls it every
    /// [`crate::telemetry::distribution::WINDOW`]).
    pub fn rotate(&self) {
        for m in self.apis.borrow_mut().iter_mut().flatten() {
            m.latency_us.rotate();
        }
        for d in [&self.produce_batch_bytes, &self.fsync_us, &self.flush_pass_logs, &self.flush_pass_bytes] {
            d.borrow_mut().rotate();
        }
    }

    pub fn distributions(&self) -> Distributions {
        let apis = self.apis.borrow();
        let request_latency_us = apis
            .iter()
            .enumerate()
            .filter_map(|(key, m)| {
                let m = m.as_ref()?;
                let api = ApiKey::try_from(key as i16).ok()?;
                Some((api_name(api), m.latency_us.percentiles()))
            })
            .collect();
        Distributions {
            request_latency_us,
            produce_batch_bytes: self.produce_batch_bytes.borrow().percentiles(),
            fsync_us: self.fsync_us.borrow().percentiles(),
            flush_pass_logs: self.flush_pass_logs.borrow().percentiles(),
            flush_pass_bytes: self.flush_pass_bytes.borrow().percentiles(),
        }
    }

    fn with_topic(&self, topic: &str, f: impl FnOnce(&TopicMetrics)) {
        if let Some(t) = self.topics.borrow().get(topic) {
            return f(t);
        }
        let mut topics = self.topics.borrow_mut();
        if topics.len() < TOPICS_WITH_SERIES_MAX {
            let t = self.topic_metrics(topic);
            f(&t);
            topics.insert(topic.to_string(), t);
            return;
        }
        drop(topics);
        let mut other = self.other_topics.borrow_mut();
        f(other.get_or_insert_with(|| self.topic_metrics(OTHER_TOPICS)));
    }

    fn topic_metrics(&self, topic: &str) -> TopicMetrics {
        let labels = vec![Label::new("shard", self.shard.clone()), Label::new("topic", topic.to_string())];
        use super::names::*;
        TopicMetrics {
            bytes_in: metrics::counter!(TOPIC_BYTES_IN, labels.clone()),
            records_in: metrics::counter!(TOPIC_RECORDS_IN, labels.clone()),
            batches_in: metrics::counter!(TOPIC_BATCHES_IN, labels.clone()),
            bytes_out: metrics::counter!(TOPIC_BYTES_OUT, labels),
        }
    }
}

/// An API's name as the `api` label spells it (Kafka's names: "Produce", "Fetch").
/// Called when a series is registered and at scrapes, never per request.
pub fn api_name(api: ApiKey) -> String {
    format!("{api:?}")
}
