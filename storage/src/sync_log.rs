//! A test-only record of what each fdatasync made durable, so a fault harness can
//! turn a `kill -9` into a power loss: after the kill it cuts every file back to what
//! was durable and tears the tail (`compat/go/cmd/ledger`, the `power` round).
//!
//! Off unless the process starts with `KEEL_TEST_SYNC_LOG=<file>`. Then every
//! successful fdatasync appends one line `<path>\t<length>\t<kind>` to that file before
//! the caller goes on (so before anything it acknowledges): `cut` means the file's
//! first `length` bytes are durable and what follows may be lost or torn; `overwrite`
//! (a preallocated journal file, whose size is durable from its creation) means bytes
//! past `length` may be torn but the file keeps its size. The last line for a path is
//! the one that counts. A file with no line is left alone, which is a kinder crash than
//! a power loss, never a harsher one.
//!
//! The lines are written with one `write` each to a file opened with O_APPEND, shared
//! by the shards behind a lock: a blocking call on the data path, acceptable in this
//! mode only.

use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

static LOG: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();

fn log() -> Option<&'static Mutex<std::fs::File>> {
    LOG.get_or_init(|| {
        let path = std::env::var_os("KEEL_TEST_SYNC_LOG")?;
        match std::fs::OpenOptions::new().create(true).append(true).open(&path) {
            Ok(f) => Some(Mutex::new(f)),
            Err(e) => {
                eprintln!("keel: KEEL_TEST_SYNC_LOG {}: {e}", Path::new(&path).display());
                std::process::exit(2);
            }
        }
    })
    .as_ref()
}

/// After a successful fdatasync of `path`: its current size is durable. A journal file
/// is left to [`synced_journal`]: its size says nothing of what a pass made durable.
pub(crate) fn synced_file(path: &Path) {
    let Some(log) = log() else { return };
    if path.extension().is_some_and(|e| e == "journal") {
        return;
    }
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    write_line(log, path, len, "cut");
}

/// After a successful fdatasync of the preallocated journal file `path`: its bytes
/// before `end` are durable.
pub(crate) fn synced_journal(path: &Path, end: u64) {
    if let Some(log) = log() {
        write_line(log, path, end, "overwrite");
    }
}

fn write_line(log: &Mutex<std::fs::File>, path: &Path, len: u64, kind: &str) {
    let line = format!("{}\t{len}\t{kind}\n", path.display());
    let mut f = log.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = f.write_all(line.as_bytes()) {
        eprintln!("keel: KEEL_TEST_SYNC_LOG write failed: {e}");
        std::process::exit(2);
    }
}
