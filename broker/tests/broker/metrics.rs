//! `/metrics` under a known load: request counts, bytes and per-topic figures agree
//! with what the client did, and percentiles are there for each shard (two shards).
//! Also: every metric the Grafana dashboard queries exists in a live Keel's
//! `/metrics`.

use std::collections::BTreeSet;

use crate::common::kafka::*;
use crate::common::{Broker, Conn};
use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, FetchResponse, OffsetCommitResponse, ProduceResponse};
use kafka_protocol::protocol::Decodable;
use keel_protocol::batch::build_batch;

const TOPIC: &str = "load";
const PARTITIONS: i32 = 4;
/// Produce requests, records per request, value size, fetch requests.
const N: usize = 24;
const M: usize = 5;
const VALUE_BYTES: usize = 100;
const K: usize = 6;

/// Sends one request and reads its answer; returns the bytes sent and received (size
/// prefixes included, as the broker counts them) and the decoded body.
fn exchange<Resp: Decodable>(
    c: &mut Conn,
    key: ApiKey,
    version: i16,
    body: &impl kafka_protocol::protocol::Encodable,
) -> (usize, usize, Resp) {
    let (_, frame) = c.frame(key, version, body);
    c.send_raw(&frame);
    let mut response = c.read_frame().expect("an answer");
    let received = response.len() + 4;
    let header = if key.response_header_version(version) >= 1 { 5 } else { 4 };
    let mut rest = response.split_off(header);
    (frame.len(), received, Resp::decode(&mut rest, version).expect("the answer decodes"))
}

/// Sum over the series of `name` whose labels contain every one of `labels`.
fn sum(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn metrics_agree_with_a_known_load_on_two_shards() {
    let b = Broker::start(2);
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, TOPIC, PARTITIONS).topics[0].error_code, 0);
    // The counters start now: what the setup cost is read first and subtracted.
    let before = b.admin_get("/metrics");
    let (mut produce_sent, mut produce_received, mut batch_bytes) = (0, 0, 0);
    for i in 0..N {
        let value = [b'v'; VALUE_BYTES];
        let records: Vec<_> = (0..M).map(|_| (None::<&[u8]>, Some(&value[..]))).collect();
        let batch = build_batch(0, 1_000 + i as i64, &records);
        batch_bytes += batch.len();
        let partition = (i % PARTITIONS as usize) as i32;
        let request = produce_request(-1, &[(TOPIC, partition, batch)]);
        let (sent, received, r): (_, _, ProduceResponse) = exchange(&mut c, ApiKey::Produce, 11, &request);
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
        produce_sent += sent;
        produce_received += received;
    }
    let (mut fetch_sent, mut fetch_received, mut fetched_bytes) = (0, 0, 0);
    for _ in 0..K {
        let parts: Vec<_> = (0..PARTITIONS).map(|p| (TOPIC, p, 0)).collect();
        let request = fetch_request(&parts, 0, 1);
        let (sent, received, r): (_, _, FetchResponse) = exchange(&mut c, ApiKey::Fetch, 12, &request);
        fetch_sent += sent;
        fetch_received += received;
        fetched_bytes +=
            r.responses[0].partitions.iter().map(|p| p.records.as_ref().map_or(0, Bytes::len)).sum::<usize>();
    }
    assert_eq!(fetched_bytes, K * batch_bytes, "every fetch read every batch");
    // A group that committed half of partition 0 lags by the rest.
    let committed = (N / PARTITIONS as usize / 2 * M) as i64;
    let commit = offset_commit_request("lagging", TOPIC, &[(0, committed)]);
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 8, &commit);
    assert_eq!(r.topics[0].partitions[0].error_code, 0);

    let after = b.admin_get("/metrics");
    let delta = |name: &str, labels: &[&str]| sum(&after, name, labels) - sum(&before, name, labels);
    let produce = ["api=\"Produce\""];
    let fetch = ["api=\"Fetch\""];
    assert_eq!(delta("keel_requests_total", &produce), N as f64, "{after}");
    assert_eq!(delta("keel_requests_total", &fetch), K as f64);
    assert_eq!(delta("keel_request_bytes_total", &produce), produce_sent as f64);
    assert_eq!(delta("keel_response_bytes_total", &produce), produce_received as f64);
    assert_eq!(delta("keel_request_bytes_total", &fetch), fetch_sent as f64);
    assert_eq!(delta("keel_response_bytes_total", &fetch), fetch_received as f64);
    let topic = ["topic=\"load\""];
    assert_eq!(delta("keel_topic_bytes_in_total", &topic), batch_bytes as f64);
    assert_eq!(delta("keel_topic_records_in_total", &topic), (N * M) as f64);
    assert_eq!(delta("keel_topic_batches_in_total", &topic), N as f64);
    assert_eq!(delta("keel_topic_bytes_out_total", &topic), fetched_bytes as f64);
    let high_watermark = (N / PARTITIONS as usize * M) as i64;
    assert_eq!(sum(&after, "keel_consumer_group_lag", &["group=\"lagging\""]), (high_watermark - committed) as f64);

    // Both shards own partitions: each recorded batches, fsyncs and group commits.
    for shard in ["0", "1"] {
        let s = format!("shard=\"{shard}\"");
        for name in ["keel_produce_batch_bytes", "keel_fsync_seconds", "keel_flush_pass_logs"] {
            for q in ["0.5", "0.99", "0.999"] {
                let series = format!("{name}{{{s},quantile=\"{q}\"}} ");
                let value = after.lines().find_map(|l| l.strip_prefix(&series)).and_then(|v| v.parse::<f64>().ok());
                assert!(value.is_some_and(|v| v > 0.0), "{series}: {value:?}\n{after}");
            }
        }
        let partitions = sum(&after, "keel_partitions", &[&s]);
        assert!(partitions >= 2.0, "shard {shard} owns two partitions of {TOPIC}: {partitions}");
        assert_eq!(sum(&after, "keel_partition_leaders", &[&s]), partitions, "a single node leads all it owns");
        assert!(after.contains(&format!("keel_under_replicated_partitions{{{s}}} 0")), "{after}");
    }
    // The produce batch size is what was sent.
    let p50 = sum(&after, "keel_produce_batch_bytes", &["quantile=\"0.5\"", "shard=\"0\""]);
    assert!((p50 - batch_bytes as f64 / N as f64).abs() / p50 < 0.02, "p50 {p50}");

    // Request latency percentiles per shard: connections spread over both shards.
    let mut seen = BTreeSet::new();
    for _ in 0..64 {
        let mut c = b.connect();
        let _: kafka_protocol::messages::MetadataResponse =
            c.call(ApiKey::Metadata, 12, &kafka_protocol::messages::MetadataRequest::default());
        let text = b.admin_get("/metrics");
        for shard in ["0", "1"] {
            let all_quantiles = ["0.5", "0.99", "0.999"].iter().all(|q| {
                let series =
                    format!("keel_request_latency_seconds{{shard=\"{shard}\",api=\"Metadata\",quantile=\"{q}\"}} ");
                text.lines()
                    .find_map(|l| l.strip_prefix(&series))
                    .and_then(|v| v.parse::<f64>().ok())
                    .is_some_and(|v| v > 0.0)
            });
            if all_quantiles {
                seen.insert(shard);
            }
        }
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen.len(), 2, "latency percentiles on both shards: {seen:?}");
}

#[test]
fn every_dashboard_query_names_a_metric_keel_exports() {
    let dashboard = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/grafana/keel.json"))
        .expect("docs/grafana/keel.json");
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    assert!(exprs.len() >= 10, "the dashboard has its panels: {exprs:?}");
    let names: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();

    // A broker under a little of everything the dashboard shows.
    let b = Broker::start(2);
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, TOPIC, 2).topics[0].error_code, 0);
    for p in 0..2 {
        let r = produce(&mut c, -1, &[(TOPIC, p, build_batch(0, 1, &[(None, Some(b"v"))]))]);
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    fetch(&mut c, &[(TOPIC, 0, 0), (TOPIC, 1, 0)], 0, 1);
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 8, &offset_commit_request("g", TOPIC, &[(0, 0)]));
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let metrics = b.admin_get("/metrics");
    let exported: BTreeSet<&str> =
        metrics.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split(['{', ' ']).next()).collect();
    let missing: Vec<&String> = names.iter().filter(|n| !exported.contains(n.as_str())).collect();
    assert!(missing.is_empty(), "dashboard metrics Keel does not export: {missing:?}");
    eprintln!("{} dashboard queries name {} metrics, all exported", exprs.len(), names.len());
}

fn collect_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

/// The `keel_*` metric names a PromQL expression reads.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("keel_") {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}
