//! Produce: partitions are grouped by owner shard; each owner validates, deduplicates
//! and appends its batches (and with acks=-1 waits for the group commit) while the
//! other owners do the same; answers are gathered in request order.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse, TopicName};
use uuid::Uuid;

use crate::shard::fanout::scatter;

use crate::util::str_bytes;

use super::Answer;
use crate::cluster::nodes;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::dispatch::Serve;
use crate::shard::partition::{ProduceOutcome, TxnWrite};
use crate::shard::Shard;
use crate::{quota, throttle};

pub const VERSIONS: (i16, i16) = (3, 13);

/// From this version a throttled producer waits by itself (KIP-219): the response
/// goes at once and the connection is muted; before it, the response is delayed.
const SELF_THROTTLE_VERSION_MIN: i16 = 6;

/// zstd batches came with Produce v7 (KIP-110): Kafka refuses them in older requests
/// with UNSUPPORTED_COMPRESSION_TYPE, since a client that old could not read them back.
const ZSTD_VERSION_MIN: i16 = 7;
const CODEC_ZSTD: i16 = 4;

/// The codec of the first batch in `records`, if it holds a whole batch header.
fn first_codec(records: Option<&Bytes>) -> Option<i16> {
    let header = keel_protocol::batch::BatchHeader::parse(records?).ok()?;
    Some(header.compression())
}

struct Part {
    topic: String,
    partition: i32,
    records: Option<Bytes>,
}

/// On an owner shard: appends each part's batches to its partition, all at once.
pub struct Append {
    parts: Vec<Part>,
    acks: i16,
    timeout: Duration,
    txn: Option<TxnWrite>,
}

impl Serve for Append {
    async fn serve(self, s: Rc<Shard>) -> Vec<ProduceOutcome> {
        let Append { parts, acks, timeout, txn } = self;
        let calls = parts.into_iter().map(|part| {
            let s = s.clone();
            let txn = txn.clone();
            async move {
                let Some(p) = s.partition(&part.topic, part.partition) else {
                    return ProduceOutcome::refused(errors::NOT_LEADER_OR_FOLLOWER);
                };
                let Some(records) = part.records else {
                    return ProduceOutcome::refused(errors::CORRUPT_MESSAGE);
                };
                let (bytes, counts) = (records.len(), s.metrics.enabled().then(|| batch_counts(&records)));
                let outcome = p.produce(&s, records, acks, timeout, txn.as_ref()).await;
                if let (Some((records, batches)), errors::NONE) = (counts, outcome.error) {
                    s.metrics.produced(&part.topic, bytes, records, batches);
                }
                outcome
            }
        });
        keel_storage::join::join_all(calls.collect()).await
    }
}

/// Records and batches in a partition's record set (v2 batch headers; a set that
/// does not parse counts what parsed before it).
fn batch_counts(records: &Bytes) -> (u64, u64) {
    let (mut rest, mut counts) = (&records[..], (0u64, 0u64));
    while let Ok(h) = keel_protocol::BatchHeader::parse(rest) {
        counts.0 += h.records_count.max(0) as u64;
        counts.1 += 1;
        match rest.get(h.total_len()..) {
            Some(next) => rest = next,
            None => break,
        }
    }
    counts
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: ProduceRequest,
) -> Answer<ProduceResponse> {
    let acks = req.acks;
    let timeout = Duration::from_millis(req.timeout_ms.max(0) as u64);
    // A missing topic is UNKNOWN_TOPIC_OR_PARTITION: as in Kafka, only Metadata
    // creates topics automatically (producers ask it before they produce).
    let meta = shard.meta();
    // Slots in request order: (topic name, topic id, partition, outcome or owner).
    let mut slots: Vec<(TopicName, Uuid, i32, Option<ProduceOutcome>)> = Vec::new();
    let mut work: Vec<(usize, Part)> = Vec::new();
    let mut work_slots = Vec::new();
    // As Kafka: a transactional write needs WRITE on its transactional id (else every
    // partition is refused), and each topic WRITE, checked before it is looked up.
    let txn_authorized = req.transactional_id.as_ref().is_none_or(|t| {
        super::authorized(shard, ctx, acl::operation::WRITE, acl::resource::TRANSACTIONAL_ID, t.0.as_str())
    });
    for topic in req.topic_data {
        let name = if version >= 13 {
            meta.topic_name(&topic.topic_id).map(str::to_string)
        } else {
            Some(topic.name.0.to_string())
        };
        let write_allowed = match &name {
            Some(n) if txn_authorized => super::authorized(shard, ctx, acl::operation::WRITE, acl::resource::TOPIC, n),
            _ => false,
        };
        for p in topic.partition_data {
            let early = if ![-1, 0, 1].contains(&acks) {
                Some(errors::INVALID_REQUIRED_ACKS)
            } else if !txn_authorized {
                Some(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            } else if name.is_none() {
                Some(errors::UNKNOWN_TOPIC_ID)
            } else if !write_allowed {
                Some(errors::TOPIC_AUTHORIZATION_FAILED)
            } else if [crate::config::OFFSETS_TOPIC, crate::config::TRANSACTION_TOPIC]
                .contains(&name.as_deref().unwrap_or_default())
            {
                // Only the coordinators write their internal topics, as in Kafka.
                Some(errors::INVALID_TOPIC_EXCEPTION)
            } else {
                None
            };
            let owner = name.as_deref().and_then(|n| meta.owner(n, p.index));
            let outcome = match (early, owner) {
                (Some(code), _) => Some(ProduceOutcome::refused(code)),
                (None, None) => Some(ProduceOutcome::refused(errors::UNKNOWN_TOPIC_OR_PARTITION)),
                (None, Some(_))
                    if version < ZSTD_VERSION_MIN && first_codec(p.records.as_ref()) == Some(CODEC_ZSTD) =>
                {
                    Some(ProduceOutcome::refused(errors::UNSUPPORTED_COMPRESSION_TYPE))
                }
                (None, Some(owner)) => {
                    work_slots.push(slots.len());
                    work.push((
                        owner,
                        Part { topic: name.clone().unwrap_or_default(), partition: p.index, records: p.records },
                    ));
                    None
                }
            };
            slots.push((topic.name.clone(), topic.topic_id, p.index, outcome));
        }
    }
    // The client's quota counts the bytes it sent (Kafka counts the request's size).
    let sent: usize = work.iter().map(|(_, p)| p.records.as_ref().map_or(0, Bytes::len)).sum();
    let txn = req.transactional_id.map(|t| TxnWrite { id: t.0.to_string(), add: version >= 12 });
    let outcomes = scatter(shard, work, |parts| Append { parts, acks, timeout, txn: txn.clone() }).await;
    for (slot, outcome) in work_slots.into_iter().zip(outcomes) {
        slots[slot].3 = Some(outcome);
    }
    let throttle =
        throttle::charge(shard, ctx, quota::Kind::Produce, sent, version >= SELF_THROTTLE_VERSION_MIN, false)
            .await
            .unwrap_or(Duration::ZERO);
    if version < SELF_THROTTLE_VERSION_MIN && !throttle.is_zero() {
        glommio::timer::sleep(throttle).await;
    }
    if acks == 0 {
        // No answer, but a failure closes the connection, as Kafka does: the client
        // learns something went wrong and refreshes its metadata.
        let failed = slots.iter().any(|(_, _, _, o)| o.as_ref().is_some_and(|o| o.error != errors::NONE));
        return if failed { Answer::Close } else { Answer::Silent };
    }
    let mut responses: Vec<TopicProduceResponse> = Vec::new();
    let mut leaders = Vec::new();
    for (name, id, partition, outcome) in slots {
        let mut o = outcome.expect("every partition answered");
        if o.error == errors::INVALID_TXN_STATE && version >= 11 {
            // A write its transaction does not cover (KIP-890 verification): from
            // version 11 an error the producer recovers from by aborting, as Kafka 4.
            o.error = errors::TRANSACTION_ABORTABLE;
        }
        if o.error != errors::NONE {
            tracing::debug!(topic = %name.0, partition, code = o.error, message = ?o.message, "produce refused");
        }
        // Where the partition's leader is now (KIP-951), so the producer need not
        // wait for a metadata refresh to go there.
        let leader = if o.error == errors::NOT_LEADER_OR_FOLLOWER && version >= 10 {
            let topic = if version >= 13 { meta.topic_name(&id).unwrap_or_default() } else { name.0.as_str() };
            nodes::known_leader(shard, topic, partition)
        } else {
            None
        };
        let mut current_leader = LeaderIdAndEpoch::default();
        if let Some((node, epoch)) = leader {
            current_leader = current_leader.with_leader_id(BrokerId(node)).with_leader_epoch(epoch);
            leaders.push(node);
        }
        let part = PartitionProduceResponse::default()
            .with_index(partition)
            .with_current_leader(current_leader)
            .with_error_code(o.error)
            .with_base_offset(o.base_offset)
            .with_log_append_time_ms(o.log_append_time)
            .with_log_start_offset(o.log_start_offset)
            .with_error_message(o.message.as_deref().map(str_bytes))
            .with_record_errors(
                o.record_errors
                    .iter()
                    .map(|(i, m)| {
                        BatchIndexAndErrorMessage::default()
                            .with_batch_index(*i)
                            .with_batch_index_error_message(Some(str_bytes(m)))
                    })
                    .collect(),
            );
        match responses.last_mut() {
            Some(t) if t.name == name && t.topic_id == id => t.partition_responses.push(part),
            _ => responses.push(
                TopicProduceResponse::default().with_name(name).with_topic_id(id).with_partition_responses(vec![part]),
            ),
        }
    }
    let node_endpoints = nodes::endpoints_of(shard, ctx.listener_name(), &leaders)
        .into_iter()
        .map(|(id, host, port)| {
            NodeEndpoint::default().with_node_id(BrokerId(id)).with_host(str_bytes(&host)).with_port(port)
        })
        .collect();
    Answer::Respond(
        ProduceResponse::default()
            .with_responses(responses)
            .with_node_endpoints(node_endpoints)
            .with_throttle_time_ms(throttle.as_millis() as i32),
    )
}
