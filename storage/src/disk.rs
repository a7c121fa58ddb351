//! Every file, directory and timer the storage layer uses, behind one seam: the real
//! ones (glommio DMA files on the shard's io_uring, file-system calls on glommio's
//! blocking thread, glommio timers), or a simulated disk and clock for a thread that
//! called [`simulate`].
//!
//! The simulated disk ([`SimDisk`]) keeps, per file, what is durable and the writes and
//! truncations since its last fdatasync, and can lose power: each 512-byte sector of an
//! unflushed write reaches the disk or not, on its own (writes land out of order), a
//! lost sector that no flush had made part of the file may hold garbage instead, and
//! an unflushed truncation happens or not. A file's creation, rename or removal reaches
//! the disk when its directory is fsynced; of those not yet synced a power loss keeps
//! the oldest few, in order, as a journaling file system commits them (a rename whole,
//! never half). A directory's creation is such a change in its parent: a power loss
//! that undoes it takes everything named under it too. The disk can also
//! fill up (a write that would grow the disk past its capacity fails with ENOSPC) and
//! lose power after a given number of operations, mid-pass: from then on every
//! operation waits forever (so does one through a file opened before the last power
//! cycle), and what was running stops where it was.
//!
//! With the simulated clock, [`sleep`] waits until the simulation moves the clock on
//! ([`SimDisk::advance`]) and [`now`] reads it, so a run depends only on its seed (the
//! simulation also sets glommio's preemption timer out of reach, so
//! `yield_if_needed` never yields).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use glommio::io::{DmaBuffer, DmaFile, OpenOptions, ReadResult};
use rand::Rng;

use crate::error::StorageError;

/// A thread's simulated storage: the disk [`simulate`] gave, which also keeps the
/// clock, and the disks mounted under it.
struct Sim {
    root: SimDisk,
    /// Directories whose files live on a disk of their own ([`mount`]).
    mounts: Vec<(PathBuf, SimDisk)>,
}

thread_local! {
    static SIM: RefCell<Option<Sim>> = const { RefCell::new(None) };
}

/// Puts this thread's storage on `disk` (or back on the real one with `None`).
pub fn simulate(disk: Option<SimDisk>) {
    SIM.with(|s| *s.borrow_mut() = disk.map(|root| Sim { root, mounts: Vec::new() }));
}

/// Puts the files under `dir` on `disk` (after [`simulate`]): several simulated nodes
/// in one thread each have their own disk, and lose power alone. The disk sees paths
/// from its own root (`dir/a` is `/a` on it), so a node's next life can mount it again
/// at another directory, out of reach of the tasks of its past life
/// ([`SimDisk::reborn`]). The clock stays the one `simulate` gave: sleepers are never
/// on a mounted disk.
pub fn mount(dir: &Path, disk: SimDisk) {
    SIM.with(|s| {
        let mut s = s.borrow_mut();
        let sim = s.as_mut().expect("mount after simulate");
        sim.mounts.retain(|(d, _)| d != dir);
        sim.mounts.push((dir.to_path_buf(), disk));
    });
}

/// The simulated disk and clock, if this thread simulates.
fn sim() -> Option<SimDisk> {
    SIM.with(|s| s.borrow().as_ref().map(|sim| sim.root.clone()))
}

/// The simulated disk that holds `path`, and the path on it, if this thread simulates.
fn sim_at(path: &Path) -> Option<(SimDisk, PathBuf)> {
    SIM.with(|s| {
        let s = s.borrow();
        let sim = s.as_ref()?;
        for (dir, disk) in &sim.mounts {
            if let Ok(rest) = path.strip_prefix(dir) {
                return Some((disk.clone(), Path::new("/").join(rest)));
            }
        }
        Some((sim.root.clone(), path.to_path_buf()))
    })
}

/// An open file: a DMA file, or one on the simulated disk.
pub struct File(Inner);

enum Inner {
    Dma(DmaFile),
    Sim(SimHandle),
}

/// A buffer to write with [`File::write_at`], aligned for O_DIRECT on a real file.
pub enum WriteBuf {
    Dma(DmaBuffer),
    Sim(Vec<u8>),
}

impl WriteBuf {
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        match self {
            WriteBuf::Dma(b) => b.as_bytes_mut(),
            WriteBuf::Sim(v) => v,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            WriteBuf::Dma(b) => b.as_bytes(),
            WriteBuf::Sim(v) => v,
        }
    }
}

/// What a read returns.
pub enum ReadBuf {
    Dma(ReadResult),
    Sim(Vec<u8>),
}

impl Deref for ReadBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            ReadBuf::Dma(r) => r,
            ReadBuf::Sim(v) => v,
        }
    }
}

impl File {
    /// Opens an existing file for reading and writing.
    pub async fn open(path: &Path) -> io::Result<File> {
        match sim_at(path) {
            Some((disk, path)) => disk.open(&path, false).await.map(|h| File(Inner::Sim(h))),
            None => Ok(File(Inner::Dma(OpenOptions::new().read(true).write(true).dma_open(path).await?))),
        }
    }

    /// Creates a file, or empties an existing one.
    pub async fn create(path: &Path) -> io::Result<File> {
        match sim_at(path) {
            Some((disk, path)) => disk.open(&path, true).await.map(|h| File(Inner::Sim(h))),
            None => Ok(File(Inner::Dma(
                OpenOptions::new().read(true).write(true).create(true).truncate(true).dma_open(path).await?,
            ))),
        }
    }

    /// The alignment writes need (positions and lengths).
    pub fn alignment(&self) -> u64 {
        match &self.0 {
            Inner::Dma(f) => f.alignment(),
            Inner::Sim(_) => SECTOR as u64,
        }
    }

    pub fn alloc_dma_buffer(&self, len: usize) -> WriteBuf {
        match &self.0 {
            Inner::Dma(f) => WriteBuf::Dma(f.alloc_dma_buffer(len)),
            Inner::Sim(_) => WriteBuf::Sim(vec![0; len]),
        }
    }

    /// Writes `buf` at `position`; returns how many bytes were written.
    pub async fn write_at(&self, buf: WriteBuf, position: u64) -> io::Result<usize> {
        match (&self.0, buf) {
            (Inner::Dma(f), WriteBuf::Dma(b)) => {
                let written = f.write_at(b, position).await?;
                crate::stats::update(|s| s.disk_bytes_written += written as u64);
                Ok(written)
            }
            (Inner::Sim(h), WriteBuf::Sim(v)) => h.write(position, v).await,
            _ => panic!("a write buffer allocated by another kind of file"),
        }
    }

    /// Reads up to `len` bytes at `position` (fewer at the end of the file).
    pub async fn read_at(&self, position: u64, len: usize) -> io::Result<ReadBuf> {
        match &self.0 {
            Inner::Dma(f) => Ok(ReadBuf::Dma(f.read_at(position, len).await?)),
            Inner::Sim(h) => h.read(position, len).await.map(ReadBuf::Sim),
        }
    }

    /// `read_at` for an aligned position and length.
    pub async fn read_at_aligned(&self, position: u64, len: usize) -> io::Result<ReadBuf> {
        match &self.0 {
            Inner::Dma(f) => Ok(ReadBuf::Dma(f.read_at_aligned(position, len).await?)),
            Inner::Sim(h) => h.read(position, len).await.map(ReadBuf::Sim),
        }
    }

    pub async fn fdatasync(&self) -> io::Result<()> {
        match &self.0 {
            Inner::Dma(f) => Ok(f.fdatasync().await?),
            Inner::Sim(h) => h.sync().await,
        }
    }

    /// Allocates the file's blocks up to `size` without changing its length
    /// (`FALLOC_FL_KEEP_SIZE`; a setting of the length, a seal, frees those past it).
    /// Nothing to do on the simulated disk, which allocates nothing.
    pub async fn allocate(&self, size: u64) -> io::Result<()> {
        match &self.0 {
            Inner::Dma(f) => Ok(f.pre_allocate(size, true).await?),
            Inner::Sim(_) => Ok(()),
        }
    }

    /// Sets the file's length (cutting it or extending it with zeros).
    pub async fn truncate(&self, size: u64) -> io::Result<()> {
        match &self.0 {
            Inner::Dma(f) => Ok(f.truncate(size).await?),
            Inner::Sim(h) => h.truncate(size).await,
        }
    }

    pub async fn file_size(&self) -> io::Result<u64> {
        match &self.0 {
            Inner::Dma(f) => Ok(f.file_size().await?),
            Inner::Sim(h) => h.size().await,
        }
    }

    pub async fn close(self) {
        if let Inner::Dma(f) = self.0 {
            let _ = f.close().await;
        }
    }

    /// Closes the file if this is its last reference.
    pub async fn close_rc(self: Rc<Self>) {
        if let Ok(file) = Rc::try_unwrap(self) {
            file.close().await;
        }
    }
}

/// Runs a file-system call on glommio's blocking thread, off the reactor.
async fn blocking<T: Send + 'static>(
    path: &Path,
    what: &'static str,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> Result<T, StorageError> {
    glommio::executor().spawn_blocking(f).await.map_err(|e| StorageError::io(what, path, e))
}

/// Removes a file.
pub async fn remove(path: &Path, what: &'static str) -> Result<(), StorageError> {
    match sim_at(path) {
        Some((disk, on_disk)) => disk.namespace(path, what, |s| s.unlink(&on_disk)).await,
        None => {
            let target = path.to_path_buf();
            blocking(path, what, move || std::fs::remove_file(target)).await
        }
    }
}

/// Renames a file, replacing `to` if it exists.
pub async fn rename(from: &Path, to: &Path, what: &'static str) -> Result<(), StorageError> {
    match sim_at(from).zip(sim_at(to)) {
        Some(((disk, from_on_disk), (_, to_on_disk))) => {
            disk.namespace(from, what, |s| s.rename(&from_on_disk, &to_on_disk)).await
        }
        None => {
            let (from, target) = (from.to_path_buf(), to.to_path_buf());
            blocking(to, what, move || std::fs::rename(from, target)).await
        }
    }
}

/// Creates `dir` and its missing parents, each durably: a new directory's name is
/// on the device only once its parent is fsynced, and without that a power loss could
/// take the directory and every file in it, fsynced or not. A blocking call, for
/// startup code and glommio's blocking thread.
pub fn create_dir_durably(dir: &Path) -> io::Result<()> {
    let missing: Vec<&Path> =
        dir.ancestors().filter(|d| !d.as_os_str().is_empty()).take_while(|d| !d.is_dir()).collect();
    std::fs::create_dir_all(dir)?;
    for created in missing {
        let parent = created.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// Creates `dir` (and its parents) durably if needed and lists the names in it.
pub async fn create_and_list(dir: &Path, what: &'static str) -> Result<Vec<String>, StorageError> {
    match sim_at(dir) {
        Some((disk, on_disk)) => disk.namespace(dir, what, |s| Ok(s.create_and_list(&on_disk))).await,
        None => {
            let target = dir.to_path_buf();
            blocking(dir, what, move || {
                create_dir_durably(&target)?;
                let mut names = Vec::new();
                for entry in std::fs::read_dir(&target)? {
                    if let Some(name) = entry?.file_name().to_str() {
                        names.push(name.to_string());
                    }
                }
                Ok(names)
            })
            .await
        }
    }
}

/// Whether a file or directory exists at `path`.
pub fn exists(path: &Path) -> bool {
    match sim_at(path) {
        Some((disk, path)) => {
            let s = disk.state();
            s.names.files.contains_key(&path) || s.names.is_dir(&path)
        }
        None => path.exists(),
    }
}

/// Fsyncs a directory after files were created, renamed or removed in it.
pub async fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    match sim_at(dir) {
        Some((disk, on_disk)) => {
            disk.namespace(dir, "sync directory", |s| {
                s.sync_dir(&on_disk);
                Ok(())
            })
            .await
        }
        None => {
            let target = dir.to_path_buf();
            blocking(dir, "sync directory", move || std::fs::File::open(&target)?.sync_all()).await
        }
    }
}

/// Makes every write to files on `dir`'s file system durable with one `syncfs`, on
/// ext4 only: its `sync_fs` commits the file-system journal (the sizes and extents
/// of the files written) and flushes the device's cache even when there was nothing
/// to commit, so the O_DIRECT writes completed before the call are durable after it,
/// in every file at once. `Ok(false)`: not ext4 (XFS's sync forces its log, which
/// issues no cache flush when the log holds nothing) or a simulated disk; the caller
/// then fsyncs file by file.
pub async fn sync_file_system(dir: &Path) -> Result<bool, StorageError> {
    const EXT4_SUPER_MAGIC: i64 = 0xEF53;
    if sim_at(dir).is_some() {
        return Ok(false);
    }
    let target = dir.to_path_buf();
    blocking(dir, "syncfs", move || {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(&target)?;
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and a statfs-sized, writable buffer.
        if unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if fs.f_type as i64 != EXT4_SUPER_MAGIC {
            return Ok(false);
        }
        // SAFETY: a valid descriptor.
        if unsafe { libc::syncfs(file.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(true)
    })
    .await
}

/// Waits `duration` of real time, or of the simulated clock.
pub async fn sleep(duration: Duration) {
    match sim() {
        Some(disk) => {
            let deadline = disk.state().clock + duration;
            SimSleep { disk, deadline, id: None }.await
        }
        None => {
            glommio::timer::sleep(duration).await;
        }
    }
}

/// A monotonic clock: time since the thread's first call, or the simulated clock.
pub fn now() -> Duration {
    thread_local! {
        static START: std::time::Instant = std::time::Instant::now();
    }
    match sim() {
        Some(disk) => disk.state().clock,
        None => START.with(|s| s.elapsed()),
    }
}

/// The sector: what the simulated disk writes or loses as a unit.
pub const SECTOR: usize = 512;

/// A simulated disk and clock, shared by the executors a simulation runs one after
/// another (one per power cycle).
#[derive(Clone, Default)]
pub struct SimDisk(Arc<Mutex<SimState>>);

#[derive(Default)]
struct SimState {
    /// Names as lookups see them.
    names: Names,
    /// Names as the device holds them for sure, and the changes to names since, in
    /// order: a directory's reach the device when it is synced; a power loss keeps a
    /// prefix of the rest (a journaling file system commits them in order).
    durable_names: Names,
    name_changes: Vec<NameChange>,
    nodes: BTreeMap<u64, Node>,
    next_node: u64,
    /// Power cycles so far: a handle opened before the last one waits forever.
    cycle: u64,
    powered: bool,
    /// Operations since power on, and the one that cuts the power.
    ops: u64,
    power_off_at: Option<u64>,
    /// Bytes the files may hold in all, until when on the clock.
    capacity: Option<u64>,
    full_until: Duration,
    clock: Duration,
    timers: BTreeMap<(Duration, u64), Waker>,
    next_timer: u64,
    stats: SimStats,
}

/// What a simulated disk did, for the simulation's report.
#[derive(Default, Debug, Clone, Copy)]
pub struct SimStats {
    pub writes: u64,
    pub syncs: u64,
    pub power_losses: u64,
    pub sectors_lost: u64,
    pub sectors_garbage: u64,
    pub truncations_lost: u64,
    /// File creations, renames and removals, and directory creations, a power loss undid.
    pub name_changes_lost: u64,
    pub writes_refused: u64,
}

/// A file's content as the device holds it.
#[derive(Default)]
struct Node {
    /// What reads see.
    current: Vec<u8>,
    /// What survives a power loss for sure.
    durable: Vec<u8>,
    /// Changes since the last fdatasync, in order.
    pending: Vec<Change>,
}

enum Change {
    Write(u64, Vec<u8>),
    Truncate(u64),
}

fn put(into: &mut Vec<u8>, at: usize, data: &[u8]) {
    if into.len() < at + data.len() {
        into.resize(at + data.len(), 0);
    }
    into[at..at + data.len()].copy_from_slice(data);
}

/// The names of a file system: files (to their nodes) and directories. The root
/// directory is always there.
#[derive(Default, Clone)]
struct Names {
    files: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
}

impl Names {
    fn is_dir(&self, path: &Path) -> bool {
        path.parent().is_none() || self.dirs.contains(path)
    }

    /// Drops the names whose directory is gone (a lost directory creation).
    fn prune(&mut self) {
        // Sorted, a directory comes before everything under it.
        let dirs = std::mem::take(&mut self.dirs);
        for dir in dirs {
            if dir.parent().is_some_and(|parent| self.is_dir(parent)) {
                self.dirs.insert(dir);
            }
        }
        let files = std::mem::take(&mut self.files);
        self.files = files.into_iter().filter(|(path, _)| path.parent().is_some_and(|d| self.is_dir(d))).collect();
    }
}

/// A change to a name (a rename is one change: it is kept or lost whole).
enum NameChange {
    Link(PathBuf, u64),
    Unlink(PathBuf),
    Rename(PathBuf, PathBuf),
    MakeDir(PathBuf),
}

impl NameChange {
    /// The directory whose fsync makes the change durable.
    fn dir(&self) -> Option<&Path> {
        match self {
            NameChange::Link(path, _)
            | NameChange::Unlink(path)
            | NameChange::Rename(_, path)
            | NameChange::MakeDir(path) => path.parent(),
        }
    }

    fn apply(&self, names: &mut Names) {
        match self {
            NameChange::Link(path, node) => {
                names.files.insert(path.clone(), *node);
            }
            NameChange::Unlink(path) => {
                names.files.remove(path);
            }
            NameChange::Rename(from, to) => {
                if let Some(node) = names.files.remove(from) {
                    names.files.insert(to.clone(), node);
                }
            }
            NameChange::MakeDir(path) => {
                names.dirs.insert(path.clone());
            }
        }
    }
}

fn apply(into: &mut Vec<u8>, change: &Change) {
    match change {
        Change::Write(at, data) => put(into, *at as usize, data),
        Change::Truncate(len) => into.resize(*len as usize, 0),
    }
}

impl SimState {
    fn used(&self) -> u64 {
        self.names.files.values().filter_map(|n| self.nodes.get(n)).map(|n| n.current.len() as u64).sum()
    }

    /// Makes `change` to the names lookups see; the device holds it once its directory
    /// is synced.
    fn change_name(&mut self, change: NameChange) {
        change.apply(&mut self.names);
        self.name_changes.push(change);
    }

    fn unlink(&mut self, path: &Path) -> io::Result<()> {
        self.named(path)?;
        self.change_name(NameChange::Unlink(path.to_path_buf()));
        Ok(())
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        self.named(from)?;
        self.change_name(NameChange::Rename(from.to_path_buf(), to.to_path_buf()));
        Ok(())
    }

    fn named(&self, path: &Path) -> io::Result<()> {
        if self.names.files.contains_key(path) {
            Ok(())
        } else {
            Err(io::Error::from(io::ErrorKind::NotFound))
        }
    }

    /// The changes to names in `dir` reach the device.
    fn sync_dir(&mut self, dir: &Path) {
        let (synced, rest): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.name_changes).into_iter().partition(|c| c.dir() == Some(dir));
        for change in &synced {
            change.apply(&mut self.durable_names);
        }
        self.name_changes = rest;
    }

    fn create_and_list(&mut self, dir: &Path) -> Vec<String> {
        let mut missing: Vec<&Path> = dir.ancestors().take_while(|d| !self.names.is_dir(d)).collect();
        missing.reverse();
        for d in &missing {
            self.change_name(NameChange::MakeDir(d.to_path_buf()));
        }
        for d in &missing {
            self.sync_dir(d.parent().expect("a created directory has a parent"));
        }
        let files = self.names.files.keys().map(|p| p.as_path());
        let dirs = self.names.dirs.iter().map(|p| p.as_path());
        let mut names: Vec<String> = files
            .chain(dirs)
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// A future that never completes: an operation after the power went out.
async fn powered_off<T>() -> T {
    std::future::pending().await
}

impl SimDisk {
    pub fn new() -> SimDisk {
        let disk = SimDisk::default();
        disk.state().powered = true;
        disk
    }

    fn state(&self) -> MutexGuard<'_, SimState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one operation; false once the power is out (the caller then waits forever).
    fn operate(&self, s: &mut SimState, cycle: u64) -> bool {
        if !s.powered || cycle != s.cycle {
            return false;
        }
        s.ops += 1;
        if s.power_off_at.is_some_and(|at| s.ops >= at) {
            s.powered = false;
            return false;
        }
        true
    }

    async fn namespace<T>(
        &self,
        path: &Path,
        what: &'static str,
        f: impl FnOnce(&mut SimState) -> io::Result<T>,
    ) -> Result<T, StorageError> {
        let result = {
            let mut s = self.state();
            let cycle = s.cycle;
            if self.operate(&mut s, cycle) {
                Some(f(&mut s))
            } else {
                None
            }
        };
        match result {
            Some(r) => r.map_err(|e| StorageError::io(what, path, e)),
            None => powered_off().await,
        }
    }

    async fn open(&self, path: &Path, create: bool) -> io::Result<SimHandle> {
        let opened = {
            let mut s = self.state();
            let cycle = s.cycle;
            if !self.operate(&mut s, cycle) {
                None
            } else if let Some(&node) = s.names.files.get(path) {
                if create {
                    let n = s.nodes.get_mut(&node).expect("a named node exists");
                    n.current.clear();
                    n.pending.push(Change::Truncate(0));
                }
                Some(Ok(SimHandle { disk: self.clone(), node, cycle }))
            } else if create && path.parent().is_some_and(|d| s.names.is_dir(d)) {
                let node = s.next_node;
                s.next_node += 1;
                s.nodes.insert(node, Node::default());
                s.change_name(NameChange::Link(path.to_path_buf(), node));
                Some(Ok(SimHandle { disk: self.clone(), node, cycle }))
            } else {
                Some(Err(io::Error::from(io::ErrorKind::NotFound)))
            }
        };
        match opened {
            Some(r) => r,
            None => powered_off().await,
        }
    }

    /// Cuts the power after `ops` more operations.
    pub fn power_off_after(&self, ops: u64) {
        let mut s = self.state();
        s.power_off_at = Some(s.ops + ops.max(1));
    }

    /// Drops every file and sleeper (on the thread that simulates): a simulation done
    /// with this disk frees its memory even where a task of it was left waiting.
    pub fn discard(&self) {
        let mut s = self.state();
        s.names = Names::default();
        s.durable_names = Names::default();
        s.name_changes.clear();
        s.nodes.clear();
        s.timers.clear();
    }

    /// Cuts the power now.
    pub fn cut_power(&self) {
        self.state().powered = false;
    }

    pub fn powered(&self) -> bool {
        self.state().powered
    }

    /// Fills the disk: for `duration` of the clock, the files may grow by `room` bytes
    /// in all.
    pub fn fill(&self, room: u64, duration: Duration) {
        let mut s = self.state();
        s.capacity = Some(s.used() + room);
        s.full_until = s.clock + duration;
    }

    pub fn stats(&self) -> SimStats {
        self.state().stats
    }

    /// Loses power (if it is not out already) and turns it back on: each file keeps
    /// what was durable, and of its changes since, the ones the device happened to make
    /// (per sector for writes). Files no longer named are gone.
    pub fn power_cycle(&self, rng: &mut impl Rng) {
        let keep_ratio = rng.gen_range(0.0..1.0);
        self.power_cycle_keeping(keep_ratio, rng);
    }

    /// `power_cycle` where each unflushed change reaches the disk with probability
    /// `keep_ratio` (0: only what was flushed survives).
    pub fn power_cycle_keeping(&self, keep_ratio: f64, rng: &mut impl Rng) {
        let mut s = self.state();
        let s = &mut *s;
        // Names: a prefix of the changes since their directories were last synced.
        let changes = std::mem::take(&mut s.name_changes);
        let kept = changes.iter().take_while(|_| rng.gen_bool(keep_ratio)).count();
        s.stats.name_changes_lost += (changes.len() - kept) as u64;
        for change in &changes[..kept] {
            change.apply(&mut s.durable_names);
        }
        s.durable_names.prune();
        s.names = s.durable_names.clone();
        let named: BTreeSet<u64> = s.names.files.values().copied().collect();
        s.nodes.retain(|id, _| named.contains(id));
        for node in s.nodes.values_mut() {
            let mut after = node.durable.clone();
            for change in std::mem::take(&mut node.pending) {
                match &change {
                    Change::Truncate(_) if rng.gen_bool(keep_ratio) => apply(&mut after, &change),
                    Change::Truncate(_) => s.stats.truncations_lost += 1,
                    Change::Write(at, data) => {
                        let mut offset = 0;
                        while offset < data.len() {
                            let pos = *at as usize + offset;
                            let end = ((pos / SECTOR + 1) * SECTOR - *at as usize).min(data.len());
                            let sector = &data[offset..end];
                            if rng.gen_bool(keep_ratio) {
                                put(&mut after, pos, sector);
                            } else {
                                s.stats.sectors_lost += 1;
                                if pos >= node.durable.len() && rng.gen_ratio(1, 8) {
                                    let garbage: Vec<u8> = (0..sector.len()).map(|_| rng.gen()).collect();
                                    put(&mut after, pos, &garbage);
                                    s.stats.sectors_garbage += 1;
                                }
                            }
                            offset = end;
                        }
                    }
                }
            }
            node.current = after.clone();
            node.durable = after;
        }
        // Sleepers of the executor that lost power: a glommio waker must not be
        // dropped on another thread, and that executor is gone.
        std::mem::take(&mut s.timers).into_values().for_each(std::mem::forget);
        s.cycle += 1;
        s.capacity = None;
        s.powered = true;
        s.ops = 0;
        s.power_off_at = None;
        s.stats.power_losses += 1;
    }

    /// Power cycles the disk (as [`SimDisk::power_cycle`]) for a new life of its node,
    /// as a new disk: what survived goes to the returned one, and this one stays dark
    /// forever. A task of the old life, one that slept through the reboot say, then
    /// never touches the new life's files, as a dead process would not.
    pub fn reborn(&self, rng: &mut impl Rng) -> SimDisk {
        self.power_cycle(rng);
        let state = std::mem::take(&mut *self.state());
        SimDisk(Arc::new(Mutex::new(state)))
    }

    /// Moves the simulated clock on by `by`, waking the sleepers it passes.
    pub fn advance(&self, by: Duration) {
        let due: Vec<Waker> = {
            let mut s = self.state();
            s.clock += by;
            let clock = s.clock;
            if clock >= s.full_until {
                s.capacity = None;
            }
            let later = s.timers.split_off(&(clock, u64::MAX));
            std::mem::replace(&mut s.timers, later).into_values().collect()
        };
        due.into_iter().for_each(Waker::wake);
    }
}

/// A file on the simulated disk, opened in one power cycle.
struct SimHandle {
    disk: SimDisk,
    node: u64,
    cycle: u64,
}

impl SimHandle {
    /// Runs `f` on the node, or waits forever once the power is out.
    async fn with<T>(&self, f: impl FnOnce(&mut SimState, u64) -> T) -> T {
        let result = {
            let mut s = self.disk.state();
            if self.disk.operate(&mut s, self.cycle) {
                Some(f(&mut s, self.node))
            } else {
                None
            }
        };
        match result {
            Some(r) => r,
            None => powered_off().await,
        }
    }

    async fn write(&self, position: u64, data: Vec<u8>) -> io::Result<usize> {
        self.with(|s, id| {
            let grows = (position + data.len() as u64).saturating_sub(s.nodes[&id].current.len() as u64);
            if grows > 0 && s.capacity.is_some_and(|c| s.used() + grows > c) {
                s.stats.writes_refused += 1;
                return Err(io::Error::from_raw_os_error(28));
            }
            s.stats.writes += 1;
            let node = s.nodes.get_mut(&id).expect("an open node exists");
            put(&mut node.current, position as usize, &data);
            let len = data.len();
            node.pending.push(Change::Write(position, data));
            Ok(len)
        })
        .await
    }

    async fn read(&self, position: u64, len: usize) -> io::Result<Vec<u8>> {
        self.with(|s, id| {
            let current = &s.nodes[&id].current;
            let from = (position as usize).min(current.len());
            Ok(current[from..(from + len).min(current.len())].to_vec())
        })
        .await
    }

    async fn sync(&self) -> io::Result<()> {
        self.with(|s, id| {
            s.stats.syncs += 1;
            let node = s.nodes.get_mut(&id).expect("an open node exists");
            for change in std::mem::take(&mut node.pending) {
                apply(&mut node.durable, &change);
            }
            Ok(())
        })
        .await
    }

    async fn truncate(&self, size: u64) -> io::Result<()> {
        self.with(|s, id| {
            let node = s.nodes.get_mut(&id).expect("an open node exists");
            node.current.resize(size as usize, 0);
            node.pending.push(Change::Truncate(size));
            Ok(())
        })
        .await
    }

    async fn size(&self) -> io::Result<u64> {
        self.with(|s, id| Ok(s.nodes[&id].current.len() as u64)).await
    }
}

/// A sleep on the simulated clock.
struct SimSleep {
    disk: SimDisk,
    deadline: Duration,
    id: Option<u64>,
}

impl Future for SimSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let mut s = this.disk.state();
        if s.clock >= this.deadline {
            return Poll::Ready(());
        }
        let id = *this.id.get_or_insert_with(|| {
            s.next_timer += 1;
            s.next_timer
        });
        s.timers.insert((this.deadline, id), cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for SimSleep {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.disk.state().timers.remove(&(self.deadline, id));
        }
    }
}
