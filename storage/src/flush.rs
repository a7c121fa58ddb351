//! The shard's flush loop: group commit for every partition the shard owns.
//!
//! Appends mark their log dirty and wake the loop. One pass takes every dirty log and
//! makes what was appended durable, then advances the logs' flushed offsets. While a
//! pass runs, new appends accumulate and go in the next pass, so the fsync rate follows
//! the device's latency, not the number of requests.
//!
//! With a journal (a broker shard), a pass is one journal write and one fdatasync
//! whatever the number of dirty logs; a second task then writes the logs' segment
//! files in whole pages, and a third runs checkpoints ([`crate::journal`]), each
//! followed by the snapshots of the logs that changed ([`crate::log::snapshot`]). Without
//! one (tools and storage tests), a pass writes and fdatasyncs each dirty log's files
//! concurrently.

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use glommio::sync::StaticPermit;

use crate::cache::ShardCache;
use crate::disk;
use crate::join::join_all;
use crate::journal::{Journal, Mark, Position, Record};
use crate::log::snapshot::{self, Captured, Coords};
use crate::log::{self, PartitionLog};
use crate::signal::Signal;

type Log = Rc<RefCell<PartitionLog>>;
type SegmentFile = (Rc<crate::disk::File>, PathBuf);

/// Logs written, or files fsynced, at once by a checkpoint.
const CHECKPOINT_CONCURRENCY: usize = 64;
/// A data directory with this many files for a checkpoint to fsync gets one `syncfs`.
const SYNC_FILE_SYSTEM_FILES_MIN: usize = 64;
/// Logs whose segment files one task writes at once.
const WRITES_CONCURRENCY: usize = 64;

#[derive(Default)]
pub struct FlushQueue {
    dirty: RefCell<Vec<Log>>,
    wake: Rc<Signal>,
    journal: Option<Rc<Journal>>,
    /// Journaled logs with segment bytes to write.
    to_write: RefCell<Vec<Log>>,
    write_wake: Rc<Signal>,
    /// Every journaled log, for checkpoints.
    logs: RefCell<Vec<Weak<RefCell<PartitionLog>>>>,
    checkpoint_running: Cell<bool>,
    /// Set by [`FlushQueue::stop`]: the loops end.
    stopped: Cell<bool>,
    /// The shard's batch-cache budget, enforced after every pass.
    cache: Option<Rc<ShardCache>>,
    /// Completed passes and their fdatasync count, for metrics.
    pub passes: std::cell::Cell<u64>,
    pub syncs: std::cell::Cell<u64>,
    /// How long passes took: what every acks=-1 produce waits for.
    pub pass_times: RefCell<PassTimes>,
    last_checkpoint: Cell<Option<Duration>>,
    /// The journal file the last checkpoint started.
    last_rolled_to: Cell<u64>,
    /// Bytes appended to the shard's logs and not yet written to their files: exact
    /// after each pass and each round of segment writes, plus what was appended since.
    unflushed: Cell<usize>,
    /// Notified after each pass and each round of segment writes.
    progress: Rc<Signal>,
    /// Told of every I/O error of a pass, a segment write or a checkpoint, with the
    /// log it happened on (none for the journal), so the owner can take a failed
    /// directory offline.
    on_io_error: RefCell<Option<IoErrorHook>>,
    /// Logs [`FlushQueue::forget`] took out: never scheduled again.
    forgotten: RefCell<Vec<Weak<RefCell<PartitionLog>>>>,
    /// Told of every completed pass (metrics).
    on_pass: RefCell<Option<PassHook>>,
}

/// What one group-commit pass did, for [`FlushQueue::on_pass`].
#[derive(Debug, Clone, Copy)]
pub struct PassReport {
    /// Dirty logs the pass made durable (the group commit's size).
    pub logs: usize,
    /// Bytes the pass wrote to the journal (0 without one).
    pub bytes: u64,
    pub duration: Duration,
}

/// See [`FlushQueue::on_pass`].
pub type PassHook = Box<dyn Fn(PassReport)>;

/// See [`FlushQueue::on_io_error`].
pub type IoErrorHook = Box<dyn Fn(Option<&Log>, &crate::StorageError)>;

/// Upper bounds of the pass-time buckets, in seconds.
pub const PASS_TIME_BOUNDS: [f64; 10] = [0.000_25, 0.000_5, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.25];

/// A histogram of flush pass durations (Prometheus style: cumulative at render).
#[derive(Debug, Clone, Default)]
pub struct PassTimes {
    /// Passes per bucket of [`PASS_TIME_BOUNDS`], and past the last bound.
    pub counts: [u64; PASS_TIME_BOUNDS.len() + 1],
    pub sum_seconds: f64,
}

impl PassTimes {
    fn record(&mut self, seconds: f64) {
        let i = PASS_TIME_BOUNDS.iter().position(|b| seconds <= *b).unwrap_or(PASS_TIME_BOUNDS.len());
        self.counts[i] += 1;
        self.sum_seconds += seconds;
    }
}

impl FlushQueue {
    pub fn new() -> Rc<FlushQueue> {
        Rc::new(FlushQueue::default())
    }

    /// A flush loop that also keeps the shard's batch caches within `cache`.
    pub fn with_cache(cache: Rc<ShardCache>) -> Rc<FlushQueue> {
        Rc::new(FlushQueue { cache: Some(cache), ..FlushQueue::default() })
    }

    /// A flush loop that makes appends durable through `journal`; every log it flushes
    /// must be opened with [`PartitionLog::open_journaled`] on that journal and
    /// [`FlushQueue::register`]ed.
    pub fn with_journal(cache: Option<Rc<ShardCache>>, journal: Rc<Journal>) -> Rc<FlushQueue> {
        Rc::new(FlushQueue { cache, journal: Some(journal), ..FlushQueue::default() })
    }

    pub fn journal(&self) -> Option<&Rc<Journal>> {
        self.journal.as_ref()
    }

    /// Calls `hook` with every I/O error the loop meets from now on.
    pub fn on_io_error(&self, hook: IoErrorHook) {
        *self.on_io_error.borrow_mut() = Some(hook);
    }

    /// Calls `hook` after every pass from now on (it must be quick: it runs on the
    /// flush loop, between passes).
    pub fn on_pass(&self, hook: PassHook) {
        *self.on_pass.borrow_mut() = Some(hook);
    }

    fn report(&self, log: Option<&Log>, e: &crate::StorageError) {
        if let Some(hook) = self.on_io_error.borrow().as_ref() {
            hook(log, e);
        }
    }

    /// Stops flushing, writing and checkpointing `log` (its directory failed): its
    /// records already in the journal are retired by the next checkpoint like
    /// everyone's, and what only memory held is not written anywhere.
    pub fn forget(&self, log: &Log) {
        self.dirty.borrow_mut().retain(|l| !Rc::ptr_eq(l, log));
        self.to_write.borrow_mut().retain(|l| !Rc::ptr_eq(l, log));
        self.logs.borrow_mut().retain(|w| w.upgrade().is_some_and(|l| !Rc::ptr_eq(&l, log)));
        let mut forgotten = self.forgotten.borrow_mut();
        forgotten.retain(|w| w.strong_count() > 0);
        forgotten.push(Rc::downgrade(log));
    }

    fn is_forgotten(&self, log: &Log) -> bool {
        self.forgotten.borrow().iter().any(|w| w.upgrade().is_some_and(|l| Rc::ptr_eq(&l, log)))
    }

    /// Adds a journaled log to those every checkpoint covers.
    pub fn register(&self, log: &Log) {
        assert!(log.borrow().journal.is_some(), "only journaled logs are checkpointed");
        let mut logs = self.logs.borrow_mut();
        logs.retain(|w| w.strong_count() > 0);
        logs.push(Rc::downgrade(log));
    }

    /// Schedules `log`, which was just appended to, for the next pass.
    pub fn appended(&self, log: &Rc<RefCell<PartitionLog>>) {
        self.account(log);
        self.mark_dirty(log);
    }

    /// Bytes appended to this shard's logs and not yet written to their files, as of
    /// each log's last append, pass, segment write or checkpoint.
    pub fn unflushed_bytes(&self) -> usize {
        self.unflushed.get()
    }

    /// Resolves after the next pass, round of segment writes or checkpoint: when
    /// [`FlushQueue::unflushed_bytes`] may have gone down.
    pub fn progress(&self) -> crate::signal::SignalWait {
        self.progress.wait()
    }

    /// Brings the shard's unflushed count up to date with `log`'s.
    fn account(&self, log: &Log) {
        let l = log.borrow();
        let now = l.unflushed_bytes();
        let before = l.unflushed_accounted.replace(now);
        self.unflushed.set((self.unflushed.get() + now).saturating_sub(before));
    }

    /// Recounts from every registered log, so bytes dropped without a write
    /// (truncation, deleted segments and logs) leave the count.
    fn recount_unflushed(&self) {
        let total = self
            .logs
            .borrow()
            .iter()
            .filter_map(Weak::upgrade)
            .map(|log| {
                let l = log.borrow();
                let now = l.unflushed_bytes();
                l.unflushed_accounted.set(now);
                now
            })
            .sum();
        self.unflushed.set(total);
        self.progress.notify();
    }

    /// Schedules `log` for the next pass.
    pub fn mark_dirty(&self, log: &Rc<RefCell<PartitionLog>>) {
        if self.is_forgotten(log) {
            return;
        }
        if !log.borrow().queued_for_pass.replace(true) {
            self.dirty.borrow_mut().push(log.clone());
        }
        self.wake.notify();
    }

    /// Runs passes until [`FlushQueue::stop`]; spawn it once per shard.
    pub async fn run(self: Rc<Self>) {
        if self.journal.is_some() {
            glommio::spawn_local(self.clone().write_segments()).detach();
            glommio::spawn_local(self.clone().checkpoint_timer()).detach();
        }
        while !self.stopped.get() {
            let wait = self.wake.wait();
            let batch = self.dirty.take();
            for log in &batch {
                log.borrow().queued_for_pass.set(false);
            }
            if batch.is_empty() {
                wait.await;
                continue;
            }
            let started = Instant::now();
            let logs = batch.len();
            let bytes_before = self.journal.as_ref().map_or(0, |j| j.bytes_written.get());
            match &self.journal {
                Some(journal) => self.journal_pass(journal, batch).await,
                None => self.direct_pass(batch).await,
            }
            let duration = started.elapsed();
            self.pass_times.borrow_mut().record(duration.as_secs_f64());
            if let Some(hook) = self.on_pass.borrow().as_ref() {
                let bytes = self.journal.as_ref().map_or(0, |j| j.bytes_written.get()) - bytes_before;
                hook(PassReport { logs, bytes, duration });
            }
            if let Some(cache) = &self.cache {
                cache.evict();
            }
            self.progress.notify();
            self.passes.set(self.passes.get() + 1);
        }
    }

    /// Writes and fdatasyncs every log's own files.
    async fn direct_pass(&self, batch: Vec<Log>) {
        let count = batch.len() as u64;
        let passes: Vec<_> = batch
            .into_iter()
            .map(|l| async move {
                let flushed = log::flush(&l).await;
                self.account(&l);
                if let Err(e) = flushed {
                    tracing::error!(error = %e, "flush failed; will retry");
                    disk::sleep(Duration::from_millis(100)).await;
                    Err(l)
                } else {
                    Ok(())
                }
            })
            .collect();
        for r in join_all(passes).await {
            if let Err(l) = r {
                self.mark_dirty(&l);
            }
        }
        self.syncs.set(self.syncs.get() + count);
    }

    /// One journal write and one fdatasync for every dirty log.
    async fn journal_pass(self: &Rc<Self>, journal: &Rc<Journal>, batch: Vec<Log>) {
        while !self.stopped.get() && journal.recovered() && journal.live_files() >= journal.config.live_files_max {
            let done = journal.checkpoint_ended.wait();
            self.start_checkpoint();
            done.await;
        }
        let mut records = Vec::with_capacity(batch.len());
        let mut taken = Vec::with_capacity(batch.len());
        for log in &batch {
            let mut l = log.borrow_mut();
            let l = &mut *l;
            let j = l.journal.as_mut().expect("a journaled shard's logs are journaled");
            let (create, truncate) = (std::mem::take(&mut j.pending_create), j.pending_truncate.take());
            if create {
                records.push(Record::Create { key: j.key.clone() });
            }
            if let Some(offset) = truncate {
                records.push(Record::Truncate { key: j.key.clone(), offset });
            }
            let from = l.cache.partition_point(|(h, _)| h.base_offset < j.journaled_offset);
            let first = l.cache.range(from..).next().map(|(h, _)| h.base_offset);
            let batches: Vec<Bytes> = l.cache.range(from..).map(|(_, b)| b.clone()).collect();
            // (first offset, index of the log's record in the pass)
            let data = first.map(|offset| (offset, records.len()));
            if !batches.is_empty() {
                records.push(Record::Data { key: j.key.clone(), batches });
            }
            j.in_pass = true;
            taken.push((l.next_offset, l.truncations, create, truncate, data));
        }
        let written = if records.is_empty() { Ok(Position::default()) } else { journal.write(&records).await };
        self.syncs.set(self.syncs.get() + u64::from(!records.is_empty()));
        for log in &batch {
            log.borrow_mut().journal.as_mut().expect("journaled").in_pass = false;
        }
        match written {
            Ok(first) => {
                // Where each record went: back to back from the first.
                let mut positions = Vec::with_capacity(records.len());
                let mut at = first;
                for r in &records {
                    positions.push(at);
                    at.offset += r.encoded_len() as u64;
                }
                for (log, (target, truncations, _, _, data)) in batch.iter().zip(taken) {
                    let mut l = log.borrow_mut();
                    if l.truncations != truncations {
                        // Truncated while the pass ran: what follows the cut goes next.
                        drop(l);
                        self.mark_dirty(log);
                        continue;
                    }
                    let j = l.journal.as_mut().expect("journaled");
                    j.journaled_offset = target;
                    if let Some((offset, i)) = data {
                        j.records.push_back((offset, positions[i]));
                    }
                    if target > l.durable_offset {
                        l.mark_flushed(target);
                    }
                }
                self.to_write.borrow_mut().extend(batch.into_iter().filter(|l| !self.is_forgotten(l)));
                self.write_wake.notify();
                if journal.bytes_since_checkpoint() >= journal.config.file_bytes {
                    self.start_checkpoint();
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "journal write failed; will retry");
                self.report(None, &e);
                for (log, (_, _, create, truncate, _)) in batch.iter().zip(taken) {
                    let mut l = log.borrow_mut();
                    l.flush_error = Some(e.to_string());
                    let j = l.journal.as_mut().expect("journaled");
                    j.pending_create |= create;
                    j.pending_truncate = match (j.pending_truncate, truncate) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    l.changed.notify();
                }
                disk::sleep(Duration::from_millis(100)).await;
                for log in &batch {
                    self.mark_dirty(log);
                }
            }
        }
    }

    /// Writes the journaled logs' segment files in whole pages, off the
    /// acknowledgement path.
    async fn write_segments(self: Rc<Self>) {
        while !self.stopped.get() {
            let wait = self.write_wake.wait();
            let mut logs = self.to_write.take();
            if logs.is_empty() {
                wait.await;
                continue;
            }
            // By directory, not by address: the order of the writes must not depend on
            // where the allocator put the logs, or a simulated seed would not replay.
            logs.sort_by(|a, b| a.borrow().dir.cmp(&b.borrow().dir));
            logs.dedup_by(|a, b| Rc::ptr_eq(a, b));
            let mut failed = false;
            // In chunks: one task awaiting a thousand writes at once overflows glommio's
            // count of wakers per task (a panic inside glommio).
            for chunk in logs.chunks(WRITES_CONCURRENCY) {
                let writes = chunk.iter().map(|l| async move { (l, log::write_whole_pages(l).await) }).collect();
                for (l, result) in join_all(writes).await {
                    self.account(l);
                    if let Err(e) = result {
                        tracing::warn!(error = %e, "segment write failed; will retry");
                        self.to_write.borrow_mut().push(l.clone());
                        self.report(Some(l), &e);
                        failed = true;
                    }
                }
            }
            self.progress.notify();
            if failed {
                disk::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Starts a checkpoint at least every `checkpoint_interval` while the journal
    /// took records since the last one.
    async fn checkpoint_timer(self: Rc<Self>) {
        let journal = self.journal.clone().expect("journaled");
        while !self.stopped.get() {
            let wanted = journal.checkpoint_wanted.wait();
            let tick = async {
                disk::sleep(journal.config.checkpoint_interval.min(Duration::from_secs(1))).await;
                false
            };
            let asked = futures_lite::future::or(
                async {
                    wanted.await;
                    true
                },
                tick,
            )
            .await;
            let due = self.last_checkpoint.get().is_none_or(|t| disk::now() - t >= journal.config.checkpoint_interval);
            if (due || asked) && !self.stopped.get() && journal.bytes_since_checkpoint() > 0 {
                self.start_checkpoint();
            } else if asked {
                // Nothing journaled since the last checkpoint: its marks stand.
                journal.checkpoint_ended.notify();
            }
        }
    }

    /// Ends the loops once they wake (the checkpoint timer's at its next tick) and
    /// wakes whatever waits on a log: a simulated shard's life ends with it, so that
    /// nothing of it waits forever. Writes to the state store then fail.
    pub fn stop(&self) {
        self.stopped.set(true);
        // Logs hold the state store, which holds this queue: the lists would keep
        // them all alive.
        self.dirty.take();
        self.to_write.take();
        self.wake.notify();
        self.write_wake.notify();
        if let Some(journal) = &self.journal {
            journal.checkpoint_ended.notify();
        }
        for log in self.logs.borrow().iter().filter_map(Weak::upgrade) {
            log.borrow().changed.notify();
        }
    }

    pub fn stopped(&self) -> bool {
        self.stopped.get()
    }

    /// Runs a checkpoint in the background unless one is running, or recovery is not
    /// finished (a checkpoint would retire records of logs not opened yet).
    pub fn start_checkpoint(self: &Rc<Self>) {
        if !self.journal.as_ref().is_some_and(|j| j.recovered()) || self.checkpoint_running.replace(true) {
            return;
        }
        let this = self.clone();
        glommio::spawn_local(async move {
            let captured = match this.checkpoint_marks().await {
                Ok(captured) => captured,
                Err(e) => {
                    tracing::error!(error = %e, "journal checkpoint failed; will retry");
                    disk::sleep(Duration::from_millis(500)).await;
                    Vec::new()
                }
            };
            this.last_checkpoint.set(Some(disk::now()));
            this.checkpoint_running.set(false);
            if let Some(journal) = &this.journal {
                journal.checkpoint_ended.notify();
            }
            // After the checkpoint is done: the store's writes need journal passes,
            // and a pass may wait for a running checkpoint.
            if let Err(e) = snapshot::write(captured).await {
                tracing::warn!(error = %e, "writing checkpoint snapshots failed; a crash now scans those logs");
            }
        })
        .detach();
    }

    /// Fsyncs every journaled log's segment files and records where each stands, so
    /// the journal files before this checkpoint can go; then writes the snapshots of
    /// the logs that changed since their last one ([`crate::log::snapshot`]).
    pub async fn checkpoint(&self) -> Result<(), crate::StorageError> {
        let captured = self.checkpoint_marks().await?;
        snapshot::write(captured).await
    }

    /// The checkpoint proper; returns the snapshots to write once it is durable.
    async fn checkpoint_marks(&self) -> Result<Vec<(Log, Captured)>, crate::StorageError> {
        let journal = self.journal.clone().expect("checkpoints need a journal");
        let rolled_to = journal.roll_for_checkpoint().await?;
        // A log may leave its tail to the journal when the tail's records came after
        // the previous checkpoint started: a log that wrote no whole page for a whole
        // checkpoint interval is written out instead, so the journal keeps at most one
        // interval more than the checkpoint needs; and none while that would bring
        // the live files near the count at which passes wait for a checkpoint.
        let previous = self.last_rolled_to.replace(rolled_to);
        let room = journal.live_files_from(previous) + 2 <= journal.config.live_files_max;
        let keep_from = if room { previous } else { rolled_to };
        let logs: Vec<Log> = {
            let mut logs = self.logs.borrow_mut();
            logs.retain(|w| w.strong_count() > 0);
            logs.iter().filter_map(Weak::upgrade).collect()
        };
        // Every log's files are written first, each log's io lock held until they are
        // fsynced, so that one sync can take all of them.
        let mut taken = Vec::with_capacity(logs.len());
        if let Err(e) = self.write_and_sync(&journal, &logs, keep_from, &mut taken).await {
            // Files written since their log's last checkpoint must stay on the list,
            // or the next checkpoint would mark them durable without an fsync.
            for t in taken {
                if let Some(j) = t.log.borrow_mut().journal.as_mut() {
                    j.keep_unsynced(t.written.files);
                }
            }
            return Err(e);
        }
        let mut marks = Vec::with_capacity(taken.len());
        // Per log: the base of its mark's segment, and its truncations before the mark.
        let mut bases = Vec::with_capacity(taken.len());
        let mut captured = Vec::new();
        let replay_from = taken.iter().map(|t| t.mark.replay_start().seq).fold(rolled_to, u64::min);
        for t in taken {
            log::note_synced(&t.log, &t.written);
            bases.push((t.log.clone(), t.mark.segment_base, t.truncations));
            marks.push((t.key, t.mark));
            captured.extend(t.written.captured.map(|c| (t.log.clone(), c)));
        }
        self.recount_unflushed();
        journal.finish_checkpoint(replay_from, marks).await?;
        // The marks are what recovery starts from now. A log truncated since its mark
        // was taken keeps the lower base the truncation gave it.
        for (log, base, truncations) in bases {
            let mut l = log.borrow_mut();
            l.checkpointed_base = if l.truncations == truncations { base } else { l.checkpointed_base.min(base) };
        }
        Ok(captured)
    }

    /// Writes every log's files for a checkpoint into `taken`, then fsyncs them.
    async fn write_and_sync(
        &self,
        journal: &Journal,
        logs: &[Log],
        keep_from: u64,
        taken: &mut Vec<Taken>,
    ) -> Result<(), crate::StorageError> {
        for chunk in logs.chunks(CHECKPOINT_CONCURRENCY) {
            let writes = chunk.iter().map(|log| write_log(journal, log, keep_from)).collect();
            let mut failed = None;
            for (log, written) in chunk.iter().zip(join_all(writes).await) {
                match written {
                    Ok(t) => taken.push(t),
                    Err(e) => {
                        self.report(Some(log), &e);
                        failed = failed.or(Some(e));
                    }
                }
            }
            if let Some(e) = failed {
                return Err(e);
            }
            glommio::yield_if_needed().await;
        }
        self.sync_taken(taken).await
    }

    /// Fsyncs the files a checkpoint wrote. Where a data directory has many, one
    /// `syncfs` takes them all ([`disk::sync_file_system`]): an fdatasync of each
    /// would cost a device flush per file (a file-system journal commit too when the
    /// file grew), thousands per checkpoint at thousands of partitions.
    async fn sync_taken(&self, taken: &[Taken]) -> Result<(), crate::StorageError> {
        // Per data directory: (index in `taken`, file).
        let mut by_dir: Vec<(PathBuf, Vec<(usize, &SegmentFile)>)> = Vec::new();
        for (i, t) in taken.iter().enumerate() {
            let dir = t.log.borrow().dir.parent().map(|d| d.to_path_buf()).unwrap_or_default();
            let at = match by_dir.iter().position(|(d, _)| *d == dir) {
                Some(at) => at,
                None => {
                    by_dir.push((dir, Vec::new()));
                    by_dir.len() - 1
                }
            };
            by_dir[at].1.extend(t.written.files.iter().map(|f| (i, f)));
        }
        let mut one_by_one = Vec::new();
        for (dir, files) in by_dir {
            if files.len() >= SYNC_FILE_SYSTEM_FILES_MIN {
                match disk::sync_file_system(&dir).await {
                    Ok(true) => {
                        crate::stats::update(|s| s.checkpoint_file_system_syncs += 1);
                        for (_, (_, path)) in &files {
                            crate::sync_log::synced_file(path);
                        }
                        continue;
                    }
                    Ok(false) => {}
                    // Each file's own fdatasync then tells which failed.
                    Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "syncfs failed; fsyncing file by file"),
                }
            }
            one_by_one.extend(files);
        }
        crate::stats::update(|s| s.checkpoint_file_syncs += one_by_one.len() as u64);
        for chunk in one_by_one.chunks(CHECKPOINT_CONCURRENCY) {
            let syncs = chunk.iter().map(|(_, (file, path))| crate::fsync::sync_or_fail(file, path)).collect();
            for ((i, _), synced) in chunk.iter().zip(join_all(syncs).await) {
                if let Err(e) = synced {
                    self.report(Some(&taken[*i].log), &e);
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

/// One log in a checkpoint: its files written, its io lock held until they are
/// fsynced.
struct Taken {
    log: Log,
    _permit: StaticPermit,
    key: Bytes,
    mark: Mark,
    /// The log's truncations when its mark was taken.
    truncations: u64,
    written: log::Written<Option<Captured>>,
}

/// Writes one log's segment files for a checkpoint and says where they will stand
/// once fsynced, with the log's state at that point when it needs a new snapshot.
async fn write_log(journal: &Journal, log: &Log, keep_from: u64) -> Result<Taken, crate::StorageError> {
    let truncations = log.borrow().truncations;
    let lock = log.borrow().io_lock();
    let permit = lock.acquire_static_permit(1).await.expect("the io lock is never closed");
    // Taken with no await before the flush takes its writes: records before this
    // position are reflected in what the flush makes durable.
    let position = journal.next_position();
    let written = log::write_for_sync(log, Some(keep_from), |l, synced| {
        l.capture_snapshot(Coords {
            segment_base: synced.segment_base,
            segment_size: synced.segment_size,
            next_offset: synced.next_offset,
        })
    })
    .await?;
    let l = log.borrow();
    let key = l.journal.as_ref().expect("journaled").key.clone();
    let synced = written.synced;
    let mark = Mark {
        position,
        segment_base: synced.segment_base,
        segment_size: synced.segment_size,
        next_offset: synced.next_offset,
        high_watermark: l.high_watermark,
        tail: written.left.map(|t| crate::journal::MarkTail {
            position: t.position.unwrap_or(position),
            size: t.size,
            offset: t.offset,
        }),
    };
    if mark.tail.is_some() {
        crate::stats::update(|s| s.checkpoint_tails_left += 1);
    }
    Ok(Taken { log: log.clone(), _permit: permit, key, mark, truncations, written })
}
