//! keel-queue-check: judges a queue history written by the ledger's `-queue`
//! workload (`compat/go/cmd/ledger/queue.go`).
//!
//!     keel-queue-check HISTORY.jsonl [--group] [--list-append OUT.jsonl]
//!
//! `--group`: the workers consumed as one consumer group (the ledger's
//! `-queue-group`), which adds the group checks (`queue` module doc).
//! Prints each check with its count (and a few examples of any anomaly), then one
//! summary line. `--list-append` also writes the history as Elle's list-append, for
//! `adya check` or elle-cli. Exit status: 0 no anomaly, 1 an anomaly, 2 the history
//! could not be read or checked.

use std::process::ExitCode;

use keel_queue_check::{elle, history, queue};

const EXAMPLES: usize = 5;
const LINE: usize = 160;

/// A line cut to LINE characters: adya's explanations quote whole transactions,
/// whose reads are whole lists.
fn shorten(line: &str) -> String {
    match line.char_indices().nth(LINE) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_string(),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || {
        eprintln!("usage: keel-queue-check HISTORY.jsonl [--group] [--list-append OUT.jsonl]");
        ExitCode::from(2)
    };
    let Some((path, mut rest)) = args.split_first() else { return usage() };
    let mut consumers = queue::Consumers::Assigned;
    let mut list_append = None;
    while let Some((flag, more)) = rest.split_first() {
        rest = match (flag.as_str(), more) {
            ("--group", more) => {
                consumers = queue::Consumers::Group;
                more
            }
            ("--list-append", [out, more @ ..]) => {
                list_append = Some(out);
                more
            }
            _ => return usage(),
        };
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("keel-queue-check: {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let h = match history::parse(&text) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("keel-queue-check: {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let q = queue::check(&h.txns, consumers);
    let log = queue::observed(&h.txns);
    if let Some(out) = list_append {
        if let Err(e) = std::fs::write(out, elle::list_append(&h.txns, &log)) {
            eprintln!("keel-queue-check: {out}: {e}");
            return ExitCode::from(2);
        }
    }
    let started = std::time::Instant::now();
    let e = match elle::check(&h.txns, &log) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("keel-queue-check: {e}");
            return ExitCode::from(2);
        }
    };
    let outcomes = |o: history::Outcome| h.txns.iter().filter(|t| t.outcome == o).count();
    println!(
        "queue-check: transactions={} ok={} fail={} info={} unfinished={} committed_sends={} values_polled={} keys={}",
        h.txns.len(),
        outcomes(history::Outcome::Ok),
        outcomes(history::Outcome::Fail),
        outcomes(history::Outcome::Info),
        h.unfinished,
        q.ok_sends,
        q.values_polled,
        q.keys
    );
    let mut checks = queue::CHECKS.to_vec();
    if consumers == queue::Consumers::Group {
        println!("queue-check: one consumer group: {} offsets consumed by committed transactions", q.group_consumed);
        checks.extend(queue::GROUP_CHECKS);
    }
    for check in checks {
        println!("  {check:<22} {}", q.count(check));
        for what in q.anomalies.get(check).into_iter().flatten().take(EXAMPLES) {
            println!("      {what}");
        }
    }
    println!("adya (list-append, read committed, {} ms):", started.elapsed().as_millis());
    for (kind, (n, first)) in &e.anomalies {
        let note = if elle::PERMITTED.contains(&kind.as_str()) { " (permitted by Kafka's transactions)" } else { "" };
        println!("  {kind:<22} {n}{note}");
        for line in first.lines().filter(|l| !l.trim().is_empty()) {
            println!("      {}", shorten(line));
        }
    }
    println!("  {:<22} {}", "wr-cycle", e.wr_cycles.len());
    for scc in e.wr_cycles.iter().take(EXAMPLES) {
        println!("      transactions {scc:?}");
    }
    let anomalies = q.total() + e.forbidden();
    let permitted: usize =
        e.anomalies.iter().filter(|(k, _)| elle::PERMITTED.contains(&k.as_str())).map(|(_, (n, _))| n).sum();
    println!(
        "queue-check: anomalies={anomalies} queue={} adya_forbidden={} wr_cycles={} permitted_cycles={permitted} adya_valid={:?}",
        q.total(),
        e.forbidden(),
        e.wr_cycles.len(),
        e.valid
    );
    if h.txns.iter().all(|t| t.polls().next().is_none()) {
        println!("queue-check: no transaction polled anything: the history proves nothing");
        return ExitCode::from(2);
    }
    ExitCode::from(if anomalies > 0 { 1 } else { 0 })
}
