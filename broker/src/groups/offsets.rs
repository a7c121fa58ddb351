//! Committed offsets of the groups one coordinator shard owns: a pure map fed by the
//! records of `__consumer_offsets`, both when they are written (after they are durable)
//! and when the log is replayed at start-up.
//!
//! Each entry remembers the log offset of the record that set it, so two commits of the
//! same partition whose durability waits end in either order still leave the later one
//! in place: the map always equals "last record wins" over the log.

use std::collections::{BTreeMap, HashMap};

/// One committed offset, as OffsetFetch returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// Offset in `__consumer_offsets` of the record that set it.
    pub record_offset: i64,
}

pub type TopicPartition = (String, i32);

#[derive(Default)]
pub struct OffsetStore {
    groups: HashMap<String, BTreeMap<TopicPartition, Committed>>,
}

impl OffsetStore {
    /// Applies a commit (`Some`) or a deletion (`None`) written at `record_offset`;
    /// ignored if a later record already decided this partition.
    pub fn apply(&mut self, group: &str, tp: TopicPartition, value: Option<Committed>, record_offset: i64) {
        let offsets = self.groups.entry(group.to_string()).or_default();
        if offsets.get(&tp).is_some_and(|c| c.record_offset > record_offset) {
            return;
        }
        match value {
            Some(c) => {
                offsets.insert(tp, c);
            }
            None => {
                offsets.remove(&tp);
            }
        }
        if offsets.is_empty() {
            self.groups.remove(group);
        }
    }

    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<&Committed> {
        self.groups.get(group)?.get(&(topic.to_string(), partition))
    }

    /// Every committed offset of a group, ordered by topic and partition.
    pub fn group(&self, group: &str) -> impl Iterator<Item = (&TopicPartition, &Committed)> {
        self.groups.get(group).into_iter().flat_map(|m| m.iter())
    }

    pub fn has_offsets(&self, group: &str) -> bool {
        self.groups.contains_key(group)
    }

    pub fn group_ids(&self) -> impl Iterator<Item = &String> {
        self.groups.keys()
    }

    /// Removes every offset of a group; returns the partitions that had one.
    pub fn remove_group(&mut self, group: &str) -> Vec<TopicPartition> {
        self.groups.remove(group).map(|m| m.into_keys().collect()).unwrap_or_default()
    }

    /// Moves every offset of `other` in (groups loaded from another partition).
    pub fn absorb(&mut self, other: OffsetStore) {
        self.groups.extend(other.groups);
    }

    /// Partitions of `group` whose offsets are past retention at `now_ms`. An empty
    /// group's offsets expire together, `retention_ms` after it became empty (KIP-211);
    /// a group that never used group management (no protocol) expires each offset
    /// `retention_ms` after its own commit.
    pub fn expired(
        &self,
        group: &str,
        now_ms: i64,
        retention_ms: i64,
        empty_since_ms: Option<i64>,
    ) -> Vec<TopicPartition> {
        let Some(offsets) = self.groups.get(group) else {
            return Vec::new();
        };
        match empty_since_ms {
            Some(since) if since + retention_ms <= now_ms => offsets.keys().cloned().collect(),
            Some(_) => Vec::new(),
            None => offsets
                .iter()
                .filter(|(_, c)| c.commit_timestamp_ms + retention_ms <= now_ms)
                .map(|(tp, _)| tp.clone())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(offset: i64, record_offset: i64, ts: i64) -> Committed {
        Committed { offset, leader_epoch: -1, metadata: String::new(), commit_timestamp_ms: ts, record_offset }
    }

    #[test]
    fn later_record_wins_whatever_the_apply_order() {
        let mut s = OffsetStore::default();
        s.apply("g", ("t".into(), 0), Some(c(20, 5, 0)), 5);
        s.apply("g", ("t".into(), 0), Some(c(10, 4, 0)), 4);
        assert_eq!(s.get("g", "t", 0).map(|c| c.offset), Some(20));
        s.apply("g", ("t".into(), 0), None, 6);
        assert_eq!(s.get("g", "t", 0), None);
        assert!(!s.has_offsets("g"));
    }

    #[test]
    fn retention_of_empty_and_simple_groups() {
        let mut s = OffsetStore::default();
        s.apply("g", ("t".into(), 0), Some(c(1, 0, 100)), 0);
        s.apply("g", ("t".into(), 1), Some(c(1, 1, 900)), 1);
        // Simple group: per offset.
        assert_eq!(s.expired("g", 1000, 500, None), vec![("t".to_string(), 0)]);
        // Empty consumer group: all at once, measured from when it became empty.
        assert!(s.expired("g", 1000, 500, Some(600)).is_empty());
        assert_eq!(s.expired("g", 1100, 500, Some(600)).len(), 2);
        assert_eq!(s.remove_group("g").len(), 2);
    }
}
