//! Kafka requests from this broker to another broker's Kafka listener, on a fresh
//! connection: how a node copies a leader's log (`replication::install`), relays a
//! request to the controller (`cluster::nodes`), and how a transaction
//! coordinator writes markers to partitions other nodes lead (`txn::markers`), as
//! Kafka's brokers use each other's listeners. It names nothing else of the broker.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// Sends `request` (API `key`, `version`) to `addr` and decodes the response, within
/// `timeout`; a response larger than `response_bytes_max` is refused.
pub async fn call<Req: Encodable, Resp: Decodable>(
    addr: &str,
    key: ApiKey,
    version: i16,
    request: &Req,
    response_bytes_max: usize,
    timeout: Duration,
) -> Result<Resp, String> {
    let exchange = async {
        let frame = request_frame(key, version, request)?;
        let mut stream = glommio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        stream.write_all(&frame).await.map_err(|e| e.to_string())?;
        let response = read_frame(&mut stream, response_bytes_max).await.map_err(|e| format!("{key:?}: {e}"))?;
        decode_response(key, version, response)
    };
    futures_lite::future::or(exchange, async {
        glommio::timer::sleep(timeout).await;
        Err(format!("the {key:?} request timed out"))
    })
    .await
}

/// A request's frame as sent: size, header and body.
pub fn request_frame<Req: Encodable>(key: ApiKey, version: i16, request: &Req) -> Result<Vec<u8>, String> {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("keel-broker")));
    let mut body = BytesMut::new();
    header.encode(&mut body, key.request_header_version(version)).map_err(|e| e.to_string())?;
    request.encode(&mut body, version).map_err(|e| e.to_string())?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Reads one response frame, its size first; a frame larger than `bytes_max` is
/// refused.
pub async fn read_frame<S: futures_lite::AsyncRead + Unpin>(
    stream: &mut S,
    bytes_max: usize,
) -> std::io::Result<Bytes> {
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix).await?;
    let length = u32::from_be_bytes(prefix) as usize;
    if length > bytes_max {
        return Err(std::io::Error::other(format!("a {length}-byte response")));
    }
    let mut response = vec![0u8; 4 + length];
    response[..4].copy_from_slice(&prefix);
    stream.read_exact(&mut response[4..]).await?;
    Ok(Bytes::from(response))
}

/// Decodes the body of a response frame read by [`read_frame`].
pub fn decode_response<Resp: Decodable>(key: ApiKey, version: i16, mut response: Bytes) -> Result<Resp, String> {
    // Size, correlation id, then a flexible header's tagged fields (none).
    let header_len = if key.response_header_version(version) >= 1 { 9 } else { 8 };
    if response.len() < header_len {
        return Err(format!("a truncated {key:?} response"));
    }
    response.advance(header_len);
    Resp::decode(&mut response, version).map_err(|e| e.to_string())
}
