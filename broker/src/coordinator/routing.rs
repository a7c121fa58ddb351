//! Finding a group's coordinator (node and shard), creating `__consumer_offsets` on
//! first use, and forwarding a group operation to that shard.
//!
//! **In a cluster the coordinator is a Raft leader.** `__consumer_offsets` is a
//! replicated topic like any other (replication factor min(3, nodes)), and a group's
//! coordinator is the leader of the group's partition, so it moves when leadership
//! does and the group's records, written through Raft, move with it. Every node names
//! the same coordinator from the leaders it learns (`cluster::partition_view`); a node
//! that does not lead the partition answers NOT_COORDINATOR, and the leader answers
//! COORDINATOR_LOAD_IN_PROGRESS until it has read the partition's groups (`shell`).

use std::collections::BTreeMap;
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

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

/// The `__consumer_offsets` partition of a group, on its coordinator shard.
pub fn partition_of(shard: &Shard, group: &str) -> Option<i32> {
    let meta = shard.meta();
    let topic = meta.topics.get(OFFSETS_TOPIC)?;
    Some(offsets_partition(group, topic.partitions.len() as i32))
}

/// How long FindCoordinator waits for a group's partition to have a leader (a topic
/// just created, an election under way) before answering COORDINATOR_NOT_AVAILABLE.
const LEADER_WAIT: Duration = Duration::from_secs(1);
const LEADER_POLL: Duration = Duration::from_millis(20);

/// The node (id, host, port) coordinating `group`, creating `__consumer_offsets` if
/// needed: this node on a single node, the leader of the group's partition in a
/// cluster.
pub async fn coordinator_node(shard: &Rc<Shard>, group: &str) -> Result<(i32, String, i32), i16> {
    coordinator_of(shard, group).await?;
    if shard.replication.is_none() {
        let (host, port) = shard.config.advertised();
        return Ok((shard.config.node_id, host, port));
    }
    let deadline = std::time::Instant::now() + LEADER_WAIT;
    loop {
        if let Some(found) = leader_of_group(shard, group) {
            return Ok(found);
        }
        if std::time::Instant::now() >= deadline {
            return Err(errors::COORDINATOR_NOT_AVAILABLE);
        }
        glommio::timer::sleep(LEADER_POLL).await;
    }
}

/// The registered broker leading `group`'s `__consumer_offsets` partition, as this
/// node last learned it. A topic created unreplicated by an earlier version keeps a
/// copy on every node; its groups stay spread over the brokers by a hash of the key.
fn leader_of_group(shard: &Shard, group: &str) -> Option<(i32, String, i32)> {
    let meta = shard.meta();
    let topic = meta.topics.get(OFFSETS_TOPIC)?;
    let partition = offsets_partition(group, topic.partitions.len() as i32);
    let leader = match cluster::partition_view(shard, topic, partition) {
        Some(view) => view.leader,
        None => {
            let brokers: Vec<i32> = meta.brokers.keys().copied().collect();
            *brokers.get(crc32c::crc32c(group.as_bytes()) as usize % brokers.len().max(1))?
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
