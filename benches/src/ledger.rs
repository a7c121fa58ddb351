//! Which records a read_committed reader saw, against what the producer committed.
//!
//! Every value the transactional workload writes carries its sequence number `s`
//! after the send time; transaction `k` of `n` records holds `k·n .. (k+1)·n`. The
//! ledger counts how often each `s` was read and the highest `s` per partition, so
//! one pass tells missing records, duplicates, records of aborted transactions (a
//! read_committed reader must never see them) and reordering within a partition.

use crate::consumer::intended_time;
use crate::PAYLOAD_HEADER_BYTES;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Value bytes before the filler: intended time, then the record's sequence number.
pub const VALUE_HEADER_BYTES: usize = PAYLOAD_HEADER_BYTES + 8;

/// What the reader saw against what the producer committed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReadCheck {
    /// Records of committed transactions.
    pub expected_records: u64,
    /// Distinct records of committed transactions read.
    pub read_records: u64,
    pub missing: u64,
    /// Records read more than once.
    pub duplicates: u64,
    /// Records of aborted transactions that a read_committed reader must not see.
    pub from_aborted: u64,
    /// Records that came before a record already read from the same partition.
    pub out_of_order: u64,
    /// Seconds the read-back took (0 when the run's consumer did the check).
    pub read_back_secs: f64,
}

impl ReadCheck {
    pub fn passed(&self) -> bool {
        self.missing == 0 && self.duplicates == 0 && self.from_aborted == 0 && self.out_of_order == 0
    }
}

/// Which records the reader saw, by sequence number.
#[derive(Default)]
pub struct Ledger {
    /// Times each sequence number was read (saturating).
    seen: Vec<u8>,
    pub distinct: u64,
    duplicates: u64,
    out_of_order: u64,
    last_by_partition: HashMap<(String, i32), u64>,
}

impl Ledger {
    pub fn record(&mut self, topic: &str, partition: i32, sequence: u64) {
        let index = sequence as usize;
        if index >= self.seen.len() {
            self.seen.resize((index + 1).next_power_of_two(), 0);
        }
        match self.seen[index] {
            0 => self.distinct += 1,
            _ => self.duplicates += 1,
        }
        self.seen[index] = self.seen[index].saturating_add(1);
        let last = self.last_by_partition.entry((topic.to_string(), partition)).or_insert(sequence);
        if sequence < *last {
            self.out_of_order += 1;
        }
        *last = sequence.max(*last);
    }

    /// Compare with the outcome of every transaction (`true` = committed).
    pub fn check(&self, outcomes: &[bool], records_per_transaction: u64) -> ReadCheck {
        let mut check =
            ReadCheck { duplicates: self.duplicates, out_of_order: self.out_of_order, ..ReadCheck::default() };
        let per = records_per_transaction as usize;
        for (index, &times) in self.seen.iter().enumerate() {
            let committed = outcomes.get(index / per).copied().unwrap_or(false);
            match (committed, times) {
                (true, 0) => {}
                (true, _) => check.read_records += 1,
                (false, 0) => {}
                (false, _) => check.from_aborted += 1,
            }
        }
        check.expected_records = outcomes.iter().filter(|&&committed| committed).count() as u64 * per as u64;
        check.missing = check.expected_records - check.read_records;
        check
    }
}

/// The sequence number a value carries after its send time, if it is one of ours.
pub fn sequence_of(payload: Option<&[u8]>) -> Option<u64> {
    intended_time(payload)?;
    let bytes: [u8; 8] = payload?.get(PAYLOAD_HEADER_BYTES..VALUE_HEADER_BYTES)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::unix_nanos;

    #[test]
    fn sequence_numbers_follow_the_send_time() {
        let mut value = vec![0u8; 32];
        value[..8].copy_from_slice(&unix_nanos().to_le_bytes());
        value[8..16].copy_from_slice(&42u64.to_le_bytes());
        assert_eq!(sequence_of(Some(&value)), Some(42));
        assert_eq!(sequence_of(Some(&value[..12])), None);
        assert_eq!(sequence_of(Some(b"p")), None);
    }

    #[test]
    fn the_ledger_finds_missing_duplicate_aborted_and_reordered_records() {
        let mut ledger = Ledger::default();
        // Transactions of 2 records: 0 committed, 1 aborted, 2 and 3 committed.
        for sequence in [0, 1, 1, 2, 5, 4] {
            ledger.record("t", 0, sequence);
        }
        let check = ledger.check(&[true, false, true, true], 2);
        assert_eq!(check.expected_records, 6);
        assert_eq!(check.read_records, 4);
        assert_eq!(check.missing, 2);
        assert_eq!(check.duplicates, 1);
        assert_eq!(check.from_aborted, 1);
        assert_eq!(check.out_of_order, 1);
        assert!(!check.passed());
    }
}
