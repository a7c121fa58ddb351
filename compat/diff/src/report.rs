//! Counting, classifying, shrinking and printing divergences.
//!
//! The first time a kind of divergence shows (same API, same differing fields, same
//! error codes), it is shrunk to the shortest sequence that still shows it and printed
//! in full; later occurrences get one line pointing back to it, so a bug hit a hundred
//! times does not bury the others.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::accepted::{covering, Accepted};
use crate::diff::FieldDiff;
use crate::run::StepOutcome;
use crate::steps::{Names, Step};

/// Differing fields printed for one divergence; the rest are counted.
const FIELDS_SHOWN_MAX: usize = 25;
/// Width of the Kafka column in the side-by-side view.
const COLUMN_WIDTH: usize = 60;
/// Lines of the side-by-side view printed (broker config lists run to hundreds).
const SIDE_BY_SIDE_LINES_MAX: usize = 120;

#[derive(Default)]
struct ApiTally {
    requests: usize,
    open: usize,
    accepted: usize,
}

pub struct Report<'a> {
    seed: u64,
    accepted: &'a [Accepted],
    requests: usize,
    per_api: BTreeMap<String, ApiTally>,
    /// Signature of each kind of divergence seen, with the number it was first printed as.
    seen: BTreeMap<String, usize>,
    /// Replays run so far in this sequence; numbers the replays' names.
    replays: usize,
}

impl<'a> Report<'a> {
    pub fn new(seed: u64, accepted: &'a [Accepted]) -> Report<'a> {
        Report { seed, accepted, requests: 0, per_api: BTreeMap::new(), seen: BTreeMap::new(), replays: 0 }
    }

    /// Counts one sequence's outcomes and prints its divergences. `replay` runs a
    /// candidate sequence under fresh names (the attempt number keeps them unique); it
    /// is used to shrink a new kind of divergence.
    pub fn record(
        &mut self,
        number: usize,
        steps: &[Step],
        outcomes: &[StepOutcome],
        names: &Names,
        replay: &mut dyn FnMut(&[Step], usize) -> Vec<StepOutcome>,
    ) {
        self.replays = 0;
        for (index, (step, outcome)) in steps.iter().zip(outcomes).enumerate() {
            let api = format!("{:?}", step.request.api_key());
            self.requests += 1;
            self.per_api.entry(api.clone()).or_default().requests += 1;
            if outcome.diffs.is_empty() {
                continue;
            }
            let reason = self.accepted_reason(&api, &outcome.diffs);
            let tally = self.per_api.get_mut(&api).expect("inserted above");
            if reason.is_some() {
                tally.accepted += 1;
            } else {
                tally.open += 1;
            }
            let status = match &reason {
                Some(reason) => format!("accepted: {reason}"),
                None => "OPEN".to_string(),
            };
            let signature = signature(&api, &outcome.diffs);
            let where_ = format!(
                "seed={} sequence={number} step={} api={api} v{}{}",
                self.seed,
                index + 1,
                step.version,
                pipelined_mark(step)
            );
            if let Some(first) = self.seen.get(&signature) {
                println!("DIVERGENCE #{first} again: {where_} [{status}]");
                continue;
            }
            let id = self.seen.len() + 1;
            self.seen.insert(signature.clone(), id);
            println!("\nDIVERGENCE #{id}: {where_} [{status}]");
            let (minimal, minimal_outcome, minimal_names) = if reason.is_none() {
                shrink(&steps[..=index], outcome, names, &signature, &api, &mut self.replays, replay)
            } else {
                (steps[..=index].to_vec(), clone_outcome(outcome), names.clone())
            };
            print_divergence(&minimal, &minimal_outcome, &minimal_names);
        }
    }

    /// The accepted entry's reason when every differing field is covered.
    fn accepted_reason(&self, api: &str, diffs: &[FieldDiff]) -> Option<String> {
        let mut reasons: Vec<&str> = Vec::new();
        for field in diffs {
            let entry = covering(self.accepted, api, field)?;
            if !reasons.contains(&entry.reason.as_str()) {
                reasons.push(&entry.reason);
            }
        }
        Some(reasons.join("; "))
    }

    pub fn open(&self) -> usize {
        self.per_api.values().map(|t| t.open).sum()
    }

    pub fn print_summary(&self, sequences: usize, elapsed: Duration) {
        let accepted: usize = self.per_api.values().map(|t| t.accepted).sum();
        let open = self.open();
        println!("\n{:<18} {:>9} {:>6} {:>9}", "api", "requests", "open", "accepted");
        for (api, tally) in &self.per_api {
            println!("{api:<18} {:>9} {:>6} {:>9}", tally.requests, tally.open, tally.accepted);
        }
        println!("distinct kinds of divergence: {}; time: {:.1} s", self.seen.len(), elapsed.as_secs_f64());
        println!(
            "diff: sequences={sequences} requests={} divergences={} accepted={accepted} open={open}",
            self.requests,
            accepted + open
        );
    }
}

/// Identifies a kind of divergence: the API, the differing fields with array indexes
/// dropped and, for error codes, both values.
fn signature(api: &str, diffs: &[FieldDiff]) -> String {
    let mut parts: Vec<String> = diffs
        .iter()
        .map(|d| {
            let path = strip_indexes(&d.path);
            if path.ends_with("error_code") || path.starts_with("transport_error") {
                format!("{path}={}/{}", d.kafka, d.keel)
            } else {
                path
            }
        })
        .collect();
    parts.sort();
    parts.dedup();
    format!("{api} {}", parts.join(" "))
}

fn strip_indexes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push_str("[*]");
            }
            ']' => in_index = false,
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    out
}

/// Drops earlier steps one at a time, last first, keeping each removal after which the
/// final step still diverges the same way. Greedy, so minimal in the sense that no single
/// remaining step can go, which is what a reader needs.
fn shrink(
    steps: &[Step],
    outcome: &StepOutcome,
    names: &Names,
    signature_wanted: &str,
    api: &str,
    attempt: &mut usize,
    replay: &mut dyn FnMut(&[Step], usize) -> Vec<StepOutcome>,
) -> (Vec<Step>, StepOutcome, Names) {
    let mut best = (steps.to_vec(), clone_outcome(outcome), names.clone());
    let mut index = steps.len().saturating_sub(1);
    while index > 0 {
        index -= 1;
        let mut candidate = best.0.clone();
        candidate.remove(index);
        *attempt += 1;
        let outcomes = replay(&candidate, *attempt);
        let last = outcomes.last().expect("candidate keeps the diverging step");
        if !last.diffs.is_empty() && signature(api, &last.diffs) == signature_wanted {
            let prefix = names.prefix.clone();
            best = (candidate, clone_outcome(last), Names { prefix: format!("{prefix}m{}-", *attempt) });
        }
    }
    best
}

fn clone_outcome(outcome: &StepOutcome) -> StepOutcome {
    StepOutcome { kafka: outcome.kafka.clone(), keel: outcome.keel.clone(), diffs: outcome.diffs.clone() }
}

fn print_divergence(steps: &[Step], outcome: &StepOutcome, names: &Names) {
    println!("  minimal sequence (names under prefix {}):", names.prefix);
    for (i, step) in steps.iter().enumerate() {
        let (api, version, mark) = (step.request.api_key(), step.version, pipelined_mark(step));
        println!("    {}. {api:?} v{version}{mark}: {}", i + 1, step.request.summary(names));
    }
    println!("  differing fields (kafka | keel):");
    for field in outcome.diffs.iter().take(FIELDS_SHOWN_MAX) {
        println!("    {}: {} | {}", field.path, field.kafka, field.keel);
    }
    if outcome.diffs.len() > FIELDS_SHOWN_MAX {
        println!("    ... and {} more", outcome.diffs.len() - FIELDS_SHOWN_MAX);
    }
    side_by_side(&outcome.kafka, &outcome.keel);
}

/// How a report marks a step written right behind the one before it, before that one's
/// answer was read.
fn pipelined_mark(step: &Step) -> &'static str {
    if step.pipelined {
        " (pipelined)"
    } else {
        ""
    }
}

fn side_by_side(kafka: &Value, keel: &Value) {
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let (left, right) = (pretty(kafka), pretty(keel));
    let (left, right): (Vec<&str>, Vec<&str>) = (left.lines().collect(), right.lines().collect());
    println!("  {:<COLUMN_WIDTH$} | keel", "kafka");
    let lines = left.len().max(right.len());
    for i in 0..lines.min(SIDE_BY_SIDE_LINES_MAX) {
        let l = left.get(i).copied().unwrap_or("");
        let r = right.get(i).copied().unwrap_or("");
        let marker = if l == r { ' ' } else { '*' };
        println!("{marker} {l:<COLUMN_WIDTH$} | {r}");
    }
    if lines > SIDE_BY_SIDE_LINES_MAX {
        println!("  ... {} more lines", lines - SIDE_BY_SIDE_LINES_MAX);
    }
}
