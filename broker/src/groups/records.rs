//! The records of `__consumer_offsets`: keys and values in Kafka's own schemas, so the
//! topic reads the same as Kafka's (and Kafka's tools could decode it).
//!
//! | key version | key | value |
//! |---|---|---|
//! | 1 | OffsetCommitKey (group, topic, partition) | OffsetCommitValue v3 |
//! | 2 | GroupMetadataKey (group) | GroupMetadataValue v3 (classic groups) |
//! | 3 | ConsumerGroupMetadataKey (group) | ConsumerGroupMetadataValue v0 (group epoch) |
//!
//! A record without a value is a tombstone: the offset or the group is deleted. Older
//! and unknown key versions are skipped on replay, never fatal: the log is the truth,
//! and a record this broker cannot read must not keep it from starting.

use bytes::{BufMut, Bytes, BytesMut};

const OFFSET_KEY: i16 = 1;
const GROUP_KEY: i16 = 2;
const CONSUMER_GROUP_KEY: i16 = 3;
const OFFSET_VALUE_VERSION: i16 = 3;
const GROUP_VALUE_VERSION: i16 = 3;
const CONSUMER_GROUP_VALUE_VERSION: i16 = 0;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey {
    Offset { group: String, topic: String, partition: i32 },
    Group { group: String },
    ConsumerGroup { group: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMemberValue {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// A classic group as persisted after each generation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub state_timestamp_ms: i64,
    pub members: Vec<GroupMemberValue>,
}

/// One decoded record: its key and, unless a tombstone, its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Offset { group: String, topic: String, partition: i32, value: Option<OffsetValue> },
    Group { group: String, value: Option<GroupValue> },
    ConsumerGroup { group: String, epoch: Option<i32> },
}

pub fn encode_key(key: &RecordKey) -> Bytes {
    let mut b = BytesMut::new();
    match key {
        RecordKey::Offset { group, topic, partition } => {
            b.put_i16(OFFSET_KEY);
            put_str(&mut b, group);
            put_str(&mut b, topic);
            b.put_i32(*partition);
        }
        RecordKey::Group { group } => {
            b.put_i16(GROUP_KEY);
            put_str(&mut b, group);
        }
        RecordKey::ConsumerGroup { group } => {
            b.put_i16(CONSUMER_GROUP_KEY);
            put_str(&mut b, group);
        }
    }
    b.freeze()
}

pub fn encode_offset(v: &OffsetValue) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(OFFSET_VALUE_VERSION);
    b.put_i64(v.offset);
    b.put_i32(v.leader_epoch);
    put_str(&mut b, &v.metadata);
    b.put_i64(v.commit_timestamp_ms);
    b.freeze()
}

pub fn encode_group(v: &GroupValue) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(GROUP_VALUE_VERSION);
    put_str(&mut b, &v.protocol_type);
    b.put_i32(v.generation);
    put_opt_str(&mut b, v.protocol.as_deref());
    put_opt_str(&mut b, v.leader.as_deref());
    b.put_i64(v.state_timestamp_ms);
    b.put_i32(v.members.len() as i32);
    for m in &v.members {
        put_str(&mut b, &m.member_id);
        put_opt_str(&mut b, m.instance_id.as_deref());
        put_str(&mut b, &m.client_id);
        put_str(&mut b, &m.client_host);
        b.put_i32(m.rebalance_timeout_ms);
        b.put_i32(m.session_timeout_ms);
        put_bytes(&mut b, &m.subscription);
        put_bytes(&mut b, &m.assignment);
    }
    b.freeze()
}

/// ConsumerGroupMetadataValue v0 is a flexible version: the epoch, then no tagged fields.
pub fn encode_consumer_group(epoch: i32) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(CONSUMER_GROUP_VALUE_VERSION);
    b.put_i32(epoch);
    b.put_u8(0);
    b.freeze()
}

/// Decodes one record; `None` for keys of versions this broker does not keep (or
/// damaged ones, which are logged).
pub fn decode(key: &[u8], value: Option<&[u8]>) -> Option<Record> {
    let mut k = Reader(key);
    let decoded = (|| -> Option<Record> {
        match k.i16()? {
            OFFSET_KEY | 0 => {
                let (group, topic, partition) = (k.string()?, k.string()?, k.i32()?);
                let value = match value {
                    Some(v) => Some(decode_offset(v)?),
                    None => None,
                };
                Some(Record::Offset { group, topic, partition, value })
            }
            GROUP_KEY => {
                let group = k.string()?;
                let value = match value {
                    Some(v) => Some(decode_group(v)?),
                    None => None,
                };
                Some(Record::Group { group, value })
            }
            CONSUMER_GROUP_KEY => {
                let group = k.string()?;
                let epoch = match value {
                    Some(v) => {
                        let mut r = Reader(v);
                        r.i16()?;
                        Some(r.i32()?)
                    }
                    None => None,
                };
                Some(Record::ConsumerGroup { group, epoch })
            }
            _ => None,
        }
    })();
    if decoded.is_none() && key.len() >= 2 && i16::from_be_bytes([key[0], key[1]]) <= CONSUMER_GROUP_KEY {
        tracing::warn!(key_len = key.len(), "skipping an undecodable __consumer_offsets record");
    }
    decoded
}

fn decode_offset(v: &[u8]) -> Option<OffsetValue> {
    let mut r = Reader(v);
    let version = r.i16()?;
    let offset = r.i64()?;
    let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
    let metadata = r.string()?;
    let commit_timestamp_ms = r.i64()?;
    Some(OffsetValue { offset, leader_epoch, metadata, commit_timestamp_ms })
}

fn decode_group(v: &[u8]) -> Option<GroupValue> {
    let mut r = Reader(v);
    let version = r.i16()?;
    if !(2..=3).contains(&version) {
        return None;
    }
    let mut g = GroupValue {
        protocol_type: r.string()?,
        generation: r.i32()?,
        protocol: r.opt_string()?,
        leader: r.opt_string()?,
        state_timestamp_ms: r.i64()?,
        members: Vec::new(),
    };
    let count = r.i32()?;
    for _ in 0..count.max(0) {
        let member_id = r.string()?;
        let instance_id = if version >= 3 { r.opt_string()? } else { None };
        g.members.push(GroupMemberValue {
            member_id,
            instance_id,
            client_id: r.string()?,
            client_host: r.string()?,
            rebalance_timeout_ms: r.i32()?,
            session_timeout_ms: r.i32()?,
            subscription: r.bytes()?,
            assignment: r.bytes()?,
        });
    }
    Some(g)
}

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

fn put_opt_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(b, s),
        None => b.put_i16(-1),
    }
}

fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_i32(v.len() as i32);
    b.put_slice(v);
}

/// A bounds-checked big-endian reader: every accessor answers `None` past the end.
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    pub fn i16(&mut self) -> Option<i16> {
        self.take(2).map(|b| i16::from_be_bytes([b[0], b[1]]))
    }
    pub fn i32(&mut self) -> Option<i32> {
        self.take(4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn i64(&mut self) -> Option<i64> {
        self.take(8).map(|b| i64::from_be_bytes(b.try_into().expect("8 bytes")))
    }
    pub fn opt_string(&mut self) -> Option<Option<String>> {
        let len = self.i16()?;
        if len < 0 {
            return Some(None);
        }
        let b = self.take(len as usize)?;
        Some(Some(String::from_utf8_lossy(b).into_owned()))
    }
    pub fn string(&mut self) -> Option<String> {
        self.opt_string()?.or(Some(String::new()))
    }
    pub fn bytes(&mut self) -> Option<Bytes> {
        let len = self.i32()?;
        if len < 0 {
            return Some(Bytes::new());
        }
        self.take(len as usize).map(Bytes::copy_from_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_record_roundtrip_and_tombstone() {
        let key = encode_key(&RecordKey::Offset { group: "g".into(), topic: "t".into(), partition: 7 });
        let v = OffsetValue { offset: 42, leader_epoch: 0, metadata: "m".into(), commit_timestamp_ms: 1000 };
        let value = encode_offset(&v);
        assert_eq!(
            decode(&key, Some(&value)),
            Some(Record::Offset { group: "g".into(), topic: "t".into(), partition: 7, value: Some(v) })
        );
        assert_eq!(
            decode(&key, None),
            Some(Record::Offset { group: "g".into(), topic: "t".into(), partition: 7, value: None })
        );
    }

    #[test]
    fn group_record_roundtrip() {
        let v = GroupValue {
            protocol_type: "consumer".into(),
            generation: 3,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            state_timestamp_ms: 5,
            members: vec![GroupMemberValue {
                member_id: "m1".into(),
                instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300_000,
                session_timeout_ms: 45_000,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"asg"),
            }],
        };
        let key = encode_key(&RecordKey::Group { group: "g".into() });
        assert_eq!(decode(&key, Some(&encode_group(&v))), Some(Record::Group { group: "g".into(), value: Some(v) }));
    }

    #[test]
    fn consumer_group_record_and_damage() {
        let key = encode_key(&RecordKey::ConsumerGroup { group: "g".into() });
        assert_eq!(
            decode(&key, Some(&encode_consumer_group(9))),
            Some(Record::ConsumerGroup { group: "g".into(), epoch: Some(9) })
        );
        assert_eq!(decode(&key[..3], None), None);
        assert_eq!(decode(&[0, 9, 0, 0], None), None);
    }
}
