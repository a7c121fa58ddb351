//! The few pieces of the consumer embedded protocol (ConsumerProtocolSubscription and
//! ConsumerProtocolAssignment, the opaque bytes of classic `consumer` groups) that the
//! coordinator itself must read or write: the topics a classic member subscribes to,
//! and the classic form of a KIP-848 member's assignment for DescribeGroups.

use bytes::{BufMut, Bytes, BytesMut};

use super::records::Reader;

/// Topics of a ConsumerProtocolSubscription (any version: the list comes first).
pub fn subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut r = Reader(metadata);
    let _version = r.i16()?;
    let count = r.i32()?;
    (0..count.max(0)).map(|_| r.string()).collect()
}

/// A ConsumerProtocolAssignment v0 of (topic, partitions).
pub fn encode_assignment(partitions: &[(String, Vec<i32>)]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(partitions.len() as i32);
    for (topic, parts) in partitions {
        b.put_i16(topic.len() as i16);
        b.put_slice(topic.as_bytes());
        b.put_i32(parts.len() as i32);
        for p in parts {
            b.put_i32(*p);
        }
    }
    b.put_i32(-1); // no user data
    b.freeze()
}

/// A ConsumerProtocolSubscription v0 of topics.
pub fn encode_subscription(topics: &[String]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1);
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_topics_roundtrip() {
        let b = encode_subscription(&["a".into(), "bb".into()]);
        assert_eq!(subscription_topics(&b), Some(vec!["a".to_string(), "bb".to_string()]));
        assert_eq!(subscription_topics(&b[..5]), None);
    }

    #[test]
    fn assignment_layout() {
        let b = encode_assignment(&[("t".into(), vec![1, 2])]);
        assert_eq!(&b[..], &[0, 0, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2, 255, 255, 255, 255]);
    }
}
