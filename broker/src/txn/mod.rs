//! The transaction coordinator: transactional producers' ids, epochs and open
//! transactions, and the two-phase commit that ends them with markers.
//!
//! **Placement.** A transactional id belongs to one partition of the internal
//! `__transaction_state` topic (`abs(id.hashCode()) % partitions`, as Kafka places
//! it), so to that partition's owner shard on a single node, and to its Raft leader in
//! a cluster, where the partition is replicated like `__consumer_offsets` and the
//! coordinator moves with its leadership (`shell`).
//!
//! **Pure core, thin shell.** `crate::transactions::state::TxnMeta` decides every transition; the shell
//! writes the new state to `__transaction_state` (Kafka's record schemas, `crate::transactions::records`)
//! and only then answers, so the log always holds what a client was told, and a new
//! coordinator rebuilds everything by reading it.
//!
//! **Two phases.** EndTxn records PrepareCommit (or PrepareAbort) first; from then on
//! the outcome is decided and survives any crash. Markers then go to every partition
//! in the transaction (those this node leads directly, the others with
//! WriteTxnMarkers to their leaders, [`markers`]), retried until each is written;
//! CompleteCommit (CompleteAbort) is recorded last. A coordinator that takes over a
//! partition finishes the transactions it finds prepared. EndTxn answers once the
//! markers are written (or after a bound, with the outcome already decided), so a
//! producer's next transaction rarely meets CONCURRENT_TRANSACTIONS.
//!
//! **What this supports.** Both of Kafka's transaction protocols, chosen per request
//! by its version: 1 (the producer adds partitions with AddPartitionsToTxn before
//! writing to them) and 2 (KIP-890 part 2: Produce v12 and TxnOffsetCommit v5 join by
//! being written, EndTxn v5 moves the epoch at every end), which clients use when the
//! broker finalizes `transaction.version` 2, the default.

pub mod markers;
pub mod requests;
pub mod shell;
