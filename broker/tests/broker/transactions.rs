//! Transactions on the wire, through crashes: an open transaction keeps the last
//! stable offset at its first record across a kill -9 and is aborted by its timeout
//! afterwards (its records hidden from read_committed, its producer fenced); a batch
//! of a transaction that does not include the partition is refused instead of
//! opening one nobody ends; a committed transaction, and the offsets it committed for
//! a group, are all there after a kill -9.

use std::time::{Duration, Instant};

use crate::common::kafka::*;
use crate::common::{Broker, Conn};
use bytes::Bytes;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use keel_protocol::batch::{build_batch_as, Producer, ATTR_TRANSACTIONAL};

pub(crate) fn txn_id(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_string()))
}

/// InitProducerId for `id`, retried while the coordinator loads or a fence finishes.
pub(crate) fn init(c: &mut Conn, id: &str, timeout_ms: i32) -> (i64, i16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(txn_id(id)))
            .with_transaction_timeout_ms(timeout_ms)
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

pub(crate) fn add_partitions(c: &mut Conn, id: &str, (pid, epoch): (i64, i16), topic: &str, partitions: &[i32]) -> i16 {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(id))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(name(topic))
            .with_partitions(partitions.to_vec())]);
    let r: AddPartitionsToTxnResponse = c.call(ApiKey::AddPartitionsToTxn, 3, &req);
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

fn end(c: &mut Conn, id: &str, (pid, epoch): (i64, i16), commit: bool) -> i16 {
    let req = EndTxnRequest::default()
        .with_transactional_id(txn_id(id))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let r: EndTxnResponse = c.call(ApiKey::EndTxn, 3, &req);
    r.error_code
}

/// A transactional batch of `values` from sequence `seq`.
pub(crate) fn txn_batch((pid, epoch): (i64, i16), seq: i32, values: &[&str]) -> Bytes {
    let records: Vec<_> = values.iter().map(|v| (None, Some(v.as_bytes()))).collect();
    build_batch_as(0, 1, Producer { id: pid, epoch, base_sequence: seq }, ATTR_TRANSACTIONAL, &records)
}

/// A transactional Produce of one batch: (error, base offset).
pub(crate) fn produce_txn(c: &mut Conn, id: &str, topic: &str, partition: i32, batch: Bytes) -> (i16, i64) {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let req = ProduceRequest::default()
        .with_transactional_id(Some(txn_id(id)))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default().with_name(name(topic)).with_partition_data(vec![
            PartitionProduceData::default().with_index(partition).with_records(Some(batch)),
        ])]);
    let r: ProduceResponse = c.call(ApiKey::Produce, 11, &req);
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// The latest offset a read_committed consumer sees: the last stable offset.
fn last_stable_offset(c: &mut Conn, topic: &str, partition: i32) -> i64 {
    let p = ListOffsetsPartition::default().with_partition_index(partition).with_timestamp(-1);
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(1)
        .with_topics(vec![ListOffsetsTopic::default().with_name(name(topic)).with_partitions(vec![p])]);
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 7, &req);
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

/// A read_committed Fetch from `offset`: the values a consumer keeps (records of
/// aborted transactions dropped, markers skipped), the LSO, and the aborted list.
pub(crate) fn read_committed(
    c: &mut Conn,
    topic: &str,
    partition: i32,
    offset: i64,
) -> (Vec<String>, i64, Vec<(i64, i64)>) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    let fp =
        FetchPartition::default().with_partition(partition).with_fetch_offset(offset).with_partition_max_bytes(1 << 20);
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(1)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(vec![fp])]);
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req);
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let aborted: Vec<(i64, i64)> =
        p.aborted_transactions.iter().flatten().map(|a| (a.producer_id.0, a.first_offset)).collect();
    let mut buf = p.records.clone().unwrap_or_default();
    let mut kept = Vec::new();
    for set in kafka_protocol::records::RecordBatchDecoder::decode_all(&mut buf).unwrap() {
        for r in set.records {
            let dropped =
                r.transactional && aborted.iter().any(|(pid, first)| *pid == r.producer_id && r.offset >= *first);
            if !r.control && !dropped {
                kept.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
            }
        }
    }
    (kept, p.last_stable_offset, aborted)
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_open_transaction_pins_the_lso_across_a_crash_and_its_timeout_aborts_it() {
    let mut b = Broker::start(2);
    let mut c = b.connect();
    create_topic(&mut c, "open", 1);
    let plain = build_batch_as(0, 1, Producer::NONE, 0, &[(None, Some(b"p0")), (None, Some(b"p1"))]);
    assert_eq!(produce(&mut c, -1, &[("open", 0, plain)]).responses[0].partition_responses[0].error_code, 0);
    let producer = init(&mut c, "tx-open", 8_000);
    assert_eq!(add_partitions(&mut c, "tx-open", producer, "open", &[0]), 0);
    assert_eq!(produce_txn(&mut c, "tx-open", "open", 0, txn_batch(producer, 0, &["t0", "t1", "t2"])), (0, 2));
    assert_eq!(last_stable_offset(&mut c, "open", 0), 2, "the open transaction's first offset");
    assert_eq!(read_committed(&mut c, "open", 0, 0).0, ["p0", "p1"]);

    b.kill9();
    b.spawn();
    let mut c = b.connect();
    assert_eq!(last_stable_offset(&mut c, "open", 0), 2, "still open after the crash");
    let (values, lso, _) = read_committed(&mut c, "open", 0, 0);
    assert_eq!((values, lso), (vec!["p0".to_string(), "p1".to_string()], 2));

    // The coordinator, reloaded, aborts the transaction when its timeout passes.
    wait_until("the timed-out transaction is aborted", Duration::from_secs(30), || {
        last_stable_offset(&mut c, "open", 0) == 6
    });
    let (values, lso, aborted) = read_committed(&mut c, "open", 0, 0);
    assert_eq!(values, ["p0", "p1"], "aborted records are dropped");
    assert_eq!((lso, aborted), (6, vec![(producer.0, 2)]));
    // Its producer was fenced by the abort.
    assert_eq!(end(&mut c, "tx-open", producer, true), 90, "PRODUCER_FENCED");

    // A batch of a transaction that does not include the partition is refused, and
    // leaves no open transaction behind.
    let next = init(&mut c, "tx-open", 8_000);
    assert!(next.1 > producer.1);
    assert_eq!(
        produce_txn(&mut c, "tx-open", "open", 0, txn_batch(next, 0, &["late"])).0,
        120,
        "TRANSACTION_ABORTABLE (Produce v11+)"
    );
    assert_eq!(last_stable_offset(&mut c, "open", 0), 6);
}

#[test]
fn a_committed_transaction_and_its_offsets_survive_a_crash() {
    let mut b = Broker::start(2);
    let mut c = b.connect();
    create_topic(&mut c, "out", 2);
    create_topic(&mut c, "in", 1);
    let producer = init(&mut c, "tx-commit", 60_000);
    assert_eq!(add_partitions(&mut c, "tx-commit", producer, "out", &[0, 1]), 0);
    assert_eq!(produce_txn(&mut c, "tx-commit", "out", 0, txn_batch(producer, 0, &["a", "b"])).0, 0);
    assert_eq!(produce_txn(&mut c, "tx-commit", "out", 1, txn_batch(producer, 0, &["c"])).0, 0);
    // The group's offset, committed with the transaction.
    let added: AddOffsetsToTxnResponse = c.call(
        ApiKey::AddOffsetsToTxn,
        3,
        &AddOffsetsToTxnRequest::default()
            .with_transactional_id(txn_id("tx-commit"))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_group_id(GroupId(StrBytes::from_static_str("etl"))),
    );
    assert_eq!(added.error_code, 0);
    let mut coordinator = b.connect();
    let commit = {
        use kafka_protocol::messages::txn_offset_commit_request::{
            TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
        };
        TxnOffsetCommitRequest::default()
            .with_transactional_id(txn_id("tx-commit"))
            .with_group_id(GroupId(StrBytes::from_static_str("etl")))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_generation_id(-1)
            .with_topics(vec![TxnOffsetCommitRequestTopic::default().with_name(name("in")).with_partitions(vec![
                TxnOffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(42),
            ])])
    };
    let r: TxnOffsetCommitResponse = coordinator.call(ApiKey::TxnOffsetCommit, 3, &commit);
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    assert_eq!(committed_offset(&mut c, "etl", "in"), -1, "not before the transaction commits");
    assert_eq!(end(&mut c, "tx-commit", producer, true), 0);
    assert_eq!(committed_offset(&mut c, "etl", "in"), 42);

    b.kill9();
    b.spawn();
    let mut c = b.connect();
    assert_eq!(read_committed(&mut c, "out", 0, 0).0, ["a", "b"]);
    assert_eq!(read_committed(&mut c, "out", 1, 0).0, ["c"]);
    assert_eq!((last_stable_offset(&mut c, "out", 0), last_stable_offset(&mut c, "out", 1)), (3, 2));
    wait_until("the group's offsets are loaded", Duration::from_secs(30), || {
        committed_offset(&mut c, "etl", "in") == 42
    });
    let d: DescribeTransactionsResponse = c.call(
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default().with_transactional_ids(vec![txn_id("tx-commit")]),
    );
    assert_eq!(d.transaction_states[0].transaction_state.as_str(), "CompleteCommit");
}

/// The group's committed offset of partition 0 of `topic` (-1 when none, or while the
/// coordinator loads).
fn committed_offset(c: &mut Conn, group: &str, topic: &str) -> i64 {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    let req =
        OffsetFetchRequest::default().with_group_id(GroupId(StrBytes::from_string(group.to_string()))).with_topics(
            Some(vec![OffsetFetchRequestTopic::default().with_name(name(topic)).with_partition_indexes(vec![0])]),
        );
    let r: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, 7, &req);
    if r.error_code != 0 {
        return -1;
    }
    r.topics[0].partitions[0].committed_offset
}

/// Compaction of a compacted topic with transactions, as Kafka's cleaner: a key's
/// committed value is never superseded by a later aborted one, nor by one of a
/// transaction still open (compaction stops at the last stable offset), and the
/// aborted records themselves are removed.
#[test]
fn compaction_keeps_committed_values_over_aborted_and_open_ones() {
    let b = Broker::start(1);
    let mut c = b.connect();
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.bytes", "2048"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("delete.retention.ms", "0"),
    ];
    assert_eq!(create_topic_with_configs(&mut c, "txc", 1, &configs).topics[0].error_code, 0);
    let keyed = |producer: (i64, i16), seq: i32, kvs: &[(&str, &str)]| {
        let records: Vec<_> = kvs.iter().map(|(k, v)| (Some(k.as_bytes()), Some(v.as_bytes()))).collect();
        build_batch_as(
            0,
            now_ms(),
            Producer { id: producer.0, epoch: producer.1, base_sequence: seq },
            ATTR_TRANSACTIONAL,
            &records,
        )
    };
    let filler = |c: &mut Conn, from: usize| {
        for i in from..from + 40 {
            let value = format!("filler-{i}-{}", "f".repeat(100));
            let batch = build_batch_as(0, now_ms(), Producer::NONE, 0, &[(Some(b"k3"), Some(value.as_bytes()))]);
            assert_eq!(produce_plain(c, "txc", batch), 0);
        }
    };

    let p = init(&mut c, "tx-compact", 60_000);
    assert_eq!(add_partitions(&mut c, "tx-compact", p, "txc", &[0]), 0);
    assert_eq!(produce_txn(&mut c, "tx-compact", "txc", 0, keyed(p, 0, &[("k1", "c1"), ("k2", "c2")])).0, 0);
    assert_eq!(end(&mut c, "tx-compact", p, true), 0);
    assert_eq!(add_partitions(&mut c, "tx-compact", p, "txc", &[0]), 0);
    assert_eq!(produce_txn(&mut c, "tx-compact", "txc", 0, keyed(p, 2, &[("k1", "a1")])).0, 0);
    assert_eq!(end(&mut c, "tx-compact", p, false), 0);
    filler(&mut c, 0);
    // Another producer leaves a transaction open over k2, then more segments follow.
    let open = init(&mut c, "tx-compact-open", 600_000);
    assert_eq!(add_partitions(&mut c, "tx-compact-open", open, "txc", &[0]), 0);
    let (code, open_offset) = produce_txn(&mut c, "tx-compact-open", "txc", 0, keyed(open, 0, &[("k2", "o2")]));
    assert_eq!(code, 0);
    filler(&mut c, 40);
    assert_eq!(last_stable_offset(&mut c, "txc", 0), open_offset);

    // Compaction has run once fillers below the open transaction went (only segments
    // wholly below it are compacted).
    let below_open = |c: &mut Conn| -> Vec<(String, String)> {
        read_uncommitted(c, "txc", 0)
            .into_iter()
            .filter(|(offset, ..)| *offset < open_offset)
            .map(|(_, k, v)| (k, v))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while below_open(&mut c).iter().filter(|(k, _)| k == "k3").count() == 40 {
        assert!(
            Instant::now() < deadline,
            "no compaction below the open transaction: {:?}\n{}",
            below_open(&mut c),
            b.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let kept = below_open(&mut c);
    assert!(kept.contains(&("k1".into(), "c1".into())), "the committed k1 survives its aborted successor: {kept:?}");
    assert!(kept.contains(&("k2".into(), "c2".into())), "the committed k2 survives the open transaction: {kept:?}");
    assert!(!kept.iter().any(|(_, v)| v == "a1"), "the aborted record is removed: {kept:?}");
    let (committed, ..) = read_committed(&mut c, "txc", 0, 0);
    assert!(committed.starts_with(&["c1".to_string(), "c2".to_string()]), "{committed:?}");
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A non-transactional Produce of one batch: its error.
fn produce_plain(c: &mut Conn, topic: &str, batch: Bytes) -> i16 {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let req = ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(batch))]),
    ]);
    let r: ProduceResponse = c.call(ApiKey::Produce, 11, &req);
    r.responses[0].partition_responses[0].error_code
}

/// Every data record of partition 0 (read_uncommitted): (offset, key, value).
fn read_uncommitted(c: &mut Conn, topic: &str, partition: i32) -> Vec<(i64, String, String)> {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let fp = FetchPartition::default()
            .with_partition(partition)
            .with_fetch_offset(offset)
            .with_partition_max_bytes(1 << 20);
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(vec![fp])]);
        let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req);
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        let mut buf = p.records.clone().unwrap_or_default();
        let sets = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut buf).unwrap();
        let before = offset;
        for set in sets {
            for r in set.records {
                offset = offset.max(r.offset + 1);
                if !r.control {
                    let text = |b: Option<Bytes>| String::from_utf8_lossy(&b.unwrap_or_default()).into_owned();
                    out.push((r.offset, text(r.key), text(r.value)));
                }
            }
        }
        if offset == before || offset >= p.high_watermark {
            return out;
        }
    }
}

/// AddPartitionsToTxn v4, the broker form (KIP-890): a batch of transactions, one
/// added, one only verified (each partition answered by whether the open transaction
/// includes it), and a stale epoch fenced.
#[test]
fn the_batched_broker_form_adds_and_verifies() {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "batched", 3);
    let (a, v) = (init(&mut c, "tx-batch-a", 60_000), init(&mut c, "tx-batch-v", 60_000));
    assert_eq!(add_partitions(&mut c, "tx-batch-v", v, "batched", &[0]), 0);
    let txn = |id: &str, (pid, epoch): (i64, i16), verify_only: bool, partitions: &[i32]| {
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(txn_id(id))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_verify_only(verify_only)
            .with_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(name("batched"))
                .with_partitions(partitions.to_vec())])
    };
    let req = AddPartitionsToTxnRequest::default().with_transactions(vec![
        txn("tx-batch-a", a, false, &[1, 2]),
        txn("tx-batch-v", v, true, &[0, 1]),
        txn("tx-batch-v", (v.0, v.1 - 1), true, &[0]),
        txn("tx-batch-none", (99, 0), true, &[0]),
    ]);
    let r: AddPartitionsToTxnResponse = c.call(ApiKey::AddPartitionsToTxn, 4, &req);
    let codes: Vec<Vec<i16>> = r
        .results_by_transaction
        .iter()
        .map(|t| {
            t.topic_results
                .iter()
                .flat_map(|tr| tr.results_by_partition.iter().map(|p| p.partition_error_code))
                .collect()
        })
        .collect();
    assert_eq!(r.error_code, 0);
    assert_eq!(codes, vec![vec![0, 0], vec![0, 120], vec![90], vec![49]], "added; verified; fenced; unknown id");
    // The added partitions are in tx-batch-a's transaction now; verification changed nothing.
    let d: DescribeTransactionsResponse = c.call(
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![txn_id("tx-batch-a"), txn_id("tx-batch-v")]),
    );
    let parts =
        |i: usize| -> Vec<i32> { d.transaction_states[i].topics.iter().flat_map(|t| t.partitions.clone()).collect() };
    assert_eq!((parts(0), parts(1)), (vec![1, 2], vec![0]));
}
