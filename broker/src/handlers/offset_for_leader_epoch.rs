//! OffsetForLeaderEpoch: the end offset of a leader epoch, from each log's epoch cache
//! (Kafka's leader-epoch checkpoint), so clients can detect log truncation.

use std::rc::Rc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::dispatch::Serve;
use crate::shard::fanout::{answer_each, answer_partitions};
use crate::shard::partition::LEADER_EPOCH;
use crate::shard::Shard;

/// On an owner shard: the end offset of a leader epoch (the client's current leader
/// epoch, the epoch asked) of each of its partitions, one after another.
pub struct EpochEnds {
    items: Vec<(String, i32, (i32, i32))>,
}

impl Serve for EpochEnds {
    async fn serve(self, shard: Rc<Shard>) -> Vec<(i16, i32, i64)> {
        answer_each(&shard, self.items, |s, topic, partition, (current, epoch)| async move {
            match s.partition(&topic, partition) {
                None => (errors::NOT_LEADER_OR_FOLLOWER, -1, -1),
                Some(p) if p.unavailable(&s).is_some() => (errors::KAFKA_STORAGE_ERROR, -1, -1),
                Some(p) => {
                    if let Some(code) = p.not_leader(&s).or_else(|| p.check_leader_epoch(current)) {
                        return (code, -1, -1);
                    }
                    // A leader's epoch starts at its log end when it is elected, as in
                    // Kafka's leader-epoch cache, even before it appended anything (a new
                    // partition's first leader too).
                    let l = p.log.borrow();
                    let mut epochs = l.epochs().to_vec();
                    let leader_epoch = p.leader_epoch();
                    if epochs.last().is_none_or(|(e, _)| *e < leader_epoch) && leader_epoch >= LEADER_EPOCH {
                        epochs.push((leader_epoch, l.log_end_offset()));
                    }
                    let (e, end) = epoch_end(&epochs, epoch, l.log_end_offset());
                    (errors::NONE, e, end)
                }
            }
        })
        .await
    }
}

pub const VERSIONS: (i16, i16) = (2, 4);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    // As Kafka: a replica needs CLUSTER_ACTION on the cluster, a client DESCRIBE on
    // each topic.
    let replica_authorized =
        req.replica_id.0 < 0 || super::cluster_authorized(shard, ctx, acl::operation::CLUSTER_ACTION);
    let items = req
        .topics
        .iter()
        .flat_map(|t| {
            let authorized = replica_authorized
                && (req.replica_id.0 >= 0
                    || super::authorized(
                        shard,
                        ctx,
                        acl::operation::DESCRIBE,
                        acl::resource::TOPIC,
                        t.topic.0.as_str(),
                    ));
            t.partitions.iter().map(move |p| {
                if !authorized {
                    return Err((errors::TOPIC_AUTHORIZATION_FAILED, -1, -1));
                }
                Ok((t.topic.0.to_string(), p.partition, (p.current_leader_epoch, p.leader_epoch)))
            })
        })
        .collect();
    let unknown = (errors::UNKNOWN_TOPIC_OR_PARTITION, -1, -1);
    let answers = answer_partitions(shard, items, unknown, |items| EpochEnds { items }).await;
    let mut answers = answers.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let (error, epoch, end) = answers.next().expect("an answer per partition");
                    EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_error_code(error)
                        .with_leader_epoch(epoch)
                        .with_end_offset(end)
                })
                .collect();
            OffsetForLeaderTopicResult::default().with_topic(t.topic).with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

/// Kafka's answer for an epoch no entry answers: UNDEFINED epoch and offset.
const UNDEFINED: (i32, i64) = (-1, -1);

/// The end of epoch `requested` as Kafka's leader-epoch cache answers it
/// (`LeaderEpochFileCache.endOffsetFor`): the latest epoch ends at the log end; an
/// older one at the start of the next epoch after it, answered with the largest epoch
/// not above it (or itself, when it is older than every epoch known); the undefined
/// epoch and an epoch past the latest have no end: UNDEFINED (-1, -1).
pub fn epoch_end(epochs: &[(i32, i64)], requested: i32, log_end: i64) -> (i32, i64) {
    if requested < 0 {
        return UNDEFINED;
    }
    if epochs.last().is_some_and(|(latest, _)| *latest == requested) {
        return (requested, log_end);
    }
    let higher = epochs.partition_point(|(e, _)| *e <= requested);
    let Some(&(_, next_start)) = epochs.get(higher) else { return UNDEFINED };
    match higher.checked_sub(1) {
        None => (requested, next_start),
        Some(floor) => (epochs[floor].0, next_start),
    }
}

#[cfg(test)]
mod tests {
    use super::epoch_end;
    #[test]
    fn epoch_boundaries() {
        let epochs = [(0, 0), (2, 50), (5, 90)];
        assert_eq!(epoch_end(&epochs, 0, 100), (0, 50));
        assert_eq!(epoch_end(&epochs, 1, 100), (0, 50));
        assert_eq!(epoch_end(&epochs, 5, 100), (5, 100));
        // Past the latest epoch, and the undefined epoch: no end (Kafka's UNDEFINED).
        assert_eq!(epoch_end(&epochs, 9, 100), (-1, -1));
        assert_eq!(epoch_end(&epochs, -1, 100), (-1, -1));
        assert_eq!(epoch_end(&[], 0, 100), (-1, -1));
        // Older than every epoch known: the epoch asked, ending where the first starts.
        assert_eq!(epoch_end(&[(3, 10)], 1, 100), (1, 10));
    }
}
