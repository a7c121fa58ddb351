//! ListOffsets: earliest, latest, max timestamp, and by timestamp, answered by the
//! partitions' owner shards.

use std::rc::Rc;

use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use keel_storage::log;

use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::dispatch::Serve;
use crate::shard::fanout::{answer_each, answer_partitions};
use crate::shard::partition::{Partition, LEADER_EPOCH};
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (1, 10);

pub const LATEST: i64 = -1;
pub const EARLIEST: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;
pub const EARLIEST_LOCAL: i64 = -4;
pub const LATEST_TIERED: i64 = -5;

/// (error, timestamp, offset, leader epoch)
pub type Answer = (i16, i64, i64, i32);

/// On an owner shard: the offsets of its partitions by timestamp (timestamp, the
/// client's leader epoch, read_committed), one after another.
pub struct LookupOffsets {
    items: Vec<(String, i32, (i64, i32, bool))>,
}

impl Serve for LookupOffsets {
    async fn serve(self, shard: Rc<Shard>) -> Vec<Answer> {
        answer_each(&shard, self.items, |s, topic, partition, (ts, current, committed)| async move {
            lookup(&s, &topic, partition, ts, current, committed).await
        })
        .await
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let committed = req.isolation_level == super::fetch::READ_COMMITTED;
    // As Kafka: DESCRIBE on each topic.
    let items = req
        .topics
        .iter()
        .flat_map(|t| {
            let described =
                super::authorized(shard, ctx, acl::operation::DESCRIBE, acl::resource::TOPIC, t.name.0.as_str());
            t.partitions.iter().map(move |p| {
                if !described {
                    return Err((errors::TOPIC_AUTHORIZATION_FAILED, -1, -1, LEADER_EPOCH));
                }
                Ok((t.name.0.to_string(), p.partition_index, (p.timestamp, p.current_leader_epoch, committed)))
            })
        })
        .collect();
    let unknown = (errors::UNKNOWN_TOPIC_OR_PARTITION, -1, -1, LEADER_EPOCH);
    let answers = answer_partitions(shard, items, unknown, |items| LookupOffsets { items }).await;
    let mut answers = answers.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let (error, timestamp, offset, epoch) = answers.next().expect("an answer per partition");
                    let mut r = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error)
                        .with_timestamp(timestamp)
                        .with_offset(offset);
                    if version >= 4 && error == errors::NONE && offset >= 0 {
                        r.leader_epoch = epoch;
                    }
                    r
                })
                .collect();
            ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

async fn lookup(
    shard: &Shard,
    topic: &str,
    partition: i32,
    timestamp: i64,
    current_epoch: i32,
    committed: bool,
) -> Answer {
    let Some(p) = shard.partition(topic, partition) else {
        return (errors::NOT_LEADER_OR_FOLLOWER, -1, -1, LEADER_EPOCH);
    };
    let epoch = p.leader_epoch();
    let (error, timestamp, offset) = lookup_in(shard, &p, timestamp, current_epoch, committed).await;
    (error, timestamp, offset, epoch)
}

/// `committed`: the isolation level is `read_committed`, whose latest offset is the
/// last stable offset.
async fn lookup_in(
    shard: &Shard,
    p: &Partition,
    timestamp: i64,
    current_epoch: i32,
    committed: bool,
) -> (i16, i64, i64) {
    if p.unavailable(shard).is_some() {
        return (errors::KAFKA_STORAGE_ERROR, -1, -1);
    }
    if let Some(code) = p.not_leader(shard).or_else(|| p.check_leader_epoch(current_epoch)) {
        return (code, -1, -1);
    }
    let (start, hw) = {
        let l = p.log.borrow();
        (l.log_start_offset, l.high_watermark())
    };
    let found = match timestamp {
        LATEST if committed => return (errors::NONE, -1, p.last_stable_offset()),
        LATEST => return (errors::NONE, -1, hw),
        EARLIEST | EARLIEST_LOCAL => return (errors::NONE, -1, start),
        LATEST_TIERED => return (errors::NONE, -1, start - 1),
        MAX_TIMESTAMP => log::offset_of_max_timestamp(&p.log).await,
        ts if ts >= 0 => log::offset_for_timestamp(&p.log, ts).await,
        _ => return (errors::INVALID_REQUEST, -1, -1),
    };
    match found {
        Ok(Some((offset, ts))) => (errors::NONE, ts, offset),
        Ok(None) => (errors::NONE, -1, -1),
        Err(e) => {
            p.report(shard, &e);
            (errors::storage_error_code(&e), -1, -1)
        }
    }
}
