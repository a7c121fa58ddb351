//! Starting a group on a shard, or restarting it from its log and record (the
//! module doc of [`super`] says how).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use keel_raft::{GroupId, GroupStorage, HardState, LogBase, NodeId};
use keel_storage::log::{self, PartitionLog};

use super::hard_state_term;

use super::log_start_of;

use super::ReadRounds;

use super::Replica;

use super::ReplicaHooks;

use super::Replication;
use crate::replication::raft_log::{record_key, EntryReader, GroupRecord};

/// Bytes of batches read per step of a restart.
const RESTORE_READ_BYTES: usize = 1 << 20;

impl Replication {
    /// Starts (or restarts from disk) group `group` over `log`. A new group's first
    /// voter campaigns at once instead of waiting for an election timeout. A log whose
    /// read-back meets a batch that fails its CRC, or that lost records at open
    /// (`PartitionLog::damaged_at_open`), is damaged: the replica is returned with why,
    /// and not started (it neither votes nor leads, `cluster::rebuild`).
    pub async fn add_group(
        &self,
        group: GroupId,
        log: Rc<RefCell<PartitionLog>>,
        voters: Vec<NodeId>,
        hooks: ReplicaHooks,
    ) -> Result<(Rc<Replica>, Option<String>), String> {
        let ReplicaHooks { on_append, on_commit, on_truncate, on_log_start } = hooks;
        if let Some(r) = self.replica(group) {
            return Ok((r, None));
        }
        log.borrow_mut().set_replicated();
        let stored = self.stored_record(group);
        let fresh = stored.is_none() && log.borrow().log_end_offset() == 0;
        let mut record = stored.unwrap_or_else(|| GroupRecord { voters: voters.clone(), ..Default::default() });
        if record.installing {
            // A copy of a leader's log stopped half-way: start empty again, keeping
            // only the term and vote; the leader sends its snapshot again.
            tracing::warn!(%group, "a snapshot's copy was interrupted; starting the replica empty");
            log::reset(&log, 0).await.map_err(|e| format!("group {group}: {e}"))?;
            if let Some(f) = &on_truncate {
                f(0);
            }
            record =
                GroupRecord { term: record.term, vote: record.vote, rebuild: record.rebuild, ..Default::default() };
        }
        if record.voters.is_empty() && record.learners.is_empty() {
            record.voters = voters.clone();
        }
        let base = LogBase { index: record.base.0, term: record.base.1, offset: record.base.2 };
        // A copied log may end in a gap (compacted away) before the snapshot's offset.
        log.borrow_mut().skip_to(base.offset as i64);
        let mut storage = GroupStorage::restoring_at(base, record.conf_state(), record.conf_index);
        let applied_at_restart = record.restart_applied().max(base.index);
        // The metadata group keeps its (small) log in memory: every node installs its
        // committed records again at start.
        let budget = if on_commit.is_some() { u64::MAX } else { self.log_memory_bytes };
        // Records lost below what a checkpoint made durable (a segment cut short).
        let mut damaged = log.borrow().damaged_at_open.clone();
        if damaged.is_none() {
            let mut reader =
                EntryReader::new(&log, &record, base.index, base.offset).map_err(|e| format!("group {group}: {e}"))?;
            loop {
                let entries = match reader.next(RESTORE_READ_BYTES).await {
                    Ok(entries) => entries,
                    Err(e) if reader.met_corruption() => {
                        damaged = Some(e);
                        break;
                    }
                    Err(e) => return Err(format!("group {group}: {e}")),
                };
                if entries.is_empty() {
                    break;
                }
                storage.append(&entries);
                storage.release_over_budget(applied_at_restart.min(record.commit), budget);
            }
        }
        let last_index = storage.translator().last_index();
        // Own entries past the log read back were written with data that never reached
        // the disk (so never reported durable). Left in the record, they would take
        // the indexes of the entries written next; they go, durably before the next
        // data entry (`write_entries`).
        let own_before = record.own.len();
        record.own.retain(|o| o.index <= last_index);
        let own_dropped = record.own.len() != own_before;
        // Entries below the base are committed; the commit index is saved lazily.
        record.commit = record.commit.clamp(base.index, last_index);
        let hard_state =
            HardState { term: record.term, vote: record.vote, commit: record.commit, ..Default::default() };
        storage.finish_restore(hard_state);
        let committed_end = storage.translator().end_offset_of(record.commit).unwrap_or(0);
        log.borrow_mut().restart_high_watermark(committed_end as i64);
        if on_commit.is_none() {
            log.borrow_mut().set_replicas_have(base.offset as i64);
        }
        // A log start committed but not yet in the record when the node stopped.
        let committed_starts = record.own.iter().filter(|o| o.index <= record.commit);
        let log_start = committed_starts.filter_map(|o| log_start_of(&o.context)).fold(record.log_start, i64::max);
        if let Some(f) = on_log_start.as_ref().filter(|_| log_start > 0) {
            f(log_start);
        }
        // Committed entries are applied again after a restart only where applying
        // means more than the high watermark (the metadata group's), or the
        // configuration the record has not caught up with.
        let applied = if on_commit.is_some() { 0 } else { applied_at_restart.min(record.commit) };
        let replica = Rc::new(Replica {
            group,
            log,
            written_index: Cell::new(last_index),
            record: RefCell::new(record),
            leader: Cell::new(None),
            term: Cell::new(hard_state_term(&storage)),
            everyone_has: Cell::new(base.index),
            recorded_base: Cell::new(base.index),
            on_append,
            on_commit,
            on_truncate,
            on_log_start,
            deferring: Cell::new(false),
            deferred: RefCell::new(Vec::new()),
            record_due: Cell::new(own_dropped),
            reads: RefCell::new(ReadRounds::default()),
        });
        if damaged.is_some() {
            return Ok((replica, damaged));
        }
        {
            let mut multi = self.multi.borrow_mut();
            multi.create_group(group, storage, applied).map_err(|e| e.to_string())?;
            if fresh && voters.first() == Some(&self.node) {
                let _ = multi.campaign(group);
            }
        }
        self.replicas.borrow_mut().insert(group, replica.clone());
        self.wake.notify();
        Ok((replica, None))
    }

    /// `group`'s record as this node last wrote it durably.
    pub(in crate::replication) fn stored_record(&self, group: GroupId) -> Option<GroupRecord> {
        self.kv.get(&record_key(group)).and_then(|v| serde_json::from_slice::<GroupRecord>(&v).ok())
    }
}
