//! Finding a coordinator (node and shard) of a group or of a transactional id,
//! creating its internal topic (`__consumer_offsets`, `__transaction_state`) on first
//! use, forwarding an operation to that shard, and appending a coordinator's records
//! to its internal topic.
//!
//! **In a cluster the coordinator is a Raft leader.** Both internal topics are
//! replicated topics like any other (replication factor min(3, nodes)), and a key's
//! coordinator is the leader of the key's partition, so it moves when leadership
//! does and the records written through Raft move with it. Every node names the same
//! coordinator from the leaders it learns (`nodes::partition_view`); a node that
//! does not lead the partition answers NOT_COORDINATOR, and the leader answers
//! COORDINATOR_LOAD_IN_PROGRESS until it has read the partition's state (`shell`,
//! `txn::shell`).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::records::RecordBatchDecoder;
use keel_protocol::batch::{build_batch_as, Producer, ATTR_TRANSACTIONAL};
use keel_storage::log;

use crate::groups::offsets_partition;

use super::controller::TopicSpec;
use super::nodes::{self, ControlRequest};
use super::requests::CreateTopics;
use crate::config::BrokerConfig;
use crate::config::OFFSETS_TOPIC;
use crate::config::TRANSACTION_TOPIC;
use crate::errors;
use crate::shard::dispatch::Serve;
use crate::shard::partition::{now_ms, Partition};
use crate::shard::Shard;

/// Longest wait for a record to become durable before the request fails.
const APPEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes read per step while replaying an internal topic.
const REPLAY_READ_BYTES: usize = 1 << 20;

/// A record's key and value, as a coordinator writes them.
pub type KeyValue = (bytes::Bytes, Option<bytes::Bytes>);
type KeyValueRef<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Kafka's `offsets.topic.segment.bytes`: small segments so compaction has work to do.
const OFFSETS_SEGMENT_BYTES: &str = "104857600";

/// The coordinator shard of `group` and its `__consumer_offsets` partition, creating
/// the topic (through the controller) if no group has been used yet.
pub async fn coordinator_of(shard: &Rc<Shard>, group: &str) -> Result<(usize, i32), i16> {
    internal_owner(shard, OFFSETS_TOPIC, group).await
}

/// The owner shard of `key`'s partition of internal topic `topic`, creating the topic
/// first if needed.
pub async fn internal_owner(shard: &Rc<Shard>, topic: &'static str, key: &str) -> Result<(usize, i32), i16> {
    if !shard.meta().topics.contains_key(topic) {
        create_internal_topic(shard, topic).await?;
    }
    let meta = shard.meta();
    let t = meta.topics.get(topic).ok_or(errors::COORDINATOR_NOT_AVAILABLE)?;
    let partition = offsets_partition(key, t.partitions.len() as i32);
    let owner = meta.owner(topic, partition).ok_or(errors::COORDINATOR_NOT_AVAILABLE)?;
    Ok((owner, partition))
}

/// `__consumer_offsets` as Kafka creates it: compacted, small segments.
pub fn offsets_topic_spec(partitions: i32) -> TopicSpec {
    let configs = BTreeMap::from([
        ("cleanup.policy".to_string(), "compact".to_string()),
        ("segment.bytes".to_string(), OFFSETS_SEGMENT_BYTES.to_string()),
    ]);
    TopicSpec { name: OFFSETS_TOPIC.to_string(), partitions, replication_factor: -1, configs }
}

/// An internal topic as Kafka creates it: both are compacted, with small segments
/// (`transaction.state.log.segment.bytes` is also 100 MiB).
pub fn internal_topic_spec(topic: &str, config: &BrokerConfig) -> TopicSpec {
    let partitions =
        if topic == TRANSACTION_TOPIC { config.transaction_topic_partitions } else { config.offsets_topic_partitions };
    TopicSpec { name: topic.to_string(), ..offsets_topic_spec(partitions) }
}

async fn create_internal_topic(shard: &Rc<Shard>, topic: &'static str) -> Result<(), i16> {
    if shard.replication.is_some() {
        let request = ControlRequest::CreateTopics { names: vec![topic.to_string()] };
        let done = |m: &crate::metadata::Metadata| m.topics.contains_key(topic);
        return match nodes::ask_until(shard, request, std::time::Duration::from_secs(5), done).await {
            true => Ok(()),
            false => Err(errors::COORDINATOR_NOT_AVAILABLE),
        };
    }
    let spec = internal_topic_spec(topic, &shard.config);
    let (created, _) = shard.call(0, CreateTopics { specs: vec![spec], validate_only: false, quota: None }).await;
    match created.into_iter().next() {
        Some(Ok(_)) => {
            tracing::info!("created {topic}");
            Ok(())
        }
        // Another shard created it first; its metadata reaches this shard shortly.
        Some(Err((code, _))) if code == errors::TOPIC_ALREADY_EXISTS => {
            if shard.meta().topics.contains_key(topic) {
                Ok(())
            } else {
                Err(errors::COORDINATOR_NOT_AVAILABLE)
            }
        }
        Some(Err((code, message))) => {
            tracing::error!(code, %message, "cannot create {topic}");
            Err(errors::COORDINATOR_NOT_AVAILABLE)
        }
        None => Err(errors::COORDINATOR_NOT_AVAILABLE),
    }
}

/// Serves the request `request` makes of `group`'s `__consumer_offsets` partition on
/// that partition's shard, the group's coordinator shard.
pub async fn on_coordinator<R: Serve>(
    shard: &Rc<Shard>,
    group: &str,
    request: impl FnOnce(i32) -> R,
) -> Result<R::Reply, i16> {
    let (owner, partition) = coordinator_of(shard, group).await?;
    Ok(shard.call(owner, request(partition)).await)
}

/// Checked on the coordinator shard before any group operation: the partition is
/// ours (in a cluster: this node leads it) and its groups are loaded.
pub fn check_coordinator(shard: &Shard, partition: i32) -> Result<(), i16> {
    let Some(p) = shard.partition(OFFSETS_TOPIC, partition) else {
        return Err(errors::NOT_COORDINATOR);
    };
    if p.not_leader(shard).is_some() {
        return Err(errors::NOT_COORDINATOR);
    }
    let c = shard.coordinator.borrow();
    let loaded = match &p.replica {
        None => c.loaded,
        Some(_) => c.led.get(&partition) == Some(&p.leader_epoch()),
    };
    if !loaded {
        return Err(errors::COORDINATOR_LOAD_IN_PROGRESS);
    }
    Ok(())
}

/// As `check_coordinator`, before an answer from the coordinator's memory: in a
/// cluster, the offsets partition's voters also confirm that this node still leads it
/// (`replication::read_index`), so a coordinator that was paused or cut off, and has
/// not heard of its successor yet, does not answer from what it held.
pub async fn check_coordinator_for_read(shard: &Shard, partition: i32) -> Result<(), i16> {
    check_coordinator(shard, partition)?;
    let replica = shard.partition(OFFSETS_TOPIC, partition).and_then(|p| p.replica.clone());
    if let (Some(replication), Some(replica)) = (&shard.replication, replica) {
        replication.confirm_leadership(replica.group).await.map_err(|code| match code {
            errors::NOT_LEADER_OR_FOLLOWER => errors::NOT_COORDINATOR,
            _ => errors::COORDINATOR_NOT_AVAILABLE,
        })?;
        // Loaded in the term just confirmed.
        check_coordinator(shard, partition)?;
    }
    Ok(())
}

/// The `__consumer_offsets` partition of a group, on its coordinator shard.
pub fn partition_of(shard: &Shard, group: &str) -> Option<i32> {
    internal_partition_of(shard, OFFSETS_TOPIC, group)
}

/// The partition of internal topic `topic` that `key` belongs to.
pub fn internal_partition_of(shard: &Shard, topic: &str, key: &str) -> Option<i32> {
    let meta = shard.meta();
    let t = meta.topics.get(topic)?;
    Some(offsets_partition(key, t.partitions.len() as i32))
}

/// How long FindCoordinator waits for a key's partition to have a leader (a topic
/// just created, an election under way) before answering COORDINATOR_NOT_AVAILABLE.
const LEADER_WAIT: Duration = Duration::from_millis(1000);
const LEADER_POLL: Duration = Duration::from_millis(20);

/// The node (id, host, port) coordinating `key` of internal topic `topic`, creating
/// the topic if needed: this node on a single node, the leader of the key's
/// partition in a cluster.
pub async fn coordinator_node(shard: &Rc<Shard>, topic: &'static str, key: &str) -> Result<(i32, String, i32), i16> {
    internal_owner(shard, topic, key).await?;
    if shard.replication.is_none() {
        let (host, port) = shard.config.advertised();
        return Ok((shard.config.node_id, host, port));
    }
    let deadline = std::time::Instant::now() + LEADER_WAIT;
    loop {
        if let Some(found) = leader_of(shard, topic, key) {
            return Ok(found);
        }
        if std::time::Instant::now() >= deadline {
            return Err(errors::COORDINATOR_NOT_AVAILABLE);
        }
        glommio::timer::sleep(LEADER_POLL).await;
    }
}

/// The registered broker leading `key`'s partition of `topic`, as this node last
/// learned it. A topic created unreplicated by an earlier version keeps a copy on
/// every node; its keys stay spread over the brokers by a hash of the key.
fn leader_of(shard: &Shard, topic: &str, key: &str) -> Option<(i32, String, i32)> {
    let meta = shard.meta();
    let t = meta.topics.get(topic)?;
    let partition = offsets_partition(key, t.partitions.len() as i32);
    let leader = match nodes::partition_view(shard, t, partition) {
        Some(view) => view.leader,
        None => {
            let brokers: Vec<i32> = meta.brokers.keys().copied().collect();
            *brokers.get(crc32c::crc32c(key.as_bytes()) as usize % brokers.len().max(1))?
        }
    };
    let broker = meta.brokers.get(&leader)?;
    Some((leader, broker.host.clone(), broker.port))
}

/// True when the cluster has as many registered brokers as `__consumer_offsets`
/// wants replicas (min(3, configured nodes)): Kafka too refuses to create the topic
/// with fewer live brokers than `offsets.topic.replication.factor`, rather than
/// create it with fewer replicas for good.
pub fn offsets_replicas_registered(shard: &Shard) -> bool {
    let nodes = shard.config.cluster_peers().map_or(1, |p| p.len().max(1));
    shard.meta().brokers.len() >= nodes.min(3)
}

/// Appends records to a partition of an internal topic as one batch, transactional
/// when `producer` names a producer (TxnOffsetCommit), and waits until they are
/// durable; returns the offset of the first.
pub async fn append_internal(
    shard: &Rc<Shard>,
    topic: &str,
    partition: i32,
    producer: Producer,
    records: &[KeyValue],
) -> Result<i64, i16> {
    assert!(!records.is_empty(), "an append carries at least one record");
    let p = shard.partition(topic, partition).ok_or(errors::NOT_COORDINATOR)?;
    let refs: Vec<KeyValueRef> = records.iter().map(|(k, v)| (Some(&k[..]), v.as_deref())).collect();
    let attributes = if producer.id >= 0 { ATTR_TRANSACTIONAL } else { 0 };
    let batch = build_batch_as(0, now_ms(), producer, attributes, &refs);
    let outcome = p.produce(shard, batch, -1, APPEND_TIMEOUT, None).await;
    match outcome.error {
        errors::NONE => Ok(outcome.base_offset),
        errors::MESSAGE_TOO_LARGE | errors::RECORD_LIST_TOO_LARGE => Err(errors::INVALID_COMMIT_OFFSET_SIZE),
        errors::NOT_LEADER_OR_FOLLOWER => Err(errors::NOT_COORDINATOR),
        code => {
            tracing::warn!(topic, partition, code, message = ?outcome.message, "internal topic append failed");
            Err(errors::COORDINATOR_NOT_AVAILABLE)
        }
    }
}

/// Calls `f` with every record of partition `p` from its log start to its high
/// watermark, in order (the replay of an internal topic).
pub async fn for_each_record(p: &Partition, mut f: impl FnMut(&kafka_protocol::records::Record)) -> Result<(), String> {
    let (mut offset, end) = {
        let l = p.log.borrow();
        (l.log_start_offset, l.high_watermark())
    };
    while offset < end {
        let read = log::read(&p.log, offset, REPLAY_READ_BYTES, end).await.map_err(|e| e.to_string())?;
        if read.batches.is_empty() {
            break;
        }
        for batch in read.batches {
            let header = keel_protocol::batch::BatchHeader::parse(&batch).map_err(|e| e.to_string())?;
            let mut buf = batch.clone();
            let set = RecordBatchDecoder::decode(&mut buf).map_err(|e| e.to_string())?;
            for r in set.records.iter().filter(|r| r.offset >= offset) {
                f(r);
            }
            offset = header.last_offset() + 1;
        }
        glommio::yield_if_needed().await;
    }
    Ok(())
}
