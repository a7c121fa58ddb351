//! Reading the journal at start-up: every record from the last checkpoint's starting
//! file on, grouped by log and filtered by each log's mark.

use std::collections::HashMap;
use std::path::Path;

use crate::disk::File;
use bytes::Bytes;

use super::record::{Mark, Position, Record};
use crate::error::StorageError;

/// What the journal holds for one log.
#[derive(Debug, Default)]
pub struct LogRecovery {
    /// Where the last checkpoint left the log's segment files.
    pub mark: Option<Mark>,
    /// The log was created after its mark (or the last checkpoint): its files hold
    /// nothing the journal does not.
    pub created: bool,
    /// `Data` and `Truncate` records after the mark, in journal order.
    pub records: Vec<Record>,
}

impl LogRecovery {
    /// True when the journal says anything of this log.
    pub fn is_empty(&self) -> bool {
        self.mark.is_none() && !self.created && self.records.is_empty()
    }
}

pub(super) struct Found {
    pub replay_from: u64,
    pub bytes_after_checkpoint: u64,
    pub logs: HashMap<Bytes, LogRecovery>,
}

/// Reads the files `seqs` (in order) of the journal in `dir`.
pub(super) async fn read_all(dir: &Path, seqs: &[u64]) -> Result<Found, StorageError> {
    let mut files = Vec::with_capacity(seqs.len());
    for &seq in seqs {
        files.push((seq, read_file(&super::file_path(dir, seq)).await?));
    }
    Ok(group(decode(&files)))
}

/// Every record of the files (sequence number and contents, in order), each file's
/// read up to the first that does not decode.
pub(super) fn decode(files: &[(u64, Bytes)]) -> Vec<(Position, Record)> {
    let mut records = Vec::new();
    for (seq, data) in files {
        let mut offset = 0usize;
        while let Some((record, len)) = Record::decode(&data.slice(offset..), *seq) {
            records.push((Position { seq: *seq, offset: offset as u64 }, record));
            offset += len;
        }
        tracing::debug!(seq, records_end = offset, "journal file read");
    }
    records
}

/// What recovery needs of the records: the last checkpoint's `replay_from`, and for
/// each log its mark and the records after it (from its last `Create` on).
pub(super) fn group(mut records: Vec<(Position, Record)>) -> Found {
    let last_checkpoint = records.iter().rposition(|(_, r)| matches!(r, Record::Checkpoint { .. }));
    let (replay_from, mut marks) = match last_checkpoint.map(|i| records.swap_remove(i).1) {
        Some(Record::Checkpoint { replay_from, marks }) => (replay_from, marks.into_iter().collect()),
        _ => (0, HashMap::new()),
    };
    records.sort_by_key(|(p, _)| *p);
    let mut logs: HashMap<Bytes, LogRecovery> = HashMap::new();
    let mut bytes_after_checkpoint = 0;
    for (position, record) in records {
        if position.seq < replay_from {
            continue;
        }
        bytes_after_checkpoint += record.encoded_len() as u64;
        let Some(key) = record.key().cloned() else { continue };
        let mark: Option<Mark> = marks.get(&key).copied();
        if mark.is_some_and(|m| position < m.position) {
            continue;
        }
        let log = logs.entry(key).or_insert_with(|| LogRecovery { mark, ..LogRecovery::default() });
        match record {
            Record::Create { .. } => {
                log.created = true;
                log.records.clear();
            }
            r => log.records.push(r),
        }
    }
    for (key, mark) in marks.drain() {
        logs.entry(key).or_insert_with(|| LogRecovery { mark: Some(mark), ..LogRecovery::default() });
    }
    Found { replay_from, bytes_after_checkpoint, logs }
}

async fn read_file(path: &Path) -> Result<Bytes, StorageError> {
    let file = File::open(path).await.map_err(|e| StorageError::io("open journal", path, e))?;
    let size = file.file_size().await.map_err(|e| StorageError::io("stat journal", path, e))?;
    let mut data = Vec::with_capacity(size as usize);
    while (data.len() as u64) < size {
        let want = (size - data.len() as u64).min(crate::segment_io::CHUNK_BYTES as u64) as usize;
        let chunk =
            file.read_at(data.len() as u64, want).await.map_err(|e| StorageError::io("read journal", path, e))?;
        if chunk.is_empty() {
            break;
        }
        data.extend_from_slice(&chunk);
    }
    let _ = file.close().await;
    Ok(Bytes::from(data))
}
