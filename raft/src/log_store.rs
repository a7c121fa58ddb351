//! `GroupStorage`: raft-rs's `Storage` for one group, over the entries the shell has been
//! asked to persist.
//!
//! raft-rs reads its stable log through `Storage`, and requires that a Ready's entries be
//! readable there before `advance_append_async` (raft-rs 0.7 `RawNode::advance_append_async`
//! docs). So the core appends a Ready's entries here in the same call that hands them to the
//! shell to write; durability is the shell's job and is reported back with
//! `MultiRaft::persisted`.
//!
//! **Three ranges of the log.** Up to `snapshot_index`, entries every voter has durably:
//! raft-rs never asks for them again (the partition log keeps them for consumers). Then
//! entries *released* from memory: applied and on disk here, but some voter may still
//! need them. Then the in-memory tail. A group keeps at most its byte budget of applied
//! entries in memory, so a voter that is down for an hour costs its leader disk reads
//! when it comes back, not an hour of batches in memory. Of the released range the
//! storage keeps only each term's first index (term lookups stay synchronous, as raft-rs
//! needs them) and a sparse column of (index, Kafka offset) marks to start reads from.
//!
//! **Reading released entries** uses raft-rs's asynchronous fetch (`Storage::entries`
//! docs): a leader's append that needs them gets `LogTemporarilyUnavailable`, the request
//! goes to the shell as a [`FetchRequest`], the shell reads the batches back from the
//! partition log, and `MultiRaft::fetched` caches them and calls
//! `RawNode::on_entries_fetched`, which sends the append. Only appends fetch: every other
//! read raft-rs makes is of entries after the applied index, which stay in memory.
//!
//! Plain owned data, no `Arc<RwLock>` as raft-rs's `MemStorage` has: one shard owns the
//! group, and nothing else ever reads it. `RefCell`s hold what `Storage::entries(&self)`
//! must record.

use std::cell::RefCell;
use std::collections::VecDeque;

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

use crate::offset_translator::{batch_offset_count, OffsetTranslator};
use crate::{GroupId, NodeId};

/// A released entry gets a read mark at least this often (in entries).
const MARK_EVERY: u64 = 256;
/// Fetched runs of released entries kept for the appends that asked for them.
const CACHED_RUNS_MAX: usize = 4;

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

/// Index, term and end offset of the last entry every voter has (raft-rs's snapshot
/// point): raft-rs never reads the log up to it again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogBase {
    pub index: u64,
    pub term: u64,
    pub offset: u64,
}

/// Released entries of one group for the shell to read back from the partition log:
/// entries `low..high`, fewer once past `bytes_max`, reading from Kafka offset
/// `from_offset`, where the entry after `from_index` starts (a read mark at or before
/// `low`). Answer with `MultiRaft::fetched`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchRequest {
    pub group: GroupId,
    pub low: u64,
    pub high: u64,
    pub bytes_max: u64,
    pub from_index: u64,
    pub from_offset: u64,
}

/// An append raft-rs could not send until released entries from `low` are read back.
#[derive(Debug)]
struct PendingFetch {
    low: u64,
    high: u64,
    bytes_max: u64,
    context: GetEntriesContext,
    handed_out: bool,
}

#[derive(Debug, Default)]
struct Fetches {
    pending: Vec<PendingFetch>,
    /// Runs of entries read back, oldest first.
    cached: VecDeque<Vec<Entry>>,
}

/// raft-rs `Storage` over one group's log (see the module doc for its three ranges).
#[derive(Debug)]
pub struct GroupStorage {
    hard_state: HardState,
    conf_state: ConfState,
    snapshot_index: u64,
    snapshot_term: u64,
    /// The first index of each term in the released range, ascending.
    released_terms: Vec<(u64, u64)>,
    /// `(index, Kafka offset after it)` read marks, ascending; the first is the
    /// snapshot point.
    marks: Vec<(u64, u64)>,
    /// The in-memory tail, from `translator.first_index()`.
    entries: VecDeque<Entry>,
    memory_bytes: u64,
    translator: OffsetTranslator,
    fetches: RefCell<Fetches>,
    /// Index of the last configuration change `conf_state` reflects.
    conf_index: u64,
    /// The last index the shell applied: a snapshot for a new member is taken there.
    applied: u64,
}

/// What a snapshot from a leader says, beyond raft-rs's metadata: where the Kafka
/// log stands at its index, and which configuration change its `ConfState` ends with.
/// The batches below it are not in the message: the receiving shell copies them from
/// the leader's partition log (`replication::install`).
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotInstall {
    pub index: u64,
    pub term: u64,
    /// The Kafka offset after entry `index`.
    pub offset: u64,
    pub conf_state: ConfState,
    pub conf_index: u64,
}

impl SnapshotInstall {
    fn encode_data(offset: u64, conf_index: u64) -> Vec<u8> {
        [offset.to_be_bytes(), conf_index.to_be_bytes()].concat()
    }

    /// Reads a snapshot raft-rs handed over; `None` if its data is not Keel's.
    pub fn decode(snapshot: &Snapshot) -> Option<SnapshotInstall> {
        let data = snapshot.get_data();
        if data.len() != 16 {
            return None;
        }
        let meta = snapshot.get_metadata();
        Some(SnapshotInstall {
            index: meta.index,
            term: meta.term,
            offset: u64::from_be_bytes(data[..8].try_into().ok()?),
            conf_state: meta.get_conf_state().clone(),
            conf_index: u64::from_be_bytes(data[8..].try_into().ok()?),
        })
    }
}

impl GroupStorage {
    /// A new, empty group whose voters are `voters`.
    pub fn new(voters: Vec<NodeId>) -> Self {
        let conf_state = ConfState { voters, ..Default::default() };
        Self::restore(PersistedGroup { conf_state, ..Default::default() })
    }

    /// A group as read back from disk after a restart, its whole log in memory.
    pub fn restore(persisted: PersistedGroup) -> Self {
        let mut storage = Self::restoring(persisted.base, persisted.conf_state);
        storage.append(&persisted.entries);
        storage.finish_restore(persisted.hard_state);
        storage
    }

    /// Starts restoring a group from disk, for logs too long to hold in memory: the log
    /// after `base` follows in pieces with [`Self::append`] (each followed by
    /// [`Self::release_over_budget`] up to the recorded commit index), then its
    /// HardState with [`Self::finish_restore`].
    pub fn restoring(base: LogBase, conf_state: ConfState) -> Self {
        Self::restoring_at(base, conf_state, 0)
    }

    /// As [`Self::restoring`], with the index of the configuration change that
    /// `conf_state` ends with (changes at or below it are not applied again).
    pub fn restoring_at(base: LogBase, conf_state: ConfState, conf_index: u64) -> Self {
        Self {
            hard_state: HardState::default(),
            conf_state,
            snapshot_index: base.index,
            snapshot_term: base.term,
            released_terms: Vec::new(),
            marks: vec![(base.index, base.offset)],
            entries: VecDeque::new(),
            memory_bytes: 0,
            translator: OffsetTranslator::new(base.index + 1, base.offset),
            fetches: RefCell::default(),
            conf_index,
            applied: base.index,
        }
    }

    /// The last step of a restore: the persisted HardState.
    pub fn finish_restore(&mut self, hard_state: HardState) {
        assert!(
            hard_state.commit <= self.last_index_inner(),
            "persisted commit index {} is past the persisted log end {}",
            hard_state.commit,
            self.last_index_inner()
        );
        self.hard_state = hard_state;
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// Index of the last configuration change `conf_state` reflects.
    pub fn conf_index(&self) -> u64 {
        self.conf_index
    }

    /// A configuration change at `index` was applied, giving `conf_state`.
    pub(crate) fn set_conf_state(&mut self, conf_state: ConfState, index: u64) {
        self.conf_state = conf_state;
        self.conf_index = self.conf_index.max(index);
    }

    pub(crate) fn set_applied(&mut self, index: u64) {
        self.applied = self.applied.max(index);
    }

    /// Replaces the whole log by a leader's snapshot: nothing of the old log is kept,
    /// and the log goes on from the snapshot's index (whose batches the shell copies).
    pub(crate) fn apply_snapshot(&mut self, install: &SnapshotInstall) {
        let mut hard_state = self.hard_state.clone();
        hard_state.commit = hard_state.commit.max(install.index);
        let base = LogBase { index: install.index, term: install.term, offset: install.offset };
        *self = Self::restoring_at(base, install.conf_state.clone(), install.conf_index);
        self.hard_state = hard_state;
    }

    /// The in-memory tail of the stable log (entries handed to the shell to persist,
    /// whether or not fsynced yet), from [`Self::memory_first_index`].
    pub fn in_memory(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    /// Index of the first entry held in memory (or of the next one).
    pub fn memory_first_index(&self) -> u64 {
        self.translator.first_index()
    }

    /// Bytes of batches held in memory.
    pub fn memory_bytes(&self) -> u64 {
        self.memory_bytes
    }

    /// Offsets of the in-memory tail.
    pub fn translator(&self) -> &OffsetTranslator {
        &self.translator
    }

    /// raft-rs's snapshot point: what every voter has.
    pub fn base(&self) -> LogBase {
        LogBase { index: self.snapshot_index, term: self.snapshot_term, offset: self.marks[0].1 }
    }

    /// Appends `entries`, first removing any stable entries they conflict with (a deposed
    /// leader's tail that a new leader overwrites).
    pub fn append(&mut self, entries: &[Entry]) {
        let Some(first) = entries.first() else { return };
        assert!(first.index >= self.translator.first_index(), "appending below the in-memory log");
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
        let keep = (first.index - self.translator.first_index()) as usize;
        for dropped in self.entries.drain(keep..) {
            self.memory_bytes -= entry_bytes(&dropped);
        }
        self.translator.truncate_after(first.index - 1);
        for entry in entries {
            assert_eq!(entry.index, self.last_index_inner() + 1, "entries are contiguous");
            self.translator.append(entry.index, offset_count(entry));
            self.memory_bytes += entry_bytes(entry);
            self.entries.push_back(entry.clone());
        }
    }

    /// Drops entries up to `upto` from memory, oldest first, while more than `budget`
    /// bytes are held. The caller passes entries that are applied and durable here
    /// (they are read back from the partition log if a voter needs them).
    pub fn release_over_budget(&mut self, upto: u64, budget: u64) {
        let mut last = None;
        while self.memory_bytes > budget && self.entries.front().is_some_and(|e| e.index <= upto) {
            last = self.release_front();
        }
        if let Some(last) = last {
            self.translator.trim_before(last + 1);
        }
    }

    /// Moves the oldest in-memory entry to the released range; returns its index. The
    /// caller trims the translator after.
    fn release_front(&mut self) -> Option<u64> {
        let entry = self.entries.pop_front()?;
        let end = self.translator.end_offset_of(entry.index).expect("the translator covers memory");
        self.memory_bytes -= entry_bytes(&entry);
        if self.released_terms.last().map(|&(_, term)| term) != Some(entry.term) {
            self.released_terms.push((entry.index, entry.term));
        }
        if entry.index - self.marks.last().map_or(0, |m| m.0) >= MARK_EVERY {
            self.marks.push((entry.index, end));
        }
        Some(entry.index)
    }

    /// Moves raft-rs's snapshot point up to `index`, committed and durable on every
    /// voter: raft-rs never asks for those entries again while the group's members stay.
    /// Inside the released range it stops at the read mark at or before `index`.
    pub(crate) fn compact(&mut self, index: u64) {
        if index <= self.snapshot_index {
            return;
        }
        assert!(index <= self.hard_state.commit, "compacting past the commit index");
        let (index, offset) = if index + 1 >= self.translator.first_index() {
            while self.entries.front().is_some_and(|e| e.index <= index) {
                self.release_front();
            }
            self.translator.trim_before(index + 1);
            (index, self.translator.end_offset_of(index).expect("the entry before memory"))
        } else {
            let mark = self.marks[self.marks.partition_point(|m| m.0 <= index) - 1];
            if mark.0 <= self.snapshot_index {
                return;
            }
            mark
        };
        self.snapshot_term = self.released_term(index);
        self.snapshot_index = index;
        self.marks.retain(|m| m.0 > index);
        self.marks.insert(0, (index, offset));
        if index + 1 >= self.translator.first_index() {
            self.released_terms.clear();
        } else {
            let keep_from = self.released_terms.partition_point(|t| t.0 <= index + 1).saturating_sub(1);
            self.released_terms.drain(..keep_from);
        }
        self.fetches.borrow_mut().cached.retain(|run| run.last().is_some_and(|e| e.index > index));
    }

    pub(crate) fn set_hard_state(&mut self, hard_state: HardState) {
        assert!(hard_state.term >= self.hard_state.term, "terms never go backwards");
        assert!(hard_state.commit >= self.hard_state.commit, "commit never goes backwards");
        self.hard_state = hard_state;
    }

    /// Reads of released entries raft-rs asked for since the last call.
    pub(crate) fn take_fetch_requests(&self, group: GroupId) -> Vec<FetchRequest> {
        let mut fetches = self.fetches.borrow_mut();
        let mut requests = Vec::new();
        for pending in fetches.pending.iter_mut().filter(|p| !p.handed_out) {
            pending.handed_out = true;
            let (from_index, from_offset) = self.marks[self.marks.partition_point(|m| m.0 < pending.low) - 1];
            requests.push(FetchRequest {
                group,
                low: pending.low,
                high: pending.high,
                bytes_max: pending.bytes_max,
                from_index,
                from_offset,
            });
        }
        requests
    }

    /// The shell read back the entries a [`FetchRequest`] from `low` asked for (none if
    /// the read failed): keeps them for the appends waiting, and returns those appends'
    /// contexts for `RawNode::on_entries_fetched`. Entries no longer in the released
    /// range (a compaction passed them meanwhile) are dropped; entries whose index or term
    /// does not match the log as this storage knows it are refused.
    pub(crate) fn fetched(&mut self, low: u64, entries: Vec<Entry>) -> Result<Vec<GetEntriesContext>, String> {
        let waiting: Vec<PendingFetch> = {
            let fetches = self.fetches.get_mut();
            let (waiting, rest) = std::mem::take(&mut fetches.pending).into_iter().partition(|p| p.low == low);
            fetches.pending = rest;
            waiting
        };
        if entries.is_empty() {
            // A failed read: the appends are dropped, and raft-rs asks again later.
            return Ok(Vec::new());
        }
        let memory_first = self.translator.first_index();
        let mut run = Vec::with_capacity(entries.len());
        for (i, entry) in entries.into_iter().enumerate() {
            let index = low + i as u64;
            if entry.index != index {
                return Err(format!("read back entry {} where entry {index} was due", entry.index));
            }
            if index <= self.snapshot_index || index >= memory_first {
                continue;
            }
            let term = self.released_term(index);
            if entry.term != term {
                return Err(format!(
                    "read back entry {index} of term {}, but the log has it in term {term}",
                    entry.term
                ));
            }
            run.push(entry);
        }
        let fetches = self.fetches.get_mut();
        if !run.is_empty() {
            fetches.cached.push_back(run);
            while fetches.cached.len() > CACHED_RUNS_MAX {
                fetches.cached.pop_front();
            }
        }
        Ok(waiting.into_iter().map(|p| p.context).collect())
    }

    /// The term of entry `index` of the released range (or of the snapshot point).
    fn released_term(&self, index: u64) -> u64 {
        if index == self.snapshot_index {
            return self.snapshot_term;
        }
        let at = self.released_terms.partition_point(|&(first, _)| first <= index);
        assert!(at > 0, "entry {index} is not in the released range");
        self.released_terms[at - 1].1
    }

    fn last_index_inner(&self) -> u64 {
        self.translator.first_index() + self.entries.len() as u64 - 1
    }
}

/// Memory an entry holds.
fn entry_bytes(entry: &Entry) -> u64 {
    (entry.data.len() + entry.context.len()) as u64
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
        context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.snapshot_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        assert!(
            high <= self.last_index_inner() + 1,
            "entries [{low}, {high}) asked past the last index {}",
            self.last_index_inner()
        );
        let max_size = max_size.into();
        let memory_first = self.translator.first_index();
        if low >= memory_first {
            let range = (low - memory_first) as usize..(high - memory_first) as usize;
            let mut entries: Vec<Entry> = self.entries.range(range).cloned().collect();
            raft::util::limit_size(&mut entries, max_size);
            return Ok(entries);
        }
        // Released: from a run read back, or ask the shell to read it.
        let high = high.min(memory_first);
        let mut fetches = self.fetches.borrow_mut();
        let run = fetches
            .cached
            .iter()
            .find(|run| run.first().is_some_and(|e| e.index <= low) && run.last().is_some_and(|e| e.index >= low));
        if let Some(run) = run {
            let first = run[0].index;
            let to = ((high - first) as usize).min(run.len());
            let mut entries = run[(low - first) as usize..to].to_vec();
            raft::util::limit_size(&mut entries, max_size);
            return Ok(entries);
        }
        if !context.can_async() {
            // Only appends read below the applied index, and they can wait.
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if !fetches.pending.iter().any(|p| p.low == low) {
            let bytes_max = max_size.unwrap_or(u64::MAX);
            fetches.pending.push(PendingFetch { low, high, bytes_max, context, handed_out: false });
        }
        Err(raft::Error::Store(StorageError::LogTemporarilyUnavailable))
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        if index < self.snapshot_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if index > self.last_index_inner() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let memory_first = self.translator.first_index();
        if index < memory_first {
            return Ok(self.released_term(index));
        }
        Ok(self.entries[(index - memory_first) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.snapshot_index + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last_index_inner())
    }

    /// A member that needs entries below the snapshot point (a new one, added by a
    /// reassignment) gets a snapshot at the applied index: raft-rs's metadata (with the
    /// configuration, which must name the new member) and the Kafka offset there. The
    /// configuration must be the one at that index, so a change applied after it makes
    /// raft-rs ask again later.
    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let index = self.applied;
        let unavailable = Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        if index == 0 || index < self.conf_index || index < request_index || index < self.snapshot_index {
            return unavailable;
        }
        let (Ok(term), Some(offset)) = (raft::Storage::term(self, index), self.translator.end_offset_of(index)) else {
            return unavailable;
        };
        let mut snapshot = Snapshot::default();
        let meta = snapshot.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(self.conf_state.clone());
        snapshot.data = SnapshotInstall::encode_data(offset, self.conf_index).into();
        Ok(snapshot)
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

    fn data_entry(index: u64, term: u64) -> Entry {
        let mut data = vec![0u8; crate::BATCH_HEADER_BYTES];
        data[16] = 2;
        Entry { index, term, data: data.into(), ..Default::default() }
    }

    #[test]
    fn released_entries_are_read_back_through_a_fetch() {
        let group = GroupId { topic: 1, partition: 0 };
        let mut storage = GroupStorage::new(vec![1, 2]);
        let entries: Vec<Entry> = (1..=600).map(|i| data_entry(i, if i <= 300 { 1 } else { 2 })).collect();
        storage.append(&entries);
        storage.set_hard_state(HardState { term: 2, vote: 1, commit: 598, ..Default::default() });
        storage.release_over_budget(590, 0);
        assert_eq!(storage.memory_first_index(), 591);
        assert_eq!(storage.term(300), Ok(1));
        assert_eq!(storage.term(301), Ok(2));
        assert_eq!(storage.term(600), Ok(2));
        // Only appends may wait for a read.
        let sync = storage.entries(10, 20, None, GetEntriesContext::empty(false));
        assert_eq!(sync, Err(raft::Error::Store(StorageError::Compacted)));
        let wait = storage.entries(270, 600, None, GetEntriesContext::empty(true));
        assert_eq!(wait, Err(raft::Error::Store(StorageError::LogTemporarilyUnavailable)));
        let requests = storage.take_fetch_requests(group);
        assert_eq!(requests.len(), 1);
        let request = requests[0];
        assert_eq!((request.low, request.high), (270, 591));
        assert_eq!((request.from_index, request.from_offset), (256, 256), "the read starts at a mark");
        assert!(storage.take_fetch_requests(group).is_empty(), "handed out once");
        let mut wrong = entries[269..280].to_vec();
        wrong[5].term = 7;
        assert!(storage.fetched(270, wrong).is_err(), "a term the log does not have is refused");
        let _ = storage.entries(270, 600, None, GetEntriesContext::empty(true));
        let _ = storage.take_fetch_requests(group);
        let contexts = storage.fetched(270, entries[269..280].to_vec()).expect("matching entries");
        assert_eq!(contexts.len(), 1);
        let got = storage.entries(270, 600, None, GetEntriesContext::empty(true)).expect("cached");
        assert_eq!(got.iter().map(|e| e.index).collect::<Vec<_>>(), (270..=280).collect::<Vec<_>>());
        // Every voter has up to 400: the snapshot point stops at the mark before it.
        storage.compact(400);
        assert_eq!(storage.base(), LogBase { index: 256, term: 1, offset: 256 });
        assert_eq!(storage.term(300), Ok(1));
        assert_eq!(
            storage.entries(200, 210, None, GetEntriesContext::empty(true)),
            Err(raft::Error::Store(StorageError::Compacted))
        );
        storage.compact(595);
        assert_eq!(storage.base(), LogBase { index: 595, term: 2, offset: 595 });
        assert_eq!(storage.memory_first_index(), 596);
    }
}
