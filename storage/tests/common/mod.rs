//! Helpers the storage integration tests share: an executor to run a test's future
//! on, and opening a log with its state keys in a standalone store beside it (as a
//! restarted broker would).
#![allow(dead_code)]

use std::cell::RefCell;
use std::future::Future;
use std::path::Path;
use std::rc::Rc;

use glommio::LocalExecutorBuilder;
use keel_storage::kv::ShardKv;
use keel_storage::log::{LogConfig, PartitionLog};
use keel_storage::OpenKind;

/// Runs `f` on a fresh glommio executor and returns its output.
pub fn run<T: Send + 'static, F: Future<Output = T> + 'static>(f: impl FnOnce() -> F + Send + 'static) -> T {
    LocalExecutorBuilder::default().spawn(move || async move { f().await }).unwrap().join().unwrap()
}

/// Opens (recovering) the log in `dir`, telling how it was opened.
pub async fn open_log_reporting(dir: &Path, config: LogConfig) -> (Rc<RefCell<PartitionLog>>, OpenKind) {
    let keys = ShardKv::standalone_keys_for(dir).await.unwrap();
    let (log, kind) = PartitionLog::open_reporting(dir, config, Some(keys), |_| {}).await.unwrap();
    (Rc::new(RefCell::new(log)), kind)
}

/// Opens (recovering) the log in `dir`.
pub async fn open_log(dir: &Path, config: LogConfig) -> Rc<RefCell<PartitionLog>> {
    open_log_reporting(dir, config).await.0
}
