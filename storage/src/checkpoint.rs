//! The small per-partition state kept in the shard's state store ([`crate::kv`]),
//! under the partition's key prefix: the log start offset and cleaner position
//! (`state`), and the clean-shutdown checkpoint (`clean`, see [`crate::recovery`]).
//! Journal checkpoints' snapshots (`snapshot`, `sealed/<base>`) are [`crate::snapshot`]'s.

use bytes::{Buf, BufMut};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trip() {
        let s = PartitionState { log_start_offset: 42, cleaned_upto: 7 };
        assert_eq!(PartitionState::decode(&s.encode()), Some(s));
        assert_eq!(PartitionState::decode(&s.encode()[..15]), None);
    }
}
