//! The `keel` client subcommands end to end: each runs as a subprocess of the real
//! binary against a real broker; stdout, stderr and exit codes are checked.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use crate::common::{free_port, Broker};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn keel(brokers: &str, args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .arg("--brokers")
        .arg(brokers)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("keel starts");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.unwrap_or("").as_bytes()).expect("stdin written");
    drop(input);
    let Output { status, stdout, stderr } = child.wait_with_output().expect("keel exits");
    let run = Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    };
    assert!(!run.stderr.contains("panicked"), "keel {args:?} panicked: {}", run.stderr);
    run
}

/// Runs a command that must succeed; gives its stdout.
fn ok(brokers: &str, args: &[&str], stdin: Option<&str>) -> String {
    let run = keel(brokers, args, stdin);
    assert_eq!(run.code, 0, "keel {args:?} failed:\nstdout: {}\nstderr: {}", run.stdout, run.stderr);
    run.stdout
}

/// The cells of the table row whose first cell is `first`.
fn row<'a>(table: &'a str, first: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row {first:?} in\n{table}"))
}

#[test]
fn topic_and_group_commands_against_a_broker() {
    let b = Broker::start(1);
    let brokers = format!("127.0.0.1:{}", b.port);
    let brokers = brokers.as_str();

    let created = ok(brokers, &["topic", "create", "orders", "-p", "3", "-r", "1", "-c", "retention.ms=3600000"], None);
    assert!(created.contains("orders") && created.contains("created"), "{created}");
    let again = keel(brokers, &["topic", "create", "orders", "-p", "3"], None);
    assert_eq!(again.code, 1);
    assert!(again.stderr.contains("TOPIC_ALREADY_EXISTS"), "{}", again.stderr);

    let list = ok(brokers, &["topic", "list"], None);
    assert_eq!(row(&list, "orders")[1], "3", "{list}");

    let describe = ok(brokers, &["topic", "describe", "orders"], None);
    for p in ["0", "1", "2"] {
        let cells = row(&describe, p);
        // PARTITION LEADER EPOCH REPLICAS ISR LOG-START HIGH-WATERMARK
        assert_eq!(cells[5..7], ["0", "0"], "{describe}");
    }
    assert_eq!(row(&describe, "retention.ms")[1], "3600000", "{describe}");

    let lines: String = (0..100).map(|i| format!("line-{i}\n")).collect();
    let produced = keel(brokers, &["topic", "produce", "orders", "--key", "k1"], Some(&lines));
    assert_eq!(produced.code, 0, "{}", produced.stderr);
    assert!(produced.stderr.contains("produced 100 records"), "{}", produced.stderr);
    let keyless: String = (0..30).map(|i| format!("free-{i}\n")).collect();
    ok(brokers, &["topic", "produce", "orders", "-H", "source=test"], Some(&keyless));

    // Keyed records land in one partition, in order.
    let consumed = ok(brokers, &["topic", "consume", "orders", "-o", "start", "-n", "130", "-f", "%p %k %v\\n"], None);
    let keyed: Vec<String> = consumed.lines().filter(|l| l.contains(" k1 ")).map(String::from).collect();
    assert_eq!(keyed.len(), 100, "{consumed}");
    let partition = keyed[0].split(' ').next().unwrap().to_string();
    for (i, l) in keyed.iter().enumerate() {
        assert_eq!(l, &format!("{partition} k1 line-{i}"));
    }
    // Round robin spreads keyless records over all partitions.
    for p in ["0", "1", "2"] {
        assert_eq!(consumed.lines().filter(|l| l.starts_with(&format!("{p}  free-"))).count(), 10, "{consumed}");
    }
    let one: i32 = partition.parse().unwrap();
    let tail = ok(
        brokers,
        &["topic", "consume", "orders", "-p", &partition, "-o", "-2", "--exit-at-end", "-f", "%o %k %v\\n"],
        None,
    );
    assert_eq!(tail, format!("108  free-{}\n109  free-{}\n", 24 + one, 27 + one));

    let describe = ok(brokers, &["topic", "describe", "orders"], None);
    assert_eq!(row(&describe, &partition)[6], "110", "{describe}");

    ok(
        brokers,
        &["topic", "alter-config", "orders", "-s", "retention.ms=7200000", "-s", "cleanup.policy=delete"],
        None,
    );
    let describe = ok(brokers, &["topic", "describe", "orders", "--format", "json"], None);
    let json: serde_json::Value = serde_json::from_str(&describe).expect("json");
    let retention = json["configs"].as_array().unwrap().iter().find(|c| c["config"] == "retention.ms").unwrap();
    assert_eq!(retention["value"], "7200000");

    ok(brokers, &["topic", "add-partitions", "orders", "-n", "5"], None);
    let list = ok(brokers, &["topic", "list"], None);
    assert_eq!(row(&list, "orders")[1], "5", "{list}");

    let seek = ok(brokers, &["group", "seek", "billing", "--topic", "orders", "--to", "5"], None);
    assert!(seek.contains("committed"), "{seek}");
    let groups = ok(brokers, &["group", "list"], None);
    assert!(groups.contains("billing"), "{groups}");
    let group = ok(brokers, &["group", "describe", "billing"], None);
    let lag_row = row(&group, "orders");
    assert_eq!(lag_row.len(), 5, "{group}");
    let described = ok(brokers, &["group", "describe", "billing", "--format", "json"], None);
    let json: serde_json::Value = serde_json::from_str(&described).expect("json");
    let offsets = json["offsets"].as_array().unwrap();
    let mine = offsets.iter().find(|o| o["partition"] == one).unwrap();
    assert_eq!(mine["committed"], 5);
    assert_eq!(mine["end"], 110);
    assert_eq!(mine["lag"], 105);
    ok(brokers, &["group", "seek", "billing", "--topic", "orders", "--to", "end"], None);
    let json: serde_json::Value =
        serde_json::from_str(&ok(brokers, &["group", "describe", "billing", "--format", "json"], None)).unwrap();
    assert!(json["offsets"].as_array().unwrap().iter().all(|o| o["lag"] == 0), "{json}");
    ok(brokers, &["group", "delete", "billing"], None);

    let cluster = ok(brokers, &["cluster", "info"], None);
    assert!(cluster.contains("CONTROLLER"), "{cluster}");

    ok(brokers, &["topic", "delete", "orders"], None);
    let list = ok(brokers, &["topic", "list"], None);
    assert!(!list.lines().any(|l| l.starts_with("orders ")), "{list}");
}

#[test]
fn bad_input_gets_a_clear_message_and_exit_code() {
    let b = Broker::start(1);
    let brokers = format!("127.0.0.1:{}", b.port);
    let brokers = brokers.as_str();

    for args in
        [&["topic", "describe", "nope"][..], &["topic", "consume", "nope", "-n", "1"], &["topic", "produce", "nope"]]
    {
        let run = keel(brokers, args, Some("x\n"));
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{args:?}: {}", run.stderr);
    }
    ok(brokers, &["topic", "create", "t", "-p", "1"], None);
    let run = keel(brokers, &["topic", "consume", "t", "-o", "abc"], None);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("bad offset \"abc\""), "{}", run.stderr);
    let run = keel(brokers, &["topic", "create", "u", "-c", "retention.ms"], None);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("expected KEY=VALUE"), "{}", run.stderr);
    let run = keel(brokers, &["topic", "produce", "t", "--acks", "2"], None);
    assert_eq!(run.code, 2, "{}", run.stderr);

    let closed = format!("127.0.0.1:{}", free_port());
    for args in [&["topic", "list"][..], &["cluster", "info"], &["group", "list"]] {
        let run = keel(&closed, args, None);
        assert_eq!(run.code, 1, "{args:?}");
        assert_eq!(run.stderr.trim(), format!("keel: cannot reach {closed}: connection refused"));
    }
}

/// Parses a command's stdout as JSON, failing with the text when it is not.
fn json_of(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

#[test]
fn every_client_command_speaks_json() {
    let b = Broker::start(1);
    let brokers = format!("127.0.0.1:{}", b.port);
    let brokers = brokers.as_str();
    let j = |args: &[&str], stdin: Option<&str>| {
        let mut all = args.to_vec();
        all.extend(["--format", "json"]);
        json_of(&ok(brokers, &all, stdin))
    };

    let created = j(&["topic", "create", "events", "-p", "2"], None);
    assert_eq!(created[0]["topic"], "events", "{created}");
    let listed = j(&["topic", "list"], None);
    assert!(listed.as_array().unwrap().iter().any(|t| t["name"] == "events"), "{listed}");
    let altered = j(&["topic", "alter-config", "events", "-s", "retention.ms=60000", "-d", "cleanup.policy"], None);
    assert_eq!(
        altered,
        serde_json::json!({"topic": "events", "set": {"retention.ms": "60000"}, "deleted": ["cleanup.policy"]})
    );
    let grown = j(&["topic", "add-partitions", "events", "-n", "3"], None);
    assert_eq!(grown, serde_json::json!({"topic": "events", "partitions": 3}));

    let produced = j(&["topic", "produce", "events", "-k", "k1", "-H", "h=v"], Some("one\ntwo\n"));
    assert_eq!(produced, serde_json::json!({"topic": "events", "produced": 2, "errors": []}));
    let consumed = ok(brokers, &["topic", "consume", "events", "-n", "2", "--format", "json"], None);
    let records: Vec<serde_json::Value> = consumed.lines().map(json_of).collect();
    assert_eq!(records.len(), 2, "{consumed}");
    for (r, value) in records.iter().zip(["one", "two"]) {
        assert_eq!((r["key"].as_str(), r["value"].as_str()), (Some("k1"), Some(value)), "{r}");
        assert_eq!(r["headers"], serde_json::json!({"h": "v"}), "{r}");
        assert_eq!(r["topic"], "events");
        assert!(r["offset"].is_i64() && r["partition"].is_i64() && r["timestamp"].is_i64(), "{r}");
    }

    let groups = j(&["group", "list"], None);
    assert!(groups.is_array(), "{groups}");
    let cluster = j(&["cluster", "info"], None);
    assert!(cluster["brokers"].as_array().is_some_and(|b| !b.is_empty()), "{cluster}");
    let deleted = j(&["topic", "delete", "events"], None);
    assert_eq!(deleted[0]["status"], "deleted", "{deleted}");

    // Errors are one JSON object on stderr, with the exit code beside the message.
    let run = keel(brokers, &["topic", "describe", "events", "--format", "json"], None);
    assert_eq!(run.code, 1);
    let error = json_of(&run.stderr);
    assert!(error["error"].as_str().unwrap().contains("UNKNOWN_TOPIC_OR_PARTITION"), "{error}");
    assert_eq!(error["exit_code"], 1);
    let run = keel(brokers, &["topic", "consume", "events", "-o", "abc", "--format", "json"], None);
    assert_eq!((run.code, json_of(&run.stderr)["exit_code"].as_i64()), (2, Some(2)), "{}", run.stderr);
}
