//! In-sync replicas and `min.insync.replicas` through the real binary: three `keel`
//! processes, a topic with replication factor 3; a killed follower leaves the ISR (and
//! shows as offline) on every node's Metadata, `acks=all` is refused with
//! NOT_ENOUGH_REPLICAS while the ISR is smaller than `min.insync.replicas` and
//! `acks=1` is not, and the follower rejoins the ISR once it is back.
//!
//! Unlike Kafka, a partition cannot keep a leader with one replica of three alive
//! (Raft needs a majority), so the ISR falls below the minimum here by raising
//! `min.insync.replicas` to 3 with one follower down rather than by killing two.

use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::kafka::*;
use kafka_protocol::messages::{ApiKey, BrokerId};
use keel_protocol::batch::build_batch;

const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const NOT_ENOUGH_REPLICAS: i16 = 19;
const INVALID_CONFIG: i16 = 40;
const TOPIC: &str = "isr";

/// (ISR, offline replicas) of the topic's partition 0 as node `id` answers Metadata.
fn replica_states(c: &Cluster, id: i32) -> Option<(Vec<i32>, Vec<i32>)> {
    let m = c.metadata(id, Some(&[TOPIC]))?;
    let p = m.topics.first()?.partitions.first()?;
    Some((sorted(&p.isr_nodes), sorted(&p.offline_replicas)))
}

fn sorted(nodes: &[BrokerId]) -> Vec<i32> {
    let mut ids: Vec<i32> = nodes.iter().map(|b| b.0).collect();
    ids.sort_unstable();
    ids
}

fn wait_for_states(c: &Cluster, asking: &[i32], isr: &[i32], offline: &[i32]) {
    let wanted = Some((isr.to_vec(), offline.to_vec()));
    let what = format!("nodes {asking:?} report ISR {isr:?} and offline replicas {offline:?}");
    c.wait_until(&what, Duration::from_secs(30), |c| asking.iter().all(|id| replica_states(c, *id) == wanted));
}

/// Produces one record to partition 0 on node `leader`: (error, base offset).
fn produce_one(c: &Cluster, leader: i32, acks: i16, value: &str) -> (i16, i64) {
    let mut k = c.try_connect(leader).expect("the leader answers");
    let r = produce(&mut k, acks, &[(TOPIC, 0, build_batch(0, 0, &[(None, Some(value.as_bytes()))]))]);
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// Produces one record to whichever of `nodes` leads the partition, finding the
/// leader again while leadership moves (as a client does on NOT_LEADER_OR_FOLLOWER: a
/// busy machine can delay heartbeats past an election timeout); returns the answer
/// and the leader that gave it.
fn produce_to_leader(c: &Cluster, nodes: &[i32], acks: i16, value: &str) -> (i16, i64, i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (leader, _) = c.wait_for_leader(nodes, TOPIC, 0, None);
        let (code, offset) = produce_one(c, leader, acks, value);
        if code != NOT_LEADER_OR_FOLLOWER || Instant::now() >= deadline {
            return (code, offset, leader);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sets the topic's `min.insync.replicas` through node `via` (which relays to the
/// controller), retrying while the controller moves; returns the error code.
fn set_min_insync(c: &Cluster, via: i32, value: &str) -> i16 {
    use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
    use kafka_protocol::protocol::StrBytes;
    let config = AlterableConfig::default()
        .with_name(StrBytes::from_static_str("min.insync.replicas"))
        .with_config_operation(0)
        .with_value(Some(StrBytes::from_string(value.to_string())));
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_static_str(TOPIC))
        .with_configs(vec![config])]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer: Option<IncrementalAlterConfigsResponse> =
            c.try_connect(via).and_then(|mut k| k.try_call(ApiKey::IncrementalAlterConfigs, 1, &req));
        match answer.map(|r| r.responses[0].error_code) {
            Some(code) if code != 41 => return code,
            _ => assert!(Instant::now() < deadline, "no controller took the config change"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The topic's `min.insync.replicas` as node `id` describes it.
fn described_min_insync(c: &Cluster, id: i32) -> String {
    min_insync_of(c, id, TOPIC).0
}

/// `topic`'s `min.insync.replicas` as node `id` describes it, and its config source.
fn min_insync_of(c: &Cluster, id: i32, topic: &str) -> (String, i8) {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
    use kafka_protocol::protocol::StrBytes;
    let req = DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_string(topic.to_string()))
        .with_configuration_keys(Some(vec![StrBytes::from_static_str("min.insync.replicas")]))]);
    let mut k = c.try_connect(id).expect("the node answers");
    let r: DescribeConfigsResponse = k.call(ApiKey::DescribeConfigs, 4, &req);
    let entry = r.results[0].configs.first().expect("min.insync.replicas described");
    (entry.value.as_ref().map(|v| v.to_string()).unwrap_or_default(), entry.config_source)
}

/// DescribeTopicPartitions of partition 0 through node `id`: (ISR, offline, ELR).
fn described_partition(c: &Cluster, id: i32) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    use kafka_protocol::messages::describe_topic_partitions_request::TopicRequest;
    use kafka_protocol::messages::{DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse};
    let req = DescribeTopicPartitionsRequest::default()
        .with_topics(vec![TopicRequest::default().with_name(name(TOPIC))])
        .with_response_partition_limit(100);
    let mut k = c.try_connect(id).expect("the node answers");
    let d: DescribeTopicPartitionsResponse = k.call(ApiKey::DescribeTopicPartitions, 0, &req);
    let p = &d.topics[0].partitions[0];
    (sorted(&p.isr_nodes), sorted(&p.offline_replicas), sorted(p.eligible_leader_replicas.as_deref().unwrap_or(&[])))
}

#[test]
fn a_killed_follower_leaves_the_isr_and_min_insync_replicas_guards_acks_all() {
    let mut c = Cluster::start(3);
    let all = [1, 2, 3];
    // KIP-966: the controller recorded min.insync.replicas at the cluster level, so a
    // topic without its own reports it as DYNAMIC_DEFAULT_BROKER_CONFIG, as on Kafka 4.1+.
    assert_eq!(c.create_topic("plain", 1, 3), 0);
    c.wait_until("every node reports the cluster-level min.insync.replicas", Duration::from_secs(30), |c| {
        all.iter().all(|id| min_insync_of(c, *id, "plain") == ("1".to_string(), 3))
    });
    assert_eq!(c.create_topic_with_configs(TOPIC, 1, 3, &[("min.insync.replicas", "2")]), 0, "{}", c.logs());
    assert_eq!(min_insync_of(&c, 1, TOPIC), ("2".to_string(), 1), "a topic's own value is DYNAMIC_TOPIC_CONFIG");
    let (leader, _) = c.wait_for_leader(&all, TOPIC, 0, None);
    wait_for_states(&c, &all, &all, &[]);
    assert_eq!(described_partition(&c, 1), (all.to_vec(), vec![], vec![]));
    assert_eq!(described_min_insync(&c, leader), "2");
    assert_eq!(set_min_insync(&c, leader, "0"), INVALID_CONFIG, "min.insync.replicas is at least 1");
    assert_eq!(produce_one(&c, leader, -1, "all three").0, 0);

    // A follower dies: every live node shows it offline and out of the ISR, and
    // acks=all still has the two in-sync replicas it needs.
    let follower = all.iter().copied().find(|n| *n != leader).unwrap();
    let live: Vec<i32> = all.iter().copied().filter(|n| *n != follower).collect();
    c.node(follower).kill9();
    wait_for_states(&c, &live, &live, &[follower]);
    let other = live.iter().copied().find(|n| *n != leader).unwrap();
    assert_eq!(described_partition(&c, other), (live.clone(), vec![follower], vec![]));
    let (code, offset, _) = produce_to_leader(&c, &live, -1, "two of three");
    assert_eq!(code, 0, "acks=all with ISR 2 and min.insync.replicas 2");

    // Three in-sync replicas wanted, two there: acks=all is refused and appends
    // nothing; acks=1 is unaffected.
    assert_eq!(set_min_insync(&c, other, "3"), 0);
    c.wait_until("every live node installed min.insync.replicas 3", Duration::from_secs(30), |c| {
        live.iter().all(|id| described_min_insync(c, *id) == "3")
    });
    let mut next = offset + 1;
    let refused = loop {
        // The leader may take one more before its settings follow the metadata.
        match produce_to_leader(&c, &live, -1, "refused") {
            (0, o, _) => next = o + 1,
            (code, _, _) => break code,
        }
    };
    assert_eq!(refused, NOT_ENOUGH_REPLICAS);
    let (code, offset, _) = produce_to_leader(&c, &live, 1, "acks=1");
    assert_eq!((code, offset), (0, next), "the refused record was not appended");

    // The follower comes back and catches up: the ISR is whole again everywhere, and
    // acks=all passes with min.insync.replicas 3.
    c.node(follower).spawn();
    wait_for_states(&c, &all, &all, &[]);
    assert_eq!(described_partition(&c, follower), (all.to_vec(), vec![], vec![]));
    let (code, offset, _) = produce_to_leader(&c, &all, -1, "all three again");
    assert_eq!((code, offset), (0, next + 1));
}
