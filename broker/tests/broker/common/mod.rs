//! Test harness: starts the real `keel` binary on free ports with a temporary data
//! directory and talks to it over real sockets with `kafka-protocol` encoders.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{encode_request_header_into_buffer, Decodable, Encodable, StrBytes};

pub mod cluster;
pub mod kafka;
pub mod loopfs;
pub mod sasl;

pub struct Broker {
    pub child: Option<Child>,
    pub port: u16,
    pub admin_port: u16,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    smp: usize,
    memory: String,
    extra_args: Vec<String>,
    /// Further data directories, as paths under `dir` (so they follow it if a test
    /// moves it).
    extra_dirs: Vec<String>,
    /// Lines added to the broker's YAML config.
    pub yaml: String,
}

/// A free port below the kernel's ephemeral range, so no client socket of the tests
/// can sit on it when a killed broker is restarted. `KEEL_TEST_PORTS=FIRST-LAST`
/// narrows the range (to share a machine).
pub fn free_port() -> u16 {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() as u64
        ^ (std::process::id() as u64) << 16;
    let (first, count) = std::env::var("KEEL_TEST_PORTS")
        .ok()
        .and_then(|r| {
            let (a, b) = r.split_once('-')?;
            let (a, b): (u16, u16) = (a.parse().ok()?, b.parse().ok()?);
            (b > a).then_some((a, u64::from(b - a) + 1))
        })
        .unwrap_or((20_000, 12_000));
    // Tests of one binary run in parallel: a port handed out once is not handed out
    // again in this process, even before its broker has bound it.
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for i in 0..1000u64 {
        let port = first + ((seed.wrapping_mul(6364136223846793005).wrapping_add(i * 7919)) % count) as u16;
        if !handed_out.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no free port");
}

impl Broker {
    pub fn start(smp: usize) -> Broker {
        Broker::start_with(smp, "256M", &[])
    }

    /// A broker with `--memory memory` and more command-line arguments.
    pub fn start_with(smp: usize, memory: &str, extra_args: &[&str]) -> Broker {
        Broker::start_full(smp, memory, extra_args, &[], "")
    }

    /// As `start_with`, with more data directories: `extra_dirs` are paths under the
    /// broker's temporary directory (the first is always `data`), or absolute paths.
    pub fn start_with_dirs(smp: usize, memory: &str, extra_args: &[&str], extra_dirs: &[&str]) -> Broker {
        Broker::start_full(smp, memory, extra_args, extra_dirs, "")
    }

    /// A broker whose YAML config also holds `yaml` (limits that have no flag).
    pub fn start_with_yaml(smp: usize, memory: &str, extra_args: &[&str], yaml: &str) -> Broker {
        Broker::start_full(smp, memory, extra_args, &[], yaml)
    }

    /// A broker on the given Kafka port.
    pub fn start_on_port(smp: usize, port: u16) -> Broker {
        Broker::start_on(port, smp, "256M", &[], &[], "")
    }

    /// A broker on the given Kafka port with more arguments and YAML lines (tests
    /// that add listeners on ports they chose).
    pub fn start_on_port_with(port: u16, smp: usize, extra_args: &[&str], yaml: &str) -> Broker {
        Broker::start_on(port, smp, "256M", extra_args, &[], yaml)
    }

    fn start_full(smp: usize, memory: &str, extra_args: &[&str], extra_dirs: &[&str], yaml: &str) -> Broker {
        Broker::start_on(free_port(), smp, memory, extra_args, extra_dirs, yaml)
    }

    fn start_on(port: u16, smp: usize, memory: &str, extra_args: &[&str], extra_dirs: &[&str], yaml: &str) -> Broker {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let mut b = Broker {
            child: None,
            port,
            admin_port: free_port(),
            dir,
            _tmp: Some(tmp),
            smp,
            memory: memory.to_string(),
            extra_args: extra_args.iter().map(|a| a.to_string()).collect(),
            extra_dirs: extra_dirs.iter().map(|d| d.to_string()).collect(),
            yaml: yaml.to_string(),
        };
        b.spawn();
        b
    }

    /// The broker's resident memory (VmRSS), in bytes.
    pub fn rss_bytes(&self) -> u64 {
        rss_bytes_of(self.child.as_ref().expect("broker running").id())
    }

    /// The value of a `/metrics` series for one shard.
    pub fn metric(&self, name: &str, shard: usize) -> u64 {
        let text = self.admin_get("/metrics");
        let prefix = format!("{name}{{shard=\"{shard}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
            .unwrap_or_else(|| panic!("no metric {name} for shard {shard}"))
    }

    /// A `/metrics` series summed over all shards.
    pub fn metric_sum(&self, name: &str) -> u64 {
        (0..self.smp).map(|s| self.metric(name, s)).sum()
    }

    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("keel.log")).unwrap();
        // Small journal files: each start zero-fills its first one.
        let config = self.dir.join("keel.yaml");
        std::fs::write(&config, format!("journal_file_bytes: 8388608\n{}", self.yaml)).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_keel"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--kafka-addr", &format!("127.0.0.1:{}", self.port)])
            .args(["--admin-addr", &format!("127.0.0.1:{}", self.admin_port)])
            .args(["--smp", &self.smp.to_string(), "--memory", &self.memory])
            .args(
                self.extra_dirs.iter().flat_map(|d| ["--data-dir".to_string(), self.dir.join(d).display().to_string()]),
            )
            .args(&self.extra_args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("keel binary starts");
        self.child = Some(child);
        // Ready means a request is answered: right after a crash the kernel may still
        // accept connections on the dead process's listeners for a moment. The bound
        // is generous: recovering 1,000 partitions on a loaded 2-core host took over 30 s.
        let deadline = Instant::now() + Duration::from_secs(90);
        while !self.answers_api_versions() {
            assert!(self.is_running(), "broker exited: {}", self.log());
            assert!(Instant::now() < deadline, "broker did not answer: {}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        // Every shard must be accepting, not only the first to bind.
        std::thread::sleep(Duration::from_millis(200));
    }

    fn answers_api_versions(&self) -> bool {
        let Ok(s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let mut c = Conn { stream: s, next_correlation: 1 };
        let (_, frame) = c.frame(ApiKey::ApiVersions, 3, &kafka_protocol::messages::ApiVersionsRequest::default());
        c.stream.write_all(&frame).is_ok() && c.read_frame().is_some()
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Stops the process where it is (SIGSTOP), as a stalled machine would; `resume`
    /// lets it go on.
    pub fn pause(&mut self) {
        self.signal(libc::SIGSTOP);
    }

    pub fn resume(&mut self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&mut self, signal: i32) {
        if let Some(c) = &self.child {
            // SAFETY: sending a signal to our own child process.
            unsafe { libc::kill(c.id() as i32, signal) };
        }
    }

    /// An orderly stop (SIGTERM), waiting for the process to exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: sending a signal to our own child process.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let status = c.wait().unwrap();
            assert!(status.success(), "orderly stop exited with {status}: {}", self.log());
        }
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().map(|c| c.try_wait().unwrap().is_none()).unwrap_or(false)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("keel.log")).unwrap_or_default()
    }

    pub fn connect(&self) -> Conn {
        if let Err(e) = TcpStream::connect(("127.0.0.1", self.port)) {
            panic!("broker on port {} is not accepting connections ({e}); its log:\n{}", self.port, self.log());
        }
        Broker::connect_port(self.port)
    }

    pub fn connect_port(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        Conn { stream: s, next_correlation: 1 }
    }

    pub fn admin_get(&self, path: &str) -> String {
        self.admin_request("GET", path)
    }

    /// An admin API request with method `method` and no body; the whole response.
    pub fn admin_request(&self, method: &str, path: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.admin_port)).unwrap();
        write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub struct Conn {
    pub stream: TcpStream,
    next_correlation: i32,
}

impl Conn {
    pub fn send_raw(&mut self, frame: &[u8]) {
        self.stream.write_all(frame).unwrap();
    }

    /// Reads one response frame; `None` if the broker closed the connection.
    pub fn read_frame(&mut self) -> Option<Bytes> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).ok()?;
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body).ok()?;
        Some(Bytes::from(body))
    }

    pub fn frame<R: Encodable>(&mut self, key: ApiKey, version: i16, body: &R) -> (i32, Vec<u8>) {
        let correlation = self.next_correlation;
        self.next_correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation)
            .with_client_id(Some(StrBytes::from_static_str("keel-tests")));
        let mut buf = BytesMut::new();
        encode_request_header_into_buffer(&mut buf, &header).unwrap();
        body.encode(&mut buf, version).unwrap();
        let mut frame = (buf.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&buf);
        (correlation, frame)
    }

    pub fn from_stream(stream: TcpStream) -> Conn {
        Conn { stream, next_correlation: 1 }
    }

    /// `call` that gives `None` when the broker does not answer (it died or closed).
    pub fn try_call<Req: Encodable, Resp: Decodable>(&mut self, key: ApiKey, version: i16, body: &Req) -> Option<Resp> {
        let (correlation, frame) = self.frame(key, version, body);
        self.stream.write_all(&frame).ok()?;
        let mut resp = self.read_frame()?;
        let header_len = if key.response_header_version(version) >= 1 { 5 } else { 4 };
        if resp.len() < header_len || i32::from_be_bytes(resp[..4].try_into().unwrap()) != correlation {
            return None;
        }
        let mut body = resp.split_off(header_len);
        Resp::decode(&mut body, version).ok()
    }

    /// Sends a request and decodes its response.
    pub fn call<Req: Encodable, Resp: Decodable>(&mut self, key: ApiKey, version: i16, body: &Req) -> Resp {
        let (correlation, frame) = self.frame(key, version, body);
        self.send_raw(&frame);
        let mut resp = self.read_frame().expect("a response");
        let header_len = if key.response_header_version(version) >= 1 { 5 } else { 4 };
        assert_eq!(i32::from_be_bytes(resp[..4].try_into().unwrap()), correlation);
        let mut body = resp.split_off(header_len);
        Resp::decode(&mut body, version).expect("response decodes")
    }
}

/// The resident memory (VmRSS) of process `pid`, in bytes; 0 once it is gone.
pub fn rss_bytes_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    kib * 1024
}

/// Directories `<topic>-<n>` per data directory.
pub fn partition_dirs(dir: &Path, topic: &str) -> Vec<i32> {
    let mut out: Vec<i32> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_string_lossy().strip_prefix(&format!("{topic}-"))?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}
