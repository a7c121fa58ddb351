//! A follower whose file system cannot take a new segment catches up once it can,
//! without a restart.
//!
//! The follower's data directory is an ext4 file system on a loop device with few
//! inodes, all taken by empty files while it runs. Its log then cannot roll: the
//! Raft entries that need a new segment cannot be written. They must be kept and
//! tried again. Dropped, they left the log short of what the Raft core holds, every
//! later write of the group failed, and the follower stayed out of sync until it was
//! restarted. Needs root (to mount); without it the test prints SKIPPED and why.

use std::time::Duration;

use crate::common::cluster::{produce_all, read_all, Cluster};
use crate::common::loopfs::LoopFs;

const TOPIC: &str = "rolls";

#[test]
fn a_follower_that_cannot_roll_a_segment_catches_up_once_it_can() {
    let fs = match LoopFs::create_with(64 << 20, &["-N", "64"]) {
        Ok(fs) => fs,
        Err(why) => {
            println!("SKIPPED: {why}");
            return;
        }
    };
    let mut c = Cluster::start_with_yaml(3, "auto_leader_rebalance_enable: false\n");
    let all = [1, 2, 3];
    assert_eq!(c.create_topic_with_configs(TOPIC, 1, 3, &[("segment.bytes", "65536")]), 0, "{}", c.logs());
    let (leader, _) = c.wait_for_leader(&all, TOPIC, 0, None);
    let follower = all.iter().copied().find(|n| *n != leader).unwrap();
    let first: Vec<String> = (0..20).map(|i| format!("a{i}-{}", "x".repeat(1000))).collect();
    let mut acked = produce_all(&c, &all, TOPIC, 0, &first);

    // The follower's data directory moves onto the small file system.
    c.node(follower).stop();
    let data = c.node(follower).dir.join("data");
    let moved = fs.mount.join("data");
    crate::common::loopfs::run("cp", &["-a", data.to_str().unwrap(), moved.to_str().unwrap()]).unwrap();
    std::fs::remove_dir_all(&data).unwrap();
    std::os::unix::fs::symlink(&moved, &data).unwrap();
    c.node(follower).spawn();
    c.wait_until("the follower is in sync", Duration::from_secs(60), |c| c.all_in_sync(&all, TOPIC, 3));

    // Every inode taken: no new file, so no new segment.
    let filler = fs.mount.join("filler");
    std::fs::create_dir(&filler).unwrap();
    let mut taken = 0;
    while std::fs::File::create(filler.join(taken.to_string())).is_ok() {
        taken += 1;
    }
    assert!(taken > 0, "no inode was free to take");
    let more: Vec<String> = (0..200).map(|i| format!("b{i}-{}", "x".repeat(1000))).collect();
    acked.extend(produce_all(&c, &all, TOPIC, 0, &more));
    c.wait_until("the follower fails to write entries", Duration::from_secs(30), |c| {
        c.nodes[(follower - 1) as usize].log().contains("cannot write Raft entries")
    });

    // Room again: the follower writes what it could not, without a restart.
    std::fs::remove_dir_all(&filler).unwrap();
    let last: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
    acked.extend(produce_all(&c, &all, TOPIC, 0, &last));
    c.wait_until("the follower is in sync again", Duration::from_secs(60), |c| c.all_in_sync(&all, TOPIC, 3));
    let path = format!("/v1/partitions/{TOPIC}/0/leader?to={follower}");
    let answer = c.node(leader).admin_request("POST", &path);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    c.wait_until("the follower leads", Duration::from_secs(30), |c| {
        all.iter().all(|id| c.leader(*id, TOPIC, 0).map(|(l, _)| l) == Some(follower))
    });
    assert_eq!(read_all(&c, follower, TOPIC, 0), acked, "what the follower serves once it leads");
    let log = c.nodes[(follower - 1) as usize].log();
    assert!(!log.contains("panicked"), "{log}");
    let segments = std::fs::read_dir(moved.join(format!("{TOPIC}-0"))).unwrap().count();
    assert!(segments > 3, "the follower rolled its log after the inodes came back ({segments} files)");
}
