//! A port of the checks of Jepsen's Kafka queue test (`jepsen.tests.kafka`) to the
//! history of `history.rs`. What the broker acknowledged and what consumers polled
//! must tell one story:
//!
//! - `inconsistent-offsets`: one offset of a key holding two values;
//! - `duplicate`: one value at two places (two offsets, or two keys);
//! - `lost`: a committed value never polled, although a later offset of its key was;
//! - `unseen`: a committed value never polled and nothing after it either (the
//!   history ends with a read of every key up to its last stable offset, so this is
//!   a loss too);
//! - `aborted-read`: a polled value whose transaction was aborted for certain;
//! - `never-sent`: a polled value no transaction sent;
//! - `torn-transaction`: a transaction of unknown outcome partly visible;
//! - `nonmonotonic-poll` / `int-nonmonotonic-poll`: a consumer reading an offset at
//!   or below one it had read, across polls or within one;
//! - `poll-skip` / `int-poll-skip`: a consumer jumping over an offset that holds a
//!   visible value, across polls or within one;
//! - `nonmonotonic-send`: one producer's sends to a key acknowledged at offsets that
//!   go backwards.
//!
//! A consumer here is one process: each worker's client follows its keys from
//! offset 0 with no consumer group, and a new client is a new process.
//!
//! With the workers as one consumer group (`Consumers::Group`, the ledger's
//! `-queue-group`), each transaction commits the offsets of its polls, a rebalance
//! aborts the transaction under way, and an abort rewinds the member to the group's
//! committed offsets. A member's polls then go back after an abort and jump over what
//! other members consumed, so the checks across polls hold within a committed
//! transaction only, and two group checks take their place:
//!
//! - `double-consume`: a value polled by two committed transactions (their offsets
//!   both committed: exactly-once consumption broken);
//! - `consume-gap`: a visible value below the highest offset committed transactions
//!   polled on its key that no committed transaction, nor one of unknown outcome,
//!   polled (consumed past without being seen).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::history::{Outcome, Txn};

/// Every check, in the order they are reported.
pub const CHECKS: [&str; 12] = [
    "lost",
    "unseen",
    "duplicate",
    "inconsistent-offsets",
    "aborted-read",
    "never-sent",
    "torn-transaction",
    "nonmonotonic-poll",
    "int-nonmonotonic-poll",
    "poll-skip",
    "int-poll-skip",
    "nonmonotonic-send",
];

/// The checks of a history whose workers were one consumer group.
pub const GROUP_CHECKS: [&str; 2] = ["double-consume", "consume-gap"];

/// The process number of the ledger's read of every key at the end, one committed
/// transaction that consumes nothing for the group.
pub const FINAL_PROCESS: i64 = 1_000_000;

/// How the workers consumed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Consumers {
    /// Each client followed its keys from offset 0 on its own.
    Assigned,
    /// One consumer group, each transaction committing its polls' offsets.
    Group,
}

/// The findings: check name -> one line per anomaly.
#[derive(Default)]
pub struct Findings {
    pub anomalies: BTreeMap<&'static str, Vec<String>>,
    pub ok_sends: usize,
    pub values_polled: usize,
    pub keys: usize,
    /// With a group: the offsets committed transactions consumed.
    pub group_consumed: usize,
}

impl Findings {
    fn add(&mut self, check: &'static str, what: String) {
        self.anomalies.entry(check).or_default().push(what);
    }

    pub fn count(&self, check: &str) -> usize {
        self.anomalies.get(check).map_or(0, Vec::len)
    }

    pub fn total(&self) -> usize {
        self.anomalies.values().map(Vec::len).sum()
    }
}

/// Where a value was sent from.
struct Sent {
    outcome: Outcome,
    key: i64,
    offset: Option<i64>,
    txn: u64,
}

/// The log as every observation shows it: key -> offset -> values seen there (polls
/// of any transaction, and sends the broker acknowledged in committed ones).
pub type Observed = BTreeMap<i64, BTreeMap<i64, BTreeSet<i64>>>;

pub fn observed(txns: &[Txn]) -> Observed {
    let mut log: Observed = BTreeMap::new();
    for t in txns {
        for polled in t.polls() {
            for (&key, recs) in polled {
                for &(offset, value) in recs {
                    log.entry(key).or_default().entry(offset).or_default().insert(value);
                }
            }
        }
        if t.outcome == Outcome::Ok {
            for (key, value, offset) in t.sends() {
                if let Some(offset) = offset {
                    log.entry(key).or_default().entry(offset).or_default().insert(value);
                }
            }
        }
    }
    log
}

pub fn check(txns: &[Txn], consumers: Consumers) -> Findings {
    let mut f = Findings::default();
    let log = observed(txns);
    f.keys = log.len();

    let mut sent: HashMap<i64, Sent> = HashMap::new();
    for t in txns {
        for (key, value, offset) in t.sends() {
            if sent.insert(value, Sent { outcome: t.outcome, key, offset, txn: t.index }).is_some() {
                f.add("duplicate", format!("value {value} sent twice (the second in T{})", t.index));
            }
        }
    }

    // Where each value was seen.
    let mut seen_at: HashMap<i64, BTreeSet<(i64, i64)>> = HashMap::new();
    let mut highest_polled: HashMap<i64, i64> = HashMap::new();
    for t in txns {
        for polled in t.polls() {
            for (&key, recs) in polled {
                for &(offset, value) in recs {
                    seen_at.entry(value).or_default().insert((key, offset));
                    let h = highest_polled.entry(key).or_insert(offset);
                    *h = (*h).max(offset);
                }
            }
        }
    }
    f.values_polled = seen_at.len();

    for (&key, offsets) in &log {
        for (&offset, values) in offsets {
            if values.len() > 1 {
                f.add("inconsistent-offsets", format!("key {key} offset {offset} holds {values:?}"));
            }
        }
    }
    let mut values: Vec<_> = seen_at.keys().copied().collect();
    values.sort_unstable();
    for value in values {
        let places = &seen_at[&value];
        if places.len() > 1 {
            f.add("duplicate", format!("value {value} at (key, offset) {places:?}"));
        }
        match sent.get(&value) {
            None => f.add("never-sent", format!("value {value} at {places:?}, sent by no transaction")),
            Some(s) if s.outcome == Outcome::Fail => {
                f.add("aborted-read", format!("value {value} of aborted T{} polled at {places:?}", s.txn))
            }
            Some(s) if places.iter().any(|&(k, _)| k != s.key) => {
                f.add("inconsistent-offsets", format!("value {value} sent to key {} polled at {places:?}", s.key))
            }
            Some(_) => {}
        }
    }

    // Committed sends that no poll saw; transactions of unknown outcome half seen.
    let mut ok: Vec<(&i64, &Sent)> = sent.iter().filter(|(_, s)| s.outcome == Outcome::Ok).collect();
    ok.sort_unstable_by_key(|(v, _)| **v);
    f.ok_sends = ok.len();
    for (value, s) in ok {
        if seen_at.contains_key(value) {
            continue;
        }
        let later_read = match (s.offset, highest_polled.get(&s.key)) {
            (Some(o), Some(&h)) => h > o,
            _ => false,
        };
        let what = format!("value {value} of T{} (key {}, offset {:?})", s.txn, s.key, s.offset);
        f.add(if later_read { "lost" } else { "unseen" }, what);
    }
    for t in txns.iter().filter(|t| t.outcome == Outcome::Info) {
        let visible: Vec<bool> = t.sends().map(|(_, v, _)| seen_at.contains_key(&v)).collect();
        if visible.iter().any(|&v| v) && !visible.iter().all(|&v| v) {
            f.add("torn-transaction", format!("T{} of unknown outcome: sends visible {visible:?}", t.index));
        }
    }

    // Each consumer's polls, key by key, in history order.
    let mut last_polled: HashMap<(i64, i64), i64> = HashMap::new();
    let visible_between = |key: i64, lo: i64, hi: i64| -> Option<i64> {
        log.get(&key).and_then(|o| o.range(lo + 1..hi).next().map(|(&o, _)| o))
    };
    let group = consumers == Consumers::Group;
    for t in txns {
        // A group member's position holds from poll to poll within a transaction
        // that committed; an abort or a rebalance moves it.
        let across = !group || t.outcome == Outcome::Ok;
        if group {
            last_polled.clear();
        }
        for polled in t.polls() {
            for (&key, recs) in polled {
                let mut prev = if across { last_polled.get(&(t.process, key)).copied() } else { None };
                for (i, &(offset, _)) in recs.iter().enumerate() {
                    let within = i > 0;
                    if let Some(p) = prev {
                        if offset <= p {
                            let check = if within { "int-nonmonotonic-poll" } else { "nonmonotonic-poll" };
                            f.add(
                                check,
                                format!("process {} key {key}: offset {offset} after {p} (T{})", t.process, t.index),
                            );
                        } else if let Some(skipped) = visible_between(key, p, offset) {
                            let check = if within { "int-poll-skip" } else { "poll-skip" };
                            let what = format!(
                                "process {} key {key}: {p} then {offset}, skipping {skipped} (T{})",
                                t.process, t.index
                            );
                            f.add(check, what);
                        }
                    }
                    prev = Some(prev.map_or(offset, |p| p.max(offset)));
                }
                if let Some(p) = prev {
                    last_polled.insert((t.process, key), p);
                }
            }
        }
    }

    if group {
        check_group(txns, &log, &mut f);
    }

    // Each producer's acknowledged offsets, key by key.
    let mut last_sent: HashMap<(i64, i64), i64> = HashMap::new();
    for t in txns {
        for (key, value, offset) in t.sends() {
            let Some(offset) = offset else { continue };
            if let Some(&p) = last_sent.get(&(t.process, key)) {
                if offset <= p {
                    f.add(
                        "nonmonotonic-send",
                        format!("process {} key {key}: value {value} at {offset} after {p} (T{})", t.process, t.index),
                    );
                }
            }
            last_sent.insert((t.process, key), offset);
        }
    }
    f
}

/// `double-consume` and `consume-gap` over what the group's transactions polled.
fn check_group(txns: &[Txn], log: &Observed, f: &mut Findings) {
    // key -> offset -> the committed transactions that polled it; and the offsets
    // that committed transactions, or ones of unknown outcome, polled.
    let mut committed: BTreeMap<i64, BTreeMap<i64, Vec<u64>>> = BTreeMap::new();
    let mut maybe: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
    for t in txns.iter().filter(|t| t.process < FINAL_PROCESS) {
        for polled in t.polls() {
            for (&key, recs) in polled {
                for &(offset, _) in recs {
                    match t.outcome {
                        Outcome::Ok => committed.entry(key).or_default().entry(offset).or_default().push(t.index),
                        Outcome::Info => {}
                        Outcome::Fail => continue,
                    }
                    maybe.entry(key).or_default().insert(offset);
                }
            }
        }
    }
    f.group_consumed = committed.values().map(BTreeMap::len).sum();
    for (&key, offsets) in &committed {
        for (&offset, by) in offsets {
            let mut by = by.clone();
            by.dedup();
            if by.len() > 1 {
                f.add("double-consume", format!("key {key} offset {offset} consumed by committed T{by:?}"));
            }
        }
        let Some(&highest) = offsets.keys().next_back() else { continue };
        let polled = &maybe[&key];
        for &offset in log.get(&key).into_iter().flat_map(|o| o.range(..highest)).map(|(o, _)| o) {
            if !polled.contains(&offset) {
                f.add(
                    "consume-gap",
                    format!("key {key} offset {offset}: consumed past (up to {highest}), never polled"),
                );
            }
        }
    }
}
