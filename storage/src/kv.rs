//! The shard's key-value store for small broker state: each partition's log start
//! offset and cleaner position, its clean-shutdown checkpoint and its checkpoint
//! snapshots ([`crate::log::snapshot`]).
//!
//! The store is itself a log: a put or a delete is one record batch (key, value or
//! tombstone) appended to an internal [`PartitionLog`] in `<data dir>/.kv/shard-<id>`,
//! and written by the shard's flush loop in the same pass as the partitions' data:
//! the same O_DIRECT writer, the same group commit, the same CRC-checked recovery. A
//! write returns once it is durable. Opening replays the log into a map.
//!
//! When the log outgrows four times its live entries, a snapshot of the map is
//! appended to a fresh segment and, once durable, the older segments are removed.
//! Replaying the whole history or any suffix that starts at a snapshot gives the same
//! map (a snapshot re-puts every live key, and a key deleted before it stays deleted),
//! so a crash anywhere in that sequence loses nothing.
//!
//! Being a log, the store sits above the log, its recovery, retention and the flush
//! loop; the partitions' logs write their state to it through the
//! [`StateStore`](crate::state::StateStore) trait it implements, never naming it.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use glommio::sync::Semaphore;
use keel_protocol::batch::build_batch;

use crate::batch_filter;
use crate::error::StorageError;
use crate::flush::FlushQueue;
use crate::log::{self, LogConfig, PartitionLog};
use crate::retention::{self, RetentionPolicy};
use crate::segment_io::SegmentReader;
use crate::state::{StateKeys, StateStore, StoreWrite};

/// The store's name in the shard journal's records (partitions' names are 20 bytes).
const JOURNAL_KEY: &[u8] = b"state-store";
/// The log grows to this size before a snapshot is considered.
const SNAPSHOT_MIN_BYTES: u64 = 4 << 20;
/// Records per snapshot batch.
const SNAPSHOT_BATCH_RECORDS: usize = 256;

pub struct ShardKv {
    log: Rc<RefCell<PartitionLog>>,
    flush: Rc<FlushQueue>,
    map: RefCell<BTreeMap<String, Bytes>>,
    /// What the live entries take in a snapshot, kept as they change (summing the map
    /// on every write made each write cost as much as the whole store).
    live_bytes: Cell<u64>,
    snapshotting: Cell<bool>,
    /// Orders partitions' checkpoint snapshot writes against the file changes that
    /// invalidate them ([`crate::log::snapshot`]).
    snapshot_lock: Rc<Semaphore>,
    /// Writes take effect in the order they were called. One awaiting a segment roll
    /// must not land after a later write of the same key: a Raft group's record
    /// written as its topic was deleted could come back after the delete so.
    turn: Semaphore,
}

impl ShardKv {
    /// Opens (recovering) the store in `dir`; `flush` is the shard's flush loop.
    pub async fn open(dir: &Path, flush: Rc<FlushQueue>) -> Result<Rc<ShardKv>, StorageError> {
        let config = LogConfig {
            segment_bytes_max: 256 << 20,
            preallocate_step_bytes: 256 << 10,
            cache_bytes_max: 0,
            ..LogConfig::default()
        };
        let log = match flush.journal() {
            Some(journal) => {
                let key = Bytes::from_static(JOURNAL_KEY);
                PartitionLog::open_journaled(dir, config, None, journal, key, |_| {}).await?.0
            }
            None => PartitionLog::open(dir, config, None, |_| {}).await?,
        };
        let log = Rc::new(RefCell::new(log));
        if flush.journal().is_some() {
            flush.register(&log);
        }
        let mut map = BTreeMap::new();
        let segments: Vec<_> = log.borrow().segments.iter().map(SegmentReader::new).collect();
        for mut reader in segments {
            while let Some((header, batch)) = reader.next().await? {
                let body = batch_filter::decompressed_body(&header, &batch).map_err(|e| corrupt(dir, e))?;
                for r in batch_filter::parse_records(&header, &body).map_err(|e| corrupt(dir, e))? {
                    let Some(key) = r.key.and_then(|k| std::str::from_utf8(k).ok()) else {
                        continue;
                    };
                    match r.value {
                        Some(v) => map.insert(key.to_string(), Bytes::copy_from_slice(v)),
                        None => map.remove(key),
                    };
                }
            }
        }
        let live_bytes = map.iter().map(|(k, v)| entry_bytes(k, v)).sum();
        let kv = Rc::new(ShardKv {
            log,
            flush,
            map: RefCell::new(map),
            live_bytes: Cell::new(live_bytes),
            snapshotting: Cell::new(false),
            snapshot_lock: Rc::new(Semaphore::new(1)),
            turn: Semaphore::new(1),
        });
        kv.snapshot_if_large().await?;
        Ok(kv)
    }

    /// Opens a store with a flush loop of its own, for logs used outside a broker
    /// shard (tools and tests).
    pub async fn open_standalone(dir: &Path) -> Result<Rc<ShardKv>, StorageError> {
        let flush = FlushQueue::new();
        glommio::spawn_local(flush.clone().run()).detach();
        ShardKv::open(dir, flush).await
    }

    /// The state keys of the log in `dir`, in a standalone store beside it
    /// (`<parent>/.kv`), opened afresh as a restarted broker would (tools and tests).
    pub async fn standalone_keys_for(dir: &Path) -> Result<StateKeys, StorageError> {
        let parent = dir.parent().unwrap_or(dir);
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(ShardKv::open_standalone(&parent.join(".kv")).await?.keys(&format!("{name}/")))
    }

    /// The keys of one partition's state.
    pub fn keys(self: &Rc<Self>, prefix: &str) -> StateKeys {
        StateKeys { kv: self.clone(), prefix: prefix.to_string() }
    }

    pub fn get(&self, key: &str) -> Option<Bytes> {
        self.map.borrow().get(key).cloned()
    }

    /// Keys starting with `prefix`, in order.
    pub fn keys_with_prefix(&self, prefix: &str) -> Vec<String> {
        self.map
            .borrow()
            .range(prefix.to_string()..)
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Sets `key` to `value`, durably.
    pub async fn put(&self, key: &str, value: Bytes) -> Result<(), StorageError> {
        self.write(&[(key, Some(value))]).await
    }

    /// Removes `key`, durably (a no-op if it is absent).
    pub async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.write_in_turn(&[(key, None)], true).await
    }

    /// Applies the changes as one batch, so they become durable together.
    pub async fn write(&self, changes: &[(&str, Option<Bytes>)]) -> Result<(), StorageError> {
        self.write_in_turn(changes, false).await
    }

    /// `write`, after every write called before it has taken effect; `if_present`:
    /// nothing is written unless a key is in the store by then.
    async fn write_in_turn(&self, changes: &[(&str, Option<Bytes>)], if_present: bool) -> Result<(), StorageError> {
        let last = {
            let _turn = self.turn.acquire_permit(1).await.expect("the store's turn is never closed");
            if if_present && !changes.iter().any(|(k, _)| self.map.borrow().contains_key(*k)) {
                return Ok(());
            }
            let records: Vec<_> = changes.iter().map(|(k, v)| (Some(k.as_bytes()), v.as_deref())).collect();
            let batch = build_batch(0, now_ms(), &records);
            log::roll_if_needed(&self.log, batch.len()).await?;
            // The map changes with the append, in one step, so its order is the log's.
            let last = self.log.borrow_mut().append(&batch, 0, None).last_offset();
            self.apply(changes);
            last
        };
        self.wait_durable(last).await?;
        self.snapshot_if_large().await
    }

    fn apply(&self, changes: &[(&str, Option<Bytes>)]) {
        let mut map = self.map.borrow_mut();
        let mut live = self.live_bytes.get();
        for (k, v) in changes {
            let old = match v {
                Some(v) => {
                    live += entry_bytes(k, v);
                    map.insert(k.to_string(), v.clone())
                }
                None => map.remove(*k),
            };
            if let Some(old) = old {
                live -= entry_bytes(k, &old);
            }
        }
        self.live_bytes.set(live);
    }

    async fn wait_durable(&self, offset: i64) -> Result<(), StorageError> {
        self.flush.mark_dirty(&self.log);
        loop {
            let wait = {
                let l = self.log.borrow();
                if l.high_watermark() > offset {
                    return Ok(());
                }
                if let Some(e) = &l.flush_error {
                    return Err(StorageError::io("write state", l.dir(), std::io::Error::other(e.clone())));
                }
                if self.flush.stopped() {
                    return Err(StorageError::io("write state", l.dir(), std::io::Error::other("flush loop stopped")));
                }
                l.changed.wait()
            };
            wait.await;
        }
    }

    async fn snapshot_if_large(&self) -> Result<(), StorageError> {
        let size = self.log.borrow().size_bytes();
        let live = self.live_bytes.get();
        if self.snapshotting.get() || size < SNAPSHOT_MIN_BYTES || size < 4 * live {
            return Ok(());
        }
        self.snapshotting.set(true);
        let result = self.snapshot().await;
        self.snapshotting.set(false);
        result
    }

    async fn snapshot(&self) -> Result<(), StorageError> {
        log::roll(&self.log).await?;
        let (first, last) = {
            let map = self.map.borrow();
            let mut l = self.log.borrow_mut();
            let first = l.log_end_offset();
            let entries: Vec<_> = map.iter().collect();
            for chunk in entries.chunks(SNAPSHOT_BATCH_RECORDS) {
                let records: Vec<_> = chunk.iter().map(|(k, v)| (Some(k.as_bytes()), Some(&v[..]))).collect();
                l.append(&build_batch(0, now_ms(), &records), 0, None);
            }
            (first, l.log_end_offset() - 1)
        };
        if last >= first {
            self.wait_durable(last).await?;
        }
        retention::delete_records(&self.log, first).await?;
        let policy = RetentionPolicy { delete: false, retention_ms: -1, retention_bytes: -1 };
        let outcome = retention::enforce(&self.log, now_ms(), &policy).await?;
        tracing::info!(
            entries = self.map.borrow().len(),
            segments_removed = outcome.segments_deleted,
            "state store snapshot"
        );
        Ok(())
    }

    /// Bytes the store's log holds on disk (for tests and metrics).
    pub fn log_bytes(&self) -> u64 {
        self.log.borrow().size_bytes()
    }
}

/// Bytes an entry takes in a snapshot (its key, value and record overhead).
fn entry_bytes(key: &str, value: &[u8]) -> u64 {
    (key.len() + value.len() + 32) as u64
}

fn corrupt(dir: &Path, reason: String) -> StorageError {
    StorageError::Corrupt { path: dir.to_path_buf(), position: 0, reason }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

impl StateStore for ShardKv {
    fn get(&self, key: &str) -> Option<Bytes> {
        ShardKv::get(self, key)
    }

    fn keys_with_prefix(&self, prefix: &str) -> Vec<String> {
        ShardKv::keys_with_prefix(self, prefix)
    }

    fn put<'a>(&'a self, key: &'a str, value: Bytes) -> StoreWrite<'a> {
        Box::pin(ShardKv::put(self, key, value))
    }

    fn delete<'a>(&'a self, key: &'a str) -> StoreWrite<'a> {
        Box::pin(ShardKv::delete(self, key))
    }

    fn write<'a>(&'a self, changes: &'a [(&'a str, Option<Bytes>)]) -> StoreWrite<'a> {
        Box::pin(ShardKv::write(self, changes))
    }

    fn snapshot_lock(&self) -> Rc<Semaphore> {
        self.snapshot_lock.clone()
    }
}
