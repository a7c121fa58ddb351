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

use std::rc::Rc;

use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use keel_storage::retention;

use super::answer_partitions;
use crate::errors;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (0, 2);

/// Topics clients may not delete records from.
const INTERNAL_TOPICS: &[&str] = &["__consumer_offsets", "__transaction_state"];

/// (error, low watermark)
type Answer = (i16, i64);

pub async fn handle(shard: &Rc<Shard>, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let items = req
        .topics
        .iter()
        .flat_map(|t| {
            let topic = t.name.0.as_str();
            t.partitions.iter().map(move |p| {
                if INTERNAL_TOPICS.contains(&topic) {
                    Err((errors::INVALID_TOPIC_EXCEPTION, -1))
                } else {
                    Ok((topic.to_string(), p.partition_index, p.offset))
                }
            })
        })
        .collect();
    let unknown = (errors::UNKNOWN_TOPIC_OR_PARTITION, -1);
    let answers = answer_partitions(shard, items, unknown, |s, topic, partition, offset| async move {
        delete_one(&s, &topic, partition, offset).await
    })
    .await;
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

async fn delete_one(shard: &Shard, topic: &str, partition: i32, offset: i64) -> Answer {
    let Some(p) = shard.partition(topic, partition) else {
        return (errors::NOT_LEADER_OR_FOLLOWER, -1);
    };
    if p.unavailable(shard).is_some() {
        return (errors::KAFKA_STORAGE_ERROR, -1);
    }
    if let Some(code) = p.not_leader(shard) {
        return (code, -1);
    }
    // A replicated log is trimmed only once snapshots exist (see `replication::shell`).
    if !p.settings().cleanup_delete || p.replica.is_some() {
        return (errors::POLICY_VIOLATION, -1);
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
