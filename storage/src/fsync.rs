//! What an fdatasync failure means. After one the page cache and the disk are in an
//! unknown state, so by default the process stops ([`sync_or_die`]) and recovery
//! re-reads what is really on disk. A thread whose owner can take a failed data
//! directory's logs offline says so once ([`survive_sync_failures`]); the flush and
//! journal paths of that thread then get the failure as an error ([`sync_or_fail`]).
//! Every successful fdatasync is reported to [`crate::sync_log`].

use std::path::Path;

use crate::disk::File;
use crate::error::StorageError;
use crate::sync_log;

/// An fdatasync failure leaves the page cache and the disk in an unknown state; the
/// only safe answer is to stop and let recovery re-read what is really on disk.
pub(crate) async fn sync_or_die(file: &File, path: &Path) {
    if let Err(e) = file.fdatasync().await {
        eprintln!("keel: fatal: fdatasync {} failed: {e}; stopping to recover from disk", path.display());
        std::process::exit(70);
    }
    sync_log::synced_file(path);
}

thread_local! {
    static SYNC_FAILURES_SURVIVABLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Says this thread's owner can take a failed directory's logs offline: from now on
/// an fdatasync failure in the flush and journal paths of this thread is returned as
/// an error (the caller must then never trust those files again) instead of
/// stopping the process. A broker shard with several data directories calls it.
pub fn survive_sync_failures() {
    SYNC_FAILURES_SURVIVABLE.with(|s| s.set(true));
}

/// [`sync_or_die`], or an error when [`survive_sync_failures`] was called.
pub(crate) async fn sync_or_fail(file: &File, path: &Path) -> Result<(), StorageError> {
    if SYNC_FAILURES_SURVIVABLE.with(|s| s.get()) {
        file.fdatasync().await.map_err(|e| StorageError::io("fdatasync", path, e))?;
        sync_log::synced_file(path);
        return Ok(());
    }
    sync_or_die(file, path).await;
    Ok(())
}
