//! Committed offsets are acknowledged only once durable: they survive kill -9 and an
//! orderly restart, with their metadata, for groups on both shards.

use crate::common::kafka::*;
use crate::common::Broker;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

fn commit(c: &mut crate::common::Conn, group: &str, offsets: &[(i32, i64)]) {
    let req = offset_commit_request(group, "committed", offsets);
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 8, &req);
    for p in &r.topics[0].partitions {
        assert_eq!(p.error_code, 0, "commit of partition {} in {group}", p.partition_index);
    }
}

fn fetch_committed(c: &mut crate::common::Conn, group: &str) -> Vec<(i32, i64, Option<String>)> {
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(name("committed"))
            .with_partition_indexes(vec![0, 1, 2, 3])]));
    let r: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, 7, &req);
    assert_eq!(r.error_code, 0);
    r.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.committed_offset, p.metadata.as_ref().map(|m| m.to_string())))
        .collect()
}

#[test]
fn committed_offsets_survive_kill_9_and_restart() {
    let mut b = Broker::start(2);
    let mut c = b.connect();
    create_topic(&mut c, "committed", 4);
    // Enough groups that both shards coordinate some of them.
    let groups: Vec<String> = (0..6).map(|g| format!("restart-group-{g}")).collect();
    for (g, group) in groups.iter().enumerate() {
        commit(&mut c, group, &[(0, 10 + g as i64), (1, 20 + g as i64), (3, 40 + g as i64)]);
    }
    let expected: Vec<_> = groups.iter().map(|g| fetch_committed(&mut c, g)).collect();
    assert_eq!(
        expected[2],
        vec![
            (0, 12, Some("meta-12".into())),
            (1, 22, Some("meta-22".into())),
            (2, -1, Some("".into())),
            (3, 42, Some("meta-42".into()))
        ]
    );
    b.kill9();
    b.spawn();
    let mut c = b.connect();
    for (group, want) in groups.iter().zip(&expected) {
        // The coordinator answers COORDINATOR_LOAD_IN_PROGRESS while it replays.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let req = OffsetFetchRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(group.clone())))
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(name("committed"))
                    .with_partition_indexes(vec![0])]));
            let r: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, 7, &req);
            if r.error_code == 0 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "coordinator never loaded: {}", r.error_code);
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert_eq!(&fetch_committed(&mut c, group), want, "{group} after kill -9");
    }
    // A later commit replaces the earlier one, across an orderly restart too.
    commit(&mut c, &groups[0], &[(0, 99)]);
    let mut child = b.child.take().unwrap();
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    b.spawn();
    let mut c = b.connect();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(fetch_committed(&mut c, &groups[0])[0], (0, 99, Some("meta-99".into())));
}
