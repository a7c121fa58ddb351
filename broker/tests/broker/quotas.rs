//! Client quotas on the wire: AlterClientQuotas and DescribeClientQuotas kept across a
//! restart, a producer past its byte rate answered with Kafka's throttle time and its
//! connection muted for that long, a throttled fetch answered empty, one quota shared
//! by connections on both shards, controller mutation quotas refusing topics once
//! spent, a request-time quota throttling a busy client, and the connection creation
//! rates of an IP address and of the broker; each counted on /metrics. (Kafka as the oracle for the same APIs: compat/security/quotas.sh.)

use std::time::{Duration, Instant};

use crate::common::kafka::{create_topic, fetch_request, produce_request};
use crate::common::Broker;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey, ApiVersionsRequest, ApiVersionsResponse,
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest,
    DeleteTopicsResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse, FetchResponse, MetadataRequest,
    MetadataResponse, ProduceResponse,
};
use kafka_protocol::protocol::StrBytes;
use keel_protocol::batch::build_batch;

/// The tests' connections all send this client id.
const CLIENT_ID: &str = "keel-tests";

fn set_quota(c: &mut crate::common::Conn, key: &str, value: Option<f64>) -> AlterClientQuotasResponse {
    set_entity_quota(c, "client-id", CLIENT_ID, key, value)
}

fn set_entity_quota(
    c: &mut crate::common::Conn,
    entity_type: &str,
    name: &str,
    key: &str,
    value: Option<f64>,
) -> AlterClientQuotasResponse {
    let entity = EntityData::default()
        .with_entity_type(StrBytes::from_string(entity_type.to_string()))
        .with_entity_name(Some(StrBytes::from_string(name.to_string())));
    let op = OpData::default()
        .with_key(StrBytes::from_string(key.to_string()))
        .with_value(value.unwrap_or_default())
        .with_remove(value.is_none());
    let req = AlterClientQuotasRequest::default()
        .with_entries(vec![EntryData::default().with_entity(vec![entity]).with_ops(vec![op])]);
    c.call(ApiKey::AlterClientQuotas, 1, &req)
}

fn described(c: &mut crate::common::Conn) -> Vec<(String, f64)> {
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

#[test]
fn connections_of_one_client_on_both_shards_share_its_quota() {
    let b = Broker::start(2);
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "shared", 1).topics[0].error_code, 0);
    assert_eq!(set_quota(&mut c, "producer_byte_rate", Some(10_000.0)).entries[0].error_code, 0);
    std::thread::sleep(Duration::from_millis(200));
    // Eight connections land on both shards (the kernel spreads them). The quota
    // allows ten seconds' worth, 100,000 bytes: only a quota kept once for the broker
    // throttles the seventh (105,000 bytes: 10,500 B/s, 500 ms) and the eighth
    // (120,000 bytes: 12,000 B/s, 2 s).
    let value = vec![7u8; 15_000];
    let mut throttles = Vec::new();
    for _ in 0..8 {
        let mut conn = b.connect();
        let batch = build_batch(0, 1_700_000_000_000, &[(None, Some(&value[..]))]);
        let r: ProduceResponse = conn.call(ApiKey::Produce, 11, &produce_request(1, &[("shared", 0, batch)]));
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
        throttles.push(r.throttle_time_ms);
    }
    assert!(throttles[..6].iter().all(|&t| t == 0), "90,000 bytes are within the quota: {throttles:?}");
    assert!((400..=700).contains(&throttles[6]), "the seventh is 500 ms past the quota: {throttles:?}");
    assert!((1_700..=2_200).contains(&throttles[7]), "the eighth is 2 s past the quota: {throttles:?}");
}

fn topic(name: &str, partitions: i32) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(crate::common::kafka::name(name))
        .with_num_partitions(partitions)
        .with_replication_factor(1)
}

fn create(b: &Broker, version: i16, topics: Vec<CreatableTopic>) -> CreateTopicsResponse {
    // A connection of its own: a throttled one is muted.
    b.connect().call(
        ApiKey::CreateTopics,
        version,
        &CreateTopicsRequest::default().with_topics(topics).with_timeout_ms(10_000),
    )
}

#[test]
fn controller_mutations_past_the_quota_are_refused_then_throttled_as_kafka_does() {
    let b = Broker::start(2);
    let mut c = b.connect();
    // One partition a second: the bucket holds 11.
    assert_eq!(set_quota(&mut c, "controller_mutation_rate", Some(1.0)).entries[0].error_code, 0);
    std::thread::sleep(Duration::from_millis(200));
    // 20 partitions are taken whole, the bucket was not empty; then it is at -9.
    let r = create(&b, 7, vec![topic("m-a", 20)]);
    assert_eq!((r.topics[0].error_code, r.throttle_time_ms), (0, 0));
    // Strict (v6+): an invalid topic keeps its own error, valid ones are refused.
    let r = create(&b, 7, vec![topic("m-b", 1), topic("m-bad", 0), topic("m-c", 1)]);
    let codes: Vec<i16> = r.topics.iter().map(|t| t.error_code).collect();
    assert_eq!(codes, [89, 37, 89], "THROTTLING_QUOTA_EXCEEDED, INVALID_PARTITIONS");
    assert_eq!(r.topics[0].error_message.as_deref(), Some("The throttling quota has been exceeded."));
    assert!((8_000..=9_100).contains(&r.throttle_time_ms), "about 9 s to refill: {}", r.throttle_time_ms);
    let d: DeleteTopicsResponse = b.connect().call(
        ApiKey::DeleteTopics,
        6,
        &DeleteTopicsRequest::default()
            .with_topics(vec![DeleteTopicState::default().with_name(Some(crate::common::kafka::name("m-a")))]),
    );
    assert_eq!(d.responses[0].error_code, 89);
    let p: CreatePartitionsResponse = b.connect().call(
        ApiKey::CreatePartitions,
        3,
        &CreatePartitionsRequest::default().with_topics(vec![CreatePartitionsTopic::default()
            .with_name(crate::common::kafka::name("m-a"))
            .with_count(21)]),
    );
    assert_eq!(p.results[0].error_code, 89);
    // Permissive (before v6): taken anyway, and throttled.
    let r = create(&b, 5, vec![topic("m-d", 1)]);
    assert_eq!(r.topics[0].error_code, 0);
    assert!(r.throttle_time_ms >= 8_000, "throttled past the empty bucket: {}", r.throttle_time_ms);
    // The throttled connection is muted for the throttle (KIP-219).
    let mut muted = b.connect();
    let r: CreateTopicsResponse =
        muted.call(ApiKey::CreateTopics, 7, &CreateTopicsRequest::default().with_topics(vec![topic("m-e", 1)]));
    assert_eq!(r.topics[0].error_code, 89);
    let asked = Instant::now();
    let _: ApiVersionsResponse = muted.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert!(
        asked.elapsed() >= Duration::from_millis(r.throttle_time_ms as u64 - 200),
        "answered after {:?}",
        asked.elapsed()
    );
    assert!(b.metric_sum("keel_quota_throttles_total") >= 4);
    // Another client id has no quota ("other-tool" in place of the tests' id).
    let mut other = b.connect();
    let (_, mut frame) =
        other.frame(ApiKey::CreateTopics, 7, &CreateTopicsRequest::default().with_topics(vec![topic("m-f", 5)]));
    let at = frame.windows(CLIENT_ID.len()).position(|w| w == CLIENT_ID.as_bytes()).unwrap();
    frame[at..at + CLIENT_ID.len()].copy_from_slice(b"other-tool");
    other.send_raw(&frame);
    let mut answer = other.read_frame().expect("an answer").split_off(5);
    let r = <CreateTopicsResponse as kafka_protocol::protocol::Decodable>::decode(&mut answer, 7).unwrap();
    assert_eq!((r.topics[0].error_code, r.throttle_time_ms), (0, 0));
}

/// Opens a connection from `source` (any 127/8 address reaches the broker) and asks
/// ApiVersions: whether it was answered, and how long that or the close took.
fn api_versions_from(b: &Broker, source: &str) -> (bool, Duration) {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.bind(&format!("{source}:0").parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
    socket.connect(&format!("127.0.0.1:{}", b.port).parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
    let stream: std::net::TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut conn = crate::common::Conn::from_stream(stream);
    let started = Instant::now();
    let answered =
        conn.try_call::<_, ApiVersionsResponse>(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).is_some();
    (answered, started.elapsed())
}

#[test]
fn connections_past_an_ip_address_rate_are_closed_unserved_after_the_throttle() {
    let b = Broker::start(2);
    let mut c = b.connect();
    // Two a second from 127.0.0.3: the rate is taken over ten seconds at least, so 20
    // connections pass; the 21st is 2.1 a second, refused and closed after
    // (2.1 - 2) / 2 x 10 s = 500 ms, and taken back. (By then the window is half a
    // second longer, so the next may pass again, as on Kafka.)
    let r = set_entity_quota(&mut c, "ip", "127.0.0.3", "connection_creation_rate", Some(2.0));
    assert_eq!(r.entries[0].error_code, 0, "{:?}", r.entries[0].error_message);
    std::thread::sleep(Duration::from_millis(200));
    let outcomes: Vec<(bool, Duration)> = (0..24).map(|_| api_versions_from(&b, "127.0.0.3")).collect();
    assert!(outcomes[..20].iter().all(|(answered, _)| *answered), "{outcomes:?}");
    let (answered, took) = outcomes[20];
    assert!(!answered && took >= Duration::from_millis(400), "the 21st is closed after its throttle: {outcomes:?}");
    let refused = outcomes.iter().filter(|(a, _)| !a).count();
    assert!(refused >= 2, "{outcomes:?}");
    assert_eq!(b.metric_sum("keel_connections_refused_total"), refused as u64, "{outcomes:?}");
    // Other addresses are not limited.
    assert!((0..25).all(|_| api_versions_from(&b, "127.0.0.4").0));
}

#[test]
fn the_broker_connection_creation_rate_makes_new_connections_wait() {
    let b = Broker::start_with(2, "512M", &["--max-connection-creation-rate", "5"]);
    // Five a second over a window of at least ten seconds: 50 connections fit; the
    // 54th is 54 / 5 = 10.8 seconds' worth, so the broker admits it no sooner than
    // 0.8 s after the first, however fast or slow the client opens them (the rate's
    // window is ten seconds plus the time since its first sample).
    let started = Instant::now();
    let first: Duration = (0..50).map(|_| api_versions_from(&b, "127.0.0.5").1).sum();
    let first_done = started.elapsed();
    for _ in 0..4 {
        assert!(api_versions_from(&b, "127.0.0.5").0, "a connection over the broker's rate waits and is served");
    }
    let all = started.elapsed();
    assert!(first < Duration::from_secs(5), "the first 50 do not wait: {first:?}");
    assert!(all >= Duration::from_millis(750), "the 54th waits for the rate: {first_done:?} then {all:?}");
    if first_done < Duration::from_millis(700) {
        assert!(b.metric_sum("keel_connections_delayed_total") >= 1, "{first_done:?} then {all:?}");
    }
}

#[test]
fn a_client_past_its_request_time_quota_is_throttled_and_muted() {
    let b = Broker::start(2);
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "busy", 8).topics[0].error_code, 0);
    // 0.0001 % of a core: one microsecond over the ten-second window, which the
    // first Metadata requests spend; the throttle is capped at one second, as Kafka
    // caps it.
    assert_eq!(set_quota(&mut c, "request_percentage", Some(0.0001)).entries[0].error_code, 0);
    std::thread::sleep(Duration::from_millis(200));
    let mut conn = b.connect();
    let throttled = (0..20)
        .map(|_| conn.call::<_, MetadataResponse>(ApiKey::Metadata, 12, &MetadataRequest::default().with_topics(None)))
        .find(|r| r.throttle_time_ms > 0)
        .expect("a client over its request-time quota is throttled");
    assert!(throttled.throttle_time_ms <= 1_000, "capped at one window: {}", throttled.throttle_time_ms);
    let asked = Instant::now();
    let _: ApiVersionsResponse = conn.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    let waited = asked.elapsed();
    assert!(waited >= Duration::from_millis(throttled.throttle_time_ms as u64 * 8 / 10), "answered after {waited:?}");
    // Removed, it no longer throttles.
    assert_eq!(set_quota(&mut c, "request_percentage", None).entries[0].error_code, 0);
    std::thread::sleep(Duration::from_millis(1_200));
    let mut fresh = b.connect();
    for _ in 0..20 {
        let r: MetadataResponse = fresh.call(ApiKey::Metadata, 12, &MetadataRequest::default().with_topics(None));
        assert_eq!(r.throttle_time_ms, 0);
    }
}
