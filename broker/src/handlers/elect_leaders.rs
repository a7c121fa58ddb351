//! ElectLeaders (v0-2, KIP-460): what `kafka-leader-election.sh` and
//! `Admin.electLeaders` send.
//!
//! - **PREFERRED** (0; the only kind of v0) moves each partition's leadership to its
//!   preferred replica (its first): ELECTION_NOT_NEEDED when that one leads already,
//!   PREFERRED_LEADER_NOT_AVAILABLE when it is offline, out of sync, or there is no
//!   leader to hand over; NONE once it leads. Any node takes the request: the
//!   partition's leader is asked to transfer its leadership (`cluster::balance`),
//!   and the answer waits, at most `timeout_ms` (capped at [`WAIT_MS_MAX`]), until the
//!   preferred replica leads; past that, REQUEST_TIMED_OUT.
//! - **UNCLEAN** (1): Kafka would make an out-of-sync replica leader when no in-sync one
//!   is left. Raft never does: a leader needs a majority, and every entry it committed
//!   is on the next leader. So the answer is ELECTION_NOT_NEEDED while the partition has
//!   a leader, ELIGIBLE_LEADERS_NOT_AVAILABLE while it has none.
//!
//! A null topic list means every partition; then, as Kafka's controller does, the
//! partitions answered ELECTION_NOT_NEEDED are left out of the response (each topic is
//! still answered, with an empty list when none is left). A partition
//! of a single node (or of a topic that is not replicated) is led by its one replica:
//! ELECTION_NOT_NEEDED.

use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};

use crate::cluster::balance::{self, MoveError, Moved, Wanted};
use crate::cluster::nodes::partition_view;
use crate::errors;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 2);

/// Longest an answer waits for the elections it asked for, whatever `timeout_ms` says
/// (clients give up on a request after `request.timeout.ms`, 30 s by default).
pub const WAIT_MS_MAX: i32 = 25_000;

const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;
const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;
const ELIGIBLE_LEADERS_NOT_AVAILABLE: i16 = 83;
const ELECTION_NOT_NEEDED: i16 = 84;

/// (error, message) of one partition.
type Answer = (i16, Option<String>);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: ElectLeadersRequest,
) -> ElectLeadersResponse {
    // As Kafka: ALTER on the cluster.
    if !super::cluster_authorized(shard, ctx, crate::security::acl::operation::ALTER) {
        return ElectLeadersResponse::default().with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED);
    }
    let election_type = if version == 0 { PREFERRED } else { req.election_type };
    if election_type != PREFERRED && election_type != UNCLEAN {
        return ElectLeadersResponse::default().with_error_code(errors::INVALID_REQUEST);
    }
    let every = req.topic_partitions.is_none();
    let (entries, asked) = asked_partitions(shard, req.topic_partitions);
    let answers = match election_type {
        PREFERRED => {
            let wait = Duration::from_millis(req.timeout_ms.clamp(0, WAIT_MS_MAX) as u64);
            elect_preferred(shard, &asked, wait).await
        }
        _ => asked.iter().map(|(topic, partition)| unclean(shard, topic, *partition)).collect(),
    };
    // One result per topic entry of the request, in its order, as Kafka's controller
    // answers (a topic named twice is answered twice).
    let mut answers = asked.into_iter().zip(answers);
    let mut results: Vec<ReplicaElectionResult> = Vec::with_capacity(entries.len());
    for (topic, count) in entries {
        let mut result = ReplicaElectionResult::default().with_topic(TopicName(str_bytes(&topic)));
        for ((_, partition), (code, message)) in answers.by_ref().take(count) {
            if every && code == ELECTION_NOT_NEEDED {
                continue;
            }
            result.partition_result.push(
                PartitionResult::default()
                    .with_partition_id(partition)
                    .with_error_code(code)
                    .with_error_message(message.map(|m| str_bytes(&m))),
            );
        }
        // Kafka's controller answers every topic of a null list, its entry empty
        // when every partition already has the leader it wants.
        results.push(result);
    }
    ElectLeadersResponse::default().with_error_code(errors::NONE).with_replica_election_results(results)
}

/// The topic entries a request names (each topic with its number of partitions), in
/// its order, or every topic; and the partitions they name, in the same order.
type Asked = (Vec<(String, usize)>, Vec<(String, i32)>);

fn asked_partitions(
    shard: &Shard,
    named: Option<Vec<kafka_protocol::messages::elect_leaders_request::TopicPartitions>>,
) -> Asked {
    let topics: Vec<(String, Vec<i32>)> = match named {
        Some(topics) => topics.into_iter().map(|t| (t.topic.0.to_string(), t.partitions)).collect(),
        None => {
            let meta = shard.meta();
            meta.topics.iter().map(|(name, t)| (name.clone(), (0..t.partitions.len() as i32).collect())).collect()
        }
    };
    let entries = topics.iter().map(|(topic, partitions)| (topic.clone(), partitions.len())).collect();
    let asked = topics.into_iter().flat_map(|(topic, ps)| ps.into_iter().map(move |p| (topic.clone(), p))).collect();
    (entries, asked)
}

async fn elect_preferred(shard: &Rc<Shard>, asked: &[(String, i32)], wait: Duration) -> Vec<Answer> {
    let wanted =
        asked.iter().map(|(topic, partition)| Wanted { topic: topic.clone(), partition: *partition, to: None });
    let moved = balance::move_leaders(shard, wanted.collect(), wait).await;
    moved
        .into_iter()
        .map(|m| match m {
            Ok(Moved::Done) => (errors::NONE, None),
            Ok(Moved::AlreadyLeads) => (ELECTION_NOT_NEEDED, None),
            Err(e) => {
                let code = match e {
                    MoveError::Unknown => errors::UNKNOWN_TOPIC_OR_PARTITION,
                    MoveError::TimedOut { .. } => errors::REQUEST_TIMED_OUT,
                    MoveError::NotReplicated => ELECTION_NOT_NEEDED,
                    MoveError::NotAReplica { .. } | MoveError::NoLeader | MoveError::NotInSync { .. } => {
                        PREFERRED_LEADER_NOT_AVAILABLE
                    }
                };
                (code, Some(e.to_string()))
            }
        })
        .collect()
}

fn unclean(shard: &Shard, topic: &str, partition: i32) -> Answer {
    let meta = shard.meta();
    let Some(t) = meta.topics.get(topic).filter(|t| partition >= 0 && (partition as usize) < t.partitions.len()) else {
        return (errors::UNKNOWN_TOPIC_OR_PARTITION, Some("no such partition".into()));
    };
    match partition_view(shard, t, partition) {
        Some(view) if view.leader < 0 => (
            ELIGIBLE_LEADERS_NOT_AVAILABLE,
            Some("no leader now; Raft elects only a replica with every committed record".into()),
        ),
        _ => (ELECTION_NOT_NEEDED, None),
    }
}
