//! `GroupStorage`: raft-rs's `Storage` for one group, over the entries the shell has been
//! asked to persist.
//!
//! raft-rs reads its stable log through `Storage`, and requires that a Ready's entries be
//! readable there before `advance_append_async` (raft-rs 0.7 `RawNode::advance_append_async`
//! docs). So the core appends a Ready's entries here in the same call that hands them to the
//! shell to write; durability is the shell's job and is reported back with
//! `MultiRaft::persisted`. This is the in-memory tail of the partition log; the shell
//! rebuilds it from disk at start with [`GroupStorage::restore`].
//!
//! Plain owned data, no `Arc<RwLock>` as raft-rs's `MemStorage` has: one shard owns the
//! group, and nothing else ever reads it.

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

use crate::offset_translator::{batch_offset_count, OffsetTranslator};
use crate::NodeId;

/// The persisted state of one group, as the shell reads it back from disk.
#[derive(Debug, Clone, Default)]
pub struct PersistedGroup {
    pub hard_state: HardState,
    pub conf_state: ConfState,
    /// The entry just before `entries` (committed: the shell reads the log back from
    /// there) and the Kafka offset after it; all zero for a log read from its start.
    pub base: LogBase,
    /// The log from `base.index + 1`, without gaps.
    pub entries: Vec<Entry>,
}

/// Index, term and end offset of the last entry dropped from memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogBase {
    pub index: u64,
    pub term: u64,
    pub offset: u64,
}

/// raft-rs `Storage` over one group's log tail.
#[derive(Debug)]
pub struct GroupStorage {
    hard_state: HardState,
    conf_state: ConfState,
    /// Index and term of the entry before `entries[0]` (0, 0 until compaction exists).
    snapshot_index: u64,
    snapshot_term: u64,
    entries: Vec<Entry>,
    translator: OffsetTranslator,
}

impl GroupStorage {
    /// A new, empty group whose voters are `voters`.
    pub fn new(voters: Vec<NodeId>) -> Self {
        let conf_state = ConfState { voters, ..Default::default() };
        Self::restore(PersistedGroup { conf_state, ..Default::default() })
    }

    /// A group as read back from disk after a restart.
    pub fn restore(persisted: PersistedGroup) -> Self {
        let base = persisted.base;
        let mut storage = Self {
            hard_state: HardState::default(),
            conf_state: persisted.conf_state,
            snapshot_index: base.index,
            snapshot_term: base.term,
            entries: Vec::new(),
            translator: OffsetTranslator::new(base.index + 1, base.offset),
        };
        storage.append(&persisted.entries);
        storage.hard_state = persisted.hard_state;
        assert!(
            storage.hard_state.commit <= storage.last_index_inner(),
            "persisted commit index {} is past the persisted log end {}",
            storage.hard_state.commit,
            storage.last_index_inner()
        );
        storage
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// The stable log (entries handed to the shell to persist, whether or not fsynced yet).
    pub fn log(&self) -> &[Entry] {
        &self.entries
    }

    pub fn translator(&self) -> &OffsetTranslator {
        &self.translator
    }

    /// Index, term and end offset of the last entry no longer held in memory.
    pub fn base(&self) -> LogBase {
        let offset = self.translator.end_offset_of(self.snapshot_index).unwrap_or(0);
        LogBase { index: self.snapshot_index, term: self.snapshot_term, offset }
    }

    /// Drops entries up to `index` from memory (the partition log keeps them on disk).
    /// Only committed entries every voter has are dropped: raft-rs then never asks for
    /// them again while the group's members stay.
    pub(crate) fn compact(&mut self, index: u64) {
        if index <= self.snapshot_index {
            return;
        }
        assert!(index <= self.hard_state.commit, "compacting past the commit index");
        let term = self.entries[(index - self.snapshot_index - 1) as usize].term;
        self.entries.drain(..(index - self.snapshot_index) as usize);
        self.translator.trim_before(index);
        self.snapshot_index = index;
        self.snapshot_term = term;
    }

    pub(crate) fn set_hard_state(&mut self, hard_state: HardState) {
        assert!(hard_state.term >= self.hard_state.term, "terms never go backwards");
        assert!(hard_state.commit >= self.hard_state.commit, "commit never goes backwards");
        self.hard_state = hard_state;
    }

    /// Appends `entries`, first removing any stable entries they conflict with (a deposed
    /// leader's tail that a new leader overwrites).
    pub(crate) fn append(&mut self, entries: &[Entry]) {
        let Some(first) = entries.first() else { return };
        assert!(first.index > self.snapshot_index, "appending below the first index");
        assert!(
            first.index <= self.last_index_inner() + 1,
            "gap in the log: appending {} after {}",
            first.index,
            self.last_index_inner()
        );
        assert!(
            first.index > self.hard_state.commit,
            "committed entry {} overwritten (commit {})",
            first.index,
            self.hard_state.commit
        );
        let keep = (first.index - self.snapshot_index - 1) as usize;
        self.entries.truncate(keep);
        self.translator.truncate_after(first.index - 1);
        for entry in entries {
            assert_eq!(entry.index, self.last_index_inner() + 1, "entries are contiguous");
            self.translator.append(entry.index, offset_count(entry));
            self.entries.push(entry.clone());
        }
    }

    fn last_index_inner(&self) -> u64 {
        self.snapshot_index + self.entries.len() as u64
    }
}

/// Kafka offsets taken by an entry: a data batch takes its span, anything else none.
///
/// A normal entry with data is a Kafka batch: `MultiRaft::propose` checked its header
/// before it entered the log, so a failed parse here means a peer replicated bytes this
/// node's leader would never have accepted. It then takes no offset rather than panicking,
/// so every replica translates it the same way.
pub(crate) fn offset_count(entry: &Entry) -> u32 {
    use raft::eraftpb::EntryType;
    if entry.get_entry_type() != EntryType::EntryNormal || entry.data.is_empty() {
        return 0;
    }
    batch_offset_count(&entry.data).unwrap_or(0)
}

impl raft::Storage for GroupStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState { hard_state: self.hard_state.clone(), conf_state: self.conf_state.clone() })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.snapshot_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        assert!(
            high <= self.last_index_inner() + 1,
            "entries [{low}, {high}) asked past the last index {}",
            self.last_index_inner()
        );
        let from = (low - self.snapshot_index - 1) as usize;
        let to = (high - self.snapshot_index - 1) as usize;
        let mut entries = self.entries[from..to].to_vec();
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        if index == self.snapshot_index {
            return Ok(self.snapshot_term);
        }
        if index < self.snapshot_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if index > self.last_index_inner() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(index - self.snapshot_index - 1) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.snapshot_index + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last_index_inner())
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        // No compaction yet, so a follower can always be caught up from the log.
        Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage;

    fn entry(index: u64, term: u64) -> Entry {
        Entry { index, term, ..Default::default() }
    }

    #[test]
    fn conflicting_tail_is_replaced() {
        let mut storage = GroupStorage::new(vec![1, 2, 3]);
        storage.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        storage.append(&[entry(2, 2)]);
        assert_eq!(storage.last_index(), Ok(2));
        assert_eq!(storage.term(2), Ok(2));
        assert_eq!(storage.term(0), Ok(0));
        assert!(storage.term(3).is_err());
        assert_eq!(storage.translator().last_index(), 2);
        let got = storage.entries(1, 3, None, GetEntriesContext::empty(false));
        assert_eq!(got.map(|entries| entries.len()), Ok(2));
    }

    #[test]
    #[should_panic(expected = "committed entry")]
    fn committed_entries_are_never_overwritten() {
        let mut storage = GroupStorage::new(vec![1]);
        storage.append(&[entry(1, 1), entry(2, 1)]);
        storage.set_hard_state(HardState { term: 1, vote: 1, commit: 2, ..Default::default() });
        storage.append(&[entry(2, 2)]);
    }
}
