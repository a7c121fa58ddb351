//! Request sequences drawn from a seed.
//!
//! Each sequence follows one scenario (produce then fetch, delete then recreate, commit
//! offsets, ...) with its details drawn at random: partition counts, acks, codecs, keys,
//! offsets, request versions. Scenarios rather than free-form request soup, because most
//! behaviour worth comparing only shows after a setup (a topic that exists, records at
//! known offsets), and a scenario keeps the minimal diverging sequence short to read.
//!
//! One scenario, `pipelined`, writes pairs of requests back to back on one connection
//! (`pipelined.rs`).
//!
//! The sequence depends only on the seed and on the version ranges both brokers
//! advertise, never on answers, so a seed replays the same requests.

use bytes::BytesMut;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::records::Compression;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

use crate::group_steps::{Generation, GroupRequest, Member};
use crate::member_steps::MemberRequest;
use crate::steps::{
    Batch, BrokerContext, ConfigResource, Names, NewTopic, Request, Step, Topic, RECORD_TIMESTAMP_BASE_MS,
};
use crate::txn_steps::{Epoch, Producer, TxnRequest};
use crate::versions::Versions;

mod admin_scenarios;
mod member_scenarios;
mod pipelined;

/// Longest legal topic name is 249 characters; one more must be refused.
const TOPIC_NAME_LENGTH_ILLEGAL: usize = 250;
/// A topic slot no step ever creates.
const UNKNOWN: Topic = Topic::Slot("t9");

/// Versions drawn for one request before giving up on it.
const VERSION_ATTEMPTS_MAX: usize = 16;

type Scenario = fn(&mut Sequence);

/// The scenarios a sequence is drawn from, by name (`--scenario`), each listed as many
/// times as it is to be drawn.
const SCENARIOS: [(&str, Scenario); 22] = [
    ("metadata_names", metadata_names),
    ("create_topics", create_topics),
    ("produce_fetch", produce_fetch),
    ("produce_fetch", produce_fetch),
    ("delete_recreate", delete_recreate),
    ("delete_records", delete_records),
    ("offsets", offsets),
    ("configs", configs),
    ("partitions_and_groups", partitions_and_groups),
    ("transactions", transactions),
    ("transactions", transactions),
    ("idempotent_produce", idempotent_produce),
    ("group_membership", group_membership),
    ("leader_epochs", admin_scenarios::leader_epochs),
    ("describe_topic_partitions", admin_scenarios::describe_topic_partitions),
    ("cluster", admin_scenarios::cluster),
    ("elections_and_reassignments", admin_scenarios::elections_and_reassignments),
    ("delete_groups", admin_scenarios::delete_groups),
    ("txn_markers", admin_scenarios::txn_markers),
    ("group_rebalance", member_scenarios::group_rebalance),
    ("consumer_group", member_scenarios::consumer_group),
    ("pipelined", pipelined::pipelined),
];

pub struct Generator<'a> {
    rng: StdRng,
    versions: &'a Versions,
    /// The one scenario to draw from instead of all of them.
    only: Option<Scenario>,
    /// The kinds of pipelined pair still to come in the current round, kept from one
    /// sequence to the next so that every kind comes once per round.
    pairs: pipelined::Rotation,
}

/// One sequence under construction.
struct Sequence<'a, 'r> {
    rng: &'r mut StdRng,
    versions: &'a Versions,
    steps: Vec<Step>,
    /// The pipelined pairs still to come in the current round (`pipelined.rs`).
    pairs: &'r mut pipelined::Rotation,
}

impl<'a> Generator<'a> {
    /// A generator of every scenario, or of the one named `scenario`.
    pub fn new(rng: StdRng, versions: &'a Versions, scenario: Option<&str>) -> Result<Generator<'a>, String> {
        let only = match scenario {
            None => None,
            Some(name) => match SCENARIOS.iter().find(|(known, _)| *known == name) {
                Some((_, scenario)) => Some(*scenario),
                None => {
                    let mut names: Vec<&str> = SCENARIOS.iter().map(|(name, _)| *name).collect();
                    names.dedup();
                    return Err(format!("no scenario {name}; the scenarios: {}", names.join(", ")));
                }
            },
        };
        Ok(Generator { rng, versions, only, pairs: pipelined::Rotation::default() })
    }

    pub fn next_sequence(&mut self) -> Vec<Step> {
        let scenario = match self.only {
            Some(scenario) => scenario,
            None => SCENARIOS.choose(&mut self.rng).expect("non-empty").1,
        };
        let mut sequence =
            Sequence { rng: &mut self.rng, versions: self.versions, steps: Vec::new(), pairs: &mut self.pairs };
        scenario(&mut sequence);
        sequence.steps
    }
}

impl Sequence<'_, '_> {
    /// Picks a version both brokers serve; the step is left out when they share none.
    fn version(&mut self, api: ApiKey) -> Option<i16> {
        let range = self.versions.common(api)?;
        Some(self.rng.gen_range(range.0..=range.1))
    }

    /// A version both brokers serve, drawn from `min` up.
    fn version_at_least(&mut self, api: ApiKey, min: i16) -> Option<i16> {
        let range = self.versions.common(api)?;
        (range.1 >= min).then(|| self.rng.gen_range(range.0.max(min)..=range.1))
    }

    /// Adds the request at a random version that can carry it: kafka-protocol refuses to
    /// encode a field a version lacks (Metadata below v4 cannot say "do not auto-create",
    /// CreateTopics v0 cannot validate only), and such a version would not ask the same
    /// question anyway.
    fn push(&mut self, request: Request) {
        self.push_between(i16::MIN, i16::MAX, request);
    }

    /// `push` with the version drawn from `min` to `max` (within the common range): a
    /// request whose meaning depends on its version (EndTxn v5 bumps the epoch).
    fn push_between(&mut self, min: i16, max: i16, request: Request) {
        let Some((common_min, common_max)) = self.versions.common(request.api_key()) else { return };
        let (min, max) = (common_min.max(min), common_max.min(max));
        if min > max {
            return;
        }
        for _ in 0..VERSION_ATTEMPTS_MAX {
            let version = self.rng.gen_range(min..=max);
            if encodable(&request, version) {
                self.steps.push(Step { version, request, pipelined: false });
                return;
            }
        }
    }

    /// Adds `requests` as one pipelined step: each at a version drawn as by `push`, all
    /// but the first marked to go out right behind the one before. A request no common
    /// version can carry is left out, as by `push`.
    fn pipeline(&mut self, requests: Vec<Request>) {
        let first = self.steps.len();
        for request in requests {
            self.push(request);
        }
        for step in self.steps.iter_mut().skip(first + 1) {
            step.pipelined = true;
        }
    }

    fn push_at(&mut self, version: i16, request: Request) {
        if encodable(&request, version) {
            self.steps.push(Step { version, request, pipelined: false });
        }
    }

    fn chance(&mut self, probability: f64) -> bool {
        self.rng.gen_bool(probability)
    }

    fn create(&mut self, topic: Topic, partitions: i32, configs: Vec<(&'static str, &'static str)>) {
        let new = NewTopic { topic, partitions, replication_factor: 1, configs };
        self.push(Request::CreateTopics { topics: vec![new], validate_only: false });
    }

    /// Creates slot t0 with 1 to 3 partitions, compacted one time in four, stamped with
    /// the broker's append time (LogAppendTime) one time in four, with a codec of its own
    /// (`compression.type`) one time in five; returns the partition count and whether it
    /// is compacted.
    fn create_t0(&mut self) -> (i32, bool) {
        let partitions = self.rng.gen_range(1..=3);
        let compacted = self.chance(0.25);
        let mut configs = if compacted { vec![("cleanup.policy", "compact")] } else { vec![] };
        if self.chance(0.25) {
            configs.push(("message.timestamp.type", "LogAppendTime"));
        }
        if self.chance(0.2) {
            let codec = ["uncompressed", "gzip", "snappy", "lz4", "zstd"].choose(self.rng).expect("non-empty");
            configs.push(("compression.type", codec));
        }
        self.create(Topic::Slot("t0"), partitions, configs);
        (partitions, compacted)
    }

    fn batch(&mut self, keyless: bool) -> Batch {
        let count = self.rng.gen_range(1..=4);
        let records = (0..count)
            .map(|i| {
                let key = if keyless { None } else { Some(format!("k{}", self.rng.gen_range(0..3))) };
                (key, Some(format!("v{i}")))
            })
            .collect();
        let codec = if self.chance(0.5) {
            Compression::None
        } else {
            *[Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd]
                .choose(self.rng)
                .expect("non-empty")
        };
        Batch { records, codec, headers: self.chance(0.3), batch_per_record: false }
    }

    /// A produce to `topic`, acks drawn from 0, 1 and -1.
    fn produce(&mut self, topic: Topic, partition: i32, keyless: bool) {
        let acks = *[0i16, 1, -1].choose(self.rng).expect("non-empty");
        let batch = Some(self.batch(keyless));
        self.push(Request::Produce { acks, topic, partition, batch });
    }

    /// A produce with acks=-1, so later steps see its records.
    fn produce_acked(&mut self, topic: Topic, partition: i32) {
        let batch = Some(self.batch(false));
        self.push(Request::Produce { acks: -1, topic, partition, batch });
    }

    fn fetch(&mut self, topic: Topic, partition: i32, offset: i64) {
        let (max_bytes, partition_max_bytes) = match self.rng.gen_range(0..4) {
            0 => (0, 1_048_576),
            1 => (1_048_576, 10),
            _ => (1_048_576, 1_048_576),
        };
        self.push(Request::Fetch { topic, partition, offset, max_bytes, partition_max_bytes, isolation_level: 0 });
    }

    fn metadata(&mut self, topics: Vec<Topic>) {
        self.push(Request::Metadata { topics, allow_auto_topic_creation: false });
    }
}

fn encodable(request: &Request, version: i16) -> bool {
    if let Request::Member(MemberRequest::Collect { .. }) = request {
        return true;
    }
    let names = Names { prefix: String::new() };
    let built = request.build(version, &names, &BrokerContext::default());
    built.encode(&mut BytesMut::new(), version).is_ok()
}

/// Metadata for existing, unknown, illegal and over-long names, with and without
/// auto-creation, then again without it to see what was created.
fn metadata_names(s: &mut Sequence) {
    s.create(Topic::Slot("t0"), 1, vec![]);
    let mut topics = vec![
        Topic::Slot("t0"),
        Topic::Slot("t1"),
        Topic::Literal("bad$name!".into()),
        Topic::Padded("t2", TOPIC_NAME_LENGTH_ILLEGAL),
    ];
    topics.shuffle(s.rng);
    let count = s.rng.gen_range(1..=topics.len());
    topics.truncate(count);
    let allow_auto_topic_creation = s.chance(0.5);
    s.push(Request::Metadata { topics: topics.clone(), allow_auto_topic_creation });
    s.metadata(topics);
}

/// CreateTopics with valid and invalid arguments, then Metadata on every name used.
fn create_topics(s: &mut Sequence) {
    let cases = s.rng.gen_range(2..=4);
    let mut names = Vec::new();
    for case in 0..cases {
        let slot = ["c0", "c1", "c2", "c3"][case];
        let topic = Topic::Slot(slot);
        let mut validate_only = false;
        let new = |topic: Topic, partitions, replication_factor, configs| NewTopic {
            topic,
            partitions,
            replication_factor,
            configs,
        };
        let topics = match s.rng.gen_range(0..11) {
            0 => vec![new(topic.clone(), 2, 1, vec![])],
            // The same name twice in one request.
            1 => vec![new(topic.clone(), 1, 1, vec![]), new(topic.clone(), 1, 1, vec![])],
            2 => vec![new(Topic::Literal("bad$name!".into()), 1, 1, vec![])],
            3 => vec![new(Topic::Padded(slot, TOPIC_NAME_LENGTH_ILLEGAL), 1, 1, vec![])],
            4 => vec![new(topic.clone(), 0, 1, vec![])],
            // -1 partitions and -1 replication factor ask for the broker defaults (KIP-464).
            5 => vec![new(topic.clone(), -1, -1, vec![])],
            6 => vec![new(topic.clone(), 1, 3, vec![])],
            7 => vec![new(topic.clone(), 1, 1, vec![("cleanup.policy", "bogus")])],
            8 => vec![new(topic.clone(), 1, 1, vec![("retention.ms", "not-a-number")])],
            9 => vec![new(topic.clone(), 1, 1, vec![("no.such.config", "1")])],
            _ => {
                validate_only = true;
                vec![new(topic.clone(), 1, 1, vec![])]
            }
        };
        names.extend(topics.iter().map(|t| t.topic.clone()));
        s.push(Request::CreateTopics { topics: topics.clone(), validate_only });
        // Creating an existing topic again.
        if s.chance(0.3) {
            s.push(Request::CreateTopics { topics, validate_only: false });
        }
    }
    s.metadata(names);
}

/// Records to a fresh topic (with keys or without, compressed or not, to existing and
/// missing partitions and topics, empty record sets), then Fetch and ListOffsets.
fn produce_fetch(s: &mut Sequence) {
    let (partitions, compacted) = s.create_t0();
    s.metadata(vec![Topic::Slot("t0")]);
    for _ in 0..s.rng.gen_range(1..=4) {
        let keyless = s.chance(if compacted { 0.5 } else { 0.3 });
        let partition = s.rng.gen_range(0..partitions);
        s.produce(Topic::Slot("t0"), partition, keyless);
    }
    match s.rng.gen_range(0..5) {
        0 => {
            let partition = partitions + s.rng.gen_range(0..3);
            s.produce(Topic::Slot("t0"), partition, false);
        }
        1 => {
            let topic = if s.chance(0.5) { UNKNOWN } else { Topic::Literal("bad$name!".into()) };
            s.produce(topic, 0, false);
        }
        2 => {
            let acks = *[1i16, -1].choose(s.rng).expect("non-empty");
            s.push(Request::Produce { acks, topic: Topic::Slot("t0"), partition: 0, batch: None });
        }
        3 => {
            let mut batch = s.batch(false);
            batch.batch_per_record = batch.records.len() > 1;
            s.push(Request::Produce { acks: -1, topic: Topic::Slot("t0"), partition: 0, batch: Some(batch) });
        }
        _ => {}
    }
    for _ in 0..s.rng.gen_range(1..=3) {
        let offset = *[0i64, 0, 1, 2, 3, 1000, -1].choose(s.rng).expect("non-empty");
        s.fetch(Topic::Slot("t0"), 0, offset);
    }
    // Fetch sessions (v7+): Keel keeps none, so every epoch but -1 (sessionless) and 0
    // (which would open a session on Kafka) must be refused as Kafka refuses an unknown
    // session, and -1 answered in full whatever the id.
    if let Some(version) = s.version_at_least(ApiKey::Fetch, 7) {
        let (session_id, session_epoch) =
            *[(-1, -1), (0, -1), (12345, -1), (0, 1), (12345, 3), (-1, -2)].choose(s.rng).expect("non-empty");
        s.push_at(version, Request::SessionFetch { topic: Topic::Slot("t0"), session_id, session_epoch });
    }
    if let Some(version) = s.version(ApiKey::Fetch) {
        let unknown = if version >= 13 { Topic::UnknownId(s.rng.gen()) } else { UNKNOWN };
        s.push_at(
            version,
            Request::Fetch {
                topic: unknown,
                partition: 0,
                offset: 0,
                max_bytes: 1 << 20,
                partition_max_bytes: 1 << 20,
                isolation_level: 0,
            },
        );
    }
    list_offsets(s, Topic::Slot("t0"));
}

/// ListOffsets for earliest, latest, max-timestamp (v7+) and timestamps before, inside
/// and after the produced records.
fn list_offsets(s: &mut Sequence, topic: Topic) {
    let mut timestamps =
        [-2, -1, RECORD_TIMESTAMP_BASE_MS - 1, RECORD_TIMESTAMP_BASE_MS + 500, RECORD_TIMESTAMP_BASE_MS + 100_000];
    timestamps.shuffle(s.rng);
    for &timestamp in timestamps.iter().take(3) {
        s.push(Request::ListOffsets { topic: topic.clone(), partition: 0, timestamp, isolation_level: 0 });
    }
    if let Some(version) = s.version(ApiKey::ListOffsets) {
        // Max-timestamp (-3) arrived with v7 (KIP-734).
        if version >= 7 {
            s.push_at(version, Request::ListOffsets { topic, partition: 0, timestamp: -3, isolation_level: 0 });
        }
    }
}

/// Produce, delete (with an unknown topic alongside), recreate, produce, fetch.
fn delete_recreate(s: &mut Sequence) {
    s.create(Topic::Slot("t0"), 1, vec![]);
    s.produce_acked(Topic::Slot("t0"), 0);
    let mut doomed = vec![Topic::Slot("t0")];
    if s.chance(0.5) {
        doomed.push(UNKNOWN);
    }
    s.push(Request::DeleteTopics { topics: doomed });
    s.metadata(vec![Topic::Slot("t0")]);
    s.produce_acked(Topic::Slot("t0"), 0);
    s.create(Topic::Slot("t0"), 1, vec![]);
    s.produce_acked(Topic::Slot("t0"), 0);
    s.fetch(Topic::Slot("t0"), 0, 0);
    s.push(Request::ListOffsets { topic: Topic::Slot("t0"), partition: 0, timestamp: -1, isolation_level: 0 });
}

/// DeleteRecords below offsets inside, at and beyond the end of the log, then what
/// ListOffsets and Fetch see.
fn delete_records(s: &mut Sequence) {
    s.create(Topic::Slot("t0"), 1, vec![]);
    s.produce_acked(Topic::Slot("t0"), 0);
    s.produce_acked(Topic::Slot("t0"), 0);
    // -1 means "up to the high watermark".
    let offset = *[1i64, 2, -1, 1000].choose(s.rng).expect("non-empty");
    s.push(Request::DeleteRecords { topic: Topic::Slot("t0"), partition: 0, offset });
    if s.chance(0.3) {
        s.push(Request::DeleteRecords { topic: UNKNOWN, partition: 0, offset: 0 });
    }
    s.push(Request::ListOffsets { topic: Topic::Slot("t0"), partition: 0, timestamp: -2, isolation_level: 0 });
    s.fetch(Topic::Slot("t0"), 0, 0);
    s.fetch(Topic::Slot("t0"), 0, 1);
}

/// Offsets of a simple group (no members, generation -1) for known and unknown topics
/// and partitions, then DescribeGroups and ListGroups.
fn offsets(s: &mut Sequence) {
    s.create(Topic::Slot("t0"), 2, vec![]);
    s.metadata(vec![Topic::Slot("t0")]);
    s.push(Request::FindCoordinator { group: "g0" });
    let offset = s.rng.gen_range(0..10);
    s.push(Request::OffsetCommit { group: "g0", topic: Topic::Slot("t0"), partition: 0, offset });
    match s.rng.gen_range(0..3) {
        0 => s.push(Request::OffsetCommit { group: "g0", topic: UNKNOWN, partition: 0, offset: 1 }),
        1 => s.push(Request::OffsetCommit { group: "g0", topic: Topic::Slot("t0"), partition: 7, offset: 1 }),
        _ => {}
    }
    let topics = vec![(Topic::Slot("t0"), vec![0, 1]), (UNKNOWN, vec![0])];
    s.push(Request::OffsetFetch { group: "g0", topics: Some(topics) });
    // A null topic list ("all topics") arrived with v2; earlier versions cannot say it.
    if let Some(version) = s.version_at_least(ApiKey::OffsetFetch, 2) {
        s.push_at(version, Request::OffsetFetch { group: "g0", topics: None });
    }
    s.push(Request::OffsetFetch { group: "g1", topics: Some(vec![(Topic::Slot("t0"), vec![0])]) });
    s.push(Request::DescribeGroups { groups: vec!["g0", "g1"] });
    s.push(Request::ListGroups);
}

/// DescribeConfigs for a topic (all keys and chosen ones), a missing topic and the broker.
fn configs(s: &mut Sequence) {
    let configs = match s.rng.gen_range(0..3) {
        0 => vec![],
        1 => vec![("retention.ms", "3600000")],
        _ => vec![("cleanup.policy", "compact"), ("segment.bytes", "1048576")],
    };
    s.create(Topic::Slot("t0"), 1, configs);
    s.push(Request::DescribeConfigs { resource: ConfigResource::Topic(Topic::Slot("t0")), keys: None });
    let keys = vec!["retention.ms", "cleanup.policy", "no.such.config"];
    s.push(Request::DescribeConfigs { resource: ConfigResource::Topic(Topic::Slot("t0")), keys: Some(keys) });
    s.push(Request::DescribeConfigs { resource: ConfigResource::Topic(UNKNOWN), keys: None });
    if s.chance(0.5) {
        s.push(Request::DescribeConfigs { resource: ConfigResource::Broker, keys: None });
    }
    alter_configs(s);
}

/// Configs the alter steps set, with valid and invalid values.
const ALTERED_CONFIGS: &[(&str, &str)] = &[
    ("retention.ms", "7200000"),
    ("retention.ms", "not-a-number"),
    ("cleanup.policy", "compact"),
    ("cleanup.policy", "bogus"),
    ("compression.type", "zstd"),
    ("message.timestamp.type", "LogAppendTime"),
    ("segment.bytes", "1048576"),
    ("no.such.config", "1"),
];

/// AlterConfigs (which replaces a topic's whole set) and IncrementalAlterConfigs
/// (SET, DELETE, APPEND and SUBTRACT of list configs), valid and invalid, validate
/// only or not, on t0 and on an unknown topic; then DescribeConfigs of what changed.
fn alter_configs(s: &mut Sequence) {
    let t0 = Topic::Slot("t0");
    for _ in 0..s.rng.gen_range(1..=3) {
        let topic = if s.chance(0.15) { UNKNOWN } else { t0.clone() };
        let validate_only = s.chance(0.25);
        if s.chance(0.4) {
            let count = s.rng.gen_range(1..=2);
            let configs = ALTERED_CONFIGS.choose_multiple(s.rng, count).copied().collect();
            s.push(Request::AlterConfigs { topic, configs, validate_only });
        } else {
            let ops = (0..s.rng.gen_range(1..=2))
                .map(|_| match s.rng.gen_range(0..5) {
                    0 => ("retention.ms", 1, None),
                    1 => ("cleanup.policy", 2, Some("compact")),
                    2 => ("cleanup.policy", 3, Some("delete")),
                    _ => {
                        let (name, value) = *ALTERED_CONFIGS.choose(s.rng).expect("non-empty");
                        (name, 0, Some(value))
                    }
                })
                .collect();
            s.push(Request::IncrementalAlterConfigs { topic, ops, validate_only });
        }
    }
    let keys = vec!["retention.ms", "cleanup.policy", "compression.type", "message.timestamp.type", "segment.bytes"];
    s.push(Request::DescribeConfigs { resource: ConfigResource::Topic(t0), keys: Some(keys) });
}

/// CreatePartitions up, down and on a missing topic; ApiVersions, FindCoordinator,
/// DescribeGroups and ListGroups for groups that do not exist.
fn partitions_and_groups(s: &mut Sequence) {
    s.push(Request::ApiVersions);
    s.create(Topic::Slot("t0"), 1, vec![]);
    let validate_only = s.chance(0.3);
    s.push(Request::CreatePartitions { topic: Topic::Slot("t0"), count: 3, validate_only });
    s.push(Request::CreatePartitions { topic: Topic::Slot("t0"), count: 1, validate_only: false });
    s.push(Request::CreatePartitions { topic: UNKNOWN, count: 2, validate_only: false });
    s.metadata(vec![Topic::Slot("t0")]);
    s.produce(Topic::Slot("t0"), 2, false);
    s.push(Request::FindCoordinator { group: "g0" });
    s.push(Request::DescribeGroups { groups: vec!["g0"] });
    s.push(Request::ListGroups);
}

/// The first versions with transaction protocol version 2 semantics (KIP-890): Produce
/// adds the partition it writes to the transaction, TxnOffsetCommit adds the group, and
/// EndTxn moves the producer to a new epoch.
const PRODUCE_VERSION_TRANSACTION_V2: i16 = 12;
const TXN_OFFSET_COMMIT_VERSION_TRANSACTION_V2: i16 = 5;
const END_TXN_VERSION_TRANSACTION_V2: i16 = 5;
/// Kafka rolls a segment when a batch comes `segment.ms` (7 days by default) after the
/// first timestamp of the segment, and a Kafka fetch reads one segment only. The
/// records' fixed timestamps (2023) are years before the markers' (the broker's clock),
/// so by default every marker would start a segment and Kafka's fetches would stop
/// before it; ten years keeps one segment, as for records stamped with today's time.
const SEGMENT_MS_NO_TIME_ROLL: &str = "315360000000";
/// The transactional id slot of the transactions scenario; "x9" is never initialised.
const TXN: &str = "x0";
const TXN_UNKNOWN: &str = "x9";

/// A transaction from InitProducerId to EndTxn on a fresh topic, what consumers and
/// admin clients then see (Fetch at both isolation levels, so the markers' bytes too,
/// ListOffsets, OffsetFetch, DescribeTransactions, ListTransactions,
/// DescribeProducers), and a producer's mistakes: an epoch never given, an unknown
/// topic, a partition not added, EndTxn twice, and a stale epoch after a second
/// InitProducerId fenced it.
///
/// Half of the sequences speak transaction version 2 (Produce v12+, TxnOffsetCommit
/// v5+, EndTxn v5+, nothing added beforehand), the others version 1 (AddPartitionsToTxn
/// and AddOffsetsToTxn first, older versions of the three), each with the versions of
/// its own protocol only.
fn transactions(s: &mut Sequence) {
    let current = Producer { txn: TXN, epoch: Epoch::Current };
    let version_2 = s.serves(ApiKey::Produce, PRODUCE_VERSION_TRANSACTION_V2)
        && s.serves(ApiKey::TxnOffsetCommit, TXN_OFFSET_COMMIT_VERSION_TRANSACTION_V2)
        && s.serves(ApiKey::EndTxn, END_TXN_VERSION_TRANSACTION_V2)
        && s.chance(0.5);
    let t0 = Topic::Slot("t0");
    s.create(t0.clone(), 3, vec![("segment.ms", SEGMENT_MS_NO_TIME_ROLL)]);
    s.push(Request::Txn(TxnRequest::InitProducerId { txn: TXN }));
    let added = s.rng.gen_range(1..=2);
    if !version_2 {
        s.push(Request::Txn(TxnRequest::AddPartitions {
            producer: current,
            topics: vec![(t0.clone(), (0..added).collect())],
        }));
    }
    if s.chance(0.4) {
        let mut topics = vec![(UNKNOWN, vec![0])];
        if s.chance(0.5) {
            topics.push((t0.clone(), vec![0]));
        }
        s.push(Request::Txn(TxnRequest::AddPartitions { producer: current, topics }));
    }
    let mut sequences = [0; 3];
    for partition in 0..added {
        for _ in 0..s.rng.gen_range(1..=2) {
            txn_produce(s, version_2, current, partition, &mut sequences);
        }
    }
    if !version_2 && s.chance(0.5) {
        // Partition 2 was never added to the transaction.
        txn_produce(s, version_2, current, 2, &mut sequences);
    }
    if !version_2 || s.chance(0.5) {
        s.push(Request::Txn(TxnRequest::AddOffsets { producer: current, group: "g0" }));
    }
    let offset = s.rng.gen_range(0..10);
    let commit = TxnRequest::OffsetCommit { producer: current, group: "g0", topic: t0.clone(), partition: 0, offset };
    push_for(s, version_2, TXN_OFFSET_COMMIT_VERSION_TRANSACTION_V2, commit);
    if s.chance(0.4) {
        let commit = s.chance(0.5);
        end_txn(s, version_2, Producer { txn: TXN, epoch: Epoch::Ahead }, commit);
    }
    let commit = s.chance(0.5);
    end_txn(s, version_2, current, commit);
    if s.chance(0.5) {
        // EndTxn twice: a retry (in version 2 also with the epoch before the bump) or
        // the other outcome.
        let epoch = if version_2 && s.chance(0.5) { Epoch::Previous } else { Epoch::Current };
        let again = if s.chance(0.7) { commit } else { !commit };
        end_txn(s, version_2, Producer { txn: TXN, epoch }, again);
    }
    what_clients_see(s, added);
    if s.chance(0.3) {
        // A second transaction, so that a partition holds two markers.
        if version_2 {
            sequences = [0; 3];
        } else {
            s.push(Request::Txn(TxnRequest::AddPartitions { producer: current, topics: vec![(t0.clone(), vec![0])] }));
        }
        txn_produce(s, version_2, current, 0, &mut sequences);
        let commit = s.chance(0.5);
        end_txn(s, version_2, current, commit);
        txn_fetch(s, 0, 1);
    }
    // A new instance of the producer fences the old one's epoch.
    s.push(Request::Txn(TxnRequest::InitProducerId { txn: TXN }));
    let stale = Producer { txn: TXN, epoch: Epoch::First };
    match s.rng.gen_range(0..3) {
        0 => {
            let commit = s.chance(0.5);
            end_txn(s, version_2, stale, commit);
        }
        1 => txn_produce(s, version_2, stale, 0, &mut [0; 3]),
        _ => s.push(Request::Txn(TxnRequest::AddPartitions { producer: stale, topics: vec![(t0, vec![0])] })),
    }
    s.push(Request::Txn(TxnRequest::Describe { txns: vec![TXN] }));
}

/// The producer slot of the idempotent scenario (see `IDEMPOTENT_SLOT_PREFIX`).
const IDEMPOTENT: &str = "p0";
/// How many of a producer's last batches a broker remembers to answer a retry.
const RETRIED_BATCHES_REMEMBERED: usize = 5;

/// An idempotent producer (InitProducerId without a transactional id) writing batches
/// in order with acks 0, 1 or -1, then its mistakes: a retry of one of its last five
/// batches (answered with the first write's offset), a sequence overlapping the last
/// batch or past a gap, a new epoch the coordinator never gave followed by the old
/// one, a producer id no broker gave (at sequence 0 and past it); then a batch in
/// order, and what clients see: Fetch, ListOffsets and DescribeProducers.
fn idempotent_produce(s: &mut Sequence) {
    let t0 = Topic::Slot("t0");
    s.create(t0.clone(), 1, vec![]);
    s.push(Request::Txn(TxnRequest::InitProducerId { txn: IDEMPOTENT }));
    let current = Producer { txn: IDEMPOTENT, epoch: Epoch::Current };
    let mut written: Vec<(i32, i32)> = Vec::new();
    let mut next = 0;
    for _ in 0..s.rng.gen_range(2..=6) {
        let records = s.rng.gen_range(1..=3);
        let acks = *[0i16, 1, -1, -1].choose(s.rng).expect("non-empty");
        idempotent_batch(s, current, acks, next, records);
        written.push((next, records));
        next += records;
    }
    for _ in 0..s.rng.gen_range(1..=3) {
        let acks = *[1i16, -1].choose(s.rng).expect("non-empty");
        match s.rng.gen_range(0..5) {
            0 => {
                let recent = &written[written.len().saturating_sub(RETRIED_BATCHES_REMEMBERED)..];
                let (base_sequence, records) = *recent.choose(s.rng).expect("at least two batches written");
                idempotent_batch(s, current, acks, base_sequence, records);
            }
            1 => idempotent_batch(s, current, acks, next - 1, 2),
            2 => {
                let gap = s.rng.gen_range(1..=3);
                idempotent_batch(s, current, acks, next + gap, 1);
            }
            3 => {
                idempotent_batch(s, Producer { txn: IDEMPOTENT, epoch: Epoch::Ahead }, acks, 0, 1);
                idempotent_batch(s, current, acks, next, 1);
            }
            _ => {
                let base_sequence = if s.chance(0.5) { 0 } else { 5 };
                idempotent_batch(s, Producer { txn: IDEMPOTENT, epoch: Epoch::UnknownId }, acks, base_sequence, 1);
            }
        }
    }
    idempotent_batch(s, current, -1, next, 1);
    let (max_bytes, partition_max_bytes) = (1 << 20, 1 << 20);
    s.push(Request::Fetch {
        topic: t0.clone(),
        partition: 0,
        offset: 0,
        max_bytes,
        partition_max_bytes,
        isolation_level: 0,
    });
    s.push(Request::ListOffsets { topic: t0.clone(), partition: 0, timestamp: -1, isolation_level: 0 });
    s.push(Request::Txn(TxnRequest::DescribeProducers { topic: t0, partitions: vec![0] }));
}

fn idempotent_batch(s: &mut Sequence, producer: Producer, acks: i16, base_sequence: i32, records: i32) {
    let topic = Topic::Slot("t0");
    s.push(Request::Txn(TxnRequest::Produce { producer, acks, topic, partition: 0, base_sequence, records }));
}

/// The group and the static member's instance id of the group scenario.
const GROUP: &str = "g0";
const INSTANCE: &str = "i0";

/// A consumer group with one member: JoinGroup (which from v4 first answers a dynamic
/// member MEMBER_ID_REQUIRED with the id to join with), SyncGroup, Heartbeat, an offset
/// committed as the member, then the member's mistakes (an id no broker gave, a
/// generation never given, in Heartbeat, SyncGroup and OffsetCommit) or a rejoin; then
/// OffsetFetch, DescribeGroups and ListGroups of the live group, LeaveGroup (as the
/// member or as an unknown one) and DescribeGroups again. One time in three the member
/// is static (group.instance.id, JoinGroup v5+).
fn group_membership(s: &mut Sequence) {
    let t0 = Topic::Slot("t0");
    s.create(t0.clone(), 1, vec![]);
    s.push(Request::FindCoordinator { group: GROUP });
    let instance = s.chance(0.33).then_some(INSTANCE);
    let group = |request| Request::Group(request);
    s.push(group(GroupRequest::Join { group: GROUP, member: Member::New, instance }));
    s.push(group(GroupRequest::Join { group: GROUP, member: Member::Given, instance }));
    let sync = |member, generation| GroupRequest::Sync { group: GROUP, member, generation, instance };
    let heartbeat = |member, generation| GroupRequest::Heartbeat { group: GROUP, member, generation, instance };
    let commit = |member, generation, offset| GroupRequest::Commit {
        group: GROUP,
        member,
        generation,
        topic: Topic::Slot("t0"),
        partition: 0,
        offset,
    };
    s.push(group(sync(Member::Given, Generation::Current)));
    s.push(group(heartbeat(Member::Given, Generation::Current)));
    let offset = s.rng.gen_range(0..10);
    s.push(group(commit(Member::Given, Generation::Current, offset)));
    for _ in 0..s.rng.gen_range(1..=3) {
        let offset = s.rng.gen_range(0..10);
        let request = match s.rng.gen_range(0..6) {
            0 => heartbeat(Member::Unknown, Generation::Current),
            1 => heartbeat(Member::Given, Generation::Ahead),
            2 => sync(Member::Given, Generation::Ahead),
            3 => commit(Member::Given, Generation::Ahead, offset),
            4 => commit(Member::Unknown, Generation::Current, offset),
            _ => {
                s.push(group(GroupRequest::Join { group: GROUP, member: Member::Given, instance }));
                sync(Member::Given, Generation::Current)
            }
        };
        s.push(group(request));
    }
    s.push(Request::OffsetFetch { group: GROUP, topics: Some(vec![(t0, vec![0])]) });
    s.push(Request::DescribeGroups { groups: vec![GROUP] });
    s.push(Request::ListGroups);
    let member = if s.chance(0.3) { Member::Unknown } else { Member::Given };
    s.push(group(GroupRequest::Leave { group: GROUP, member, instance }));
    s.push(Request::DescribeGroups { groups: vec![GROUP] });
}

impl Sequence<'_, '_> {
    /// Whether both brokers serve `api` at `version` or later.
    fn serves(&self, api: ApiKey, version: i16) -> bool {
        self.versions.common(api).is_some_and(|(_, max)| max >= version)
    }
}

/// Pushes a request whose semantics changed at `first_version_2`, at a version of the
/// transaction protocol the sequence speaks.
fn push_for(s: &mut Sequence, version_2: bool, first_version_2: i16, request: TxnRequest) {
    let (min, max) = if version_2 { (first_version_2, i16::MAX) } else { (i16::MIN, first_version_2 - 1) };
    s.push_between(min, max, Request::Txn(request));
}

/// A transactional produce of 1 to 3 records to `partition` of t0; `sequences` holds
/// the next sequence of each partition.
fn txn_produce(s: &mut Sequence, version_2: bool, producer: Producer, partition: i32, sequences: &mut [i32; 3]) {
    let records = s.rng.gen_range(1..=3);
    let base_sequence = sequences[partition as usize];
    sequences[partition as usize] += records;
    let request =
        TxnRequest::Produce { producer, acks: -1, topic: Topic::Slot("t0"), partition, base_sequence, records };
    push_for(s, version_2, PRODUCE_VERSION_TRANSACTION_V2, request);
}

fn end_txn(s: &mut Sequence, version_2: bool, producer: Producer, commit: bool) {
    push_for(s, version_2, END_TXN_VERSION_TRANSACTION_V2, TxnRequest::End { producer, commit });
}

fn txn_fetch(s: &mut Sequence, partition: i32, isolation_level: i8) {
    let (max_bytes, partition_max_bytes) = (1 << 20, 1 << 20);
    let topic = Topic::Slot("t0");
    s.push(Request::Fetch { topic, partition, offset: 0, max_bytes, partition_max_bytes, isolation_level });
}

/// After EndTxn: the records and markers at both isolation levels, the offsets, and
/// what the admin APIs say of the transaction and the producer.
fn what_clients_see(s: &mut Sequence, partitions: i32) {
    for partition in 0..partitions {
        txn_fetch(s, partition, 0);
        txn_fetch(s, partition, 1);
    }
    let topic = Topic::Slot("t0");
    s.push(Request::ListOffsets { topic: topic.clone(), partition: 0, timestamp: -1, isolation_level: 1 });
    s.push(Request::OffsetFetch { group: "g0", topics: Some(vec![(topic.clone(), vec![0])]) });
    s.push(Request::Txn(TxnRequest::Describe { txns: vec![TXN, TXN_UNKNOWN] }));
    let states = match s.rng.gen_range(0..3) {
        0 => vec![],
        1 => vec!["CompleteCommit", "CompleteAbort"],
        _ => vec!["Ongoing", "NoSuchState"],
    };
    s.push(Request::Txn(TxnRequest::List { states }));
    s.push(Request::Txn(TxnRequest::DescribeProducers { topic, partitions: (0..partitions).collect() }));
}
