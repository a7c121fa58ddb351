//! A small blocking Kafka client for the `keel` client subcommands.
//!
//! It speaks only the Kafka protocol (no admin HTTP, no Keel internals), so every
//! subcommand works against Apache Kafka as well. Why std's blocking `TcpStream` and not
//! glommio: a command sends a handful of requests one after another and exits; a pinned
//! executor and io_uring would add start-up cost and nothing else.
//!
//! Each connection asks ApiVersions first and sends every request at the highest version
//! both sides support, capped where a newer version would need topic ids instead of
//! names (see `version_cap`).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, BrokerId, FindCoordinatorRequest, MetadataRequest, MetadataResponse, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{encode_request_header_into_buffer, Decodable, Request, StrBytes};
use kafka_protocol::ResponseError;

use super::output::{print_error, Format};

/// Where the client subcommands connect without `--brokers` or `KEEL_BROKERS`.
pub const DEFAULT_BROKERS: &str = "127.0.0.1:9092";
/// The largest response accepted from a broker.
const RESPONSE_BYTES_MAX: usize = 256 << 20;
const CONNECT_TIMEOUT_MS: u64 = 10_000;
const IO_TIMEOUT_MS: u64 = 60_000;
/// Attempts of FindCoordinator while the coordinator is loading or not yet elected.
const COORDINATOR_ATTEMPTS_MAX: usize = 20;
const CLIENT_ID: &str = "keel-cli";

/// A failed command: `Usage` exits 2 (bad input), `Failed` exits 1.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Failed(_) => 1,
        }
    }
}

pub type CliResult<T> = Result<T, CliError>;

pub fn failed(message: impl Into<String>) -> CliError {
    CliError::Failed(message.into())
}

pub fn usage(message: impl Into<String>) -> CliError {
    CliError::Usage(message.into())
}

/// Prints the error of a client subcommand and gives the process exit code.
pub fn finish(result: CliResult<()>, format: Format) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => {
            print_error(&e.to_string(), e.exit_code(), format);
            e.exit_code()
        }
    }
}

/// The brokers to bootstrap from: the flag, else `KEEL_BROKERS`, else the default.
pub fn bootstrap_list(flag: Option<&str>) -> String {
    match flag {
        Some(b) => b.to_string(),
        None => std::env::var("KEEL_BROKERS").unwrap_or_else(|_| DEFAULT_BROKERS.to_string()),
    }
}

/// A Kafka error code as Kafka names it, e.g. `UNKNOWN_TOPIC_OR_PARTITION (3)`, with
/// the broker's message when it sent one.
pub fn kafka_error(code: i16, message: Option<&StrBytes>) -> String {
    let name = match ResponseError::try_from_code(code) {
        Some(ResponseError::Unknown(_)) | None => "UNKNOWN".to_string(),
        Some(e) => screaming_snake(&format!("{e:?}")),
    };
    match message.map(|m| m.as_str()).filter(|m| !m.is_empty()) {
        Some(m) => format!("{name} ({code}): {m}"),
        None => format!("{name} ({code})"),
    }
}

/// `Ok` for error code 0, else the error with `context` in front.
pub fn check(code: i16, message: Option<&StrBytes>, context: &str) -> CliResult<()> {
    if code == 0 {
        return Ok(());
    }
    Err(failed(format!("{context}: {}", kafka_error(code, message))))
}

fn screaming_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}

/// Highest version used per API: above it the request names topics by id, or (for
/// FindCoordinator and OffsetFetch) batches keys, which this client does not need.
fn version_cap(key: ApiKey) -> i16 {
    match key {
        ApiKey::Fetch => 12,
        ApiKey::Produce => 12,
        ApiKey::OffsetFetch => 7,
        ApiKey::OffsetCommit => 9,
        ApiKey::FindCoordinator => 3,
        ApiKey::DeleteTopics => 5,
        _ => i16::MAX,
    }
}

fn io_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused | ConnectionReset | ConnectionAborted | TimedOut | UnexpectedEof | BrokenPipe
        | WouldBlock | HostUnreachable | NetworkUnreachable => e.kind().to_string(),
        _ => e.to_string(),
    }
}

/// One TCP connection to one broker, with the API versions it announced.
pub struct Connection {
    addr: String,
    stream: TcpStream,
    correlation_id: i32,
    /// API key → (min, max) version the broker supports.
    versions: HashMap<i16, (i16, i16)>,
}

impl Connection {
    pub fn open(addr: &str) -> CliResult<Connection> {
        let targets: Vec<_> =
            addr.to_socket_addrs().map_err(|e| failed(format!("cannot reach {addr}: {}", io_reason(&e))))?.collect();
        let mut last_error = None;
        for target in targets {
            match TcpStream::connect_timeout(&target, Duration::from_millis(CONNECT_TIMEOUT_MS)) {
                Ok(stream) => return Connection::handshake(addr, stream),
                Err(e) => last_error = Some(e),
            }
        }
        let reason = last_error.map(|e| io_reason(&e)).unwrap_or_else(|| "no address".to_string());
        Err(failed(format!("cannot reach {addr}: {reason}")))
    }

    fn handshake(addr: &str, stream: TcpStream) -> CliResult<Connection> {
        let timeout = Some(Duration::from_millis(IO_TIMEOUT_MS));
        let setup =
            stream.set_read_timeout(timeout).and(stream.set_write_timeout(timeout)).and(stream.set_nodelay(true));
        setup.map_err(|e| failed(format!("cannot reach {addr}: {}", io_reason(&e))))?;
        let mut conn = Connection { addr: addr.to_string(), stream, correlation_id: 0, versions: HashMap::new() };
        let request = ApiVersionsRequest::default()
            .with_client_software_name(str_bytes("keel"))
            .with_client_software_version(str_bytes(env!("CARGO_PKG_VERSION")));
        let response = conn.send_version(&request, 3)?;
        check(response.error_code, None, &format!("ApiVersions to {addr}"))?;
        conn.versions = response.api_keys.iter().map(|k| (k.api_key, (k.min_version, k.max_version))).collect();
        Ok(conn)
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn supports(&self, key: ApiKey) -> bool {
        self.versions.contains_key(&(key as i16))
    }

    /// The version `R` goes out at on this connection.
    pub fn version_for<R: Request>(&self) -> CliResult<i16> {
        let key = api_key::<R>();
        let (broker_min, broker_max) = *self
            .versions
            .get(&R::KEY)
            .ok_or_else(|| failed(format!("{} does not support {key:?} requests", self.addr)))?;
        let high = R::VERSIONS.max.min(broker_max).min(version_cap(key));
        let low = R::VERSIONS.min.max(broker_min);
        if high < low {
            return Err(failed(format!(
                "{} supports {key:?} versions {broker_min}..{broker_max}, this client {}..{}",
                self.addr,
                R::VERSIONS.min,
                R::VERSIONS.max.min(version_cap(key))
            )));
        }
        Ok(high)
    }

    /// Sends a request at the best common version and waits for its response.
    pub fn send<R: Request>(&mut self, request: &R) -> CliResult<R::Response> {
        let version = self.version_for::<R>()?;
        self.send_version(request, version)
    }

    /// Sends a request the broker does not answer (Produce with acks=0).
    pub fn send_only<R: Request>(&mut self, request: &R) -> CliResult<()> {
        let version = self.version_for::<R>()?;
        self.write_request(request, version).map(|_| ())
    }

    fn send_version<R: Request>(&mut self, request: &R, version: i16) -> CliResult<R::Response> {
        let key = api_key::<R>();
        let correlation_id = self.write_request(request, version)?;
        let mut frame = self.read_frame(key)?;
        let header = ResponseHeader::decode(&mut frame, key.response_header_version(version))
            .map_err(|e| failed(format!("{}: bad {key:?} response header: {e}", self.addr)))?;
        if header.correlation_id != correlation_id {
            return Err(failed(format!(
                "{}: {key:?} response for request {} while waiting for {correlation_id}",
                self.addr, header.correlation_id
            )));
        }
        R::Response::decode(&mut frame, version)
            .map_err(|e| failed(format!("{}: bad {key:?} v{version} response: {e}", self.addr)))
    }

    fn write_request<R: Request>(&mut self, request: &R, version: i16) -> CliResult<i32> {
        let key = api_key::<R>();
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(str_bytes(CLIENT_ID)));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        encode_request_header_into_buffer(&mut buf, &header)
            .and_then(|()| request.encode(&mut buf, version))
            .map_err(|e| failed(format!("cannot encode {key:?} v{version}: {e}")))?;
        let length = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&length.to_be_bytes());
        self.stream
            .write_all(&buf)
            .map_err(|e| failed(format!("{}: sending {key:?}: {}", self.addr, io_reason(&e))))?;
        Ok(self.correlation_id)
    }

    fn read_frame(&mut self, key: ApiKey) -> CliResult<Bytes> {
        let addr = self.addr.clone();
        let lost = |e: std::io::Error| failed(format!("{addr}: waiting for the {key:?} response: {}", io_reason(&e)));
        let mut length = [0u8; 4];
        self.stream.read_exact(&mut length).map_err(lost)?;
        let length = i32::from_be_bytes(length);
        if length < 0 || length as usize > RESPONSE_BYTES_MAX {
            return Err(failed(format!("{}: {key:?} response of {length} bytes", self.addr)));
        }
        let mut body = vec![0u8; length as usize];
        self.stream.read_exact(&mut body).map_err(lost)?;
        Ok(Bytes::from(body))
    }
}

fn api_key<R: Request>() -> ApiKey {
    // Every request type of kafka-protocol has a known key.
    ApiKey::try_from(R::KEY).expect("kafka-protocol request with a known API key")
}

/// Connections to a cluster: one to a bootstrap broker, more to leaders and
/// coordinators as Metadata and FindCoordinator name them.
pub struct Client {
    bootstrap: Connection,
    /// Node id → HOST:PORT from the last Metadata response.
    broker_addrs: HashMap<i32, String>,
    connections: HashMap<i32, Connection>,
}

impl Client {
    /// Connects to the first broker of `brokers` (HOST:PORT[,...]) that answers.
    pub fn connect(brokers: &str) -> CliResult<Client> {
        let mut errors = Vec::new();
        for addr in brokers.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            if !addr.contains(':') {
                return Err(usage(format!("bad broker address {addr:?}: expected HOST:PORT")));
            }
            match Connection::open(addr) {
                Ok(bootstrap) => {
                    return Ok(Client { bootstrap, broker_addrs: HashMap::new(), connections: HashMap::new() })
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        if errors.is_empty() {
            return Err(usage("no broker given: --brokers HOST:PORT[,...]"));
        }
        Err(failed(errors.join("; ")))
    }

    /// The bootstrap connection, for requests any broker answers.
    pub fn any(&mut self) -> &mut Connection {
        &mut self.bootstrap
    }

    /// Metadata of `topics` (all topics when `None`); remembers the brokers' addresses.
    pub fn metadata(&mut self, topics: Option<&[String]>) -> CliResult<MetadataResponse> {
        let request =
            MetadataRequest::default().with_allow_auto_topic_creation(false).with_topics(topics.map(|names| {
                names.iter().map(|n| MetadataRequestTopic::default().with_name(Some(topic_name(n)))).collect()
            }));
        let response = self.bootstrap.send(&request)?;
        for b in &response.brokers {
            self.broker_addrs.insert(b.node_id.0, format!("{}:{}", b.host.as_str(), b.port));
        }
        Ok(response)
    }

    /// A connection to broker `node`, known from the last Metadata response.
    pub fn broker(&mut self, node: i32) -> CliResult<&mut Connection> {
        if !self.connections.contains_key(&node) {
            if !self.broker_addrs.contains_key(&node) {
                self.metadata(Some(&[]))?;
            }
            let addr = self
                .broker_addrs
                .get(&node)
                .ok_or_else(|| failed(format!("broker {node} is not in the cluster's metadata")))?;
            let conn = Connection::open(addr)?;
            self.connections.insert(node, conn);
        }
        Ok(self.connections.get_mut(&node).expect("connection just opened"))
    }

    /// All brokers of the cluster, by node id.
    pub fn broker_ids(&mut self) -> CliResult<Vec<i32>> {
        let response = self.metadata(Some(&[]))?;
        let mut ids: Vec<i32> = response.brokers.iter().map(|b| b.node_id.0).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// A connection to the coordinator of consumer group `group`.
    pub fn coordinator(&mut self, group: &str) -> CliResult<&mut Connection> {
        let request = FindCoordinatorRequest::default().with_key(str_bytes(group)).with_key_type(0);
        for _ in 0..COORDINATOR_ATTEMPTS_MAX {
            let response = self.bootstrap.send(&request)?;
            let retriable = ResponseError::try_from_code(response.error_code).is_some_and(|e| e.is_retriable());
            if retriable {
                std::thread::sleep(Duration::from_millis(250));
                continue;
            }
            check(response.error_code, response.error_message.as_ref(), &format!("coordinator of group {group}"))?;
            let BrokerId(node) = response.node_id;
            self.broker_addrs.insert(node, format!("{}:{}", response.host.as_str(), response.port));
            return self.broker(node);
        }
        Err(failed(format!("coordinator of group {group}: not available after {COORDINATOR_ATTEMPTS_MAX} attempts")))
    }
}

impl Client {
    /// Sends `request` to the coordinator of `group`, again while `busy` says the
    /// coordinator moved or is still loading (Kafka answers so while it creates
    /// `__consumer_offsets` for the first group).
    pub fn send_to_coordinator<R: Request>(
        &mut self,
        group: &str,
        request: &R,
        busy: impl Fn(&R::Response) -> bool,
    ) -> CliResult<R::Response> {
        let mut attempt = 1;
        loop {
            let response = self.coordinator(group)?.send(request)?;
            if !busy(&response) || attempt == COORDINATOR_ATTEMPTS_MAX {
                return Ok(response);
            }
            attempt += 1;
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Errors of group requests that mean "ask the coordinator again".
pub fn coordinator_busy(code: i16) -> bool {
    matches!(
        ResponseError::try_from_code(code),
        Some(
            ResponseError::NotCoordinator
                | ResponseError::CoordinatorNotAvailable
                | ResponseError::CoordinatorLoadInProgress
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_read_like_kafkas() {
        assert_eq!(kafka_error(3, None), "UNKNOWN_TOPIC_OR_PARTITION (3)");
        assert_eq!(kafka_error(36, Some(&str_bytes("exists"))), "TOPIC_ALREADY_EXISTS (36): exists");
        assert_eq!(kafka_error(-1, None), "UNKNOWN_SERVER_ERROR (-1)");
    }
}
