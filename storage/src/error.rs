use std::path::{Path, PathBuf};

/// Expected storage failures, with the operation and path they happened on. The broker
/// maps them to Kafka error codes at its handler boundary.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{op} {path}: {source}")]
    Io { op: &'static str, path: PathBuf, source: std::io::Error },
    #[error("corrupt batch in {path} at byte {position}: {reason}")]
    Corrupt { path: PathBuf, position: u64, reason: String },
    #[error("offset {offset} is outside the log [{start}, {end})")]
    OffsetOutOfRange { offset: i64, start: i64, end: i64 },
}

impl StorageError {
    pub fn io(op: &'static str, path: &Path, source: std::io::Error) -> StorageError {
        StorageError::Io { op, path: path.to_path_buf(), source }
    }

    /// True when the device is out of space: retriable once space returns. glommio's
    /// I/O errors reach us rebuilt with their kind but without the OS error number.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StorageError::Io { source, .. }
            if source.raw_os_error() == Some(libc_enospc()) || source.kind() == std::io::ErrorKind::StorageFull)
    }
}

/// ENOSPC: the device is full.
pub(crate) const fn libc_enospc() -> i32 {
    28
}
