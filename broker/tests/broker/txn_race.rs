//! KAFKA-17754, the aborted read Jepsen found in Kafka: a transactional Produce held
//! up in the network reaches the broker after its transaction was aborted and after
//! the same producer began the next one. Under transaction protocol version 1 the
//! epoch does not move at an end, so the late batch looks like part of the next
//! transaction, which commits it: an aborted record becomes visible. KIP-890 part 2
//! (transaction version 2: EndTxn v5 bumps the epoch at every commit and abort,
//! Produce v12 joins partitions by being written) fences the late batch by its stale
//! epoch; part 1 (the partition leader verifies a transaction's first batch on a
//! partition with the coordinator) catches it under version 1 only while the next
//! transaction does not include the partition.
//!
//! The delay is real: the producer's connection goes through a TCP proxy in this
//! test that holds one request and forwards it on command, while other requests go
//! to Keel directly. Kafka 4 answers a batch with a stale epoch INVALID_PRODUCER_EPOCH
//! (`ProducerAppendInfo.checkProducerEpoch`; the coordinator's PRODUCER_FENCED for a
//! write that would add a partition is turned into it by `AddPartitionsToTxnManager`),
//! and so does Keel.
//!
//! The last test races the other way, on a three-node cluster: the abort's marker is
//! held up (its partition's only replica paused) while the coordinator moves, and the
//! next transaction's write arrives before the marker.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::kafka::*;
use crate::common::{Broker, Conn};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use keel_protocol::batch::{build_batch_as, Producer, ATTR_TRANSACTIONAL};

const INVALID_PRODUCER_EPOCH: i16 = 47;
const TRANSACTION_ABORTABLE: i16 = 120;

/// How long the test waits for the proxy or the broker to reach a state.
const WAIT_MAX: Duration = Duration::from_secs(30);

/// A TCP proxy for one client connection to Keel. Responses pass straight through;
/// requests pass one frame at a time, and the frame after [`Proxy::hold_next`] is
/// kept until [`Proxy::release`].
struct Proxy {
    port: u16,
    hold: Arc<AtomicBool>,
    held: Receiver<(i16, i16)>,
    release: Sender<()>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = Arc::new(AtomicBool::new(false));
        let (held_tx, held) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let armed = hold.clone();
        std::thread::spawn(move || {
            let Ok((client, _)) = listener.accept() else { return };
            let broker = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
            client.set_nodelay(true).unwrap();
            broker.set_nodelay(true).unwrap();
            let (mut from_broker, mut to_client) = (broker.try_clone().unwrap(), client.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut from_broker, &mut to_client);
                let _ = to_client.shutdown(Shutdown::Write);
            });
            pump_requests(client, broker, &armed, &held_tx, &release_rx);
        });
        Proxy { port, hold, held, release }
    }

    /// The next request frame from the client is held.
    fn hold_next(&self) {
        self.hold.store(true, Ordering::SeqCst);
    }

    /// Waits until a frame is held: its (api key, api version).
    fn wait_held(&self) -> (i16, i16) {
        self.held.recv_timeout(WAIT_MAX).expect("the proxy holds a request")
    }

    /// Forwards the held frame to Keel.
    fn release(&self) {
        self.release.send(()).expect("the proxy is running");
    }
}

/// Copies request frames from `client` to `broker`, holding the one armed by `hold`
/// until `release` says so.
fn pump_requests(
    mut client: TcpStream,
    mut broker: TcpStream,
    hold: &AtomicBool,
    held: &Sender<(i16, i16)>,
    release: &Receiver<()>,
) {
    loop {
        let mut len = [0u8; 4];
        if client.read_exact(&mut len).is_err() {
            break;
        }
        let mut frame = len.to_vec();
        frame.resize(4 + i32::from_be_bytes(len) as usize, 0);
        if client.read_exact(&mut frame[4..]).is_err() {
            break;
        }
        if hold.swap(false, Ordering::SeqCst) {
            let key = i16::from_be_bytes([frame[4], frame[5]]);
            let version = i16::from_be_bytes([frame[6], frame[7]]);
            if held.send((key, version)).is_err() || release.recv().is_err() {
                break;
            }
        }
        if broker.write_all(&frame).is_err() {
            break;
        }
    }
    let _ = broker.shutdown(Shutdown::Write);
}

/// Codes a client retries: COORDINATOR_LOAD_IN_PROGRESS, NOT_ENOUGH_REPLICAS (Keel's
/// answer to a Produce whose coordinator is busy) and CONCURRENT_TRANSACTIONS (the
/// markers of the previous transaction still being written, when EndTxn answered
/// after its bound on a loaded machine).
const RETRIABLE: [i16; 3] = [14, 19, 51];

/// Calls `f` until its answer's code is not retriable, within `WAIT_MAX`.
fn retried<T>(what: &str, mut f: impl FnMut() -> T, code: impl Fn(&T) -> i16) -> T {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let answer = f();
        if !RETRIABLE.contains(&code(&answer)) {
            return answer;
        }
        assert!(Instant::now() < deadline, "{what} kept failing: {}", code(&answer));
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn txn_id(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_string()))
}

/// InitProducerId for `id`, retried while the coordinator loads.
fn init(c: &mut Conn, id: &str) -> (i64, i16) {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(txn_id(id)))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let r: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &req);
        if r.error_code == 0 {
            return (r.producer_id.0, r.producer_epoch);
        }
        assert!([14, 15, 16, 51].contains(&r.error_code), "InitProducerId: {}", r.error_code);
        assert!(Instant::now() < deadline, "InitProducerId kept failing: {}", r.error_code);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// AddPartitionsToTxn v3 (transaction version 1) of one partition: its error code.
fn add_partition(c: &mut Conn, id: &str, (pid, epoch): (i64, i16), topic: &str, partition: i32) -> i16 {
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(id))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![partition])]);
    let code = |r: &AddPartitionsToTxnResponse| {
        r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    };
    code(&retried("AddPartitionsToTxn", || c.call(ApiKey::AddPartitionsToTxn, 3, &req), code))
}

/// EndTxn at `version`: (error, producer id, producer epoch to go on with; -1 before
/// version 5).
fn end(c: &mut Conn, version: i16, id: &str, (pid, epoch): (i64, i16), commit: bool) -> (i16, i64, i16) {
    let req = EndTxnRequest::default()
        .with_transactional_id(txn_id(id))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let r: EndTxnResponse =
        retried("EndTxn", || c.call(ApiKey::EndTxn, version, &req), |r: &EndTxnResponse| r.error_code);
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

/// A transactional Produce of one record, `value`, with sequence `seq`.
fn produce_request(
    id: &str,
    (pid, epoch): (i64, i16),
    topic: &str,
    partition: i32,
    seq: i32,
    value: &str,
) -> ProduceRequest {
    let batch = build_batch_as(
        0,
        1,
        Producer { id: pid, epoch, base_sequence: seq },
        ATTR_TRANSACTIONAL,
        &[(None, Some(value.as_bytes()))],
    );
    ProduceRequest::default()
        .with_transactional_id(Some(txn_id(id)))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default().with_name(name(topic)).with_partition_data(vec![
            PartitionProduceData::default().with_index(partition).with_records(Some(batch)),
        ])])
}

fn produce_code(r: &ProduceResponse) -> i16 {
    r.responses[0].partition_responses[0].error_code
}

/// A Produce at `version` on a direct connection: its error code.
fn produce(c: &mut Conn, version: i16, req: &ProduceRequest) -> i16 {
    produce_code(&retried("Produce", || c.call(ApiKey::Produce, version, req), produce_code))
}

/// Reads the response to the request `correlation` sent on `c`.
fn read_response<R: Decodable>(c: &mut Conn, key: ApiKey, version: i16, correlation: i32) -> R {
    let mut frame = c.read_frame().expect("a response");
    assert_eq!(i32::from_be_bytes(frame[..4].try_into().unwrap()), correlation);
    let header_len = if key.response_header_version(version) >= 1 { 5 } else { 4 };
    let mut body = frame.split_off(header_len);
    R::decode(&mut body, version).expect("response decodes")
}

/// What a consumer of one partition sees with `isolation_level` (0 read_uncommitted,
/// 1 read_committed), fetching from offset 0.
struct Seen {
    /// Values a consumer keeps: records of aborted transactions and markers dropped.
    kept: Vec<String>,
    /// Every data record's value in the fetched log, aborted ones included.
    all: Vec<String>,
    last_stable_offset: i64,
    high_watermark: i64,
}

fn read(c: &mut Conn, topic: &str, partition: i32, isolation_level: i8) -> Seen {
    let fp = FetchPartition::default().with_partition(partition).with_fetch_offset(0).with_partition_max_bytes(1 << 20);
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation_level)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(vec![fp])]);
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req);
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0, "Fetch {topic}-{partition}");
    // As a consumer reads it: a producer's records are dropped from the first offset of
    // one of its aborted transactions up to that transaction's abort marker.
    let mut aborted: Vec<(i64, i64)> =
        p.aborted_transactions.iter().flatten().map(|a| (a.producer_id.0, a.first_offset)).collect();
    let mut aborting = std::collections::HashSet::new();
    let mut buf = p.records.clone().unwrap_or_default();
    let (mut kept, mut all) = (Vec::new(), Vec::new());
    for set in kafka_protocol::records::RecordBatchDecoder::decode_all(&mut buf).unwrap() {
        for r in set.records {
            aborted.retain(|(pid, first)| {
                let begun = r.offset >= *first;
                if begun {
                    aborting.insert(*pid);
                }
                !begun
            });
            if r.control {
                let abort_marker = r.key.as_ref().is_some_and(|k| k.get(2..4) == Some(&[0, 0][..]));
                if abort_marker {
                    aborting.remove(&r.producer_id);
                }
                continue;
            }
            let value = String::from_utf8(r.value.unwrap_or_default().to_vec()).unwrap();
            if !(r.transactional && aborting.contains(&r.producer_id)) {
                kept.push(value.clone());
            }
            all.push(value);
        }
    }
    Seen { kept, all, last_stable_offset: p.last_stable_offset, high_watermark: p.high_watermark }
}

/// Waits until a read_committed consumer of the partition keeps exactly `expected`
/// (the markers of a committed transaction may still be on their way).
fn wait_committed(c: &mut Conn, topic: &str, partition: i32, expected: &[&str]) -> Seen {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let r = read(c, topic, partition, 1);
        if r.kept == expected && r.last_stable_offset == r.high_watermark {
            return r;
        }
        assert!(Instant::now() < deadline, "read_committed of {topic}-{partition} kept {:?}, not {expected:?}", r.kept);
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start_broker() -> Broker {
    Broker::start_with_yaml(2, "256M", &[], "transaction_version: 2\n")
}

/// The broker finalizes `transaction.version` 2, as a Kafka 4 client checks before it
/// speaks the version 2 protocol.
fn assert_transaction_version_2(c: &mut Conn) {
    let r: ApiVersionsResponse = c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    let feature = r.finalized_features.iter().find(|f| f.name.as_str() == "transaction.version");
    assert_eq!(feature.map(|f| f.max_version_level), Some(2));
}

/// Scenario A, the version 2 flow. Transaction 1 writes `aborted-0` to partition 1
/// and `aborted-1` to partition 0, the latter through the proxy, which holds it; the
/// producer aborts, then transaction 2 (under the epoch the abort gave) writes
/// `committed-2` to partition 0. The late `aborted-1` arrives while transaction 2 is
/// open (`release_before_commit`, the race KAFKA-17754 is about) or after it
/// committed; either way its epoch is stale and it is refused.
fn a_late_write_is_fenced_by_the_epoch_bump(release_before_commit: bool) {
    let b = start_broker();
    let mut c = b.connect();
    assert_transaction_version_2(&mut c);
    let suffix = if release_before_commit { "open" } else { "done" };
    let (topic, id) = (format!("race-v2-{suffix}"), format!("tx-race-v2-{suffix}"));
    assert_eq!(create_topic(&mut c, &topic, 2).topics[0].error_code, 0);
    let first = init(&mut c, &id);

    // Transaction 1: one write arrives, the other is held in the network.
    let code = produce(&mut c, 12, &produce_request(&id, first, &topic, 1, 0, "aborted-0"));
    assert_eq!(code, 0, "Produce v12 joins partition 1 to transaction 1");
    let proxy = Proxy::start(b.port);
    let mut delayed = Broker::connect_port(proxy.port);
    proxy.hold_next();
    let (correlation, frame) =
        delayed.frame(ApiKey::Produce, 12, &produce_request(&id, first, &topic, 0, 0, "aborted-1"));
    delayed.send_raw(&frame);
    assert_eq!(proxy.wait_held(), (ApiKey::Produce as i16, 12));

    // The producer gives up on transaction 1: the abort moves it to a new epoch.
    let (code, pid, epoch) = end(&mut c, 5, &id, first, false);
    assert_eq!((code, pid), (0, first.0), "EndTxn v5 abort");
    assert_eq!(epoch, first.1 + 1, "EndTxn v5 answers the bumped epoch");
    let second = (pid, epoch);

    // Transaction 2 writes the partition the late batch is headed for.
    let code = produce(&mut c, 12, &produce_request(&id, second, &topic, 0, 0, "committed-2"));
    assert_eq!(code, 0, "Produce v12 of transaction 2");
    if !release_before_commit {
        let (code, _, epoch) = end(&mut c, 5, &id, second, true);
        assert_eq!((code, epoch), (0, second.1 + 1), "EndTxn v5 commit bumps the epoch again");
    }

    proxy.release();
    let late: ProduceResponse = read_response(&mut delayed, ApiKey::Produce, 12, correlation);
    assert_eq!(produce_code(&late), INVALID_PRODUCER_EPOCH, "the late write of transaction 1 is fenced");

    if release_before_commit {
        let (code, _, epoch) = end(&mut c, 5, &id, second, true);
        assert_eq!((code, epoch), (0, second.1 + 1), "transaction 2 commits after the late write");
    }
    let committed = wait_committed(&mut c, &topic, 0, &["committed-2"]);
    assert_eq!(committed.all, ["committed-2"], "aborted-1 never reached the log");
    let uncommitted = read(&mut c, &topic, 0, 0);
    assert_eq!(uncommitted.kept, ["committed-2"], "read_uncommitted does not see aborted-1 either");
    // Partition 1 holds transaction 1's other write, aborted by a marker.
    let aborted = wait_committed(&mut c, &topic, 1, &[]);
    assert_eq!(aborted.all, ["aborted-0"]);
}

#[test]
fn a_late_write_arriving_during_the_next_transaction_is_fenced_by_the_epoch_bump() {
    a_late_write_is_fenced_by_the_epoch_bump(true);
}

#[test]
fn a_late_write_arriving_after_the_next_transaction_committed_is_fenced_by_the_epoch_bump() {
    a_late_write_is_fenced_by_the_epoch_bump(false);
}

/// Transaction 1 in version 1 requests: partition 0 added, "aborted-1" written to it
/// through a proxy that holds the Produce v11, then aborted (EndTxn v4, the epoch
/// stays). Returns the proxy, the delayed connection and the held request's
/// correlation id.
fn abort_with_a_held_v1_write(
    b: &Broker,
    c: &mut Conn,
    id: &str,
    producer: (i64, i16),
    topic: &str,
) -> (Proxy, Conn, i32) {
    assert_eq!(add_partition(c, id, producer, topic, 0), 0);
    let proxy = Proxy::start(b.port);
    let mut delayed = Broker::connect_port(proxy.port);
    proxy.hold_next();
    let (correlation, frame) =
        delayed.frame(ApiKey::Produce, 11, &produce_request(id, producer, topic, 0, 0, "aborted-1"));
    delayed.send_raw(&frame);
    assert_eq!(proxy.wait_held(), (ApiKey::Produce as i16, 11));
    assert_eq!(end(c, 4, id, producer, false).0, 0, "EndTxn v4 abort; the epoch stays");
    (proxy, delayed, correlation)
}

/// Scenario B, version 1 requests (AddPartitionsToTxn v3, Produce v11, EndTxn v4):
/// the epoch does not move at the abort, so the late batch carries the epoch of
/// transaction 2. It arrives after transaction 2 began with partition 1 only, before
/// any write of it. KIP-890 part 1 catches it: partition 0 asks the coordinator,
/// whose open transaction does not include partition 0, and Keel answers
/// TRANSACTION_ABORTABLE, as Kafka 4 answers a Produce v11 or later (INVALID_TXN_STATE
/// to older versions).
/// Had transaction 2 added partition 0 before the late batch arrived, no version 1
/// check could tell the two apart (the next test).
#[test]
fn a_late_version_1_write_to_a_partition_outside_the_next_transaction_is_refused() {
    let b = start_broker();
    let mut c = b.connect();
    let (topic, id) = ("race-v1", "tx-race-v1");
    assert_eq!(create_topic(&mut c, topic, 2).topics[0].error_code, 0);
    let producer = init(&mut c, id);

    let (proxy, mut delayed, correlation) = abort_with_a_held_v1_write(&b, &mut c, id, producer, topic);
    assert_eq!(add_partition(&mut c, id, producer, topic, 1), 0, "transaction 2 begins with partition 1");

    proxy.release();
    let late: ProduceResponse = read_response(&mut delayed, ApiKey::Produce, 11, correlation);
    assert_eq!(produce_code(&late), TRANSACTION_ABORTABLE, "the late write of transaction 1 is refused");

    let code = produce(&mut c, 11, &produce_request(id, producer, topic, 1, 0, "committed-2"));
    assert_eq!(code, 0);
    assert_eq!(end(&mut c, 4, id, producer, true).0, 0, "EndTxn v4 commit");

    wait_committed(&mut c, topic, 1, &["committed-2"]);
    let committed = wait_committed(&mut c, topic, 0, &[]);
    assert!(committed.all.is_empty(), "aborted-1 never reached the log: {:?}", committed.all);
    assert!(read(&mut c, topic, 0, 0).kept.is_empty(), "read_uncommitted does not see aborted-1 either");
}

/// The limit of version 1, which KAFKA-17754 is: once transaction 2 has added the
/// partition (AddPartitionsToTxn v3, same epoch), the late batch of transaction 1 is
/// indistinguishable from a batch of transaction 2. The partition leader's
/// verification passes, the batch is appended into transaction 2, and its commit
/// makes the aborted record visible. Kafka under transaction version 1 does the same;
/// version 2 (the tests above) is the fix, and a broker that finalizes version 2
/// still serves version 1 requests to clients that send them. The test asserts the
/// aborted read, so that the limitation stays on record rather than out of sight.
#[test]
fn version_1_cannot_tell_a_late_write_from_the_next_transaction_once_it_added_the_partition() {
    let b = start_broker();
    let mut c = b.connect();
    let (topic, id) = ("race-v1-hole", "tx-race-v1-hole");
    assert_eq!(create_topic(&mut c, topic, 1).topics[0].error_code, 0);
    let producer = init(&mut c, id);

    let (proxy, mut delayed, correlation) = abort_with_a_held_v1_write(&b, &mut c, id, producer, topic);
    assert_eq!(add_partition(&mut c, id, producer, topic, 0), 0, "transaction 2 adds the same partition");

    proxy.release();
    let late: ProduceResponse = read_response(&mut delayed, ApiKey::Produce, 11, correlation);
    assert_eq!(produce_code(&late), 0, "version 1: the late write is taken into transaction 2");
    let code = produce(&mut c, 11, &produce_request(id, producer, topic, 0, 1, "committed-2"));
    assert_eq!(code, 0);
    assert_eq!(end(&mut c, 4, id, producer, true).0, 0, "EndTxn v4 commit");
    // The aborted read: transaction 2's commit makes aborted-1 visible.
    wait_committed(&mut c, topic, 0, &["aborted-1", "committed-2"]);
}

/// Waits until node `asking` names a coordinator of `id` in FindCoordinator.
fn wait_for_transaction_coordinator(c: &Cluster, asking: i32, id: &str) {
    let req = FindCoordinatorRequest::default().with_key(StrBytes::from_string(id.to_string())).with_key_type(1);
    c.wait_until("a transaction coordinator", WAIT_MAX, |c| {
        let r: Option<FindCoordinatorResponse> =
            c.try_connect(asking).and_then(|mut k| k.try_call(ApiKey::FindCoordinator, 3, &req));
        r.is_some_and(|r| r.error_code == 0 && r.node_id.0 > 0)
    });
}

/// The state of `id` as node `asking` describes it ("" when it does not answer).
fn transaction_state(c: &Cluster, asking: i32, id: &str) -> String {
    let req = DescribeTransactionsRequest::default().with_transactional_ids(vec![txn_id(id)]);
    let r: Option<DescribeTransactionsResponse> =
        c.try_connect(asking).and_then(|mut k| k.try_call(ApiKey::DescribeTransactions, 0, &req));
    r.map(|r| r.transaction_states[0].transaction_state.to_string()).unwrap_or_default()
}

/// The bug the 30-minute fault run found: an EndTxn v5 abort bumps the epoch, but the
/// coordinator's node stopped coordinating the id while the markers were written, and
/// the answer carried the request's own epoch. The client started its sequences again
/// under the old epoch, and its next batch was taken for a duplicate of the aborted
/// transaction's first one: acknowledged, never written. Here the data partition has
/// one replica, on a paused node, so the markers wait as long as the test needs, and
/// the coordinator moves once the abort is prepared. The next transaction's write then
/// reaches the partition before the abort's marker: it must wait for the coordinator,
/// not join the open, aborted transaction (a bug this test found too).
#[test]
fn an_end_txn_answers_the_bumped_epoch_when_its_coordinator_moves_during_the_markers() {
    let mut c = Cluster::start_with_yaml(3, "auto_leader_rebalance_enable: false\ntransaction_topic_partitions: 1\n");
    let (topic, id) = ("coordinator-moves", "tx-coordinator-moves");
    assert_eq!(c.create_topic(topic, 1, 1), 0, "{}", c.logs());
    let (data, _) = c.wait_for_leader(&[1, 2, 3], topic, 0, None);
    // The first FindCoordinator creates `__transaction_state`; its one partition's
    // leader, once it stays, coordinates every id.
    wait_for_transaction_coordinator(&c, 1, id);
    let (mut coordinator, _) = c.wait_for_leader(&[1, 2, 3], "__transaction_state", 0, None);
    if coordinator == data {
        coordinator = if data == 1 { 2 } else { 1 };
        c.move_leader(&[1, 2, 3], "__transaction_state", coordinator, WAIT_MAX);
    }
    let next = (1..=3).find(|n| *n != data && *n != coordinator).unwrap();
    let mut k = c.try_connect(coordinator).unwrap();
    let first = init(&mut k, id);
    let mut d = c.try_connect(data).unwrap();
    assert_eq!(produce(&mut d, 12, &produce_request(id, first, topic, 0, 0, "aborted-0")), 0);

    // The abort is prepared; its marker waits for the paused node.
    c.node(data).pause();
    let abort = EndTxnRequest::default()
        .with_transactional_id(txn_id(id))
        .with_producer_id(ProducerId(first.0))
        .with_producer_epoch(first.1)
        .with_committed(false);
    let (correlation, frame) = k.frame(ApiKey::EndTxn, 5, &abort);
    k.send_raw(&frame);
    c.wait_until("the abort is prepared", WAIT_MAX, |c| transaction_state(c, coordinator, id) == "PrepareAbort");
    c.move_leader(&[coordinator, next], "__transaction_state", next, WAIT_MAX);
    let ended: EndTxnResponse = read_response(&mut k, ApiKey::EndTxn, 5, correlation);
    assert_eq!(
        (ended.error_code, ended.producer_id.0, ended.producer_epoch),
        (0, first.0, first.1 + 1),
        "EndTxn v5 answers the epoch the abort bumped to"
    );
    c.node(data).resume();

    // Transaction 2 starts its sequences again under the new epoch; its write is
    // written and committed, and the aborted one stays aborted.
    let second = (ended.producer_id.0, ended.producer_epoch);
    let mut d = c.try_connect(data).unwrap();
    let mut k = c.try_connect(next).unwrap();
    assert_eq!(produce(&mut d, 12, &produce_request(id, second, topic, 0, 0, "committed-1")), 0);
    assert_eq!(end(&mut k, 5, id, second, true).0, 0, "EndTxn v5 commit at the new coordinator");
    let committed = wait_committed(&mut d, topic, 0, &["committed-1"]);
    assert_eq!(committed.all, ["aborted-0", "committed-1"]);
}
