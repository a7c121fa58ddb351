//! Reading the journal at start-up: every record from the last checkpoint's starting
//! file on (the files before it are not read), grouped by log and filtered by each
//! log's mark.

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
    /// The log's records from its mark's tail to the mark, in journal order.
    pub tail_records: Vec<Record>,
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

/// Reads the journal in `dir`, whose files are `seqs` (in order), from the newest file
/// back to the first one the last checkpoint kept (its `replay_from`): the files before
/// it hold only records that checkpoint made unnecessary, and retired files kept for
/// recycling still hold theirs, which would be read for nothing.
pub(super) async fn read_all(dir: &Path, seqs: &[u64]) -> Result<Found, StorageError> {
    let mut newest_first = Vec::new();
    let mut replay_from = None;
    for &seq in seqs.iter().rev() {
        if replay_from.is_some_and(|from| seq < from) {
            break;
        }
        let records = decode(&[(seq, read_file(&super::file_path(dir, seq)).await?)]);
        replay_from = replay_from.or_else(|| {
            records.iter().rev().find_map(|(_, r)| match r {
                Record::Checkpoint { replay_from, .. } => Some(*replay_from),
                _ => None,
            })
        });
        newest_first.push(records);
    }
    Ok(group(newest_first.into_iter().rev().flatten().collect()))
}

/// Every record of the files (sequence number and contents, in order), each file's
/// read up to the first that does not decode and is not followed, after padding, by
/// the `Pass` record of the next pass. `Pass` records are not returned.
pub(super) fn decode(files: &[(u64, Bytes)]) -> Vec<(Position, Record)> {
    let mut records = Vec::new();
    for (seq, data) in files {
        let mut offset = 0usize;
        loop {
            match Record::decode(&data.slice(offset..), *seq) {
                // Only padding comes before a `Pass` record: here, it is not the writer's.
                Some((Record::Pass { .. }, _)) => break,
                Some((record, len)) => {
                    records.push((Position { seq: *seq, offset: offset as u64 }, record));
                    offset += len;
                }
                None => match next_pass(data, offset, *seq) {
                    Some(after) => offset = after,
                    None => break,
                },
            }
        }
        tracing::debug!(seq, records_end = offset, "journal file read");
    }
    records
}

/// Where the records of the pass after the records ending at `end` start: the next
/// pass begins on the next boundary of the device's block (512 bytes to 4 KiB) with a
/// `Pass` record that names `end`.
fn next_pass(data: &Bytes, end: usize, seq: u64) -> Option<usize> {
    const SECTOR: usize = 512;
    let last = end.div_ceil(4096) * 4096;
    let first = end.div_ceil(SECTOR) * SECTOR;
    (first..=last).step_by(SECTOR).filter(|at| *at > end && *at < data.len()).find_map(|at| {
        match Record::decode(&data.slice(at..), seq) {
            Some((Record::Pass { prev_end }, len)) if prev_end == end as u64 => Some(at + len),
            _ => None,
        }
    })
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
        if mark.is_some_and(|m| position < m.replay_start()) {
            continue;
        }
        let log = logs.entry(key).or_insert_with(|| LogRecovery { mark, ..LogRecovery::default() });
        if mark.is_some_and(|m| position < m.position) {
            log.tail_records.push(record);
            continue;
        }
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
    crate::stats::update(|s| {
        s.journal_files_read += 1;
        s.journal_bytes_read += data.len() as u64;
    });
    Ok(Bytes::from(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Tail;

    fn data(key: &'static [u8], len: usize) -> Record {
        Record::Data { key: Bytes::from_static(key), batches: vec![Bytes::from(vec![7u8; len])] }
    }

    /// Two passes written as the journal writes them; the second's first record fills
    /// its first block exactly, so its second starts on a block boundary.
    fn two_passes() -> (Vec<u8>, Vec<Record>, Vec<Record>, u64) {
        let (block, seq) = (512, 9);
        let first = vec![data(b"a", 60), data(b"b", 10)];
        let total = |rs: &[Record]| rs.iter().map(Record::encoded_len).sum::<usize>();
        let mut file = vec![0u8; 8192];
        let pass = Tail::default().lay_out(total(&first), block);
        pass.fill(&mut file[pass.position as usize..][..pass.len], &first, seq);
        let tail = pass.next_tail();
        let filler = block - super::super::record::PASS_LEN - (super::super::record::HEADER_LEN + 2 + 2);
        let second = vec![data(b"k1", filler), data(b"k2", 30)];
        let pass = tail.lay_out(total(&second), block);
        assert_eq!(pass.records_at() + second[0].encoded_len() as u64, pass.position + block as u64);
        pass.fill(&mut file[pass.position as usize..][..pass.len], &second, seq);
        (file, first, second, pass.position)
    }

    fn records(file: &[u8]) -> Vec<Record> {
        decode(&[(9, Bytes::copy_from_slice(file))]).into_iter().map(|(_, r)| r).collect()
    }

    #[test]
    fn a_journal_of_the_older_layout_reads_whole() {
        // Until 2026-12-06 a pass wrote the partial last block again: every record
        // followed the one before it, pass after pass, with no padding between.
        let all = vec![data(b"a", 60), data(b"b", 700), data(b"c", 5), data(b"a", 1500)];
        let mut file = Vec::new();
        for r in &all {
            r.encode(9, &mut file);
        }
        file.resize(8192, 0);
        assert_eq!(records(&file), all);
    }

    #[test]
    fn a_pass_after_padding_is_read_only_from_its_pass_record() {
        let (file, first, second, _) = two_passes();
        let all: Vec<Record> = first.iter().chain(&second).cloned().collect();
        assert_eq!(records(&file), all, "both passes, over the padding between them");

        // The second pass torn: its first block lost. Its second record starts on a
        // block boundary and decodes, but no `Pass` record leads to it.
        let (mut file, first, _, position) = two_passes();
        file[position as usize..position as usize + 512].fill(0);
        assert_eq!(records(&file), first, "a record after a lost block was taken for a pass");
    }
}
