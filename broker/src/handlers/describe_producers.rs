//! DescribeProducers: the producers a partition's leader knows, with their epoch, last
//! sequence and the first offset of their open transaction, which is how Kafka's
//! `kafka-transactions find-hanging` finds a transaction nothing will end.

use std::rc::Rc;

use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};

use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::dispatch::Serve;
use crate::shard::fanout::{answer_each, answer_partitions};
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (0, 0);

pub type Answer = (i16, Vec<(i64, i16, i32, i64, i64)>);

/// On an owner shard: the active producers of each of its partitions.
pub struct ActiveProducers {
    items: Vec<(String, i32, ())>,
}

impl Serve for ActiveProducers {
    async fn serve(self, shard: Rc<Shard>) -> Vec<Answer> {
        answer_each(&shard, self.items, |s, topic, partition, ()| async move {
            let Some(p) = s.partition(&topic, partition) else {
                return (errors::NOT_LEADER_OR_FOLLOWER, Vec::new());
            };
            match p.not_leader(&s) {
                Some(code) => (code, Vec::new()),
                None => (errors::NONE, p.active_producers()),
            }
        })
        .await
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    // As Kafka: READ on each topic.
    let items = req
        .topics
        .iter()
        .flat_map(|t| {
            let readable = super::authorized(shard, ctx, acl::operation::READ, acl::resource::TOPIC, t.name.0.as_str());
            t.partition_indexes.iter().map(move |p| match readable {
                true => Ok((t.name.0.to_string(), *p, ())),
                false => Err((errors::TOPIC_AUTHORIZATION_FAILED, Vec::new())),
            })
        })
        .collect();
    let unknown: Answer = (errors::UNKNOWN_TOPIC_OR_PARTITION, Vec::new());
    let answers = answer_partitions(shard, items, unknown, |items| ActiveProducers { items }).await;
    let mut answers = answers.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partition_indexes
                .iter()
                .map(|index| {
                    let (error, producers) = answers.next().expect("an answer per partition");
                    let active = producers
                        .into_iter()
                        .map(|(pid, epoch, seq, used, first)| {
                            ProducerState::default()
                                .with_producer_id(ProducerId(pid))
                                .with_producer_epoch(epoch.into())
                                .with_last_sequence(seq)
                                .with_last_timestamp(used)
                                .with_coordinator_epoch(-1)
                                .with_current_txn_start_offset(first)
                        })
                        .collect();
                    PartitionResponse::default()
                        .with_partition_index(*index)
                        .with_error_code(error)
                        .with_active_producers(active)
                })
                .collect();
            TopicResponse::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}
