//! Request frames: `i32 size | header | body`, decoded with `kafka-protocol`.
//!
//! A frame is first split into header and body without trusting anything in it: the
//! API key, version and correlation id are read by hand so that a request whose body
//! fails to decode (or whose version we do not serve) can still be answered or refused
//! with the right correlation id.

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::{Decodable, Encodable};

/// Frame size prefix length in bytes.
pub const FRAME_PREFIX_LEN: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {size} bytes is outside 1..={max} bytes")]
    BadSize { size: i64, max: usize },
    #[error("frame too short for a request header ({len} bytes)")]
    ShortHeader { len: usize },
    #[error("unknown api key {api_key}")]
    UnknownApiKey { api_key: i16 },
    #[error("malformed {api_key:?} v{version} request: {reason}")]
    Malformed { api_key: ApiKey, version: i16, reason: String },
    #[error("response encoding failed for {api_key:?} v{version}: {reason}")]
    Encode { api_key: ApiKey, version: i16, reason: String },
}

/// Checks a size prefix against the limit; returns the body length to read.
pub fn frame_len(prefix: [u8; 4], request_bytes_max: usize) -> Result<usize, FrameError> {
    let size = i32::from_be_bytes(prefix) as i64;
    if size < 1 || size as usize > request_bytes_max {
        return Err(FrameError::BadSize { size, max: request_bytes_max });
    }
    Ok(size as usize)
}

/// The fixed first fields of every request header, readable before decoding anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestPrefix {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

pub fn peek_prefix(frame: &[u8]) -> Result<RequestPrefix, FrameError> {
    if frame.len() < 8 {
        return Err(FrameError::ShortHeader { len: frame.len() });
    }
    let mut b = &frame[..8];
    Ok(RequestPrefix { api_key: b.get_i16(), api_version: b.get_i16(), correlation_id: b.get_i32() })
}

/// A decoded request.
#[derive(Debug)]
pub struct RequestFrame {
    pub api_key: ApiKey,
    pub version: i16,
    pub header: RequestHeader,
    pub body: RequestKind,
}

/// Decodes header and body of a frame (without its size prefix). The version must have
/// been checked against what the broker serves before calling this.
pub fn decode_request(frame: Bytes) -> Result<RequestFrame, FrameError> {
    let prefix = peek_prefix(&frame)?;
    let api_key =
        ApiKey::try_from(prefix.api_key).map_err(|_| FrameError::UnknownApiKey { api_key: prefix.api_key })?;
    let version = prefix.api_version;
    let malformed = |e: anyhow::Error| FrameError::Malformed { api_key, version, reason: e.to_string() };
    let mut buf = frame;
    let header_version = api_key.request_header_version(version);
    // The decoder is third-party code fed network input: a panic in it must become a
    // malformed request, never a dead shard.
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let header = RequestHeader::decode(&mut buf, header_version)?;
        let body = RequestKind::decode(api_key, &mut buf, version)?;
        Ok::<_, anyhow::Error>((header, body))
    }))
    .map_err(|_| anyhow::anyhow!("decoder panicked"))
    .and_then(|r| r)
    .map_err(malformed)?;
    Ok(RequestFrame { api_key, version, header: decoded.0, body: decoded.1 })
}

/// Encodes a full response frame: size prefix, response header, body.
pub fn encode_response<R: Encodable>(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &R,
) -> Result<Bytes, FrameError> {
    let fail = |e: anyhow::Error| FrameError::Encode { api_key, version, reason: e.to_string() };
    // ApiVersions responses always use header v0 so that clients can parse them before
    // they know which versions the broker speaks.
    let header_version = if api_key == ApiKey::ApiVersions { 0 } else { api_key.response_header_version(version) };
    let body_len = body.compute_size(version).map_err(fail)?;
    let header_len = if header_version >= 1 { 5 } else { 4 };
    let mut out = BytesMut::with_capacity(FRAME_PREFIX_LEN + header_len + body_len);
    out.extend_from_slice(&((header_len + body_len) as i32).to_be_bytes());
    out.extend_from_slice(&correlation_id.to_be_bytes());
    if header_version >= 1 {
        out.extend_from_slice(&[0]); // no tagged fields
    }
    body.encode(&mut out, version).map_err(fail)?;
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
    use kafka_protocol::protocol::{encode_request_header_into_buffer, StrBytes};

    fn frame_of<R: Encodable>(key: ApiKey, version: i16, body: &R) -> Bytes {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("t")));
        let mut buf = BytesMut::new();
        encode_request_header_into_buffer(&mut buf, &header).unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    #[test]
    fn decodes_metadata_request() {
        let f = frame_of(ApiKey::Metadata, 12, &MetadataRequest::default());
        let req = decode_request(f).unwrap();
        assert_eq!(req.api_key, ApiKey::Metadata);
        assert_eq!(req.header.correlation_id, 7);
        assert!(matches!(req.body, RequestKind::Metadata(_)));
    }

    #[test]
    fn truncated_body_is_malformed_not_panic() {
        let f = frame_of(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
        for cut in 0..f.len() {
            let _ = decode_request(f.slice(..cut));
        }
    }

    #[test]
    fn frame_len_limits() {
        assert!(frame_len((-1i32).to_be_bytes(), 100).is_err());
        assert!(frame_len(0i32.to_be_bytes(), 100).is_err());
        assert!(frame_len(101i32.to_be_bytes(), 100).is_err());
        assert_eq!(frame_len(100i32.to_be_bytes(), 100).unwrap(), 100);
    }
}
