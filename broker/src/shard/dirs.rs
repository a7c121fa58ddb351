//! The data directories as one shard sees them.
//!
//! A broker has one or more data directories (one per drive). Shard `i` keeps its
//! journal, its state store and the partitions created on it in directory `i % n`
//! (its *home*); a partition moved by AlterReplicaLogDirs lives in another one, and
//! where each partition lives is recorded in the shard's state store.
//!
//! **Failure model.** An I/O error on a partition's files marks that partition's
//! directory offline on the shard that saw it: the shard takes every one of its
//! partitions in that directory offline (KAFKA_STORAGE_ERROR to produce, fetch and
//! ListOffsets; Metadata lists them as offline replicas), while partitions in other
//! directories keep serving. A shard's journal and state store live in its home
//! directory: when that fails, every partition of the shard is offline, wherever its
//! segment files are, because none of them can be made durable any more. Each shard
//! keeps its own view (shards share nothing); DescribeLogDirs reports a directory
//! failed when any shard saw it fail. A failed directory stays offline until the
//! broker restarts (as in Kafka).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::dispatch::{mesh_requests, Serve};
use super::Shard;

/// One data directory and whether this shard saw it fail.
pub struct DataDir {
    pub path: PathBuf,
    /// `path` with symbolic links and `..` resolved, once at start (off the reactor):
    /// what DescribeLogDirs reports, and a name AlterReplicaLogDirs accepts.
    pub canonical: PathBuf,
    failure: RefCell<Option<String>>,
}

impl DataDir {
    /// Why the directory failed, if it did.
    pub fn offline(&self) -> Option<String> {
        self.failure.borrow().clone()
    }
}

#[derive(Clone)]
pub struct DataDirs {
    dirs: Rc<Vec<DataDir>>,
    home: usize,
}

impl DataDirs {
    /// Opens every directory, priming glommio's polled-I/O probe on each (each may
    /// be its own device, and the probe must see an existing file on every one of
    /// them before a file is created there). A directory that cannot be probed
    /// starts offline.
    pub async fn probe(paths: &[PathBuf]) -> DataDirs {
        let mut dirs = Vec::with_capacity(paths.len());
        for path in paths {
            let failure = keel_storage::prime_dma_probe(path).await.err().map(|e| e.to_string());
            if let Some(e) = &failure {
                tracing::error!(dir = %path.display(), error = %e, "data directory failed at start");
            }
            let target = path.clone();
            let canonical =
                glommio::executor().spawn_blocking(move || std::fs::canonicalize(&target).unwrap_or(target)).await;
            dirs.push(DataDir { path: path.clone(), canonical, failure: RefCell::new(failure) });
        }
        DataDirs { dirs: Rc::new(dirs), home: 0 }
    }

    pub fn with_home(self, home: usize) -> DataDirs {
        assert!(home < self.dirs.len(), "home directory {home} of {} directories", self.dirs.len());
        DataDirs { home, ..self }
    }

    pub fn home_index(&self) -> usize {
        self.home
    }

    pub fn home(&self) -> &DataDir {
        &self.dirs[self.home]
    }

    pub fn all(&self) -> &[DataDir] {
        &self.dirs
    }

    pub fn get(&self, index: usize) -> &DataDir {
        &self.dirs[index]
    }

    /// The index of the configured directory `path` names: as configured or as
    /// canonicalized at start, so a client may send either (nothing is looked up on
    /// the file system here, on the reactor).
    pub fn index_of(&self, path: &Path) -> Option<usize> {
        self.dirs.iter().position(|d| d.path == path || d.canonical == path)
    }

    /// The directory holding `path` (the longest configured prefix).
    pub fn index_of_file(&self, path: &Path) -> Option<usize> {
        (0..self.dirs.len())
            .filter(|i| path.starts_with(&self.dirs[*i].path))
            .max_by_key(|i| self.dirs[*i].path.as_os_str().len())
    }

    /// Marks directory `index` failed; returns true if it was online until now.
    pub fn fail(&self, index: usize, why: &str) -> bool {
        let mut failure = self.dirs[index].failure.borrow_mut();
        if failure.is_some() {
            return false;
        }
        tracing::error!(dir = %self.dirs[index].path.display(), error = why, "data directory failed; its partitions go offline");
        *failure = Some(why.to_string());
        true
    }

    /// Why a partition in directory `index` cannot serve: its directory or this
    /// shard's home directory (its journal) failed.
    pub fn unavailable(&self, index: usize) -> Option<String> {
        self.dirs[index]
            .offline()
            .or_else(|| self.home().offline().map(|e| format!("shard journal directory failed: {e}")))
    }
}

// A data directory's failure, told to every shard.
mesh_requests! {
    TakeOffline => (),
}

/// Partitions (of any shard) a failed data directory took offline, for the target
/// shard's Metadata answers.
#[derive(Clone)]
pub struct TakeOffline {
    pub partitions: Vec<super::TopicPartition>,
}

impl Serve for TakeOffline {
    async fn serve(self, shard: Rc<Shard>) {
        shard.offline_partitions.borrow_mut().extend(self.partitions);
    }
}
