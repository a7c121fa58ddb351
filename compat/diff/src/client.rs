//! A blocking Kafka client that sends one request and waits for its answer.
//!
//! Blocking std TCP on purpose: the tester sends one request at a time to each broker and
//! must see exactly what the broker answered (or that it closed the connection), so an
//! async client or a real Kafka client library, with retries and metadata refreshes of
//! its own, would hide the very behaviour being compared.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// Longest time to wait for one answer; every request the tester sends is small.
const RESPONSE_WAIT_MS_MAX: u64 = 15_000;
/// Largest answer accepted, so a corrupt length prefix cannot make us allocate gigabytes.
const RESPONSE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// What came back for one request.
#[derive(Debug)]
pub enum Answer {
    /// The broker answered and the body decoded.
    Response(Box<ResponseKind>),
    /// Produce with acks=0: the broker sends nothing back by design.
    NoResponse,
    /// The connection failed (closed, reset, timed out) or the answer did not decode.
    Transport(String),
}

impl Answer {
    pub fn into_response(self) -> Option<ResponseKind> {
        match self {
            Answer::Response(response) => Some(*response),
            _ => None,
        }
    }
}

pub struct Client {
    address: String,
    stream: Option<TcpStream>,
    correlation_id: i32,
}

impl Client {
    pub fn connect(address: &str) -> Result<Client, String> {
        let mut client = Client { address: address.to_string(), stream: None, correlation_id: 0 };
        client.reconnect()?;
        Ok(client)
    }

    fn reconnect(&mut self) -> Result<(), String> {
        let stream = TcpStream::connect(&self.address).map_err(|e| format!("connect {}: {e}", self.address))?;
        stream
            .set_read_timeout(Some(Duration::from_millis(RESPONSE_WAIT_MS_MAX)))
            .map_err(|e| format!("set_read_timeout: {e}"))?;
        stream.set_nodelay(true).map_err(|e| format!("set_nodelay: {e}"))?;
        self.stream = Some(stream);
        Ok(())
    }

    /// Sends `request` at `version` and returns the decoded answer. A transport failure
    /// drops the connection; the next call opens a new one, so one broken exchange does
    /// not spill into the following requests.
    pub fn send(&mut self, api_key: ApiKey, version: i16, request: &RequestKind, expect_response: bool) -> Answer {
        match self.exchange(api_key, version, request, expect_response) {
            Ok(answer) => answer,
            Err(error) => {
                self.stream = None;
                Answer::Transport(error)
            }
        }
    }

    /// Another connection to the same broker: a second group member has its own, as a
    /// second consumer process would.
    pub fn another(&self) -> Result<Client, String> {
        Client::connect(&self.address)
    }

    /// Sends `request` without reading its answer, which `receive` reads later: a
    /// JoinGroup that waits for the rest of its group to rejoin, while another member's
    /// requests go out on their own connections.
    pub fn send_only(&mut self, api_key: ApiKey, version: i16, request: &RequestKind) -> Result<(), String> {
        let sent = self.write(api_key, version, request);
        if sent.is_err() {
            self.stream = None;
        }
        sent
    }

    /// Reads the answer to the request `send_only` sent last.
    pub fn receive(&mut self, api_key: ApiKey, version: i16) -> Answer {
        match self.read(api_key, version) {
            Ok(answer) => answer,
            Err(error) => {
                self.stream = None;
                Answer::Transport(error)
            }
        }
    }

    /// Whether the connection still works: the broker may close it after a request it
    /// did not answer (Kafka does so after a failed acks=0 produce).
    pub fn is_open(&mut self) -> bool {
        let request = RequestKind::ApiVersions(Default::default());
        let open = matches!(self.exchange(ApiKey::ApiVersions, 0, &request, true), Ok(Answer::Response(_)));
        if !open {
            self.stream = None;
        }
        open
    }

    fn exchange(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &RequestKind,
        expect_response: bool,
    ) -> Result<Answer, String> {
        self.write(api_key, version, request)?;
        if !expect_response {
            return Ok(Answer::NoResponse);
        }
        self.read(api_key, version)
    }

    fn write(&mut self, api_key: ApiKey, version: i16, request: &RequestKind) -> Result<(), String> {
        if self.stream.is_none() {
            self.reconnect()?;
        }
        self.correlation_id += 1;
        let frame = encode_frame(api_key, version, self.correlation_id, request)?;
        let stream = self.stream.as_mut().expect("connected above");
        stream.write_all(&frame).map_err(|e| format!("write: {e}"))
    }

    fn read(&mut self, api_key: ApiKey, version: i16) -> Result<Answer, String> {
        let stream = self.stream.as_mut().ok_or("not connected")?;
        let mut body = read_frame(stream)?;
        let header = ResponseHeader::decode(&mut body, api_key.response_header_version(version))
            .map_err(|e| format!("decode response header: {e}"))?;
        if header.correlation_id != self.correlation_id {
            return Err(format!("correlation id {} answered {}", self.correlation_id, header.correlation_id));
        }
        let response =
            ResponseKind::decode(api_key, &mut body, version).map_err(|e| format!("decode response: {e}"))?;
        Ok(Answer::Response(Box::new(response)))
    }
}

fn encode_frame(api_key: ApiKey, version: i16, correlation_id: i32, request: &RequestKind) -> Result<BytesMut, String> {
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("keel-diff")));
    let mut body = BytesMut::new();
    header.encode(&mut body, api_key.request_header_version(version)).map_err(|e| format!("encode header: {e}"))?;
    request.encode(&mut body, version).map_err(|e| format!("encode {api_key:?} v{version}: {e}"))?;
    let mut frame = BytesMut::with_capacity(body.len() + 4);
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    Ok(frame)
}

fn read_frame(stream: &mut TcpStream) -> Result<Bytes, String> {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).map_err(|e| format!("read: {e}"))?;
    let length = (&length[..]).get_i32();
    if length < 0 || length as usize > RESPONSE_BYTES_MAX {
        return Err(format!("answer length {length} out of range"));
    }
    let mut body = vec![0u8; length as usize];
    stream.read_exact(&mut body).map_err(|e| format!("read: {e}"))?;
    Ok(Bytes::from(body))
}
