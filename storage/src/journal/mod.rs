//! The shard's write-ahead journal: what makes appends durable with one fdatasync per
//! flush pass, however many partitions the pass carries.
//!
//! Without it, a pass fdatasyncs every dirty partition's segment file and rewrites its
//! partial last page: the fsync count and the bytes written per payload byte grow with
//! the number of partitions (keyed traffic over 1,000 partitions cost 5.8x the
//! fdatasyncs of one). With it, a pass packs every dirty log's new batches into
//! records appended to one file sequence per shard (`<data>/.journal/shard-<id>/`),
//! written with O_DIRECT and made durable by one fdatasync (a pass starts at the next
//! logical block boundary, 512 bytes on most disks, and never writes a block an
//! earlier pass made durable, so small passes cost little more than their records);
//! the logs' `flushed`
//! offsets (and, on a single node, their high watermarks) then move. The segment files
//! are written afterwards from memory, in whole pages and without an fsync
//! ([`crate::log::write_whole_pages`]), so they stay the read path and the long-term
//! home of the data.
//!
//! **Checkpoints** bound the journal. A checkpoint starts a new journal file, then, for
//! every log, writes its remaining whole pages and fsyncs its segment files
//! ([`crate::log::write_for_sync`]) and notes a [`Mark`]: the journal position at that
//! moment, how far the segment files are now durable, and where the tail it left to
//! the journal starts ([`tail`]). A `Checkpoint` record carrying the marks then goes
//! into the journal, and files before the oldest one a mark needs are recycled
//! (renamed to a new sequence number and overwritten, so later writes to them carry no
//! file-system metadata) or removed. The file the next roll writes is renamed, and its
//! name made durable, ahead of the roll, so a roll makes no pass wait for the disk. A
//! checkpoint runs when the journal has taken `file_bytes` since the last one, or
//! after `checkpoint_interval`, off the acknowledgement path: its fdatasyncs cost once
//! per partition per checkpoint, not per pass.
//!
//! **Recovery** ([`replay`]) reads the files from the last checkpoint's starting file
//! on (newest first, until the last `Checkpoint` record says where that is). Each log
//! cuts its segment files back to its mark (bytes written after it were never fsynced,
//! so they may be torn or missing after a power loss) and replays its records after
//! the mark's position, in order: data at or past its end is appended, truncations
//! are applied again, a `Create` record means the log's files hold nothing the
//! journal does not. A log with no mark and no `Create` record predates
//! the journal and is recovered by its own scan. Between the cut and the replay, a log
//! whose checkpoint snapshot was taken at its mark restores it instead of scanning its
//! files ([`crate::log::snapshot`]); the snapshots are written to the state store after the
//! `Checkpoint` record is durable.
//!
//! Every pass, truncation record and checkpoint record goes through one writer
//! (`lock`), so the journal's order is the order of the logs' changes.

pub mod record;
pub mod replay;
#[cfg(test)]
mod simulation;
pub(crate) mod tail;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use crate::disk::{self, File};
use bytes::Bytes;
use glommio::sync::Semaphore;

use crate::error::StorageError;
use crate::fsync::{sync_or_die, sync_or_fail};
use crate::segment_io::write_zeros;
use crate::PAGE;
pub use record::{Mark, Position, Record, Tail as MarkTail};
pub use replay::LogRecovery;

/// Journal settings; limits have their unit last.
#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// A checkpoint starts once the journal has taken this many bytes since the last.
    pub file_bytes: u64,
    /// A checkpoint starts at least this often while segment data is unsynced.
    pub checkpoint_interval: Duration,
    /// Retired files kept for recycling beyond the live ones: a retired file is kept
    /// while live files and spares together number at most `live_files_max` plus
    /// this, so the files in use bound the disk the journal takes, and a fast producer
    /// whose checkpoints retire several files at once recycles them all.
    pub spare_files_max: usize,
    /// Live files (not yet covered by a checkpoint) before passes wait for one.
    pub live_files_max: usize,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            file_bytes: 64 << 20,
            checkpoint_interval: Duration::from_secs(60),
            spare_files_max: 3,
            live_files_max: 8,
        }
    }
}

/// A log's link to the shard journal.
pub struct LogJournal {
    /// The shard's journal, which truncations write to before they cut files.
    pub journal: Rc<Journal>,
    /// Names the log in journal records (for a partition: its topic id and index).
    pub key: Bytes,
    /// Batches below this are in the journal.
    pub journaled_offset: i64,
    /// A truncation to record before the next batches.
    pub pending_truncate: Option<i64>,
    /// The log was created empty and the journal has not said so yet.
    pub pending_create: bool,
    /// Segment files written since they were last fsynced.
    pub unsynced: Vec<(Rc<File>, PathBuf)>,
    /// A pass holds batches of this log it has not finished journaling: until it
    /// ends, `journaled_offset` and `records` may lag the journal.
    pub in_pass: bool,
    /// (first offset, position) of the log's `Data` records that may hold batches not
    /// yet wholly in its segment files, oldest first: where a checkpoint that leaves
    /// the log's tail to the journal says it is ([`MarkTail`]). Cleared by a
    /// truncation; pruned as whole pages are written.
    pub records: std::collections::VecDeque<(i64, Position)>,
}

impl LogJournal {
    /// Adds files written and not fsynced to those the next checkpoint fsyncs, each once.
    pub fn keep_unsynced(&mut self, files: Vec<(Rc<File>, PathBuf)>) {
        for (file, path) in files {
            if !self.unsynced.iter().any(|(f, _)| Rc::ptr_eq(f, &file)) {
                self.unsynced.push((file, path));
            }
        }
    }
}

struct Writer {
    seq: u64,
    file: Rc<File>,
    path: PathBuf,
    /// Where the records end in `file`.
    tail: Tail,
    /// The file is written (zeros or older records) up to here.
    preallocated: u64,
    /// Sequence numbers and paths of files not yet covered by a checkpoint.
    live: Vec<(u64, PathBuf)>,
    /// Retired files to recycle.
    spares: Vec<PathBuf>,
    /// The file the next roll writes, named and its name durable ([`Journal::prepare_next`]).
    next: Option<NextFile>,
    bytes_since_checkpoint: u64,
}

pub struct Journal {
    /// Itself, for the task a roll starts.
    me: std::rc::Weak<Journal>,
    dir: PathBuf,
    pub config: JournalConfig,
    lock: Rc<Semaphore>,
    /// Held while the next file is prepared, and by a roll that finds it not ready.
    next_lock: Semaphore,
    preparing_spares: Cell<bool>,
    writer: RefCell<Writer>,
    recovered: RefCell<HashMap<Bytes, LogRecovery>>,
    /// Every log that had records has been opened (or given up): checkpoints may run.
    recovery_finished: Cell<bool>,
    /// fdatasyncs of journal files, and bytes written to them (with page rewrites).
    pub syncs: Cell<u64>,
    pub bytes_written: Cell<u64>,
    pub checkpoints: Cell<u64>,
    /// Files created (zero-filled when there was room) rather than recycled.
    pub files_created: Cell<u64>,
    /// Set when an fdatasync of a journal file failed (only where the thread survives
    /// sync failures, see [`crate::fsync::survive_sync_failures`]): every later write
    /// fails, since the journal can no longer prove anything durable.
    failed: RefCell<Option<String>>,
    /// Told how long each fdatasync of a pass took (metrics).
    on_sync: RefCell<Option<SyncHook>>,
    /// Asks the flush loop for a checkpoint before its interval is up (compaction
    /// waiting for one, [`Journal::checkpoint_soon`]).
    pub checkpoint_wanted: Rc<crate::Signal>,
    /// Told when a checkpoint ended (done or failed), the loop found none needed, or
    /// the loops stopped: what a pass waiting for journal files to retire, and
    /// compaction waiting for a mark, wait on.
    pub checkpoint_ended: Rc<crate::Signal>,
}

/// See [`Journal::on_sync`].
pub type SyncHook = Box<dyn Fn(std::time::Duration)>;

pub fn file_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.journal"))
}

fn parse_file_name(name: &str) -> Option<u64> {
    name.strip_suffix(".journal")?.parse().ok()
}

impl Journal {
    /// Opens the journal in `dir`: reads what it holds for recovery (handed to each
    /// log by [`Journal::take_recovered`] as it opens) and starts a new file.
    pub async fn open(dir: &Path, config: JournalConfig) -> Result<Rc<Journal>, StorageError> {
        let (mut listed, mut prepared) = (Vec::new(), Vec::new());
        for name in disk::create_and_list(dir, "list journal").await? {
            if let Some(seq) = parse_file_name(&name) {
                listed.push(seq);
            } else if name.starts_with(PREPARED_PREFIX) {
                prepared.push(dir.join(name));
            }
        }
        listed.sort_unstable();
        let found = replay::read_all(dir, &listed).await?;
        let seq = listed.last().map_or(1, |s| s + 1);
        let (live, retired): (Vec<u64>, Vec<u64>) = listed.iter().partition(|s| **s >= found.replay_from);
        let path = file_path(dir, seq);
        let (file, preallocated, created) = match recycle_or_warn(prepared.pop(), &path).await {
            Some((file, preallocated)) => (file, preallocated, 0),
            None => {
                let file = create_file(&path).await?;
                let zeroed = write_zeros(&file, 0, config.file_bytes).await;
                sync_or_die(&file, &path).await;
                (file, if zeroed { config.file_bytes } else { 0 }, 1)
            }
        };
        crate::disk::sync_dir(dir).await?;
        let mut live: Vec<(u64, PathBuf)> = live.into_iter().map(|s| (s, file_path(dir, s))).collect();
        live.push((seq, path.clone()));
        let journal = Rc::new_cyclic(|me| Journal {
            me: me.clone(),
            dir: dir.to_path_buf(),
            config,
            lock: Rc::new(Semaphore::new(1)),
            next_lock: Semaphore::new(1),
            preparing_spares: Cell::new(false),
            writer: RefCell::new(Writer {
                seq,
                file: Rc::new(file),
                path,
                tail: Tail::default(),
                preallocated,
                live,
                spares: Vec::new(),
                next: None,
                bytes_since_checkpoint: found.bytes_after_checkpoint,
            }),
            recovered: RefCell::new(found.logs),
            recovery_finished: Cell::new(false),
            syncs: Cell::new(0),
            bytes_written: Cell::new(0),
            checkpoints: Cell::new(0),
            files_created: Cell::new(created),
            failed: RefCell::new(None),
            on_sync: RefCell::new(None),
            checkpoint_wanted: crate::Signal::new(),
            checkpoint_ended: crate::Signal::new(),
        });
        journal.writer.borrow_mut().spares.extend(prepared);
        journal.retire(retired.into_iter().map(|s| file_path(dir, s)).collect()).await;
        glommio::spawn_local(journal.clone().prepare_next()).detach();
        Ok(journal)
    }

    /// Makes the file the next roll writes ready ahead of it: a spare renamed to the
    /// next sequence number, the directory fsynced. A roll (a full file, or a
    /// checkpoint) then does no I/O while passes wait for the journal: a directory
    /// fsync there, under the writer's lock, once held every pass for 35 ms.
    async fn prepare_next(self: Rc<Self>) {
        if self.writer.borrow().next.is_some() {
            return;
        }
        self.clone().prepare_spares().await;
        let _preparing = self.next_lock.acquire_permit(1).await.expect("the next file's lock is never closed");
        let (seq, spare) = {
            let mut w = self.writer.borrow_mut();
            if w.next.is_some() {
                return;
            }
            (w.seq + 1, w.spares.pop())
        };
        let path = file_path(&self.dir, seq);
        let Some((file, preallocated)) = recycle_or_warn(spare, &path).await else { return };
        if let Err(e) = disk::sync_dir(&self.dir).await {
            // The roll makes it when it is due (and fails then if it still cannot).
            return tracing::warn!(error = %e, "cannot prepare the next journal file");
        }
        self.writer.borrow_mut().next = Some(NextFile { seq, file, path, preallocated });
    }

    /// Creates a zero-filled file ahead of need when there is no spare, as a database
    /// preallocates its log files (retired files become spares later): a pass then always overwrites written blocks (its fdatasync carries no
    /// file-system metadata), and the data path never writes zeros itself.
    async fn prepare_spares(self: Rc<Self>) {
        if self.preparing_spares.replace(true) {
            return;
        }
        self.make_spares().await;
        self.preparing_spares.set(false);
    }

    async fn make_spares(&self) {
        let mut n = 0u64;
        while self.writer.borrow().spares.is_empty() {
            let path = self.dir.join(format!("{PREPARED_PREFIX}{n}.journal"));
            n += 1;
            if disk::exists(&path) || self.writer.borrow().spares.contains(&path) {
                continue;
            }
            let file = match self.create_file(&path).await {
                Ok(f) => f,
                Err(e) => return tracing::warn!(error = %e, "cannot prepare a journal file"),
            };
            if !write_zeros(&file, 0, self.config.file_bytes).await || file.fdatasync().await.is_err() {
                let _ = file.close().await;
                let _ = disk::remove(&path, "remove journal file").await;
                return tracing::warn!(path = %path.display(), "cannot zero a journal file (disk full?)");
            }
            let _ = file.close().await;
            self.writer.borrow_mut().spares.push(path);
        }
    }

    /// What recovery found for the log named `key` (taken once).
    pub fn take_recovered(&self, key: &Bytes) -> LogRecovery {
        self.recovered.borrow_mut().remove(key).unwrap_or_default()
    }

    /// Says every log the journal may hold records for has been opened: records no log
    /// took belong to logs deleted while the process was down, and are dropped. Until
    /// then no checkpoint runs, since it would retire records not yet replayed.
    pub fn finish_recovery(&self) {
        let untaken: Vec<Bytes> =
            self.recovered.borrow_mut().drain().filter(|(_, r)| !r.records.is_empty()).map(|(k, _)| k).collect();
        if !untaken.is_empty() {
            tracing::info!(logs = untaken.len(), "journal records of logs no longer present are dropped");
        }
        self.recovery_finished.set(true);
    }

    /// True once [`Journal::finish_recovery`] was called.
    /// Calls `hook` with the duration of every pass's fdatasync from now on.
    pub fn on_sync(&self, hook: SyncHook) {
        *self.on_sync.borrow_mut() = Some(hook);
    }

    pub fn recovered(&self) -> bool {
        self.recovery_finished.get()
    }

    /// Where the next record will be written.
    pub fn next_position(&self) -> Position {
        let w = self.writer.borrow();
        Position { seq: w.seq, offset: w.tail.end() }
    }

    pub fn bytes_since_checkpoint(&self) -> u64 {
        self.writer.borrow().bytes_since_checkpoint
    }

    pub fn live_files(&self) -> usize {
        self.writer.borrow().live.len()
    }

    /// Live files from sequence number `seq` on.
    pub fn live_files_from(&self, seq: u64) -> usize {
        self.writer.borrow().live.iter().filter(|(s, _)| *s >= seq).count()
    }

    /// Asks for a checkpoint now and waits until one ends, or at most a checkpoint
    /// interval (a journal whose flush loop is not running never answers).
    pub async fn checkpoint_soon(&self) {
        let ended = self.checkpoint_ended.wait();
        self.checkpoint_wanted.notify();
        futures_lite::future::or(ended, disk::sleep(self.config.checkpoint_interval)).await;
    }

    /// Appends `records` and fdatasyncs them: when this returns `Ok`, they are durable.
    /// A pass that would overflow the current file goes to a new one. Returns where
    /// the first record went (the others follow it back to back).
    pub async fn write(&self, records: &[Record]) -> Result<Position, StorageError> {
        let _permit = self.lock.acquire_permit(1).await.expect("the journal lock is never closed");
        if let Some(e) = self.failed.borrow().clone() {
            return Err(StorageError::io("journal failed earlier", &self.dir, std::io::Error::other(e)));
        }
        let total: usize = records.iter().map(Record::encoded_len).sum();
        let overflows = {
            let w = self.writer.borrow();
            let pass = w.tail.lay_out(total, w.file.alignment() as usize);
            w.tail.end() > 0 && pass.end_in_file() > self.config.file_bytes
        };
        if overflows {
            self.roll_locked().await?;
        }
        self.write_locked(records, total).await
    }

    async fn write_locked(&self, records: &[Record], total: usize) -> Result<Position, StorageError> {
        let (file, path, seq, pass, zero_fill) = {
            let w = self.writer.borrow();
            // In the device's logical blocks, not pages: a small pass writes one
            // 512-byte block, not a 4 KiB page.
            let pass = w.tail.lay_out(total, w.file.alignment() as usize);
            let aligned_end = pass.end_in_file().div_ceil(PAGE) * PAGE;
            let zero_fill = (aligned_end > w.preallocated).then(|| {
                let to = (aligned_end + ZERO_FILL_AHEAD_BYTES).min(self.config.file_bytes.max(aligned_end));
                (aligned_end.max(w.preallocated), to)
            });
            (w.file.clone(), w.path.clone(), w.seq, pass, zero_fill)
        };
        let (position, len) = (pass.position, pass.len);
        let mut buf = file.alloc_dma_buffer(len);
        pass.fill(buf.as_bytes_mut(), records, seq);
        let zeros = async {
            if let Some((from, to)) = zero_fill {
                write_zeros(&file, from, to).await;
            }
        };
        let (written, ()) = futures_lite::future::zip(file.write_at(buf, position), zeros).await;
        match written {
            Ok(n) if n == len => {}
            Ok(_) => return Err(StorageError::io("short journal write", &path, std::io::Error::from_raw_os_error(28))),
            Err(e) => return Err(StorageError::io("write journal", &path, e)),
        }
        let sync_started = std::time::Instant::now();
        let synced = sync_or_fail(&file, &path).await;
        if let Some(hook) = self.on_sync.borrow().as_ref() {
            hook(sync_started.elapsed());
        }
        if let Err(e) = synced {
            // What the file holds is unknown from now on: no later write may claim
            // durability through it.
            *self.failed.borrow_mut() = Some(e.to_string());
            return Err(e);
        }
        crate::sync_log::synced_journal(&path, pass.end_in_file());
        self.syncs.set(self.syncs.get() + 1);
        self.bytes_written.set(self.bytes_written.get() + len as u64);
        let mut w = self.writer.borrow_mut();
        if let Some((_, to)) = zero_fill {
            w.preallocated = w.preallocated.max(to);
        }
        w.preallocated = w.preallocated.max(position + len as u64);
        w.tail = pass.next_tail();
        w.bytes_since_checkpoint += total as u64;
        Ok(Position { seq, offset: pass.records_at() })
    }

    /// Starts a new file for a checkpoint; returns its sequence number. Records
    /// written from now on are in it or later files.
    pub async fn roll_for_checkpoint(&self) -> Result<u64, StorageError> {
        let _permit = self.lock.acquire_permit(1).await.expect("the journal lock is never closed");
        self.writer.borrow_mut().bytes_since_checkpoint = 0;
        self.roll_locked().await
    }

    async fn roll_locked(&self) -> Result<u64, StorageError> {
        // A preparation under way finishes first: it names the same file.
        let preparing = self.next_lock.acquire_permit(1).await.expect("the next file's lock is never closed");
        let (seq, next) = {
            let mut w = self.writer.borrow_mut();
            let seq = w.seq + 1;
            // Its records must carry the number its name gives.
            let next = w.next.take().filter(|next| next.seq == seq);
            (seq, next)
        };
        let (file, path, preallocated) = match next {
            Some(next) => (next.file, next.path, next.preallocated),
            None => {
                let path = file_path(&self.dir, seq);
                let spare = self.writer.borrow_mut().spares.pop();
                let (file, preallocated) = match recycle_or_warn(spare, &path).await {
                    Some(recycled) => recycled,
                    None => (self.create_file(&path).await?, 0),
                };
                crate::disk::sync_dir(&self.dir).await?;
                (file, path, preallocated)
            }
        };
        {
            let mut w = self.writer.borrow_mut();
            w.seq = seq;
            w.file = Rc::new(file);
            w.path = path.clone();
            w.tail = Tail::default();
            w.preallocated = preallocated;
            w.live.push((seq, path));
        }
        // Only now may a preparation name the file after this one.
        drop(preparing);
        if let Some(me) = self.me.upgrade() {
            glommio::spawn_local(me.prepare_next()).detach();
        }
        Ok(seq)
    }

    /// Records a finished checkpoint durably, then retires the files before
    /// `replay_from`.
    pub async fn finish_checkpoint(&self, replay_from: u64, marks: Vec<(Bytes, Mark)>) -> Result<(), StorageError> {
        let record = Record::Checkpoint { replay_from, marks };
        self.write(std::slice::from_ref(&record)).await?;
        let retired = {
            let mut w = self.writer.borrow_mut();
            let (retired, live): (Vec<_>, Vec<_>) = w.live.drain(..).partition(|(s, _)| *s < replay_from);
            w.live = live;
            retired.into_iter().map(|(_, p)| p).collect()
        };
        self.checkpoints.set(self.checkpoints.get() + 1);
        self.retire(retired).await;
        Ok(())
    }

    /// A new file, counted in `files_created`.
    async fn create_file(&self, path: &Path) -> Result<File, StorageError> {
        let file = create_file(path).await?;
        self.files_created.set(self.files_created.get() + 1);
        Ok(file)
    }

    /// Keeps retired files for recycling while live files and spares together stay
    /// within their budget (see [`JournalConfig::spare_files_max`]); removes the rest.
    async fn retire(&self, files: Vec<PathBuf>) {
        let budget = self.config.live_files_max + self.config.spare_files_max;
        for path in files {
            let keep = {
                let w = self.writer.borrow();
                w.live.len() + w.spares.len() < budget
            };
            if keep {
                self.writer.borrow_mut().spares.push(path);
                continue;
            }
            if let Err(e) = disk::remove(&path, "remove journal file").await {
                tracing::warn!(error = %e, "cannot remove a retired journal file");
            }
        }
    }
}

/// A file ready to be the journal's next (see [`Writer::next`]).
struct NextFile {
    seq: u64,
    file: File,
    path: PathBuf,
    preallocated: u64,
}

/// Where the records end in the current file.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Tail {
    end: u64,
}

/// One pass laid out in the file: `len` bytes (whole blocks) written at `position`, a
/// block boundary. It holds `lead` bytes of `Pass` record (when the records before
/// it end inside a block, at `prev_end`), then the records, ending `end` bytes in, then
/// zeros.
#[derive(Debug)]
pub(crate) struct Pass {
    pub position: u64,
    pub len: usize,
    pub lead: usize,
    pub end: usize,
    prev_end: u64,
}

impl Tail {
    /// Where the next record goes, or the padding before it.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Lays out a pass of `total` bytes of records on a device of `block`-byte blocks:
    /// from the next block boundary, so no block an earlier pass made durable is
    /// written again.
    pub fn lay_out(&self, total: usize, block: usize) -> Pass {
        let position = self.end.div_ceil(block as u64) * block as u64;
        let lead = if position == self.end { 0 } else { record::PASS_LEN };
        let end = lead + total;
        Pass { position, len: end.div_ceil(block) * block, lead, end, prev_end: self.end }
    }
}

impl Pass {
    /// Writes the pass into `out` (`self.len` bytes): its `Pass` record if it has one,
    /// the records framed for file `seq`, zeros to the block's end.
    pub fn fill(&self, out: &mut [u8], records: &[Record], seq: u64) {
        let mut cursor = &mut out[..self.end];
        if self.lead > 0 {
            Record::Pass { prev_end: self.prev_end }.encode(seq, &mut cursor);
        }
        for r in records {
            r.encode(seq, &mut cursor);
        }
        out[self.end..].fill(0);
    }

    /// Where the first of the pass's records starts.
    pub fn records_at(&self) -> u64 {
        self.position + self.lead as u64
    }

    /// Where the records end once the pass is durable.
    pub fn end_in_file(&self) -> u64 {
        self.position + self.end as u64
    }

    pub fn next_tail(&self) -> Tail {
        Tail { end: self.end_in_file() }
    }
}

/// Zeros kept written ahead of the journal's end in a new file, so a pass overwrites
/// blocks already allocated and written and its fdatasync carries no metadata.
const ZERO_FILL_AHEAD_BYTES: u64 = 1 << 20;

/// Renames a retired or prepared file to `path` and opens it; returns it and how far
/// it is already written.
async fn recycle(old: &Path, path: &Path) -> Result<(File, u64), StorageError> {
    disk::rename(old, path, "recycle journal file").await?;
    let file = File::open(path).await.map_err(|e| StorageError::io("open journal", path, e))?;
    let size = file.file_size().await.map_err(|e| StorageError::io("stat journal", path, e))?;
    Ok((file, size / PAGE * PAGE))
}

/// `recycle` of the spare, or none if there is none or it cannot be recycled (a file
/// that went missing): the caller makes a new file instead.
async fn recycle_or_warn(spare: Option<PathBuf>, path: &Path) -> Option<(File, u64)> {
    recycle(&spare?, path)
        .await
        .map_err(|e| tracing::warn!(error = %e, "cannot recycle a journal file; making a new one"))
        .ok()
}

async fn create_file(path: &Path) -> Result<File, StorageError> {
    File::create(path).await.map_err(|e| StorageError::io("create journal", path, e))
}

/// Name prefix of zero-filled files made ahead of need (no sequence number yet).
const PREPARED_PREFIX: &str = "prepared-";
