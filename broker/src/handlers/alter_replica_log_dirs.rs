//! AlterReplicaLogDirs: moves partitions between this broker's data directories
//! while they keep serving (see `shard::log_move`). As in Kafka, the answer comes
//! once each move has started; DescribeLogDirs shows the partition as a future
//! replica in its target directory until the move ends, and in the target alone
//! afterwards. Errors: LOG_DIR_NOT_FOUND for a directory that is not configured
//! (or not absolute), KAFKA_STORAGE_ERROR for a failed one (or a partition that is
//! offline), UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist.

use std::path::PathBuf;
use std::rc::Rc;

use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::{AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, TopicName};

use crate::shard::fanout::scatter;

use crate::errors;
use crate::security::context::RequestContext;
use crate::shard::dispatch::Serve;
use crate::shard::Shard;
use crate::util::str_bytes;

/// Kafka 4 removed version 0.
pub const VERSIONS: (i16, i16) = (1, 2);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: AlterReplicaLogDirsRequest,
) -> AlterReplicaLogDirsResponse {
    let meta = shard.meta();
    // As Kafka: ALTER on the cluster, else every partition is refused.
    let refused = !super::cluster_authorized(shard, ctx, crate::security::acl::operation::ALTER);
    // (topic, partition, answer if known now, owner and target otherwise), in request order.
    let mut slots: Vec<(String, i32, Option<i16>)> = Vec::new();
    let mut work: Vec<(usize, (String, i32, usize))> = Vec::new();
    for dir in &req.dirs {
        let path = PathBuf::from(dir.path.as_str());
        let target = if path.is_absolute() { shard.dirs.index_of(&path) } else { None };
        for t in &dir.topics {
            for &p in &t.partitions {
                let topic = t.name.0.to_string();
                let answer = match (target, meta.owner(&topic, p)) {
                    _ if refused => Some(errors::CLUSTER_AUTHORIZATION_FAILED),
                    (None, _) => Some(errors::LOG_DIR_NOT_FOUND),
                    (_, None) => Some(errors::UNKNOWN_TOPIC_OR_PARTITION),
                    (Some(target), Some(owner)) => {
                        work.push((owner, (topic.clone(), p, target)));
                        None
                    }
                };
                slots.push((topic, p, answer));
            }
        }
    }
    let started = scatter(shard, work, |items| StartMoves { items }).await;
    let mut started = started.into_iter();
    let mut results: Vec<AlterReplicaLogDirTopicResult> = Vec::new();
    for (topic, p, answer) in slots {
        let code = answer.unwrap_or_else(|| started.next().expect("one answer per started move"));
        let part = AlterReplicaLogDirPartitionResult::default().with_partition_index(p).with_error_code(code);
        match results.iter_mut().find(|r| r.topic_name.0.as_str() == topic) {
            Some(r) => r.partitions.push(part),
            None => results.push(
                AlterReplicaLogDirTopicResult::default()
                    .with_topic_name(TopicName(str_bytes(&topic)))
                    .with_partitions(vec![part]),
            ),
        }
    }
    AlterReplicaLogDirsResponse::default().with_results(results)
}

/// On an owner shard: starts moving each of its partitions (topic, partition, target
/// directory) into its target directory.
pub struct StartMoves {
    items: Vec<(String, i32, usize)>,
}

impl Serve for StartMoves {
    async fn serve(self, s: Rc<Shard>) -> Vec<i16> {
        self.items.into_iter().map(|(topic, p, target)| start_move(&s, &topic, p, target)).collect()
    }
}

/// On the owner shard: starts moving `topic`-`partition` into directory `target`.
fn start_move(shard: &Rc<Shard>, topic: &str, partition: i32, target: usize) -> i16 {
    let Some(p) = shard.partition(topic, partition) else {
        return errors::UNKNOWN_TOPIC_OR_PARTITION;
    };
    if shard.dirs.get(target).offline().is_some() || p.unavailable(shard).is_some() {
        return errors::KAFKA_STORAGE_ERROR;
    }
    if p.dir_index.get() == target && p.move_progress().is_none() {
        return errors::NONE;
    }
    if let Some((moving_to, _)) = p.move_progress() {
        // Kafka answers a request for the move already running with success.
        return if moving_to == target { errors::NONE } else { errors::KAFKA_STORAGE_ERROR };
    }
    assert!(p.begin_move(target), "no move was running");
    glommio::spawn_local(crate::shard::log_move::run(shard.clone(), p, target)).detach();
    errors::NONE
}
