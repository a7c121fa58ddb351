//! Malformed and hostile input: the broker answers with the right error or closes the
//! offending connection, keeps serving everyone else, never panics and appends nothing
//! from a rejected batch.

use crate::common::kafka::*;
use crate::common::Broker;
use bytes::Bytes;
use kafka_protocol::messages::*;
use keel_protocol::batch::build_batch;

fn api_versions_ok(b: &Broker) {
    let mut c = b.connect();
    let r: ApiVersionsResponse = c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert_eq!(r.error_code, 0);
    assert!(r.api_keys.iter().any(|k| k.api_key == ApiKey::Produce as i16));
}

fn assert_closed(c: &mut crate::common::Conn) {
    assert!(c.read_frame().is_none(), "connection should have been closed");
}

#[test]
fn bad_frames_close_only_their_connection() {
    let b = Broker::start(2);
    let bad: Vec<Vec<u8>> = vec![
        (-1i32).to_be_bytes().to_vec(),
        i32::MAX.to_be_bytes().to_vec(),
        0i32.to_be_bytes().to_vec(),
        // A 3-byte frame cannot hold a request header.
        [&3i32.to_be_bytes()[..], &[0, 1, 2]].concat(),
        // Unknown API key 999.
        [&10i32.to_be_bytes()[..], &999i16.to_be_bytes(), &0i16.to_be_bytes(), &7i32.to_be_bytes(), &[0, 0]].concat(),
        // CreateAcls v3 whose header ends early (no tagged fields), an API Kafka serves
        // and Keel does not advertise yet (ShareFetch v1; docs/compatibility.md says
        // why), and SaslHandshake v2, a version nobody serves: closed, as Kafka closes a
        // connection whose request it cannot read or whose API it does not serve.
        [&10i32.to_be_bytes()[..], &30i16.to_be_bytes(), &3i16.to_be_bytes(), &7i32.to_be_bytes(), &[0, 0]].concat(),
        [&10i32.to_be_bytes()[..], &17i16.to_be_bytes(), &2i16.to_be_bytes(), &7i32.to_be_bytes(), &[0, 0]].concat(),
        [&10i32.to_be_bytes()[..], &78i16.to_be_bytes(), &1i16.to_be_bytes(), &7i32.to_be_bytes(), &[0, 0]].concat(),
        // Metadata v12 with a garbage body.
        [
            &12i32.to_be_bytes()[..],
            &3i16.to_be_bytes(),
            &12i16.to_be_bytes(),
            &7i32.to_be_bytes(),
            &[0xff, 0xff, 0xff, 0xff],
        ]
        .concat(),
        // CreateTopics v7 claiming 4 billion topics in a 16-byte body: the decoder must
        // fail on the missing bytes, not abort on the allocation.
        [
            &16i32.to_be_bytes()[..],
            &19i16.to_be_bytes(),
            &7i16.to_be_bytes(),
            &7i32.to_be_bytes(),
            &[0xff, 0xff, 0],
            &[0xff, 0xff, 0xff, 0xff, 0x0f],
        ]
        .concat(),
        // Produce v2 is below what Kafka 4 (and Keel) serve.
        [&10i32.to_be_bytes()[..], &0i16.to_be_bytes(), &2i16.to_be_bytes(), &7i32.to_be_bytes(), &[0, 0]].concat(),
    ];
    for frame in bad {
        let mut c = b.connect();
        c.send_raw(&frame);
        assert_closed(&mut c);
        api_versions_ok(&b);
    }
    // A truncated frame followed by a hang-up.
    let mut c = b.connect();
    c.send_raw(&[0, 0, 0, 50, 0, 18]);
    drop(c);
    api_versions_ok(&b);
    let mut b = b;
    assert!(b.is_running());
    assert!(!b.log().contains("panicked"), "{}", b.log());
}

#[test]
fn unknown_api_versions_version_gets_v0_answer() {
    let b = Broker::start(1);
    let mut c = b.connect();
    // ApiVersions v99: answered with a v0 body carrying UNSUPPORTED_VERSION.
    let frame =
        [&10i32.to_be_bytes()[..], &18i16.to_be_bytes(), &99i16.to_be_bytes(), &42i32.to_be_bytes(), &[0, 0]].concat();
    c.send_raw(&frame);
    let mut resp = c.read_frame().unwrap();
    assert_eq!(&resp[..4], &42i32.to_be_bytes());
    let mut body = resp.split_off(4);
    let r = <ApiVersionsResponse as kafka_protocol::protocol::Decodable>::decode(&mut body, 0).unwrap();
    assert_eq!(r.error_code, 35);
    assert!(!r.api_keys.is_empty());
}

#[test]
fn corrupt_batches_are_refused_and_not_appended() {
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "bad", 1);
    let good = build_batch(0, 1, &[(Some(b"k"), Some(b"v"))]);
    let mut flipped = good.to_vec();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let mut magic1 = good.to_vec();
    magic1[16] = 1;
    let truncated = good.slice(..good.len() - 3);
    let mut bad_len = good.to_vec();
    bad_len[8..12].copy_from_slice(&5i32.to_be_bytes());
    let cases: Vec<(Bytes, i16)> = vec![
        (Bytes::from(flipped), 2),
        (Bytes::from(magic1), 43),
        (truncated, 2),
        (Bytes::from(bad_len), 2),
        // No batch, or two: Produce v3+ carries exactly one (INVALID_RECORD, as Kafka).
        (Bytes::new(), 87),
        (Bytes::from([&good[..], &good[..]].concat()), 87),
    ];
    for (records, code) in cases {
        let r = produce(&mut c, -1, &[("bad", 0, records)]);
        assert_eq!(r.responses[0].partition_responses[0].error_code, code);
    }
    let r = produce(&mut c, -1, &[("bad", 0, good)]);
    let p = &r.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.base_offset), (0, 0), "only the valid batch is appended, at offset 0");
    // Unknown topic and partition.
    let r = produce(&mut c, -1, &[("bad", 7, build_batch(0, 1, &[(None, Some(b"x"))]))]);
    assert_eq!(r.responses[0].partition_responses[0].error_code, 3);
}

#[test]
fn oversized_batch_is_message_too_large() {
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "big", 1);
    let value = vec![7u8; 1_100_000];
    let r = produce(&mut c, 1, &[("big", 0, build_batch(0, 1, &[(None, Some(&value))]))]);
    assert_eq!(r.responses[0].partition_responses[0].error_code, 10);
}

/// As in Kafka, only Metadata creates missing topics (producers ask it first); a
/// Produce to a missing topic is UNKNOWN_TOPIC_OR_PARTITION and creates nothing.
#[test]
fn produce_to_a_missing_topic_creates_nothing() {
    let b = Broker::start(2);
    let mut c = b.connect();
    let r = produce(&mut c, 1, &[("not-made", 0, build_batch(0, 1, &[(None, Some(b"x"))]))]);
    assert_eq!(r.responses[0].partition_responses[0].error_code, 3);
    let f = fetch(&mut c, &[("not-made", 0, 0)], 0, 1);
    assert_eq!(f.responses[0].partitions[0].error_code, 3, "the topic was created");
}

/// A fetch asking for everything (max_bytes and partition_max_bytes at i32::MAX) over
/// partitions holding 6 MiB each gets at most the broker's `fetch_max_bytes` (set to
/// 2 MiB here) plus one batch, with every partition answered; the next fetches go on
/// from where it stopped and read everything.
#[test]
fn greedy_fetches_are_capped_by_fetch_max_bytes() {
    const CAP: usize = 2 << 20;
    const PARTITIONS: i32 = 4;
    let b = Broker::start_with_yaml(2, "256M", &[], &format!("fetch_max_bytes: {CAP}\n"));
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "greedy", PARTITIONS).topics[0].error_code, 0);
    let value = vec![b'g'; 256 << 10];
    let batch = build_batch(0, 0, &[(None, Some(&value[..]))]);
    for _ in 0..24 {
        let parts: Vec<(&str, i32, Bytes)> = (0..PARTITIONS).map(|p| ("greedy", p, batch.clone())).collect();
        let r = produce(&mut c, -1, &parts);
        assert!(r.responses[0].partition_responses.iter().all(|p| p.error_code == 0));
    }
    let mut offsets = vec![0i64; PARTITIONS as usize];
    let mut fetches = 0;
    while offsets.iter().any(|o| *o < 24) {
        let topic =
            kafka_protocol::messages::fetch_request::FetchTopic::default().with_topic(name("greedy")).with_partitions(
                (0..PARTITIONS)
                    .map(|p| {
                        kafka_protocol::messages::fetch_request::FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(offsets[p as usize])
                            .with_partition_max_bytes(i32::MAX)
                    })
                    .collect(),
            );
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_bytes(i32::MAX)
            .with_min_bytes(1)
            .with_session_epoch(-1)
            .with_topics(vec![topic]);
        let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req);
        let parts = &r.responses[0].partitions;
        assert_eq!(parts.len(), PARTITIONS as usize, "every partition is answered");
        let mut total = 0;
        for p in parts {
            assert_eq!(p.error_code, 0);
            let records = p.records.clone().unwrap_or_default();
            total += records.len();
            let read = records_of(&records);
            if let Some((last, _, _)) = read.last() {
                assert_eq!(read[0].0, offsets[p.partition_index as usize], "reads go on where the last stopped");
                offsets[p.partition_index as usize] = last + 1;
            }
        }
        assert!(total > 0, "a fetch with data left returns some");
        assert!(total <= CAP + batch.len(), "a fetch returned {total} bytes, cap {CAP} + one batch");
        fetches += 1;
        assert!(fetches < 100, "reading 24 MiB in 2 MiB fetches ends");
    }
    assert!(fetches >= 12, "24 MiB took {fetches} fetches of at most 2 MiB");
}
