//! A blocking Kafka client that sends one request and waits for its answer, or writes
//! several back to back on its connection and then reads their answers in order.
//!
//! Blocking std TCP on purpose: the tester sends one request at a time to each broker and
//! must see exactly what the broker answered (or that it closed the connection), so an
//! async client or a real Kafka client library, with retries and metadata refreshes of
//! its own, would hide the very behaviour being compared. The one exception is
//! `pipeline`, whose point is the overlap: every request is on the wire before the
//! first answer is read, as a client with several requests in flight sends them.

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

/// One request of a pipeline: its API, version, body and whether it is answered.
pub struct Pipelined<'a> {
    pub api_key: ApiKey,
    pub version: i16,
    pub request: &'a RequestKind,
    pub expect_response: bool,
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
        match self.read(api_key, version, self.correlation_id) {
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

    /// Writes `requests` back to back in one write, before reading any answer, then reads
    /// the answers in the order the requests went out; one answer per request, in that
    /// order (`NoResponse` for a produce with acks=0). After a transport failure the
    /// connection is dropped and that request and every later one get the failure.
    pub fn pipeline(&mut self, requests: &[Pipelined]) -> Vec<Answer> {
        let first_correlation_id = self.correlation_id + 1;
        self.correlation_id += requests.len() as i32;
        let written = encode_pipeline(requests, first_correlation_id).and_then(|frames| {
            if self.stream.is_none() {
                self.reconnect()?;
            }
            let stream = self.stream.as_mut().expect("connected above");
            stream.write_all(&frames).map_err(|e| format!("write: {e}"))
        });
        if let Err(error) = written {
            self.stream = None;
            return requests.iter().map(|_| Answer::Transport(error.clone())).collect();
        }
        let mut failed: Option<String> = None;
        let mut answers = Vec::with_capacity(requests.len());
        for (correlation_id, request) in (first_correlation_id..).zip(requests) {
            let answer = if let Some(error) = &failed {
                Answer::Transport(error.clone())
            } else if !request.expect_response {
                Answer::NoResponse
            } else {
                match self.read(request.api_key, request.version, correlation_id) {
                    Ok(answer) => answer,
                    Err(error) => {
                        self.stream = None;
                        failed = Some(error.clone());
                        Answer::Transport(error)
                    }
                }
            };
            answers.push(answer);
        }
        answers
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
        self.read(api_key, version, self.correlation_id)
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

    /// Reads the next answer on the connection, which must be the one to the request
    /// sent with `correlation_id`.
    fn read(&mut self, api_key: ApiKey, version: i16, correlation_id: i32) -> Result<Answer, String> {
        let stream = self.stream.as_mut().ok_or("not connected")?;
        read_answer(stream, api_key, version, correlation_id)
    }
}

/// The frames of `requests`, one after another, numbered from `first_correlation_id`.
fn encode_pipeline(requests: &[Pipelined], first_correlation_id: i32) -> Result<BytesMut, String> {
    let mut frames = BytesMut::new();
    for (correlation_id, r) in (first_correlation_id..).zip(requests) {
        frames.extend_from_slice(&encode_frame(r.api_key, r.version, correlation_id, r.request)?);
    }
    Ok(frames)
}

fn read_answer(stream: &mut impl Read, api_key: ApiKey, version: i16, correlation_id: i32) -> Result<Answer, String> {
    let mut body = read_frame(stream)?;
    let header = ResponseHeader::decode(&mut body, api_key.response_header_version(version))
        .map_err(|e| format!("decode response header: {e}"))?;
    if header.correlation_id != correlation_id {
        return Err(format!("correlation id {correlation_id} answered {}", header.correlation_id));
    }
    let response = ResponseKind::decode(api_key, &mut body, version).map_err(|e| format!("decode response: {e}"))?;
    Ok(Answer::Response(Box::new(response)))
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

fn read_frame(stream: &mut impl Read) -> Result<Bytes, String> {
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

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use kafka_protocol::messages::{FetchRequest, MetadataRequest, MetadataResponse, ProduceRequest, RequestHeader};

    use super::*;

    /// Splits a buffer of length-prefixed frames into the frames' bodies.
    fn frames(mut bytes: Bytes) -> Vec<Bytes> {
        let mut out = Vec::new();
        while bytes.has_remaining() {
            let length = bytes.get_i32() as usize;
            out.push(bytes.split_to(length));
        }
        out
    }

    #[test]
    fn a_pipeline_is_its_requests_framed_back_to_back_with_consecutive_correlation_ids() {
        let metadata = RequestKind::Metadata(MetadataRequest::default());
        let produce = RequestKind::Produce(ProduceRequest::default().with_acks(0));
        let fetch = RequestKind::Fetch(FetchRequest::default());
        let requests = [
            Pipelined { api_key: ApiKey::Metadata, version: 12, request: &metadata, expect_response: true },
            Pipelined { api_key: ApiKey::Produce, version: 9, request: &produce, expect_response: false },
            Pipelined { api_key: ApiKey::Fetch, version: 4, request: &fetch, expect_response: true },
        ];
        let bytes = encode_pipeline(&requests, 41).expect("encodes").freeze();
        let bodies = frames(bytes);
        assert_eq!(bodies.len(), 3);
        for ((mut body, request), correlation_id) in bodies.into_iter().zip(&requests).zip(41..) {
            let header = RequestHeader::decode(&mut body, request.api_key.request_header_version(request.version))
                .expect("header decodes");
            assert_eq!(header.request_api_key, request.api_key as i16);
            assert_eq!(header.request_api_version, request.version);
            assert_eq!(header.correlation_id, correlation_id);
            let decoded = RequestKind::decode(request.api_key, &mut body, request.version).expect("body decodes");
            assert_eq!(&decoded, request.request);
            assert!(!body.has_remaining(), "one request per frame");
        }
    }

    /// A response frame as a broker writes it.
    fn response_frame(version: i16, correlation_id: i32, response: &ResponseKind) -> BytesMut {
        let mut body = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(&mut body, ApiKey::Metadata.response_header_version(version))
            .expect("header encodes");
        response.encode(&mut body, version).expect("body encodes");
        let mut frame = BytesMut::new();
        frame.put_i32(body.len() as i32);
        frame.put_slice(&body);
        frame
    }

    #[test]
    fn answers_read_back_to_back_must_come_in_request_order() {
        let first = ResponseKind::Metadata(MetadataResponse::default().with_throttle_time_ms(1));
        let second = ResponseKind::Metadata(MetadataResponse::default().with_throttle_time_ms(2));
        let mut wire = response_frame(12, 7, &first);
        wire.extend_from_slice(&response_frame(12, 8, &second));
        let mut stream = Cursor::new(wire.to_vec());
        for (correlation_id, expected) in [(7, &first), (8, &second)] {
            match read_answer(&mut stream, ApiKey::Metadata, 12, correlation_id) {
                Ok(Answer::Response(response)) => assert_eq!(&*response, expected),
                other => panic!("answer {correlation_id}: {other:?}"),
            }
        }
        let mut swapped = Cursor::new(wire.to_vec());
        let error = read_answer(&mut swapped, ApiKey::Metadata, 12, 8).expect_err("answer 7 is not answer 8");
        assert_eq!(error, "correlation id 8 answered 7");
    }
}
