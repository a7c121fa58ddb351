//! The small per-partition state kept in the shard's state store ([`crate::kv`]),
//! under the partition's key prefix: the log start offset and cleaner position
//! (`state`), and the clean-shutdown checkpoint (`clean`, see [`crate::recovery`]).
//! Journal checkpoints' snapshots (`snapshot`, `sealed/<base>`) are
//! [`crate::log::snapshot`]'s; the encoding of a segment's state, the epoch cache and
//! producers' batch headers here is shared by both.

use bytes::{Buf, BufMut};
use keel_protocol::batch::BatchHeader;

use crate::segment::{IndexEntry, SegmentState};

/// Key (under the partition's prefix) of its log start offset and cleaner position.
pub const STATE_KEY: &str = "state";
/// Key (under the partition's prefix) of its clean-shutdown checkpoint.
pub const CLEAN_KEY: &str = "clean";

/// Durable per-partition state that segment files alone cannot tell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionState {
    /// Moved by DeleteRecords and retention; may point inside the first segment.
    pub log_start_offset: i64,
    /// Offsets below this were compacted with a complete key map.
    pub cleaned_upto: i64,
}

impl PartitionState {
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(16);
        body.put_i64(self.log_start_offset);
        body.put_i64(self.cleaned_upto);
        body
    }

    pub fn decode(mut body: &[u8]) -> Option<PartitionState> {
        if body.len() < 16 {
            return None;
        }
        Some(PartitionState { log_start_offset: body.get_i64(), cleaned_upto: body.get_i64() })
    }
}

/// What the clean-shutdown checkpoint holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CleanState {
    pub next_offset: i64,
    pub epochs: Vec<(i32, i64)>,
    pub producers: Vec<BatchHeader>,
    pub segments: Vec<SegmentState>,
}

impl CleanState {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_i64(self.next_offset);
        put_epochs_and_producers(&mut b, &self.epochs, &self.producers);
        b.put_u32(self.segments.len() as u32);
        for s in &self.segments {
            put_segment_state(&mut b, s);
        }
        b
    }

    /// Decodes a checkpoint body; `None` if it is short or inconsistent.
    pub(crate) fn decode(mut b: &[u8]) -> Option<CleanState> {
        let next_offset = get_i64(&mut b)?;
        let (epochs, producers) = get_epochs_and_producers(&mut b)?;
        let mut segments = Vec::new();
        for _ in 0..get_u32(&mut b)? {
            segments.push(get_segment_state(&mut b)?);
        }
        b.is_empty().then_some(CleanState { next_offset, epochs, producers, segments })
    }
}

pub(crate) fn put_segment_state(b: &mut Vec<u8>, s: &SegmentState) {
    for v in [s.base_offset, s.size as i64, s.next_offset, s.max_timestamp, s.max_timestamp_offset] {
        b.put_i64(v);
    }
    b.put_i64(s.rolling_timestamp);
    b.put_u64(s.bytes_since_index);
    b.put_u32(s.index.len() as u32);
    for e in &s.index {
        b.put_i64(e.offset);
        b.put_u64(e.position);
        b.put_i64(e.max_timestamp_so_far);
    }
}

pub(crate) fn get_segment_state(b: &mut &[u8]) -> Option<SegmentState> {
    let (base_offset, size, next_offset, max_timestamp, max_timestamp_offset) =
        (get_i64(b)?, get_i64(b)?, get_i64(b)?, get_i64(b)?, get_i64(b)?);
    let rolling_timestamp = get_i64(b)?;
    let bytes_since_index = get_i64(b)? as u64;
    let count = get_u32(b)? as usize;
    // Each entry takes 24 bytes: a count the body cannot hold is a damaged body.
    if count > b.len() / 24 {
        return None;
    }
    let mut index = Vec::with_capacity(count);
    for _ in 0..count {
        let (offset, position, ts) = (get_i64(b)?, get_i64(b)? as u64, get_i64(b)?);
        index.push(IndexEntry { offset, position, max_timestamp_so_far: ts });
    }
    Some(SegmentState {
        base_offset,
        size: u64::try_from(size).ok()?,
        next_offset,
        max_timestamp,
        max_timestamp_offset,
        rolling_timestamp,
        bytes_since_index,
        index,
    })
}

/// The epoch cache and the producers' recent batch headers, as both the clean-shutdown
/// checkpoint and the checkpoint snapshot store them.
pub(crate) fn put_epochs_and_producers(b: &mut Vec<u8>, epochs: &[(i32, i64)], producers: &[BatchHeader]) {
    b.put_u32(epochs.len() as u32);
    for (epoch, start) in epochs {
        b.put_i32(*epoch);
        b.put_i64(*start);
    }
    b.put_u32(producers.len() as u32);
    for h in producers {
        put_header(b, h);
    }
}

/// The epoch cache ((leader epoch, first offset) pairs) and producers' recent headers.
pub(crate) type EpochsAndProducers = (Vec<(i32, i64)>, Vec<BatchHeader>);

pub(crate) fn get_epochs_and_producers(b: &mut &[u8]) -> Option<EpochsAndProducers> {
    let mut epochs = Vec::new();
    for _ in 0..get_u32(b)? {
        epochs.push((get_i32(b)?, get_i64(b)?));
    }
    let mut producers = Vec::new();
    for _ in 0..get_u32(b)? {
        producers.push(get_header(b)?);
    }
    Some((epochs, producers))
}

pub(crate) fn put_header(b: &mut Vec<u8>, h: &BatchHeader) {
    b.put_i64(h.base_offset);
    b.put_i32(h.batch_length);
    b.put_i32(h.partition_leader_epoch);
    b.put_i16(h.attributes);
    b.put_i32(h.last_offset_delta);
    b.put_i64(h.base_timestamp);
    b.put_i64(h.max_timestamp);
    b.put_i64(h.producer_id);
    b.put_i16(h.producer_epoch);
    b.put_i32(h.base_sequence);
    b.put_i32(h.records_count);
}

pub(crate) fn get_header(b: &mut &[u8]) -> Option<BatchHeader> {
    Some(BatchHeader {
        base_offset: get_i64(b)?,
        batch_length: get_i32(b)?,
        partition_leader_epoch: get_i32(b)?,
        magic: 2,
        crc: 0,
        attributes: get_i16(b)?,
        last_offset_delta: get_i32(b)?,
        base_timestamp: get_i64(b)?,
        max_timestamp: get_i64(b)?,
        producer_id: get_i64(b)?,
        producer_epoch: get_i16(b)?,
        base_sequence: get_i32(b)?,
        records_count: get_i32(b)?,
    })
}

pub(crate) fn get_i64(b: &mut &[u8]) -> Option<i64> {
    (b.len() >= 8).then(|| b.get_i64())
}
pub(crate) fn get_i32(b: &mut &[u8]) -> Option<i32> {
    (b.len() >= 4).then(|| b.get_i32())
}
pub(crate) fn get_u32(b: &mut &[u8]) -> Option<u32> {
    (b.len() >= 4).then(|| b.get_u32())
}
pub(crate) fn get_i16(b: &mut &[u8]) -> Option<i16> {
    (b.len() >= 2).then(|| b.get_i16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trip() {
        let s = PartitionState { log_start_offset: 42, cleaned_upto: 7 };
        assert_eq!(PartitionState::decode(&s.encode()), Some(s));
        assert_eq!(PartitionState::decode(&s.encode()[..15]), None);
    }

    #[test]
    fn clean_state_round_trip_and_truncation() {
        let clean = CleanState {
            next_offset: 99,
            epochs: vec![(0, 0), (3, 50)],
            producers: Vec::new(),
            segments: vec![SegmentState {
                base_offset: 0,
                size: 8192,
                next_offset: 99,
                max_timestamp: 5,
                max_timestamp_offset: 10,
                rolling_timestamp: 1,
                bytes_since_index: 100,
                index: vec![IndexEntry { offset: 0, position: 0, max_timestamp_so_far: 1 }],
            }],
        };
        let body = clean.encode();
        assert_eq!(CleanState::decode(&body), Some(clean));
        for cut in 0..body.len() {
            assert!(CleanState::decode(&body[..cut]).is_none(), "cut at {cut} accepted");
        }
    }
}
