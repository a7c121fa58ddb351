//! The shard side of the admin API: shard 0 takes the admin thread's calls from a
//! bounded channel and answers each in a task of its own, reaching the other shards
//! over the mesh as handlers do. Answers are JSON values; refusals carry an HTTP
//! status.

use std::rc::Rc;
use std::time::Duration;

use serde_json::{json, Value};

use super::requests::{GroupViews, PartitionLog};
use super::stats::{self, ShardStats};
use crate::cluster::balance::{self, MoveError, Moved, Wanted};
use crate::cluster::nodes;
use crate::shard::Shard;

/// How long a leadership move waits for the new leader before answering 504.
const LEADER_MOVE_WAIT: Duration = Duration::from_secs(10);

/// What the admin thread asks of the shards.
#[derive(Debug, Clone)]
pub enum Query {
    /// Publish every shard's figures into the metrics recorder (then the admin thread
    /// renders them).
    Metrics,
    Status,
    Cluster,
    ClusterHealth,
    Brokers,
    Topics,
    Topic(String),
    Groups,
    Group(String),
    MoveLeader {
        topic: String,
        partition: i32,
        to: Option<i32>,
    },
}

/// A refusal: HTTP status and message.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

impl Refusal {
    pub fn new(status: u16, message: impl Into<String>) -> Refusal {
        Refusal { status, message: message.into() }
    }
}

pub type Answer = Result<Value, Refusal>;

pub struct Call {
    pub query: Query,
    pub reply: flume::Sender<Answer>,
}

/// Answers the admin thread's calls on this shard (shard 0), forever.
pub fn serve(shard: &Rc<Shard>, calls: flume::Receiver<Call>) {
    let shard = shard.clone();
    glommio::spawn_local(async move {
        while let Ok(call) = calls.recv_async().await {
            let shard = shard.clone();
            glommio::spawn_local(async move {
                let answer = answer(&shard, call.query).await;
                // The admin thread may have stopped waiting (timed out): nothing to do.
                let _ = call.reply.try_send(answer);
            })
            .detach();
        }
    })
    .detach();
}

async fn answer(shard: &Rc<Shard>, query: Query) -> Answer {
    match query {
        Query::Metrics => {
            super::publish::publish(&stats::gather(shard).await);
            Ok(Value::Null)
        }
        Query::Status => Ok(status(shard, &stats::gather(shard).await)),
        Query::Cluster => Ok(cluster_view(shard)),
        Query::ClusterHealth => Ok(health(shard, &stats::gather(shard).await)),
        Query::Brokers => Ok(brokers(shard)),
        Query::Topics => Ok(topics(shard)),
        Query::Topic(name) => topic(shard, &name).await,
        Query::Groups => Ok(groups(shard).await),
        Query::Group(id) => group(shard, &id).await,
        Query::MoveLeader { topic, partition, to } => move_leader(shard, topic, partition, to).await,
    }
}

/// `/v1/status`: the node and its shards. Keys in a fixed order (scripts match the
/// text).
fn status(shard: &Shard, stats: &[ShardStats]) -> Value {
    let meta = shard.meta();
    let shards: Vec<String> = stats
        .iter()
        .map(|s| format!(r#"{{"shard":{},"partitions":{},"connections":{}}}"#, s.shard, s.partitions, s.connections))
        .collect();
    Value::String(format!(
        r#"{{"node_id":{},"cluster_id":{},"topics":{},"shards":[{}]}}"#,
        shard.config.node_id,
        Value::String(meta.cluster_id.clone()),
        meta.topics.len(),
        shards.join(",")
    ))
}

/// `/v1/cluster`: the cluster as this node sees it: registered brokers, the
/// controller (-1 while there is none), and the replicated partitions it knows
/// leaders of.
fn cluster_view(shard: &Shard) -> Value {
    let meta = shard.meta();
    let leaders = shard.leaders.borrow();
    let led = leaders.values().filter(|k| k.leader >= 0).count();
    // Keys in a fixed order: scripts match the text.
    Value::String(format!(
        r#"{{"node_id":{},"cluster_id":{},"brokers":{},"controller":{},"groups_with_leader":{},"groups_known":{}}}"#,
        shard.config.node_id,
        Value::String(meta.cluster_id.clone()),
        meta.brokers.len().max(usize::from(shard.replication.is_none())),
        nodes::controller_id(shard),
        led,
        leaders.len()
    ))
}

/// `/v1/cluster/health`: healthy when a controller is known and every partition has
/// a leader, all its replicas in sync and its data directory online.
fn health(shard: &Shard, stats: &[ShardStats]) -> Value {
    let meta = shard.meta();
    let controller = nodes::controller_id(shard);
    let mut leaderless = Vec::new();
    if shard.replication.is_some() {
        for (name, t) in &meta.topics {
            for p in 0..t.partitions.len() as i32 {
                if nodes::partition_view(shard, t, p).is_some_and(|v| v.leader < 0) {
                    leaderless.push(json!({"topic": name, "partition": p}));
                }
            }
        }
    }
    let offline: Vec<Value> =
        shard.offline_partitions.borrow().iter().map(|(t, p)| json!({"topic": t, "partition": p})).collect();
    let under_replicated: usize = stats.iter().map(|s| s.under_replicated).sum();
    let failed_dirs: Vec<Value> = shard
        .dirs
        .all()
        .iter()
        .filter_map(|d| d.offline().map(|why| json!({"path": d.path.display().to_string(), "error": why})))
        .collect();
    let healthy = controller >= 0 && leaderless.is_empty() && offline.is_empty() && under_replicated == 0;
    json!({
        "healthy": healthy,
        "node_id": shard.config.node_id,
        "cluster_id": meta.cluster_id,
        "controller": controller,
        "brokers": meta.brokers.len().max(usize::from(shard.replication.is_none())),
        "shards": shard.count,
        "topics": meta.topics.len(),
        "partitions": meta.topics.values().map(|t| t.partitions.len()).sum::<usize>(),
        "leaderless_partitions": leaderless,
        "offline_partitions": offline,
        "under_replicated_partitions": under_replicated,
        "failed_data_dirs": failed_dirs,
    })
}

/// `/v1/brokers`: the cluster's brokers (this node alone on a single node).
fn brokers(shard: &Shard) -> Value {
    let meta = shard.meta();
    let controller = nodes::controller_id(shard);
    if meta.brokers.is_empty() {
        let (host, port) = shard.config.advertised();
        return json!([{
            "node_id": shard.config.node_id, "host": host, "port": port, "rpc": null,
            "is_controller": controller == shard.config.node_id, "shards": shard.count,
        }]);
    }
    let list: Vec<Value> = meta
        .brokers
        .iter()
        .map(|(id, b)| {
            let shards = (*id == shard.config.node_id).then_some(shard.count);
            json!({"node_id": id, "host": b.host, "port": b.port, "rpc": b.rpc,
                "is_controller": *id == controller, "shards": shards})
        })
        .collect();
    Value::Array(list)
}

/// `/v1/topics`.
fn topics(shard: &Shard) -> Value {
    let meta = shard.meta();
    let list: Vec<Value> = meta
        .topics
        .iter()
        .map(|(name, t)| {
            let replication_factor = t.replicas_of(0).map_or(1, |r| r.len());
            json!({"name": name, "id": t.id.to_string(), "partitions": t.partitions.len(),
                "replication_factor": replication_factor, "internal": name.starts_with("__")})
        })
        .collect();
    Value::Array(list)
}

/// `/v1/topics/{topic}`: every partition with its owning shard, leader, replicas and,
/// where this node keeps it, its log's size and offsets.
async fn topic(shard: &Rc<Shard>, name: &str) -> Answer {
    let meta = shard.meta();
    let t = meta.topics.get(name).ok_or_else(|| Refusal::new(404, format!("no topic {name:?}")))?;
    let mut partitions = Vec::new();
    for (index, &owner) in t.partitions.iter().enumerate() {
        let index = index as i32;
        let owner = owner % shard.count;
        let (leader, epoch, replicas, in_sync) = match nodes::partition_view(shard, t, index) {
            Some(v) => (
                v.leader,
                v.epoch,
                v.replicas.iter().map(|b| b.0).collect::<Vec<_>>(),
                v.in_sync.iter().map(|b| b.0).collect::<Vec<_>>(),
            ),
            None => (shard.config.node_id, 0, vec![shard.config.node_id], vec![shard.config.node_id]),
        };
        let log = shard.call(owner, PartitionLog { topic: name.to_string(), index }).await;
        partitions.push(json!({"partition": index, "shard": owner, "leader": leader, "leader_epoch": epoch,
            "replicas": replicas, "in_sync_replicas": in_sync, "log": log}));
    }
    Ok(json!({"name": name, "id": t.id.to_string(), "configs": t.configs, "partitions": partitions}))
}

/// The groups of shard `s`'s coordinator (all, or only group `only`): the shard,
/// and per group its id, state, type, protocol type and members.
pub(super) fn groups_of_shard(s: &Shard, only: Option<&str>) -> (usize, Vec<GroupSummary>) {
    let c = s.coordinator.borrow();
    let mut out = Vec::new();
    let wanted = |g: &str| only.is_none_or(|o| o == g);
    for (id, g) in c.groups.iter().filter(|(id, _)| wanted(id)) {
        let members = match g {
            crate::groups::Group::Classic(g) => g
                .members()
                .map(|m| {
                    json!({"member_id": m.id, "instance_id": m.instance_id,
                    "client_id": m.client_id, "client_host": m.client_host})
                })
                .collect(),
            crate::groups::Group::Consumer(g) => g
                .members()
                .map(|m| {
                    json!({"member_id": m.id, "instance_id": m.instance_id,
                    "client_id": m.client_id, "client_host": m.client_host, "member_epoch": m.epoch})
                })
                .collect(),
        };
        out.push((
            id.clone(),
            g.state_name().to_string(),
            g.type_name().to_string(),
            g.protocol_type().to_string(),
            members,
        ));
    }
    // Groups known only by their committed offsets (e.g. consumers that
    // assign partitions themselves) are listed as Empty, as Kafka does.
    for id in c.offsets.group_ids().filter(|g| wanted(g)) {
        if !c.groups.contains_key(id) {
            out.push((id.clone(), "Empty".into(), "classic".into(), String::new(), Vec::new()));
        }
    }
    (s.id, out)
}

/// A group's id, state, type, protocol type and members, as `groups_of_shard` tells.
pub(super) type GroupSummary = (String, String, String, String, Vec<Value>);

/// The log of partition `topic`-`index` on shard `s`, if `s` holds it.
pub(super) fn partition_log(s: &Shard, topic: &str, index: i32) -> Option<Value> {
    let p = s.partition(topic, index)?;
    let l = p.log.borrow();
    Some(json!({"size_bytes": l.size_bytes(), "log_start_offset": l.log_start_offset,
        "log_end_offset": l.log_end_offset(), "high_watermark": l.high_watermark()}))
}

/// One group as its coordinator shard knows it.
struct GroupView {
    id: String,
    shard: usize,
    state: String,
    kind: String,
    protocol_type: String,
    members: Vec<Value>,
}

async fn group_views(shard: &Rc<Shard>, only: Option<String>) -> Vec<GroupView> {
    let per_shard = shard.call_all(GroupViews { only }).await;
    let mut views: Vec<GroupView> = per_shard
        .into_iter()
        .flat_map(|(shard, groups)| {
            groups.into_iter().map(move |(id, state, kind, protocol_type, members)| GroupView {
                id,
                shard,
                state,
                kind,
                protocol_type,
                members,
            })
        })
        .collect();
    views.sort_by(|a, b| a.id.cmp(&b.id));
    views
}

/// `/v1/groups`.
async fn groups(shard: &Rc<Shard>) -> Value {
    let list: Vec<Value> = group_views(shard, None)
        .await
        .into_iter()
        .map(|g| {
            json!({"group": g.id, "coordinator_shard": g.shard, "state": g.state, "type": g.kind,
            "protocol_type": g.protocol_type, "members": g.members.len()})
        })
        .collect();
    Value::Array(list)
}

/// `/v1/groups/{group}`: members, committed offsets and lag.
async fn group(shard: &Rc<Shard>, id: &str) -> Answer {
    let view = group_views(shard, Some(id.to_string())).await.into_iter().next();
    let view = view.ok_or_else(|| Refusal::new(404, format!("no group {id:?}")))?;
    let lags = super::publish::group_lags(&stats::gather(shard).await);
    let lag = lags.get(id).cloned().unwrap_or_default();
    let offsets: Vec<Value> = lag
        .partitions
        .iter()
        .map(|(topic, partition, committed, hw, lag)| {
            json!({"topic": topic, "partition": partition, "committed_offset": committed,
                "high_watermark": hw, "lag": lag})
        })
        .collect();
    Ok(json!({"group": view.id, "coordinator_shard": view.shard, "state": view.state, "type": view.kind,
        "protocol_type": view.protocol_type, "members": view.members, "offsets": offsets, "lag": lag.total()}))
}

/// `POST /v1/partitions/{topic}/{partition}/leader[?to=N]`: moves a partition's
/// leadership to replica N (the preferred replica without `to`).
async fn move_leader(shard: &Rc<Shard>, topic: String, partition: i32, to: Option<i32>) -> Answer {
    let wanted = Wanted { topic: topic.clone(), partition, to };
    let moved = balance::move_leaders(shard, vec![wanted], LEADER_MOVE_WAIT).await;
    let leader = |moved: bool| {
        let leader =
            shard.meta().topics.get(&topic).and_then(|t| nodes::partition_view(shard, t, partition)).map(|v| v.leader);
        Ok(json!({"topic": topic, "partition": partition,
            "leader": leader.unwrap_or(shard.config.node_id), "moved": moved}))
    };
    match moved.into_iter().next().expect("one answer per move") {
        Ok(Moved::Done) => leader(true),
        Ok(Moved::AlreadyLeads) => leader(false),
        Err(e @ MoveError::Unknown) => Err(Refusal::new(404, e.to_string())),
        Err(e @ MoveError::NotAReplica { .. }) => Err(Refusal::new(400, e.to_string())),
        Err(e @ (MoveError::NotReplicated | MoveError::NoLeader | MoveError::NotInSync { .. })) => {
            Err(Refusal::new(409, e.to_string()))
        }
        Err(e @ MoveError::TimedOut { .. }) => Err(Refusal::new(504, e.to_string())),
    }
}
