//! kill -9 under load: every batch acknowledged with acks=-1 is read back intact, at
//! its offset, in order, after each restart; with a few partitions, and with 1,000
//! partitions that each get small batches (what the shard journal packs together).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::kafka::*;
use crate::common::Broker;
use keel_protocol::batch::build_batch;

/// The shape of a crash test's load.
#[derive(Clone, Copy)]
struct Load {
    partitions: i32,
    /// Partitions written by each produce request (a rotating window).
    per_request: i32,
    rounds: usize,
}

/// Produces until `stop`, recording (partition, offset) -> value of every acked batch.
fn produce_until(port: u16, stop: Arc<AtomicBool>, first_id: u64, load: Load) -> BTreeMap<(i32, i64), Vec<u8>> {
    let mut acked = BTreeMap::new();
    let mut c = crate::common::Broker::connect_port(port);
    let mut id = first_id;
    while !stop.load(Ordering::Relaxed) {
        let first = (id as i32 * load.per_request) % load.partitions;
        let parts: Vec<_> = (0..load.per_request)
            .map(|i| (first + i) % load.partitions)
            .map(|p| {
                let value = format!("record-{id}-{p}-{}", "x".repeat((id % 700) as usize)).into_bytes();
                ("crash", p, value)
            })
            .collect();
        let batches: Vec<_> =
            parts.iter().map(|(t, p, v)| (*t, *p, build_batch(0, id as i64, &[(None, Some(v))]))).collect();
        let (corr, frame) = c.frame(kafka_protocol::messages::ApiKey::Produce, 11, &produce_request(&batches));
        let _ = corr;
        if std::io::Write::write_all(&mut c.stream, &frame).is_err() {
            break;
        }
        let Some(mut resp) = c.read_frame() else {
            break;
        };
        let mut body = resp.split_off(5);
        let r =
            <kafka_protocol::messages::ProduceResponse as kafka_protocol::protocol::Decodable>::decode(&mut body, 11)
                .unwrap();
        for (t, (_, p, v)) in r.responses[0].partition_responses.iter().zip(parts) {
            if t.error_code == 0 {
                acked.insert((p, t.base_offset), v);
            }
        }
        id += 1;
    }
    acked
}

fn produce_request(parts: &[(&str, i32, bytes::Bytes)]) -> kafka_protocol::messages::ProduceRequest {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let data = parts
        .iter()
        .map(|(_, p, b)| PartitionProduceData::default().with_index(*p).with_records(Some(b.clone())))
        .collect();
    kafka_protocol::messages::ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default().with_name(name("crash")).with_partition_data(data)])
}

#[test]
fn acknowledged_batches_survive_kill_9() {
    kill_9_rounds(Load { partitions: 4, per_request: 4, rounds: 4 });
}

#[test]
fn acknowledged_batches_survive_kill_9_at_1000_partitions() {
    kill_9_rounds(Load { partitions: 1000, per_request: 50, rounds: 2 });
}

fn kill_9_rounds(load: Load) {
    let mut b = Broker::start(2);
    create_topic(&mut b.connect(), "crash", load.partitions);
    let mut acked: BTreeMap<(i32, i64), Vec<u8>> = BTreeMap::new();
    for round in 0..load.rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let port = b.port;
        let s = stop.clone();
        let producer = std::thread::spawn(move || produce_until(port, s, round as u64 * 1_000_000, load));
        std::thread::sleep(Duration::from_millis(400 + 300 * round as u64));
        b.kill9();
        stop.store(true, Ordering::Relaxed);
        let got = producer.join().unwrap();
        assert!(!got.is_empty(), "round {round} acknowledged nothing");
        acked.extend(got);
        b.spawn();
        let mut c = b.connect();
        for p in 0..load.partitions {
            let mut offset = 0;
            let mut seen = BTreeMap::new();
            loop {
                let f = fetch(&mut c, &[("crash", p, offset)], 0, 1);
                let part = &f.responses[0].partitions[0];
                assert_eq!(part.error_code, 0);
                let recs = records_of(part.records.as_ref().unwrap());
                if recs.is_empty() {
                    break;
                }
                for (o, _, v) in recs {
                    assert_eq!(o, offset, "offsets are contiguous");
                    seen.insert(o, v.unwrap().to_vec());
                    offset = o + 1;
                }
            }
            for ((ap, ao), v) in acked.range((p, 0)..(p, i64::MAX)) {
                assert_eq!(*ap, p);
                assert_eq!(seen.get(ao), Some(v), "acked record at {p}/{ao} lost or changed after round {round}");
            }
        }
    }
    assert!(acked.len() > 20, "only {} batches acknowledged in all rounds", acked.len());
}

#[test]
fn sigterm_flushes_acks_1_data_before_exiting() {
    let mut b = Broker::start(2);
    let mut c = b.connect();
    create_topic(&mut c, "term", 2);
    let mut acked = 0;
    for i in 0..200i64 {
        let r = produce(
            &mut c,
            1,
            &[("term", (i % 2) as i32, build_batch(0, i, &[(None, Some(format!("v{i}").as_bytes()))]))],
        );
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
        acked += 1;
    }
    let mut child = b.child.take().unwrap();
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "orderly stop exits 0: {status:?}\n{}", b.log());
    assert!(b.log().contains("every partition flushed"));
    b.spawn();
    let mut c = b.connect();
    let f = fetch(&mut c, &[("term", 0, 0), ("term", 1, 0)], 0, 1);
    let n: usize = f.responses[0].partitions.iter().map(|p| records_of(p.records.as_ref().unwrap()).len()).sum();
    assert_eq!(n, acked, "every acks=1 record is on disk after SIGTERM");
    // The orderly stop wrote clean-shutdown checkpoints: no partition was scanned.
    let metrics = b.admin_get("/metrics");
    let opened = |name: &str| -> u64 {
        metrics.lines().filter(|l| l.starts_with(name)).filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).sum()
    };
    assert_eq!(opened("keel_log_opens_clean_total{"), 2, "{metrics}");
    assert_eq!(opened("keel_log_opens_scanned_total{"), 0, "{metrics}");
}
