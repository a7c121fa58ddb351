//! Carries Raft messages between brokers. One [`Transport`] per shard sends to
//! `(node, shard)` destinations and receives on the shard's own port.
//!
//! Addressing: a node is reached at its `--rpc-addr HOST:PORT`, and shard `s` of that
//! node listens on `PORT + s` ([`shard_addr`]). A message thus lands on the shard that
//! owns its group, with no hop through another shard; every frame names the shard it is
//! for, and a frame that reaches another one (two shards configured alike) is refused.
//!
//! Connections are one-way: a shard opens one connection per destination it sends to,
//! lazily, and only writes to it; it only reads the connections its listener accepted.
//! No socket is shared by a reader and a writer, and nothing pairs requests with
//! responses: Raft's messages are one-way and Raft retransmits what is lost.
//!
//! Sending: [`Transport::send`] and [`Transport::send_heartbeats`] only queue. Each
//! destination has one writer task that drains its whole queue into as few frames as fit
//! under `frame_bytes_max`, so the messages of every group for one destination in one
//! round go out in one write, and the heartbeats of every group for a peer in one tick
//! in one frame: an idle cluster costs one frame per peer per heartbeat interval, not one
//! per partition (Redpanda's `heartbeat_manager`).
//!
//! Bounds instead of backpressure: Raft must never wait on the network, so the bytes a
//! destination holds queued or in flight are capped by `queued_bytes_max`. Over it, and
//! whenever a destination cannot be reached, messages are dropped and counted; Raft
//! resends appends from its progress tracking and repeats heartbeats and votes on later
//! ticks. A failed connection is retried after a backoff (50 ms doubling up to
//! `reconnect_backoff_max`), and only when there is something to send.
//!
//! Receiving: each good frame's messages are handed to the `inbound` callback at once,
//! on this shard, in the order they were sent. A connection that carried Raft messages
//! and then closes or fails (not one this side closed for a bad frame) is reported to
//! the `on_closed` receiver: a peer killed with `kill -9` closes every connection it
//! wrote, and Raft can take that for its death at once rather than an election
//! timeout later. A bad frame (over the size maximum, CRC
//! mismatch, unknown version or kind, wrong shard, undecodable, or the connection closed
//! inside it) is logged with the peer's address and counted, and its connection closed.
//! Entry data are slices of the frame they came in: holding one entry holds its frame.
//!
//! Everything here is one shard's: `!Send`, held in an `Rc`, its tasks on the shard's
//! executor. Dropping the last `Rc<Transport>` stops its listener, readers and writers.
//!
//! **Simulated.** A transport made with [`Transport::simulated`] has no sockets: each
//! send becomes one frame, encoded as on the wire, that a [`Network`] carries (or loses,
//! repeats, delays) and hands back with [`Transport::deliver`], which checks and decodes
//! it as a reader would. The cluster simulation runs several nodes' shells this way in
//! one thread.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::io::BufReader;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use keel_raft::{Envelope, NodeId};
use keel_storage::Signal;
use thiserror::Error;

use super::frame::{self, Frame, FrameBuilder, FrameError, Inbound, Outgoing, PREFIX_BYTES};
use super::rpc_tls::{Identity, RpcTls};

const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Read buffer of each inbound connection; a larger frame is read straight into its own.
const READ_BUFFER_BYTES: usize = 64 << 10;
/// Bytes of a frame read (and its memory touched) at a time.
const READ_STEP_BYTES: usize = 1 << 20;
/// Linux's `IOV_MAX`: slices per `sendmsg`.
const SLICES_PER_SEND_MAX: usize = 1024;

#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// Largest frame payload sent or accepted. Raft's `max_size_per_msg` must leave room
    /// under it: a single message larger than a frame is dropped.
    pub frame_bytes_max: usize,
    /// Bytes one destination may hold queued or in flight; over it messages are dropped.
    pub queued_bytes_max: usize,
    pub reconnect_backoff_max: Duration,
    pub connect_timeout: Duration,
    /// Mutual TLS on every connection, each peer's certificate naming its node.
    pub tls: Option<Rc<RpcTls>>,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            frame_bytes_max: 64 << 20,
            queued_bytes_max: 32 << 20,
            reconnect_backoff_max: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            tls: None,
        }
    }
}

/// Counters since the transport started, and the bytes it holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportStats {
    pub frames_sent: u64,
    pub frames_received: u64,
    /// Frames sent that carried heartbeats (also counted in `frames_sent`).
    pub heartbeat_frames_sent: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    /// Whole frames, prefix included.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Messages not sent: over a destination's bound, to an unknown node, larger than a
    /// frame, or queued for a destination that could not be reached.
    pub dropped_messages: u64,
    pub bad_frames: u64,
    /// Peers refused: a failed TLS handshake either way (no certificate, another CA,
    /// a certificate not naming the node asked for), or a frame from a node other
    /// than the one the connection's certificate names.
    pub peers_refused: u64,
    /// Outbound connections established.
    pub connects: u64,
    /// Bytes queued or in flight, all destinations together.
    pub queued_bytes: u64,
    /// The most bytes one destination has held queued or in flight.
    pub queued_bytes_peak: u64,
}

/// Receives the payload of each control frame, with the node that sent it.
pub type ControlReceiver = Rc<dyn Fn(NodeId, Bytes)>;

/// Told the node whose Raft connection closed or failed.
pub type ClosedReceiver = Rc<dyn Fn(NodeId)>;

/// What carries a simulated transport's frames: each is a whole frame (prefix
/// included) from `from` to shard `to_shard` of `to`.
pub trait Network {
    fn send(&self, from: NodeId, to: NodeId, to_shard: u16, frame: Vec<u8>);
}

pub struct Transport {
    shared: Rc<Shared>,
    outboxes: RefCell<HashMap<(NodeId, u16), Rc<Outbox>>>,
    /// Set for a simulated transport: frames go there instead of to sockets.
    network: Option<Rc<dyn Network>>,
}

/// What the transport's tasks hold; the `Transport` itself is held only by its owner,
/// so that dropping it stops them.
struct Shared {
    node: NodeId,
    shard: u16,
    config: TransportConfig,
    peers: RefCell<HashMap<NodeId, SocketAddr>>,
    inbound: Rc<dyn Fn(NodeId, Vec<Envelope>)>,
    /// Receives control frames' payloads (see [`Transport::send_control`]).
    control: RefCell<Option<ControlReceiver>>,
    /// Told when a connection that carried Raft messages ends (see [`Transport::on_closed`]).
    closed: RefCell<Option<ClosedReceiver>>,
    stats: Cell<TransportStats>,
    stopped: Rc<Signal>,
}

/// One destination's queue, drained by its writer task.
struct Outbox {
    to: NodeId,
    to_shard: u16,
    queue: RefCell<VecDeque<Queued>>,
    /// Queued and in flight.
    bytes: Cell<usize>,
    wake: Rc<Signal>,
}

struct Queued {
    message: Outgoing,
    bytes: usize,
    heartbeat: bool,
}

impl Transport {
    /// `peers` maps each node to its `--rpc-addr` (shard 0's port). `inbound` receives
    /// every good frame's messages with the node that sent them.
    pub fn new(
        node: NodeId,
        shard: u16,
        peers: HashMap<NodeId, SocketAddr>,
        config: TransportConfig,
        inbound: Rc<dyn Fn(NodeId, Vec<Envelope>)>,
    ) -> Rc<Transport> {
        Transport::build(node, shard, peers, config, inbound, None)
    }

    /// A transport with no sockets, whose frames `network` carries to `peers`.
    pub fn simulated(
        node: NodeId,
        shard: u16,
        peers: &[NodeId],
        network: Rc<dyn Network>,
        inbound: Rc<dyn Fn(NodeId, Vec<Envelope>)>,
    ) -> Rc<Transport> {
        let unroutable = SocketAddr::from(([0, 0, 0, 0], 0));
        let peers = peers.iter().filter(|p| **p != node).map(|p| (*p, unroutable)).collect();
        Transport::build(node, shard, peers, TransportConfig::default(), inbound, Some(network))
    }

    fn build(
        node: NodeId,
        shard: u16,
        peers: HashMap<NodeId, SocketAddr>,
        config: TransportConfig,
        inbound: Rc<dyn Fn(NodeId, Vec<Envelope>)>,
        network: Option<Rc<dyn Network>>,
    ) -> Rc<Transport> {
        let shared = Shared {
            node,
            shard,
            config,
            peers: RefCell::new(peers),
            inbound,
            control: RefCell::new(None),
            closed: RefCell::new(None),
            stats: Cell::default(),
            stopped: Signal::new(),
        };
        Rc::new(Transport { shared: Rc::new(shared), outboxes: RefCell::default(), network })
    }

    /// Takes a frame a simulated network carried: checks and decodes it as a reader
    /// does, and hands its messages on. A bad frame is refused and counted.
    pub fn deliver(&self, frame: &[u8]) -> Result<(), FrameError> {
        let shared = &self.shared;
        let result = (|| {
            let prefix: [u8; PREFIX_BYTES] =
                frame.get(..PREFIX_BYTES).and_then(|p| p.try_into().ok()).ok_or(FrameError::Truncated)?;
            let prefix = frame::read_prefix(prefix, shared.config.frame_bytes_max)?;
            let payload = &frame[PREFIX_BYTES..];
            if payload.len() != prefix.length {
                return Err(FrameError::Truncated);
            }
            frame::check_crc(payload, prefix.crc)?;
            frame::decode(Bytes::copy_from_slice(payload), shared.shard)
        })();
        let inbound = result.inspect_err(|_| shared.count(|stats| stats.bad_frames += 1))?;
        let messages = inbound.envelopes.len() as u64;
        shared.count(|stats| {
            stats.frames_received += 1;
            stats.messages_received += messages;
            stats.bytes_received += frame.len() as u64;
        });
        if messages > 0 {
            (shared.inbound)(inbound.from, inbound.envelopes);
        }
        Ok(())
    }

    /// Tells the `on_closed` receiver that `node`'s connection ended (in a simulation:
    /// the node was killed, as a real kill closes its connections).
    pub fn connection_closed(&self, node: NodeId) {
        let receiver = self.shared.closed.borrow().clone();
        if let Some(receiver) = receiver {
            receiver(node);
        }
    }

    /// Binds `PORT + shard` of `rpc_addr` and serves inbound connections until the
    /// transport is dropped. Returns once bound; the accept loop runs in its own task.
    pub async fn listen(self: &Rc<Self>, rpc_addr: SocketAddr) -> io::Result<()> {
        let addr = shard_addr(rpc_addr, self.shared.shard)?;
        let listener = TcpListener::bind(addr)?;
        tracing::info!(node = self.shared.node, shard = self.shared.shard, %addr, "accepting Raft connections");
        self.shared.spawn(accept_loop(self.shared.clone(), listener));
        Ok(())
    }

    pub fn send(&self, to: NodeId, to_shard: u16, messages: Vec<Envelope>) {
        self.enqueue(to, to_shard, messages, false);
    }

    /// Queues the heartbeats of every group for `to` in this tick; they leave in one
    /// frame (with whatever else is queued for `to`).
    pub fn send_heartbeats(&self, to: NodeId, to_shard: u16, heartbeats: Vec<Envelope>) {
        self.enqueue(to, to_shard, heartbeats, true);
    }

    /// Sends one control message to `(to, to_shard)` on a connection of its own,
    /// without waiting: control messages are rare requests a node repeats until it sees
    /// their effect, so one lost costs nothing, and they never queue behind Raft's.
    pub fn send_control(&self, to: NodeId, to_shard: u16, payload: Bytes) {
        if self.network.is_some() {
            return; // The simulation runs no cluster metadata: nothing sends control.
        }
        let Some(rpc_addr) = self.shared.peers.borrow().get(&to).copied() else { return };
        let frame = frame::control_frame(self.shared.node, self.shared.shard, to_shard, &payload);
        let shared = self.shared.clone();
        self.shared.spawn(async move {
            let Ok(addr) = shard_addr(rpc_addr, to_shard) else { return };
            let Ok(mut stream) = open(&shared, to, addr).await else { return };
            if stream.write_parts(&frame.parts()).await.is_ok() {
                shared.count(|stats| stats.frames_sent += 1);
            }
            stream.close().await;
        });
    }

    /// Sets the receiver of control messages.
    pub fn on_control(&self, receiver: ControlReceiver) {
        *self.shared.control.borrow_mut() = Some(receiver);
    }

    /// Sets the receiver told when an inbound connection that carried Raft messages
    /// from a node closes or fails: the peer may be gone (killed, or its transport
    /// stopped), or may only be reconnecting.
    pub fn on_closed(&self, receiver: ClosedReceiver) {
        *self.shared.closed.borrow_mut() = Some(receiver);
    }

    /// The nodes this transport can reach (every peer but this node).
    pub fn peers(&self) -> Vec<NodeId> {
        self.shared.peers.borrow().keys().copied().collect()
    }

    /// Adds a node or changes its address; a connection already open stays open.
    pub fn add_peer(&self, node: NodeId, addr: SocketAddr) {
        self.shared.peers.borrow_mut().insert(node, addr);
    }

    pub fn stats(&self) -> TransportStats {
        let queued: usize = self.outboxes.borrow().values().map(|outbox| outbox.bytes.get()).sum();
        TransportStats { queued_bytes: queued as u64, ..self.shared.stats.get() }
    }

    fn enqueue(&self, to: NodeId, to_shard: u16, messages: Vec<Envelope>, heartbeat: bool) {
        if messages.is_empty() {
            return;
        }
        if let Some(network) = &self.network {
            self.send_simulated(network.as_ref(), to, to_shard, messages, heartbeat);
            return;
        }
        let Some(outbox) = self.outbox(to, to_shard) else {
            tracing::warn!(
                node = self.shared.node,
                to,
                count = messages.len(),
                "no address for node; Raft messages dropped"
            );
            self.shared.count(|stats| stats.dropped_messages += messages.len() as u64);
            return;
        };
        for envelope in messages {
            outbox.offer(&self.shared, Outgoing::new(envelope), heartbeat);
        }
        outbox.wake.notify();
    }

    /// One frame of `messages` to a simulated network, counted as a writer counts.
    fn send_simulated(
        &self,
        network: &dyn Network,
        to: NodeId,
        to_shard: u16,
        messages: Vec<Envelope>,
        heartbeat: bool,
    ) {
        let shared = &self.shared;
        if !shared.peers.borrow().contains_key(&to) {
            shared.count(|stats| stats.dropped_messages += messages.len() as u64);
            return;
        }
        let mut builder = FrameBuilder::new(shared.node, shared.shard, to_shard);
        for envelope in messages {
            if builder.push(Outgoing::new(envelope)).is_err() {
                shared.count(|stats| stats.dropped_messages += 1);
            }
        }
        let frame = builder.finish();
        shared.count(|stats| {
            stats.frames_sent += 1;
            stats.heartbeat_frames_sent += u64::from(heartbeat);
            stats.messages_sent += u64::from(frame.messages());
            stats.bytes_sent += frame.wire_bytes() as u64;
        });
        network.send(shared.node, to, to_shard, frame.to_vec());
    }

    /// The destination's outbox, made (with its writer task) on first use.
    fn outbox(&self, to: NodeId, to_shard: u16) -> Option<Rc<Outbox>> {
        if let Some(outbox) = self.outboxes.borrow().get(&(to, to_shard)) {
            return Some(outbox.clone());
        }
        if !self.shared.peers.borrow().contains_key(&to) {
            return None;
        }
        let outbox =
            Rc::new(Outbox { to, to_shard, queue: RefCell::default(), bytes: Cell::new(0), wake: Signal::new() });
        self.outboxes.borrow_mut().insert((to, to_shard), outbox.clone());
        self.shared.spawn(write_loop(self.shared.clone(), outbox.clone()));
        Some(outbox)
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.shared.stopped.notify();
    }
}

/// The address shard `shard` of a node listens on: its `--rpc-addr` port plus `shard`.
pub fn shard_addr(rpc_addr: SocketAddr, shard: u16) -> io::Result<SocketAddr> {
    let port = rpc_addr.port().checked_add(shard).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{rpc_addr} leaves no port for shard {shard}"))
    })?;
    Ok(SocketAddr::new(rpc_addr.ip(), port))
}

impl Shared {
    fn count(&self, update: impl FnOnce(&mut TransportStats)) {
        let mut stats = self.stats.get();
        update(&mut stats);
        self.stats.set(stats);
    }

    /// Runs `task` on this executor until it ends or the transport is dropped.
    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        glommio::spawn_local(futures_lite::future::or(self.stopped.wait(), task)).detach();
    }

    /// Refuses a peer: counted, logged, its connection closed by the caller.
    fn refuse(&self, peer: &str, why: &str) {
        tracing::warn!(node = self.node, shard = self.shard, %peer, why, "node-to-node peer refused");
        self.count(|stats| stats.peers_refused += 1);
    }

    fn bad_frame(&self, peer: &str, error: &FrameError) {
        tracing::warn!(node = self.node, shard = self.shard, %peer, %error, "bad Raft frame; closing the connection");
        self.count(|stats| stats.bad_frames += 1);
    }
}

impl Outbox {
    /// Queues a message, or drops it if it can never fit a frame or the destination
    /// already holds its limit.
    fn offer(&self, shared: &Shared, message: Outgoing, heartbeat: bool) {
        let bytes = message.wire_bytes();
        let config = &shared.config;
        if frame::PAYLOAD_HEADER_BYTES + bytes > config.frame_bytes_max {
            tracing::warn!(
                to = self.to,
                to_shard = self.to_shard,
                bytes,
                config.frame_bytes_max,
                "Raft message larger than a frame dropped"
            );
            shared.count(|stats| stats.dropped_messages += 1);
            return;
        }
        let held = self.bytes.get() + bytes;
        if held > config.queued_bytes_max {
            shared.count(|stats| stats.dropped_messages += 1);
            return;
        }
        self.bytes.set(held);
        shared.count(|stats| stats.queued_bytes_peak = stats.queued_bytes_peak.max(held as u64));
        self.queue.borrow_mut().push_back(Queued { message, bytes, heartbeat });
    }

    /// Takes from the front of the queue as many messages as fit in one frame.
    fn next_frame(&self, shared: &Shared) -> Option<Flight> {
        let mut queue = self.queue.borrow_mut();
        if queue.is_empty() {
            return None;
        }
        let mut builder = FrameBuilder::new(shared.node, shared.shard, self.to_shard);
        let (mut bytes, mut heartbeats) = (0, false);
        while let Some(queued) = queue.pop_front() {
            if builder.messages() > 0 && builder.payload_bytes() + queued.bytes > shared.config.frame_bytes_max {
                queue.push_front(queued);
                break;
            }
            bytes += queued.bytes;
            heartbeats |= queued.heartbeat;
            if let Err(error) = builder.push(queued.message) {
                tracing::warn!(to = self.to, %error, "Raft message cannot be encoded; dropped");
                shared.count(|stats| stats.dropped_messages += 1);
            }
        }
        Some(Flight { frame: builder.finish(), bytes, heartbeats })
    }

    /// Drops everything queued (the destination cannot be reached).
    fn drop_queued(&self, shared: &Shared) {
        let dropped = self.queue.take();
        let bytes: usize = dropped.iter().map(|queued| queued.bytes).sum();
        self.bytes.set(self.bytes.get() - bytes);
        shared.count(|stats| stats.dropped_messages += dropped.len() as u64);
    }
}

/// A frame on its way, with the queued bytes it releases once written.
struct Flight {
    frame: Frame,
    bytes: usize,
    heartbeats: bool,
}

#[derive(Debug, Error)]
enum SendError {
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: SocketAddr, source: io::Error },
    #[error("no port for the destination: {0}")]
    Address(io::Error),
    #[error("writing to {addr} failed: {source}")]
    Write { addr: SocketAddr, source: io::Error },
}

/// One destination's writer: connects when there is something to send, sends it all,
/// and on failure drops the queue and waits a backoff.
async fn write_loop(shared: Rc<Shared>, outbox: Rc<Outbox>) {
    let mut connection = None;
    let mut backoff = RECONNECT_BACKOFF_MIN;
    let mut failing = false;
    loop {
        let wake = outbox.wake.wait();
        if outbox.queue.borrow().is_empty() {
            wake.await;
            continue;
        }
        match send_queued(&shared, &outbox, &mut connection).await {
            Ok(()) => (backoff, failing) = (RECONNECT_BACKOFF_MIN, false),
            Err(error) => {
                connection = None;
                let (to, to_shard) = (outbox.to, outbox.to_shard);
                if failing {
                    tracing::debug!(to, to_shard, %error, "Raft destination still unreachable");
                } else {
                    tracing::warn!(to, to_shard, %error, "Raft destination unreachable; dropping its messages");
                }
                failing = true;
                outbox.drop_queued(&shared);
                glommio::timer::sleep(backoff).await;
                backoff = (backoff * 2).min(shared.config.reconnect_backoff_max);
            }
        }
    }
}

/// Writes frames until the queue is empty, connecting first if needed.
async fn send_queued(
    shared: &Shared,
    outbox: &Outbox,
    connection: &mut Option<(RpcStream, SocketAddr)>,
) -> Result<(), SendError> {
    let (stream, addr) = match connection {
        Some(open) => open,
        None => connection.insert(connect(shared, outbox).await?),
    };
    while let Some(flight) = outbox.next_frame(shared) {
        let written = stream.write_parts(&flight.frame.parts()).await;
        outbox.bytes.set(outbox.bytes.get() - flight.bytes);
        let messages = u64::from(flight.frame.messages());
        if let Err(source) = written {
            shared.count(|stats| stats.dropped_messages += messages);
            return Err(SendError::Write { addr: *addr, source });
        }
        shared.count(|stats| {
            stats.frames_sent += 1;
            stats.heartbeat_frames_sent += u64::from(flight.heartbeats);
            stats.messages_sent += messages;
            stats.bytes_sent += flight.frame.wire_bytes() as u64;
        });
    }
    Ok(())
}

async fn connect(shared: &Shared, outbox: &Outbox) -> Result<(RpcStream, SocketAddr), SendError> {
    let rpc_addr = shared.peers.borrow().get(&outbox.to).copied();
    let rpc_addr =
        rpc_addr.ok_or_else(|| SendError::Address(io::Error::other(format!("node {} unknown", outbox.to))))?;
    let addr = shard_addr(rpc_addr, outbox.to_shard).map_err(SendError::Address)?;
    let stream = open(shared, outbox.to, addr).await.map_err(|source| SendError::Connect { addr, source })?;
    shared.count(|stats| stats.connects += 1);
    Ok((stream, addr))
}

/// Opens a connection to node `to` at `addr`: TLS when the transport has it.
async fn open(shared: &Shared, to: NodeId, addr: SocketAddr) -> io::Result<RpcStream> {
    let stream = TcpStream::connect_timeout(addr, shared.config.connect_timeout).await?;
    // Raft's messages are small and latency-bound; frames are already batched.
    stream.set_nodelay(true)?;
    match &shared.config.tls {
        None => Ok(RpcStream::Plain(stream)),
        Some(tls) => match tls.connect(stream, to).await {
            Ok(tls) => Ok(RpcStream::Tls(Box::new(tls))),
            Err(why) => {
                shared.refuse(&addr.to_string(), &why);
                Err(io::Error::other(why))
            }
        },
    }
}

/// A connection this shard writes to.
enum RpcStream {
    Plain(TcpStream),
    Tls(Box<futures_rustls::client::TlsStream<TcpStream>>),
}

impl RpcStream {
    /// Writes `parts` in order: in place with `sendmsg` on a plain connection, as one
    /// buffer (which rustls cuts into records) on TLS.
    async fn write_parts(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        match self {
            RpcStream::Plain(stream) => write_all_vectored(stream, parts).await,
            RpcStream::Tls(stream) => {
                stream.write_all(&parts.concat()).await?;
                stream.flush().await
            }
        }
    }

    async fn close(&mut self) {
        let _ = match self {
            RpcStream::Plain(stream) => stream.close().await,
            RpcStream::Tls(stream) => stream.close().await,
        };
    }
}

/// Writes `parts` in order with as few `sendmsg` calls as the socket allows, straight
/// from the caller's buffers. When the socket is full, glommio's write waits for room.
async fn write_all_vectored(stream: &mut TcpStream, parts: &[&[u8]]) -> io::Result<()> {
    let (mut part, mut offset) = (0, 0); // the first byte not written yet
    while part < parts.len() {
        let unwritten = &parts[part][offset..];
        let slices: Vec<IoSlice<'_>> = std::iter::once(unwritten)
            .chain(parts[part + 1..].iter().copied())
            .take(SLICES_PER_SEND_MAX)
            .map(IoSlice::new)
            .collect();
        let mut written = match try_send_vectored(stream.as_raw_fd(), &slices) {
            Some(result) => result?,
            None => stream.write(unwritten).await?,
        };
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let left = parts[part].len() - offset;
            if written < left {
                offset += written;
                break;
            }
            (written, part, offset) = (written - left, part + 1, 0);
        }
    }
    Ok(())
}

/// One non-blocking `sendmsg` of `slices`; `None` when the socket has no room now.
fn try_send_vectored(fd: RawFd, slices: &[IoSlice<'_>]) -> Option<io::Result<usize>> {
    // SAFETY: an all-zero msghdr is valid (no address, no control data). `IoSlice` is
    // ABI-compatible with `iovec` on Unix, and `slices` outlives the call, which only
    // reads them. `fd` is the caller's open socket.
    let sent = unsafe {
        let mut header: libc::msghdr = std::mem::zeroed();
        header.msg_iov = slices.as_ptr() as *mut libc::iovec;
        header.msg_iovlen = slices.len() as _;
        libc::sendmsg(fd, &header, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    if sent >= 0 {
        return Some(Ok(sent as usize));
    }
    let error = io::Error::last_os_error();
    match error.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => None,
        _ => Some(Err(error)),
    }
}

async fn accept_loop(shared: Rc<Shared>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let peer = stream.peer_addr().map(|addr| addr.to_string()).unwrap_or_else(|_| "unknown peer".into());
                match shared.config.tls.clone() {
                    None => shared.spawn(read_loop(shared.clone(), peer, stream, None)),
                    Some(tls) => {
                        let shared = shared.clone();
                        shared.clone().spawn(async move {
                            match tls.accept(stream).await {
                                Ok((stream, identity)) => read_loop(shared, peer, stream, Some(identity)).await,
                                Err(why) => shared.refuse(&peer, &why),
                            }
                        });
                    }
                }
            }
            Err(error) => {
                tracing::warn!(shard = shared.shard, %error, "accepting a Raft connection failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Reads one inbound connection's frames and hands their messages on, until the peer
/// closes it or sends a bad frame.
async fn read_loop(shared: Rc<Shared>, peer: String, stream: impl AsyncRead + Unpin, identity: Option<Identity>) {
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, stream);
    // The node whose Raft messages this connection carried; control frames come on
    // connections of their own that close after one frame, and do not count.
    let mut sender = None;
    let closed = |sender: Option<NodeId>| {
        let receiver = shared.closed.borrow().clone();
        if let (Some(node), Some(receiver)) = (sender, receiver) {
            receiver(node);
        }
    };
    loop {
        let payload = match read_frame(&mut reader, shared.config.frame_bytes_max).await {
            Ok(Some(payload)) => payload,
            Ok(None) => return closed(sender),
            Err(ReadError::Io(error)) => {
                tracing::debug!(shard = shared.shard, %peer, %error, "Raft connection failed");
                return closed(sender);
            }
            Err(ReadError::Frame(error)) => {
                shared.bad_frame(&peer, &error);
                // Cut inside a frame: the peer died or closed mid-write.
                if matches!(error, FrameError::Truncated) {
                    closed(sender);
                }
                return;
            }
        };
        let bytes = (PREFIX_BYTES + payload.len()) as u64;
        let inbound = match frame::decode(payload, shared.shard) {
            Ok(inbound) => inbound,
            Err(error) => return shared.bad_frame(&peer, &error),
        };
        if let Err(why) = check_sender(&inbound, identity.as_ref()) {
            return shared.refuse(&peer, &why);
        }
        let messages = inbound.envelopes.len() as u64;
        shared.count(|stats| {
            stats.frames_received += 1;
            stats.messages_received += messages;
            stats.bytes_received += bytes;
        });
        if messages > 0 {
            sender = Some(inbound.from);
            (shared.inbound)(inbound.from, inbound.envelopes);
        }
        if let Some(payload) = inbound.control {
            let receiver = shared.control.borrow().clone();
            if let Some(receiver) = receiver {
                receiver(inbound.from, payload);
            }
        }
    }
}

/// Whether a frame speaks only for the node it comes from, and that node is the one
/// the connection's certificate names (with TLS).
fn check_sender(inbound: &Inbound, identity: Option<&Identity>) -> Result<(), String> {
    if let Some(e) = inbound.envelopes.iter().find(|e| e.message.from != inbound.from) {
        return Err(format!("a message from node {} in a frame from node {}", e.message.from, inbound.from));
    }
    match identity {
        Some(identity) if !identity.admits(inbound.from) => {
            Err(format!("a frame from node {} on a connection whose certificate does not name it", inbound.from))
        }
        _ => Ok(()),
    }
}

enum ReadError {
    /// The connection failed (reset, not a bad frame).
    Io(io::Error),
    Frame(FrameError),
}

impl From<FrameError> for ReadError {
    fn from(error: FrameError) -> Self {
        ReadError::Frame(error)
    }
}

/// Reads the next frame and checks its CRC; `None` when the peer closed the connection
/// between frames.
async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R, frame_bytes_max: usize) -> Result<Option<Bytes>, ReadError> {
    let mut prefix = [0u8; PREFIX_BYTES];
    let first = reader.read(&mut prefix).await.map_err(ReadError::Io)?;
    if first == 0 {
        return Ok(None);
    }
    read_inside_frame(reader, &mut prefix[first..]).await?;
    let prefix = frame::read_prefix(prefix, frame_bytes_max)?;
    // Memory is touched a step at a time as bytes arrive, so a peer that announces a
    // large frame and sends little costs one step.
    let mut payload = BytesMut::with_capacity(prefix.length);
    while payload.len() < prefix.length {
        let start = payload.len();
        payload.resize(start + (prefix.length - start).min(READ_STEP_BYTES), 0);
        read_inside_frame(reader, &mut payload[start..]).await?;
    }
    frame::check_crc(&payload, prefix.crc)?;
    Ok(Some(payload.freeze()))
}

/// Reads bytes a frame announced: the connection ending here truncates the frame.
async fn read_inside_frame<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut [u8]) -> Result<(), ReadError> {
    reader.read_exact(buf).await.map_err(|error| match error.kind() {
        io::ErrorKind::UnexpectedEof => ReadError::Frame(FrameError::Truncated),
        _ => ReadError::Io(error),
    })
}
