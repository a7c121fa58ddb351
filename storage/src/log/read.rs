//! Reads: from the batch cache when the tail is asked for, else DMA reads of the
//! segment files with read-ahead; and the timestamp lookups ListOffsets needs.
//!
//! A read takes no lock. It follows segments by base offset (never by position in
//! the segment list, which retention and compaction change under it), holds the
//! `Rc<File>` of the segment it is reading, and never reads past the bytes known
//! durable. A segment replaced or released meanwhile is still readable through that
//! handle or gives a short read, which ends the read early; every batch returned from
//! disk has passed its CRC check.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::disk::File;
use bytes::Bytes;
use keel_protocol::batch::{self, BatchHeader};

use crate::error::StorageError;
use crate::log::PartitionLog;
use crate::segment;

pub struct ReadResult {
    pub batches: Vec<Bytes>,
    pub bytes: usize,
}

impl PartitionLog {
    fn read_cached(&self, offset: i64, max_bytes: usize, upto: i64) -> Option<ReadResult> {
        let (first, _) = self.cache.front()?;
        if first.base_offset > offset {
            return None;
        }
        let mut out = ReadResult { batches: Vec::new(), bytes: 0 };
        let start = self.cache.partition_point(|(h, _)| h.last_offset() < offset);
        for (h, b) in self.cache.range(start..) {
            if h.base_offset >= upto || (out.bytes > 0 && out.bytes + b.len() > max_bytes) {
                break;
            }
            out.bytes += b.len();
            out.batches.push(b.clone());
        }
        Some(out)
    }

    /// The segment holding `offset` (the last with a base at or below it), where to
    /// start scanning for it, and the base offset of the batch there: the index
    /// entry's when the position is one, else at least the segment's base.
    fn locate(&self, offset: i64) -> Option<(SegmentView, u64, BaseOffset)> {
        let i = self.segments.partition_point(|s| s.base_offset <= offset);
        let seg = &self.segments[i.checked_sub(1)?];
        let (position, base) = match seg.index_entry_for(offset) {
            Some(e) => (e.position, BaseOffset::Exactly(e.offset)),
            None => (0, BaseOffset::AtLeast(seg.base_offset)),
        };
        Some((SegmentView::of(seg), position, base))
    }

    /// The first segment after the one based at `base`.
    fn segment_after(&self, base: i64) -> Option<SegmentView> {
        let i = self.segments.partition_point(|s| s.base_offset <= base);
        self.segments.get(i).map(SegmentView::of)
    }
}

/// What the base offset of the next batch read must be. A batch's CRC does not cover
/// its base offset: a bit flipped there would serve the batch at another offset.
#[derive(Clone, Copy, Debug)]
enum BaseOffset {
    Exactly(i64),
    AtLeast(i64),
}

impl BaseOffset {
    fn least(self) -> i64 {
        match self {
            BaseOffset::Exactly(b) | BaseOffset::AtLeast(b) => b,
        }
    }

    fn admits(self, base: i64) -> bool {
        match self {
            BaseOffset::Exactly(b) => base == b,
            BaseOffset::AtLeast(b) => base >= b,
        }
    }
}

/// What a read needs of a segment, taken once so the log can change meanwhile.
struct SegmentView {
    base_offset: i64,
    file: Rc<File>,
    path: PathBuf,
    written_size: u64,
}

impl SegmentView {
    fn of(seg: &segment::Segment) -> SegmentView {
        SegmentView {
            base_offset: seg.base_offset,
            file: seg.file.clone(),
            path: seg.path.clone(),
            written_size: seg.written_size,
        }
    }
}

/// Reads batches from `offset` (the batch holding it first) up to `max_bytes` (at
/// least one batch), never past `upto` or the high watermark. Every batch read from
/// disk has its CRC checked before it is returned.
pub async fn read(
    log: &Rc<RefCell<PartitionLog>>,
    offset: i64,
    max_bytes: usize,
    upto: i64,
) -> Result<ReadResult, StorageError> {
    let (start, high_watermark) = {
        let l = log.borrow();
        (l.log_start_offset, l.high_watermark)
    };
    read_from(log, start, offset, max_bytes, upto.min(high_watermark)).await
}

/// As [`read`], from the first offset still in the segment files rather than the log
/// start offset, and past the high watermark: a replicated log's Raft layer reads
/// batches back that clients may no longer read (DeleteRecords) or not yet read (a
/// leader restarted with entries it has not committed) but a replica behind needs.
pub async fn read_kept(
    log: &Rc<RefCell<PartitionLog>>,
    offset: i64,
    max_bytes: usize,
    upto: i64,
) -> Result<ReadResult, StorageError> {
    let start = log.borrow().first_kept_offset();
    read_from(log, start, offset, max_bytes, upto).await
}

/// Reads every kept batch below `upto` (and the high watermark) and checks its CRC:
/// a scrub of what lies on disk. Returns the bytes checked, or the first corrupt batch.
/// Reads go `step` bytes at a time, each an await apart, so a scrub shares the shard.
pub async fn verify(log: &Rc<RefCell<PartitionLog>>, upto: i64, step: usize) -> Result<u64, StorageError> {
    let (mut offset, upto) = {
        let l = log.borrow();
        (l.first_kept_offset(), upto.min(l.high_watermark))
    };
    let mut bytes = 0;
    loop {
        let r = read_kept(log, offset, step, upto).await?;
        let Some(last) = r.batches.last() else { return Ok(bytes) };
        offset = BatchHeader::parse(last).map_err(|e| corrupt_in(log, e.to_string()))?.last_offset() + 1;
        bytes += r.bytes as u64;
    }
}

async fn read_from(
    log: &Rc<RefCell<PartitionLog>>,
    start: i64,
    offset: i64,
    max_bytes: usize,
    upto: i64,
) -> Result<ReadResult, StorageError> {
    let mut out = ReadResult { batches: Vec::new(), bytes: 0 };
    let fetch_upto = upto;
    let mut read_everything_written = false;
    let (upto, mut seg, mut position, mut expected, epochs, mut want, mut ahead) = {
        let mut l = log.borrow_mut();
        l.check_range_from(start, offset)?;
        if offset >= upto {
            return Ok(out);
        }
        if let Some(hit) = l.read_cached(offset, max_bytes, upto) {
            crate::stats::update(|s| s.cache_hits += 1);
            return Ok(hit);
        }
        crate::stats::update(|s| s.cache_misses += 1);
        // Batches not yet in the segment files are in the cache: the disk read stops
        // before them and the next read finds them there.
        let upto = upto.min(l.written_offset);
        if offset >= upto {
            return Ok(out);
        }
        let Some((seg, position, expected)) = l.locate(offset) else {
            return Ok(out);
        };
        let ahead = l.read_ahead.take().filter(|a| a.next_offset == offset && Rc::ptr_eq(&a.file, &seg.file));
        (upto, seg, position, expected, l.epochs.clone(), l.config.read_ahead_bytes.max(max_bytes), ahead)
    };
    // Where the next batch not returned starts, when the read stopped inside a segment
    // with more durable data after it: the place to read ahead from.
    let mut stopped_at: Option<u64> = None;
    // The base offset of the next batch, known once a batch before it was parsed: a
    // batch cut by the written size may leave too few bytes to read it from.
    let mut next_base: Option<i64> = None;
    'segments: loop {
        if position >= seg.written_size {
            match log.borrow().segment_after(seg.base_offset) {
                Some(next) => seg = next,
                None => {
                    read_everything_written = true;
                    break;
                }
            }
            position = 0;
            expected = BaseOffset::AtLeast(expected.least().max(seg.base_offset));
            continue;
        }
        let (data, short) = match ahead.take() {
            // Read earlier for this offset: the consumer reads the segment in order.
            Some(a) => {
                crate::stats::update(|s| s.read_ahead_hits += 1);
                position = a.position;
                expected = BaseOffset::AtLeast(a.next_offset);
                (a.data, false)
            }
            None => {
                let len = want.min((seg.written_size - position) as usize);
                let data = segment::read_file(&seg.file, &seg.path, position, len).await?;
                let short = data.len() < len;
                (data, short)
            }
        };
        let mut cursor = 0;
        while cursor < data.len() {
            let rest = &data[cursor..];
            let need = match batch::peek_batch_len(rest) {
                Some(Ok(need)) => need,
                Some(Err(e)) => return Err(corrupt(&seg.path, position + cursor as u64, e.to_string())),
                None => batch::BATCH_HEADER_LEN,
            };
            if need > rest.len() {
                // A batch only partly written (the segment's written size ends on a
                // page inside it) is past `upto`: stop before it, not at its cut.
                let base = match rest.get(..8) {
                    Some(b) => Some(i64::from_be_bytes(b.try_into().expect("8 bytes"))),
                    None => next_base,
                };
                if base.is_some_and(|b| b >= upto) {
                    break 'segments;
                }
                if cursor == 0 {
                    if position + need as u64 > seg.written_size && !short {
                        let reason = format!("batch of {need} bytes runs past the segment's end");
                        return Err(corrupt(&seg.path, position, reason));
                    }
                    // The next batch is larger than the read: read it whole.
                    want = want.max(need);
                }
                break;
            }
            let header = BatchHeader::parse(rest).map_err(|e| corrupt(&seg.path, position, e.to_string()))?;
            if !expected.admits(header.base_offset) {
                let reason = format!("batch at base offset {} where {expected:?} was due", header.base_offset);
                return Err(corrupt(&seg.path, position + cursor as u64, reason));
            }
            // Nor its leader epoch, which must be the one the epoch cache has in
            // effect at its base offset.
            let due = epochs[..epochs.partition_point(|(_, first)| *first <= header.base_offset)].last();
            if let Some(&(epoch, _)) = due.filter(|(e, _)| *e != header.partition_leader_epoch) {
                let reason = format!(
                    "batch at offset {} of leader epoch {} where the log has epoch {epoch}",
                    header.base_offset, header.partition_leader_epoch
                );
                return Err(corrupt(&seg.path, position + cursor as u64, reason));
            }
            expected = BaseOffset::AtLeast(header.last_offset() + 1);
            next_base = Some(header.last_offset() + 1);
            if header.base_offset >= upto {
                break 'segments;
            }
            if header.last_offset() >= offset {
                if !out.batches.is_empty() && out.bytes + need > max_bytes {
                    stopped_at = Some(position + cursor as u64);
                    break 'segments;
                }
                let bytes = data.slice(cursor..cursor + need);
                batch::validate(&bytes).map_err(|e| corrupt(&seg.path, position + cursor as u64, e.to_string()))?;
                out.bytes += need;
                out.batches.push(bytes);
            }
            cursor += need;
        }
        if short {
            // A short read means the segment was released or truncated under us.
            break;
        }
        position += cursor as u64;
        if out.bytes >= max_bytes {
            stopped_at = Some(position);
            break;
        }
    }
    if let (Some(position), Some(last)) = (stopped_at, out.batches.last()) {
        let next_offset = BatchHeader::parse(last).map(|h| h.last_offset() + 1).unwrap_or(-1);
        read_ahead(log, seg, position, next_offset, want);
    }
    if out.batches.is_empty() && read_everything_written {
        // Nothing written from `offset` on (compaction removed what was there): the
        // next batch is the cache's first, which may be in no file yet.
        let l = log.borrow();
        if let Some(hit) =
            l.cache.front().and_then(|(first, _)| l.read_cached(first.base_offset, max_bytes, fetch_upto))
        {
            if hit.batches.first().is_some_and(|b| BatchHeader::parse(b).is_ok_and(|h| h.base_offset > offset)) {
                return Ok(hit);
            }
        }
    }
    Ok(out)
}

/// The stretch of a segment after the last batch a read returned, read while the
/// consumer handles that read, so its next fetch finds it in memory.
pub(crate) struct ReadAhead {
    file: Rc<File>,
    position: u64,
    /// The offset the consumer asks for next if it reads in order.
    next_offset: i64,
    data: Bytes,
}

/// Starts reading `len` bytes of `seg` from `position` in the background, unless a
/// read-ahead is already running for this log or the shard's cache budget is full.
fn read_ahead(log: &Rc<RefCell<PartitionLog>>, seg: SegmentView, position: u64, next_offset: i64, len: usize) {
    let len = len.min(seg.written_size.saturating_sub(position) as usize);
    let truncations = {
        let mut l = log.borrow_mut();
        if l.read_ahead_running || len == 0 || !l.cache.has_room_for(len) {
            return;
        }
        l.read_ahead_running = true;
        l.truncations
    };
    let log = log.clone();
    glommio::spawn_local(async move {
        let data = segment::read_file(&seg.file, &seg.path, position, len).await;
        let mut l = log.borrow_mut();
        l.read_ahead_running = false;
        if let (Ok(data), true) = (data, l.truncations == truncations) {
            l.read_ahead = Some(ReadAhead { file: seg.file, position, next_offset, data });
        }
    })
    .detach();
}

fn corrupt(path: &Path, position: u64, reason: String) -> StorageError {
    crate::stats::update(|s| s.corrupt_batches_read += 1);
    tracing::error!(path = %path.display(), position, %reason, "corrupt batch not served");
    StorageError::Corrupt { path: path.to_path_buf(), position, reason }
}

fn corrupt_in(log: &Rc<RefCell<PartitionLog>>, reason: String) -> StorageError {
    StorageError::Corrupt { path: log.borrow().dir.clone(), position: 0, reason }
}

/// First record at or after `timestamp`: its (offset, timestamp), below the high
/// watermark. Uses the segments' timestamp index, then decodes one batch.
pub async fn offset_for_timestamp(
    log: &Rc<RefCell<PartitionLog>>,
    timestamp: i64,
) -> Result<Option<(i64, i64)>, StorageError> {
    let (mut offset, hw) = {
        let l = log.borrow();
        let Some(seg) = l.segments.iter().find(|s| s.max_timestamp >= timestamp) else {
            return Ok(None);
        };
        let i = seg.index.partition_point(|e| e.max_timestamp_so_far < timestamp);
        let start = if i == 0 { seg.base_offset } else { seg.index[i - 1].offset };
        (start.max(l.log_start_offset), l.high_watermark)
    };
    while offset < hw {
        let r = read(log, offset, 1 << 20, hw).await?;
        if r.batches.is_empty() {
            break;
        }
        for b in &r.batches {
            let h = BatchHeader::parse(b).map_err(|e| corrupt_in(log, e.to_string()))?;
            if h.max_timestamp >= timestamp && !h.is_control() && h.records_count > 0 {
                let records = batch::record_timestamps(b).map_err(|e| corrupt_in(log, e.to_string()))?;
                if let Some(found) = records.into_iter().find(|(o, t)| *t >= timestamp && *o >= offset) {
                    return Ok(Some(found));
                }
            }
            offset = offset.max(h.last_offset() + 1);
        }
    }
    Ok(None)
}

/// The record with the largest timestamp: its (offset, timestamp).
pub async fn offset_of_max_timestamp(log: &Rc<RefCell<PartitionLog>>) -> Result<Option<(i64, i64)>, StorageError> {
    let (max_ts, base, start) = {
        let l = log.borrow();
        let best = l.segments.iter().filter(|s| s.max_timestamp >= 0).fold((-1i64, -1i64), |acc, s| {
            if s.max_timestamp > acc.0 {
                (s.max_timestamp, s.max_timestamp_offset)
            } else {
                acc
            }
        });
        (best.0, best.1, l.log_start_offset)
    };
    if max_ts < 0 || base < start {
        return Ok(None);
    }
    let r = read(log, base, 1, i64::MAX).await?;
    let Some(b) = r.batches.first() else {
        return Ok(None);
    };
    let records = batch::record_timestamps(b).map_err(|e| corrupt_in(log, e.to_string()))?;
    Ok(records.into_iter().find(|(_, t)| *t == max_ts))
}
