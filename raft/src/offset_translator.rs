//! Raft index ↔ Kafka offset, per group.
//!
//! One Raft entry is one Kafka v2 record batch, so a Raft index counts batches while a
//! Kafka offset counts records. Raft's own entries (the empty entry a new leader appends,
//! configuration changes) take no Kafka offset at all: clients break when internal batches
//! take offsets (Redpanda issue #1184, `offset_translator_state.h`). The translator keeps,
//! for every entry of the log tail it covers, the Kafka offset just past that entry; a
//! Raft-internal entry repeats the previous value. Lookups are O(1) by index and
//! O(log n) by offset.
//!
//! Why a dense column rather than Redpanda's map of internal batches only: in Redpanda a
//! Raft offset counts records, so only internal batches shift the mapping; here a Raft index
//! counts batches of varying size, so every entry moves it. The durable form is the
//! segment's sparse index (`(kafka_offset, raft_index, file_pos)` rows); this structure is
//! the in-memory tail the core needs, rebuilt from the log at start.

use std::collections::VecDeque;
use std::ops::Range;

use thiserror::Error;

/// Size of a Kafka v2 record batch header up to and including `recordsCount`.
pub const BATCH_HEADER_BYTES: usize = 61;
const MAGIC_BYTE_AT: usize = 16;
const LAST_OFFSET_DELTA_AT: Range<usize> = 23..27;

/// Why bytes proposed as a Kafka batch cannot be one.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BatchError {
    #[error("record batch of {len} bytes is shorter than the {BATCH_HEADER_BYTES}-byte v2 header")]
    TooShort { len: usize },
    #[error("record batch has magic {magic}, only v2 batches can be replicated")]
    Magic { magic: i8 },
    #[error("record batch has a negative lastOffsetDelta {delta}")]
    NegativeLastOffsetDelta { delta: i32 },
}

/// How many Kafka offsets a v2 record batch takes: `lastOffsetDelta + 1`.
///
/// The minimal parse of the header (KIP-98 layout, all big-endian): `baseOffset` i64 at
/// 0, `batchLength` i32 at 8, `partitionLeaderEpoch` i32 at 12, `magic` i8 at 16, `crc` u32
/// at 17, `attributes` i16 at 21, `lastOffsetDelta` i32 at 23, ..., `recordsCount` i32 at
/// 57..61. The offset span is `lastOffsetDelta + 1`, not `recordsCount`: a compacted batch
/// keeps its span while losing records, and Kafka assigns offsets by the span. The CRC and
/// the records themselves are checked where batches are accepted (keel-protocol), not here.
pub fn batch_offset_count(batch: &[u8]) -> Result<u32, BatchError> {
    if batch.len() < BATCH_HEADER_BYTES {
        return Err(BatchError::TooShort { len: batch.len() });
    }
    let magic = batch[MAGIC_BYTE_AT] as i8;
    if magic != 2 {
        return Err(BatchError::Magic { magic });
    }
    let mut delta = [0u8; 4];
    delta.copy_from_slice(&batch[LAST_OFFSET_DELTA_AT]);
    let delta = i32::from_be_bytes(delta);
    if delta < 0 {
        return Err(BatchError::NegativeLastOffsetDelta { delta });
    }
    Ok(delta as u32 + 1)
}

/// Maps the Raft indexes of one group's log tail to Kafka offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetTranslator {
    /// Raft index of `ends[0]`.
    first_index: u64,
    /// Kafka offset at which the entry `first_index` starts.
    start_offset: u64,
    /// `ends[i]`: the Kafka offset just past entry `first_index + i`.
    ends: VecDeque<u64>,
}

impl OffsetTranslator {
    /// An empty translator whose next entry is `first_index`, starting at Kafka offset
    /// `start_offset` (both 1 and 0 for a new partition; the snapshot point after a
    /// restart or a trim).
    pub fn new(first_index: u64, start_offset: u64) -> Self {
        assert!(first_index >= 1, "Raft indexes start at 1");
        Self { first_index, start_offset, ends: VecDeque::new() }
    }

    /// Raft index of the first entry covered (or of the next entry when empty).
    pub fn first_index(&self) -> u64 {
        self.first_index
    }

    /// Raft index of the last entry covered; `first_index - 1` when empty.
    pub fn last_index(&self) -> u64 {
        self.first_index + self.ends.len() as u64 - 1
    }

    /// Kafka offset the next data batch appended would start at (the log end offset).
    pub fn next_offset(&self) -> u64 {
        self.ends.back().copied().unwrap_or(self.start_offset)
    }

    /// Records entry `index`, which takes `offset_count` Kafka offsets (0 for a Raft entry).
    pub fn append(&mut self, index: u64, offset_count: u32) {
        assert_eq!(index, self.last_index() + 1, "Raft indexes are appended without gaps");
        let end = self.next_offset() + u64::from(offset_count);
        self.ends.push_back(end);
    }

    /// Removes every entry after `index` (a deposed leader's uncommitted tail).
    pub fn truncate_after(&mut self, index: u64) {
        assert!(index + 1 >= self.first_index, "cannot truncate below the first covered index");
        let keep = (index + 1 - self.first_index) as usize;
        self.ends.truncate(keep);
    }

    /// Forgets entries before `index`, once the log below it is compacted or trimmed.
    pub fn trim_before(&mut self, index: u64) {
        while self.first_index < index && !self.ends.is_empty() {
            self.start_offset = self.ends.pop_front().unwrap_or(self.start_offset);
            self.first_index += 1;
        }
        assert!(self.first_index >= index || self.ends.is_empty());
        if self.ends.is_empty() && self.first_index < index {
            self.first_index = index;
        }
    }

    /// Kafka offsets taken by entry `index`: empty for a Raft entry, `None` if not covered.
    pub fn offsets_of(&self, index: u64) -> Option<Range<u64>> {
        if index < self.first_index || index > self.last_index() {
            return None;
        }
        let position = (index - self.first_index) as usize;
        let start = if position == 0 { self.start_offset } else { self.ends[position - 1] };
        Some(start..self.ends[position])
    }

    /// The Kafka offset just past entry `index`: with the commit index, the high watermark.
    pub fn end_offset_of(&self, index: u64) -> Option<u64> {
        if index + 1 == self.first_index {
            return Some(self.start_offset);
        }
        self.offsets_of(index).map(|range| range.end)
    }

    /// Raft index of the data entry holding Kafka `offset`, if covered.
    pub fn index_of_offset(&self, offset: u64) -> Option<u64> {
        if offset < self.start_offset || offset >= self.next_offset() {
            return None;
        }
        // The first entry whose end is past `offset` holds it; a Raft entry ends where its
        // predecessor does, so it is never the first such entry.
        let position = self.ends.partition_point(|&end| end <= offset);
        Some(self.first_index + position as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(offset_count: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; BATCH_HEADER_BYTES + 8];
        bytes[MAGIC_BYTE_AT] = 2;
        bytes[LAST_OFFSET_DELTA_AT].copy_from_slice(&(offset_count as i32 - 1).to_be_bytes());
        bytes
    }

    #[test]
    fn batch_header_gives_the_offset_span() {
        assert_eq!(batch_offset_count(&batch(1)), Ok(1));
        assert_eq!(batch_offset_count(&batch(500)), Ok(500));
        assert_eq!(batch_offset_count(&[0; 10]), Err(BatchError::TooShort { len: 10 }));
        let mut old = batch(3);
        old[MAGIC_BYTE_AT] = 1;
        assert_eq!(batch_offset_count(&old), Err(BatchError::Magic { magic: 1 }));
        let mut negative = batch(1);
        negative[LAST_OFFSET_DELTA_AT].copy_from_slice(&(-2i32).to_be_bytes());
        assert_eq!(batch_offset_count(&negative), Err(BatchError::NegativeLastOffsetDelta { delta: -2 }));
    }

    #[test]
    fn raft_entries_take_no_offset() {
        let mut translator = OffsetTranslator::new(1, 0);
        translator.append(1, 0); // a new leader's empty entry
        translator.append(2, 3);
        translator.append(3, 0); // a configuration change
        translator.append(4, 2);
        assert_eq!(translator.offsets_of(1), Some(0..0));
        assert_eq!(translator.offsets_of(2), Some(0..3));
        assert_eq!(translator.offsets_of(3), Some(3..3));
        assert_eq!(translator.offsets_of(4), Some(3..5));
        assert_eq!(translator.offsets_of(5), None);
        assert_eq!(translator.next_offset(), 5);
        assert_eq!(translator.end_offset_of(0), Some(0));
        assert_eq!(translator.end_offset_of(3), Some(3));
        for (offset, index) in [(0, 2), (2, 2), (3, 4), (4, 4)] {
            assert_eq!(translator.index_of_offset(offset), Some(index), "offset {offset}");
        }
        assert_eq!(translator.index_of_offset(5), None);
    }

    #[test]
    fn truncation_removes_a_deposed_leaders_tail() {
        let mut translator = OffsetTranslator::new(1, 0);
        for (index, count) in [(1, 0), (2, 5), (3, 5), (4, 1)] {
            translator.append(index, count);
        }
        translator.truncate_after(2);
        assert_eq!(translator.last_index(), 2);
        assert_eq!(translator.next_offset(), 5);
        assert_eq!(translator.index_of_offset(7), None);
        translator.append(3, 0); // the new leader's empty entry
        translator.append(4, 2);
        assert_eq!(translator.offsets_of(4), Some(5..7));
        translator.truncate_after(0);
        assert_eq!(translator.last_index(), 0);
        assert_eq!(translator.next_offset(), 0);
    }

    #[test]
    fn trimming_keeps_later_offsets() {
        let mut translator = OffsetTranslator::new(10, 100);
        for (index, count) in [(10, 4), (11, 0), (12, 6)] {
            translator.append(index, count);
        }
        translator.trim_before(12);
        assert_eq!(translator.first_index(), 12);
        assert_eq!(translator.offsets_of(11), None);
        assert_eq!(translator.offsets_of(12), Some(104..110));
        assert_eq!(translator.end_offset_of(11), Some(104));
        assert_eq!(translator.index_of_offset(103), None);
        translator.trim_before(20);
        assert_eq!(translator.first_index(), 20);
        assert_eq!(translator.next_offset(), 110);
        translator.append(20, 1);
        assert_eq!(translator.offsets_of(20), Some(110..111));
    }

    #[test]
    #[should_panic(expected = "without gaps")]
    fn gaps_are_a_bug() {
        let mut translator = OffsetTranslator::new(1, 0);
        translator.append(2, 1);
    }
}
