//! The controller, on shard 0: the only writer of cluster metadata. Each change is
//! validated, persisted atomically, installed on shard 0 at once (so the next change
//! starts from it) and then pushed to every shard, which opens or removes partitions.
//! A change is answered only after every shard has installed it.
//!
//! Changes run one at a time, from reading the current metadata to every shard having
//! installed the result: the save runs on glommio's blocking thread, and without that
//! turn a second change started during the save would start from the old metadata and
//! undo the first.

use std::collections::BTreeMap;
use std::rc::Rc;

use uuid::Uuid;

use std::time::{Duration, Instant};

use super::nodes::{self, ControlRequest};
use super::requests::{ApplyMetadata, CreateTopics};
use crate::errors;
use crate::metadata::configs;
use crate::metadata::live::Controller;
use crate::metadata::{BrokerMeta, Metadata, Rebuild, TopicMeta};
use crate::replication::shell::{Replication, METADATA_GROUP};
use crate::shard::Shard;
use crate::throttle::MutationQuota;

/// Producer ids reserved per metadata write.
const PRODUCER_ID_BLOCK: i64 = 1000;
pub const TOPIC_NAME_LEN_MAX: usize = 249;
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

/// A topic to create, as CreateTopics or auto-creation asks.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub name: String,
    /// -1 means the broker default.
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

pub type Failure = (i16, String);

/// Waits until no other metadata change runs; the change runs while this is held.
async fn take_turn(shard: &Shard) -> glommio::sync::Permit<'_> {
    controller(shard).turn.acquire_permit(1).await.expect("the controller's turn never closes")
}

fn controller(shard: &Shard) -> &Controller {
    assert_eq!(shard.id, 0, "controller work must run on shard 0");
    shard.controller.as_ref().expect("shard 0 has the controller")
}

pub fn validate_topic_name(name: &str) -> Result<(), Failure> {
    let valid = !name.is_empty()
        && name.len() <= TOPIC_NAME_LEN_MAX
        && name != "."
        && name != ".."
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-');
    if valid {
        Ok(())
    } else {
        Err((errors::INVALID_TOPIC_EXCEPTION, format!("Topic name \"{name}\" is illegal")))
    }
}

fn validate_spec(spec: &TopicSpec, meta: &Metadata, default_partitions: i32) -> Result<i32, Failure> {
    validate_topic_name(&spec.name)?;
    if meta.topics.contains_key(&spec.name) {
        return Err((errors::TOPIC_ALREADY_EXISTS, format!("Topic '{}' already exists.", spec.name)));
    }
    let partitions = if spec.partitions == -1 { default_partitions } else { spec.partitions };
    if !(1..=PARTITIONS_PER_TOPIC_MAX).contains(&partitions) {
        return Err((
            errors::INVALID_PARTITIONS,
            format!("Number of partitions must be in 1..={PARTITIONS_PER_TOPIC_MAX}."),
        ));
    }
    let brokers = meta.live_brokers().len().max(1);
    if spec.replication_factor != -1 && !(1..=brokers as i16).contains(&spec.replication_factor) {
        return Err((
            errors::INVALID_REPLICATION_FACTOR,
            format!("Unable to replicate the partition {} time(s): The target replication factor of {} cannot be reached because only {brokers} broker(s) are registered.", spec.replication_factor, spec.replication_factor),
        ));
    }
    for (k, v) in &spec.configs {
        configs::validate_topic_config(k, v).map_err(|m| (errors::INVALID_CONFIG, m))?;
    }
    Ok(partitions)
}

/// Creates the named topics with the broker defaults if auto-creation is on and the
/// names are valid; callable from any shard. Returns the metadata in force afterwards.
/// In a cluster a node that is not the controller asks it, and waits a little.
pub async fn auto_create_topics(shard: &Rc<Shard>, names: Vec<String>) -> Rc<Metadata> {
    let meta = shard.meta();
    let specs = auto_create_specs(&meta, names);
    if specs.is_empty() || !shard.config.auto_create_topics {
        return meta;
    }
    if shard.replication.is_some() {
        let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        let request = ControlRequest::CreateTopics { names: names.clone() };
        nodes::ask_until(shard, request, Duration::from_secs(3), |m| names.iter().all(|n| m.topics.contains_key(n)))
            .await;
        return shard.meta();
    }
    shard.call(0, CreateTopics { specs, validate_only: false, quota: None }).await;
    shard.meta()
}

/// Topics auto-creation would create for `names`: the missing ones with valid names.
pub fn auto_create_specs(meta: &Metadata, names: Vec<String>) -> Vec<TopicSpec> {
    names
        .into_iter()
        .filter(|n| !meta.topics.contains_key(n) && validate_topic_name(n).is_ok())
        .map(|name| TopicSpec { name, partitions: -1, replication_factor: -1, configs: BTreeMap::new() })
        .collect()
}

/// Creates topics; each result is the created topic or why not.
/// Creates topics; each valid one first takes its partitions from the client's
/// controller mutation quota, if any (so a validate-only request takes them too, as
/// on Kafka).
pub async fn create_topics(
    shard: Rc<Shard>,
    specs: Vec<TopicSpec>,
    validate_only: bool,
    quota: Option<&MutationQuota>,
) -> Vec<Result<TopicMeta, Failure>> {
    let _turn = take_turn(&shard).await;
    let mut meta = (*shard.meta()).clone();
    let mut results = Vec::with_capacity(specs.len());
    let mut changed = false;
    for spec in &specs {
        let valid = validate_spec(spec, &meta, shard.config.num_partitions);
        let r = valid.and_then(|n| quota.map_or(Ok(()), |q| q.take(&shard, n as usize)).map(|_| n)).map(|partitions| {
            let replication_factor = match spec.replication_factor {
                -1 if spec.name.starts_with("__") => meta.live_brokers().len().min(3),
                -1 => 1,
                rf => rf as usize,
            };
            let topic = TopicMeta {
                id: Uuid::new_v4(),
                partitions: meta.place(partitions as usize, shard.count),
                configs: spec.configs.clone(),
                replicas: place_replicas(&meta, &spec.name, 0, partitions as usize, replication_factor),
                reassigning: BTreeMap::new(),
                rebuilding: BTreeMap::new(),
            };
            if !validate_only {
                meta.topics.insert(spec.name.clone(), topic.clone());
                changed = true;
            }
            topic
        });
        results.push(r);
    }
    if changed {
        if let Err(e) = commit(&shard, meta).await {
            return specs.iter().map(|_| Err(e.clone())).collect();
        }
    }
    results
}

/// Deletes topics; each takes its partitions from the client's controller mutation
/// quota, if any.
pub async fn delete_topics(
    shard: Rc<Shard>,
    names: Vec<String>,
    quota: Option<&MutationQuota>,
) -> Vec<Result<Uuid, Failure>> {
    let _turn = take_turn(&shard).await;
    let mut meta = (*shard.meta()).clone();
    let results: Vec<_> = names
        .iter()
        .map(|n| {
            let topic = meta.topics.get(n).ok_or((
                errors::UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic-partition.".to_string(),
            ))?;
            if let Some(q) = quota {
                q.take(&shard, topic.partitions.len())?;
            }
            Ok(meta.topics.remove(n).expect("found above").id)
        })
        .collect();
    if results.iter().any(|r| r.is_ok()) {
        if let Err(e) = commit(&shard, meta).await {
            return names.iter().map(|_| Err(e.clone())).collect();
        }
    }
    results
}

/// Adds partitions to topics; each topic's new partitions are first taken from the
/// client's controller mutation quota, if any.
pub async fn create_partitions(
    shard: Rc<Shard>,
    changes: Vec<(String, i32)>,
    validate_only: bool,
    quota: Option<&MutationQuota>,
) -> Vec<Result<(), Failure>> {
    let _turn = take_turn(&shard).await;
    let mut meta = (*shard.meta()).clone();
    let mut results = Vec::new();
    let mut changed = false;
    for (name, count) in &changes {
        let r = match meta.topics.get(name) {
            None => Err((errors::UNKNOWN_TOPIC_OR_PARTITION, format!("The topic '{name}' does not exist."))),
            Some(t) if (*count as usize) <= t.partitions.len() => Err((
                errors::INVALID_PARTITIONS,
                format!(
                    "Topic currently has {} partitions, which is higher than the requested {count}.",
                    t.partitions.len()
                ),
            )),
            Some(_) if *count > PARTITIONS_PER_TOPIC_MAX => Err((
                errors::INVALID_PARTITIONS,
                format!("Number of partitions must be at most {PARTITIONS_PER_TOPIC_MAX}."),
            )),
            Some(t) => 'add: {
                let (first, added) = (t.partitions.len(), *count as usize - t.partitions.len());
                if let Some(Err(e)) = quota.map(|q| q.take(&shard, added)) {
                    break 'add Err(e);
                }
                let replicas = match t.replicas.first() {
                    Some(r) => place_replicas(&meta, name, first, added, r.len()),
                    None => Vec::new(),
                };
                let placed = meta.place(added, shard.count);
                if !validate_only {
                    let t = meta.topics.get_mut(name).expect("checked above");
                    t.partitions.extend(placed);
                    t.replicas.extend(replicas);
                    changed = true;
                }
                Ok(())
            }
        };
        results.push(r);
    }
    if changed {
        if let Err(e) = commit(&shard, meta).await {
            return changes.iter().map(|_| Err(e.clone())).collect();
        }
    }
    results
}

/// A config change on a topic ("" resource name = the broker).
#[derive(Debug, Clone)]
pub struct ConfigChange {
    pub topic: Option<String>,
    /// Replaces every explicit config (legacy AlterConfigs) instead of editing.
    pub replace: bool,
    /// (name, Some(value)) sets, (name, None) deletes.
    pub ops: Vec<(String, Option<String>)>,
}

pub async fn alter_configs(
    shard: Rc<Shard>,
    changes: Vec<ConfigChange>,
    validate_only: bool,
) -> Vec<Result<(), Failure>> {
    let _turn = take_turn(&shard).await;
    let mut meta = (*shard.meta()).clone();
    let mut results = Vec::new();
    for change in &changes {
        let r = apply_config_change(&mut meta, change);
        results.push(r);
    }
    if !validate_only && results.iter().any(|r| r.is_ok()) {
        if let Err(e) = commit(&shard, meta).await {
            return changes.iter().map(|_| Err(e.clone())).collect();
        }
    }
    results
}

/// Values are checked before the resource's existence, as Kafka's controller does: a
/// bad value for a missing topic is INVALID_CONFIG, not UNKNOWN_TOPIC_OR_PARTITION.
fn apply_config_change(meta: &mut Metadata, change: &ConfigChange) -> Result<(), Failure> {
    for (name, value) in &change.ops {
        let Some(v) = value else { continue };
        if change.topic.is_some() {
            configs::validate_topic_config(name, v).map_err(|m| (errors::INVALID_CONFIG, m))?;
        } else if let Some(d) = configs::broker_def(name) {
            configs::validate_topic_config(d.name, v).map_err(|m| (errors::INVALID_CONFIG, m))?;
        } else {
            return Err((errors::INVALID_CONFIG, format!("Cannot update broker config {name} dynamically")));
        }
    }
    if change.topic.is_none() {
        // An altered cluster-level default is the broker's own from now on.
        for (name, _) in &change.ops {
            meta.cluster_defaults.remove(name);
        }
        if change.replace {
            meta.cluster_defaults.clear();
        }
    }
    let target = match &change.topic {
        Some(name) => {
            &mut meta
                .topics
                .get_mut(name)
                .ok_or((errors::UNKNOWN_TOPIC_OR_PARTITION, format!("Topic {name} does not exist")))?
                .configs
        }
        None => &mut meta.broker_configs,
    };
    let mut next = if change.replace { BTreeMap::new() } else { target.clone() };
    for (name, value) in &change.ops {
        match value {
            Some(v) => {
                next.insert(name.clone(), v.clone());
            }
            None => {
                next.remove(name);
            }
        }
    }
    *target = next;
    Ok(())
}

/// Hands out one producer id, persisting a new block when the current one is used up.
/// In a cluster each node takes blocks from the controller, and hands out its own.
pub async fn allocate_producer_id(shard: Rc<Shard>) -> Result<i64, Failure> {
    let c = controller(&shard);
    if shard.replication.is_some() {
        let _turn = c.ids_turn.acquire_permit(1).await.expect("the ids turn never closes");
        if c.next_producer_id.get() >= c.producer_block_end.get() {
            let node = shard.config.node_id;
            let before = shard.meta().producer_id_blocks.get(&node).copied();
            let request = ControlRequest::ProducerIds { node };
            let granted = nodes::ask_until(&shard, request, Duration::from_secs(5), |m| {
                m.producer_id_blocks.get(&node).copied() != before
            })
            .await;
            let start = shard.meta().producer_id_blocks.get(&node).copied().filter(|_| granted);
            let start =
                start.ok_or((errors::COORDINATOR_NOT_AVAILABLE, "no producer ids from the controller".into()))?;
            c.next_producer_id.set(start);
            c.producer_block_end.set(start + PRODUCER_ID_BLOCK);
        }
        let id = c.next_producer_id.get();
        c.next_producer_id.set(id + 1);
        return Ok(id);
    }
    let _turn = take_turn(&shard).await;
    let id = c.next_producer_id.get();
    c.next_producer_id.set(id + 1);
    if id >= shard.meta().producer_id_block_end {
        let mut meta = (*shard.meta()).clone();
        meta.producer_id_block_end = id + PRODUCER_ID_BLOCK;
        commit(&shard, meta).await?;
    }
    Ok(id)
}

/// The controller grants `node` the next block of producer ids.
pub async fn grant_producer_ids(shard: &Rc<Shard>, node: i32) -> Result<(), Failure> {
    let _turn = take_turn(shard).await;
    let mut meta = (*shard.meta()).clone();
    meta.producer_id_blocks.insert(node, meta.producer_id_block_end);
    meta.producer_id_block_end += PRODUCER_ID_BLOCK;
    commit(shard, meta).await
}

/// The controller records a broker's address (idempotent; brokers repeat it as
/// their heartbeat), and unfences it.
pub async fn register_broker(shard: &Rc<Shard>, node: i32, broker: BrokerMeta) -> Result<(), Failure> {
    controller(shard).heard.borrow_mut().insert(node, Instant::now());
    let current = shard.meta();
    if current.brokers.get(&node) == Some(&broker) && !current.fenced.contains(&node) {
        add_metadata_learner(shard, node);
        return Ok(());
    }
    let _turn = take_turn(shard).await;
    let mut meta = (*shard.meta()).clone();
    if meta.fenced.remove(&node) {
        tracing::info!(node, "unfencing broker: heard from again");
    }
    if meta.brokers.get(&node) != Some(&broker) {
        tracing::info!(node, host = %broker.host, port = broker.port, "registering broker");
        meta.brokers.insert(node, broker);
    }
    commit(shard, meta).await?;
    add_metadata_learner(shard, node);
    Ok(())
}

/// A broker that is not a member of the metadata group (it joined the peers) becomes
/// a learner of it, so it receives the metadata log without voting on it. Every node
/// learns its address from its registration first (`Shard::apply_metadata`).
fn add_metadata_learner(shard: &Shard, node: i32) {
    use keel_raft::{ConfChangeSingle, ConfChangeType, ConfChangeV2};
    let Some(replication) = &shard.replication else { return };
    let Ok(id) = u64::try_from(node) else { return };
    let Some((conf, pending)) = replication.conf(METADATA_GROUP) else { return };
    if pending || conf.voters.contains(&id) || conf.learners.contains(&id) || conf.voters_outgoing.contains(&id) {
        return;
    }
    let add = ConfChangeSingle { change_type: ConfChangeType::AddLearnerNode, node_id: id, ..Default::default() };
    let change = ConfChangeV2 { changes: vec![add].into(), ..Default::default() };
    match replication.propose_conf_change(METADATA_GROUP, change) {
        Ok(()) => tracing::info!(node, "a broker joined: adding it to the metadata group as a learner"),
        Err((_, why)) => tracing::debug!(node, %why, "adding a metadata learner refused; trying again"),
    }
}

/// On the controller: fences the brokers not heard from within the session timeout
/// (each broker registers again every [`nodes::HEARTBEAT`]); nothing elsewhere. A
/// new controller gives every broker a whole timeout from when it took over.
pub async fn fence_silent_brokers(shard: &Rc<Shard>, controller_since: Instant) -> Result<(), Failure> {
    let timeout = Duration::from_millis(shard.config.broker_session_timeout_ms);
    let me = shard.config.node_id;
    let silent: Vec<i32> = {
        let heard = controller(shard).heard.borrow();
        let meta = shard.meta();
        meta.live_brokers()
            .into_iter()
            .filter(|id| *id != me)
            .filter(|id| heard.get(id).copied().unwrap_or(controller_since).max(controller_since).elapsed() > timeout)
            .collect()
    };
    if silent.is_empty() {
        return Ok(());
    }
    let _turn = take_turn(shard).await;
    let mut meta = (*shard.meta()).clone();
    tracing::warn!(brokers = ?silent, "fencing brokers not heard from within the session timeout");
    meta.fenced.extend(silent);
    commit(shard, meta).await
}

/// On a new controller: records the cluster-level defaults missing from the
/// metadata (`configs::add_cluster_defaults`), as Kafka's controller does when it
/// first activates.
pub async fn record_cluster_defaults(shard: &Rc<Shard>) -> Result<(), Failure> {
    let _turn = take_turn(shard).await;
    let mut meta = (*shard.meta()).clone();
    if !configs::add_cluster_defaults(&mut meta) {
        return Ok(());
    }
    commit(shard, meta).await
}

/// One partition's reassignment as AlterPartitionReassignments asks it: the replicas
/// to move to, or `None` to cancel the one under way.
#[derive(Debug, Clone)]
pub struct Reassignment {
    pub topic: String,
    pub partition: i32,
    pub replicas: Option<Vec<i32>>,
}

/// Starts or cancels reassignments (Kafka's AlterPartitionReassignments); each result
/// is in `wanted`'s order. A reassignment only records the target replicas: each
/// partition's leader then changes its group's members (`cluster::reassign`) and
/// asks the controller to [`complete_reassignment`]. Cancelling moves the target back
/// to the replicas the partition had, which its leader then restores.
pub async fn reassign(shard: Rc<Shard>, wanted: Vec<Reassignment>) -> Vec<Result<(), Failure>> {
    let _turn = take_turn(&shard).await;
    let mut meta = (*shard.meta()).clone();
    let node = shard.config.node_id;
    let results: Vec<Result<(), Failure>> = wanted
        .iter()
        .map(|w| {
            let unknown = || {
                (
                    errors::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("The partition {}-{} does not exist.", w.topic, w.partition),
                )
            };
            let invalid = |why: String| (errors::INVALID_REPLICA_ASSIGNMENT, why);
            let brokers: Vec<i32> =
                if meta.brokers.is_empty() { vec![node] } else { meta.brokers.keys().copied().collect() };
            let t = meta.topics.get_mut(&w.topic).ok_or_else(unknown)?;
            if w.partition < 0 || w.partition as usize >= t.partitions.len() {
                return Err(unknown());
            }
            let current = t.replicas_of(w.partition).map(<[i32]>::to_vec).unwrap_or_else(|| vec![node]);
            let Some(target) = &w.replicas else {
                if let Some(target) = t.reassigning.get_mut(&w.partition) {
                    *target = current;
                    return Ok(());
                }
                return Err((
                    errors::NO_REASSIGNMENT_IN_PROGRESS,
                    "No reassignment is in progress for this partition.".into(),
                ));
            };
            if target.is_empty() {
                return Err(invalid("The replica list must not be empty.".into()));
            }
            if target.iter().collect::<std::collections::BTreeSet<_>>().len() != target.len() {
                return Err(invalid(format!(
                    "Duplicate replica ids in partition reassignment replica list: {target:?}"
                )));
            }
            if let Some(unknown) = target.iter().find(|n| !brokers.contains(n)) {
                return Err(invalid(format!("The proposed assignment contains unknown broker {unknown}.")));
            }
            if t.replicas.is_empty() {
                // A single node's topics have one replica, this node.
                return if *target == current {
                    Ok(())
                } else {
                    Err(invalid("This broker is the only replica.".into()))
                };
            }
            if *target == current {
                t.reassigning.remove(&w.partition);
            } else {
                t.reassigning.insert(w.partition, target.clone());
            }
            Ok(())
        })
        .collect();
    if results.iter().any(|r| r.is_ok()) {
        if let Err(e) = commit(&shard, meta).await {
            return wanted.iter().map(|_| Err(e.clone())).collect();
        }
    }
    results
}

/// A partition's leader made its group's members the target replicas of its
/// reassignment: they become the partition's replicas (the target's order, so its
/// first is the preferred leader), and the nodes no longer named remove theirs.
pub async fn complete_reassignment(
    shard: &Rc<Shard>,
    topic: u128,
    partition: i32,
    members: Vec<i32>,
) -> Result<(), Failure> {
    let _turn = take_turn(shard).await;
    let mut meta = (*shard.meta()).clone();
    let Some(name) = meta.topic_name(&Uuid::from_u128(topic)).map(str::to_string) else { return Ok(()) };
    let Some(t) = meta.topics.get_mut(&name) else { return Ok(()) };
    let Some(target) = t.reassigning.get(&partition).cloned() else { return Ok(()) };
    let same = |a: &[i32], b: &[i32]| {
        let (mut a, mut b) = (a.to_vec(), b.to_vec());
        a.sort_unstable();
        b.sort_unstable();
        a == b
    };
    if !same(&target, &members) {
        return Ok(());
    }
    tracing::info!(topic = %name, partition, replicas = ?target, "reassignment complete");
    t.reassigning.remove(&partition);
    if let Some(back) = t.rebuilding.get(&partition).and_then(|r| r.add_back_after(&target)) {
        tracing::info!(topic = %name, partition, replicas = ?back,
            "the damaged replica is out of its group; adding it back empty");
        t.reassigning.insert(partition, back);
    } else {
        t.rebuilding.remove(&partition);
    }
    if let Some(r) = usize::try_from(partition).ok().and_then(|p| t.replicas.get_mut(p)) {
        *r = target;
    }
    commit(shard, meta).await
}

/// A node found its replica of a partition damaged: the partition's leader takes it
/// out of the group with a reassignment to the other replicas, and
/// [`complete_reassignment`] then adds it back, empty, with a second one that
/// restores the replicas in their order (`cluster::rebuild`); the rebuild is
/// recorded until then. Nothing happens while another reassignment or rebuild of the
/// partition is under way, or when the node is its only replica; the node asks again
/// while its replica stays damaged.
pub async fn rebuild_replica(shard: &Rc<Shard>, topic: u128, partition: i32, node: i32) -> Result<(), Failure> {
    let _turn = take_turn(shard).await;
    let mut meta = (*shard.meta()).clone();
    let id = meta.version;
    let Some(name) = meta.topic_name(&Uuid::from_u128(topic)).map(str::to_string) else { return Ok(()) };
    let Some(t) = meta.topics.get_mut(&name) else { return Ok(()) };
    let Some(replicas) = t.replicas_of(partition).map(<[i32]>::to_vec) else { return Ok(()) };
    if !replicas.contains(&node) || replicas.len() < 2 || t.reassigning.contains_key(&partition) {
        return Ok(());
    }
    let others: Vec<i32> = replicas.iter().copied().filter(|n| *n != node).collect();
    tracing::warn!(topic = %name, partition, node, "rebuilding a damaged replica: taking it out of its group first");
    t.rebuilding.insert(partition, Rebuild { node, replicas, id });
    t.reassigning.insert(partition, others);
    commit(shard, meta).await
}

/// Replicas of partitions `first..first + count` of `topic`: `factor` consecutive
/// registered brokers each, the start moving one broker per partition (leaders spread
/// over nodes) from a point the topic's name picks (topics spread too). Empty on a
/// single node.
fn place_replicas(meta: &Metadata, topic: &str, first: usize, count: usize, factor: usize) -> Vec<Vec<i32>> {
    let brokers = meta.live_brokers();
    if brokers.is_empty() {
        return Vec::new();
    }
    let factor = factor.clamp(1, brokers.len());
    let offset = crc32c::crc32c(topic.as_bytes()) as usize;
    (first..first + count).map(|p| (0..factor).map(|r| brokers[(offset + p + r) % brokers.len()]).collect()).collect()
}

/// Makes `meta` the next metadata version: on a single node saved and pushed to every
/// shard; in a cluster proposed to the metadata group, and installed by every node
/// once committed. Returns once this node installed it.
async fn commit(shard: &Rc<Shard>, mut meta: Metadata) -> Result<(), Failure> {
    let c = controller(shard);
    if let Some(replication) = &shard.replication {
        return commit_replicated(shard, replication, meta).await;
    }
    meta.version = shard.meta().version + 1;
    meta.reindex();
    c.store.save_async(&meta).await.map_err(|e| (errors::UNKNOWN_SERVER_ERROR, e))?;
    *shard.metadata.borrow_mut() = Rc::new(meta.clone());
    shard.call_all(ApplyMetadata(meta)).await;
    Ok(())
}

async fn commit_replicated(shard: &Rc<Shard>, replication: &Replication, mut meta: Metadata) -> Result<(), Failure> {
    let not_controller = || (errors::NOT_CONTROLLER, "This node is not the controller.".to_string());
    let timeout = Duration::from_secs(10);
    let deadline = std::time::Instant::now() + timeout;
    // A new controller first installs everything its predecessors committed, so the
    // change starts from the latest metadata.
    while !nodes::caught_up(shard) {
        if !replication.leads(METADATA_GROUP) {
            return Err(not_controller());
        }
        if std::time::Instant::now() >= deadline {
            return Err((errors::REQUEST_TIMED_OUT, "the controller is still catching up".into()));
        }
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    meta.version = shard.meta().version + 1;
    meta.reindex();
    let version = meta.version;
    let (header, term) =
        replication.propose(METADATA_GROUP, &nodes::encode_metadata(&meta), None).map_err(|(code, m)| {
            if code == errors::NOT_LEADER_OR_FOLLOWER {
                not_controller()
            } else {
                (code, m)
            }
        })?;
    replication.wait_committed(METADATA_GROUP, term, header.last_offset(), timeout).await.map_err(|code| {
        if code == errors::NOT_LEADER_OR_FOLLOWER {
            not_controller()
        } else {
            (code, "the metadata change was not committed".to_string())
        }
    })?;
    // Installed on every shard of this node before it is answered, as on a single node.
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    if !nodes::await_installed(shard, version, left).await {
        return Err((errors::REQUEST_TIMED_OUT, "the metadata change was not installed in time".into()));
    }
    Ok(())
}

/// One SCRAM credential change of AlterUserScramCredentials: `Some` sets the
/// mechanism's credential of the user, `None` deletes it.
#[derive(Debug, Clone)]
pub struct ScramChange {
    pub user: String,
    pub mechanism: crate::security::scram::Mechanism,
    pub credential: Option<crate::security::scram::Credential>,
}

/// Applies SCRAM credential changes to the metadata in one commit (replicated with
/// it in a cluster); a deletion of a credential that does not exist is refused.
pub async fn alter_scram_credentials(shard: Rc<Shard>, changes: Vec<ScramChange>) -> Vec<Result<(), Failure>> {
    let _turn = take_turn(&shard).await;
    let mut meta = (*shard.meta()).clone();
    let mut results = Vec::new();
    for change in &changes {
        let name = change.mechanism.name().to_string();
        let result = match &change.credential {
            Some(c) => {
                meta.scram_users.entry(change.user.clone()).or_default().insert(name, c.clone());
                Ok(())
            }
            None => match meta.scram_users.get_mut(&change.user).and_then(|m| m.remove(&name).map(|_| m.is_empty())) {
                Some(now_empty) => {
                    if now_empty {
                        meta.scram_users.remove(&change.user);
                    }
                    Ok(())
                }
                None => Err((
                    errors::RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist".to_string(),
                )),
            },
        };
        results.push(result);
    }
    if results.iter().any(|r| r.is_ok()) {
        if let Err(e) = commit(&shard, meta).await {
            return changes.iter().map(|_| Err(e.clone())).collect();
        }
    }
    results
}

/// Adds ACL bindings in one commit (replicated with the metadata in a cluster). An
/// ACL that exists already is a success that changes nothing, as in KRaft.
pub async fn create_acls(shard: Rc<Shard>, acls: Vec<crate::security::acl::AclBinding>) -> Result<(), Failure> {
    let _turn = take_turn(&shard).await;
    let mut meta = (*shard.meta()).clone();
    let before = meta.acls.len();
    meta.acls.extend(acls);
    meta.acls.sort();
    meta.acls.dedup();
    if meta.acls.len() == before {
        return Ok(());
    }
    commit(&shard, meta).await
}

/// Removes every ACL each filter matches, in one commit; returns, per filter, the
/// ACLs it removed (an ACL two filters match is reported by both, as Kafka does).
pub async fn delete_acls(
    shard: Rc<Shard>,
    filters: Vec<crate::security::acl::AclFilter>,
) -> Result<Vec<Vec<crate::security::acl::AclBinding>>, Failure> {
    let _turn = take_turn(&shard).await;
    let mut meta = (*shard.meta()).clone();
    let matched: Vec<Vec<_>> =
        filters.iter().map(|f| meta.acls.iter().filter(|a| f.matches(a)).cloned().collect()).collect();
    if matched.iter().all(|m| m.is_empty()) {
        return Ok(matched);
    }
    meta.acls.retain(|a| !filters.iter().any(|f| f.matches(a)));
    commit(&shard, meta).await?;
    Ok(matched)
}

/// One entity's quota changes of AlterClientQuotas: a value sets a key, `None`
/// removes it.
pub type QuotaAlteration = (crate::quota::Entity, Vec<(String, Option<f64>)>);

/// Applies checked client quota changes in one commit (replicated with the metadata
/// in a cluster), as KRaft's controller applies them atomically; an entity left with
/// no quota is removed.
pub async fn alter_client_quotas(shard: Rc<Shard>, alterations: Vec<QuotaAlteration>) -> Result<(), Failure> {
    let _turn = take_turn(&shard).await;
    let mut meta = (*shard.meta()).clone();
    let before = meta.client_quotas.clone();
    for (entity, ops) in &alterations {
        let at = meta.client_quotas.binary_search_by(|(e, _)| e.cmp(entity));
        let mut values = at.map(|i| meta.client_quotas[i].1.clone()).unwrap_or_default();
        crate::quota::apply(&mut values, ops);
        match (at, values.is_empty()) {
            (Ok(i), true) => {
                meta.client_quotas.remove(i);
            }
            (Ok(i), false) => meta.client_quotas[i].1 = values,
            (Err(i), false) => meta.client_quotas.insert(i, (entity.clone(), values)),
            (Err(_), true) => {}
        }
    }
    if meta.client_quotas == before {
        return Ok(());
    }
    commit(&shard, meta).await
}
