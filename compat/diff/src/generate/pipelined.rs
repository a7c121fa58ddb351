//! Pipelined pairs: a request that changes something and, written right behind it on
//! the same connection before its answer is read, a request that reads what it changed.
//!
//! Kafka reads no request from a connection until it has answered the one before, so
//! the second request of a pair always sees the first's effect: a Fetch finds the
//! records a Produce (acks -1 or 0) wrote, Metadata the topic CreateTopics created,
//! DescribeConfigs the value AlterConfigs set. A broker that starts a connection's
//! requests side by side answers the second from before the first. Each pair has a
//! setup of its own (a topic, records, an ACL), sent step by step, and its own slots,
//! so the pairs of a sequence do not touch each other.

use rand::seq::SliceRandom;
use rand::Rng;

use super::Sequence;
use crate::admin_steps::AdminRequest;
use crate::steps::{ConfigResource, NewTopic, Request, Topic};

/// One kind of pipelined pair.
#[derive(Clone, Copy, Debug)]
pub enum Pair {
    /// Produce with these acks (-1 or 0), then Fetch from the first offset it wrote.
    ProduceFetch { acks: i16 },
    /// Produce (acks -1 or 0), then ListOffsets latest.
    ProduceListOffsets,
    /// DeleteRecords, then ListOffsets earliest.
    DeleteRecordsListOffsets,
    /// DeleteRecords, then Fetch below the new log start.
    DeleteRecordsFetch,
    /// CreateTopics, then Metadata of the topic.
    CreateTopicsMetadata,
    /// DeleteTopics, then Metadata of the topic.
    DeleteTopicsMetadata,
    /// CreatePartitions, then Metadata of the topic.
    CreatePartitionsMetadata,
    /// AlterConfigs, then DescribeConfigs of the keys it set.
    AlterConfigsDescribe,
    /// IncrementalAlterConfigs, then DescribeConfigs of the keys it touched.
    IncrementalAlterConfigsDescribe,
    /// One or two OffsetCommits of a simple group, then OffsetFetch.
    OffsetCommitFetch,
    /// CreateAcls, then DescribeAcls of the topic it names.
    CreateAclsDescribe,
    /// DeleteAcls of an ACL created before, then DescribeAcls of its topic.
    DeleteAclsDescribe,
    /// AlterClientQuotas of a client id, then DescribeClientQuotas of it; sometimes the
    /// quota is removed the same way after.
    ClientQuotasDescribe,
}

/// Every kind, each once.
const PAIRS: [Pair; 14] = [
    Pair::ProduceFetch { acks: -1 },
    Pair::ProduceFetch { acks: 0 },
    Pair::ProduceListOffsets,
    Pair::DeleteRecordsListOffsets,
    Pair::DeleteRecordsFetch,
    Pair::CreateTopicsMetadata,
    Pair::DeleteTopicsMetadata,
    Pair::CreatePartitionsMetadata,
    Pair::AlterConfigsDescribe,
    Pair::IncrementalAlterConfigsDescribe,
    Pair::OffsetCommitFetch,
    Pair::CreateAclsDescribe,
    Pair::DeleteAclsDescribe,
    Pair::ClientQuotasDescribe,
];

/// Pairs in one sequence: two pipelined sequences cover every kind, and a sequence
/// stays short enough to shrink quickly.
const PAIRS_PER_SEQUENCE: usize = 7;

/// The kinds still to be drawn in the current round, so that every kind comes once
/// before any comes again, whatever the seed.
#[derive(Default)]
pub struct Rotation {
    left: Vec<Pair>,
}

impl Rotation {
    fn next(&mut self, rng: &mut impl Rng) -> Pair {
        if self.left.is_empty() {
            self.left = PAIRS.to_vec();
            self.left.shuffle(rng);
        }
        self.left.pop().expect("refilled above")
    }
}

/// `PAIRS_PER_SEQUENCE` pipelined pairs, the next kinds of the rotation.
pub(super) fn pipelined(s: &mut Sequence) {
    for _ in 0..PAIRS_PER_SEQUENCE {
        let pair = s.pairs.next(s.rng);
        pair_steps(s, pair);
    }
}

/// The setup and the pipelined pair of one kind.
fn pair_steps(s: &mut Sequence, pair: Pair) {
    match pair {
        Pair::ProduceFetch { acks } => {
            let topic = Topic::Slot("pf");
            s.create(topic.clone(), 1, vec![]);
            let written = produce_counted(s, topic.clone());
            let produce = pipelined_produce(s, topic.clone(), acks);
            s.pipeline(vec![produce, fetch(topic, written)]);
        }
        Pair::ProduceListOffsets => {
            let topic = Topic::Slot("pl");
            s.create(topic.clone(), 1, vec![]);
            produce_counted(s, topic.clone());
            let acks = *[-1, 0].choose(s.rng).expect("non-empty");
            let produce = pipelined_produce(s, topic.clone(), acks);
            s.pipeline(vec![produce, list_offsets(topic, -1)]);
        }
        Pair::DeleteRecordsListOffsets => {
            let topic = Topic::Slot("dl");
            s.create(topic.clone(), 1, vec![]);
            let written = produce_counted(s, topic.clone());
            // -1 means "up to the high watermark".
            let offset = *[1, written, -1].choose(s.rng).expect("non-empty");
            s.pipeline(vec![delete_records(topic.clone(), offset), list_offsets(topic, -2)]);
        }
        Pair::DeleteRecordsFetch => {
            let topic = Topic::Slot("df");
            s.create(topic.clone(), 1, vec![]);
            let written = produce_counted(s, topic.clone());
            let start = s.rng.gen_range(1..=written);
            let below = s.rng.gen_range(0..start);
            s.pipeline(vec![delete_records(topic.clone(), start), fetch(topic, below)]);
        }
        Pair::CreateTopicsMetadata => {
            let topic = Topic::Slot("ct");
            let partitions = s.rng.gen_range(1..=3);
            let new = NewTopic { topic: topic.clone(), partitions, replication_factor: 1, configs: vec![] };
            let create = Request::CreateTopics { topics: vec![new], validate_only: false };
            s.pipeline(vec![create, metadata(topic)]);
        }
        Pair::DeleteTopicsMetadata => {
            let topic = Topic::Slot("dt");
            let partitions = s.rng.gen_range(1..=2);
            s.create(topic.clone(), partitions, vec![]);
            s.pipeline(vec![Request::DeleteTopics { topics: vec![topic.clone()] }, metadata(topic)]);
        }
        Pair::CreatePartitionsMetadata => {
            let topic = Topic::Slot("cp");
            let partitions = s.rng.gen_range(1..=2);
            s.create(topic.clone(), partitions, vec![]);
            let count = partitions + s.rng.gen_range(1..=2);
            let grow = Request::CreatePartitions { topic: topic.clone(), count, validate_only: false };
            s.pipeline(vec![grow, metadata(topic)]);
        }
        Pair::AlterConfigsDescribe => {
            let topic = Topic::Slot("ac");
            s.create(topic.clone(), 1, vec![("retention.ms", "3600000")]);
            let configs = match s.rng.gen_range(0..3) {
                0 => vec![("retention.ms", "7200000")],
                1 => vec![("cleanup.policy", "compact"), ("segment.bytes", "1048576")],
                // Nothing: every config the topic set goes back to its default.
                _ => vec![],
            };
            let alter = Request::AlterConfigs { topic: topic.clone(), configs, validate_only: false };
            s.pipeline(vec![alter, describe_configs(topic)]);
        }
        Pair::IncrementalAlterConfigsDescribe => {
            let topic = Topic::Slot("ic");
            s.create(topic.clone(), 1, vec![("retention.ms", "3600000")]);
            // Operations 0 SET, 1 DELETE, 2 APPEND.
            let ops = match s.rng.gen_range(0..4) {
                0 => vec![("retention.ms", 0, Some("7200000"))],
                1 => vec![("retention.ms", 1, None)],
                2 => vec![("cleanup.policy", 2, Some("compact"))],
                _ => vec![("segment.bytes", 0, Some("1048576")), ("cleanup.policy", 0, Some("compact"))],
            };
            let alter = Request::IncrementalAlterConfigs { topic: topic.clone(), ops, validate_only: false };
            s.pipeline(vec![alter, describe_configs(topic)]);
        }
        Pair::OffsetCommitFetch => {
            let topic = Topic::Slot("oc");
            let group = "gp";
            s.create(topic.clone(), 1, vec![]);
            let mut requests = Vec::new();
            for _ in 0..s.rng.gen_range(1..=2) {
                let offset = s.rng.gen_range(0..10);
                requests.push(Request::OffsetCommit { group, topic: topic.clone(), partition: 0, offset });
            }
            requests.push(Request::OffsetFetch { group, topics: Some(vec![(topic, vec![0])]) });
            s.pipeline(requests);
        }
        Pair::CreateAclsDescribe => {
            let topic = Topic::Slot("ca");
            s.pipeline(vec![Request::Admin(AdminRequest::CreateAcls { topic: topic.clone() }), describe_acls(topic)]);
        }
        Pair::DeleteAclsDescribe => {
            let topic = Topic::Slot("da");
            s.push(Request::Admin(AdminRequest::CreateAcls { topic: topic.clone() }));
            s.pipeline(vec![Request::Admin(AdminRequest::DeleteAcls { topic: topic.clone() }), describe_acls(topic)]);
        }
        Pair::ClientQuotasDescribe => {
            let client = "q0";
            let mut quotas = vec![("producer_byte_rate", Some(1_048_576.0))];
            if s.chance(0.5) {
                quotas.push(("consumer_byte_rate", Some(2_097_152.0)));
            }
            let strict = s.chance(0.5);
            let describe = Request::Admin(AdminRequest::DescribeClientQuotas { client, strict });
            s.pipeline(vec![Request::Admin(AdminRequest::AlterClientQuotas { client, quotas }), describe.clone()]);
            if s.chance(0.5) {
                let quotas = vec![("producer_byte_rate", None)];
                s.pipeline(vec![Request::Admin(AdminRequest::AlterClientQuotas { client, quotas }), describe]);
            }
        }
    }
}

/// A Produce with acks=-1 as a pair's setup; returns how many records it writes.
fn produce_counted(s: &mut Sequence, topic: Topic) -> i64 {
    let batch = s.batch(false);
    let written = batch.records.len() as i64;
    s.push(Request::Produce { acks: -1, topic, partition: 0, batch: Some(batch) });
    written
}

fn pipelined_produce(s: &mut Sequence, topic: Topic, acks: i16) -> Request {
    let batch = s.batch(false);
    Request::Produce { acks, topic, partition: 0, batch: Some(batch) }
}

fn fetch(topic: Topic, offset: i64) -> Request {
    let bytes = 1 << 20;
    Request::Fetch { topic, partition: 0, offset, max_bytes: bytes, partition_max_bytes: bytes, isolation_level: 0 }
}

fn list_offsets(topic: Topic, timestamp: i64) -> Request {
    Request::ListOffsets { topic, partition: 0, timestamp, isolation_level: 0 }
}

fn delete_records(topic: Topic, offset: i64) -> Request {
    Request::DeleteRecords { topic, partition: 0, offset }
}

fn metadata(topic: Topic) -> Request {
    Request::Metadata { topics: vec![topic], allow_auto_topic_creation: false }
}

fn describe_configs(topic: Topic) -> Request {
    let keys = vec!["retention.ms", "cleanup.policy", "segment.bytes"];
    Request::DescribeConfigs { resource: ConfigResource::Topic(topic), keys: Some(keys) }
}

/// DescribeAcls of the topic's literal resource: resource type TOPIC (2), pattern
/// LITERAL (3).
fn describe_acls(topic: Topic) -> Request {
    Request::Admin(AdminRequest::DescribeAcls { resource_type: 2, resource_name: Some(topic), pattern_type: 3 })
}
