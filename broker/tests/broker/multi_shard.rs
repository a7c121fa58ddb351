//! One produce and one fetch request spanning partitions owned by two shards, and
//! long-poll fetches woken by appends on another shard.

use std::time::{Duration, Instant};

use crate::common::kafka::*;
use crate::common::Broker;
use keel_protocol::batch::build_batch;

#[test]
fn produce_and_fetch_span_two_shards() {
    let b = Broker::start(2);
    let mut c = b.connect();
    let r = create_topic(&mut c, "spread", 4);
    assert_eq!(r.topics[0].error_code, 0);
    // Least-loaded placement puts two partitions on each shard.
    let status = b.admin_get("/v1/status");
    assert!(
        status.contains(r#"{"shard":0,"partitions":2"#) && status.contains(r#"{"shard":1,"partitions":2"#),
        "{status}"
    );
    let parts: Vec<_> = (0..4)
        .map(|p| ("spread", p, build_batch(0, 1000 + p as i64, &[(Some(format!("k{p}").as_bytes()), Some(b"v"))])))
        .collect();
    let r = produce(&mut c, -1, &parts);
    let answers = &r.responses[0].partition_responses;
    assert_eq!(
        answers.iter().map(|p| (p.index, p.error_code, p.base_offset)).collect::<Vec<_>>(),
        vec![(0, 0, 0), (1, 0, 0), (2, 0, 0), (3, 0, 0)]
    );
    let f = fetch(&mut c, &[("spread", 3, 0), ("spread", 0, 0), ("spread", 1, 0), ("spread", 2, 0)], 500, 1);
    let got: Vec<(i32, Vec<Option<bytes::Bytes>>)> = f.responses[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, records_of(p.records.as_ref().unwrap()).into_iter().map(|r| r.1).collect()))
        .collect();
    assert_eq!(got.len(), 4);
    for (p, keys) in got {
        assert_eq!(keys, vec![Some(bytes::Bytes::from(format!("k{p}")))], "partition {p} in request order");
    }
    // Both shards flushed (acks=-1 waited for it), and the pass histogram counts it.
    let metrics = b.admin_get("/metrics");
    for shard in 0..2 {
        let count = metrics
            .lines()
            .find(|l| l.starts_with(&format!("keel_flush_pass_seconds_count{{shard=\"{shard}\"}}")))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok());
        assert!(count.is_some_and(|c| c >= 1), "shard {shard} flush passes: {count:?}\n{metrics}");
    }
    assert!(metrics.contains("keel_flush_pass_seconds_bucket{shard=\"0\",le=\"+Inf\"}"), "{metrics}");
    // Group membership changes are counted per shard from the start, zeros included.
    let left =
        "keel_group_member_changes_total{shard=\"1\",protocol=\"classic\",change=\"left\",reason=\"leave_group\"} 0";
    assert!(metrics.contains(left), "{metrics}");
}

#[test]
fn long_poll_fetch_is_woken_by_an_append_on_another_shard() {
    let b = Broker::start(2);
    let mut c = b.connect();
    create_topic(&mut c, "wake", 2);
    let port = b.port;
    let waiter = std::thread::spawn(move || {
        let mut c = crate::common::Broker::connect_port(port);
        let start = Instant::now();
        let f = fetch(&mut c, &[("wake", 0, 0), ("wake", 1, 0)], 10_000, 1);
        let n: usize = f.responses[0].partitions.iter().map(|p| records_of(p.records.as_ref().unwrap()).len()).sum();
        (start.elapsed(), n)
    });
    std::thread::sleep(Duration::from_millis(500));
    produce(&mut c, 1, &[("wake", 1, build_batch(0, 1, &[(None, Some(b"wake up"))]))]);
    let (elapsed, n) = waiter.join().unwrap();
    assert_eq!(n, 1);
    assert!(elapsed < Duration::from_secs(5), "fetch waited {elapsed:?} instead of waking on the append");
    // With nothing to read, a fetch waits for max_wait_ms.
    let start = Instant::now();
    let f = fetch(&mut c, &[("wake", 0, 0)], 300, 1);
    assert!(start.elapsed() >= Duration::from_millis(250));
    assert_eq!(records_of(f.responses[0].partitions[0].records.as_ref().unwrap()).len(), 0);
}

/// A port another program served until a moment ago, whose side of its closed
/// connections still waits out TIME_WAIT: every shard binds it all the same
/// (SO_REUSEADDR as well as SO_REUSEPORT), so Keel can take over a port from a Kafka
/// broker, or from an earlier test's broker, at once rather than a minute later.
#[test]
fn shards_bind_a_port_whose_last_owner_left_connections_in_time_wait() {
    use std::io::Read;
    let port = crate::common::free_port();
    {
        // std's listener sets SO_REUSEADDR and not SO_REUSEPORT, as Java's does.
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        let mut client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (served, _) = listener.accept().unwrap();
        // The server closes first, so its side of the connection is left in TIME_WAIT.
        drop(served);
        assert_eq!(client.read(&mut [0u8; 1]).unwrap(), 0);
    }
    let mut b = Broker::start_on_port(2, port);
    let mut c = b.connect();
    create_topic(&mut c, "taken-over", 2);
    let r = produce(&mut c, -1, &[("taken-over", 0, build_batch(0, 0, &[(None, Some(b"v".as_slice()))]))]);
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    assert!(b.is_running());
}
