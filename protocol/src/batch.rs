//! RecordBatch v2 headers: read, validate and patch in place.
//!
//! A broker owns three fields of a batch it accepts: the base offset, the partition
//! leader epoch and (for LogAppendTime topics) the timestamp type and max timestamp.
//! The first two lie before the CRC'd region, so patching them never re-hashes; the
//! LogAppendTime patch re-computes the CRC over the batch once. Records themselves are
//! never decoded or re-encoded, compressed or not.

use bytes::{Buf, Bytes, BytesMut};

pub const BATCH_HEADER_LEN: usize = 61;
/// Bytes before `batchLength`'s payload: baseOffset (8) + batchLength (4).
pub const BATCH_LOG_OVERHEAD: usize = 12;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const MAX_TIMESTAMP_OFFSET: usize = 35;
const LEADER_EPOCH_OFFSET: usize = 12;

pub const ATTR_COMPRESSION_MASK: i16 = 0x07;
pub const ATTR_LOG_APPEND_TIME: i16 = 0x08;
pub const ATTR_TRANSACTIONAL: i16 = 0x10;
pub const ATTR_CONTROL: i16 = 0x20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch truncated: {have} bytes, need {need}")]
    Truncated { have: usize, need: usize },
    #[error("batch length {0} is invalid")]
    BadLength(i32),
    #[error("unsupported record batch magic {0} (only magic 2 is accepted)")]
    BadMagic(i8),
    #[error("batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BadCrc { stored: u32, computed: u32 },
    #[error("batch has {0} records")]
    BadRecordCount(i32),
    #[error("unsupported compression codec {0}")]
    BadCompression(i16),
}

/// The decoded fixed header of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Parses the header at the start of `buf` without validating the CRC.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        if buf.len() < BATCH_HEADER_LEN {
            return Err(BatchError::Truncated { have: buf.len(), need: BATCH_HEADER_LEN });
        }
        let mut b = &buf[..BATCH_HEADER_LEN];
        Ok(BatchHeader {
            base_offset: b.get_i64(),
            batch_length: b.get_i32(),
            partition_leader_epoch: b.get_i32(),
            magic: b.get_i8(),
            crc: b.get_u32(),
            attributes: b.get_i16(),
            last_offset_delta: b.get_i32(),
            base_timestamp: b.get_i64(),
            max_timestamp: b.get_i64(),
            producer_id: b.get_i64(),
            producer_epoch: b.get_i16(),
            base_sequence: b.get_i32(),
            records_count: b.get_i32(),
        })
    }

    /// Total size of the batch on the wire and on disk.
    pub fn total_len(&self) -> usize {
        BATCH_LOG_OVERHEAD + self.batch_length as usize
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }
    pub fn offset_count(&self) -> i64 {
        self.last_offset_delta as i64 + 1
    }
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }
    pub fn compression(&self) -> i16 {
        self.attributes & ATTR_COMPRESSION_MASK
    }
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }
    /// Sequence of the last record, wrapping like Kafka does at i32::MAX.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return -1;
        }
        let last = self.base_sequence as i64 + self.last_offset_delta as i64;
        (last % (i32::MAX as i64 + 1)) as i32
    }
}

/// Validates one complete batch (`buf` holds exactly it): sizes, magic, CRC32C.
pub fn validate(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    let h = BatchHeader::parse(buf)?;
    if (h.batch_length as i64) < (BATCH_HEADER_LEN - BATCH_LOG_OVERHEAD) as i64 {
        return Err(BatchError::BadLength(h.batch_length));
    }
    if h.total_len() != buf.len() {
        return Err(BatchError::Truncated { have: buf.len(), need: h.total_len() });
    }
    if h.magic != 2 {
        return Err(BatchError::BadMagic(h.magic));
    }
    if h.compression() > 4 {
        return Err(BatchError::BadCompression(h.compression()));
    }
    if h.records_count < 0 || h.last_offset_delta < 0 {
        return Err(BatchError::BadRecordCount(h.records_count));
    }
    let computed = crc32c::crc32c(&buf[ATTRIBUTES_OFFSET..]);
    if computed != h.crc {
        return Err(BatchError::BadCrc { stored: h.crc, computed });
    }
    Ok(h)
}

/// Length of the batch at the start of `buf` if its header is complete and its
/// length field is sane; `None` when more bytes are needed to know.
pub fn peek_batch_len(buf: &[u8]) -> Option<Result<usize, BatchError>> {
    if buf.len() < BATCH_LOG_OVERHEAD {
        return None;
    }
    let len = i32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
    if (len as i64) < (BATCH_HEADER_LEN - BATCH_LOG_OVERHEAD) as i64 {
        return Some(Err(BatchError::BadLength(len)));
    }
    Some(Ok(BATCH_LOG_OVERHEAD + len as usize))
}

/// Splits a `records` field into its batches (zero-copy), validating each.
pub fn split_and_validate(records: &Bytes) -> Result<Vec<(BatchHeader, Bytes)>, BatchError> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < records.len() {
        let rest = &records[pos..];
        let len = match peek_batch_len(rest) {
            None => return Err(BatchError::Truncated { have: rest.len(), need: BATCH_HEADER_LEN }),
            Some(r) => r?,
        };
        if len > rest.len() {
            return Err(BatchError::Truncated { have: rest.len(), need: len });
        }
        let batch = records.slice(pos..pos + len);
        let header = validate(&batch)?;
        out.push((header, batch));
        pos += len;
    }
    Ok(out)
}

/// Writes the broker-owned fields into a batch copy: base offset and leader epoch, and
/// for LogAppendTime the timestamp type and max timestamp (re-computing the CRC).
pub fn patch(batch: &mut BytesMut, base_offset: i64, leader_epoch: i32, log_append_time: Option<i64>) {
    assert!(batch.len() >= BATCH_HEADER_LEN, "patching a batch shorter than its header");
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
    batch[LEADER_EPOCH_OFFSET..LEADER_EPOCH_OFFSET + 4].copy_from_slice(&leader_epoch.to_be_bytes());
    if let Some(ts) = log_append_time {
        let attrs = i16::from_be_bytes([batch[ATTRIBUTES_OFFSET], batch[ATTRIBUTES_OFFSET + 1]]);
        let attrs = attrs | ATTR_LOG_APPEND_TIME;
        batch[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attrs.to_be_bytes());
        batch[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8].copy_from_slice(&ts.to_be_bytes());
        let crc = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]);
        batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Builds an uncompressed batch of records with the given (key, value) pairs. Used by
/// tests and by the broker for internal batches.
/// A record's key and value; `None` is null (a value of `None` is a tombstone).
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

pub fn build_batch(base_offset: i64, timestamp: i64, records: &[KeyValue<'_>]) -> Bytes {
    build_batch_as(base_offset, timestamp, Producer::NONE, 0, records)
}

/// The producer fields of a batch the broker writes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Producer {
    pub id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
}

impl Producer {
    pub const NONE: Producer = Producer { id: -1, epoch: -1, base_sequence: -1 };
}

/// A transaction marker's type, as its control record's key spells it (Kafka's
/// `ControlRecordType`: 0 abort, 1 commit).
pub const CONTROL_ABORT: i16 = 0;
pub const CONTROL_COMMIT: i16 = 1;

/// Builds the control batch Kafka's `WriteTxnMarkers` appends to end a transaction:
/// one record whose key is (version 0, type) and whose value is (version 0, the
/// coordinator epoch), transactional and control attributes set.
pub fn build_marker(
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    timestamp: i64,
) -> Bytes {
    let kind = if commit { CONTROL_COMMIT } else { CONTROL_ABORT };
    let mut key = [0u8; 4];
    key[2..].copy_from_slice(&kind.to_be_bytes());
    let mut value = [0u8; 6];
    value[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());
    let producer = Producer { id: producer_id, epoch: producer_epoch, base_sequence: -1 };
    build_batch_as(0, timestamp, producer, ATTR_TRANSACTIONAL | ATTR_CONTROL, &[(Some(&key), Some(&value))])
}

/// The type of the marker a control batch carries (`CONTROL_ABORT` or
/// `CONTROL_COMMIT`), read from its first record's key; `None` if `batch` is not an
/// uncompressed control batch with such a key.
pub fn marker_type(batch: &[u8]) -> Option<i16> {
    let header = BatchHeader::parse(batch).ok()?;
    if !header.is_control() || header.compression() != 0 || header.records_count < 1 {
        return None;
    }
    let mut rest = &batch[BATCH_HEADER_LEN..];
    get_varlong(&mut rest)?; // record length
    rest.get(..1)?; // attributes
    rest = &rest[1..];
    get_varlong(&mut rest)?; // timestamp delta
    get_varlong(&mut rest)?; // offset delta
    let key_len = get_varlong(&mut rest)?;
    if key_len < 4 || rest.len() < 4 {
        return None;
    }
    Some(i16::from_be_bytes([rest[2], rest[3]]))
}

fn get_varlong(buf: &mut &[u8]) -> Option<i64> {
    let mut z: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        z |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Some(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    None
}

/// As [`build_batch`], with the producer fields and attributes given (transactional
/// offset commits and markers).
pub fn build_batch_as(
    base_offset: i64,
    timestamp: i64,
    producer: Producer,
    attributes: i16,
    records: &[KeyValue<'_>],
) -> Bytes {
    let mut body = BytesMut::new();
    for (i, (key, value)) in records.iter().enumerate() {
        let mut rec = Vec::new();
        rec.push(0u8); // attributes
        put_varlong(&mut rec, 0); // timestamp delta
        put_varlong(&mut rec, i as i64); // offset delta
        for field in [key, value] {
            match field {
                Some(b) => {
                    put_varlong(&mut rec, b.len() as i64);
                    rec.extend_from_slice(b);
                }
                None => put_varlong(&mut rec, -1),
            }
        }
        put_varlong(&mut rec, 0); // headers
        let mut len = Vec::new();
        put_varlong(&mut len, rec.len() as i64);
        body.extend_from_slice(&len);
        body.extend_from_slice(&rec);
    }
    let mut b = BytesMut::with_capacity(BATCH_HEADER_LEN + body.len());
    b.extend_from_slice(&base_offset.to_be_bytes());
    b.extend_from_slice(&((BATCH_HEADER_LEN - BATCH_LOG_OVERHEAD + body.len()) as i32).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // leader epoch
    b.extend_from_slice(&[2]); // magic
    b.extend_from_slice(&0u32.to_be_bytes()); // crc, set below
    b.extend_from_slice(&attributes.to_be_bytes());
    b.extend_from_slice(&(records.len() as i32 - 1).to_be_bytes());
    b.extend_from_slice(&timestamp.to_be_bytes());
    b.extend_from_slice(&timestamp.to_be_bytes());
    b.extend_from_slice(&producer.id.to_be_bytes());
    b.extend_from_slice(&producer.epoch.to_be_bytes());
    b.extend_from_slice(&producer.base_sequence.to_be_bytes());
    b.extend_from_slice(&(records.len() as i32).to_be_bytes());
    b.extend_from_slice(&body);
    let crc = crc32c::crc32c(&b[ATTRIBUTES_OFFSET..]);
    b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

fn put_varlong(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// (offset, timestamp) of every record in one batch, decompressing it if needed. Used
/// only by timestamp lookups, never on the produce or fetch path.
pub fn record_timestamps(batch: &Bytes) -> Result<Vec<(i64, i64)>, BatchError> {
    let header = validate(batch)?;
    if header.attributes & ATTR_LOG_APPEND_TIME != 0 {
        return Ok((header.base_offset..=header.last_offset()).map(|o| (o, header.max_timestamp)).collect());
    }
    let mut buf = batch.clone();
    let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf)
        .map_err(|_| BatchError::BadRecordCount(header.records_count))?;
    Ok(set.records.iter().map(|r| (r.offset, r.timestamp)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_is_a_valid_transactional_control_batch_of_its_type() {
        for (commit, kind) in [(true, CONTROL_COMMIT), (false, CONTROL_ABORT)] {
            let b = build_marker(42, 3, commit, 7, 1000);
            let h = validate(&b).expect("valid");
            assert!(h.is_control() && h.is_transactional());
            assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence, h.records_count), (42, 3, -1, 1));
            assert_eq!(marker_type(&b), Some(kind));
        }
        assert_eq!(marker_type(&build_batch(0, 1, &[(Some(b"k"), None)])), None);
    }

    #[test]
    fn build_validate_patch_roundtrip() {
        let b = build_batch(0, 1000, &[(Some(b"k"), Some(b"v")), (None, Some(b"w"))]);
        let h = validate(&b).unwrap();
        assert_eq!(h.records_count, 2);
        assert_eq!(h.last_offset_delta, 1);
        let mut m = BytesMut::from(&b[..]);
        patch(&mut m, 42, 3, None);
        let h2 = validate(&m).unwrap();
        assert_eq!((h2.base_offset, h2.partition_leader_epoch, h2.last_offset()), (42, 3, 43));
        patch(&mut m, 42, 3, Some(5555));
        let h3 = validate(&m).unwrap();
        assert_eq!(h3.max_timestamp, 5555);
        assert_ne!(h3.attributes & ATTR_LOG_APPEND_TIME, 0);
    }

    #[test]
    fn every_flipped_byte_in_crc_region_is_caught() {
        let b = build_batch(0, 1, &[(Some(b"key"), Some(b"value"))]);
        for i in ATTRIBUTES_OFFSET..b.len() {
            let mut m = b.to_vec();
            m[i] ^= 0x40;
            assert!(validate(&m).is_err(), "flip at {i} not detected");
        }
    }

    #[test]
    fn split_rejects_truncation_and_bad_magic() {
        let one = build_batch(0, 1, &[(None, Some(b"a"))]);
        let mut two = BytesMut::from(&one[..]);
        two.extend_from_slice(&one);
        let two = two.freeze();
        assert_eq!(split_and_validate(&two).unwrap().len(), 2);
        assert!(split_and_validate(&two.slice(..two.len() - 1)).is_err());
        let mut bad = one.to_vec();
        bad[16] = 1;
        assert_eq!(split_and_validate(&Bytes::from(bad)), Err(BatchError::BadMagic(1)));
        for cut in 0..one.len() {
            assert!(split_and_validate(&one.slice(..cut)).map(|v| v.is_empty()).unwrap_or(true) || cut == 0);
        }
    }
}
