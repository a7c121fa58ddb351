//! Small histories with one anomaly each: each check must find what it exists to
//! find, and nothing in a clean history.

use crate::history::{self, History};
use crate::{elle, queue};

/// Builds a queue history the way the ledger writes it.
#[derive(Default)]
struct Builder {
    lines: Vec<String>,
}

fn send(key: i64, value: i64, offset: Option<i64>) -> String {
    let o = offset.map_or("null".to_string(), |o| o.to_string());
    format!("[\"send\",{key},[{o},{value}]]")
}

fn poll(keys: &[(i64, &[(i64, i64)])]) -> String {
    let parts: Vec<String> = keys
        .iter()
        .map(|(k, recs)| {
            let recs: Vec<String> = recs.iter().map(|(o, v)| format!("[{o},{v}]")).collect();
            format!("\"{k}\":[{}]", recs.join(","))
        })
        .collect();
    format!("[\"poll\",{{{}}}]", parts.join(","))
}

impl Builder {
    fn txn(&mut self, process: i64, typ: &str, mops: &[String]) -> &mut Self {
        let n = self.lines.len();
        self.lines.push(format!("{{\"index\":{n},\"type\":\"invoke\",\"process\":{process},\"value\":[]}}"));
        self.lines.push(format!(
            "{{\"index\":{},\"type\":\"{typ}\",\"process\":{process},\"value\":[{}]}}",
            n + 1,
            mops.join(",")
        ));
        self
    }

    fn history(&self) -> History {
        history::parse(&self.lines.join("\n")).unwrap()
    }
}

fn checks(b: &Builder) -> (queue::Findings, elle::ElleFindings) {
    checks_as(b, queue::Consumers::Assigned)
}

fn checks_as(b: &Builder, consumers: queue::Consumers) -> (queue::Findings, elle::ElleFindings) {
    let h = b.history();
    let log = queue::observed(&h.txns);
    (queue::check(&h.txns, consumers), elle::check(&h.txns, &log).unwrap())
}

/// Two producers, two keys, a consumer following both, and the final read.
fn clean() -> Builder {
    let mut b = Builder::default();
    b.txn(0, "ok", &[send(1, 10, Some(0)), send(2, 20, Some(0))])
        .txn(1, "ok", &[send(1, 11, Some(2))])
        .txn(2, "ok", &[poll(&[(1, &[(0, 10)])])])
        .txn(1, "fail", &[send(2, 21, Some(2))])
        .txn(2, "ok", &[poll(&[(1, &[(2, 11)]), (2, &[(0, 20)])]), send(1, 12, Some(4))])
        .txn(9, "ok", &[poll(&[(1, &[(0, 10), (2, 11), (4, 12)]), (2, &[(0, 20)])])]);
    b
}

#[test]
fn a_clean_history_has_no_anomaly() {
    let (q, e) = checks(&clean());
    assert_eq!(q.total(), 0, "{:?}", q.anomalies);
    assert_eq!(e.forbidden(), 0, "{:?}", e.anomalies);
    assert!(e.wr_cycles.is_empty());
    assert_eq!(q.ok_sends, 4);
}

#[test]
fn a_committed_value_missing_below_a_later_read_is_lost() {
    let mut b = Builder::default();
    b.txn(0, "ok", &[send(1, 10, Some(0))]).txn(0, "ok", &[send(1, 11, Some(1))]).txn(
        9,
        "ok",
        &[poll(&[(1, &[(1, 11)])])],
    );
    let (q, _) = checks(&b);
    assert_eq!(q.count("lost"), 1, "{:?}", q.anomalies);
    // And the read that jumped over offset 0 from nothing is not a skip: it had no
    // earlier position.
    assert_eq!(q.count("poll-skip"), 0);
}

#[test]
fn a_committed_value_nobody_read_is_unseen() {
    let mut b = clean();
    b.txn(0, "ok", &[send(2, 22, Some(4))]);
    let (q, _) = checks(&b);
    assert_eq!(q.count("unseen"), 1, "{:?}", q.anomalies);
}

#[test]
fn a_polled_value_of_an_aborted_transaction_is_an_aborted_read_for_both_checkers() {
    let mut b = Builder::default();
    b.txn(0, "fail", &[send(1, 10, Some(0))])
        .txn(0, "ok", &[send(1, 11, Some(2))])
        .txn(1, "ok", &[poll(&[(1, &[(0, 10), (2, 11)])])])
        .txn(9, "ok", &[poll(&[(1, &[(0, 10), (2, 11)])])]);
    let (q, e) = checks(&b);
    assert_eq!(q.count("aborted-read"), 1, "{:?}", q.anomalies);
    assert!(e.anomalies.contains_key("G1a"), "{:?}", e.anomalies);
    assert!(e.forbidden() > 0);
}

#[test]
fn two_values_at_one_offset_are_inconsistent_and_a_value_twice_is_a_duplicate() {
    let mut b = Builder::default();
    b.txn(0, "ok", &[send(1, 10, Some(0))])
        .txn(0, "ok", &[send(1, 11, Some(1))])
        .txn(1, "ok", &[poll(&[(1, &[(0, 10), (1, 11)])])])
        .txn(9, "ok", &[poll(&[(1, &[(0, 11), (1, 11)])])]);
    let (q, _) = checks(&b);
    assert_eq!(q.count("inconsistent-offsets"), 1, "{:?}", q.anomalies);
    assert_eq!(q.count("duplicate"), 1, "{:?}", q.anomalies);
}

#[test]
fn consumers_must_not_skip_or_go_back() {
    let mut b = Builder::default();
    b.txn(0, "ok", &[send(1, 10, Some(0))])
        .txn(0, "ok", &[send(1, 11, Some(1))])
        .txn(0, "ok", &[send(1, 12, Some(2))])
        .txn(1, "ok", &[poll(&[(1, &[(0, 10)])])])
        .txn(1, "ok", &[poll(&[(1, &[(2, 12)])])]) // skips 11
        .txn(1, "ok", &[poll(&[(1, &[(1, 11)])])]) // goes back
        .txn(2, "ok", &[poll(&[(1, &[(0, 10), (2, 12), (1, 11)])])]) // both, within one poll
        .txn(9, "ok", &[poll(&[(1, &[(0, 10), (1, 11), (2, 12)])])]);
    let (q, _) = checks(&b);
    assert_eq!(q.count("poll-skip"), 1, "{:?}", q.anomalies);
    assert_eq!(q.count("nonmonotonic-poll"), 1, "{:?}", q.anomalies);
    assert_eq!(q.count("int-poll-skip"), 1, "{:?}", q.anomalies);
    assert_eq!(q.count("int-nonmonotonic-poll"), 1, "{:?}", q.anomalies);
}

#[test]
fn a_producer_acknowledged_backwards_is_nonmonotonic() {
    let mut b = Builder::default();
    b.txn(0, "ok", &[send(1, 10, Some(5))]).txn(0, "ok", &[send(1, 11, Some(3))]);
    let (q, _) = checks(&b);
    assert_eq!(q.count("nonmonotonic-send"), 1, "{:?}", q.anomalies);
}

#[test]
fn an_unknown_transaction_half_visible_is_torn() {
    let mut b = clean();
    b.txn(3, "info", &[send(1, 30, Some(6)), send(2, 31, Some(2))]).txn(
        9,
        "ok",
        &[poll(&[(1, &[(0, 10), (2, 11), (4, 12), (6, 30)]), (2, &[(0, 20)])])],
    );
    let (q, _) = checks(&b);
    assert_eq!(q.count("torn-transaction"), 1, "{:?}", q.anomalies);
}

/// T1 and T2 both write keys 1 and 2, in opposite orders: a write cycle, which
/// Kafka's transactions allow.
#[test]
fn a_write_cycle_is_reported_as_permitted() {
    let mut b = Builder::default();
    b.txn(0, "ok", &[send(1, 10, Some(0)), send(2, 21, Some(1))])
        .txn(1, "ok", &[send(1, 11, Some(1)), send(2, 20, Some(0))])
        .txn(9, "ok", &[poll(&[(1, &[(0, 10), (1, 11)]), (2, &[(0, 20), (1, 21)])])]);
    let (q, e) = checks(&b);
    assert_eq!(q.total(), 0, "{:?}", q.anomalies);
    assert!(e.anomalies.contains_key("G0"), "{:?}", e.anomalies);
    assert_eq!(e.forbidden(), 0, "{:?}", e.anomalies);
}

/// T1 read what T2 wrote and T2 read what T1 wrote: each committed before the
/// other read, which no order explains.
#[test]
fn information_flowing_in_a_circle_is_a_wr_cycle() {
    let mut b = Builder::default();
    b.txn(0, "ok", &[poll(&[(2, &[(0, 20)])]), send(1, 10, Some(0))])
        .txn(1, "ok", &[poll(&[(1, &[(0, 10)])]), send(2, 20, Some(0))])
        .txn(9, "ok", &[poll(&[(1, &[(0, 10)]), (2, &[(0, 20)])])]);
    let (_, e) = checks(&b);
    assert_eq!(e.wr_cycles.len(), 1, "{:?}", e.anomalies);
    assert_eq!(e.wr_cycles[0].len(), 2);
    assert!(e.forbidden() > 0);
}

/// A group of two members: one consumes key 1 up to offset 2 and commits, then aborts
/// a poll of offset 4 and is rewound; after a rebalance the other consumes 4 and
/// commits.
fn group_clean() -> Builder {
    let mut b = Builder::default();
    b.txn(0, "ok", &[send(1, 10, Some(0)), send(2, 20, Some(0))])
        .txn(0, "ok", &[send(1, 11, Some(2))])
        .txn(0, "ok", &[send(1, 12, Some(4))])
        .txn(1, "ok", &[poll(&[(1, &[(0, 10), (2, 11)])])])
        .txn(1, "fail", &[poll(&[(1, &[(4, 12)])])])
        .txn(2, "ok", &[poll(&[(1, &[(4, 12)]), (2, &[(0, 20)])])])
        .txn(1, "ok", &[poll(&[(2, &[])])])
        .txn(queue::FINAL_PROCESS, "ok", &[poll(&[(1, &[(0, 10), (2, 11), (4, 12)]), (2, &[(0, 20)])])]);
    b
}

#[test]
fn a_group_consuming_each_value_once_is_clean() {
    let (q, _) = checks_as(&group_clean(), queue::Consumers::Group);
    assert_eq!(q.total(), 0, "{:?}", q.anomalies);
    // Read as separate consumers, member 1 rewound after its abort goes back.
    let mut b = group_clean();
    b.txn(1, "ok", &[poll(&[(1, &[(4, 12)])])]);
    let (q, _) = checks_as(&b, queue::Consumers::Assigned);
    assert_eq!(q.count("nonmonotonic-poll"), 1, "{:?}", q.anomalies);
}

#[test]
fn a_group_must_consume_each_value_once() {
    let mut b = group_clean();
    // Member 2 consumes offset 2 again, in a committed transaction.
    b.txn(2, "ok", &[poll(&[(1, &[(2, 11)])])]);
    let (q, _) = checks_as(&b, queue::Consumers::Group);
    assert_eq!(q.count("double-consume"), 1, "{:?}", q.anomalies);
    assert_eq!(q.count("consume-gap"), 0, "{:?}", q.anomalies);

    // A member that consumed 0 then 4 and committed: 2 was consumed past.
    let mut b = Builder::default();
    b.txn(0, "ok", &[send(1, 10, Some(0)), send(2, 20, Some(0))])
        .txn(0, "ok", &[send(1, 11, Some(2))])
        .txn(0, "ok", &[send(1, 12, Some(4))])
        .txn(1, "ok", &[poll(&[(1, &[(0, 10)])])])
        .txn(2, "ok", &[poll(&[(1, &[(4, 12)])])])
        .txn(queue::FINAL_PROCESS, "ok", &[poll(&[(1, &[(0, 10), (2, 11), (4, 12)]), (2, &[(0, 20)])])]);
    let (q, _) = checks_as(&b, queue::Consumers::Group);
    assert_eq!(q.count("consume-gap"), 1, "{:?}", q.anomalies);
    assert_eq!(q.count("double-consume"), 0, "{:?}", q.anomalies);
    // A transaction of unknown outcome that polled 2 may have committed it.
    b.txn(3, "info", &[poll(&[(1, &[(2, 11)])])]);
    let (q, _) = checks_as(&b, queue::Consumers::Group);
    assert_eq!(q.count("consume-gap"), 0, "{:?}", q.anomalies);
}
