//! The node-to-node frame: many Raft messages from one shard to one shard of another
//! node, in one TCP write.
//!
//! ```text
//! frame    = length:u32 crc:u32 payload          big-endian; crc32c of the payload
//! payload  = version:u8 (1) kind:u8 from_node:u64 from_shard:u16 to_shard:u16 body
//! body     = count:u32 message{count}            kind 1: Raft messages
//!          | length:u32 bytes{length}             kind 2: one control message
//! message  = topic:u128 partition:u32 proto_length:u32 proto
//!            entry_count:u32 data_length:u32{entry_count} data{entry_count}
//! ```
//!
//! `proto` is raft-rs's `Message` in protobuf with every entry's `data` emptied; the
//! entries' data follow it raw. Why not leave them in the protobuf: entry data are Kafka
//! record batches, already held as `Bytes` (the produce request, the batch cache), and
//! protobuf would copy each batch into a new buffer on send and out of the frame on
//! receive. Set apart, the sender writes them straight from their `Bytes` (the frame is
//! a list of slices, see [`Frame::parts`]) and the receiver hands out `Bytes::slice`s of
//! the frame it read.
//!
//! The CRC covers the payload because a corrupted Raft entry would become durable on
//! every replica, and TCP's checksum misses too much. The length is checked against
//! `frame_bytes_max` before the payload is read, so a peer cannot make the receiver
//! allocate what it claims.

use std::ops::Range;

use bytes::Bytes;
use keel_raft::{Envelope, GroupId, Message, NodeId};
use protobuf::Message as _;
use thiserror::Error;

pub const FORMAT_VERSION: u8 = 1;
pub const KIND_RAFT_MESSAGES: u8 = 1;
/// A node's request to the controller (`cluster::nodes`): rare, small, opaque here.
pub const KIND_CONTROL: u8 = 2;
/// `length` and `crc`, before the payload.
pub const PREFIX_BYTES: usize = 8;
/// Version, kind, from node, from shard, to shard, message count.
pub const PAYLOAD_HEADER_BYTES: usize = 1 + 1 + 8 + 2 + 2 + 4;
/// Where the message count sits in the payload.
const COUNT_AT: usize = PAYLOAD_HEADER_BYTES - 4;
/// A message's topic, partition, protobuf length and entry count.
const MESSAGE_FIXED_BYTES: usize = 16 + 4 + 4 + 4;
const ENTRY_LENGTH_BYTES: usize = 4;

/// Why a received frame was refused. Every one closes the connection it came on.
#[derive(Debug, Error)]
pub enum FrameError {
    #[error("frame payload of {length} bytes is over the {max}-byte maximum")]
    TooLarge { length: usize, max: usize },
    #[error("frame CRC mismatch: prefix says {expected:#010x}, payload has {actual:#010x}")]
    Crc { expected: u32, actual: u32 },
    #[error("connection closed inside a frame")]
    Truncated,
    #[error("unknown frame format version {0}")]
    Version(u8),
    #[error("unknown frame kind {0}")]
    Kind(u8),
    #[error("frame for shard {to} reached shard {shard}")]
    WrongShard { to: u16, shard: u16 },
    #[error("frame ends inside {0}")]
    Short(&'static str),
    #[error("message {index} of the frame cannot be decoded: {source}")]
    Decode { index: u32, source: protobuf::ProtobufError },
    #[error("message {index} of the frame has {lengths} entry lengths for {entries} entries")]
    EntryCount { index: u32, lengths: u32, entries: usize },
    #[error("{0} bytes follow the frame's last message")]
    Trailing(usize),
}

/// A frame's length and CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    pub length: usize,
    pub crc: u32,
}

/// Reads a frame's prefix, refusing a payload longer than `frame_bytes_max`.
pub fn read_prefix(prefix: [u8; PREFIX_BYTES], frame_bytes_max: usize) -> Result<Prefix, FrameError> {
    let [l0, l1, l2, l3, c0, c1, c2, c3] = prefix;
    let length = u32::from_be_bytes([l0, l1, l2, l3]) as usize;
    if length > frame_bytes_max {
        return Err(FrameError::TooLarge { length, max: frame_bytes_max });
    }
    Ok(Prefix { length, crc: u32::from_be_bytes([c0, c1, c2, c3]) })
}

pub fn check_crc(payload: &[u8], expected: u32) -> Result<(), FrameError> {
    let actual = crc32c::crc32c(payload);
    if actual != expected {
        return Err(FrameError::Crc { expected, actual });
    }
    Ok(())
}

/// A Raft message made ready for a frame: its entries' data set apart from the rest,
/// and its size on the wire known before it is queued.
pub struct Outgoing {
    group: GroupId,
    /// With every entry's data emptied.
    message: Message,
    data: Vec<Bytes>,
    proto_bytes: usize,
}

impl Outgoing {
    pub fn new(envelope: Envelope) -> Outgoing {
        let Envelope { group, mut message } = envelope;
        let data = message.entries.iter_mut().map(|entry| std::mem::take(&mut entry.data)).collect();
        let proto_bytes = message.compute_size() as usize;
        Outgoing { group, message, data, proto_bytes }
    }

    /// What the message adds to a frame's payload.
    pub fn wire_bytes(&self) -> usize {
        let data: usize = self.data.iter().map(|data| ENTRY_LENGTH_BYTES + data.len()).sum();
        MESSAGE_FIXED_BYTES + self.proto_bytes + data
    }
}

/// Builds one frame: every byte but the entries' data goes into one buffer, the data
/// stay in their `Bytes`.
pub struct FrameBuilder {
    meta: Vec<u8>,
    /// Each entry's data, after the meta bytes up to the offset it is paired with.
    data: Vec<(usize, Bytes)>,
    payload_bytes: usize,
    messages: u32,
}

impl FrameBuilder {
    pub fn new(from: NodeId, from_shard: u16, to_shard: u16) -> FrameBuilder {
        let mut meta = Vec::with_capacity(4096);
        meta.extend_from_slice(&[FORMAT_VERSION, KIND_RAFT_MESSAGES]);
        meta.extend_from_slice(&from.to_be_bytes());
        meta.extend_from_slice(&from_shard.to_be_bytes());
        meta.extend_from_slice(&to_shard.to_be_bytes());
        meta.extend_from_slice(&0u32.to_be_bytes()); // count, set by `finish`
        FrameBuilder { meta, data: Vec::new(), payload_bytes: PAYLOAD_HEADER_BYTES, messages: 0 }
    }

    pub fn payload_bytes(&self) -> usize {
        self.payload_bytes
    }

    pub fn messages(&self) -> u32 {
        self.messages
    }

    /// Appends a message; on an encoding error the frame is left as it was.
    pub fn push(&mut self, outgoing: Outgoing) -> Result<(), protobuf::ProtobufError> {
        let start = self.meta.len();
        self.meta.extend_from_slice(&outgoing.group.topic.to_be_bytes());
        self.meta.extend_from_slice(&outgoing.group.partition.to_be_bytes());
        self.meta.extend_from_slice(&(outgoing.proto_bytes as u32).to_be_bytes());
        let proto_start = self.meta.len();
        if let Err(error) = outgoing.message.write_to_vec(&mut self.meta) {
            self.meta.truncate(start);
            return Err(error);
        }
        assert_eq!(self.meta.len() - proto_start, outgoing.proto_bytes, "protobuf wrote another size than it computed");
        self.meta.extend_from_slice(&(outgoing.data.len() as u32).to_be_bytes());
        for data in &outgoing.data {
            self.meta.extend_from_slice(&(data.len() as u32).to_be_bytes());
        }
        let after = self.meta.len();
        self.data.extend(outgoing.data.iter().filter(|data| !data.is_empty()).map(|data| (after, data.clone())));
        self.payload_bytes += outgoing.wire_bytes();
        self.messages += 1;
        Ok(())
    }

    pub fn finish(mut self) -> Frame {
        self.meta[COUNT_AT..COUNT_AT + 4].copy_from_slice(&self.messages.to_be_bytes());
        let mut frame = Frame { prefix: [0; PREFIX_BYTES], meta: self.meta, data: self.data, messages: self.messages };
        let parts = frame.payload_parts();
        let length: usize = parts.iter().map(|part| part.len()).sum();
        assert_eq!(length, self.payload_bytes, "a frame's payload differs from the sum of its messages");
        let crc = parts.iter().fold(0, |crc, part| crc32c::crc32c_append(crc, part));
        frame.prefix[..4].copy_from_slice(&(length as u32).to_be_bytes());
        frame.prefix[4..].copy_from_slice(&crc.to_be_bytes());
        frame
    }
}

/// A frame ready to write.
pub struct Frame {
    prefix: [u8; PREFIX_BYTES],
    meta: Vec<u8>,
    data: Vec<(usize, Bytes)>,
    messages: u32,
}

impl Frame {
    /// The frame's bytes in wire order, as slices of its buffers; none is empty.
    pub fn parts(&self) -> Vec<&[u8]> {
        let mut parts = vec![&self.prefix[..]];
        parts.extend(self.payload_parts());
        parts
    }

    fn payload_parts(&self) -> Vec<&[u8]> {
        let mut parts = Vec::with_capacity(2 * self.data.len() + 1);
        let mut start = 0;
        for (end, data) in &self.data {
            parts.push(&self.meta[start..*end]);
            parts.push(&data[..]);
            start = *end;
        }
        parts.push(&self.meta[start..]);
        parts.retain(|part| !part.is_empty());
        parts
    }

    pub fn messages(&self) -> u32 {
        self.messages
    }

    pub fn wire_bytes(&self) -> usize {
        PREFIX_BYTES + self.meta.len() + self.data.iter().map(|(_, data)| data.len()).sum::<usize>()
    }

    /// The whole frame in one buffer (a copy): for tests and fuzzing.
    pub fn to_vec(&self) -> Vec<u8> {
        self.parts().concat()
    }
}

/// A control frame carrying `payload`.
pub fn control_frame(from: NodeId, from_shard: u16, to_shard: u16, payload: &[u8]) -> Frame {
    let mut meta = Vec::with_capacity(PAYLOAD_HEADER_BYTES + payload.len());
    meta.extend_from_slice(&[FORMAT_VERSION, KIND_CONTROL]);
    meta.extend_from_slice(&from.to_be_bytes());
    meta.extend_from_slice(&from_shard.to_be_bytes());
    meta.extend_from_slice(&to_shard.to_be_bytes());
    meta.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    meta.extend_from_slice(payload);
    let mut prefix = [0; PREFIX_BYTES];
    prefix[..4].copy_from_slice(&(meta.len() as u32).to_be_bytes());
    prefix[4..].copy_from_slice(&crc32c::crc32c(&meta).to_be_bytes());
    Frame { prefix, meta, data: Vec::new(), messages: 1 }
}

/// A received frame's messages.
#[derive(Debug)]
pub struct Inbound {
    pub from: NodeId,
    pub from_shard: u16,
    pub envelopes: Vec<Envelope>,
    /// The payload of a control frame.
    pub control: Option<Bytes>,
}

/// Decodes a payload whose CRC was checked, for shard `shard`. Entries' data are slices
/// of `payload`.
pub fn decode(payload: Bytes, shard: u16) -> Result<Inbound, FrameError> {
    let mut cursor = Cursor { payload: &payload, at: 0 };
    let [version, kind] = cursor.array("the frame header")?;
    if version != FORMAT_VERSION {
        return Err(FrameError::Version(version));
    }
    if kind != KIND_RAFT_MESSAGES && kind != KIND_CONTROL {
        return Err(FrameError::Kind(kind));
    }
    let from = u64::from_be_bytes(cursor.array("the frame header")?);
    let from_shard = u16::from_be_bytes(cursor.array("the frame header")?);
    let to = u16::from_be_bytes(cursor.array("the frame header")?);
    if to != shard {
        return Err(FrameError::WrongShard { to, shard });
    }
    let count = u32::from_be_bytes(cursor.array("the frame header")?);
    if kind == KIND_CONTROL {
        let control = cursor.take(count as usize, "a control message")?;
        return match cursor.remaining() {
            0 => Ok(Inbound { from, from_shard, envelopes: Vec::new(), control: Some(payload.slice(control)) }),
            trailing => Err(FrameError::Trailing(trailing)),
        };
    }
    // The count comes from the network: reserve no more than the bytes left can hold.
    let mut envelopes = Vec::with_capacity((count as usize).min(cursor.remaining() / MESSAGE_FIXED_BYTES));
    for index in 0..count {
        envelopes.push(decode_message(&mut cursor, index)?);
    }
    match cursor.remaining() {
        0 => Ok(Inbound { from, from_shard, envelopes, control: None }),
        trailing => Err(FrameError::Trailing(trailing)),
    }
}

fn decode_message(cursor: &mut Cursor<'_>, index: u32) -> Result<Envelope, FrameError> {
    let topic = u128::from_be_bytes(cursor.array("a message")?);
    let partition = u32::from_be_bytes(cursor.array("a message")?);
    let proto_bytes = u32::from_be_bytes(cursor.array("a message")?) as usize;
    let proto = cursor.take(proto_bytes, "a message")?;
    let mut message =
        Message::parse_from_bytes(&cursor.payload[proto]).map_err(|source| FrameError::Decode { index, source })?;
    let lengths = u32::from_be_bytes(cursor.array("a message")?);
    if lengths as usize != message.entries.len() {
        return Err(FrameError::EntryCount { index, lengths, entries: message.entries.len() });
    }
    let table = cursor.take(lengths as usize * ENTRY_LENGTH_BYTES, "entry lengths")?;
    for (entry, length) in message.entries.iter_mut().zip(cursor.payload[table].chunks_exact(ENTRY_LENGTH_BYTES)) {
        let length = u32::from_be_bytes([length[0], length[1], length[2], length[3]]) as usize;
        entry.data = cursor.payload.slice(cursor.take(length, "entry data")?);
    }
    Ok(Envelope { group: GroupId { topic, partition }, message })
}

struct Cursor<'a> {
    payload: &'a Bytes,
    at: usize,
}

impl Cursor<'_> {
    fn remaining(&self) -> usize {
        self.payload.len() - self.at
    }

    /// The range of the next `length` bytes, if the payload has them.
    fn take(&mut self, length: usize, inside: &'static str) -> Result<Range<usize>, FrameError> {
        if length > self.remaining() {
            return Err(FrameError::Short(inside));
        }
        self.at += length;
        Ok(self.at - length..self.at)
    }

    fn array<const N: usize>(&mut self, inside: &'static str) -> Result<[u8; N], FrameError> {
        let range = self.take(N, inside)?;
        let mut array = [0; N];
        array.copy_from_slice(&self.payload[range]);
        Ok(array)
    }
}

#[cfg(test)]
mod tests {
    use keel_raft::{Entry, MessageType};

    use super::*;

    const GROUP: GroupId = GroupId { topic: 0x1234_5678_9abc_def0_0fed_cba9_8765_4321, partition: 7 };

    fn append(datas: &[&'static [u8]]) -> Envelope {
        let mut message = Message::default();
        message.set_msg_type(MessageType::MsgAppend);
        (message.to, message.from, message.term, message.index) = (2, 1, 3, 40);
        for (i, data) in datas.iter().enumerate() {
            let mut entry = Entry::default();
            (entry.term, entry.index, entry.data) = (3, 41 + i as u64, Bytes::from_static(data));
            message.entries.push(entry);
        }
        Envelope { group: GROUP, message }
    }

    fn frame_of(envelopes: &[Envelope], to_shard: u16) -> Frame {
        let mut builder = FrameBuilder::new(1, 0, to_shard);
        for envelope in envelopes {
            builder.push(Outgoing::new(envelope.clone())).expect("encodes");
        }
        builder.finish()
    }

    fn payload(frame: &Frame) -> Bytes {
        Bytes::from(frame.to_vec()).slice(PREFIX_BYTES..)
    }

    #[test]
    fn a_frame_decodes_to_what_was_built_with_data_sliced_from_it() {
        let sent = vec![append(&[b"first batch", b"", b"second"]), append(&[]), append(&[b"x"])];
        let frame = frame_of(&sent, 3);
        let bytes = Bytes::from(frame.to_vec());
        let prefix = read_prefix(bytes[..PREFIX_BYTES].try_into().expect("8 bytes"), 1 << 20).expect("fits");
        assert_eq!(prefix.length, bytes.len() - PREFIX_BYTES);
        assert_eq!(frame.wire_bytes(), bytes.len());
        let payload = bytes.slice(PREFIX_BYTES..);
        check_crc(&payload, prefix.crc).expect("crc");
        let inbound = decode(payload.clone(), 3).expect("decodes");
        assert_eq!((inbound.from, inbound.from_shard), (1, 0));
        assert_eq!(inbound.envelopes, sent);
        let data = &inbound.envelopes[0].message.entries[0].data;
        assert!(payload.as_ptr_range().contains(&data.as_ptr()), "entry data must be a slice of the frame");
    }

    #[test]
    fn every_cut_of_a_payload_is_refused_without_panicking() {
        let payload = payload(&frame_of(&[append(&[b"abc", b"defg"]), append(&[b"h"])], 0));
        for cut in 0..payload.len() {
            assert!(decode(payload.slice(..cut), 0).is_err(), "a payload cut at {cut} decoded");
        }
        let mut longer = payload.to_vec();
        longer.push(0);
        assert!(matches!(decode(Bytes::from(longer), 0), Err(FrameError::Trailing(1))));
    }

    #[test]
    fn wrong_shard_version_kind_and_sizes_are_refused() {
        let payload = payload(&frame_of(&[append(&[b"abc"])], 2));
        assert!(matches!(decode(payload.clone(), 1), Err(FrameError::WrongShard { to: 2, shard: 1 })));
        let control = Bytes::from(control_frame(1, 0, 2, b"hello").to_vec()).slice(PREFIX_BYTES..);
        assert_eq!(decode(control, 2).expect("a control frame decodes").control.as_deref(), Some(&b"hello"[..]));
        for (at, value) in [(0, 9u8), (1, 9)] {
            let mut bad = payload.to_vec();
            bad[at] = value;
            let refused = decode(Bytes::from(bad), 2);
            assert!(matches!(refused, Err(FrameError::Version(9)) | Err(FrameError::Kind(9))), "{refused:?}");
        }
        let mut prefix = [0u8; PREFIX_BYTES];
        prefix[..4].copy_from_slice(&1025u32.to_be_bytes());
        assert!(matches!(read_prefix(prefix, 1024), Err(FrameError::TooLarge { length: 1025, max: 1024 })));
        assert!(matches!(check_crc(b"abc", 1), Err(FrameError::Crc { expected: 1, .. })));
    }

    #[test]
    fn flipped_bytes_never_panic_the_decoder() {
        let payload = payload(&frame_of(&[append(&[b"abc", b"defg"]), append(&[])], 0));
        for at in 0..payload.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = payload.to_vec();
                bad[at] ^= flip;
                let _ = decode(Bytes::from(bad), 0);
            }
        }
    }
}
