//! Removing records from a RecordBatch v2 without re-encoding the ones that stay.
//!
//! Compaction must keep offsets, and a batch it shrinks keeps its base offset, base
//! timestamp, max timestamp, last offset delta, producer id, epoch and base sequence.
//! Each record stores its offset and timestamp as deltas from the batch's base, so the
//! bytes of a kept record are valid unchanged in the rebuilt batch: the body is
//! decompressed, split into records, the kept records' bytes concatenated and
//! compressed again with the batch's codec, and only the record count, the length and
//! the CRC change. A general encoder (`kafka_protocol`'s) would instead rebase offsets
//! and timestamps on the first kept record and drop the timestamp-type flag.
//!
//! Keeping `lastOffsetDelta` matters: the broker derives a producer's last sequence
//! from it, so idempotent-producer state survives compaction. A batch left with no
//! record becomes a header-only batch, as Kafka writes for the same reason.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd};
use keel_protocol::batch::{BatchHeader, ATTR_COMPRESSION_MASK, ATTR_LOG_APPEND_TIME, BATCH_HEADER_LEN};

const BATCH_LENGTH_OFFSET: usize = 8;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const RECORDS_COUNT_OFFSET: usize = 57;

/// One record of a decompressed batch body, borrowed from it.
#[derive(Debug, Clone, Copy)]
pub struct RawRecord<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    /// `None` for a tombstone.
    pub value: Option<&'a [u8]>,
    /// The whole record as stored, length prefix included.
    pub bytes: &'a [u8],
}

/// The batch's records, decompressed.
pub fn decompressed_body(header: &BatchHeader, batch: &Bytes) -> Result<Bytes, String> {
    let mut body = batch.slice(BATCH_HEADER_LEN..);
    let r = match header.compression() {
        0 => return Ok(body),
        1 => <Gzip as Decompressor<Bytes>>::decompress(&mut body, |b| Ok(std::mem::take(b))),
        2 => <Snappy as Decompressor<Bytes>>::decompress(&mut body, |b| Ok(std::mem::take(b))),
        3 => <Lz4 as Decompressor<Bytes>>::decompress(&mut body, |b| Ok(std::mem::take(b))),
        4 => <Zstd as Decompressor<Bytes>>::decompress(&mut body, |b| Ok(std::mem::take(b))),
        c => return Err(format!("unknown compression codec {c}")),
    };
    r.map_err(|e| format!("decompressing batch at offset {}: {e}", header.base_offset))
}

fn compress(codec: i16, raw: &[u8], out: &mut BytesMut) -> Result<(), String> {
    let put = |b: &mut BytesMut| {
        b.extend_from_slice(raw);
        Ok(())
    };
    let r = match codec {
        0 => {
            out.extend_from_slice(raw);
            return Ok(());
        }
        1 => <Gzip as Compressor<BytesMut>>::compress(out, put),
        2 => <Snappy as Compressor<BytesMut>>::compress(out, put),
        3 => <Lz4 as Compressor<BytesMut>>::compress(out, put),
        4 => <Zstd as Compressor<BytesMut>>::compress(out, put),
        c => return Err(format!("unknown compression codec {c}")),
    };
    r.map_err(|e| format!("compressing: {e}"))
}

/// Splits a decompressed body into its records.
pub fn parse_records<'a>(header: &BatchHeader, body: &'a [u8]) -> Result<Vec<RawRecord<'a>>, String> {
    let mut out = Vec::with_capacity(header.records_count.max(0) as usize);
    let mut rest = body;
    let log_append_time = header.attributes & ATTR_LOG_APPEND_TIME != 0;
    for _ in 0..header.records_count {
        let start = rest;
        let len = varint(&mut rest)?;
        let len = usize::try_from(len).map_err(|_| format!("record length {len}"))?;
        if rest.len() < len {
            return Err(format!("record of {len} bytes past the body's end"));
        }
        let (mut rec, after) = rest.split_at(len);
        let bytes = &start[..start.len() - after.len()];
        rest = after;
        if rec.is_empty() {
            return Err("empty record".into());
        }
        rec.advance(1); // attributes
        let timestamp_delta = varint(&mut rec)?;
        let offset_delta = varint(&mut rec)?;
        let key = bytes_field(&mut rec)?;
        let value = bytes_field(&mut rec)?;
        let timestamp = if log_append_time { header.max_timestamp } else { header.base_timestamp + timestamp_delta };
        out.push(RawRecord { offset: header.base_offset + offset_delta, timestamp, key, value, bytes });
    }
    Ok(out)
}

/// A batch holding only `kept` (records of `batch`, in order), or a header-only batch
/// when `kept` is empty. Everything but the record count, length and CRC is kept.
pub fn rebuild(header: &BatchHeader, batch: &Bytes, kept: &[RawRecord<'_>]) -> Result<Bytes, String> {
    let mut raw = Vec::with_capacity(kept.iter().map(|r| r.bytes.len()).sum());
    for r in kept {
        raw.extend_from_slice(r.bytes);
    }
    let mut out = BytesMut::with_capacity(BATCH_HEADER_LEN + raw.len());
    out.extend_from_slice(&batch[..BATCH_HEADER_LEN]);
    let codec = if kept.is_empty() { 0 } else { header.compression() };
    if kept.is_empty() {
        let attrs = header.attributes & !ATTR_COMPRESSION_MASK;
        out[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attrs.to_be_bytes());
    }
    compress(codec, &raw, &mut out)?;
    let batch_length = (out.len() - 12) as i32;
    out[BATCH_LENGTH_OFFSET..BATCH_LENGTH_OFFSET + 4].copy_from_slice(&batch_length.to_be_bytes());
    out[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&(kept.len() as i32).to_be_bytes());
    let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
    out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out.freeze())
}

/// The same batch with its records compressed by `codec` (0: none) instead of the
/// producer's codec, as Kafka stores a batch whose codec is not the topic's
/// `compression.type`. The records' bytes, offsets, timestamps and every other header
/// field stay; the codec bits, the length and the CRC change.
pub fn recompressed(header: &BatchHeader, batch: &Bytes, codec: i16) -> Result<Bytes, String> {
    let raw = decompressed_body(header, batch)?;
    let mut out = BytesMut::with_capacity(BATCH_HEADER_LEN + raw.len());
    out.extend_from_slice(&batch[..BATCH_HEADER_LEN]);
    let attrs = (header.attributes & !ATTR_COMPRESSION_MASK) | (codec & ATTR_COMPRESSION_MASK);
    out[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attrs.to_be_bytes());
    compress(codec, &raw, &mut out)?;
    let batch_length = i32::try_from(out.len() - 12).map_err(|_| "recompressed batch too large".to_string())?;
    out[BATCH_LENGTH_OFFSET..BATCH_LENGTH_OFFSET + 4].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
    out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out.freeze())
}

/// A zigzag varint (Kafka's varint and varlong share the encoding).
fn varint(buf: &mut &[u8]) -> Result<i64, String> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        if buf.is_empty() {
            return Err("varint past the end".into());
        }
        let b = buf.get_u8();
        value |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    Err("varint longer than 10 bytes".into())
}

fn bytes_field<'a>(buf: &mut &'a [u8]) -> Result<Option<&'a [u8]>, String> {
    let len = varint(buf)?;
    if len < 0 {
        return Ok(None);
    }
    let len = len as usize;
    if buf.len() < len {
        return Err(format!("field of {len} bytes past the record's end"));
    }
    let (field, rest) = buf.split_at(len);
    *buf = rest;
    Ok(Some(field))
}

/// Appends a zigzag varint, for tests building records.
pub fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

    fn encoded(compression: Compression) -> Bytes {
        let records: Vec<Record> = (0..6)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 3,
                producer_id: 77,
                producer_epoch: 2,
                timestamp_type: TimestampType::Creation,
                offset: 100 + i,
                sequence: 10 + i as i32,
                timestamp: 5000 + i,
                key: Some(Bytes::from(format!("k{}", i % 3))),
                value: (i != 4).then(|| Bytes::from(format!("v{i}"))),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression }).unwrap();
        buf.freeze()
    }

    #[test]
    fn a_recompressed_batch_keeps_its_records_and_header() {
        let batch = encoded(Compression::Lz4);
        let h = keel_protocol::batch::validate(&batch).unwrap();
        for codec in 0..=4 {
            let again = recompressed(&h, &batch, codec).unwrap();
            let h2 = keel_protocol::batch::validate(&again).unwrap();
            assert_eq!(h2.compression(), codec);
            assert_eq!(
                (h2.base_timestamp, h2.max_timestamp, h2.records_count),
                (h.base_timestamp, h.max_timestamp, h.records_count)
            );
            assert_eq!(decompressed_body(&h2, &again).unwrap(), decompressed_body(&h, &batch).unwrap());
        }
    }

    #[test]
    fn filtered_batches_keep_offsets_and_producer_fields_for_every_codec() {
        for c in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let batch = encoded(c);
            let h = keel_protocol::batch::validate(&batch).unwrap();
            let body = decompressed_body(&h, &batch).unwrap();
            let records = parse_records(&h, &body).unwrap();
            assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), (100..106).collect::<Vec<_>>());
            assert_eq!(records[3].timestamp, 5003);
            assert!(records[4].value.is_none());
            let kept: Vec<_> = records.iter().filter(|r| r.offset % 2 == 1).copied().collect();
            let rebuilt = rebuild(&h, &batch, &kept).unwrap();
            let h2 = keel_protocol::batch::validate(&rebuilt).unwrap();
            assert_eq!((h2.base_offset, h2.last_offset(), h2.records_count), (100, 105, 3));
            assert_eq!((h2.producer_id, h2.producer_epoch, h2.base_sequence), (77, 2, 10));
            assert_eq!((h2.base_timestamp, h2.max_timestamp, h2.compression()), (5000, 5005, h.compression()));
            let mut buf = rebuilt.clone();
            let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).unwrap();
            let got: Vec<_> = set.records.iter().map(|r| (r.offset, r.timestamp, r.key.clone())).collect();
            let want: Vec<_> = [101i64, 103, 105]
                .iter()
                .map(|&o| (o, 4900 + o, Some(Bytes::from(format!("k{}", (o - 100) % 3)))))
                .collect();
            assert_eq!(got, want, "{c:?}");
        }
    }

    #[test]
    fn emptied_batch_is_a_valid_header_only_batch() {
        let batch = encoded(Compression::Lz4);
        let h = keel_protocol::batch::validate(&batch).unwrap();
        let empty = rebuild(&h, &batch, &[]).unwrap();
        assert_eq!(empty.len(), BATCH_HEADER_LEN);
        let h2 = keel_protocol::batch::validate(&empty).unwrap();
        assert_eq!((h2.base_offset, h2.last_offset(), h2.records_count, h2.compression()), (100, 105, 0, 0));
        assert_eq!(h2.last_sequence(), h.last_sequence());
        // Readers that decode records (the group coordinator's replay) see no record.
        let mut buf = empty.clone();
        assert!(kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).unwrap().records.is_empty());
    }

    #[test]
    fn truncated_bodies_are_errors_not_panics() {
        let batch = encoded(Compression::None);
        let h = keel_protocol::batch::validate(&batch).unwrap();
        let body = decompressed_body(&h, &batch).unwrap();
        for cut in 0..body.len() {
            assert!(parse_records(&h, &body[..cut]).is_err());
        }
    }
}
