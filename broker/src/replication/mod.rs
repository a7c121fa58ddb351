//! Replication between Keel brokers: one Raft group per partition (the partition log
//! is the Raft log) and one for the cluster metadata. [`shell`] is the glommio shell
//! around the pure Raft core (`keel-raft`): it owns the disk and the timer for the
//! core; [`cluster`] ties the metadata group to the broker's metadata and controller.
//!
//! Each shard replicates its own partitions: a Raft message goes to a `(node, shard)`
//! destination over the sending shard's own connections ([`transport`]) and arrives on
//! the shard that owns the group there. No replication state is shared between shards.
//!
//! [`balance`] keeps leaderships on their preferred replicas (Kafka's preferred
//! leaders) and carries out the moves ElectLeaders and the admin API ask for.
//! [`reassign`] changes a group's members; [`rebuild`] uses it to replace a damaged
//! replica by an empty one that its leader fills again.
//!
//! [`frame`] is the wire format of node-to-node frames, kept apart from the sockets so
//! that its decoder can be tested and fuzzed on bytes alone.

pub mod balance;
pub mod cluster;
pub mod frame;
mod install;
mod raft_log;
mod read_index;
pub mod reassign;
pub mod rebuild;
pub mod requests;
pub mod shell;
pub mod transport;
