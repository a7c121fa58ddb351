//! Writing transaction markers: to the partitions this node leads directly on their
//! owner shards, to the others with a WriteTxnMarkers request to their leader, as
//! Kafka's coordinator does. A marker on a `__consumer_offsets` partition also ends
//! the producer's transactional offset commits held there.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::{ApiKey, ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse};

use crate::cluster::nodes;
use crate::config::OFFSETS_TOPIC;
use crate::errors;
use crate::shard::dispatch::Serve;
use crate::shard::fanout::{answer_each, answer_partitions};
use crate::shard::Shard;
use crate::transactions::state::TxnPartition;
use crate::util::str_bytes;

/// How long one marker may wait to become durable (committed).
const MARKER_TIMEOUT: Duration = Duration::from_secs(10);
const RESPONSE_BYTES_MAX: usize = 1 << 20;

/// A marker to write: the producer, its epoch, and the outcome.
#[derive(Debug, Clone, Copy)]
pub struct Marker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
}

/// Writes `marker` to each partition; one error code per partition, in order.
pub async fn write(shard: &Rc<Shard>, marker: Marker, partitions: &[TxnPartition]) -> Vec<i16> {
    if shard.replication.is_none() {
        return write_local(shard, marker, partitions.to_vec()).await;
    }
    let me = shard.config.node_id;
    let meta = shard.meta();
    let mut by_leader: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    let mut codes = vec![errors::NONE; partitions.len()];
    for (i, (topic, p)) in partitions.iter().enumerate() {
        let leader = match meta.topics.get(topic) {
            None => {
                codes[i] = errors::UNKNOWN_TOPIC_OR_PARTITION;
                continue;
            }
            // An unreplicated topic (every node has its own copy): written here.
            Some(t) => nodes::partition_view(shard, t, *p).map_or(me, |v| v.leader),
        };
        by_leader.entry(leader).or_default().push(i);
    }
    let calls = by_leader.into_iter().map(|(leader, slots)| {
        let shard = shard.clone();
        let wanted: Vec<TxnPartition> = slots.iter().map(|i| partitions[*i].clone()).collect();
        async move {
            let answer = match leader {
                l if l == me => write_local(&shard, marker, wanted).await,
                l if l < 0 => vec![errors::NOT_LEADER_OR_FOLLOWER; wanted.len()],
                l => write_remote(&shard, l, marker, &wanted).await,
            };
            (slots, answer)
        }
    });
    for (slots, answer) in keel_storage::join::join_all(calls.collect()).await {
        for (i, code) in slots.into_iter().zip(answer) {
            codes[i] = code;
        }
    }
    codes
}

/// Writes `marker` to partitions this node holds, on their owner shards.
pub async fn write_local(shard: &Rc<Shard>, marker: Marker, partitions: Vec<TxnPartition>) -> Vec<i16> {
    let items = partitions.into_iter().map(|(t, p)| Ok((t, p, ()))).collect();
    answer_partitions(shard, items, errors::UNKNOWN_TOPIC_OR_PARTITION, |items| WriteMarkers { marker, items }).await
}

/// On an owner shard: writes `marker` to each of its partitions, one after another.
pub struct WriteMarkers {
    marker: Marker,
    items: Vec<(String, i32, ())>,
}

impl Serve for WriteMarkers {
    async fn serve(self, shard: Rc<Shard>) -> Vec<i16> {
        let marker = self.marker;
        answer_each(&shard, self.items, move |s, topic, partition, ()| async move {
            let Some(p) = s.partition(&topic, partition) else {
                return errors::NOT_LEADER_OR_FOLLOWER;
            };
            let Marker { producer_id, producer_epoch, commit, coordinator_epoch } = marker;
            let code = p.write_marker(&s, producer_id, producer_epoch, commit, coordinator_epoch, MARKER_TIMEOUT).await;
            if code == errors::NONE && topic == OFFSETS_TOPIC {
                s.coordinator.borrow_mut().complete_txn_offsets(producer_id, commit);
            }
            code
        })
        .await
    }
}

/// WriteTxnMarkers to node `leader`; every partition fails retriably if the call does.
async fn write_remote(shard: &Shard, leader: i32, marker: Marker, partitions: &[TxnPartition]) -> Vec<i16> {
    let failed = vec![errors::NOT_LEADER_OR_FOLLOWER; partitions.len()];
    let Some(broker) = shard.meta().brokers.get(&leader).cloned() else {
        return failed;
    };
    let mut topics: Vec<WritableTxnMarkerTopic> = Vec::new();
    for (topic, p) in partitions {
        match topics.last_mut() {
            Some(t) if t.name.0.as_str() == topic.as_str() => t.partition_indexes.push(*p),
            _ => topics.push(
                WritableTxnMarkerTopic::default()
                    .with_name(TopicName(str_bytes(topic)))
                    .with_partition_indexes(vec![*p]),
            ),
        }
    }
    let request = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(marker.producer_id))
        .with_producer_epoch(marker.producer_epoch)
        .with_transaction_result(marker.commit)
        .with_coordinator_epoch(marker.coordinator_epoch)
        .with_topics(topics)]);
    let addr = format!("{}:{}", broker.host, broker.port);
    let answer: Result<WriteTxnMarkersResponse, String> = crate::outbound::call(
        &addr,
        ApiKey::WriteTxnMarkers,
        1,
        &request,
        RESPONSE_BYTES_MAX,
        MARKER_TIMEOUT + Duration::from_secs(1),
    )
    .await;
    let response = match answer {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(leader, %addr, error = %e, "writing transaction markers on another node failed");
            return failed;
        }
    };
    let results = response.markers.into_iter().flat_map(|m| m.topics);
    let by_partition: BTreeMap<(String, i32), i16> = results
        .flat_map(|t| {
            let name = t.name.0.to_string();
            t.partitions.into_iter().map(move |p| ((name.clone(), p.partition_index), p.error_code))
        })
        .collect();
    partitions.iter().map(|tp| by_partition.get(tp).copied().unwrap_or(errors::NOT_LEADER_OR_FOLLOWER)).collect()
}
