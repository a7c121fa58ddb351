//! Client quotas on the wire: AlterClientQuotas and DescribeClientQuotas kept across a
//! restart, a producer past its byte rate answered with Kafka's throttle time and its
//! connection muted for that long, a throttled fetch answered empty, and the throttle
//! counted on /metrics. (Kafka as the oracle for the same APIs: compat/security/quotas.sh.)

mod common;

use std::time::{Duration, Instant};

use common::kafka::{create_topic, fetch_request, produce_request};
use common::Broker;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey, ApiVersionsRequest, ApiVersionsResponse,
    DescribeClientQuotasRequest, DescribeClientQuotasResponse, FetchResponse, ProduceResponse,
};
use kafka_protocol::protocol::StrBytes;
use keel_protocol::batch::build_batch;

/// The tests' connections all send this client id.
const CLIENT_ID: &str = "keel-tests";

fn set_quota(c: &mut common::Conn, key: &str, value: Option<f64>) -> AlterClientQuotasResponse {
    let entity = EntityData::default()
        .with_entity_type(StrBytes::from_static_str("client-id"))
        .with_entity_name(Some(StrBytes::from_static_str(CLIENT_ID)));
    let op = OpData::default()
        .with_key(StrBytes::from_string(key.to_string()))
        .with_value(value.unwrap_or_default())
        .with_remove(value.is_none());
    let req = AlterClientQuotasRequest::default()
        .with_entries(vec![EntryData::default().with_entity(vec![entity]).with_ops(vec![op])]);
    c.call(ApiKey::AlterClientQuotas, 1, &req)
}

fn described(c: &mut common::Conn) -> Vec<(String, f64)> {
    let req = DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
        .with_entity_type(StrBytes::from_static_str("client-id"))
        .with_match_type(0)
        .with_match(Some(StrBytes::from_static_str(CLIENT_ID)))]);
    let r: DescribeClientQuotasResponse = c.call(ApiKey::DescribeClientQuotas, 1, &req);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    r.entries.unwrap_or_default().iter().flat_map(|e| e.values.iter().map(|v| (v.key.to_string(), v.value))).collect()
}

#[test]
fn a_client_past_its_byte_rate_is_throttled_and_muted_as_kafka_does() {
    let mut b = Broker::start(2);
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "q", 1).topics[0].error_code, 0);
    // 10,000 B/s. The rate is taken over at least ten seconds, so 110,000 bytes at once
    // are 11,000 B/s: (11,000 - 10,000) / 10,000 of the ten seconds, a 1 s throttle.
    let r = set_quota(&mut c, "producer_byte_rate", Some(10_000.0));
    assert_eq!(r.entries[0].error_code, 0, "{:?}", r.entries[0].error_message);
    assert_eq!(described(&mut c), [("producer_byte_rate".to_string(), 10_000.0)]);
    std::thread::sleep(Duration::from_millis(200));

    let value = vec![7u8; 55_000];
    let batch = || build_batch(0, 1_700_000_000_000, &[(None, Some(&value[..]))]);
    let within: ProduceResponse = c.call(ApiKey::Produce, 11, &produce_request(1, &[("q", 0, batch())]));
    assert_eq!(within.throttle_time_ms, 0, "55 kB is within ten seconds of 10,000 B/s");
    let past: ProduceResponse = c.call(ApiKey::Produce, 11, &produce_request(1, &[("q", 0, batch())]));
    assert_eq!(past.responses[0].partition_responses[0].error_code, 0, "a throttled write is still written");
    assert!(
        (900..=1_300).contains(&past.throttle_time_ms),
        "about a second of throttle, got {} ms",
        past.throttle_time_ms
    );
    // The connection is muted for that long: its next request waits (KIP-219).
    let asked = Instant::now();
    let _: ApiVersionsResponse = c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    let waited = asked.elapsed();
    assert!(waited >= Duration::from_millis(past.throttle_time_ms as u64 - 100), "answered after {waited:?}");
    assert!(b.metric_sum("keel_quota_throttles_total") >= 1);

    // A consumer past its quota gets an empty answer with the throttle time.
    let r = set_quota(&mut c, "consumer_byte_rate", Some(1_000.0));
    assert_eq!(r.entries[0].error_code, 0);
    std::thread::sleep(Duration::from_millis(200));
    let mut fetched = 0;
    let mut throttled = None;
    for _ in 0..5 {
        let f: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch_request(&[("q", 0, 0)], 0, 1));
        if f.throttle_time_ms > 0 {
            throttled = Some(f);
            break;
        }
        fetched += f
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
            .sum::<usize>();
    }
    let f = throttled.expect("a fetch past the quota is throttled");
    assert!(f.responses.is_empty(), "a throttled fetch is answered empty");
    assert!(fetched <= 10_000, "a fetch is capped at ten seconds of the quota, got {fetched} bytes");

    // Removed, the quota no longer throttles; what is set is kept across a restart.
    set_quota(&mut c, "producer_byte_rate", None);
    b.stop();
    b.spawn();
    let mut c = b.connect();
    assert_eq!(described(&mut c), [("consumer_byte_rate".to_string(), 1_000.0)]);
    set_quota(&mut c, "consumer_byte_rate", None);
    std::thread::sleep(Duration::from_millis(200));
    assert!(described(&mut c).is_empty());
    let free: ProduceResponse = c.call(ApiKey::Produce, 11, &produce_request(1, &[("q", 0, batch())]));
    assert_eq!(free.throttle_time_ms, 0);
}
