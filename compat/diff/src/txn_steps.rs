//! The steps of a transactional producer and of the transaction admin requests.
//!
//! A transactional request names its producer by the transactional id's slot and by
//! which of the epochs the broker gave it ([`Epoch`]), never by numbers: each broker
//! hands out its own producer ids, so the ids and epochs are looked up in what that
//! broker answered (`BrokerContext::producers`) when the step is sent, as topic ids
//! are. A wrong or stale epoch is then the same mistake on both brokers.
//!
//! An idempotent producer (one without a transactional id) is named the same way, by a
//! slot that starts with [`IDEMPOTENT_SLOT_PREFIX`]: its InitProducerId sends no
//! transactional id and its batches are not transactional.

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

use crate::steps::{short, BrokerContext, Names, Topic, RECORD_TIMESTAMP_BASE_MS};

/// Long enough that no transaction of a sequence times out while it runs.
const TRANSACTION_TIMEOUT_MS: i32 = 60_000;

/// A producer slot starting with this names an idempotent producer, not a transactional one.
pub const IDEMPOTENT_SLOT_PREFIX: char = 'p';

/// A producer id no broker gave (Kafka hands them out in blocks from 0, Keel from 1).
const PRODUCER_ID_NEVER_GIVEN: i64 = 4_000_000_000_000;

pub fn is_idempotent(slot: &str) -> bool {
    slot.starts_with(IDEMPOTENT_SLOT_PREFIX)
}

/// Which of the (producer id, epoch) pairs a broker gave a transactional id a step uses.
#[derive(Clone, Copy, Debug)]
pub enum Epoch {
    /// The latest: what a well-behaved producer sends.
    Current,
    /// The one before the latest (the epoch before a bump), or the latest if only one.
    Previous,
    /// The first of the sequence: stale once InitProducerId ran again.
    First,
    /// One past the latest: an epoch the coordinator never gave.
    Ahead,
    /// A producer id no broker gave, with epoch 0.
    UnknownId,
}

/// A transactional producer: its transactional id's slot and the epoch it sends.
#[derive(Clone, Copy, Debug)]
pub struct Producer {
    pub txn: &'static str,
    pub epoch: Epoch,
}

#[derive(Clone, Debug)]
pub enum TxnRequest {
    InitProducerId {
        txn: &'static str,
    },
    /// The client form (versions 0 to 3): one transaction, partitions by topic.
    AddPartitions {
        producer: Producer,
        topics: Vec<(Topic, Vec<i32>)>,
    },
    /// `records` records from sequence `base_sequence` on; a transactional producer
    /// sends acks=-1.
    Produce {
        producer: Producer,
        acks: i16,
        topic: Topic,
        partition: i32,
        base_sequence: i32,
        records: i32,
    },
    AddOffsets {
        producer: Producer,
        group: &'static str,
    },
    /// A simple group's offset (generation -1, no member) in the transaction.
    OffsetCommit {
        producer: Producer,
        group: &'static str,
        topic: Topic,
        partition: i32,
        offset: i64,
    },
    End {
        producer: Producer,
        commit: bool,
    },
    Describe {
        txns: Vec<&'static str>,
    },
    /// The answer is filtered to this sequence's transactional ids.
    List {
        states: Vec<&'static str>,
    },
    DescribeProducers {
        topic: Topic,
        partitions: Vec<i32>,
    },
}

impl BrokerContext {
    /// The producer id and epoch `producer` stands for on this broker; -1/-1 when the
    /// broker gave the transactional id none (its InitProducerId failed or was not sent).
    pub fn producer(&self, names: &Names, producer: Producer) -> (i64, i16) {
        let Some(seen) = self.producers.get(&names.transactional_id(producer.txn)) else { return (-1, -1) };
        let Some(&latest) = seen.last() else { return (-1, -1) };
        match producer.epoch {
            Epoch::Current => latest,
            Epoch::Previous => seen.len().checked_sub(2).map_or(latest, |i| seen[i]),
            Epoch::First => seen[0],
            Epoch::Ahead => (latest.0, latest.1.saturating_add(1)),
            Epoch::UnknownId => (PRODUCER_ID_NEVER_GIVEN, 0),
        }
    }
}

impl TxnRequest {
    pub fn api_key(&self) -> ApiKey {
        match self {
            TxnRequest::InitProducerId { .. } => ApiKey::InitProducerId,
            TxnRequest::AddPartitions { .. } => ApiKey::AddPartitionsToTxn,
            TxnRequest::Produce { .. } => ApiKey::Produce,
            TxnRequest::AddOffsets { .. } => ApiKey::AddOffsetsToTxn,
            TxnRequest::OffsetCommit { .. } => ApiKey::TxnOffsetCommit,
            TxnRequest::End { .. } => ApiKey::EndTxn,
            TxnRequest::Describe { .. } => ApiKey::DescribeTransactions,
            TxnRequest::List { .. } => ApiKey::ListTransactions,
            TxnRequest::DescribeProducers { .. } => ApiKey::DescribeProducers,
        }
    }

    /// The transactional id slot whose state the request changes or reads, if one.
    pub fn txn(&self) -> Option<&'static str> {
        match self {
            TxnRequest::InitProducerId { txn } => Some(txn),
            TxnRequest::AddPartitions { producer, .. }
            | TxnRequest::Produce { producer, .. }
            | TxnRequest::AddOffsets { producer, .. }
            | TxnRequest::OffsetCommit { producer, .. }
            | TxnRequest::End { producer, .. } => Some(producer.txn),
            _ => None,
        }
    }

    pub fn summary(&self, names: &Names) -> String {
        let producer = |p: &Producer| format!("{} epoch={:?}", names.transactional_id(p.txn), p.epoch);
        let topic = |t: &Topic| short(&names.topic(t));
        match self {
            TxnRequest::InitProducerId { txn } if is_idempotent(txn) => {
                format!("transactional_id=null (idempotent producer {})", names.transactional_id(txn))
            }
            TxnRequest::InitProducerId { txn } => {
                format!("transactional_id={} timeout_ms={TRANSACTION_TIMEOUT_MS}", names.transactional_id(txn))
            }
            TxnRequest::AddPartitions { producer: p, topics } => {
                let topics: Vec<String> =
                    topics.iter().map(|(t, partitions)| format!("{}{partitions:?}", topic(t))).collect();
                format!("{} [{}]", producer(p), topics.join(", "))
            }
            TxnRequest::Produce { producer: p, acks, topic: t, partition, base_sequence, records } => format!(
                "{} {} acks={acks} {}/{partition} {records} records from sequence {base_sequence}",
                if is_idempotent(p.txn) { "idempotent" } else { "transactional" },
                producer(p),
                topic(t)
            ),
            TxnRequest::AddOffsets { producer: p, group } => format!("{} group={}", producer(p), names.group(group)),
            TxnRequest::OffsetCommit { producer: p, group, topic: t, partition, offset } => format!(
                "{} group={} generation=-1 {}/{partition} offset={offset}",
                producer(p),
                names.group(group),
                topic(t)
            ),
            TxnRequest::End { producer: p, commit } => {
                format!("{} {}", producer(p), if *commit { "commit" } else { "abort" })
            }
            TxnRequest::Describe { txns } => {
                let ids: Vec<String> = txns.iter().map(|t| names.transactional_id(t)).collect();
                format!("[{}]", ids.join(", "))
            }
            TxnRequest::List { states } => {
                format!("state_filters={states:?} (answer filtered to this sequence's transactional ids)")
            }
            TxnRequest::DescribeProducers { topic: t, partitions } => format!("{}{partitions:?}", topic(t)),
        }
    }

    pub fn build(&self, version: i16, names: &Names, context: &BrokerContext) -> RequestKind {
        let transactional_id = |slot: &str| TransactionalId(StrBytes::from_string(names.transactional_id(slot)));
        let topic_name = |t: &Topic| TopicName(StrBytes::from_string(names.topic(t)));
        let group_id = |g: &str| GroupId(StrBytes::from_string(names.group(g)));
        match self {
            TxnRequest::InitProducerId { txn } => RequestKind::InitProducerId(
                InitProducerIdRequest::default()
                    .with_transactional_id((!is_idempotent(txn)).then(|| transactional_id(txn)))
                    .with_transaction_timeout_ms(TRANSACTION_TIMEOUT_MS),
            ),
            TxnRequest::AddPartitions { producer, topics } => {
                let (id, epoch) = context.producer(names, *producer);
                let topics = topics
                    .iter()
                    .map(|(t, partitions)| {
                        AddPartitionsToTxnTopic::default().with_name(topic_name(t)).with_partitions(partitions.clone())
                    })
                    .collect();
                RequestKind::AddPartitionsToTxn(
                    AddPartitionsToTxnRequest::default()
                        .with_v3_and_below_transactional_id(transactional_id(producer.txn))
                        .with_v3_and_below_producer_id(ProducerId(id))
                        .with_v3_and_below_producer_epoch(epoch)
                        .with_v3_and_below_topics(topics),
                )
            }
            TxnRequest::Produce { producer, acks, topic, partition, base_sequence, records } => {
                let (id, epoch) = context.producer(names, *producer);
                let transactional = !is_idempotent(producer.txn);
                let batch = encode_producer_batch(id, epoch, transactional, *base_sequence, *records);
                let mut data = TopicProduceData::default().with_partition_data(vec![PartitionProduceData::default()
                    .with_index(*partition)
                    .with_records(Some(batch))]);
                // Produce v13 (KIP-516) addresses topics by id instead of by name.
                if version >= 13 {
                    data = data.with_topic_id(names.topic_id(topic, context));
                } else {
                    data = data.with_name(topic_name(topic));
                }
                RequestKind::Produce(
                    ProduceRequest::default()
                        .with_transactional_id(transactional.then(|| transactional_id(producer.txn)))
                        .with_acks(*acks)
                        .with_timeout_ms(10_000)
                        .with_topic_data(vec![data]),
                )
            }
            TxnRequest::AddOffsets { producer, group } => {
                let (id, epoch) = context.producer(names, *producer);
                RequestKind::AddOffsetsToTxn(
                    AddOffsetsToTxnRequest::default()
                        .with_transactional_id(transactional_id(producer.txn))
                        .with_producer_id(ProducerId(id))
                        .with_producer_epoch(epoch)
                        .with_group_id(group_id(group)),
                )
            }
            TxnRequest::OffsetCommit { producer, group, topic, partition, offset } => {
                let (id, epoch) = context.producer(names, *producer);
                let partition = TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(*partition)
                    .with_committed_offset(*offset)
                    .with_committed_metadata(Some(StrBytes::from_static_str("m")));
                RequestKind::TxnOffsetCommit(
                    TxnOffsetCommitRequest::default()
                        .with_transactional_id(transactional_id(producer.txn))
                        .with_group_id(group_id(group))
                        .with_producer_id(ProducerId(id))
                        .with_producer_epoch(epoch)
                        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                            .with_name(topic_name(topic))
                            .with_partitions(vec![partition])]),
                )
            }
            TxnRequest::End { producer, commit } => {
                let (id, epoch) = context.producer(names, *producer);
                RequestKind::EndTxn(
                    EndTxnRequest::default()
                        .with_transactional_id(transactional_id(producer.txn))
                        .with_producer_id(ProducerId(id))
                        .with_producer_epoch(epoch)
                        .with_committed(*commit),
                )
            }
            TxnRequest::Describe { txns } => RequestKind::DescribeTransactions(
                DescribeTransactionsRequest::default()
                    .with_transactional_ids(txns.iter().map(|t| transactional_id(t)).collect()),
            ),
            TxnRequest::List { states } => RequestKind::ListTransactions(
                ListTransactionsRequest::default()
                    .with_state_filters(states.iter().map(|s| StrBytes::from_static_str(s)).collect()),
            ),
            TxnRequest::DescribeProducers { topic, partitions } => {
                RequestKind::DescribeProducers(DescribeProducersRequest::default().with_topics(vec![
                    TopicRequest::default().with_name(topic_name(topic)).with_partition_indexes(partitions.clone()),
                ]))
            }
        }
    }
}

/// One v2 batch of a producer (transactional or idempotent) of `count` records from
/// `base_sequence` on, with keys and values that name their sequence and the tester's
/// fixed timestamps.
fn encode_producer_batch(producer_id: i64, epoch: i16, transactional: bool, base_sequence: i32, count: i32) -> Bytes {
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: base_sequence + i,
            timestamp: RECORD_TIMESTAMP_BASE_MS + i as i64 * 1000,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(format!("txn-{}", base_sequence + i))),
            headers: IndexMap::new(),
        })
        .collect();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encoding an in-memory v2 batch cannot fail");
    buf.freeze()
}
