//! The group coordinator fails over with its `__consumer_offsets` partition: three
//! `keel` processes, offsets committed for a group, kill -9 of the group's
//! coordinator; FindCoordinator names another node within seconds, and there
//! OffsetFetch returns every offset committed before the kill, and so it does after a
//! controlled shutdown of the next coordinator. A node that does not lead the group's
//! partition answers NOT_COORDINATOR. A coordinator paused while another took over
//! never answers from what it held when it resumes.

use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "failover-committed";
const NOT_COORDINATOR: i16 = 16;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
/// Errors a client retries while the coordinator moves or loads.
const RETRIABLE: [i16; 3] = [COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR];

/// Committed offsets as OffsetFetch answers them: (partition, offset, metadata).
type Committed = Vec<(i32, i64, String)>;

fn group_id(group: &str) -> GroupId {
    GroupId(StrBytes::from_string(group.to_string()))
}

/// (error, coordinator node) as node `asking` answers FindCoordinator; `None` if it
/// does not answer.
fn find_coordinator(c: &Cluster, asking: i32, group: &str) -> Option<(i16, i32)> {
    let req = FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.to_string()));
    let r: FindCoordinatorResponse = c.try_connect(asking)?.try_call(ApiKey::FindCoordinator, 3, &req)?;
    Some((r.error_code, r.node_id.0))
}

/// Waits until every node in `asking` names the same coordinator, other than `not`.
fn wait_for_coordinator(c: &Cluster, asking: &[i32], group: &str, not: Option<i32>) -> i32 {
    let mut found = -1;
    c.wait_until(&format!("a coordinator for {group} other than {not:?}"), Duration::from_secs(30), |c| {
        let seen: Vec<Option<(i16, i32)>> = asking.iter().map(|id| find_coordinator(c, *id, group)).collect();
        found = seen[0].map_or(-1, |(_, node)| node);
        seen.iter().all(|s| *s == Some((0, found))) && Some(found) != not
    });
    found
}

/// Commits `offsets` (partition, offset) of TOPIC for `group` at node `at`: one code
/// per partition.
fn commit(c: &Cluster, at: i32, group: &str, offsets: &[(i32, i64)]) -> Option<Vec<i16>> {
    let req = crate::common::kafka::offset_commit_request(group, TOPIC, offsets);
    let r: OffsetCommitResponse = c.try_connect(at)?.try_call(ApiKey::OffsetCommit, 8, &req)?;
    Some(r.topics[0].partitions.iter().map(|p| p.error_code).collect())
}

/// (group error, [(partition, offset, metadata)]) as node `at` answers OffsetFetch.
fn fetch(c: &Cluster, at: i32, group: &str) -> Option<(i16, Committed)> {
    let req = OffsetFetchRequest::default().with_group_id(group_id(group)).with_topics(Some(vec![
        OffsetFetchRequestTopic::default()
            .with_name(crate::common::kafka::name(TOPIC))
            .with_partition_indexes(vec![0, 1, 2]),
    ]));
    let r: OffsetFetchResponse = c.try_connect(at)?.try_call(ApiKey::OffsetFetch, 7, &req)?;
    let offsets = r
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition_index, p.committed_offset, p.metadata.as_ref().map_or(String::new(), |m| m.to_string())))
        .collect();
    Some((r.error_code, offsets))
}

/// Commits at the group's coordinator, retrying while it loads or moves.
fn commit_until_done(c: &Cluster, nodes: &[i32], group: &str, offsets: &[(i32, i64)]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let coordinator = wait_for_coordinator(c, nodes, group, None);
        match commit(c, coordinator, group, offsets) {
            Some(codes) if codes.iter().all(|code| *code == 0) => return,
            Some(codes) => assert!(codes.iter().all(|code| RETRIABLE.contains(code)), "commit failed: {codes:?}"),
            None => {}
        }
        assert!(Instant::now() < deadline, "the commit never succeeded; logs:\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The committed offsets at node `at`, retrying while it loads the group.
fn fetch_when_loaded(c: &Cluster, at: i32, group: &str) -> Committed {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match fetch(c, at, group) {
            Some((0, offsets)) => return offsets,
            Some((code, _)) => assert!(RETRIABLE.contains(&code), "OffsetFetch failed: {code}"),
            None => {}
        }
        assert!(Instant::now() < deadline, "node {at} never served {group}; logs:\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn committed_offsets_survive_the_coordinator_kill_9() {
    let mut c = Cluster::start(3);
    assert_eq!(c.create_topic(TOPIC, 3, 3), 0);
    let groups = ["failover-group-a", "failover-group-b", "failover-group-c"];
    for (g, group) in groups.iter().enumerate() {
        let g = g as i64;
        commit_until_done(&c, &[1, 2, 3], group, &[(0, 100 + g), (2, 300 + g)]);
        // A later commit replaces the first.
        commit_until_done(&c, &[1, 2, 3], group, &[(0, 110 + g)]);
    }
    let group = groups[0];
    let coordinator = wait_for_coordinator(&c, &[1, 2, 3], group, None);
    let want = vec![(0, 110, "meta-110".to_string()), (1, -1, String::new()), (2, 300, "meta-300".to_string())];
    assert_eq!(fetch_when_loaded(&c, coordinator, group), want);
    // Only the leader of the group's partition coordinates it.
    for other in (1..=3).filter(|n| *n != coordinator) {
        assert_eq!(fetch(&c, other, group).map(|(code, _)| code), Some(NOT_COORDINATOR), "node {other}");
    }

    c.node(coordinator).kill9();
    let killed = Instant::now();
    let live: Vec<i32> = (1..=3).filter(|n| *n != coordinator).collect();
    let moved_to = wait_for_coordinator(&c, &live, group, Some(coordinator));
    let moved_in = killed.elapsed();
    assert!(live.contains(&moved_to));
    assert!(moved_in < Duration::from_secs(10), "the coordinator moved only after {moved_in:?}");
    assert_eq!(fetch_when_loaded(&c, moved_to, group), want, "offsets at the new coordinator");
    eprintln!("coordinator of {group} moved from node {coordinator} to {moved_to} in {moved_in:?}");
    // Every group's offsets are there, wherever its coordinator is now.
    for (g, other) in groups.iter().enumerate().skip(1) {
        let at = wait_for_coordinator(&c, &live, other, Some(coordinator));
        let g = g as i64;
        let want = vec![
            (0, 110 + g, format!("meta-{}", 110 + g)),
            (1, -1, String::new()),
            (2, 300 + g, format!("meta-{}", 300 + g)),
        ];
        assert_eq!(fetch_when_loaded(&c, at, other), want, "{other}");
    }

    // Commits go on at the new coordinator and reach the restarted node too.
    commit_until_done(&c, &live, group, &[(1, 250)]);
    c.node(coordinator).spawn();
    let want =
        vec![(0, 110, "meta-110".to_string()), (1, 250, "meta-250".to_string()), (2, 300, "meta-300".to_string())];
    let at = wait_for_coordinator(&c, &[1, 2, 3], group, None);
    assert_eq!(fetch_when_loaded(&c, at, group), want, "after the restart");

    // A controlled shutdown hands the partition's leadership over: the group moves
    // with it while the old coordinator is still up, and loses nothing.
    c.node(at).stop();
    let others: Vec<i32> = (1..=3).filter(|n| *n != at).collect();
    let next = wait_for_coordinator(&c, &others, group, Some(at));
    assert_eq!(fetch_when_loaded(&c, next, group), want, "after the controlled shutdown of node {at}");
}

/// A coordinator stopped (SIGSTOP) long enough for another to take over still believes
/// it leads when it resumes, until it hears of the later term. An OffsetFetch sent to
/// it after a newer commit at its successor, answered as soon as it resumes, must not
/// return the offset it held: it confirms its leadership first (ReadIndex), fails to,
/// and answers NOT_COORDINATOR (or, if it already learnt, the same). Three rounds, each
/// pausing the coordinator of the moment.
#[test]
fn a_paused_coordinator_does_not_answer_from_memory_when_it_resumes() {
    let mut c = Cluster::start(3);
    assert_eq!(c.create_topic(TOPIC, 3, 3), 0);
    let group = "paused-coordinator";
    let mut offset = 100;
    commit_until_done(&c, &[1, 2, 3], group, &[(0, offset)]);
    for round in 0..3 {
        let paused = wait_for_coordinator(&c, &[1, 2, 3], group, None);
        assert_eq!(fetch_when_loaded(&c, paused, group)[0].1, offset);
        let mut stale = c.try_connect(paused).expect("the coordinator accepts a connection");
        c.node(paused).pause();
        let live: Vec<i32> = (1..=3).filter(|n| *n != paused).collect();
        wait_for_coordinator(&c, &live, group, Some(paused));
        offset += 100;
        commit_until_done(&c, &live, group, &[(0, offset)]);

        // Sent after the commit was acknowledged; read when the paused node resumes.
        let req = OffsetFetchRequest::default().with_group_id(group_id(group)).with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(crate::common::kafka::name(TOPIC))
                .with_partition_indexes(vec![0]),
        ]));
        let (correlation, frame) = stale.frame(ApiKey::OffsetFetch, 7, &req);
        stale.send_raw(&frame);
        c.node(paused).resume();
        let mut answer = stale.read_frame().expect("the resumed node answers");
        assert_eq!(i32::from_be_bytes(answer[..4].try_into().unwrap()), correlation);
        let mut body = answer.split_off(5); // correlation id and tagged fields (v6+)
        let r = <OffsetFetchResponse as kafka_protocol::protocol::Decodable>::decode(&mut body, 7).expect("decodes");
        let got = r.topics[0].partitions[0].committed_offset;
        eprintln!("round {round}: node {paused} resumed and answered error {} offset {got}", r.error_code);
        assert!(
            r.error_code == NOT_COORDINATOR || (r.error_code == 0 && got == offset),
            "round {round}: resumed node {paused} answered error {} with offset {got}; the last commit was {offset}",
            r.error_code
        );
    }
}
