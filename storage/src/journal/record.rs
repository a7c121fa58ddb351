//! The journal's record framing.
//!
//! ```text
//! crc32c u32 | file_seq u64 | body_len u32 | kind u8 | body
//! ```
//!
//! The CRC covers everything after it. `file_seq` is the sequence number of the file
//! the record was written to: journal files are recycled, so a recycled file still
//! holds valid records of its previous life after the new ones, and the sequence
//! number is what tells them apart (as RocksDB's recyclable WAL format does). A pass's
//! records are packed back to back across page boundaries. A pass never writes into a
//! block an earlier pass made durable: when the previous pass ended inside a block,
//! the next one starts at the next block boundary with a `Pass` record naming where
//! the records before it end (the bytes between are the earlier pass's zero padding).
//! The reader steps over padding only to a `Pass` record naming the end it stands at,
//! so a record of a torn pass that happens to start on a block boundary after a lost
//! sector is never taken for the start of the next pass. The first record that fails
//! to decode (zeros, a torn write, an old sequence number), with no such `Pass` record
//! after it, ends the file.

use bytes::{Buf, BufMut, Bytes};

/// Bytes in front of every record's body.
pub const HEADER_LEN: usize = 4 + 8 + 4 + 1;
/// Largest body a reader accepts: a pass writes at most a few partitions' unflushed
/// bytes per record, far below this.
const BODY_LEN_MAX: usize = 1 << 30;

const KIND_DATA: u8 = 1;
const KIND_TRUNCATE: u8 = 2;
const KIND_CREATE: u8 = 3;
const KIND_CHECKPOINT: u8 = 4;
const KIND_PASS: u8 = 5;
/// A checkpoint whose marks may leave a log's tail to the journal ([`Tail`]). Kind 4,
/// the layout before tails, is still read.
const KIND_CHECKPOINT_TAILS: u8 = 6;

/// Bytes a `Pass` record takes.
pub const PASS_LEN: usize = HEADER_LEN + 8;

/// A place in the journal: a file's sequence number and a byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Position {
    pub seq: u64,
    pub offset: u64,
}

/// What a checkpoint says of one log: everything before `next_offset` is in its
/// segment files and fsynced; the segments end at `segment_base` with `segment_size`
/// bytes; records for it from `position` on are what recovery replays. With a `tail`,
/// the end of that segment is in the journal instead of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub position: Position,
    pub segment_base: i64,
    pub segment_size: u64,
    pub next_offset: i64,
    pub high_watermark: i64,
    pub tail: Option<Tail>,
}

/// The part of a mark's segment the checkpoint left unwritten: the batches from
/// `offset` on, which start `size` bytes into the segment (the file is fsynced up to
/// there), are in the log's journal records from `position` on. A checkpoint so skips
/// rewriting every log's partial last page; recovery writes the tail back from the
/// journal before it opens the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tail {
    pub position: Position,
    pub size: u64,
    pub offset: i64,
}

impl Mark {
    /// Where recovery starts reading the log's records.
    pub fn replay_start(&self) -> Position {
        self.tail.map_or(self.position, |t| t.position.min(self.position))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Batches appended to a log, patched with their offsets, back to back.
    Data { key: Bytes, batches: Vec<Bytes> },
    /// The log was truncated: every batch at or after `offset` is gone.
    Truncate { key: Bytes, offset: i64 },
    /// The log was created empty: its files hold nothing the journal does not.
    Create { key: Bytes },
    /// Every log's segment files were fsynced up to its mark; files before
    /// `replay_from` are no longer needed.
    Checkpoint { replay_from: u64, marks: Vec<(Bytes, Mark)> },
    /// A pass starts here, after padding: the records before it end at `prev_end` in
    /// this file. Framing only: [`super::replay::decode`] never hands it on.
    Pass { prev_end: u64 },
}

impl Record {
    pub fn key(&self) -> Option<&Bytes> {
        match self {
            Record::Data { key, .. } | Record::Truncate { key, .. } | Record::Create { key } => Some(key),
            Record::Checkpoint { .. } | Record::Pass { .. } => None,
        }
    }

    fn kind(&self) -> u8 {
        match self {
            Record::Data { .. } => KIND_DATA,
            Record::Truncate { .. } => KIND_TRUNCATE,
            Record::Create { .. } => KIND_CREATE,
            Record::Checkpoint { .. } => KIND_CHECKPOINT_TAILS,
            Record::Pass { .. } => KIND_PASS,
        }
    }

    fn body_len(&self) -> usize {
        match self {
            Record::Data { key, batches } => 2 + key.len() + batches.iter().map(Bytes::len).sum::<usize>(),
            Record::Truncate { key, .. } => 2 + key.len() + 8,
            Record::Create { key } => 2 + key.len(),
            Record::Checkpoint { marks, .. } => {
                8 + 4
                    + marks
                        .iter()
                        .map(|(k, m)| 2 + k.len() + MARK_LEN + 1 + m.tail.map_or(0, |_| TAIL_LEN))
                        .sum::<usize>()
            }
            Record::Pass { .. } => 8,
        }
    }

    /// Bytes this record takes in the journal.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.body_len()
    }

    /// Appends the framed record to `out` (which must have room for it).
    pub fn encode(&self, seq: u64, out: &mut impl BufMut) {
        let mut body = Vec::with_capacity(self.body_len().min(4096) + 16);
        body.put_u64(seq);
        body.put_u32(self.body_len() as u32);
        body.put_u8(self.kind());
        let mut crc = crc32c::crc32c(&body);
        let mut rest = Vec::new();
        match self {
            Record::Data { key, batches } => {
                put_key(&mut rest, key);
                crc = crc32c::crc32c_append(crc, &rest);
                for b in batches {
                    crc = crc32c::crc32c_append(crc, b);
                }
                out.put_u32(crc);
                out.put_slice(&body);
                out.put_slice(&rest);
                for b in batches {
                    out.put_slice(b);
                }
                return;
            }
            Record::Truncate { key, offset } => {
                put_key(&mut rest, key);
                rest.put_i64(*offset);
            }
            Record::Create { key } => put_key(&mut rest, key),
            Record::Checkpoint { replay_from, marks } => {
                rest.put_u64(*replay_from);
                rest.put_u32(marks.len() as u32);
                for (key, m) in marks {
                    put_key(&mut rest, key);
                    rest.put_u64(m.position.seq);
                    rest.put_u64(m.position.offset);
                    rest.put_i64(m.segment_base);
                    rest.put_u64(m.segment_size);
                    rest.put_i64(m.next_offset);
                    rest.put_i64(m.high_watermark);
                    match m.tail {
                        None => rest.put_u8(0),
                        Some(t) => {
                            rest.put_u8(1);
                            rest.put_u64(t.position.seq);
                            rest.put_u64(t.position.offset);
                            rest.put_u64(t.size);
                            rest.put_i64(t.offset);
                        }
                    }
                }
            }
            Record::Pass { prev_end } => rest.put_u64(*prev_end),
        }
        crc = crc32c::crc32c_append(crc, &rest);
        out.put_u32(crc);
        out.put_slice(&body);
        out.put_slice(&rest);
    }

    /// Decodes the record at the start of `data`, written to file `seq`. `None` when
    /// there is none: the end of the file's records.
    pub fn decode(data: &Bytes, seq: u64) -> Option<(Record, usize)> {
        if data.len() < HEADER_LEN {
            return None;
        }
        let mut h = &data[..HEADER_LEN];
        let crc = h.get_u32();
        let (file_seq, len, kind) = (h.get_u64(), h.get_u32() as usize, h.get_u8());
        if file_seq != seq || len > BODY_LEN_MAX || data.len() < HEADER_LEN + len {
            return None;
        }
        if crc32c::crc32c(&data[4..HEADER_LEN + len]) != crc {
            return None;
        }
        let body = data.slice(HEADER_LEN..HEADER_LEN + len);
        let record = decode_body(kind, body)?;
        Some((record, HEADER_LEN + len))
    }
}

const MARK_LEN: usize = 6 * 8;
const TAIL_LEN: usize = 4 * 8;

fn put_key(out: &mut Vec<u8>, key: &[u8]) {
    out.put_u16(key.len() as u16);
    out.put_slice(key);
}

fn get_key(body: &mut Bytes) -> Option<Bytes> {
    if body.len() < 2 {
        return None;
    }
    let len = body.get_u16() as usize;
    (body.len() >= len).then(|| body.split_to(len))
}

fn decode_body(kind: u8, mut body: Bytes) -> Option<Record> {
    let record = match kind {
        KIND_DATA => Record::Data { key: get_key(&mut body)?, batches: vec![std::mem::take(&mut body)] },
        KIND_TRUNCATE => {
            let key = get_key(&mut body)?;
            (body.len() >= 8).then(|| Record::Truncate { key, offset: body.get_i64() })?
        }
        KIND_CREATE => Record::Create { key: get_key(&mut body)? },
        KIND_CHECKPOINT | KIND_CHECKPOINT_TAILS => {
            if body.len() < 12 {
                return None;
            }
            let replay_from = body.get_u64();
            let count = body.get_u32() as usize;
            let mut marks = Vec::with_capacity(count.min(body.len() / MARK_LEN));
            for _ in 0..count {
                let key = get_key(&mut body)?;
                if body.len() < MARK_LEN {
                    return None;
                }
                let position = Position { seq: body.get_u64(), offset: body.get_u64() };
                let mut mark = Mark {
                    position,
                    segment_base: body.get_i64(),
                    segment_size: body.get_u64(),
                    next_offset: body.get_i64(),
                    high_watermark: body.get_i64(),
                    tail: None,
                };
                if kind == KIND_CHECKPOINT_TAILS {
                    match body.first() {
                        Some(0) => body.advance(1),
                        Some(1) if body.len() > TAIL_LEN => {
                            body.advance(1);
                            mark.tail = Some(Tail {
                                position: Position { seq: body.get_u64(), offset: body.get_u64() },
                                size: body.get_u64(),
                                offset: body.get_i64(),
                            });
                        }
                        _ => return None,
                    }
                }
                marks.push((key, mark));
            }
            Record::Checkpoint { replay_from, marks }
        }
        KIND_PASS => (body.len() >= 8).then(|| Record::Pass { prev_end: body.get_u64() })?,
        _ => return None,
    };
    body.is_empty().then_some(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(r: Record) {
        let mut out = Vec::new();
        r.encode(7, &mut out);
        assert_eq!(out.len(), r.encoded_len());
        let data = Bytes::from(out.clone());
        assert_eq!(Record::decode(&data, 7), Some((r.clone(), out.len())));
        assert_eq!(Record::decode(&data, 8), None, "another file's record is not this file's");
        for cut in 0..out.len() {
            assert!(Record::decode(&data.slice(..cut), 7).is_none(), "cut at {cut} accepted");
        }
        for i in 0..out.len() {
            let mut bad = out.clone();
            bad[i] ^= 0x40;
            assert!(Record::decode(&Bytes::from(bad), 7).is_none(), "a flipped bit at {i} accepted");
        }
    }

    fn test_mark() -> Mark {
        Mark {
            position: Position { seq: 3, offset: 4096 },
            segment_base: 10,
            segment_size: 999,
            next_offset: 77,
            high_watermark: 70,
            tail: None,
        }
    }

    #[test]
    fn records_round_trip_and_reject_damage() {
        let key = Bytes::from_static(b"topic/0");
        round_trip(Record::Data { key: key.clone(), batches: vec![Bytes::from(vec![5u8; 100])] });
        round_trip(Record::Truncate { key: key.clone(), offset: 42 });
        round_trip(Record::Create { key: key.clone() });
        let mark = test_mark();
        let tail = Tail { position: Position { seq: 2, offset: 512 }, size: 900, offset: 75 };
        let tailed = Mark { tail: Some(tail), ..mark };
        round_trip(Record::Checkpoint {
            replay_from: 2,
            marks: vec![(key.clone(), mark), (Bytes::from_static(b"other/1"), tailed)],
        });
        round_trip(Record::Checkpoint { replay_from: 3, marks: vec![(key, mark)] });
        round_trip(Record::Pass { prev_end: 1234 });
    }

    #[test]
    fn a_checkpoint_of_the_layout_before_tails_reads() {
        let mut body = Vec::new();
        body.put_u64(3);
        body.put_u32(1);
        put_key(&mut body, b"topic/0");
        for v in [3u64, 4096, 10, 999, 77, 70] {
            body.put_u64(v);
        }
        let mut framed = Vec::new();
        framed.put_u64(7);
        framed.put_u32(body.len() as u32);
        framed.put_u8(KIND_CHECKPOINT);
        framed.extend_from_slice(&body);
        let mut out = Vec::new();
        out.put_u32(crc32c::crc32c(&framed));
        out.extend_from_slice(&framed);
        let want = Record::Checkpoint { replay_from: 3, marks: vec![(Bytes::from_static(b"topic/0"), test_mark())] };
        assert_eq!(Record::decode(&Bytes::from(out), 7).map(|(r, _)| r), Some(want));
    }
}
