//! Idempotent producer semantics on the wire: a retried batch inside the window is
//! answered with its original offset and not appended twice; a gap is
//! OUT_OF_ORDER_SEQUENCE_NUMBER; an old epoch is refused; producer state survives a
//! restart. Also LogAppendTime topics.

use crate::common::kafka::*;
use crate::common::Broker;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use keel_protocol::batch::{build_batch, BatchHeader};

/// A batch from producer `pid`/`epoch` starting at sequence `seq` with `n` records.
fn idempotent_batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Bytes {
    let values: Vec<Vec<u8>> = (0..n).map(|i| format!("v{}", seq as usize + i).into_bytes()).collect();
    let recs: Vec<keel_protocol::batch::KeyValue> = values.iter().map(|v| (None, Some(v.as_slice()))).collect();
    let mut b = BytesMut::from(&build_batch(0, 1, &recs)[..]);
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    b[51..53].copy_from_slice(&epoch.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

fn produce_one(c: &mut crate::common::Conn, topic: &str, batch: Bytes) -> (i16, i64) {
    let r = produce(c, -1, &[(topic, 0, batch)]);
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

#[test]
fn retries_are_deduplicated_and_gaps_refused() {
    let mut b = Broker::start(2);
    let mut c = b.connect();
    create_topic(&mut c, "idem", 1);
    let init: InitProducerIdResponse = c.call(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000),
    );
    assert_eq!(init.error_code, 0);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    assert!(pid >= 0);
    assert_eq!(produce_one(&mut c, "idem", idempotent_batch(pid, epoch, 0, 3)), (0, 0));
    assert_eq!(produce_one(&mut c, "idem", idempotent_batch(pid, epoch, 3, 2)), (0, 3));
    // A retry of either batch gets its original offset back.
    assert_eq!(produce_one(&mut c, "idem", idempotent_batch(pid, epoch, 0, 3)), (0, 0));
    assert_eq!(produce_one(&mut c, "idem", idempotent_batch(pid, epoch, 3, 2)), (0, 3));
    // A gap in the sequence.
    assert_eq!(produce_one(&mut c, "idem", idempotent_batch(pid, epoch, 9, 1)).0, 45);
    // Producer state is rebuilt from the log after a crash.
    b.kill9();
    b.spawn();
    let mut c = b.connect();
    assert_eq!(produce_one(&mut c, "idem", idempotent_batch(pid, epoch, 3, 2)), (0, 3));
    assert_eq!(produce_one(&mut c, "idem", idempotent_batch(pid, epoch, 5, 1)), (0, 5));
    // A bumped epoch starts at sequence 0; the old epoch is then fenced.
    assert_eq!(produce_one(&mut c, "idem", idempotent_batch(pid, epoch + 1, 0, 1)), (0, 6));
    assert_eq!(produce_one(&mut c, "idem", idempotent_batch(pid, epoch, 6, 1)).0, 47);
    let f = fetch(&mut c, &[("idem", 0, 0)], 0, 1);
    let values: Vec<_> =
        records_of(f.responses[0].partitions[0].records.as_ref().unwrap()).into_iter().map(|r| r.2.unwrap()).collect();
    assert_eq!(
        values,
        ["v0", "v1", "v2", "v3", "v4", "v5", "v0"].map(|s| Bytes::from_static(s.as_bytes())),
        "each record once"
    );
}

#[test]
fn log_append_time_topics_stamp_batches() {
    let b = Broker::start(1);
    let mut c = b.connect();
    let req = CreateTopicsRequest::default().with_timeout_ms(5000).with_topics(vec![
        kafka_protocol::messages::create_topics_request::CreatableTopic::default()
            .with_name(name("lat"))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(vec![kafka_protocol::messages::create_topics_request::CreatableTopicConfig::default()
                .with_name("message.timestamp.type".into())
                .with_value(Some("LogAppendTime".into()))]),
    ]);
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &req);
    assert_eq!(r.topics[0].error_code, 0);
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let r = produce(&mut c, 1, &[("lat", 0, build_batch(0, 12345, &[(None, Some(b"x"))]))]);
    let p = &r.responses[0].partition_responses[0];
    assert!(p.log_append_time_ms >= before, "log append time {} is before the request", p.log_append_time_ms);
    let f = fetch(&mut c, &[("lat", 0, 0)], 5000, 1);
    let records = f.responses[0].partitions[0].records.clone().unwrap();
    let h = BatchHeader::parse(&records).unwrap();
    assert_eq!(h.max_timestamp, p.log_append_time_ms);
    assert_ne!(h.attributes & 0x08, 0, "timestamp type is LogAppendTime");
    keel_protocol::batch::validate(&records).expect("the re-stamped batch has a valid CRC");
}
