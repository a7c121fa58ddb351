//! Where partition leaders sit, through the real binary: a new topic's leaders are its
//! preferred replicas (the first of each partition's replicas), spread evenly over three
//! nodes; after a node is killed and restarted, automatic balancing hands its
//! partitions back; ElectLeaders (PREFERRED through any node, UNCLEAN) and the admin
//! API's leader endpoint move a partition's leadership on request.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::kafka::name;
use crate::common::Broker;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::{ApiKey, ElectLeadersRequest, ElectLeadersResponse};

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const ELECTION_NOT_NEEDED: i16 = 84;
const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

/// Per partition of `topic` as node `id` answers Metadata: (leader, preferred replica).
fn leaders(c: &Cluster, id: i32, topic: &str) -> Option<Vec<(i32, i32)>> {
    let m = c.metadata(id, Some(&[topic]))?;
    let mut partitions = m.topics.first()?.partitions.clone();
    partitions.sort_by_key(|p| p.partition_index);
    partitions.iter().map(|p| Some((p.leader_id.0, p.replica_nodes.first()?.0))).collect()
}

/// True when every node in `asking` reports each partition led by its preferred replica.
fn preferred_lead(c: &Cluster, asking: &[i32], topic: &str, partitions: usize) -> bool {
    asking.iter().all(|id| {
        leaders(c, *id, topic).is_some_and(|ls| ls.len() == partitions && ls.iter().all(|(l, p)| l == p && *l > 0))
    })
}

/// Partitions led by each node, as node `id` reports them.
fn spread(c: &Cluster, id: i32, topic: &str) -> BTreeMap<i32, usize> {
    let mut counts = BTreeMap::new();
    for (leader, _) in leaders(c, id, topic).expect("the node answers") {
        *counts.entry(leader).or_insert(0) += 1;
    }
    counts
}

fn elect(c: &Cluster, via: i32, election_type: i8, partitions: Option<&[(&str, i32)]>) -> ElectLeadersResponse {
    let topics = partitions.map(|ps| {
        ps.iter()
            .map(|(t, p)| TopicPartitions::default().with_topic(name(t)).with_partitions(vec![*p]))
            .collect::<Vec<_>>()
    });
    let req = ElectLeadersRequest::default()
        .with_election_type(election_type)
        .with_topic_partitions(topics)
        .with_timeout_ms(10_000);
    let mut k = c.try_connect(via).expect("the node answers");
    k.call(ApiKey::ElectLeaders, 2, &req)
}

/// The error of the single partition an ElectLeaders response answers.
fn only_code(r: &ElectLeadersResponse) -> i16 {
    assert_eq!(r.error_code, 0);
    assert_eq!(r.replica_election_results.len(), 1, "{r:?}");
    assert_eq!(r.replica_election_results[0].partition_result.len(), 1, "{r:?}");
    r.replica_election_results[0].partition_result[0].error_code
}

#[test]
fn leaders_spread_over_the_nodes_and_return_after_a_restart() {
    const TOPIC: &str = "spread";
    let all = [1, 2, 3];
    let mut c = Cluster::start_with_yaml(3, "leader_imbalance_check_interval_ms: 2000\n");
    assert_eq!(c.create_topic(TOPIC, 6, 3), 0, "{}", c.logs());
    c.wait_until("every partition is led by its preferred replica", Duration::from_secs(30), |c| {
        preferred_lead(c, &all, TOPIC, 6)
    });
    let even: BTreeMap<i32, usize> = all.iter().map(|n| (*n, 2)).collect();
    assert_eq!(spread(&c, 1, TOPIC), even);

    // Node 2 dies: the others take its partitions.
    c.node(2).kill9();
    let live = [1, 3];
    c.wait_until("nodes 1 and 3 lead every partition", Duration::from_secs(30), |c| {
        live.iter().all(|id| leaders(c, *id, TOPIC).is_some_and(|ls| ls.iter().all(|(l, _)| live.contains(l))))
    });
    assert_eq!(spread(&c, 1, TOPIC).values().sum::<usize>(), 6);

    // Back again: within a few check intervals it leads its two partitions again.
    c.node(2).spawn();
    c.wait_until("the preferred replicas lead again", Duration::from_secs(30), |c| preferred_lead(c, &all, TOPIC, 6));
    for id in all {
        assert_eq!(spread(&c, id, TOPIC), even, "as node {id} reports");
    }
}

#[test]
fn elect_leaders_and_the_admin_api_move_leadership() {
    const TOPIC: &str = "elect";
    let all = [1, 2, 3];
    // No automatic balancing: only the requests below move leaders.
    let mut c = Cluster::start_with_yaml(3, "auto_leader_rebalance_enable: false\n");
    assert_eq!(c.create_topic(TOPIC, 3, 3), 0, "{}", c.logs());
    c.wait_until("every partition is led by its preferred replica", Duration::from_secs(30), |c| {
        preferred_lead(c, &all, TOPIC, 3)
    });
    let (preferred, _) = c.leader(1, TOPIC, 0).expect("a leader");
    let other = all.iter().copied().find(|n| *n != preferred).unwrap();

    // ElectLeaders advertised, and nothing to do yet.
    assert_eq!(only_code(&elect(&c, other, PREFERRED, Some(&[(TOPIC, 0)]))), ELECTION_NOT_NEEDED);
    let everything = elect(&c, other, PREFERRED, None);
    let results: Vec<_> = everything.replica_election_results.iter().flat_map(|t| &t.partition_result).collect();
    assert!(results.is_empty(), "partitions already led by their preferred replica are left out: {results:?}");

    // The admin API moves partition 0 away from its preferred replica; asked on a node
    // that leads nothing of it, answered once the new leader leads.
    let asked_on = all.iter().copied().find(|n| *n != preferred && *n != other).unwrap();
    let path = format!("/v1/partitions/{TOPIC}/0/leader?to={other}");
    let answer = c.node(asked_on).admin_request("POST", &path);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(&format!(r#""leader":{other}"#)), "{answer}");
    c.wait_until("every node sees the new leader", Duration::from_secs(10), |c| {
        all.iter().all(|id| c.leader(*id, TOPIC, 0).map(|(l, _)| l) == Some(other))
    });
    let again = c.node(asked_on).admin_request("POST", &path);
    assert!(again.starts_with("HTTP/1.1 200") && again.contains(r#""moved":false"#), "{again}");
    let refused = c.node(1).admin_request("POST", &format!("/v1/partitions/{TOPIC}/0/leader?to=9"));
    assert!(refused.starts_with("HTTP/1.1 400"), "not a replica: {refused}");
    let unknown = c.node(1).admin_request("POST", "/v1/partitions/nope/0/leader");
    assert!(unknown.starts_with("HTTP/1.1 404"), "{unknown}");
    let get = c.node(1).admin_request("GET", &path);
    assert!(get.starts_with("HTTP/1.1 405"), "{get}");

    // ElectLeaders PREFERRED through a node that does not lead the partition moves it
    // back, and answers once the preferred replica leads.
    let via = all.iter().copied().find(|n| *n != other).unwrap();
    assert_eq!(only_code(&elect(&c, via, PREFERRED, Some(&[(TOPIC, 0)]))), 0);
    // Answered once the preferred replica led; an election on a busy machine may move
    // it again right after, so the view is awaited rather than sampled once.
    c.wait_until("the preferred replica leads partition 0 again", Duration::from_secs(10), |c| {
        c.leader(via, TOPIC, 0).map(|(l, _)| l) == Some(preferred)
    });
    assert_eq!(only_code(&elect(&c, via, PREFERRED, Some(&[(TOPIC, 0)]))), ELECTION_NOT_NEEDED);
    assert_eq!(only_code(&elect(&c, via, PREFERRED, Some(&[("nope", 0)]))), UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(only_code(&elect(&c, via, PREFERRED, Some(&[(TOPIC, 7)]))), UNKNOWN_TOPIC_OR_PARTITION);

    // All partitions at once, through the node the admin API moved partition 1 to.
    let (preferred_1, _) = c.leader(1, TOPIC, 1).expect("a leader");
    let other_1 = all.iter().copied().find(|n| *n != preferred_1).unwrap();
    let moved = c.node(other_1).admin_request("POST", &format!("/v1/partitions/{TOPIC}/1/leader?to={other_1}"));
    assert!(moved.starts_with("HTTP/1.1 200"), "{moved}");
    let everything = elect(&c, other_1, PREFERRED, None);
    let results: Vec<_> = everything.replica_election_results.iter().flat_map(|t| &t.partition_result).collect();
    assert_eq!(results.len(), 1, "only the moved partition is answered: {everything:?}");
    assert_eq!((results[0].partition_id, results[0].error_code), (1, 0));
    c.wait_until("every node sees the preferred leaders", Duration::from_secs(10), |c| {
        preferred_lead(c, &all, TOPIC, 3)
    });

    // UNCLEAN: Raft never elects an out-of-sync replica; a partition with a leader
    // needs no election.
    assert_eq!(only_code(&elect(&c, 2, UNCLEAN, Some(&[(TOPIC, 2)]))), ELECTION_NOT_NEEDED);
}

#[test]
fn a_single_node_leads_every_partition_already() {
    let b = Broker::start(1);
    let mut k = b.connect();
    crate::common::kafka::create_topic(&mut k, "solo", 2);
    let req = ElectLeadersRequest::default()
        .with_election_type(PREFERRED)
        .with_topic_partitions(Some(vec![TopicPartitions::default()
            .with_topic(name("solo"))
            .with_partitions(vec![0, 1])]))
        .with_timeout_ms(1_000);
    let r: ElectLeadersResponse = k.call(ApiKey::ElectLeaders, 1, &req);
    let codes: Vec<i16> = r.replica_election_results[0].partition_result.iter().map(|p| p.error_code).collect();
    assert_eq!(codes, vec![ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED]);
    let v0: ElectLeadersResponse = k.call(ApiKey::ElectLeaders, 0, &req.clone().with_topic_partitions(None));
    assert!(v0.replica_election_results.iter().all(|t| t.partition_result.is_empty()), "{v0:?}");
}

/// KIP-951 and KIP-320 on a cluster: a follower refusing a Produce or a Fetch names
/// the partition's leader, its epoch and its endpoint, so a client can go there
/// without a metadata refresh; the leader checks a Fetch's CurrentLeaderEpoch as
/// Kafka does.
#[test]
fn a_follower_names_the_leader_and_fetch_checks_the_leader_epoch() {
    use crate::common::cluster::produce_request;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProduceResponse};
    use keel_protocol::batch::build_batch;

    const TOPIC: &str = "kip951";
    const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    const FENCED_LEADER_EPOCH: i16 = 74;
    const UNKNOWN_LEADER_EPOCH: i16 = 75;
    let mut c = Cluster::start(3);
    assert_eq!(c.create_topic(TOPIC, 1, 3), 0, "{}", c.logs());
    let (leader, epoch) = c.wait_for_leader(&[1, 2, 3], TOPIC, 0, None);
    let follower = [1, 2, 3].into_iter().find(|n| *n != leader).expect("a follower");
    let leader_port = i32::from(c.node(leader).port);
    let topic_id = c.metadata(leader, Some(&[TOPIC])).expect("metadata").topics[0].topic_id;

    let batch = build_batch(0, 0, &[(None, Some(b"v".as_slice()))]);
    let mut k = c.try_connect(follower).expect("the follower answers");
    let r: ProduceResponse = k.call(ApiKey::Produce, 11, &produce_request(TOPIC, 0, batch));
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!((p.current_leader.leader_id.0, p.current_leader.leader_epoch), (leader, epoch));
    let endpoints: Vec<(i32, i32)> = r.node_endpoints.iter().map(|e| (e.node_id.0, e.port)).collect();
    assert_eq!(endpoints, vec![(leader, leader_port)]);

    // Version 16 names the topic by id and carries the leader's endpoint.
    let fetch = |k: &mut crate::common::Conn, current_leader_epoch: i32| -> FetchResponse {
        let partition = FetchPartition::default()
            .with_partition(0)
            .with_fetch_offset(0)
            .with_partition_max_bytes(1 << 20)
            .with_current_leader_epoch(current_leader_epoch);
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default().with_topic_id(topic_id).with_partitions(vec![partition])]);
        k.call(ApiKey::Fetch, 16, &req)
    };
    let r = fetch(&mut k, epoch);
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!((p.current_leader.leader_id.0, p.current_leader.leader_epoch), (leader, epoch));
    let endpoints: Vec<(i32, i32)> = r.node_endpoints.iter().map(|e| (e.node_id.0, e.port)).collect();
    assert_eq!(endpoints, vec![(leader, leader_port)]);

    let mut k = c.try_connect(leader).expect("the leader answers");
    let code = |r: &FetchResponse| r.responses[0].partitions[0].error_code;
    assert_eq!(code(&fetch(&mut k, epoch)), 0);
    assert_eq!(code(&fetch(&mut k, -1)), 0, "-1 skips the check");
    assert_eq!(code(&fetch(&mut k, epoch + 1)), UNKNOWN_LEADER_EPOCH);
    if epoch > 0 {
        let r = fetch(&mut k, epoch - 1);
        assert_eq!(code(&r), FENCED_LEADER_EPOCH);
        let p = &r.responses[0].partitions[0];
        assert_eq!((p.current_leader.leader_id.0, p.current_leader.leader_epoch), (leader, epoch));
    }
}
