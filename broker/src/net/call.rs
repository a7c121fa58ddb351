//! One Kafka request from this broker to another broker's Kafka listener, on a fresh
//! connection: how a node copies a leader's log (`replication::install`) and how a
//! transaction coordinator writes markers to partitions other nodes lead
//! (`txn::markers`), as Kafka's brokers use each other's listeners for both.

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
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(1)
            .with_client_id(Some(StrBytes::from_static_str("keel-broker")));
        let mut body = BytesMut::new();
        header.encode(&mut body, key.request_header_version(version)).map_err(|e| e.to_string())?;
        request.encode(&mut body, version).map_err(|e| e.to_string())?;
        let mut stream = glommio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(&body);
        stream.write_all(&frame).await.map_err(|e| e.to_string())?;
        let mut prefix = [0u8; 4];
        stream.read_exact(&mut prefix).await.map_err(|e| e.to_string())?;
        let length = u32::from_be_bytes(prefix) as usize;
        if length > response_bytes_max {
            return Err(format!("a {length}-byte {key:?} response"));
        }
        let mut response = vec![0u8; length];
        stream.read_exact(&mut response).await.map_err(|e| e.to_string())?;
        let mut response = Bytes::from(response);
        // Correlation id, then a flexible header's tagged fields (none).
        let header_len = if key.response_header_version(version) >= 1 { 5 } else { 4 };
        if response.len() < header_len {
            return Err(format!("a truncated {key:?} response"));
        }
        response.advance(header_len);
        Resp::decode(&mut response, version).map_err(|e| e.to_string())
    };
    futures_lite::future::or(exchange, async {
        glommio::timer::sleep(timeout).await;
        Err(format!("the {key:?} request timed out"))
    })
    .await
}
