//! Replica scrub: after a replicated partition opens, its whole log is read back from
//! disk and every batch's CRC checked, in a low-share task queue, one partition at a
//! time per shard.
//!
//! Why: a restart restores a log from its checkpoint snapshot without reading data,
//! and the Raft group reads back only what lies past its last recorded base, so a
//! segment damaged while the node was down (a flipped bit, a torn sector) would go
//! unnoticed until a client read it, and meanwhile the replica could vote and be
//! elected leader of a partition whose committed records it can no longer serve. A
//! replica found damaged leaves its group on this node ([`Partition::set_damaged`]):
//! the partition runs on its healthy replicas, and this one answers
//! KAFKA_STORAGE_ERROR instead of ever serving the bad batch. Reads that meet a
//! corrupt batch while serving do the same. The scrub costs one sequential read of
//! the log per restart, off the start-up path: the node serves while it runs.

use std::cell::OnceCell;
use std::rc::{Rc, Weak};

use glommio::{Latency, Shares, TaskQueueHandle};
use keel_storage::{log, StorageError};

use super::partition::Partition;
use super::Shard;

/// Bytes read (and checked) at a time; each step is an await apart.
const SCRUB_STEP_BYTES: usize = 1 << 20;
/// Shares of the scrub queue; the default queue, where requests run, has 1000.
const SCRUB_SHARES: usize = 20;

thread_local! {
    static QUEUE: OnceCell<TaskQueueHandle> = const { OnceCell::new() };
}

/// Scrubs `partitions` (just opened, replicated) one after the other.
pub fn spawn(shard: &Rc<Shard>, partitions: Vec<Rc<Partition>>) {
    if partitions.is_empty() {
        return;
    }
    let queue = QUEUE.with(|q| {
        *q.get_or_init(|| {
            glommio::executor().create_task_queue(Shares::Static(SCRUB_SHARES), Latency::NotImportant, "scrub")
        })
    });
    let shard = Rc::downgrade(shard);
    if let Err(e) = glommio::spawn_local_into(run(shard, partitions), queue).map(|t| t.detach()) {
        tracing::error!(error = %e, "replica scrub did not start");
    }
}

async fn run(shard: Weak<Shard>, partitions: Vec<Rc<Partition>>) {
    for p in partitions {
        let upto = p.log.borrow().log_end_offset();
        match log::verify(&p.log, upto, SCRUB_STEP_BYTES).await {
            Ok(bytes) => tracing::debug!(topic = %p.topic, partition = p.index, bytes, "replica scrubbed"),
            Err(e @ StorageError::Corrupt { .. }) => {
                let Some(shard) = shard.upgrade() else { return };
                p.set_damaged(&shard, e.to_string());
            }
            // Retention or a truncation moved the log under the scrub: what remains
            // is read again at the next start.
            Err(e) => tracing::info!(topic = %p.topic, partition = p.index, error = %e, "replica scrub stopped"),
        }
    }
}
