//! `__transaction_state` records in Kafka's own schemas (`TransactionLogKey` and
//! `TransactionLogValue`, version 0), so Kafka's tools read Keel's log as their own:
//!
//! - key: version (int16), transactional id (string);
//! - value: version (int16), producer id (int64), producer epoch (int16), timeout
//!   (int32), status (int8), partitions (array of topic + partition ids), last update
//!   and start timestamps (int64).

use std::collections::BTreeSet;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::state::{TxnMeta, TxnStatus};

pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + transactional_id.len());
    b.put_i16(0);
    put_str(&mut b, transactional_id);
    b.freeze()
}

pub fn encode_value(m: &TxnMeta) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_i16(0);
    b.put_i64(m.producer_id);
    b.put_i16(m.producer_epoch);
    b.put_i32(m.timeout_ms);
    b.put_i8(m.status as i8);
    let mut by_topic: Vec<(&str, Vec<i32>)> = Vec::new();
    for (topic, p) in &m.partitions {
        match by_topic.last_mut() {
            Some((t, ps)) if *t == topic.as_str() => ps.push(*p),
            _ => by_topic.push((topic.as_str(), vec![*p])),
        }
    }
    b.put_i32(by_topic.len() as i32);
    for (topic, ps) in by_topic {
        put_str(&mut b, topic);
        b.put_i32(ps.len() as i32);
        for p in ps {
            b.put_i32(p);
        }
    }
    b.put_i64(m.last_update_ms);
    b.put_i64(m.start_ms);
    b.freeze()
}

/// The transactional id of a key; None for a key of another kind or version.
pub fn decode_key(mut key: &[u8]) -> Option<String> {
    if key.remaining() < 2 || key.get_i16() != 0 {
        return None;
    }
    get_str(&mut key)
}

/// A value; None when it cannot be read (a later schema version Keel does not know
/// is read for its version-0 fields, which every version starts with).
pub fn decode_value(mut v: &[u8]) -> Option<TxnMeta> {
    if v.remaining() < 2 {
        return None;
    }
    let version = v.get_i16();
    if version != 0 {
        return None;
    }
    if v.remaining() < 15 {
        return None;
    }
    let producer_id = v.get_i64();
    let producer_epoch = v.get_i16();
    let timeout_ms = v.get_i32();
    let status = TxnStatus::from_id(v.get_i8())?;
    let mut partitions = BTreeSet::new();
    if v.remaining() < 4 {
        return None;
    }
    let topics = v.get_i32();
    for _ in 0..topics.max(0) {
        let topic = get_str(&mut v)?;
        if v.remaining() < 4 {
            return None;
        }
        let n = v.get_i32();
        for _ in 0..n.max(0) {
            if v.remaining() < 4 {
                return None;
            }
            partitions.insert((topic.clone(), v.get_i32()));
        }
    }
    if v.remaining() < 16 {
        return None;
    }
    let last_update_ms = v.get_i64();
    let start_ms = v.get_i64();
    Some(TxnMeta { producer_id, producer_epoch, timeout_ms, status, partitions, start_ms, last_update_ms })
}

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

fn get_str(b: &mut &[u8]) -> Option<String> {
    if b.remaining() < 2 {
        return None;
    }
    let len = b.get_i16();
    if len < 0 || b.remaining() < len as usize {
        return None;
    }
    let s = String::from_utf8(b[..len as usize].to_vec()).ok()?;
    b.advance(len as usize);
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut m = TxnMeta::new(42, 60_000, 5);
        m.status = TxnStatus::Ongoing;
        m.partitions = [("a".to_string(), 0), ("a".to_string(), 3), ("b".to_string(), 1)].into_iter().collect();
        m.start_ms = 4;
        assert_eq!(decode_value(&encode_value(&m)), Some(m));
        assert_eq!(decode_key(&encode_key("txn-1")), Some("txn-1".to_string()));
        assert_eq!(decode_key(&[0, 1, 0]), None);
    }
}
