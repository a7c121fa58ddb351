//! Moving a partition between this broker's data directories (AlterReplicaLogDirs)
//! while it keeps serving produce and fetch.
//!
//! 1. **Copy in the background.** The partition's files, except the active segment,
//!    are copied into `<target>/<topic>-<partition>.future` on glommio's blocking
//!    thread while produce and fetch go on. Each file's size and modification time are
//!    noted.
//! 2. **Fence.** Appends are fenced (produce waits; fetch goes on): the partition's
//!    single append path (`Partition::append_batches`) is only reached through
//!    `wait_writable`, which waits while the fence is up. The move waits until the
//!    flush loop has journaled everything appended (high watermark = log end), then
//!    closes the log (every byte written and fsynced, and its clean-shutdown
//!    checkpoint saved), takes its io lock (no retention, compaction or flush can
//!    change a file), copies the active segment and every file that changed or
//!    appeared since step 1 (compaction swaps files by rename, retention removes
//!    some), removes copies of files that are gone, and fsyncs every copy and the
//!    directory.
//! 3. **Switch.** The state store's record of the partition's directory
//!    (`dir-owner/<name>`) is changed to the target and made durable, the copy is
//!    renamed to `<target>/<topic>-<partition>` (directory fsynced), the log is opened
//!    there and takes the old log's place behind the same `Rc` (its io lock, change
//!    signal and cache budget), and the fence is lifted. The source directory is
//!    removed afterwards. The fence lasts one active segment's copy, not the log's.
//!
//! **A crash at any point leaves the partition whole in one directory**, because the
//! record is the single switch point and each side of it is complete:
//! - Before the record names the target, the source is the partition: it holds
//!   everything (the copy only read it), the journal replays into it as always, and
//!   the unfinished `.future` copy is removed at the next start.
//! - Once the record names the target, the `.future` copy was already complete and
//!   fsynced (step 2 ends before step 3 starts): the next start renames it into place
//!   if the crash came first (roll forward), and removes the source the record no
//!   longer names. The copy holds the same segment files, with the same base offsets
//!   and sizes, as the source at the fence, so the journal's checkpoint marks and
//!   its records for the partition (keyed by topic id and index, not by path) apply
//!   to it unchanged; appends after the switch go through the same journal key.
//! - Without a record at all (a partition created just before a crash), every
//!   directory is searched: data is never removed because a record is missing.
//!
//! If a step fails before the record changes, the copy is removed and the partition
//! keeps serving from the source. If it fails after, the record is put back to the
//! source; should that fail too, the partition stays fenced (it refuses produce) rather
//! than append to a log the next start would not open.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::time::SystemTime;

use keel_storage::StorageError;

use super::partition::Partition;
use super::partition_dir::{self, remove_dir, DirOwner, FUTURE_SUFFIX};
use super::Shard;

/// (size, modification time) of each file copied, by name.
type Copied = HashMap<String, (u64, Option<SystemTime>)>;

/// Moves `p` into data directory `target`; runs to its end even if nobody waits.
pub async fn run(shard: Rc<Shard>, p: Rc<Partition>, target: usize) {
    let name = format!("{}-{}", p.topic, p.index);
    let from = shard.dirs.get(p.dir_index.get()).path.clone();
    let to = shard.dirs.get(target).path.clone();
    tracing::info!(partition = %name, from = %from.display(), to = %to.display(), "moving partition");
    match move_log(&shard, &p, target, &name).await {
        Ok(()) => {
            tracing::info!(partition = %name, to = %to.display(), "partition moved");
            p.end_move(true);
        }
        Err(MoveError::BeforeSwitch(e)) => {
            tracing::error!(partition = %name, to = %to.display(), error = %e, "partition move failed; it stays where it was");
            let _ = remove_dir(to.join(format!("{name}{FUTURE_SUFFIX}"))).await;
            p.end_move(true);
        }
        Err(MoveError::AfterSwitch(e)) => {
            tracing::error!(partition = %name, error = %e, "partition move failed after its switch point; restoring the record");
            let meta = shard.meta();
            let owner = DirOwner::encode(p.topic_id, &from, (meta.version, &meta.cluster_id));
            let restored = shard.kv.put(&partition_dir::dir_owner_key(&name), owner).await;
            if let Err(e) = &restored {
                tracing::error!(partition = %name, error = %e, "cannot restore the partition's directory record; it stays fenced");
            }
            p.end_move(restored.is_ok());
        }
    }
}

enum MoveError {
    BeforeSwitch(StorageError),
    AfterSwitch(StorageError),
}

async fn move_log(shard: &Rc<Shard>, p: &Rc<Partition>, target: usize, name: &str) -> Result<(), MoveError> {
    use MoveError::{AfterSwitch, BeforeSwitch};
    let source = p.log.borrow().dir().to_path_buf();
    let target_base = shard.dirs.get(target).path.clone();
    let future = target_base.join(format!("{name}{FUTURE_SUFFIX}"));
    let dest = target_base.join(name);
    remove_dir(future.clone()).await.map_err(BeforeSwitch)?;
    remove_dir(dest.clone()).await.map_err(BeforeSwitch)?;
    // 1. Sealed segments and other files, in the background.
    let active = p.log.borrow().active_segment_file_name();
    let copied = copy_changed(p, &source, &future, Copied::new(), active).await.map_err(BeforeSwitch)?;
    // 2. Fence appends, let the flush loop journal what was appended, close the log
    //    and copy the rest under its io lock.
    p.fence();
    let fenced_at = std::time::Instant::now();
    wait_journaled(shard, p).await;
    keel_storage::recovery::close(&p.log).await.map_err(BeforeSwitch)?;
    let lock = p.log.borrow().io_lock();
    let _permit = lock.acquire_permit(1).await.expect("the io lock is never closed");
    copy_changed(p, &source, &future, copied, None).await.map_err(BeforeSwitch)?;
    keel_storage::disk::sync_dir(&future).await.map_err(BeforeSwitch)?;
    // 3. The switch point: the record names the target once the copy is complete.
    let meta = shard.meta();
    let owner = DirOwner::encode(p.topic_id, &target_base, (meta.version, &meta.cluster_id));
    shard.kv.put(&partition_dir::dir_owner_key(name), owner).await.map_err(BeforeSwitch)?;
    let (from, to) = (future.clone(), dest.clone());
    glommio::executor()
        .spawn_blocking(move || std::fs::rename(&from, &to))
        .await
        .map_err(|e| AfterSwitch(StorageError::io("rename moved partition", &future, e)))?;
    keel_storage::disk::sync_dir(&target_base).await.map_err(AfterSwitch)?;
    let mut moved = p.reopen_at(shard, &dest).await.map_err(AfterSwitch)?;
    {
        let mut log = p.log.borrow_mut();
        moved.take_place_of(&log);
        let old = std::mem::replace(&mut *log, moved);
        drop(log);
        drop(old);
    }
    p.dir_index.set(target);
    drop(_permit);
    p.unfence();
    p.log.borrow().changed.notify();
    tracing::info!(
        partition = name,
        fence_ms = fenced_at.elapsed().as_millis() as u64,
        "appends fenced during the switch"
    );
    if let Err(e) = remove_dir(source.clone()).await {
        tracing::warn!(dir = %source.display(), error = %e, "cannot remove a moved partition's old directory; the next start removes it");
    }
    Ok(())
}

/// Waits until every batch appended before the fence is in the journal (the high
/// watermark reached the log end).
async fn wait_journaled(shard: &Shard, p: &Partition) {
    loop {
        let wait = {
            let l = p.log.borrow();
            if l.high_watermark() >= l.log_end_offset() || l.flush_error.is_some() {
                return;
            }
            l.changed.wait()
        };
        shard.flush.mark_dirty(&p.log);
        futures_lite::future::or(wait, glommio::timer::sleep(std::time::Duration::from_millis(50))).await;
    }
}

/// Copies every file of `source` whose size or modification time differs from
/// `copied` (all of them at first) into `dest`, except `skip`; removes copies of
/// files no longer in `source`; fsyncs every file it wrote. Runs on glommio's
/// blocking thread and reports progress on the partition.
async fn copy_changed(
    p: &Rc<Partition>,
    source: &Path,
    dest: &Path,
    copied: Copied,
    skip: Option<String>,
) -> Result<Copied, StorageError> {
    let (source, dest) = (source.to_path_buf(), dest.to_path_buf());
    let progress = p.move_counter();
    let err_path = dest.clone();
    glommio::executor()
        .spawn_blocking(move || copy_changed_blocking(&source, &dest, copied, skip.as_deref(), &progress))
        .await
        .map_err(|e| StorageError::io("copy partition", &err_path, e))
}

fn copy_changed_blocking(
    source: &Path,
    dest: &Path,
    mut copied: Copied,
    skip: Option<&str>,
    progress: &std::sync::atomic::AtomicU64,
) -> std::io::Result<Copied> {
    std::fs::create_dir_all(dest)?;
    let mut present = Vec::new();
    for entry in std::fs::read_dir(source)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if !meta.is_file() {
            continue;
        }
        let file = entry.file_name().to_string_lossy().into_owned();
        present.push(file.clone());
        if Some(file.as_str()) == skip {
            continue;
        }
        let stamp = (meta.len(), meta.modified().ok());
        if copied.get(&file) == Some(&stamp) {
            continue;
        }
        let to = dest.join(&file);
        std::fs::copy(entry.path(), &to)?;
        std::fs::File::open(&to)?.sync_all()?;
        progress.fetch_add(stamp.0, std::sync::atomic::Ordering::Relaxed);
        copied.insert(file, stamp);
    }
    copied.retain(|file, _| present.contains(file));
    for entry in std::fs::read_dir(dest)? {
        let file = entry?.file_name().to_string_lossy().into_owned();
        if !present.contains(&file) {
            std::fs::remove_file(dest.join(&file))?;
        }
    }
    Ok(copied)
}
