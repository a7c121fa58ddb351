//! The queue history read as Elle's list-append, checked by the adya crate.
//!
//! A key's log is a list. A send of `v` to key `k` is `["append", k, v]`. A poll
//! that read key `k` up to offset `o` has seen the log up to `o`, so it is
//! `["r", k, [every visible value at offsets <= o, in offset order]]`; the visible
//! values come from every observation, chiefly the read of every key at the end of
//! the history. In a transaction the reads come before the appends: a Kafka
//! transaction never reads its own uncommitted sends, whatever order it ran them in.
//! Each transaction appends to a key at most once (the workload makes sure), since a
//! poll may end inside a committed transaction's records.
//!
//! adya then infers Adya's dependencies from the version order (the offsets) and
//! searches for the anomalies read committed forbids. Kafka's transactions are not
//! read committed in that sense: two transactions writing the same two partitions
//! may land in opposite orders in each, so write cycles (G0), and G1c cycles that
//! need a write-write edge, are allowed, and Apache Kafka shows them too. What is
//! never allowed, and is checked here: a read of an aborted transaction (G1a), an
//! intermediate read (G1b), versions in no consistent order, and a cycle of
//! write-read edges alone, information flowing in a circle, which no commit order
//! explains (the form of G1c Jepsen reported as circular information flow).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use adya::graph::WR;
use adya::history::OpType;
use adya::{History, Opts, Valid, Workload};

use crate::history::{Mop, Outcome, Txn};
use crate::queue::Observed;

/// Anomaly kinds Kafka's transaction protocol permits (see above), as adya names
/// them; a cycle of write-read edges alone is checked apart from these.
pub const PERMITTED: [&str; 4] = ["G0", "G1c", "PL-1-cycle-exists", "PL-2-cycle-exists"];

/// Kinds adya reports when it could not decide, which say nothing about safety.
const UNDECIDED: [&str; 1] = ["cycle-search-timeout"];

pub struct ElleFindings {
    /// adya's anomalies: kind -> (count, first explanation).
    pub anomalies: BTreeMap<String, (usize, String)>,
    /// Strongly connected components of write-read edges alone, as history indices.
    pub wr_cycles: Vec<Vec<u64>>,
    pub transactions: usize,
    pub valid: Valid,
}

impl ElleFindings {
    /// Anomalies that fail the run: neither permitted by Kafka nor undecided.
    pub fn forbidden(&self) -> usize {
        let adya: usize = self
            .anomalies
            .iter()
            .filter(|(k, _)| !PERMITTED.contains(&k.as_str()) && !UNDECIDED.contains(&k.as_str()))
            .map(|(_, (n, _))| n)
            .sum();
        adya + self.wr_cycles.len()
    }
}

/// The list-append history, one JSON object per line, each transaction's invocation
/// followed by its completion, both with the queue history's indices (so adya's
/// `T<n>` is the queue history's line with index n).
pub fn list_append(txns: &[Txn], log: &Observed) -> String {
    // key -> (offset, value) in offset order: the first value seen at each offset.
    let lists: BTreeMap<i64, Vec<(i64, i64)>> = log
        .iter()
        .map(|(&k, offsets)| (k, offsets.iter().map(|(&o, vs)| (o, *vs.first().unwrap())).collect()))
        .collect();
    let mut out = String::new();
    for t in txns {
        let mut reads = Vec::new();
        let mut appends = Vec::new();
        for m in &t.mops {
            match m {
                Mop::Send { key, value, .. } => appends.push(format!("[\"append\",{key},{value}]")),
                Mop::Poll(polled) => {
                    for (&key, recs) in polled {
                        let Some(last) = recs.iter().map(|r| r.0).max() else { continue };
                        let list = lists.get(&key).map(Vec::as_slice).unwrap_or(&[]);
                        let upto = list.partition_point(|&(o, _)| o <= last);
                        let mut read = format!("[\"r\",{key},[");
                        for (i, (_, v)) in list[..upto].iter().enumerate() {
                            if i > 0 {
                                read.push(',');
                            }
                            write!(read, "{v}").unwrap();
                        }
                        read.push_str("]]");
                        reads.push((key, read));
                    }
                }
            }
        }
        let completion: Vec<&str> =
            reads.iter().map(|(_, r)| r.as_str()).chain(appends.iter().map(String::as_str)).collect();
        let invocation: Vec<String> =
            reads.iter().map(|(k, _)| format!("[\"r\",{k},null]")).chain(appends.iter().cloned()).collect();
        let typ = match t.outcome {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Info => "info",
        };
        writeln!(
            out,
            "{{\"index\":{},\"type\":\"invoke\",\"process\":{},\"value\":[{}]}}",
            t.invoked,
            t.process,
            invocation.join(",")
        )
        .unwrap();
        writeln!(
            out,
            "{{\"index\":{},\"type\":\"{typ}\",\"process\":{},\"value\":[{}]}}",
            t.index,
            t.process,
            completion.join(",")
        )
        .unwrap();
    }
    out
}

pub fn check(txns: &[Txn], log: &Observed) -> Result<ElleFindings, String> {
    let text = list_append(txns, log);
    let h = History::from_json(&text).map_err(|e| format!("list-append history: {e}"))?;
    let opts = Opts { models: vec!["read-committed".into()], ..Opts::default() };
    let report = adya::check(&h, Workload::ListAppend, &opts);
    let anomalies = report
        .anomalies
        .iter()
        .map(|(k, list)| (k.clone(), (list.len(), list.first().map(|a| a.explanation.clone()).unwrap_or_default())))
        .collect();

    // Cycles of write-read edges alone, over adya's own dependency graph.
    let mut analysis = adya::list_append::analyze(&h);
    let graph = analysis.data.take().unwrap_or_default().finish(h.ops.len());
    let nodes: Vec<u32> = (0..graph.len() as u32).collect();
    let mut op_of_vertex = vec![0u64; graph.len()];
    for (pos, op) in h.ops.iter().enumerate().filter(|(_, op)| op.kind != OpType::Invoke) {
        let v = analysis.vertex(pos) as usize;
        if v < op_of_vertex.len() {
            op_of_vertex[v] = op.index;
        }
    }
    let wr_cycles = graph
        .sccs(&nodes, |rels| rels & WR != 0)
        .into_iter()
        .map(|scc| scc.iter().map(|&v| op_of_vertex[v as usize]).collect())
        .collect();
    Ok(ElleFindings { anomalies, wr_cycles, transactions: txns.len(), valid: report.valid })
}
