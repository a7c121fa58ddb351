//! The record batches of a Fetch answer, compared field by field: data batches and
//! control batches (transaction markers).
//!
//! A data batch is the producer's batch as the broker stored it, so every header field
//! and every record field is compared, its records decompressed and read one by one:
//! the codec, timestamp type and other attributes, the offsets and deltas, the
//! timestamps, the producer fields, and each record's attributes, timestamp and offset
//! deltas, key, value and headers. Left out, each for a reason given in [`data_batch`]:
//! the partition leader epoch and the CRC. The broker's append time of a LogAppendTime
//! batch is compared by its form in normalize.rs.
//!
//! A control batch is written by the broker itself, and consumers, Kafka's log cleaner
//! and other brokers' replicas parse it, so every byte counts: each is compared except
//! the fields that are legitimately each broker's own, listed in [`control_batch`] with
//! their reasons. The bytes are shown by header field, in hex, so a report names the
//! field that differs.

use bytes::{Buf, Bytes};
use kafka_protocol::compression::{Decompressor, Gzip, Lz4, Snappy, Zstd};
use serde_json::{json, Map, Value};

/// Bytes of a v2 batch header: base offset (8), batch length (4), partition leader
/// epoch (4), magic (1), CRC (4), attributes (2), last offset delta (4), base and max
/// timestamps (8 each), producer id (8), producer epoch (2), base sequence (4), record
/// count (4).
const BATCH_HEADER_BYTES: usize = 61;
/// Where the bytes the CRC covers start: the attributes.
const CRC_COVERS_FROM: usize = 21;
/// Attribute bits of a v2 batch: the codec (3 bits), the timestamp type, transactional,
/// control and delete horizon.
const ATTRIBUTE_CODEC_MASK: u16 = 0x7;
const ATTRIBUTE_LOG_APPEND_TIME: u16 = 1 << 3;
const ATTRIBUTE_TRANSACTIONAL: u16 = 1 << 4;
const ATTRIBUTE_CONTROL: u16 = 1 << 5;
const ATTRIBUTE_DELETE_HORIZON: u16 = 1 << 6;
/// Bytes of a control record's value before the coordinator epoch: its version (i16).
const MARKER_COORDINATOR_EPOCH_AT: usize = 2;
const MARKER_COORDINATOR_EPOCH_BYTES: usize = 4;

/// Each fetched batch, data or control (see the module doc). A fetch may end inside a
/// batch (Kafka cuts the log at the byte limit and leaves the client to drop the
/// partial batch), so batches are framed here and a trailing partial one is skipped,
/// as clients do.
pub fn fetched_records(records: Option<&Bytes>) -> Value {
    let Some(records) = records else { return Value::Null };
    let mut rest = records.clone();
    let mut projected = Vec::new();
    // The epoch of each producer's last data batch, which a marker's epoch is compared to.
    let mut data_epochs: Vec<(i64, i16)> = Vec::new();
    while rest.len() >= 12 {
        let length = (&rest[8..12]).get_i32();
        let batch_len = 12 + length.max(0) as usize;
        if length < 0 || rest.len() < batch_len {
            break;
        }
        let batch = rest.split_to(batch_len);
        if batch.len() < BATCH_HEADER_BYTES {
            projected.push(json!({ "undecodable_batch": hex(&batch) }));
            continue;
        }
        if (&batch[21..23]).get_u16() & ATTRIBUTE_CONTROL != 0 {
            projected.push(control_batch(&batch, &data_epochs));
            continue;
        }
        let (producer_id, epoch) = ((&batch[43..51]).get_i64(), (&batch[51..53]).get_i16());
        data_epochs.retain(|(id, _)| *id != producer_id);
        data_epochs.push((producer_id, epoch));
        projected.push(data_batch(batch));
    }
    Value::Array(projected)
}

/// A data batch, every field compared except:
/// - the partition leader epoch: each broker's own count of leader changes (see
///   `leader_epoch` in normalize.rs);
/// - the CRC: it covers the max timestamp, which is the broker's clock in a
///   LogAppendTime batch, so each side's CRC-32C is checked instead (`crc_valid`);
/// - the batch length of a compressed batch: a broker that compresses a batch itself
///   (the topic's `compression.type` is not the producer's codec) gets its own
///   library's bytes, so the codec and the decompressed records are compared instead.
///
/// The base offset and each record's offset (base offset plus delta) are compared: both
/// brokers start each topic empty, so equal behaviour gives equal offsets. The producer
/// id is made a symbol and a LogAppendTime max timestamp compared by its form, both in
/// normalize.rs.
fn data_batch(batch: Bytes) -> Value {
    let attributes = (&batch[21..23]).get_u16();
    let base_offset = (&batch[0..8]).get_i64();
    let base_timestamp = (&batch[27..35]).get_i64();
    let records = match decompressed_records(attributes, batch.slice(BATCH_HEADER_BYTES..)) {
        Ok(bytes) => data_records(&bytes, base_offset),
        Err(error) => json!({ "undecompressable": error }),
    };
    json!({
        "base_offset": base_offset,
        "batch_length": (attributes & ATTRIBUTE_CODEC_MASK == 0).then(|| (&batch[8..12]).get_i32()),
        "magic": batch[16],
        "crc_valid": crc32c::crc32c(&batch[CRC_COVERS_FROM..]) == (&batch[17..21]).get_u32(),
        "codec": codec_name(attributes),
        "timestamp_type": if attributes & ATTRIBUTE_LOG_APPEND_TIME != 0 { "LogAppendTime" } else { "CreateTime" },
        "transactional": attributes & ATTRIBUTE_TRANSACTIONAL != 0,
        "delete_horizon": attributes & ATTRIBUTE_DELETE_HORIZON != 0,
        "unused_attribute_bits": format!("{:04x}", attributes & !0x7f),
        "last_offset_delta": (&batch[23..27]).get_i32(),
        "base_timestamp": base_timestamp,
        "max_timestamp": (&batch[35..43]).get_i64(),
        "producer_id": (&batch[43..51]).get_i64(),
        "producer_epoch": (&batch[51..53]).get_i16(),
        "base_sequence": (&batch[53..57]).get_i32(),
        "record_count": (&batch[57..61]).get_i32(),
        "records": records,
    })
}

fn codec_name(attributes: u16) -> String {
    match attributes & ATTRIBUTE_CODEC_MASK {
        0 => "none".into(),
        1 => "gzip".into(),
        2 => "snappy".into(),
        3 => "lz4".into(),
        4 => "zstd".into(),
        other => format!("codec {other}"),
    }
}

/// The records section of a batch, decompressed with the batch's codec.
fn decompressed_records(attributes: u16, mut compressed: Bytes) -> Result<Bytes, String> {
    let copy = |buf: &mut Bytes| Ok(buf.clone());
    let decompressed = match attributes & ATTRIBUTE_CODEC_MASK {
        0 => return Ok(compressed),
        1 => Gzip::decompress(&mut compressed, copy),
        2 => Snappy::decompress(&mut compressed, copy),
        3 => Lz4::decompress(&mut compressed, copy),
        4 => Zstd::decompress(&mut compressed, copy),
        other => return Err(format!("unknown codec {other}")),
    };
    decompressed.map_err(|error| error.to_string())
}

/// Every field of each record; the raw rest in hex when a record cannot be parsed.
fn data_records(mut bytes: &[u8], base_offset: i64) -> Value {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let Some(record) = parse_record(bytes) else {
            out.push(json!({ "unparsable": hex(bytes) }));
            break;
        };
        let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
        let headers: Vec<Value> =
            record.headers.iter().map(|(key, value)| json!([text(Some(key)), text(*value)])).collect();
        out.push(json!({
            "offset": base_offset + record.offset_delta,
            "attributes": record.attributes,
            "timestamp_delta": record.timestamp_delta,
            "offset_delta": record.offset_delta,
            "key": text(record.key),
            "value": text(record.value),
            "headers": headers,
        }));
        bytes = &bytes[record.length..];
    }
    Value::Array(out)
}

/// A control batch, every byte compared except:
/// - the base offset: shown as the marker's `offset` instead, like a record's offset;
/// - the partition leader epoch: each broker's own count of leader changes (see
///   `leader_epoch` in normalize.rs);
/// - the CRC: it covers the timestamps and the producer id, which differ, so each
///   side's CRC-32C is checked over the attributes to the end instead (`crc_valid`);
/// - the base and max timestamps: each broker's clock;
/// - the producer id: each broker gives its own (made a symbol in normalize.rs);
/// - the producer epoch: shown as its difference from the epoch of the producer's last
///   data batch in the same answer (0 in transaction version 1, 1 in version 2, where
///   the epoch moves at EndTxn), null when the answer holds no data batch of it;
/// - the coordinator epoch in the control record's value: each broker's own count of
///   transaction coordinator changes.
fn control_batch(batch: &[u8], data_epochs: &[(i64, i16)]) -> Value {
    let hex_of = |from: usize, to: usize| hex(&batch[from..to]);
    let stored_crc = (&batch[17..21]).get_u32();
    let producer_id = (&batch[43..51]).get_i64();
    let epoch = (&batch[51..53]).get_i16();
    let epoch_after_data = data_epochs.iter().find(|(id, _)| *id == producer_id).map(|(_, data)| epoch - data);
    let mut fields = Map::new();
    fields.insert("control_batch_offset".into(), json!((&batch[0..8]).get_i64()));
    fields.insert("marker".into(), json!(marker_type(&batch[BATCH_HEADER_BYTES..])));
    fields.insert("crc_valid".into(), json!(crc32c::crc32c(&batch[CRC_COVERS_FROM..]) == stored_crc));
    fields.insert("batch_length".into(), json!(hex_of(8, 12)));
    fields.insert("magic".into(), json!(hex_of(16, 17)));
    fields.insert("attributes".into(), json!(hex_of(21, 23)));
    fields.insert("last_offset_delta".into(), json!(hex_of(23, 27)));
    fields.insert("producer_id".into(), json!(producer_id));
    fields.insert("producer_epoch_after_data".into(), json!(epoch_after_data));
    fields.insert("base_sequence".into(), json!(hex_of(53, 57)));
    fields.insert("record_count".into(), json!(hex_of(57, 61)));
    fields.insert("records".into(), json!(control_records(&batch[BATCH_HEADER_BYTES..])));
    Value::Object(fields)
}

/// "COMMIT" or "ABORT" from the first control record's key (version i16, type i16).
fn marker_type(records: &[u8]) -> String {
    match parse_record(records).and_then(|r| r.key) {
        Some(key) if key.len() >= 4 => match (&key[2..4]).get_i16() {
            0 => "ABORT".into(),
            1 => "COMMIT".into(),
            other => format!("control type {other}"),
        },
        _ => "unreadable control record".into(),
    }
}

/// The records of a control batch in hex, the coordinator epoch of each marker value
/// shown as `________`; the raw hex when a record cannot be parsed.
fn control_records(mut records: &[u8]) -> String {
    let mut out = Vec::new();
    while !records.is_empty() {
        let Some(record) = parse_record(records) else {
            out.push(format!("unparsable: {}", hex(records)));
            break;
        };
        let mut text = String::new();
        for (i, byte) in records[..record.length].iter().enumerate() {
            let masked = record.value_at.is_some_and(|at| {
                (at + MARKER_COORDINATOR_EPOCH_AT..at + MARKER_COORDINATOR_EPOCH_AT + MARKER_COORDINATOR_EPOCH_BYTES)
                    .contains(&i)
            });
            text.push_str(&if masked { "__".to_string() } else { format!("{byte:02x}") });
        }
        out.push(text);
        records = &records[record.length..];
    }
    out.join(" ")
}

/// One record, parsed: its total length (length varint included), its fields, and
/// where its value starts (when it is long enough to hold a coordinator epoch).
struct ParsedRecord<'a> {
    length: usize,
    attributes: u8,
    timestamp_delta: i64,
    offset_delta: i64,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    value_at: Option<usize>,
    headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

/// Record layout: length varint, attributes i8, timestamp delta varlong, offset delta
/// varint, key length varint, key, value length varint, value, header count varint,
/// headers (key length varint, key, value length varint, value).
fn parse_record(bytes: &[u8]) -> Option<ParsedRecord<'_>> {
    let mut at = 0;
    let body = usize::try_from(varint(bytes, &mut at)?).ok()?;
    let length = at.checked_add(body)?;
    let bytes = bytes.get(..length)?;
    let attributes = *bytes.get(at)?;
    at += 1;
    let timestamp_delta = varint(bytes, &mut at)?;
    let offset_delta = varint(bytes, &mut at)?;
    let key = length_prefixed(bytes, &mut at)?;
    let value_length = varint(bytes, &mut at)?;
    let value_at = (value_length >= (MARKER_COORDINATOR_EPOCH_AT + MARKER_COORDINATOR_EPOCH_BYTES) as i64
        && at + value_length as usize <= length)
        .then_some(at);
    at -= varint_length(value_length);
    let value = length_prefixed(bytes, &mut at)?;
    let mut headers = Vec::new();
    for _ in 0..varint(bytes, &mut at)? {
        let header_key = length_prefixed(bytes, &mut at)??;
        headers.push((header_key, length_prefixed(bytes, &mut at)?));
    }
    (at == length).then_some(ParsedRecord {
        length,
        attributes,
        timestamp_delta,
        offset_delta,
        key,
        value,
        value_at,
        headers,
    })
}

/// A varint length (-1 for null) and that many bytes at `*at`, which moves past them.
fn length_prefixed<'a>(bytes: &'a [u8], at: &mut usize) -> Option<Option<&'a [u8]>> {
    match varint(bytes, at)? {
        -1 => Some(None),
        n => {
            let n = usize::try_from(n).ok()?;
            let field = bytes.get(*at..at.checked_add(n)?)?;
            *at += n;
            Some(Some(field))
        }
    }
}

/// How many bytes the zigzag varint of `value` takes.
fn varint_length(value: i64) -> usize {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    let mut length = 1;
    while raw >= 0x80 {
        raw >>= 7;
        length += 1;
    }
    length
}

/// A zigzag varint (Kafka's record fields) at `*at`, which moves past it.
fn varint(bytes: &[u8], at: &mut usize) -> Option<i64> {
    let mut raw: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    None
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit marker as Kafka writes one: producer 7, epoch 3, coordinator epoch 5.
    fn commit_marker(coordinator_epoch: i32) -> Vec<u8> {
        let mut value = vec![0, 0];
        value.extend_from_slice(&coordinator_epoch.to_be_bytes());
        let key = [0u8, 0, 0, 1];
        let mut body = vec![0u8, 0, 0, 8]; // attributes, timestamp delta, offset delta, key length 4
        body.extend_from_slice(&key);
        body.push(12); // value length 6
        body.extend_from_slice(&value);
        body.push(0); // no headers
        let mut record = vec![(body.len() as u8) << 1];
        record.extend_from_slice(&body);
        let mut after_crc = Vec::new();
        after_crc.extend_from_slice(&(ATTRIBUTE_CONTROL | 1 << 4).to_be_bytes());
        after_crc.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
        after_crc.extend_from_slice(&1_000i64.to_be_bytes());
        after_crc.extend_from_slice(&1_000i64.to_be_bytes());
        after_crc.extend_from_slice(&7i64.to_be_bytes());
        after_crc.extend_from_slice(&3i16.to_be_bytes());
        after_crc.extend_from_slice(&(-1i32).to_be_bytes());
        after_crc.extend_from_slice(&1i32.to_be_bytes());
        after_crc.extend_from_slice(&record);
        let mut batch = 42i64.to_be_bytes().to_vec();
        batch.extend_from_slice(&((after_crc.len() + 9) as i32).to_be_bytes());
        batch.extend_from_slice(&0i32.to_be_bytes()); // partition leader epoch
        batch.push(2);
        batch.extend_from_slice(&crc32c::crc32c(&after_crc).to_be_bytes());
        batch.extend_from_slice(&after_crc);
        batch
    }

    #[test]
    fn a_control_batch_is_compared_without_its_coordinator_epoch() {
        let fetched = fetched_records(Some(&Bytes::from(commit_marker(5))));
        let marker = &fetched[0];
        assert_eq!(marker["marker"], "COMMIT");
        assert_eq!(marker["crc_valid"], true);
        assert_eq!(marker["control_batch_offset"], 42);
        assert_eq!(marker["records"], "2000000008000000010c0000________00");
        assert_eq!(fetched, fetched_records(Some(&Bytes::from(commit_marker(9)))), "coordinator epoch masked");
    }

    #[test]
    fn a_compressed_data_batch_is_compared_record_by_record() {
        use kafka_protocol::indexmap::IndexMap;
        use kafka_protocol::protocol::StrBytes;
        use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
        let mut headers = IndexMap::new();
        headers.insert(StrBytes::from_static_str("h"), None);
        let records: Vec<Record> = (0..2)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i,
                sequence: i as i32 - 1,
                timestamp: 1_000 + i * 10,
                key: Some(Bytes::from(format!("k{i}"))),
                value: None,
                headers: headers.clone(),
            })
            .collect();
        let mut buf = bytes::BytesMut::new();
        let options = RecordEncodeOptions { version: 2, compression: Compression::Lz4 };
        RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
        let batch = &fetched_records(Some(&buf.freeze()))[0];
        assert_eq!(batch["codec"], "lz4");
        assert_eq!(batch["batch_length"], Value::Null, "a compressed batch's length is not compared");
        assert_eq!((batch["crc_valid"].clone(), batch["record_count"].clone()), (json!(true), json!(2)));
        assert_eq!((batch["base_timestamp"].clone(), batch["max_timestamp"].clone()), (json!(1_000), json!(1_010)));
        let second = &batch["records"][1];
        assert_eq!((second["offset_delta"].clone(), second["timestamp_delta"].clone()), (json!(1), json!(10)));
        assert_eq!((second["key"].clone(), second["value"].clone()), (json!("k1"), Value::Null));
        assert_eq!(second["headers"], json!([["h", null]]));
    }

    #[test]
    fn a_corrupted_control_batch_fails_its_crc() {
        let mut batch = commit_marker(5);
        let last = batch.len() - 1;
        batch[last] ^= 1;
        assert_eq!(fetched_records(Some(&Bytes::from(batch)))[0]["crc_valid"], false);
    }
}
