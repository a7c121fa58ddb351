//! Hostile clients against a real broker (`--smp 2 --memory 256M`, default limits):
//! one million distinct idempotent producer ids, many connections sending
//! maximum-size requests, and long polls abandoned mid-way. Throughout, the broker's
//! resident memory stays under `--memory` plus a stated overhead, and a well-behaved
//! client producing and fetching on its own connection keeps being served.
//!
//! Scale (defaults in brackets): `KEEL_HOSTILE_PRODUCERS` [1,000,000],
//! `KEEL_HOSTILE_CONNECTIONS` [1,000], `KEEL_HOSTILE_SECONDS` of maximum-size requests
//! [10], `KEEL_HOSTILE_POLLS` [2,500: past the cap of 1,024 waits per shard pair].

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::kafka::*;
use crate::common::Broker;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use keel_protocol::batch::build_batch;

const SHARDS: usize = 2;
const MEMORY: &str = "256M";
const MEMORY_BYTES: u64 = 256 << 20;
/// What the broker may hold beyond `--memory`, which budgets the batch caches (an
/// eighth) and the requests in flight (a quarter). Measured after a million producer
/// ids (200 per partition per request, before Produce was held to one batch per
/// partition): 330–350 MiB resident, of which about 30 MiB batch caches and 55 MiB
/// the broker's producer states at their caps (2 shards × 100,000; the same run with
/// caps of 1,000 ends at 275 MiB); the rest is the storage's own per-log producer
/// tails (up to 10,000 producers per partition, 24 partitions), per-batch cache
/// entries and allocator slack. The maximum-size requests then add at most the two
/// request budgets (64 MiB), and each open connection about 30 KiB (read buffer,
/// tasks, a waiting fetch): 2,500 long polls added 70–77 MiB.
const OVERHEAD_FIXED_BYTES: u64 = 192 << 20;
const OVERHEAD_PER_CONNECTION_BYTES: u64 = 32 << 10;
/// Partitions the producer ids are spread over: more than the shard cap allows at the
/// partition cap (12 per shard × 10,000 > 100,000), so both caps are reached.
const PID_PARTITIONS: i32 = 24;
/// One batch per partition per request: Kafka's Produce carries no more.
const PIDS_PER_PARTITION_PER_REQUEST: usize = 1;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A one-record batch of producer `pid`, epoch 0, base sequence `seq`.
fn idempotent_batch(template: &[u8], pid: i64, seq: i32) -> Vec<u8> {
    let mut b = template.to_vec();
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    b[51..53].copy_from_slice(&0i16.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Peak resident memory seen by a sampler thread, in bytes.
struct RssWatch {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssWatch {
    fn start(b: &Broker) -> RssWatch {
        let pid = b.child.as_ref().unwrap().id();
        let (peak, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (p, s) = (peak.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(crate::common::rss_bytes_of(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        RssWatch { peak, stop, thread: Some(thread) }
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for RssWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A client that produces one record and fetches, again and again, and notes how
/// long each round took, per phase of the test.
struct GoodClient {
    phase: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    rounds: Arc<Mutex<Vec<(usize, Duration)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GoodClient {
    fn start(b: &Broker) -> GoodClient {
        let mut c = b.connect();
        let (phase, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let rounds = Arc::new(Mutex::new(Vec::new()));
        let (ph, st, r) = (phase.clone(), stop.clone(), rounds.clone());
        let thread = std::thread::spawn(move || {
            let mut next = 0i64;
            while !st.load(Ordering::Relaxed) {
                let t = Instant::now();
                let resp = produce(&mut c, 1, &[("good", 0, build_batch(0, 1, &[(None, Some(b"good"))]))]);
                let p = &resp.responses[0].partition_responses[0];
                assert_eq!((p.error_code, p.base_offset), (0, next), "the good client's produce");
                // Reading back waits for no fsync: flush passes slowed by the hostile
                // load's writes are the storage's cost, not a sign of starvation.
                let f = fetch(&mut c, &[("good", 0, 0)], 0, 1);
                assert_eq!(f.responses[0].partitions[0].error_code, 0, "the good client's fetch");
                next += 1;
                r.lock().unwrap().push((ph.load(Ordering::Relaxed), t.elapsed()));
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        GoodClient { phase, stop, rounds, thread: Some(thread) }
    }

    /// (rounds, slowest round) during `phase`.
    fn served_in(&self, phase: usize) -> (usize, Duration) {
        let rounds = self.rounds.lock().unwrap();
        let mine: Vec<Duration> = rounds.iter().filter(|(p, _)| *p == phase).map(|(_, d)| *d).collect();
        (mine.len(), mine.iter().max().copied().unwrap_or_default())
    }

    fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().expect("the good client never failed");
    }
}

fn produce_request_frame(c: &mut crate::common::Conn, topic: &str, parts: Vec<(i32, Bytes)>, acks: i16) -> Vec<u8> {
    let data = parts.into_iter().map(|(p, r)| PartitionProduceData::default().with_index(p).with_records(Some(r)));
    let req = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default().with_name(name(topic)).with_partition_data(data.collect())]);
    c.frame(ApiKey::Produce, 8, &req).1
}

fn wait_until(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Phase 1: `count` producer ids, one per partition per request, on two
/// connections. Returns the producer states evicted.
fn million_producer_ids(b: &Broker, count: usize) -> u64 {
    let template = build_batch(0, 1, &[(None, Some(b"p"))]).to_vec();
    let per_request = PID_PARTITIONS as usize * PIDS_PER_PARTITION_PER_REQUEST;
    let requests = count.div_ceil(per_request);
    let senders: Vec<_> = (0..2)
        .map(|half| {
            let mut c = b.connect();
            let template = template.clone();
            std::thread::spawn(move || {
                for r in (half..requests).step_by(2) {
                    let mut parts = Vec::new();
                    for p in 0..PID_PARTITIONS {
                        let mut blob = BytesMut::new();
                        for i in 0..PIDS_PER_PARTITION_PER_REQUEST {
                            let pid = ((r * per_request) + p as usize * PIDS_PER_PARTITION_PER_REQUEST + i) as i64;
                            if pid < count as i64 {
                                blob.extend_from_slice(&idempotent_batch(&template, pid, 0));
                            }
                        }
                        if !blob.is_empty() {
                            parts.push(("pids", p, blob.freeze()));
                        }
                    }
                    let resp = produce(&mut c, 1, &parts);
                    for t in &resp.responses {
                        assert!(
                            t.partition_responses.iter().all(|p| p.error_code == 0),
                            "every new producer is accepted"
                        );
                    }
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let limits = (b.metric("keel_producer_states_max", 0), b.metric("keel_producer_states_per_partition_max", 0));
    for shard in 0..SHARDS {
        assert!(b.metric("keel_producer_states", shard) <= limits.0, "shard {shard} within its producer cap");
        assert!(b.metric("keel_producer_states_largest_partition", shard) <= limits.1);
    }
    let (held, evicted) = (b.metric_sum("keel_producer_states"), b.metric_sum("keel_producers_evicted_total"));
    assert_eq!(held + evicted, count as u64, "every producer is held or was evicted");
    // Partition 0 got producer 0 first: long evicted. As in Kafka, a producer
    // whose state is gone is accepted whatever its sequence.
    let mut c = b.connect();
    if count as u64 > PID_PARTITIONS as u64 * limits.1 {
        let r = produce(&mut c, 1, &[("pids", 0, Bytes::from(idempotent_batch(&template, 0, 7)))]);
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0, "an evicted producer comes back");
    }
    // The last producer of the last request is still known: its retry is a duplicate
    // answered with its first offset, and a gap is refused.
    let last = (count - 1) as i64;
    let partition = ((last as usize % per_request) / PIDS_PER_PARTITION_PER_REQUEST) as i32;
    let first = produce(&mut c, 1, &[("pids", partition, Bytes::from(idempotent_batch(&template, last, 0)))]);
    let first = &first.responses[0].partition_responses[0];
    assert_eq!(first.error_code, 0);
    let gap = produce(&mut c, 1, &[("pids", partition, Bytes::from(idempotent_batch(&template, last, 5)))]);
    assert_eq!(gap.responses[0].partition_responses[0].error_code, 45, "OUT_OF_ORDER_SEQUENCE_NUMBER");
    eprintln!("producer ids: {count} sent, {held} held, {evicted} evicted");
    evicted
}

/// Phase 2: `connections` clients each sending maximum-size produce requests, two at
/// a time, for `seconds`. Returns the requests answered.
fn maximum_size_requests(b: &Broker, connections: usize, seconds: u64) -> usize {
    let budget = b.metric("keel_request_bytes_in_flight_max", 0) as usize;
    let frame_max = budget - budget / 8;
    let mut c = b.connect();
    let overhead = produce_request_frame(&mut c, "big", vec![(0, Bytes::new())], 1).len() - 4;
    // Zeros: read in full, then refused as CORRUPT_MESSAGE; nothing reaches the disk.
    let frame =
        Arc::new(produce_request_frame(&mut c, "big", vec![(0, Bytes::from(vec![0u8; frame_max - overhead]))], 1));
    assert_eq!(frame.len() - 4, frame_max);
    // One byte more than the budget can hold closes the connection.
    c.send_raw(&(frame_max as i32 + 1).to_be_bytes());
    assert!(c.read_frame().is_none(), "a frame larger than the budget is refused");
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let sockets = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..connections)
        .map(|_| {
            let (frame, stop, answered, sockets) = (frame.clone(), stop.clone(), answered.clone(), sockets.clone());
            let port = b.port;
            std::thread::spawn(move || {
                let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return };
                limit_send_buffer(&s);
                sockets.lock().unwrap().push(s.try_clone().unwrap());
                let mut len = [0u8; 4];
                while !stop.load(Ordering::Relaxed) {
                    if s.write_all(&frame).is_err() || s.write_all(&frame).is_err() {
                        return;
                    }
                    for _ in 0..2 {
                        if s.read_exact(&mut len).is_err() {
                            return;
                        }
                        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
                        if s.read_exact(&mut body).is_err() {
                            return;
                        }
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    // Each connection pipelines two frames before it reads, and the budget admits one
    // frame at a time in arrival order, so on a busy machine the first answers can come
    // after the phase: served, only slower, is what is asserted.
    wait_until("a maximum-size request answered", Duration::from_secs(120), || answered.load(Ordering::Relaxed) > 0);
    for shard in 0..SHARDS {
        let used = b.metric("keel_request_bytes_in_flight", shard);
        assert!(used <= budget as u64, "shard {shard}: {used} request bytes in flight, budget {budget}");
    }
    stop.store(true, Ordering::Relaxed);
    for s in sockets.lock().unwrap().iter() {
        let _ = s.shutdown(Shutdown::Both);
    }
    for t in threads {
        t.join().unwrap();
    }
    // Closed, not only shut down: a server reader learns of the close when it reads.
    sockets.lock().unwrap().clear();
    let t = Instant::now();
    wait_until("request budgets given back", Duration::from_secs(30), || {
        b.metric_sum("keel_request_bytes_in_flight") == 0
    });
    eprintln!("request budgets given back {:.1?} after the clients left", t.elapsed());
    let answered = answered.load(Ordering::Relaxed);
    eprintln!(
        "maximum-size requests: {connections} connections, frames of {frame_max} bytes, {answered} answered in {seconds} s"
    );
    answered
}

/// Caps a test client's kernel send buffer. The clients run on the broker's machine,
/// so their send buffers (autotuned up to 4 MiB each) share the kernel's TCP memory
/// with the broker's receive buffers: a thousand of them would exhaust it, which
/// remote clients cannot do to a broker.
fn limit_send_buffer(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let value: libc::c_int = 128 << 10;
    // SAFETY: the descriptor is the live socket `s` owns; the option value is a c_int
    // on the stack and its size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setting SO_SNDBUF");
}

fn long_poll_frame(c: &mut crate::common::Conn, partitions: i32, min_bytes: i32) -> Vec<u8> {
    let parts = (0..partitions)
        .map(|p| FetchPartition::default().with_partition(p).with_fetch_offset(0).with_partition_max_bytes(1 << 20))
        .collect();
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(30_000)
        .with_min_bytes(min_bytes)
        .with_max_bytes(50 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic(name("polls")).with_partitions(parts)]);
    c.frame(ApiKey::Fetch, 12, &req).1
}

/// Phase 3: `count` long polls on partitions of both shards, abandoned after half a
/// second; then one answered by an append on one shard. Neither leaves a wait behind.
fn abandoned_long_polls(b: &Broker, count: usize) {
    let cancelled_before = b.metric_sum("keel_mesh_calls_cancelled_total");
    let mut polls = Vec::new();
    for _ in 0..count {
        let mut c = b.connect();
        let frame = long_poll_frame(&mut c, 4, 1 << 20);
        c.send_raw(&frame);
        polls.push(c);
    }
    // Each poll's connection lives on one shard and waits on the other over the mesh,
    // up to the cap on waits per peer; the polls past it queue for a slot.
    let cap = b.metric("keel_mesh_calls_in_flight_max_per_peer", 0) as usize;
    wait_until("long polls waiting on the other shard", Duration::from_secs(10), || {
        b.metric_sum("keel_mesh_calls_running") as usize >= count.min(cap)
    });
    std::thread::sleep(Duration::from_millis(500));
    let waiting = b.metric_sum("keel_mesh_calls_running");
    for shard in 0..SHARDS {
        assert!(b.metric("keel_mesh_calls_running", shard) as usize <= cap, "shard {shard} within the wait cap");
    }
    drop(polls);
    wait_until("abandoned polls' waits cancelled", Duration::from_secs(5), || {
        b.metric_sum("keel_mesh_calls_running") == 0 && b.metric_sum("keel_mesh_calls_in_flight") == 0
    });
    let cancelled = b.metric_sum("keel_mesh_calls_cancelled_total") - cancelled_before;
    assert!(cancelled >= waiting, "{cancelled} waits cancelled, {waiting} were waiting");
    // A poll answered by an append to one partition stops waiting on the other shard.
    let mut poll = b.connect();
    let frame = long_poll_frame(&mut poll, 4, 1);
    poll.send_raw(&frame);
    wait_until("the poll waiting", Duration::from_secs(5), || b.metric_sum("keel_mesh_calls_running") >= 1);
    let mut producer = b.connect();
    for p in 0..4 {
        let r = produce(&mut producer, 1, &[("polls", p, build_batch(0, 1, &[(None, Some(b"wake"))]))]);
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    let t = Instant::now();
    assert!(poll.read_frame().is_some(), "the poll is answered");
    assert!(t.elapsed() < Duration::from_secs(5));
    wait_until("the answered poll's other wait cancelled", Duration::from_secs(2), || {
        b.metric_sum("keel_mesh_calls_running") == 0
    });
    eprintln!(
        "long polls: {count} abandoned, {waiting} waiting across shards, {cancelled} cross-shard waits cancelled"
    );
}

#[test]
fn hostile_clients_cannot_exhaust_memory_or_starve_others() {
    // Enough to reach both caps (12,500 per partition, 150,000 per shard); Kafka's
    // Produce carries one batch (one producer) per partition, so each id is a request
    // slot of its own.
    let producers = env_or("KEEL_HOSTILE_PRODUCERS", 300_000);
    let connections = env_or("KEEL_HOSTILE_CONNECTIONS", 1000);
    let seconds = env_or("KEEL_HOSTILE_SECONDS", 10) as u64;
    let polls = env_or("KEEL_HOSTILE_POLLS", 2500);
    let b = Broker::start_with(SHARDS, MEMORY, &[]);
    let mut c = b.connect();
    for (topic, partitions) in [("pids", PID_PARTITIONS), ("big", 1), ("good", 1), ("polls", 4)] {
        assert_eq!(create_topic(&mut c, topic, partitions).topics[0].error_code, 0);
    }
    let rss = RssWatch::start(&b);
    let start_rss = b.rss_bytes();
    let mut good = GoodClient::start(&b);
    std::thread::sleep(Duration::from_millis(200));

    let phases = ["producer ids", "maximum-size requests", "abandoned long polls"];
    let t = Instant::now();
    million_producer_ids(&b, producers);
    let after_pids = (t.elapsed(), rss.peak());
    eprintln!(
        "after the producer ids: RSS {} MiB, batch caches {} MiB",
        b.rss_bytes() >> 20,
        b.metric_sum("keel_batch_cache_bytes") >> 20
    );
    good.phase.store(1, Ordering::Relaxed);
    let t = Instant::now();
    let answered = maximum_size_requests(&b, connections, seconds);
    assert!(answered > 0, "maximum-size requests are served too, only slower");
    let after_big = (t.elapsed(), rss.peak());
    good.phase.store(2, Ordering::Relaxed);
    let t = Instant::now();
    abandoned_long_polls(&b, polls);
    let after_polls = (t.elapsed(), rss.peak());
    std::thread::sleep(Duration::from_millis(300));
    good.finish();

    let peak = rss.peak();
    let overhead = OVERHEAD_FIXED_BYTES + OVERHEAD_PER_CONNECTION_BYTES * (polls + connections) as u64;
    eprintln!(
        "RSS at start {} MiB, peak {} MiB, allowed {} MiB (--memory + {} MiB)",
        start_rss >> 20,
        peak >> 20,
        (MEMORY_BYTES + overhead) >> 20,
        overhead >> 20
    );
    for (i, (elapsed, peak)) in [after_pids, after_big, after_polls].into_iter().enumerate() {
        let (rounds, slowest) = good.served_in(i);
        eprintln!(
            "{}: {elapsed:.1?}, RSS peak so far {} MiB; good client {rounds} rounds, slowest {slowest:?}",
            phases[i],
            peak >> 20
        );
        assert!(rounds >= 3, "the good client was served during {}", phases[i]);
        assert!(slowest < Duration::from_secs(2), "the good client waited {slowest:?} during {}", phases[i]);
    }
    assert!(
        peak < MEMORY_BYTES + overhead,
        "RSS peak {} MiB over --memory {} MiB + {} MiB",
        peak >> 20,
        MEMORY_BYTES >> 20,
        overhead >> 20
    );
    let mut b = b;
    assert!(b.is_running());
    assert!(!b.log().contains("panicked"), "{}", b.log());
}
