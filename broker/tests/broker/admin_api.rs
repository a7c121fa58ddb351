//! The admin API over real sockets: each endpoint's JSON, refusals as JSON with their
//! status codes, the bearer token, malformed HTTP, a slow client that does not hold
//! up other admin requests, and Kafka traffic unaffected meanwhile.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::kafka::*;
use crate::common::Broker;
use kafka_protocol::messages::{ApiKey, OffsetCommitResponse};
use keel_protocol::batch::build_batch;
use serde_json::Value;

/// Sends `head` (request line and headers, without the blank line) and `body`;
/// returns the status code and the body.
fn http(port: u16, head: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "{head}\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    parse(&out)
}

fn parse(response: &str) -> (u16, String) {
    let status = response.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

fn get(port: u16, path: &str) -> (u16, String) {
    http(port, &format!("GET {path} HTTP/1.1"), "")
}

fn get_json(port: u16, path: &str) -> Value {
    let (status, body) = get(port, path);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path} answers JSON ({e}): {body}"))
}

/// A refusal: the status and a JSON body naming the error.
fn assert_refused(answer: (u16, String), status: u16) {
    assert_eq!(answer.0, status, "{}", answer.1);
    let v: Value = serde_json::from_str(&answer.1).unwrap_or_else(|e| panic!("JSON error body ({e}): {}", answer.1));
    assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    assert_eq!(v["status"], status);
}

#[test]
fn every_endpoint_answers_json() {
    let b = Broker::start(2);
    let port = b.admin_port;
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "orders", 3).topics[0].error_code, 0);
    for p in 0..3 {
        let records = vec![(None::<&[u8]>, Some(&b"x"[..])); 4];
        let r = produce(&mut c, -1, &[("orders", p, build_batch(0, 1, &records))]);
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    let r: OffsetCommitResponse =
        c.call(ApiKey::OffsetCommit, 8, &offset_commit_request("billing", "orders", &[(1, 1)]));
    assert_eq!(r.topics[0].partitions[0].error_code, 0);

    assert_eq!(get_json(port, "/v1/status/ready"), serde_json::json!({"ready": true}));
    let health = get_json(port, "/v1/cluster/health");
    assert_eq!(health["healthy"], true, "{health}");
    assert_eq!(health["shards"], 2);
    assert_eq!(health["under_replicated_partitions"], 0);
    let brokers = get_json(port, "/v1/brokers");
    assert_eq!(brokers.as_array().map(Vec::len), Some(1), "{brokers}");
    assert_eq!(brokers[0]["node_id"], 1);
    assert_eq!(brokers[0]["port"], b.port);
    let topics = get_json(port, "/v1/topics");
    let orders = topics.as_array().unwrap().iter().find(|t| t["name"] == "orders").expect("orders listed");
    assert_eq!(orders["partitions"], 3);

    let topic = get_json(port, "/v1/topics/orders");
    let partitions = topic["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 3);
    let shards: std::collections::BTreeSet<u64> = partitions.iter().map(|p| p["shard"].as_u64().unwrap()).collect();
    assert_eq!(shards.len(), 2, "partitions spread over both shards: {topic}");
    for p in partitions {
        assert_eq!(p["leader"], 1, "{p}");
        assert_eq!(p["replicas"], serde_json::json!([1]));
        let log = &p["log"];
        assert_eq!((log["log_start_offset"].as_i64(), log["high_watermark"].as_i64()), (Some(0), Some(4)), "{p}");
        assert_eq!(log["log_end_offset"], 4);
        assert!(log["size_bytes"].as_u64().is_some_and(|s| s > 0), "{p}");
    }

    let groups = get_json(port, "/v1/groups");
    assert!(groups.as_array().unwrap().iter().any(|g| g["group"] == "billing"), "{groups}");
    let group = get_json(port, "/v1/groups/billing");
    assert_eq!(group["lag"], 3, "{group}");
    assert_eq!(group["offsets"][0]["committed_offset"], 1);
    assert_eq!(group["offsets"][0]["high_watermark"], 4);
    assert!(group["members"].as_array().is_some());

    let config = get_json(port, "/v1/config");
    assert_eq!(config["smp"], 2);
    assert_eq!(config["kafka_addr"], format!("127.0.0.1:{}", b.port));
    assert_eq!(config["admin_token"], Value::Null);

    let (status, body) = http(port, "PUT /v1/config/log_level HTTP/1.1", r#"{"level":"debug"}"#);
    assert_eq!((status, body.trim()), (200, r#"{"log_level":"debug"}"#));
    assert_eq!(get_json(port, "/v1/config/log_level")["log_level"], "debug");
    assert_refused(http(port, "PUT /v1/config/log_level HTTP/1.1", r#"{"level":"loud"}"#), 400);
    assert_refused(http(port, "PUT /v1/config/log_level HTTP/1.1", "{not json"), 400);
    assert_eq!(http(port, "PUT /v1/config/log_level HTTP/1.1", "info").0, 200);

    let (status, metrics) = get(port, "/metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("keel_requests_total{shard=") && metrics.contains("keel_raft_groups{shard="));
    let (status, public) = get(port, "/public_metrics");
    assert_eq!(status, 200);
    assert!(public.contains("keel_requests_total{shard="), "{public}");
    assert!(!public.contains("keel_raft_groups"), "the public set is small: {public}");
    // The old endpoints keep answering as before.
    assert_eq!(get(port, "/v1/health"), (200, "ok\n".into()));
    let status = get_json(port, "/v1/status");
    assert_eq!(status["shards"].as_array().map(Vec::len), Some(2));
    assert_eq!(get_json(port, "/v1/cluster")["controller"], 1);

    // Refusals: JSON bodies with the right status.
    assert_refused(get(port, "/nope"), 404);
    assert_refused(get(port, "/v1/topics/missing"), 404);
    assert_refused(get(port, "/v1/groups/missing"), 404);
    assert_refused(http(port, "POST /metrics HTTP/1.1", ""), 405);
    assert_refused(http(port, "DELETE /v1/config/log_level HTTP/1.1", ""), 405);
    assert_refused(http(port, "POST /v1/partitions/orders/x/leader HTTP/1.1", ""), 400);
    assert_refused(http(port, "POST /v1/partitions/orders/0/leader?to=z HTTP/1.1", ""), 400);
    assert_refused(http(port, "POST /v1/partitions/orders/0/leader?to=9 HTTP/1.1", ""), 400);
    assert_refused(http(port, "POST /v1/partitions/nope/0/leader HTTP/1.1", ""), 404);
    // A single node leads everything already.
    let (status, body) = http(port, "POST /v1/partitions/orders/0/leader HTTP/1.1", "");
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["moved"], false);
    assert_refused(http(port, "PUT /v1/config/log_level HTTP/1.1", &"x".repeat(4000)), 413);
}

#[test]
fn the_bearer_token_guards_everything_but_health_and_readiness() {
    let b = Broker::start_with(1, "256M", &["--admin-token", "s3cret"]);
    let port = b.admin_port;
    assert_refused(get(port, "/metrics"), 401);
    assert_refused(get(port, "/v1/topics"), 401);
    assert_refused(http(port, "GET /v1/config HTTP/1.1\r\nAuthorization: Bearer wrong", ""), 401);
    assert_refused(http(port, "GET /v1/config HTTP/1.1\r\nAuthorization: s3cret", ""), 401);
    let (status, body) = http(port, "GET /v1/config HTTP/1.1\r\nAuthorization: Bearer s3cret", "");
    assert_eq!(status, 200, "{body}");
    let config: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(config["admin_token"], "<redacted>", "the token is never shown");
    let (status, metrics) = http(port, "GET /metrics HTTP/1.1\r\nAuthorization: Bearer s3cret", "");
    assert!(status == 200 && metrics.contains("keel_partitions{shard=\"0\"}"), "{metrics}");
    assert_eq!(get(port, "/v1/health").0, 200);
    assert_eq!(get(port, "/v1/status/ready").0, 200);
}

#[test]
fn malformed_and_slow_clients_hold_up_nothing() {
    let b = Broker::start(2);
    let port = b.admin_port;
    // Malformed requests: refused with 400 and the connection closed.
    for garbage in ["GARBAGE\r\n\r\n", "GET\r\n\r\n", "GET / HTTP/1.1\r\nno colon header\r\n\r\n"] {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(garbage.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 400"), "{garbage:?} answered {out:?}");
    }
    // Clients that send half a request and wait.
    let mut slow: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(b"GET /metr").unwrap();
            s
        })
        .collect();
    let mut slow_body = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow_body.write_all(b"PUT /v1/config/log_level HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"le").unwrap();
    // Meanwhile other admin requests and Kafka traffic are answered.
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "busy", 2).topics[0].error_code, 0);
    for round in 0..5 {
        let started = Instant::now();
        assert_eq!(get(port, "/v1/health").0, 200);
        assert_eq!(get(port, "/v1/topics").0, 200);
        assert_eq!(get(port, "/metrics").0, 200);
        assert!(started.elapsed() < Duration::from_secs(10), "round {round} took {:?}", started.elapsed());
        let r = produce(&mut c, -1, &[("busy", round % 2, build_batch(0, 1, &[(None, Some(b"v"))]))]);
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0, "Kafka traffic goes on");
    }
    let f = fetch(&mut c, &[("busy", 0, 0), ("busy", 1, 0)], 0, 1);
    let read: usize = f.responses[0].partitions.iter().map(|p| records_of(p.records.as_ref().unwrap()).len()).sum();
    assert_eq!(read, 5);
    // The slow clients finish and are answered too.
    for s in &mut slow {
        s.write_all(b"ics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    }
    drop(slow_body);
    assert_eq!(get(port, "/v1/status/ready").0, 200);
}
