//! A partition's small state as its log sees it: entries under the partition's key
//! prefix in the shard's state store ([`StateKeys`]), and what the log needs of that
//! store ([`StateStore`]).
//!
//! The store ([`crate::kv::ShardKv`]) keeps its entries in a log of its own, written
//! by the shard's flush loop, so it is built on the log; the log, its recovery and its
//! checkpoint snapshots reach it through this trait instead of naming it.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use bytes::Bytes;
use glommio::sync::Semaphore;

use crate::error::StorageError;

/// A write to the store, done once it is durable.
pub type StoreWrite<'a> = Pin<Box<dyn Future<Output = Result<(), StorageError>> + 'a>>;

/// The shard's key-value store, as the logs keeping their state in it use it.
pub trait StateStore {
    fn get(&self, key: &str) -> Option<Bytes>;

    /// Keys starting with `prefix`, in order.
    fn keys_with_prefix(&self, prefix: &str) -> Vec<String>;

    /// Sets `key` to `value`, durably.
    fn put<'a>(&'a self, key: &'a str, value: Bytes) -> StoreWrite<'a>;

    /// Removes `key`, durably (a no-op if it is absent).
    fn delete<'a>(&'a self, key: &'a str) -> StoreWrite<'a>;

    /// Applies the changes as one batch, so they become durable together.
    fn write<'a>(&'a self, changes: &'a [(&'a str, Option<Bytes>)]) -> StoreWrite<'a>;

    /// Orders partitions' checkpoint snapshot writes against the file changes that
    /// invalidate them ([`crate::log::snapshot`]).
    fn snapshot_lock(&self) -> Rc<Semaphore>;
}

/// Where a partition keeps its state in the shard's store: keys under `prefix`.
#[derive(Clone)]
pub struct StateKeys {
    pub kv: Rc<dyn StateStore>,
    pub prefix: String,
}

impl StateKeys {
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Removes every key of this partition (its topic was deleted).
    pub async fn remove_all(&self) -> Result<(), StorageError> {
        let keys = self.kv.keys_with_prefix(&self.prefix);
        let changes: Vec<(&str, Option<Bytes>)> = keys.iter().map(|k| (k.as_str(), None)).collect();
        if changes.is_empty() {
            return Ok(());
        }
        self.kv.write(&changes).await
    }
}
