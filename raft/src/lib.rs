//! Keel's consensus layer: one Raft group per partition on tikv's `raft` crate, the
//! partition log being the Raft log. Runs inside each shard's executor; it never owns
//! threads or tasks per group.
//!
//! Not built yet: Keel runs single-node. The storage format already carries what Raft
//! needs (leader epoch per batch, high watermark distinct from log end, truncation).
