//! DeleteRecords (v0-2): moves each partition's log start offset forward, as Kafka's
//! `kafka-delete-records.sh` and `Admin.deleteRecords` ask. The owner shard persists
//! the new start offset before answering; fetches below it answer
//! OFFSET_OUT_OF_RANGE at once, ListOffsets earliest returns it, and the segments
//! wholly below it are deleted by the shard's housekeeping task (not on this path).
//!
//! Kafka's checks, in its order: internal topics refuse (INVALID_TOPIC_EXCEPTION),
//! topics without `delete` in `cleanup.policy` refuse (POLICY_VIOLATION), offsets
//! above the high watermark or negative (except -1, "up to the high watermark") are
//! OFFSET_OUT_OF_RANGE. A single node has no followers to wait for, so `timeout_ms`
//! is never reached.
//!
//! A replicated partition's leader commits the new log start offset through its Raft
//! log; every replica moves its log start there as the entry commits (whoever leads
//! next has it), and keeps the segments below until every replica has them (one that
//! is behind still reads them back from its leader). The leader answers once the entry
//! committed and its own log start moved, or REQUEST_TIMED_OUT after `timeout_ms`.

use std::rc::Rc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use keel_storage::retention;

use crate::errors;
use crate::replication::shell::Replication;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::dispatch::Serve;
use crate::shard::fanout::{answer_each, answer_partitions};
use crate::shard::partition::Partition;
use crate::shard::Shard;
use keel_raft::GroupId;

pub const VERSIONS: (i16, i16) = (0, 2);

/// Topics clients may not delete records from.
const INTERNAL_TOPICS: &[&str] = &["__consumer_offsets", "__transaction_state"];

/// (error, low watermark)
pub type Answer = (i16, i64);

/// On an owner shard: deletes the records of each of its partitions before an offset
/// (the offset, the request's timeout), one after another.
pub struct DeleteBefore {
    items: Vec<(String, i32, (i64, i32))>,
}

impl Serve for DeleteBefore {
    async fn serve(self, shard: Rc<Shard>) -> Vec<Answer> {
        answer_each(&shard, self.items, |s, topic, partition, (offset, timeout_ms)| async move {
            delete_one(&s, &topic, partition, offset, timeout_ms).await
        })
        .await
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let items = req
        .topics
        .iter()
        .flat_map(|t| {
            let topic = t.name.0.as_str();
            // As Kafka: DELETE on the topic, before anything else is checked.
            let deletable = super::authorized(shard, ctx, acl::operation::DELETE, acl::resource::TOPIC, topic);
            t.partitions.iter().map(move |p| {
                if !deletable {
                    Err((errors::TOPIC_AUTHORIZATION_FAILED, -1))
                } else if INTERNAL_TOPICS.contains(&topic) {
                    Err((errors::INVALID_TOPIC_EXCEPTION, -1))
                } else {
                    Ok((topic.to_string(), p.partition_index, (p.offset, req.timeout_ms)))
                }
            })
        })
        .collect();
    let unknown = (errors::UNKNOWN_TOPIC_OR_PARTITION, -1);
    let answers = answer_partitions(shard, items, unknown, |items| DeleteBefore { items }).await;
    let mut answers = answers.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let (error, low_watermark) = answers.next().expect("an answer per partition");
                    DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(low_watermark)
                        .with_error_code(error)
                })
                .collect();
            DeleteRecordsTopicResult::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}

async fn delete_one(shard: &Shard, topic: &str, partition: i32, offset: i64, timeout_ms: i32) -> Answer {
    let Some(p) = shard.partition(topic, partition) else {
        return (errors::NOT_LEADER_OR_FOLLOWER, -1);
    };
    if p.unavailable(shard).is_some() {
        return (errors::KAFKA_STORAGE_ERROR, -1);
    }
    if let Some(code) = p.not_leader(shard) {
        return (code, -1);
    }
    if !p.settings().cleanup_delete {
        return (errors::POLICY_VIOLATION, -1);
    }
    if let (Some(r), Some(replication)) = (&p.replica, &shard.replication) {
        return delete_replicated(&p, replication, r.group, offset, timeout_ms).await;
    }
    match retention::delete_records(&p.log, offset).await {
        Ok(low_watermark) => (errors::NONE, low_watermark),
        Err(e) => {
            if !matches!(e, keel_storage::StorageError::OffsetOutOfRange { .. }) {
                tracing::error!(topic, partition, error = %e, "DeleteRecords failed");
            }
            (errors::storage_error_code(&e), -1)
        }
    }
}

async fn delete_replicated(
    p: &Partition,
    replication: &Replication,
    group: GroupId,
    offset: i64,
    timeout_ms: i32,
) -> Answer {
    let (start, hw) = {
        let l = p.log.borrow();
        (l.log_start_offset, l.high_watermark())
    };
    let target = if offset == -1 { hw } else { offset };
    if target < 0 || target > hw {
        return (errors::OFFSET_OUT_OF_RANGE, -1);
    }
    if target <= start {
        return (errors::NONE, start);
    }
    if let Err((code, _)) = replication.propose_log_start(group, target) {
        return (code, -1);
    }
    let deadline = Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64);
    loop {
        let start = p.log.borrow().log_start_offset;
        if start >= target {
            return (errors::NONE, start);
        }
        if Instant::now() >= deadline {
            return (errors::REQUEST_TIMED_OUT, -1);
        }
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
}
