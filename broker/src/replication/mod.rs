//! Replication between Keel brokers: one Raft group per partition (the partition log
//! is the Raft log) and one for the cluster metadata. [`shell`] is the glommio shell
//! around the pure Raft core (`keel-raft`): it owns the disk and the timer for the
//! core; `crate::cluster::nodes` ties the metadata group to the broker's metadata and
//! controller.
//!
//! Each shard replicates its own partitions: a Raft message goes to a `(node, shard)`
//! destination over the sending shard's own connections ([`transport`]) and arrives on
//! the shard that owns the group there. No replication state is shared between shards.
//!
//! [`frame`] is the wire format of node-to-node frames, kept apart from the sockets so
//! that its decoder can be tested and fuzzed on bytes alone.

pub mod frame;
pub mod install;
mod raft_log;
pub mod read_index;
pub mod rpc_tls;
pub mod shell;
pub mod transport;
