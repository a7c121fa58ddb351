//! A node's place in the cluster: the metadata group, broker registration, and the
//! leadership every shard shares for Metadata answers.
//!
//! **Metadata is a replicated log.** Shard 0 of every node hosts the metadata group
//! (KRaft's `__cluster_metadata`), whose voters are all the configured peers. Its
//! leader is the controller: it alone changes metadata, and each change is proposed
//! as one record holding the whole new metadata. When a record commits, every node
//! installs it as a single node installs a change: saved to `metadata.json`, pushed to
//! every shard, which opens the partitions placed on it and starts their groups.
//!
//! **Asking the controller.** A node that needs the controller to change something
//! (register itself, take a block of producer ids, auto-create a topic) sends it a
//! control message over the node-to-node transport and waits until the metadata it
//! installs shows the change; the request is repeated while it does not. Requests are
//! idempotent, so a lost or repeated one does no harm, and no reply channel is needed.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use keel_raft::{GroupId, NodeId};
use keel_storage::log::PartitionLog;
use keel_storage::Signal;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::balance::{self, LeaderMove};
use super::controller;
use super::node_requests::{AwaitInstalled, LearnLeaders, RefreshLeaders, SendControl, ServeControl};
use super::requests::ApplyMetadata;
use super::routing;
use crate::config::OFFSETS_TOPIC;
use crate::config::TRANSACTION_TOPIC;
use crate::metadata::live::{Installs, Leadership};
use crate::metadata::{BrokerMeta, Metadata, MetadataStore, TopicMeta};
use crate::outbound;
use crate::replication::shell::{Replication, METADATA_GROUP};
use crate::shard::partition::{journal_key, state_prefix};
use crate::shard::Shard;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId};

/// Directory of the metadata group's log in the first data directory.
pub const METADATA_LOG_DIR: &str = "__cluster_metadata-0";

/// What a node asks of the controller.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum ControlRequest {
    Register {
        node: i32,
        host: String,
        port: i32,
        /// Its node-to-node listener; `None` from a node of an earlier version.
        #[serde(default)]
        rpc: Option<String>,
        /// Its Kafka listeners' advertised addresses by name; empty from a node of an
        /// earlier version.
        #[serde(default)]
        listeners: BTreeMap<String, (String, i32)>,
    },
    ProducerIds {
        node: i32,
    },
    CreateTopics {
        names: Vec<String>,
    },
    /// Not for the controller: what a node knows of its groups' leaders, for every
    /// node's Metadata answers and for followers' memory (`Replication::compact`).
    Leaders {
        entries: Vec<LeaderView>,
        /// The sender's first word since it started: every node answers with all it
        /// knows, so a restarted node learns the leaders of groups it hosts no replica of.
        #[serde(default)]
        hello: bool,
    },
    /// Not for the controller: hand these groups' leadership over, if this node leads
    /// them and the target is ready (ElectLeaders and the admin API, `balance`).
    MoveLeaders {
        moves: Vec<LeaderMove>,
    },
    /// A partition's leader made its group's members the target of its reassignment
    /// (`reassign`).
    ReassignmentDone {
        topic: u128,
        partition: u32,
        members: Vec<i32>,
    },
    /// A node found its replica of a partition damaged (`rebuild`).
    Rebuild {
        topic: u128,
        partition: u32,
        node: i32,
    },
}

/// One group as a node tells it to every node: its leader, and what only the leader
/// knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaderView {
    pub topic: u128,
    pub partition: u32,
    /// The leader's node id, -1 while there is none.
    pub leader: i32,
    pub epoch: i32,
    /// The index every voter has; 0 unless the sender leads.
    pub everyone_has: u64,
    /// The in-sync voters (Kafka's ISR, `keel_raft::in_sync`); `None` unless the
    /// sender leads.
    pub in_sync: Option<Vec<i32>>,
    /// The voters the leader has not heard from lately (Kafka's offline replicas).
    pub offline: Vec<i32>,
}

impl LeaderView {
    pub fn group(&self) -> GroupId {
        GroupId { topic: self.topic, partition: self.partition }
    }
}

/// How often each shard tells every peer the leaders of all its groups. Changes are
/// told at once and a restarted peer asks for everything, so this only heals a lost
/// message: an idle cluster's gossip must not grow with its partition count.
const LEADERS_REFRESH: Duration = Duration::from_secs(30);
/// Entries what every voter has must move before it is told again by itself.
const EVERYONE_HAS_TELL_EVERY: u64 = 256;
/// How often each shard looks for changes in the in-sync voters of the groups it
/// leads, and tells every node of them.
const IN_SYNC_CHECK: Duration = Duration::from_millis(250);

/// A cluster's id is derived from its voters, so every node reports the same one
/// from its first start, before the metadata log has told it anything.
pub fn cluster_id(peers: &BTreeMap<NodeId, SocketAddr>) -> String {
    let text: String = peers.iter().map(|(id, addr)| format!("{id}@{addr},")).collect();
    let mut bytes = [0u8; 16];
    bytes[..4].copy_from_slice(&crc32c::crc32c(text.as_bytes()).to_be_bytes());
    bytes[4..8].copy_from_slice(&crc32c::crc32c_append(1, text.as_bytes()).to_be_bytes());
    bytes[8..12].copy_from_slice(&crc32c::crc32c_append(2, text.as_bytes()).to_be_bytes());
    bytes[12..].copy_from_slice(&crc32c::crc32c_append(3, text.as_bytes()).to_be_bytes());
    crate::metadata::short_id(Uuid::from_bytes(bytes))
}

/// Joins this shard to the cluster (nothing on a single node).
pub async fn start(shard: &Rc<Shard>, peers: &BTreeMap<NodeId, SocketAddr>) -> Result<(), String> {
    let Some(replication) = shard.replication.clone() else { return Ok(()) };
    share_leadership(shard, &replication);
    super::rebuild::take_out_when_damaged(shard, &replication);
    let addrs_of = Rc::downgrade(shard);
    replication.set_kafka_addrs(Box::new(move |node| {
        let shard = addrs_of.upgrade()?;
        let broker = shard.meta().brokers.get(&i32::try_from(node).ok()?)?.clone();
        Some(format!("{}:{}", broker.host, broker.port))
    }));
    balance::spawn(shard);
    super::reassign::spawn(shard);
    if shard.id != 0 {
        return Ok(());
    }
    let log = open_metadata_log(shard).await?;
    let installs = Rc::new(Installs {
        queue: RefCell::new(VecDeque::new()),
        signal: Signal::new(),
        busy: Default::default(),
        installed: std::cell::Cell::new(shard.meta().version),
        installed_signal: Signal::new(),
    });
    if let Some(c) = &shard.controller {
        *c.installs.borrow_mut() = Some(installs.clone());
    }
    let on_commit = {
        let installs = installs.clone();
        Box::new(move |batches: Vec<Bytes>| {
            for b in batches {
                match decode_metadata(&b) {
                    Ok(m) => installs.queue.borrow_mut().push_back(m),
                    Err(e) => tracing::error!(error = %e, "a committed metadata record cannot be read"),
                }
            }
            installs.signal.notify();
        })
    };
    // The peers vote on metadata; a node joining them starts with no members and
    // waits for the controller to add it as a learner (`controller::register_broker`).
    let me = shard.config.node_id as NodeId;
    let voters = if peers.contains_key(&me) { peers.keys().copied().collect() } else { Vec::new() };
    let hooks = crate::replication::shell::ReplicaHooks { on_commit: Some(on_commit), ..Default::default() };
    if let (_, Some(why)) = replication.add_group(METADATA_GROUP, log, voters, hooks).await? {
        return Err(format!("the metadata log is damaged: {why}"));
    }
    glommio::spawn_local(install_loop(shard.clone(), installs)).detach();
    let handler_shard = Rc::downgrade(shard);
    replication.transport().on_control(Rc::new(move |from, payload: Bytes| {
        let Some(shard) = handler_shard.upgrade() else { return };
        match serde_json::from_slice::<ControlRequest>(&payload) {
            Ok(ControlRequest::Leaders { entries, hello }) => {
                glommio::spawn_local(async move {
                    if hello {
                        shard.call_all(RefreshLeaders).await;
                    }
                    learn_leaders(&shard, Some(from), entries).await
                })
                .detach();
            }
            Ok(ControlRequest::MoveLeaders { moves }) => {
                glommio::spawn_local(async move { balance::serve_moves(&shard, moves).await }).detach();
            }
            Ok(request) => {
                glommio::spawn_local(async move { serve_control(shard, request).await }).detach();
            }
            Err(e) => tracing::warn!(from, error = %e, "unreadable control message"),
        }
    }));
    glommio::spawn_local(register_loop(shard.clone())).detach();
    glommio::spawn_local(fence_loop(shard.clone())).detach();
    Ok(())
}

/// Leadership of this shard's groups goes to every shard's `leaders` table here and
/// on every peer: at once when it changes, what else only a leader knows (in-sync
/// voters, what every voter has) when it changes (checked every `IN_SYNC_CHECK`), and
/// all of it when a peer starts and every `LEADERS_REFRESH`. A node that hosts no
/// replica of a partition learns its leader this way, so every node answers Metadata
/// alike.
fn share_leadership(shard: &Rc<Shard>, replication: &Rc<Replication>) {
    let me = Rc::downgrade(shard);
    let weak_replication = Rc::downgrade(replication);
    replication.on_leadership(Box::new(move |changes| {
        let (Some(shard), Some(replication)) = (me.upgrade(), weak_replication.upgrade()) else { return };
        let entries: Vec<LeaderView> =
            changes.into_iter().map(|(g, leader, epoch)| leader_view(&replication, g, leader, epoch, 0)).collect();
        tell_peers(&shard, entries.clone(), false);
        glommio::spawn_local(async move { learn_leaders(&shard, None, entries).await }).detach();
    }));
    let me = Rc::downgrade(shard);
    let weak_replication = Rc::downgrade(replication);
    glommio::spawn_local(async move {
        let mut told: BTreeMap<GroupId, LeaderView> = BTreeMap::new();
        let mut refreshed = std::time::Instant::now();
        let mut hello = true;
        loop {
            glommio::timer::sleep(IN_SYNC_CHECK).await;
            let (Some(shard), Some(replication)) = (me.upgrade(), weak_replication.upgrade()) else { return };
            let entries: Vec<LeaderView> = replication
                .views()
                .into_iter()
                .map(|(g, leader, epoch, has)| leader_view(&replication, g, leader, epoch, has))
                .collect();
            let changed: Vec<LeaderView> = entries
                .iter()
                .filter(|v| {
                    let group = v.group();
                    told.get(&group).is_none_or(|t| worth_telling(t, v))
                })
                .cloned()
                .collect();
            let present: std::collections::BTreeSet<GroupId> = entries.iter().map(|v| v.group()).collect();
            told.retain(|group, _| present.contains(group));
            for v in &changed {
                told.insert(v.group(), v.clone());
            }
            let refresh = shard.leaders_refresh_due.replace(false) || refreshed.elapsed() >= LEADERS_REFRESH;
            if hello || (refresh && !entries.is_empty()) {
                refreshed = std::time::Instant::now();
                tell_peers(&shard, entries, std::mem::take(&mut hello));
            } else if !changed.is_empty() {
                tell_peers(&shard, changed.clone(), false);
            }
            if !changed.is_empty() {
                learn_leaders(&shard, None, changed).await;
            }
        }
    })
    .detach();
}

/// Whether `now` differs from what was told (`then`) enough to tell it again: any
/// change but of what every voter has, which moves with every commit and is told once
/// it moved `EVERYONE_HAS_TELL_EVERY` entries (followers only trim by it).
fn worth_telling(then: &LeaderView, now: &LeaderView) -> bool {
    let same_but_has = LeaderView { everyone_has: then.everyone_has, ..now.clone() } == *then;
    !same_but_has
        || now.everyone_has >= then.everyone_has + EVERYONE_HAS_TELL_EVERY
        || now.everyone_has < then.everyone_has
}

/// What this shard tells of `group`: with its in-sync voters when it leads.
fn leader_view(
    replication: &Replication,
    group: GroupId,
    leader: Option<NodeId>,
    epoch: i32,
    everyone_has: u64,
) -> LeaderView {
    let in_sync = replication.in_sync(group);
    let ids = |nodes: &[NodeId]| nodes.iter().map(|n| *n as i32).collect::<Vec<i32>>();
    LeaderView {
        topic: group.topic,
        partition: group.partition,
        leader: leader.map(|n| n as i32).unwrap_or(-1),
        epoch,
        everyone_has,
        in_sync: in_sync.as_ref().map(|s| ids(&s.voters)),
        offline: in_sync.map(|s| ids(&s.offline)).unwrap_or_default(),
    }
}

fn tell_peers(shard: &Shard, entries: Vec<LeaderView>, hello: bool) {
    let Some(replication) = &shard.replication else { return };
    let payload = Bytes::from(serde_json::to_vec(&ControlRequest::Leaders { entries, hello }).expect("serializes"));
    for peer in replication.transport().peers() {
        replication.transport().send_control(peer, 0, payload.clone());
    }
}

/// Merges leaders told by this node's shards or by peer `from` into every shard's
/// table: a later epoch wins, and within one epoch a known leader beats none. The
/// in-sync voters a leader tells replace those known when they are of the epoch now
/// known (until the new leader of a later epoch tells its own, the last ones stay).
/// What a leader says every voter has reaches the shard hosting that group here.
async fn learn_leaders(shard: &Rc<Shard>, from: Option<NodeId>, entries: Vec<LeaderView>) {
    shard.call_all(LearnLeaders { from, entries }).await;
}

/// `learn_leaders` on one shard.
pub(super) fn merge_leaders(s: &Shard, from: Option<NodeId>, entries: Vec<LeaderView>) {
    let mut leaders = s.leaders.borrow_mut();
    for v in entries {
        let group = v.group();
        if let (Some(from), Some(replication)) = (from, &s.replication) {
            if v.leader >= 0 && v.leader as u64 == from && v.everyone_has > 0 {
                replication.everyone_has(group, v.everyone_has);
            }
        }
        let known = leaders.entry(group).or_insert(Leadership {
            leader: -1,
            epoch: v.epoch,
            in_sync: None,
            offline: Vec::new(),
        });
        if v.epoch > known.epoch || (v.epoch == known.epoch && known.leader < 0) {
            known.leader = v.leader;
            known.epoch = v.epoch;
        }
        if v.epoch == known.epoch && v.in_sync.is_some() {
            known.in_sync = v.in_sync;
            known.offline = v.offline;
        }
    }
}

async fn open_metadata_log(shard: &Rc<Shard>) -> Result<Rc<RefCell<PartitionLog>>, String> {
    let dir = shard.config.data_dir().join(METADATA_LOG_DIR);
    let keys = shard.kv.keys(&state_prefix(Uuid::nil(), 0));
    let journal = shard.flush.journal().expect("a shard's flush loop has a journal");
    let key = journal_key(Uuid::nil(), 0);
    let (log, _) = PartitionLog::open_journaled(&dir, shard.log_config.clone(), Some(keys), journal, key, |_| {})
        .await
        .map_err(|e| format!("opening the metadata log: {e}"))?;
    let log = Rc::new(RefCell::new(log));
    shard.cache.adopt(&log);
    shard.flush.register(&log);
    Ok(log)
}

/// Waits until every shard of this node has installed metadata `version` or a later
/// one, for at most `timeout`; false when it has not by then. On shard 0 (which
/// installs) of a cluster node; elsewhere, and on a single node (whose changes are
/// installed before they are answered), there is nothing to wait for.
pub async fn await_installed(shard: &Shard, version: u64, timeout: Duration) -> bool {
    let Some(installs) = shard.controller.as_ref().and_then(|c| c.installs.borrow().clone()) else { return true };
    let deadline = std::time::Instant::now() + timeout;
    while installs.installed.get() < version {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        futures_lite::future::or(installs.installed_signal.wait(), glommio::timer::sleep(left)).await;
    }
    true
}

/// True when this node installed everything committed to the metadata log it holds:
/// a new controller waits for it before it changes anything.
pub fn caught_up(shard: &Shard) -> bool {
    let Some(r) = shard.replication.as_ref().and_then(|r| r.replica(METADATA_GROUP)) else { return false };
    let Some(installs) = shard.controller.as_ref().and_then(|c| c.installs.borrow().clone()) else { return false };
    let l = r.log.borrow();
    l.high_watermark() >= l.log_end_offset() && installs.queue.borrow().is_empty() && !installs.busy.get()
}

async fn install_loop(shard: Rc<Shard>, installs: Rc<Installs>) {
    let store = MetadataStore::new(shard.config.data_dir());
    loop {
        let wait = installs.signal.wait();
        let next = installs.queue.borrow_mut().pop_front();
        let Some(meta) = next else {
            installs.busy.set(false);
            wait.await;
            continue;
        };
        if meta.version <= shard.meta().version {
            continue;
        }
        installs.busy.set(true);
        if let Err(e) = store.save_async(&meta).await {
            tracing::error!(error = %e, "cannot save committed metadata; it is installed from the log again at the next start");
        }
        tracing::info!(
            version = meta.version,
            topics = meta.topics.len(),
            brokers = meta.brokers.len(),
            "installing metadata"
        );
        let version = meta.version;
        shard.call_all(ApplyMetadata(meta)).await;
        installs.installed.set(version);
        installs.installed_signal.notify();
    }
}

/// One metadata version as the controller proposes it: a batch of one record.
pub fn encode_metadata(meta: &Metadata) -> Bytes {
    let json = serde_json::to_vec(meta).expect("metadata serializes");
    keel_protocol::batch::build_batch(0, crate::shard::partition::now_ms(), &[(None, Some(&json))])
}

fn decode_metadata(batch: &Bytes) -> Result<Metadata, String> {
    let header = keel_protocol::batch::validate(batch).map_err(|e| e.to_string())?;
    let body = keel_storage::batch_filter::decompressed_body(&header, batch)?;
    let records = keel_storage::batch_filter::parse_records(&header, &body)?;
    let value = records.first().and_then(|r| r.value).ok_or("a metadata record without a value")?;
    let mut meta: Metadata = serde_json::from_slice(value).map_err(|e| e.to_string())?;
    meta.reindex();
    Ok(meta)
}

/// The brokers (id, host, port) clients of `listener` are told of: the registered
/// ones of a cluster, or this node alone, each with its address on that listener (as
/// Kafka answers with the endpoints of the listener the request came in on).
pub fn brokers(shard: &Shard, listener: &str) -> Vec<(i32, String, i32)> {
    if shard.replication.is_none() {
        let (host, port) = local_endpoint(shard, listener);
        return vec![(shard.config.node_id, host, port)];
    }
    let meta = shard.meta();
    meta.brokers
        .iter()
        .filter(|(id, _)| !meta.fenced.contains(id))
        .map(|(id, b)| {
            let (host, port) = b.listeners.get(listener).cloned().unwrap_or_else(|| (b.host.clone(), b.port));
            (*id, host, port)
        })
        .collect()
}

/// This node's advertised address on `listener` (its inter-broker one if it has no
/// listener of that name).
pub fn local_endpoint(shard: &Shard, listener: &str) -> (String, i32) {
    match shard.security.listener(listener) {
        Some(l) => (l.advertised_host.clone(), l.advertised_port),
        None => shard.config.advertised(),
    }
}

/// Node `node`'s address on `listener`, for answers naming one broker
/// (FindCoordinator): `fallback` (its inter-broker address) if it registered none.
pub fn endpoint_of(shard: &Shard, listener: &str, node: i32, fallback: (String, i32)) -> (String, i32) {
    if shard.replication.is_none() || node == shard.config.node_id {
        return local_endpoint(shard, listener);
    }
    shard.meta().brokers.get(&node).and_then(|b| b.listeners.get(listener).cloned()).unwrap_or(fallback)
}

/// The controller's node id for clients: the metadata group's leader (-1 while there
/// is none); this node on a single node.
pub fn controller_id(shard: &Shard) -> i32 {
    match &shard.replication {
        None => shard.config.node_id,
        Some(_) => controller_node(shard).unwrap_or(-1),
    }
}

/// Largest response relayed from the controller.
const FORWARDED_RESPONSE_BYTES_MAX: usize = 16 << 20;
/// How long a relayed request may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

/// The ApiVersions version a relay asks the controller's metadata version with (the
/// first with the finalized features' epoch).
const API_VERSIONS_VERSION: i16 = 3;

/// Sends a client's request `frame` (without its size prefix) to the controller's
/// Kafka listener and returns its whole response frame, which carries the client's own
/// correlation id. `None` when this node is the controller, there is none, or it did
/// not answer: the request is then answered here (NOT_CONTROLLER, which clients retry).
///
/// The answer is returned once this node has installed the metadata the controller
/// had when it answered, so the change is visible here to the client's next request:
/// behind the request, on the same connection, goes an ApiVersions, which the
/// controller answers after it (the connection's order) with its metadata version as
/// the finalized features' epoch.
pub async fn forward_to_controller(shard: &Rc<Shard>, frame: &Bytes) -> Option<Bytes> {
    shard.replication.as_ref()?;
    let controller = controller_node(shard).filter(|c| *c != shard.config.node_id)?;
    let broker = shard.meta().brokers.get(&controller)?.clone();
    let addr = format!("{}:{}", broker.host, broker.port);
    let call = async {
        let answer = relay(&addr, frame).await;
        if let Err(e) = &answer {
            tracing::warn!(controller, %addr, error = %e, "forwarding a request to the controller failed");
        }
        answer.ok()
    };
    let (answer, version) = futures_lite::future::or(call, async {
        glommio::timer::sleep(FORWARD_TIMEOUT).await;
        None
    })
    .await?;
    if !shard.call(0, AwaitInstalled { version, timeout: FORWARD_TIMEOUT }).await {
        tracing::warn!(controller, version, "the metadata of a relayed change was not installed here in time");
    }
    Some(answer)
}

/// Sends `frame` and an ApiVersions behind it; returns the answer to `frame` and the
/// metadata version the ApiVersions answer carries.
async fn relay(addr: &str, frame: &Bytes) -> std::io::Result<(Bytes, u64)> {
    use futures_lite::AsyncWriteExt;
    let version_ask =
        outbound::request_frame(ApiKey::ApiVersions, API_VERSIONS_VERSION, &ApiVersionsRequest::default())
            .map_err(std::io::Error::other)?;
    let mut stream = glommio::net::TcpStream::connect(addr).await?;
    let mut request = Vec::with_capacity(4 + frame.len() + version_ask.len());
    request.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    request.extend_from_slice(frame);
    request.extend_from_slice(&version_ask);
    stream.write_all(&request).await?;
    let answer = outbound::read_frame(&mut stream, FORWARDED_RESPONSE_BYTES_MAX).await?;
    let versions = outbound::read_frame(&mut stream, FORWARDED_RESPONSE_BYTES_MAX).await?;
    let versions: ApiVersionsResponse = outbound::decode_response(ApiKey::ApiVersions, API_VERSIONS_VERSION, versions)
        .map_err(std::io::Error::other)?;
    Ok((answer, u64::try_from(versions.finalized_features_epoch).unwrap_or(0)))
}

/// A replicated partition as clients are told it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionView {
    /// -1 while it has none.
    pub leader: i32,
    pub epoch: i32,
    pub replicas: Vec<BrokerId>,
    /// The in-sync replicas, the leader among them; every replica until a leader has
    /// told them.
    pub in_sync: Vec<BrokerId>,
    pub offline: Vec<BrokerId>,
}

impl PartitionView {
    /// The partition's error in Metadata and DescribeTopicPartitions:
    /// LEADER_NOT_AVAILABLE while it has no leader.
    pub fn error_code(&self) -> i16 {
        if self.leader < 0 {
            crate::errors::LEADER_NOT_AVAILABLE
        } else {
            crate::errors::NONE
        }
    }
}

/// A replicated partition as the shards of its leader last told: the same answer on
/// every node.
pub fn partition_view(shard: &Shard, topic: &TopicMeta, partition: i32) -> Option<PartitionView> {
    let replicas = topic.all_replicas_of(partition)?;
    let replicas = replicas.as_slice();
    let group = crate::shard::partition::group_id(topic.id, partition);
    let leaders = shard.leaders.borrow();
    let known = leaders.get(&group);
    let leader = known.map_or(-1, |k| k.leader);
    let mut in_sync = known.and_then(|k| k.in_sync.clone()).unwrap_or_else(|| replicas.to_vec());
    if leader >= 0 && !in_sync.contains(&leader) {
        in_sync.push(leader);
        in_sync.sort_unstable();
    }
    Some(PartitionView {
        leader,
        epoch: known.map_or(0, |k| k.epoch),
        replicas: replicas.iter().map(|n| BrokerId(*n)).collect(),
        in_sync: in_sync.into_iter().map(BrokerId).collect(),
        offline: known.map(|k| k.offline.iter().map(|n| BrokerId(*n)).collect()).unwrap_or_default(),
    })
}

/// How long Metadata waits for partitions between leaders (`await_elections`).
const ELECTION_WAIT: Duration = Duration::from_secs(1);
const ELECTION_POLL: Duration = Duration::from_millis(5);

/// Waits, up to `ELECTION_WAIT`, while a partition of `topics` is led, as last told,
/// by a node this shard takes for down (its Raft connection closed, or silent for an
/// election timeout) and enough of its other replicas are up to elect another. A
/// client asks for metadata at once when its leader's connection drops, tens of
/// milliseconds before the survivors have elected: answered then, it would go back
/// to the dead node and then wait out its metadata back-off before asking again
/// (franz-go's is 5 s by default). Waiting here, its first answer names the new
/// leader. Nothing waits on a single node, or for a partition that cannot elect.
pub async fn await_elections(shard: &Shard, topics: &[&TopicMeta]) {
    let Some(replication) = &shard.replication else { return };
    let me = shard.config.node_id;
    let between_leaders = || {
        let leaders = shard.leaders.borrow();
        topics.iter().any(|t| {
            (0..t.partitions.len() as i32).any(|p| {
                let group = crate::shard::partition::group_id(t.id, p);
                let Some(leader) = leaders.get(&group).map(|k| k.leader).filter(|l| *l >= 0 && *l != me) else {
                    return false;
                };
                if replication.peer_alive(leader as NodeId) {
                    return false;
                }
                let replicas = t.all_replicas_of(p).unwrap_or_default();
                let up = replicas.iter().filter(|r| **r == me || replication.peer_alive(**r as NodeId)).count();
                up > replicas.len() / 2
            })
        })
    };
    let started = std::time::Instant::now();
    while between_leaders() && started.elapsed() < ELECTION_WAIT {
        glommio::timer::sleep(ELECTION_POLL).await;
    }
}

/// Where clients should go for a partition this node refused with
/// NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH (KIP-951): its leader and leader
/// epoch as last told, so the client can go there without asking for metadata first.
/// None on a single node and while no leader is known.
pub fn known_leader(shard: &Shard, topic: &str, partition: i32) -> Option<(i32, i32)> {
    shard.replication.as_ref()?;
    let meta = shard.meta();
    let view = partition_view(shard, meta.topics.get(topic)?, partition)?;
    (view.leader >= 0).then_some((view.leader, view.epoch))
}

/// The endpoints (id, host, port) of `nodes` among the brokers clients are told of,
/// in id order: KIP-951's node endpoints of the leaders an answer names.
pub fn endpoints_of(shard: &Shard, listener: &str, nodes: &[i32]) -> Vec<(i32, String, i32)> {
    let mut out: Vec<_> = brokers(shard, listener).into_iter().filter(|(id, _, _)| nodes.contains(id)).collect();
    out.sort_unstable_by_key(|(id, _, _)| *id);
    out
}

/// The controller's node, if known.
pub fn controller_node(shard: &Shard) -> Option<i32> {
    shard.leaders.borrow().get(&METADATA_GROUP).map(|k| k.leader).filter(|l| *l >= 0)
}

/// Sends `request` to the controller (or serves it here when this node is it). While
/// no controller is known (a node joining a cluster), to every peer: only the
/// controller acts on it.
pub async fn ask_controller(shard: &Rc<Shard>, request: ControlRequest) {
    let Some(controller) = controller_node(shard) else {
        let payload = Bytes::from(serde_json::to_vec(&request).expect("a control request serializes"));
        shard.call(0, SendControl { to: None, payload }).await;
        return;
    };
    if controller == shard.config.node_id {
        shard.call(0, ServeControl(request)).await;
        return;
    }
    let payload = Bytes::from(serde_json::to_vec(&request).expect("a control request serializes"));
    shard.call(0, SendControl { to: Some(controller as u64), payload }).await;
}

/// Carries out a request on the controller (shard 0); ignored elsewhere, where the
/// asking node's repeat reaches the right one.
pub(super) async fn serve_control(shard: Rc<Shard>, request: ControlRequest) {
    let leads = shard.replication.as_ref().is_some_and(|r| r.leads(METADATA_GROUP));
    if !leads {
        return;
    }
    let outcome = match request {
        ControlRequest::Register { node, host, port, rpc, listeners } => {
            controller::register_broker(&shard, node, BrokerMeta { host, port, rpc, listeners }).await
        }
        ControlRequest::ProducerIds { node } => controller::grant_producer_ids(&shard, node).await,
        ControlRequest::ReassignmentDone { topic, partition, members } => {
            controller::complete_reassignment(&shard, topic, partition as i32, members).await
        }
        ControlRequest::Rebuild { topic, partition, node } => {
            controller::rebuild_replica(&shard, topic, partition as i32, node).await
        }
        ControlRequest::Leaders { .. } | ControlRequest::MoveLeaders { .. } => Ok(()),
        ControlRequest::CreateTopics { names } => {
            let internal: Vec<&str> = [OFFSETS_TOPIC, TRANSACTION_TOPIC]
                .into_iter()
                .filter(|t| names.iter().any(|n| n == t) && !shard.meta().topics.contains_key(*t))
                .filter(|_| routing::offsets_replicas_registered(&shard))
                .collect();
            let mut specs = controller::auto_create_specs(&shard.meta(), names);
            specs.retain(|s| s.name != OFFSETS_TOPIC && s.name != TRANSACTION_TOPIC && shard.config.auto_create_topics);
            specs.extend(internal.into_iter().map(|t| routing::internal_topic_spec(t, &shard.config)));
            if specs.is_empty() {
                return;
            }
            controller::create_topics(shard.clone(), specs, false, None).await;
            Ok(())
        }
    };
    if let Err((code, message)) = outcome {
        tracing::debug!(code, %message, "a control request failed; the node asks again");
    }
}

/// How often a registered broker registers again: its heartbeat to the controller,
/// which fences a broker silent for `broker_session_timeout_ms`.
pub const HEARTBEAT: Duration = Duration::from_millis(2000);

/// Registers this node with the controller, every 200 ms until the metadata lists it
/// as it is (and not fenced), then every [`HEARTBEAT`].
async fn register_loop(shard: Rc<Shard>) {
    let node = shard.config.node_id;
    let (host, port) = shard.config.advertised();
    let me =
        BrokerMeta { host, port, rpc: shard.config.rpc_addr.clone(), listeners: shard.config.advertised_endpoints() };
    loop {
        let meta = shard.meta();
        let registered = meta.brokers.get(&node) == Some(&me) && !meta.fenced.contains(&node);
        glommio::timer::sleep(if registered { HEARTBEAT } else { Duration::from_millis(200) }).await;
        let request = ControlRequest::Register {
            node,
            host: me.host.clone(),
            port: me.port,
            rpc: me.rpc.clone(),
            listeners: me.listeners.clone(),
        };
        ask_controller(&shard, request).await;
    }
}

/// On shard 0: while this node is the controller, fences the brokers gone silent.
async fn fence_loop(shard: Rc<Shard>) {
    let mut since: Option<std::time::Instant> = None;
    loop {
        glommio::timer::sleep(Duration::from_millis(500)).await;
        let leads = shard.replication.as_ref().is_some_and(|r| r.leads(METADATA_GROUP));
        if !leads || !caught_up(&shard) {
            since = None;
            continue;
        }
        if since.is_none() {
            if let Err((code, message)) = controller::record_cluster_defaults(&shard).await {
                tracing::debug!(code, %message, "recording the cluster-level defaults failed; trying again");
                continue;
            }
        }
        let since = *since.get_or_insert_with(std::time::Instant::now);
        if let Err((code, message)) = controller::fence_silent_brokers(&shard, since).await {
            tracing::debug!(code, %message, "fencing silent brokers failed; trying again");
        }
    }
}

/// Waits until `done` holds for the installed metadata, asking the controller with
/// `request` every 200 ms, for at most `timeout`.
pub async fn ask_until(
    shard: &Rc<Shard>,
    request: ControlRequest,
    timeout: Duration,
    done: impl Fn(&Metadata) -> bool,
) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if done(&shard.meta()) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        ask_controller(shard, request.clone()).await;
        for _ in 0..20 {
            glommio::timer::sleep(Duration::from_millis(10)).await;
            if done(&shard.meta()) {
                return true;
            }
        }
    }
}
