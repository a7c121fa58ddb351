//! Membership through the real binary. A fourth broker joins a three-node cluster, and
//! a partition moves to it (AlterPartitionReassignments): the new replica
//! copies the log from the leader's log start (a snapshot, then Raft appends), becomes
//! a voter in one joint change, the replica left out removes its copy, and the moved
//! partition keeps every acknowledged record through a kill of its new leader, and
//! through kills of its leader while it moves. A replica moved off a node that crashed
//! before removing it goes at the node's next start. A broker the controller stops hearing
//! from is fenced: out of Metadata and of new placements until it registers again.

use std::time::Duration;

use crate::common::cluster::{produce_all, read_all, Cluster};
use crate::common::kafka::{delete_records, name};
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};

const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;

/// One reassignment under way: (partition, replicas, adding, removing).
type Ongoing = (i32, Vec<i32>, Vec<i32>, Vec<i32>);

/// The reassignments under way as node `id` lists them.
fn ongoing(c: &Cluster, id: i32, topic: &str) -> Vec<Ongoing> {
    let req = ListPartitionReassignmentsRequest::default().with_timeout_ms(10_000).with_topics(Some(vec![
        ListPartitionReassignmentsTopics::default().with_name(name(topic)).with_partition_indexes(vec![0, 1]),
    ]));
    let Some(mut k) = c.try_connect(id) else { return Vec::new() };
    let r: ListPartitionReassignmentsResponse = k.call(ApiKey::ListPartitionReassignments, 0, &req);
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<i32>>();
    r.topics
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| (p.partition_index, ids(&p.replicas), ids(&p.adding_replicas), ids(&p.removing_replicas)))
        .collect()
}

fn replicas(c: &Cluster, id: i32, topic: &str) -> Option<Vec<i32>> {
    let m = c.metadata(id, Some(&[topic]))?;
    Some(m.topics.first()?.partitions.first()?.replica_nodes.iter().map(|b| b.0).collect())
}

#[test]
fn a_partition_moves_to_a_new_replica_with_its_whole_log() {
    const TOPIC: &str = "moving";
    let all = [1, 2, 3, 4];
    let mut c = Cluster::start_with_yaml(3, "leader_imbalance_check_interval_ms: 1000\n");
    assert_eq!(c.create_topic(TOPIC, 1, 3), 0, "{}", c.logs());
    // The fourth broker joins: it is not among the peers (the metadata voters).
    assert_eq!(c.join(), 4);
    c.wait_for_leader(&all, TOPIC, 0, None);
    let before = replicas(&c, 1, TOPIC).expect("metadata");
    let newcomer = all.iter().copied().find(|n| !before.contains(n)).expect("a fourth node");
    let leaving = before[0];
    // The newcomer becomes the preferred replica, in place of the first one.
    let target: Vec<i32> = std::iter::once(newcomer).chain(before[1..].iter().copied()).collect();

    // About 2.4 MB, so the newcomer's copy takes several Fetch requests.
    let pad = "x".repeat(6_000);
    let values: Vec<String> = (0..400).map(|i| format!("v{i}-{pad}")).collect();
    assert_eq!(produce_all(&c, &all, TOPIC, 0, &values[..300]), values[..300]);
    // The copy starts at the leader's log start, not at offset 0.
    let (leader, _) = c.wait_for_leader(&all, TOPIC, 0, None);
    let mut k = c.try_connect(leader).expect("the leader answers");
    assert_eq!(delete_records(&mut k, TOPIC, 0, 50), (0, 50));

    // Refused: unknown brokers, duplicates, no move to cancel.
    assert_eq!(c.reassign(1, TOPIC, 0, Some(&[1, 2, 9])), INVALID_REPLICA_ASSIGNMENT);
    assert_eq!(c.reassign(1, TOPIC, 0, Some(&[1, 1, 2])), INVALID_REPLICA_ASSIGNMENT);
    assert_eq!(c.reassign(1, TOPIC, 0, None), NO_REASSIGNMENT_IN_PROGRESS);

    let leaving_copy = c.node(leaving).dir.join("data").join(format!("{TOPIC}-0"));
    assert!(leaving_copy.is_dir(), "the leaving node holds a replica");
    // Asked through the node leaving (not necessarily the controller: it relays).
    assert_eq!(c.reassign(leaving, TOPIC, 0, Some(&target)), 0);
    let listed = ongoing(&c, newcomer, TOPIC);
    if let Some((_, replicas, adding, removing)) = listed.first() {
        assert_eq!((adding.clone(), removing.clone()), (vec![newcomer], vec![leaving]), "{listed:?}");
        assert_eq!(replicas.len(), 4, "every replica while it moves: {listed:?}");
    }
    // Producing goes on during the move.
    assert_eq!(produce_all(&c, &all, TOPIC, 0, &values[300..]), values[300..]);
    c.wait_until("the move completes on every node", Duration::from_secs(60), |c| {
        all.iter().all(|id| ongoing(c, *id, TOPIC).is_empty() && replicas(c, *id, TOPIC) == Some(target.clone()))
    });
    // The newcomer, now the preferred replica, takes the leadership, and serves the
    // whole log from the log start.
    c.wait_until("the newcomer leads", Duration::from_secs(30), |c| {
        all.iter().all(|id| c.leader(*id, TOPIC, 0).map(|(l, _)| l) == Some(newcomer))
    });
    assert_eq!(read_all(&c, newcomer, TOPIC, 0), values[50..], "{}", c.logs());

    // The node left out removed its replica.
    c.wait_until("the replica left out is removed", Duration::from_secs(10), |_| !leaving_copy.exists());

    // The new leader dies: the two others still have everything.
    c.node(newcomer).kill9();
    let rest: Vec<i32> = all.iter().copied().filter(|n| *n != newcomer).collect();
    let (next, _) = c.wait_for_leader(&rest, TOPIC, 0, Some(newcomer));
    assert_ne!(next, leaving);
    assert_eq!(read_all(&c, next, TOPIC, 0), values[50..]);
    // And it comes back from its copied log.
    c.node(newcomer).spawn();
    let more: Vec<String> = (400..450).map(|i| format!("v{i}")).collect();
    assert_eq!(produce_all(&c, &all, TOPIC, 0, &more), more);
    c.wait_until("the newcomer leads again", Duration::from_secs(30), |c| {
        c.leader(newcomer, TOPIC, 0).map(|(l, _)| l) == Some(newcomer)
    });
    let expected: Vec<String> = values[50..].iter().chain(&more).cloned().collect();
    assert_eq!(read_all(&c, newcomer, TOPIC, 0), expected);
}

/// A planned move of partition 0 of a topic: the fourth node comes in as the preferred
/// replica, and a follower of the first leader leaves.
struct Move {
    first_leader: i32,
    before: Vec<i32>,
    newcomer: i32,
    leaving: i32,
    target: Vec<i32>,
}

/// Three nodes with `topic` (one partition, three replicas), and a fourth joined.
fn cluster_with_a_move(topic: &str) -> (Cluster, Move) {
    let all = [1, 2, 3, 4];
    let mut c = Cluster::start(3);
    assert_eq!(c.create_topic(topic, 1, 3), 0, "{}", c.logs());
    assert_eq!(c.join(), 4);
    let (first_leader, _) = c.wait_for_leader(&all, topic, 0, None);
    let before = replicas(&c, 1, topic).expect("metadata");
    let newcomer = all.iter().copied().find(|n| !before.contains(n)).expect("a fourth node");
    let leaving = before.iter().copied().find(|n| *n != first_leader).expect("a follower");
    let target = std::iter::once(newcomer).chain(before.iter().copied().filter(|n| *n != leaving)).collect();
    (c, Move { first_leader, before, newcomer, leaving, target })
}

/// A node that installed the metadata moving its replica away and crashed before
/// removing the replica (here: the move made while it was down, and its saved metadata
/// replaced by the newer copy, as that crash leaves it) removes the replica at its next
/// start; when the partition moves back to it later, it copies the log afresh and
/// serves all of it.
#[test]
fn a_replica_moved_off_a_node_that_crashed_before_removing_it_goes_at_its_start() {
    const TOPIC: &str = "moved-off-while-down";
    let all = [1, 2, 3, 4];
    let (mut c, Move { first_leader, before, leaving, target, .. }) = cluster_with_a_move(TOPIC);
    let values: Vec<String> = (0..200).map(|i| format!("v{i}")).collect();
    assert_eq!(produce_all(&c, &all, TOPIC, 0, &values[..100]), values[..100]);
    c.wait_until("every replica in sync", Duration::from_secs(30), |c| c.all_in_sync(&all, TOPIC, 3));

    let leaving_copy = c.node(leaving).dir.join("data").join(format!("{TOPIC}-0"));
    assert!(leaving_copy.is_dir(), "the leaving node holds a replica");
    c.node(leaving).kill9();
    let live: Vec<i32> = all.iter().copied().filter(|n| *n != leaving).collect();
    assert_eq!(c.reassign(first_leader, TOPIC, 0, Some(&target)), 0);
    c.wait_until("the move completes", Duration::from_secs(60), |c| {
        live.iter().all(|id| ongoing(c, *id, TOPIC).is_empty() && replicas(c, *id, TOPIC) == Some(target.clone()))
    });
    assert_eq!(produce_all(&c, &live, TOPIC, 0, &values[100..150]), values[100..150]);

    // The crash's state: the newer metadata saved, the replica still on disk.
    let saved = c.node(first_leader).dir.join("data/cluster/metadata.json");
    std::fs::copy(saved, c.node(leaving).dir.join("data/cluster/metadata.json")).unwrap();
    c.node(leaving).spawn();
    c.wait_until("the replica left behind is removed", Duration::from_secs(30), |_| !leaving_copy.exists());
    assert!(c.node(leaving).log().contains("its replica moved off this node"), "{}", c.node(leaving).log());

    // The partition moves back: the node copies the log afresh and serves every record.
    assert_eq!(c.reassign(first_leader, TOPIC, 0, Some(&before)), 0);
    c.wait_until("the move back completes", Duration::from_secs(60), |c| {
        all.iter().all(|id| ongoing(c, *id, TOPIC).is_empty() && replicas(c, *id, TOPIC) == Some(before.clone()))
    });
    assert_eq!(produce_all(&c, &all, TOPIC, 0, &values[150..]), values[150..]);
    c.wait_until("every replica in sync", Duration::from_secs(30), |c| c.all_in_sync(&all, TOPIC, 3));
    c.move_leader(&all, TOPIC, leaving, Duration::from_secs(30));
    assert_eq!(read_all(&c, leaving, TOPIC, 0), values, "{}", c.logs());
}

/// SIGKILL during a membership change: while a partition moves to a fourth broker, the
/// newcomer (copying the log) and the leader of the moment are killed and restarted in
/// turn (at most four kills), with records produced between the kills. The move still completes, and the new
/// replica set holds every acknowledged record once, in order (a produce retried after
/// an ambiguous failure may add a second copy, which is counted and shown, not lost).
#[test]
fn a_move_completes_through_kills_of_its_leader_and_newcomer() {
    const TOPIC: &str = "moving-under-kills";
    let all = [1, 2, 3, 4];
    // A follower leaves, so the leaders killed below stay members.
    let (mut c, Move { newcomer, target, .. }) = cluster_with_a_move(TOPIC);

    // About 18 MB, so that the newcomer's copy is under way at the first kill.
    let pad = "x".repeat(6_000);
    let values: Vec<String> = (0..3_200).map(|i| format!("v{i}-{pad}")).collect();
    let mut acked = produce_all(&c, &all, TOPIC, 0, &values[..3_000]);
    assert_eq!(c.reassign(1, TOPIC, 0, Some(&target)), 0);
    let mut kills = 0;
    let mut next = 3_000;
    while kills < 4 && all.iter().any(|id| !ongoing(&c, *id, TOPIC).is_empty()) {
        let victim = if kills % 2 == 0 { newcomer } else { c.wait_for_leader(&all, TOPIC, 0, None).0 };
        c.node(victim).kill9();
        kills += 1;
        let live: Vec<i32> = all.iter().copied().filter(|n| *n != victim).collect();
        acked.extend(produce_all(&c, &live, TOPIC, 0, &values[next..next + 50]));
        next += 50;
        c.node(victim).spawn();
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(kills > 0, "the move ended before the first kill");
    acked.extend(produce_all(&c, &all, TOPIC, 0, &values[next..]));
    c.wait_until("the move completes on every node", Duration::from_secs(90), |c| {
        all.iter().all(|id| ongoing(c, *id, TOPIC).is_empty() && replicas(c, *id, TOPIC) == Some(target.clone()))
    });
    assert_eq!(acked, values, "every value was acknowledged");
    let (leader, _) = c.wait_for_leader(&all, TOPIC, 0, None);
    let mut read = read_all(&c, leader, TOPIC, 0);
    let length = read.len();
    let mut seen = std::collections::HashSet::new();
    read.retain(|v| seen.insert(v.clone()));
    eprintln!("{kills} kills during the move; {length} records read, {} second copies", length - read.len());
    assert_eq!(read.len(), values.len(), "records lost");
    assert!(read == values, "records out of order");
}

/// The broker ids node `id` lists in Metadata.
fn brokers(c: &Cluster, id: i32) -> Option<Vec<i32>> {
    let mut ids: Vec<i32> = c.metadata(id, None)?.brokers.iter().map(|b| b.node_id.0).collect();
    ids.sort_unstable();
    Some(ids)
}

#[test]
fn a_silent_broker_is_fenced_until_it_registers_again() {
    const INVALID_REPLICATION_FACTOR: i16 = 38;
    let mut c = Cluster::start_with_yaml(3, "broker_session_timeout_ms: 3000\n");
    c.node(3).kill9();
    // Left out of Metadata, and of placements, once the controller has not heard from
    // it for the session timeout.
    c.wait_until("node 3 is fenced", Duration::from_secs(30), |c| {
        [1, 2].iter().all(|id| brokers(c, *id) == Some(vec![1, 2]))
    });
    assert_eq!(c.create_topic("fenced-rf3", 1, 3), INVALID_REPLICATION_FACTOR);
    assert_eq!(c.create_topic("fenced-rf2", 4, 2), 0);
    c.wait_for_leader(&[1, 2], "fenced-rf2", 3, None);
    let m = c.metadata(1, Some(&["fenced-rf2"])).expect("metadata");
    for p in &m.topics[0].partitions {
        assert!(!p.replica_nodes.iter().any(|b| b.0 == 3), "placed on a fenced broker: {p:?}");
    }
    // Back once it registers again.
    c.node(3).spawn();
    c.wait_until("node 3 is back", Duration::from_secs(30), |c| {
        [1, 2, 3].iter().all(|id| brokers(c, *id) == Some(vec![1, 2, 3]))
    });
    assert_eq!(c.create_topic("fenced-rf3", 1, 3), 0);
}
