//! OffsetCommit, OffsetFetch and OffsetDelete on the coordinator shard. A commit is
//! checked against the group (member, generation or member epoch), written to
//! `__consumer_offsets`, and becomes visible and acknowledged only once durable.

use std::rc::Rc;

use super::shell::KeyValue;
use crate::cluster::routing;
use crate::errors;
use crate::groups::classic::ClassicGroup;
use crate::groups::limits;
use crate::groups::offsets::Committed;
use crate::groups::records::{self, OffsetValue, RecordKey};
use crate::groups::Group;
use crate::shard::partition::now_ms;
use crate::shard::Shard;
use keel_protocol::batch::Producer;

/// Kafka's `offset.metadata.max.bytes`.
pub const OFFSET_METADATA_MAX_BYTES: usize = 4096;

#[derive(Debug, Clone)]
pub struct CommitPartition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

#[derive(Debug, Clone)]
pub struct CommitRequest {
    pub group_id: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    /// The classic generation, or the KIP-848 member epoch; -1 outside group management.
    pub generation_or_epoch: i32,
    pub api_version: i16,
    pub partitions: Vec<CommitPartition>,
    /// TxnOffsetCommit: the transactional producer (id, epoch) whose transaction the
    /// offsets belong to; they count only once its commit marker is written.
    pub producer: Option<(i64, i16)>,
    /// TxnOffsetCommit v5+ (transaction protocol version 2): the transactional id whose
    /// transaction the group's partition joins, once the commit is found valid.
    pub join_transaction: Option<String>,
}

/// One partition of an OffsetFetch answer.
#[derive(Debug, Clone)]
pub struct FetchedOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub error: i16,
}

#[derive(Debug, Clone)]
pub struct FetchRequest {
    pub group_id: String,
    /// KIP-848 members (OffsetFetch v9) identify themselves; checked when present.
    pub member_id: Option<String>,
    pub member_epoch: i32,
    /// `None`: every committed offset of the group.
    pub topics: Option<Vec<(String, Vec<i32>)>>,
    /// KIP-447: a partition with offsets pending in a transaction answers
    /// UNSTABLE_OFFSET_COMMIT instead of its last committed offset.
    pub require_stable: bool,
}

/// Commits; one error code per partition, in request order.
pub async fn commit(shard: Rc<Shard>, partition: i32, req: CommitRequest) -> Vec<i16> {
    let all = |code: i16| vec![code; req.partitions.len()];
    if let Err(code) = routing::check_coordinator(&shard, partition) {
        return all(code);
    }
    if req.group_id.is_empty() {
        return all(errors::INVALID_GROUP_ID);
    }
    if let Err(code) = validate_commit(&shard, &req) {
        return all(code);
    }
    let meta = shard.meta();
    let now = now_ms();
    let mut codes = Vec::with_capacity(req.partitions.len());
    let mut writes: Vec<KeyValue> = Vec::new();
    let mut written = Vec::new();
    for (i, p) in req.partitions.iter().enumerate() {
        let code = if meta.owner(&p.topic, p.partition).is_none() {
            errors::UNKNOWN_TOPIC_OR_PARTITION
        } else if p.metadata.as_ref().is_some_and(|m| m.len() > OFFSET_METADATA_MAX_BYTES) {
            errors::OFFSET_METADATA_TOO_LARGE
        } else {
            let key = RecordKey::Offset { group: req.group_id.clone(), topic: p.topic.clone(), partition: p.partition };
            let value = OffsetValue {
                offset: p.offset,
                leader_epoch: p.leader_epoch,
                metadata: p.metadata.clone().unwrap_or_default(),
                commit_timestamp_ms: now,
            };
            writes.push((records::encode_key(&key), Some(records::encode_offset(&value))));
            written.push((i, value));
            errors::NONE
        };
        codes.push(code);
    }
    if writes.is_empty() {
        return codes;
    }
    if let (Some(txn_id), Some((id, epoch))) = (&req.join_transaction, req.producer) {
        let tp = (crate::config::OFFSETS_TOPIC.to_string(), partition);
        if let Err(code) = crate::txn::shell::verify(&shard, txn_id, id, epoch, tp, true).await {
            return all(code);
        }
    }
    let producer = match req.producer {
        Some((id, epoch)) => Producer { id, epoch, base_sequence: -1 },
        None => Producer::NONE,
    };
    match routing::append_internal(&shard, crate::config::OFFSETS_TOPIC, partition, producer, &writes).await {
        // Committed, but this node stopped coordinating meanwhile: whoever loads the
        // partition next reads the commit from the log.
        Ok(_) if routing::check_coordinator(&shard, partition).is_err() => {}
        Ok(base) => {
            let mut c = shard.coordinator.borrow_mut();
            for (n, (i, v)) in written.into_iter().enumerate() {
                let p = &req.partitions[i];
                let record_offset = base + n as i64;
                let committed = Committed {
                    offset: v.offset,
                    leader_epoch: v.leader_epoch,
                    metadata: v.metadata,
                    commit_timestamp_ms: v.commit_timestamp_ms,
                    record_offset,
                };
                let tp = (p.topic.clone(), p.partition);
                match req.producer {
                    Some((id, _)) => c.txn_offsets.entry(id).or_default().push((req.group_id.clone(), tp, committed)),
                    None => c.offsets.apply(&req.group_id, tp, Some(committed), record_offset),
                }
            }
            if !c.groups.contains_key(&req.group_id) {
                // A commit outside group management creates a "simple" group.
                let g = ClassicGroup::new(&req.group_id, limits(&shard.config), now);
                c.groups.insert(req.group_id.clone(), Group::Classic(g));
            }
        }
        Err(code) => {
            for (i, _) in written {
                codes[i] = code;
            }
        }
    }
    codes
}

fn validate_commit(shard: &Shard, req: &CommitRequest) -> Result<(), i16> {
    let c = shard.coordinator.borrow();
    match c.groups.get(&req.group_id) {
        None if req.generation_or_epoch < 0 => Ok(()),
        None if req.api_version >= 9 && req.producer.is_none() => Err(errors::GROUP_ID_NOT_FOUND),
        None => Err(errors::ILLEGAL_GENERATION),
        Some(Group::Classic(g)) => {
            g.validate_offset_commit(&req.member_id, req.instance_id.as_deref(), req.generation_or_epoch)
        }
        Some(Group::Consumer(g)) => g.validate_offset_commit(&req.member_id, req.generation_or_epoch, req.api_version),
    }
}

/// Fetches the committed offsets of one group: a group-level error, or its partitions.
pub async fn fetch(shard: Rc<Shard>, partition: i32, req: FetchRequest) -> Result<Vec<FetchedOffset>, i16> {
    routing::check_coordinator_for_read(&shard, partition).await?;
    let c = shard.coordinator.borrow();
    if let (Some(member), Some(Group::Consumer(g))) = (&req.member_id, c.groups.get(&req.group_id)) {
        g.validate_offset_fetch(member, req.member_epoch)?;
    }
    let found = |topic: &str, p: i32| match c.offsets.get(&req.group_id, topic, p) {
        _ if req.require_stable && c.unstable(&req.group_id, topic, p) => FetchedOffset {
            topic: topic.to_string(),
            partition: p,
            offset: -1,
            leader_epoch: -1,
            metadata: None,
            error: errors::UNSTABLE_OFFSET_COMMIT,
        },
        Some(o) => FetchedOffset {
            topic: topic.to_string(),
            partition: p,
            offset: o.offset,
            leader_epoch: o.leader_epoch,
            metadata: Some(o.metadata.clone()),
            error: errors::NONE,
        },
        None => FetchedOffset {
            topic: topic.to_string(),
            partition: p,
            offset: -1,
            leader_epoch: -1,
            metadata: Some(String::new()),
            error: errors::NONE,
        },
    };
    Ok(match &req.topics {
        Some(topics) => {
            topics.iter().flat_map(|(t, parts)| parts.iter().map(|p| found(t, *p)).collect::<Vec<_>>()).collect()
        }
        // Offsets of topics deleted since are not shown (the timer deletes them).
        None => {
            let meta = shard.meta();
            c.offsets
                .group(&req.group_id)
                .filter(|((t, p), _)| meta.owner(t, *p).is_some())
                .map(|((t, p), _)| found(t, *p))
                .collect()
        }
    })
}

/// OffsetDelete: per-partition codes, or a group-level error.
pub async fn delete(
    shard: Rc<Shard>,
    partition: i32,
    group_id: String,
    partitions: Vec<(String, i32)>,
) -> Result<Vec<i16>, i16> {
    routing::check_coordinator(&shard, partition)?;
    let (codes, to_delete) = {
        let c = shard.coordinator.borrow();
        let subscribed = match c.groups.get(&group_id) {
            None => return Err(errors::GROUP_ID_NOT_FOUND),
            Some(Group::Classic(g)) if g.member_count() > 0 => g.subscribed_topics().unwrap_or_default(),
            Some(Group::Consumer(g)) if g.member_count() > 0 => g.subscribed_topics(),
            Some(_) => Default::default(),
        };
        let mut codes = Vec::new();
        let mut to_delete = Vec::new();
        for (topic, p) in &partitions {
            if subscribed.contains(topic) {
                codes.push(errors::GROUP_SUBSCRIBED_TO_TOPIC);
            } else {
                if c.offsets.get(&group_id, topic, *p).is_some() {
                    to_delete.push((topic.clone(), *p));
                }
                codes.push(errors::NONE);
            }
        }
        (codes, to_delete)
    };
    super::admin_ops::delete_offsets_and_group(&shard, partition, &group_id, to_delete, false).await?;
    Ok(codes)
}
