//! The group coordinator's state machines and records: consumer groups of the classic
//! protocol ([`classic::ClassicGroup`]) and KIP-848's ([`consumer::ConsumerGroup`]),
//! their committed offsets ([`offsets`]) and `__consumer_offsets`' record schemas
//! ([`records`]). Pure: events with the time in, answers and actions out. The shell
//! that feeds them, and what each shard holds of them ([`Coordinator`]), is
//! `crate::coordinator`'s.

pub mod assignor;
pub mod classic;
pub mod consumer;
pub mod consumer_protocol;
pub mod membership;
pub mod offsets;
pub mod records;

use std::collections::HashMap;

use classic::{ClassicGroup, JoinResult, Limits, SyncResult};
use consumer::ConsumerGroup;
use glommio::channels::local_channel::LocalSender;
use offsets::OffsetStore;

use crate::config::BrokerConfig;

pub use crate::config::OFFSETS_TOPIC;
/// The protocol type of consumer groups (classic `consumer` groups and KIP-848 groups).
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// A group of either protocol. A group id has one kind at a time; an empty group of
/// one kind becomes the other when a member of the other protocol joins.
pub enum Group {
    Classic(ClassicGroup),
    Consumer(ConsumerGroup),
}

impl Group {
    pub fn is_empty(&self) -> bool {
        match self {
            Group::Classic(g) => g.member_count() == 0,
            Group::Consumer(g) => g.member_count() == 0,
        }
    }

    /// State name as ListGroups and DescribeGroups spell it.
    pub fn state_name(&self) -> &'static str {
        match self {
            Group::Classic(g) => g.state().name(),
            Group::Consumer(g) => g.state_name(),
        }
    }

    pub fn protocol_type(&self) -> &str {
        match self {
            Group::Classic(g) => g.protocol_type().unwrap_or(""),
            Group::Consumer(_) => CONSUMER_PROTOCOL_TYPE,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Group::Classic(_) => "classic",
            Group::Consumer(_) => "consumer",
        }
    }
}

/// The coordinator state of one shard: the groups whose `__consumer_offsets` partition
/// it owns, their offsets, and the responses parked on them.
#[derive(Default)]
pub struct Coordinator {
    pub groups: HashMap<String, Group>,
    pub offsets: OffsetStore,
    /// Parked JoinGroup and SyncGroup responses by (group, member id).
    pub joins: HashMap<(String, String), LocalSender<JoinResult>>,
    pub syncs: HashMap<(String, String), LocalSender<SyncResult>>,
    /// False until this shard's unreplicated `__consumer_offsets` partitions (a
    /// single node's) are replayed at start-up.
    pub loaded: bool,
    /// In a cluster: the replicated `__consumer_offsets` partitions this node leads
    /// and whose groups this shard holds, each with the leader epoch it was loaded in.
    pub led: HashMap<i32, i32>,
    /// Members added, left, removed and fenced, for `/metrics`.
    pub member_changes: membership::MembershipCounts,
    /// Offsets committed inside transactions (TxnOffsetCommit) whose markers have not
    /// been written, by producer id: applied by a commit marker, dropped by an abort.
    pub txn_offsets: HashMap<i64, Vec<(String, offsets::TopicPartition, offsets::Committed)>>,
}

impl Coordinator {
    /// Takes in a transactional offset record of `producer_id` written at `offset`.
    pub fn pend_txn_offsets(&mut self, producer_id: i64, key: &[u8], value: Option<&[u8]>, offset: i64) {
        if let Some(records::Record::Offset { group, topic, partition, value: Some(v) }) = records::decode(key, value) {
            let committed = offsets::Committed {
                offset: v.offset,
                leader_epoch: v.leader_epoch,
                metadata: v.metadata,
                commit_timestamp_ms: v.commit_timestamp_ms,
                record_offset: offset,
            };
            self.txn_offsets.entry(producer_id).or_default().push((group, (topic, partition), committed));
        }
    }

    /// A marker of `producer_id` was written: its pending offsets are committed or
    /// dropped.
    pub fn complete_txn_offsets(&mut self, producer_id: i64, commit: bool) {
        let Some(pending) = self.txn_offsets.remove(&producer_id) else { return };
        if commit {
            for (group, tp, c) in pending {
                let at = c.record_offset;
                self.offsets.apply(&group, tp, Some(c), at);
            }
        }
    }

    /// True while a transaction holds an uncommitted offset of the group's partition
    /// (OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT then).
    pub fn unstable(&self, group: &str, topic: &str, partition: i32) -> bool {
        self.txn_offsets.values().flatten().any(|(g, (t, p), _)| g == group && t == topic && *p == partition)
    }
}

pub fn limits(config: &BrokerConfig) -> Limits {
    Limits {
        session_timeout_min_ms: config.group_min_session_timeout_ms,
        session_timeout_max_ms: config.group_max_session_timeout_ms,
        initial_rebalance_delay_ms: config.group_initial_rebalance_delay_ms,
    }
}

/// Java's `String.hashCode`: over UTF-16 code units, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// Kafka's `Utils.abs(groupId.hashCode()) % partitions` (`abs(MIN_VALUE)` is 0).
pub fn offsets_partition(group: &str, partitions: i32) -> i32 {
    assert!(partitions > 0, "__consumer_offsets has partitions");
    let h = java_string_hash(group);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_matches_kafka() {
        // Java: "group".hashCode() = 98629247, "my-group".hashCode() = -1906497762.
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("group"), 98_629_247);
        assert_eq!(offsets_partition("group", 50), 47);
        assert_eq!(java_string_hash("my-group"), -1_906_497_762);
        assert_eq!(offsets_partition("my-group", 50), 12);
        assert_eq!(offsets_partition("zzzzzz", 50), 14);
    }
}
