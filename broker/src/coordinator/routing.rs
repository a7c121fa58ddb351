//! Finding a group's coordinator shard, creating `__consumer_offsets` on first use, and
//! forwarding a group operation to that shard.

use std::collections::BTreeMap;
use std::future::Future;
use std::rc::Rc;

use super::{offsets_partition, OFFSETS_TOPIC};
use crate::cluster::controller::{self, TopicSpec};
use crate::errors;
use crate::replication::cluster::{self, ControlRequest};
use crate::shard::Shard;

/// Kafka's `offsets.topic.segment.bytes`: small segments so compaction has work to do.
const OFFSETS_SEGMENT_BYTES: &str = "104857600";

/// The coordinator shard of `group` and its `__consumer_offsets` partition, creating
/// the topic (through the controller) if no group has been used yet.
pub async fn coordinator_of(shard: &Rc<Shard>, group: &str) -> Result<(usize, i32), i16> {
    if !shard.meta().topics.contains_key(OFFSETS_TOPIC) {
        create_offsets_topic(shard).await?;
    }
    let meta = shard.meta();
    let topic = meta.topics.get(OFFSETS_TOPIC).ok_or(errors::COORDINATOR_NOT_AVAILABLE)?;
    let partition = offsets_partition(group, topic.partitions.len() as i32);
    let owner = meta.owner(OFFSETS_TOPIC, partition).ok_or(errors::COORDINATOR_NOT_AVAILABLE)?;
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

async fn create_offsets_topic(shard: &Rc<Shard>) -> Result<(), i16> {
    if shard.replication.is_some() {
        let request = ControlRequest::CreateTopics { names: vec![OFFSETS_TOPIC.to_string()] };
        let done = |m: &crate::cluster::metadata::Metadata| m.topics.contains_key(OFFSETS_TOPIC);
        return match cluster::ask_until(shard, request, std::time::Duration::from_secs(5), done).await {
            true => Ok(()),
            false => Err(errors::COORDINATOR_NOT_AVAILABLE),
        };
    }
    let spec = offsets_topic_spec(shard.config.offsets_topic_partitions);
    let created =
        shard.submit_to(0, move |s| async move { controller::create_topics(s, vec![spec], false).await }).await;
    match created.into_iter().next() {
        Some(Ok(_)) => {
            tracing::info!("created {OFFSETS_TOPIC}");
            Ok(())
        }
        // Another shard created it first; its metadata reaches this shard shortly.
        Some(Err((code, _))) if code == errors::TOPIC_ALREADY_EXISTS => {
            if shard.meta().topics.contains_key(OFFSETS_TOPIC) {
                Ok(())
            } else {
                Err(errors::COORDINATOR_NOT_AVAILABLE)
            }
        }
        Some(Err((code, message))) => {
            tracing::error!(code, %message, "cannot create {OFFSETS_TOPIC}");
            Err(errors::COORDINATOR_NOT_AVAILABLE)
        }
        None => Err(errors::COORDINATOR_NOT_AVAILABLE),
    }
}

/// Runs `f` on the coordinator shard of `group` with its `__consumer_offsets` partition.
pub async fn on_coordinator<T, F, Fut>(shard: &Rc<Shard>, group: &str, f: F) -> Result<T, i16>
where
    T: Send + 'static,
    F: FnOnce(Rc<Shard>, i32) -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
{
    let (owner, partition) = coordinator_of(shard, group).await?;
    Ok(shard.submit_to(owner, move |s| f(s, partition)).await)
}

/// Checked on the coordinator shard before any group operation: the partition is
/// ours and its state is loaded.
pub fn check_coordinator(shard: &Shard, partition: i32) -> Result<(), i16> {
    if shard.partition(OFFSETS_TOPIC, partition).is_none() {
        return Err(errors::NOT_COORDINATOR);
    }
    if !shard.coordinator.borrow().loaded {
        return Err(errors::COORDINATOR_LOAD_IN_PROGRESS);
    }
    Ok(())
}

/// The `__consumer_offsets` partition of a group, on its coordinator shard.
pub fn partition_of(shard: &Shard, group: &str) -> Option<i32> {
    let meta = shard.meta();
    let topic = meta.topics.get(OFFSETS_TOPIC)?;
    Some(offsets_partition(group, topic.partitions.len() as i32))
}
