//! The group coordinator: consumer groups (the classic protocol and KIP-848's consumer
//! protocol) and their committed offsets.
//!
//! **Placement.** A group belongs to one partition of the internal `__consumer_offsets`
//! topic, chosen as Kafka does (`abs(groupId.hashCode()) % partitions`, Java's string
//! hash), and so to that partition's owner shard: its coordinator shard. Every group
//! request, whichever shard accepted the connection, is forwarded there with
//! a typed cross-shard request ([`requests`]), so a group's state lives on exactly one
//! shard and needs no lock.
//!
//! **Pure cores, thin shell.** `crate::groups`' [`ClassicGroup`] and [`ConsumerGroup`]
//! are state machines: events with the time in, answers and actions out. The shell
//! ([`shell`]) owns what they must not: parked JoinGroup/SyncGroup responses, the
//! `__consumer_offsets` log, and the timer that drives session and rebalance timeouts.
//!
//! **State that fails over with its partition.** In a cluster `__consumer_offsets` is
//! replicated with Raft and a group's coordinator is its partition's leader: records
//! are appended through Raft and acknowledged once committed, and a node that becomes
//! leader reads the partition's groups from the log before it serves them (Kafka's
//! `GroupMetadataManager` on election), and drops them when it stops leading.
//!
//! **The log is the truth.** Offset commits and group metadata are records in the
//! group's `__consumer_offsets` partition (Kafka's own key and value schemas, see
//! `crate::groups::records`); a commit is acknowledged only once its record is durable, and
//! in-memory state is what replaying the log at start-up would rebuild. The topic is
//! compacted by key, tombstones delete.
//!
//! [`ClassicGroup`]: crate::groups::classic::ClassicGroup
//! [`ConsumerGroup`]: crate::groups::consumer::ConsumerGroup

pub mod admin_ops;
pub mod classic_ops;
pub mod consumer_ops;
pub mod leadership;
pub mod offset_ops;
pub mod requests;
pub mod shell;
