//! The queue history the ledger's `-queue` workload writes (`compat/go/cmd/ledger/queue.go`):
//! one JSON object per line, Jepsen's shape. Each transaction is an `invoke` and
//! then, on the same process, an `ok` (committed), `fail` (aborted for certain) or
//! `info` (unknown) completion whose value holds what happened:
//!
//! ```text
//! {"index":7,"type":"ok","process":2,"f":"txn","value":[["send",3,[41,1207]],["poll",{"3":[[40,1201],[41,1207]]}]]}
//! ```
//!
//! `["send", key, [offset, value]]` (offset null when the send was not acknowledged)
//! and `["poll", {key: [[offset, value], ...]}]`. Keys are single-partition topics.
//! Only completions carry facts, so only they are kept, in history order.

use std::collections::BTreeMap;

use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Fail,
    Info,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Info => "info",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mop {
    /// A value sent to a key, at the offset the broker acknowledged (if it did).
    Send { key: i64, value: i64, offset: Option<i64> },
    /// What one poll returned: key -> (offset, value) in the order received.
    Poll(BTreeMap<i64, Vec<(i64, i64)>>),
}

/// One completed transaction.
#[derive(Clone, Debug)]
pub struct Txn {
    /// The completion's index in the history.
    pub index: u64,
    /// The invocation's index.
    pub invoked: u64,
    pub process: i64,
    pub outcome: Outcome,
    pub mops: Vec<Mop>,
}

impl Txn {
    pub fn sends(&self) -> impl Iterator<Item = (i64, i64, Option<i64>)> + '_ {
        self.mops.iter().filter_map(|m| match *m {
            Mop::Send { key, value, offset } => Some((key, value, offset)),
            Mop::Poll(_) => None,
        })
    }

    pub fn polls(&self) -> impl Iterator<Item = &BTreeMap<i64, Vec<(i64, i64)>>> + '_ {
        self.mops.iter().filter_map(|m| match m {
            Mop::Poll(p) => Some(p),
            Mop::Send { .. } => None,
        })
    }
}

/// The completed transactions, and how many invocations never completed.
pub struct History {
    pub txns: Vec<Txn>,
    pub unfinished: usize,
}

pub fn parse(text: &str) -> Result<History, String> {
    let mut txns = Vec::new();
    let mut open: BTreeMap<i64, u64> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |e: String| format!("line {}: {e}", n + 1);
        let op: Value = serde_json::from_str(line).map_err(|e| at(e.to_string()))?;
        let process = op["process"].as_i64().ok_or_else(|| at("no process".into()))?;
        let index = op["index"].as_u64().ok_or_else(|| at("no index".into()))?;
        let outcome = match op["type"].as_str() {
            Some("invoke") => {
                if open.insert(process, index).is_some() {
                    return Err(at(format!("process {process} invoked twice without a completion")));
                }
                continue;
            }
            Some("ok") => Outcome::Ok,
            Some("fail") => Outcome::Fail,
            Some("info") => Outcome::Info,
            other => return Err(at(format!("unknown type {other:?}"))),
        };
        let Some(invoked) = open.remove(&process) else {
            return Err(at(format!("process {process} completed with nothing invoked")));
        };
        let mops = op["value"].as_array().ok_or_else(|| at("value is not a list".into()))?;
        let mops = mops.iter().map(parse_mop).collect::<Result<Vec<_>, _>>().map_err(at)?;
        txns.push(Txn { index, invoked, process, outcome, mops });
    }
    Ok(History { txns, unfinished: open.len() })
}

fn parse_mop(m: &Value) -> Result<Mop, String> {
    let bad = || format!("bad micro-op {m}");
    let parts = m.as_array().ok_or_else(bad)?;
    match parts.first().and_then(Value::as_str) {
        Some("send") => {
            let key = parts.get(1).and_then(Value::as_i64).ok_or_else(bad)?;
            // An invocation's form (no offset) is accepted too: a failed begin.
            match parts.get(2) {
                Some(Value::Array(ov)) => Ok(Mop::Send {
                    key,
                    offset: ov.first().and_then(Value::as_i64),
                    value: ov.get(1).and_then(Value::as_i64).ok_or_else(bad)?,
                }),
                Some(v) => Ok(Mop::Send { key, value: v.as_i64().ok_or_else(bad)?, offset: None }),
                None => Err(bad()),
            }
        }
        Some("poll") => {
            let mut polled = BTreeMap::new();
            if let Some(map) = parts.get(1).and_then(Value::as_object) {
                for (k, recs) in map {
                    let key: i64 = k.parse().map_err(|_| bad())?;
                    let recs = recs.as_array().ok_or_else(bad)?;
                    let recs = recs
                        .iter()
                        .map(|r| Some((r.get(0)?.as_i64()?, r.get(1)?.as_i64()?)))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(bad)?;
                    polled.insert(key, recs);
                }
            }
            Ok(Mop::Poll(polled))
        }
        _ => Err(bad()),
    }
}
