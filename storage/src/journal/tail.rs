//! The end of a segment that a checkpoint leaves to the journal
//! ([`super::record::Tail`]), and how recovery writes it back.
//!
//! A checkpoint fsyncs a log's whole pages and leaves the batches after them (the
//! partial last page, and the batch that crosses into it) in the journal: rewriting
//! every log's partial page at every checkpoint cost a tenth of all bytes written at
//! 4,000 partitions (0.30 bytes per payload byte of 2.7). It may when no pass is
//! journaling the log's batches at that moment and the tail's records are recent
//! enough (see `tail_to_leave` in the log's write path, and `checkpoint_marks` in
//! [`crate::flush`]); otherwise it writes the whole tail as before. Recovery writes
//! those batches back from the journal's records, so
//! the segment ends exactly where the mark says and the mark's snapshot still applies
//! (a restart reads no segment data). When the journal does not hold them all (a crash
//! before the pass that would have journaled the last of them; a truncation in
//! between) or the segment is gone, the mark moves down to the tail instead: the files
//! are cut there and the tail's records are replayed with the rest, as after a
//! truncation below a mark.

use std::path::Path;
use std::rc::Rc;

use super::{LogRecovery, Mark, Record};
use crate::disk::File;
use crate::error::StorageError;
use crate::fsync::sync_or_fail;
use crate::segment;
use crate::segment_io::{write_data, PendingWrite};
use crate::PAGE;

/// The end of a journaled log's active segment that a checkpoint leaves to the
/// journal (see [`crate::journal::MarkTail`]): the batches from `offset` on, from
/// `size` bytes into the segment, are in the log's journal records from `position`
/// on, or from the checkpoint's own position on when `None` (not journaled yet).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeftTail {
    pub position: Option<crate::journal::Position>,
    pub size: u64,
    pub offset: i64,
}

/// Makes the log's files stand as its mark says, or moves the mark down to its tail.
pub(crate) async fn restore(dir: &Path, found: &mut LogRecovery) -> Result<(), StorageError> {
    let tail_records = std::mem::take(&mut found.tail_records);
    let Some(mark) = found.mark.filter(|_| !found.created) else { return Ok(()) };
    let Some(tail) = mark.tail else { return Ok(()) };
    let bytes = batches_between(tail_records.iter().chain(&found.records), tail.offset, mark.next_offset);
    if let Some(bytes) = bytes.filter(|b| b.len() as u64 == mark.segment_size - tail.size) {
        if write_back(dir, &mark, tail.size, &bytes).await? {
            found.mark = Some(Mark { tail: None, ..mark });
            crate::stats::update(|s| s.tails_written_back += 1);
            return Ok(());
        }
    }
    tracing::info!(dir = %dir.display(), from = tail.offset, to = mark.next_offset,
        "the journal does not hold the checkpoint's tail whole: recovering from the tail");
    crate::stats::update(|s| s.tails_replayed += 1);
    found.mark = Some(Mark {
        position: tail.position,
        segment_size: tail.size,
        next_offset: tail.offset,
        high_watermark: mark.high_watermark.min(tail.offset),
        tail: None,
        ..mark
    });
    let mut records = tail_records;
    records.append(&mut found.records);
    found.records = records;
    Ok(())
}

/// The journaled batches from offset `from` up to `to`, back to back, checked; `None`
/// unless the records hold every one of them, in order, before any truncation.
fn batches_between<'a>(records: impl Iterator<Item = &'a Record>, from: i64, to: i64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut next = from;
    for record in records {
        if next == to {
            break;
        }
        let Record::Data { batches, .. } = record else { return None };
        for chunk in batches {
            for (header, batch) in keel_protocol::batch::split_and_validate(chunk).ok()? {
                if next == to {
                    break;
                }
                if header.base_offset < next {
                    continue;
                }
                if header.base_offset > next || header.last_offset() >= to {
                    return None;
                }
                out.extend_from_slice(&batch);
                next = header.last_offset() + 1;
            }
        }
    }
    (next == to).then_some(out)
}

/// Writes `bytes` into the mark's segment at `from` (the file is fsynced up to there),
/// cuts it to the mark's size and fsyncs it. False when the segment is missing or
/// shorter than `from`.
async fn write_back(dir: &Path, mark: &Mark, from: u64, bytes: &[u8]) -> Result<bool, StorageError> {
    let path = segment::segment_path(dir, mark.segment_base);
    let file = match File::open(&path).await {
        Ok(file) => Rc::new(file),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(StorageError::io("open segment", &path, e)),
    };
    let page = from / PAGE * PAGE;
    let head = segment::read_file(&file, &path, page, (from - page) as usize).await?;
    let whole = head.len() as u64 == from - page;
    if whole {
        let mut data = head.to_vec();
        data.extend_from_slice(bytes);
        let write = PendingWrite {
            file: file.clone(),
            path: path.clone(),
            position: page,
            data,
            seal_size: Some(mark.segment_size),
            ahead: None,
        };
        write_data(&write).await?;
        sync_or_fail(&file, &path).await?;
    }
    file.close_rc().await;
    Ok(whole)
}
