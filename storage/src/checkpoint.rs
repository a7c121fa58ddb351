//! Small state files next to a partition's segments, replaced atomically: the log
//! start offset and cleaner position (`state.ckpt`), and the clean-shutdown marker
//! (`clean.ckpt`).
//!
//! A file is written to a temporary name, fsynced, renamed over the old one and the
//! directory fsynced, so a crash leaves either the old or the new version, never a
//! mix; a CRC32C over the body catches a file damaged on disk, which then counts as
//! absent. The writes run on glommio's blocking thread: they are a few hundred bytes
//! but an fsync of a directory can take milliseconds the reactor must not spend.
//!
//! Kafka keeps these as text checkpoint files shared by all partitions of a log dir;
//! per-partition files keep a partition's state where its data is, so moving or
//! deleting the directory is the whole operation.

use std::path::{Path, PathBuf};

use bytes::{Buf, BufMut};

use crate::error::StorageError;

const MAGIC: &[u8; 8] = b"KEELCKP1";

/// Name of the per-partition state checkpoint.
pub const STATE_FILE: &str = "state.ckpt";
/// Name of the clean-shutdown marker.
pub const CLEAN_FILE: &str = "clean.ckpt";

/// Durable per-partition state that segment files alone cannot tell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionState {
    /// Moved by DeleteRecords and retention; may point inside the first segment.
    pub log_start_offset: i64,
    /// Offsets below this were compacted with a complete key map.
    pub cleaned_upto: i64,
}

impl PartitionState {
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(16);
        body.put_i64(self.log_start_offset);
        body.put_i64(self.cleaned_upto);
        body
    }

    pub fn decode(mut body: &[u8]) -> Option<PartitionState> {
        if body.len() < 16 {
            return None;
        }
        Some(PartitionState { log_start_offset: body.get_i64(), cleaned_upto: body.get_i64() })
    }
}

/// Frames `body` with the magic, its length and its CRC.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 16);
    out.extend_from_slice(MAGIC);
    out.put_u32(body.len() as u32);
    out.put_u32(crc32c::crc32c(body));
    out.extend_from_slice(body);
    out
}

/// The body of a framed file, or `None` when it is damaged or not ours.
pub fn unframe(data: &[u8]) -> Option<&[u8]> {
    if data.len() < 16 || &data[..8] != MAGIC {
        return None;
    }
    let mut head = &data[8..16];
    let len = head.get_u32() as usize;
    let crc = head.get_u32();
    let body = data.get(16..16 + len)?;
    (crc32c::crc32c(body) == crc && data.len() == 16 + len).then_some(body)
}

/// Atomically replaces `dir/name` with `body`, durably, off the reactor thread.
pub async fn write(dir: &Path, name: &str, body: Vec<u8>) -> Result<(), StorageError> {
    let path = dir.join(name);
    let dir = dir.to_path_buf();
    let data = frame(&body);
    let target = path.clone();
    glommio::executor()
        .spawn_blocking(move || write_blocking(&dir, &target, &data))
        .await
        .map_err(|e| StorageError::io("write checkpoint", &path, e))
}

fn write_blocking(dir: &Path, path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = tmp_path(path);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Reads `dir/name`: `None` if it is absent or damaged.
pub async fn read(dir: &Path, name: &str) -> Option<Vec<u8>> {
    let path = dir.join(name);
    let data = glommio::executor().spawn_blocking(move || std::fs::read(path).ok()).await?;
    unframe(&data).map(<[u8]>::to_vec)
}

/// Removes `dir/name` durably (the clean marker must be gone before the log changes).
pub async fn remove(dir: &Path, name: &str) -> Result<(), StorageError> {
    let path = dir.join(name);
    let dir = dir.to_path_buf();
    let target = path.clone();
    glommio::executor()
        .spawn_blocking(move || match std::fs::remove_file(&target) {
            Ok(()) => std::fs::File::open(&dir)?.sync_all(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        })
        .await
        .map_err(|e| StorageError::io("remove checkpoint", &path, e))
}

/// Fsyncs a directory after renames or removals in it, off the reactor thread.
pub async fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    let path = dir.to_path_buf();
    let target = path.clone();
    glommio::executor()
        .spawn_blocking(move || std::fs::File::open(&target)?.sync_all())
        .await
        .map_err(|e| StorageError::io("sync directory", &path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trip_and_damage() {
        let s = PartitionState { log_start_offset: 42, cleaned_upto: 7 };
        let framed = frame(&s.encode());
        assert_eq!(PartitionState::decode(unframe(&framed).unwrap()), Some(s));
        for i in 0..framed.len() {
            let mut bad = framed.clone();
            bad[i] ^= 0x10;
            assert!(unframe(&bad).and_then(PartitionState::decode) != Some(s), "flip at {i} accepted");
        }
        assert!(unframe(&framed[..framed.len() - 1]).is_none());
    }
}
