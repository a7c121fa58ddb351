//! A group's Raft log on disk: its partition log holds the data entries, and one
//! state-store record per group ([`GroupRecord`]) holds the HardState, the
//! configuration and Raft's own entries (each noting the Kafka offset it precedes).
//! [`EntryReader`] merges the two back into Raft entries, for a restart and for an
//! append to a voter that needs entries no longer in memory.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use bytes::Bytes;
use keel_protocol::batch::BatchHeader;
use keel_raft::{ConfState, Entry, EntryType, FetchRequest, GroupId};
use keel_storage::log::{self, PartitionLog};
use keel_storage::StorageError;
use serde::{Deserialize, Serialize};

use super::shell::Replication;

/// The state-store record of a group: HardState, voters, and Raft's own entries.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct GroupRecord {
    pub(super) term: u64,
    pub(super) vote: u64,
    pub(super) commit: u64,
    pub(super) voters: Vec<u64>,
    pub(super) own: Vec<OwnEntry>,
    /// The last entry dropped from memory (every voter has it durably): a restart
    /// reads the log back from `base.offset`.
    #[serde(default)]
    pub(super) base: (u64, u64, u64),
    /// The highest log start offset committed (DeleteRecords), for a restart; every
    /// replica moves its log start there as the entry commits.
    #[serde(default)]
    pub(super) log_start: i64,
    /// The rest of the configuration (`voters` above): a reassignment's learners and
    /// joint configuration.
    #[serde(default)]
    pub(super) learners: Vec<u64>,
    #[serde(default)]
    pub(super) voters_outgoing: Vec<u64>,
    #[serde(default)]
    pub(super) learners_next: Vec<u64>,
    #[serde(default)]
    pub(super) auto_leave: bool,
    /// The index of the configuration change the configuration ends with.
    #[serde(default)]
    pub(super) conf_index: u64,
    /// A leader's snapshot was being installed: the log holds a partial copy, which a
    /// restart throws away (the leader sends the snapshot again).
    #[serde(default)]
    pub(super) installing: bool,
    /// The rebuild this replica was reset for (`rebuild`; 0: none), so that a restart
    /// in the middle of that rebuild does not reset it again.
    #[serde(default)]
    pub(super) rebuild: u64,
}

impl GroupRecord {
    pub(super) fn conf_state(&self) -> ConfState {
        ConfState {
            voters: self.voters.clone(),
            learners: self.learners.clone(),
            voters_outgoing: self.voters_outgoing.clone(),
            learners_next: self.learners_next.clone(),
            auto_leave: self.auto_leave,
            ..Default::default()
        }
    }

    pub(super) fn set_conf(&mut self, conf: &ConfState, index: u64) {
        self.voters = conf.voters.clone();
        self.learners = conf.learners.clone();
        self.voters_outgoing = conf.voters_outgoing.clone();
        self.learners_next = conf.learners_next.clone();
        self.auto_leave = conf.auto_leave;
        self.conf_index = index;
    }

    /// The index a restart applies from: the recorded commit, or just before the
    /// first committed configuration change the recorded configuration lacks (it is
    /// applied again).
    pub(super) fn restart_applied(&self) -> u64 {
        let pending = self.own.iter().filter(|o| o.kind == EntryType::EntryConfChangeV2 as i32);
        let first = pending.map(|o| o.index).filter(|i| *i > self.conf_index && *i <= self.commit).min();
        first.map_or(self.commit, |i| i - 1)
    }
}

/// An entry of Raft's own (no Kafka offset): where it sits and what it holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct OwnEntry {
    pub(super) index: u64,
    pub(super) term: u64,
    pub(super) kind: i32,
    pub(super) data: Vec<u8>,
    pub(super) context: Vec<u8>,
    /// The Kafka offset of the data entry that follows it.
    pub(super) offset: i64,
}

pub(super) fn record_key(group: GroupId) -> String {
    format!("raft/{group}")
}

pub(super) fn is_data(e: &Entry) -> bool {
    e.get_entry_type() == EntryType::EntryNormal && !e.data.is_empty()
}

impl Replication {
    /// Reads released entries back from the partition log for an append to a slow voter.
    /// A batch that fails its CRC check makes this replica damaged (`on_damaged`): it
    /// must not lead, and the voter it could not serve would wait for it for ever.
    pub(super) async fn read_back(self: Rc<Self>, request: FetchRequest) {
        let entries = match self.reads_back.acquire_permit(1).await {
            Ok(_permit) => self.read_entries(&request).await,
            Err(_) => return,
        };
        let entries = match entries {
            Ok(entries) => entries,
            Err((e, true)) => {
                if let Some(f) = self.on_damaged.borrow().as_ref() {
                    f(request.group, e);
                }
                return;
            }
            Err((e, false)) => {
                tracing::warn!(group = %request.group, low = request.low, error = %e, "cannot read Raft entries back");
                self.read_back_failures.set(self.read_back_failures.get() + 1);
                Vec::new()
            }
        };
        self.entries_read_back.set(self.entries_read_back.get() + entries.len() as u64);
        if let Err(e) = self.multi.borrow_mut().fetched(request.group, request.low, entries) {
            tracing::error!(error = %e, "Raft entries read back do not match the log");
        }
        self.wake.notify();
    }

    /// The entries `request` asks for; on an error, also whether a batch failed its
    /// CRC check.
    async fn read_entries(&self, request: &FetchRequest) -> Result<Vec<Entry>, (String, bool)> {
        let Some(r) = self.replica(request.group) else { return Ok(Vec::new()) };
        let mut reader = EntryReader::new(&r.log, &r.record.borrow(), request.from_index, request.from_offset)
            .map_err(|e| (e, false))?;
        let bytes_max = request.bytes_max.min(1 << 20) as usize;
        let mut out: Vec<Entry> = Vec::new();
        let mut bytes = 0;
        loop {
            let entries = reader.next(bytes_max).await.map_err(|e| (e, reader.met_corruption()))?;
            if entries.is_empty() {
                return Ok(out);
            }
            for e in entries {
                if e.index < request.low {
                    continue;
                }
                if e.index >= request.high || (!out.is_empty() && bytes + e.data.len() > bytes_max) {
                    return Ok(out);
                }
                bytes += e.data.len();
                out.push(e);
            }
        }
    }
}

/// Reads a group's Raft log back from its partition log and record: every batch
/// becomes an entry again (term = its leader epoch), and Raft's own entries from the
/// record go back at their indexes.
pub(super) struct EntryReader {
    log: Rc<RefCell<PartitionLog>>,
    /// Raft's own entries after the start, by index.
    own: VecDeque<OwnEntry>,
    next_index: u64,
    offset: i64,
    end: i64,
    /// A batch read failed its CRC check.
    corrupt: bool,
}

impl EntryReader {
    /// A reader of the entries after `from_index`, whose successor starts at Kafka
    /// offset `from_offset`.
    pub(super) fn new(
        log: &Rc<RefCell<PartitionLog>>,
        record: &GroupRecord,
        from_index: u64,
        from_offset: u64,
    ) -> Result<Self, String> {
        let (start, end) = {
            let l = log.borrow();
            (l.first_kept_offset(), l.log_end_offset())
        };
        let offset = from_offset as i64;
        if start > offset {
            return Err(format!("the log starts at {start}, after the Raft entries wanted from offset {offset}"));
        }
        Ok(Self {
            log: log.clone(),
            own: record.own.iter().filter(|o| o.index > from_index).cloned().collect(),
            next_index: from_index + 1,
            offset,
            end,
            corrupt: false,
        })
    }

    /// The next entries, about `bytes` of batches; none at the end.
    pub(super) async fn next(&mut self, bytes: usize) -> Result<Vec<Entry>, String> {
        let mut entries = Vec::new();
        self.put_own(&mut entries);
        if self.offset < self.end {
            let read = log::read_kept(&self.log, self.offset, bytes, self.end).await.map_err(|e| {
                self.corrupt |= matches!(e, StorageError::Corrupt { .. });
                e.to_string()
            })?;
            if read.batches.is_empty() {
                return Err(format!("nothing read at offset {} below the log end {}", self.offset, self.end));
            }
            for b in read.batches {
                let h = BatchHeader::parse(&b).map_err(|e| e.to_string())?;
                self.put_own(&mut entries);
                let term = u64::try_from(h.partition_leader_epoch).unwrap_or(0);
                entries.push(Entry { index: self.next_index, term, data: b, ..Default::default() });
                self.next_index += 1;
                self.offset = h.last_offset() + 1;
            }
            self.put_own(&mut entries);
        }
        Ok(entries)
    }

    /// Whether the last error was a batch that failed its CRC check (a damaged log).
    pub(super) fn met_corruption(&self) -> bool {
        self.corrupt
    }

    /// Raft's own entries due at the next index, between data entries.
    fn put_own(&mut self, entries: &mut Vec<Entry>) {
        while let Some(o) = self.own.front() {
            if o.index > self.next_index {
                break;
            }
            if o.index == self.next_index {
                let mut e = Entry { index: o.index, term: o.term, ..Default::default() };
                e.set_entry_type(match o.kind {
                    1 => EntryType::EntryConfChange,
                    2 => EntryType::EntryConfChangeV2,
                    _ => EntryType::EntryNormal,
                });
                e.data = Bytes::from(o.data.clone());
                e.context = Bytes::from(o.context.clone());
                entries.push(e);
                self.next_index += 1;
            }
            self.own.pop_front();
        }
    }
}

impl Replication {
    /// Resets this node's replica of `group` for rebuild `id`, durably: its record
    /// keeps only the term and vote, marked as a copy to start over (the log is
    /// emptied when the group starts next, `add_group`) and with the rebuild's id, so
    /// the replica then waits, empty and with no members, for its leader to add it.
    /// Stops the group here if it runs.
    pub async fn reset_for_rebuild(&self, group: GroupId, id: u64) -> Result<(), String> {
        self.stop_group(group);
        let old = self.stored_record(group).unwrap_or_default();
        let record =
            GroupRecord { term: old.term, vote: old.vote, installing: true, rebuild: id, ..Default::default() };
        self.write_record(group, &record).await
    }

    /// The rebuild this node's replica of `group` was last reset for (0: none).
    pub fn reset_for(&self, group: GroupId) -> u64 {
        self.stored_record(group).map_or(0, |r| r.rebuild)
    }
}
