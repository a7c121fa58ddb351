//! The Raft transport between brokers over real sockets on 127.0.0.1: messages and Kafka
//! batches arrive byte-identical and in order, heartbeats and small messages are packed
//! into few frames, hostile bytes close only their connection, and a stalled or absent
//! peer costs bounded memory and is reconnected to.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use glommio::timer::sleep;
use glommio::LocalExecutorBuilder;
use keel_broker::replication::transport::{Transport, TransportConfig};
use keel_protocol::batch::build_batch;
use keel_raft::{Entry, EntryType, Envelope, GroupId, Message, MessageType, NodeId};
use protobuf::Message as _;

/// Runs `f` on a fresh glommio executor.
fn run<F: Future<Output = ()> + 'static>(f: impl FnOnce() -> F + Send + 'static) {
    LocalExecutorBuilder::default().spawn(move || async move { f().await }).expect("executor").join().expect("test");
}

/// What each call of the inbound callback brought: the sending node and its messages.
type Deliveries = Rc<RefCell<Vec<(NodeId, Vec<Envelope>)>>>;

/// One shard's transport and everything it received.
struct Node {
    transport: Rc<Transport>,
    received: Deliveries,
}

impl Node {
    fn new(node: NodeId, shard: u16, peers: HashMap<NodeId, SocketAddr>, config: TransportConfig) -> Node {
        let received = Rc::new(RefCell::new(Vec::new()));
        let sink = received.clone();
        let inbound = Rc::new(move |from, envelopes| sink.borrow_mut().push((from, envelopes)));
        Node { transport: Transport::new(node, shard, peers, config, inbound), received }
    }

    /// Listens (as shard 0) on a free port, which it returns.
    async fn listen(&self) -> SocketAddr {
        for _ in 0..20 {
            let rpc_addr = local(free_ports(1));
            if self.transport.listen(rpc_addr).await.is_ok() {
                return rpc_addr;
            }
        }
        panic!("no free port to listen on");
    }

    fn messages(&self) -> Vec<Envelope> {
        self.received.borrow().iter().flat_map(|(_, envelopes)| envelopes.iter().cloned()).collect()
    }

    fn count(&self) -> usize {
        self.received.borrow().iter().map(|(_, envelopes)| envelopes.len()).sum()
    }
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A port `p` the kernel just handed out such that `p..p + count` were all free a moment
/// ago (the ports of a node's first `count` shards).
fn free_ports(count: u16) -> u16 {
    loop {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a probe");
        let base = probe.local_addr().expect("probe address").port();
        let Some(end) = base.checked_add(count) else { continue };
        let rest: Result<Vec<_>, _> = (base + 1..end).map(|port| std::net::TcpListener::bind(local(port))).collect();
        if rest.is_ok() {
            return base;
        }
    }
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        sleep(Duration::from_millis(2)).await;
    }
}

fn message(kind: MessageType, to: NodeId, term: u64) -> Message {
    let mut message = Message::default();
    message.set_msg_type(kind);
    (message.from, message.to, message.term) = (1, to, term);
    message
}

fn envelope(topic: u128, partition: u32, message: Message) -> Envelope {
    Envelope { group: GroupId { topic, partition }, message }
}

/// A Kafka v2 batch of about `bytes` bytes (at most), of one record with a patterned
/// value; empty for 0.
fn batch(bytes: usize, seed: u8) -> Bytes {
    if bytes == 0 {
        return Bytes::new();
    }
    let value: Vec<u8> =
        (0..bytes.saturating_sub(100)).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    let batch = build_batch(0, 1_700_000_000_000, &[(Some(b"key"), Some(&value))]);
    assert!(batch.len() <= bytes.max(100));
    batch
}

fn append(to: NodeId, index: u64, datas: &[Bytes]) -> Message {
    let mut message = message(MessageType::MsgAppend, to, 5);
    (message.log_term, message.index, message.commit) = (4, index, index - 1);
    for (i, data) in datas.iter().enumerate() {
        let mut entry = Entry::default();
        (entry.term, entry.index, entry.data) = (5, index + 1 + i as u64, data.clone());
        message.entries.push(entry);
    }
    message
}

fn assert_same(received: &[Envelope], sent: &[Envelope]) {
    assert_eq!(received.len(), sent.len(), "messages received");
    for (i, (got, want)) in received.iter().zip(sent).enumerate() {
        // Not assert_eq: a difference would print megabytes of batches.
        assert!(
            got == want,
            "message {i} differs: sent {} {:?}, received {} {:?}",
            want.group,
            want.message.get_msg_type(),
            got.group,
            got.message.get_msg_type()
        );
    }
}

#[test]
fn messages_and_kafka_batches_arrive_byte_identical_and_in_order() {
    run(|| async {
        let shard0 = Node::new(2, 0, HashMap::new(), TransportConfig::default());
        let shard1 = Node::new(2, 1, HashMap::new(), TransportConfig::default());
        let rpc_addr = local(free_ports(2));
        shard0.transport.listen(rpc_addr).await.expect("shard 0 of node 2 listens on the rpc port");
        shard1.transport.listen(rpc_addr).await.expect("shard 1 of node 2 listens on the rpc port + 1");
        let sender = Node::new(1, 0, HashMap::from([(2, rpc_addr)]), TransportConfig::default());

        let batches: Vec<Bytes> =
            [0, 100, 4 << 10, 64 << 10, 1 << 20].iter().enumerate().map(|(i, &bytes)| batch(bytes, i as u8)).collect();
        let (mut to_shard0, mut to_shard1) = (Vec::new(), Vec::new());
        for round in 0..3u64 {
            let mut messages = Vec::new();
            for group in 0..4u32 {
                let topic = 0xa11ce_u128 << 64 | u128::from(group % 2);
                let mut with_batches = append(2, 10 * round + 1, &batches);
                with_batches.entries[1].context = Bytes::from_static(b"entry context");
                with_batches.entries[2].set_entry_type(EntryType::EntryConfChangeV2);
                messages.push(envelope(topic, group, with_batches));
                let mut refused = message(MessageType::MsgAppendResponse, 2, 5);
                (refused.reject, refused.reject_hint, refused.index) = (true, 7, 9);
                messages.push(envelope(topic, group, refused));
                let mut vote = message(MessageType::MsgRequestVote, 2, 6);
                (vote.log_term, vote.index, vote.context) = (5, 30, Bytes::from_static(b"CampaignTransfer"));
                messages.push(envelope(topic, group, vote));
                messages.push(envelope(topic, group, message(MessageType::MsgRequestVoteResponse, 2, 6)));
                messages.push(envelope(topic, group, message(MessageType::MsgTimeoutNow, 2, 6)));
            }
            let heartbeats: Vec<Envelope> = (0..4u32)
                .map(|group| {
                    let mut heartbeat = message(MessageType::MsgHeartbeat, 2, 5);
                    (heartbeat.commit, heartbeat.context) = (u64::from(group), Bytes::from(format!("read {round}")));
                    envelope(7, group, heartbeat)
                })
                .collect();
            let (first, second) = messages.split_at(messages.len() / 2);
            sender.transport.send(2, 1, first.to_vec());
            sender.transport.send(2, 0, second.to_vec());
            sender.transport.send_heartbeats(2, 0, heartbeats.clone());
            to_shard1.extend_from_slice(first);
            to_shard0.extend_from_slice(second);
            to_shard0.extend(heartbeats);
            sleep(Duration::from_millis(5)).await;
        }
        eventually("both shards' messages", || shard0.count() == to_shard0.len() && shard1.count() == to_shard1.len())
            .await;
        assert_same(&shard0.messages(), &to_shard0);
        assert_same(&shard1.messages(), &to_shard1);
        for node in [&shard0, &shard1] {
            assert!(node.received.borrow().iter().all(|(from, _)| *from == 1), "every frame is from node 1");
        }
        // Entry data are slices of the frame they arrived in: a message's non-empty
        // entries lie back to back in one buffer.
        let mut checked = 0;
        for received in shard1.messages().iter().filter(|e| e.message.get_msg_type() == MessageType::MsgAppend) {
            let datas: Vec<&Bytes> =
                received.message.entries.iter().map(|e| &e.data).filter(|d| !d.is_empty()).collect();
            for pair in datas.windows(2) {
                assert_eq!(pair[1].as_ptr(), pair[0].as_ptr_range().end, "entry data were copied out of the frame");
                checked += 1;
            }
        }
        assert!(checked > 0);

        let (sent, at0, at1) = (sender.transport.stats(), shard0.transport.stats(), shard1.transport.stats());
        assert_eq!(sent.messages_sent as usize, to_shard0.len() + to_shard1.len());
        assert_eq!(sent.bytes_sent, at0.bytes_received + at1.bytes_received);
        assert_eq!(sent.frames_sent, at0.frames_received + at1.frames_received);
        assert_eq!((sent.dropped_messages, sent.connects, sent.queued_bytes), (0, 2, 0));
        assert_eq!((at0.bad_frames, at1.bad_frames), (0, 0));
    });
}

#[test]
fn heartbeats_of_a_thousand_groups_leave_in_one_frame() {
    run(|| async {
        let receiver = Node::new(2, 0, HashMap::new(), TransportConfig::default());
        let rpc_addr = receiver.listen().await;
        let sender = Node::new(1, 0, HashMap::new(), TransportConfig::default());
        sender.transport.add_peer(2, rpc_addr);
        let heartbeats = |tick: u64| -> Vec<Envelope> {
            (0..1000u32)
                .map(|group| {
                    let mut heartbeat = message(MessageType::MsgHeartbeat, 2, 3);
                    heartbeat.commit = tick;
                    envelope(u128::from(group / 10), group, heartbeat)
                })
                .collect()
        };
        for tick in 1..=2u64 {
            sender.transport.send_heartbeats(2, 0, heartbeats(tick));
            eventually("a tick's heartbeats", || receiver.count() == 1000 * tick as usize).await;
            let stats = sender.transport.stats();
            assert_eq!((stats.heartbeat_frames_sent, stats.frames_sent), (tick, tick), "one frame per tick");
            assert_eq!(receiver.received.borrow().len(), tick as usize, "one delivery per frame");
        }
        assert_same(&receiver.messages()[1000..], &heartbeats(2));
        assert_eq!(receiver.transport.stats().frames_received, 2);
    });
}

/// A hand-built payload of one MsgAppend carrying `entries`, from node 9, in the
/// documented format (independent of the transport's encoder).
fn raw_payload(to_shard: u16, entries: &[&[u8]]) -> Vec<u8> {
    let mut message = append(2, 1, &vec![Bytes::new(); entries.len()]);
    message.from = 9;
    let proto = message.write_to_bytes().expect("encodes");
    raw_payload_with(to_shard, &proto, entries)
}

fn raw_payload_with(to_shard: u16, proto: &[u8], entries: &[&[u8]]) -> Vec<u8> {
    let mut payload = vec![1u8, 1];
    payload.extend_from_slice(&9u64.to_be_bytes());
    payload.extend_from_slice(&0u16.to_be_bytes());
    payload.extend_from_slice(&to_shard.to_be_bytes());
    payload.extend_from_slice(&1u32.to_be_bytes());
    payload.extend_from_slice(&42u128.to_be_bytes());
    payload.extend_from_slice(&3u32.to_be_bytes());
    payload.extend_from_slice(&(proto.len() as u32).to_be_bytes());
    payload.extend_from_slice(proto);
    payload.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for entry in entries {
        payload.extend_from_slice(&(entry.len() as u32).to_be_bytes());
    }
    for entry in entries {
        payload.extend_from_slice(entry);
    }
    payload
}

fn raw_frame(payload: &[u8]) -> Vec<u8> {
    let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// Sends `bytes` from a plain std socket (half-closing it if `close`), and tells whether
/// the receiver closed the connection within `wait`.
async fn closed_after(addr: SocketAddr, bytes: Vec<u8>, close: bool, wait: Duration) -> bool {
    glommio::executor()
        .spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(addr).expect("connect");
            stream.write_all(&bytes).expect("write");
            if close {
                stream.shutdown(Shutdown::Write).expect("half-close");
            }
            stream.set_read_timeout(Some(wait)).expect("read timeout");
            match stream.read(&mut [0u8; 1]) {
                Ok(0) => true,
                Ok(_) => panic!("the receiver answered"),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => true,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => false,
                Err(e) => panic!("read failed: {e}"),
            }
        })
        .await
}

#[test]
fn hostile_frames_close_their_connection_and_the_port_keeps_serving() {
    run(|| async {
        let config = TransportConfig { frame_bytes_max: 1 << 20, ..TransportConfig::default() };
        let receiver = Node::new(2, 0, HashMap::new(), config);
        let addr = receiver.listen().await;

        // The documented format, built by hand, is what the transport reads.
        let good = raw_frame(&raw_payload(0, &[b"batch one", b"", b"batch two"]));
        assert!(!closed_after(addr, good.clone(), false, Duration::from_millis(200)).await, "a good frame closed");
        eventually("the hand-built frame", || receiver.count() == 1).await;
        let got = &receiver.messages()[0];
        assert_eq!((receiver.received.borrow()[0].0, got.group), (9, GroupId { topic: 42, partition: 3 }));
        let datas: Vec<&[u8]> = got.message.entries.iter().map(|e| &e.data[..]).collect();
        assert_eq!(datas, [&b"batch one"[..], b"", b"batch two"]);

        let mut bad_crc = good.clone();
        bad_crc[4] ^= 1;
        let mut over_max = ((1u32 << 20) + 1).to_be_bytes().to_vec();
        over_max.extend_from_slice(&[0; 4]);
        let mut wrong_version = raw_payload(0, &[b"x"]);
        wrong_version[0] = 2;
        let mut wrong_kind = raw_payload(0, &[b"x"]);
        wrong_kind[1] = 7;
        let cases: Vec<(&str, Vec<u8>, bool)> = vec![
            ("bad CRC", bad_crc, false),
            ("length over the maximum", over_max, false),
            ("length u32::MAX", [0xff; 8].to_vec(), false),
            ("garbage protobuf", raw_frame(&raw_payload_with(0, &[0xff; 8], &[])), false),
            ("a payload cut short", raw_frame(&raw_payload(0, &[b"abc"])[..60]), false),
            ("truncated, then closed", good[..20].to_vec(), true),
            ("wrong shard", raw_frame(&raw_payload(3, &[b"x"])), false),
            ("unknown version", raw_frame(&wrong_version), false),
            ("unknown kind", raw_frame(&wrong_kind), false),
        ];
        for (i, (name, bytes, close)) in cases.into_iter().enumerate() {
            assert!(closed_after(addr, bytes, close, Duration::from_secs(5)).await, "{name}: connection left open");
            eventually(name, || receiver.transport.stats().bad_frames == i as u64 + 1).await;
        }
        assert_eq!(receiver.count(), 1, "a bad frame delivered messages");

        let sender = Node::new(1, 0, HashMap::from([(2, addr)]), TransportConfig::default());
        let sent = vec![envelope(5, 0, append(2, 3, &[batch(4 << 10, 1)]))];
        sender.transport.send(2, 0, sent.clone());
        eventually("a good transport's message", || receiver.count() == 2).await;
        assert_same(&receiver.messages()[1..], &sent);
        assert_eq!(receiver.transport.stats().frames_received, 2);

        // Dropping the transport stops its listener.
        drop(receiver);
        eventually("the port closed", || std::net::TcpStream::connect(addr).is_err()).await;
    });
}

#[test]
fn a_stalled_or_absent_peer_costs_bounded_memory_and_is_reconnected() {
    run(|| async {
        let queued_bytes_max = 2 << 20;
        let config = TransportConfig {
            queued_bytes_max,
            reconnect_backoff_max: Duration::from_millis(100),
            ..TransportConfig::default()
        };
        let absent = local(free_ports(1));
        let sender = Node::new(1, 0, HashMap::from([(2, absent)]), config);
        let stats = || sender.transport.stats();

        // Nobody listens: what is queued is dropped at each failed connection.
        for i in 0..20 {
            sender.transport.send(2, 0, vec![envelope(1, 0, append(2, i + 1, &[batch(64 << 10, 0)]))]);
            sleep(Duration::from_millis(5)).await;
        }
        eventually("the absent peer's queue dropped", || stats().dropped_messages == 20 && stats().queued_bytes == 0)
            .await;
        assert_eq!(stats().connects, 0);

        // A peer that accepts and never reads: once the socket buffers are full, the
        // destination holds at most queued_bytes_max and the rest is dropped.
        let listener = glommio::net::TcpListener::bind("127.0.0.1:0").expect("bind the stalled peer");
        sender.transport.add_peer(3, listener.local_addr().expect("address"));
        let stalled = Rc::new(RefCell::new(None));
        let holder = stalled.clone();
        glommio::spawn_local(async move { *holder.borrow_mut() = listener.accept().await.ok() }).detach();
        let megabyte = batch((1 << 20) - (4 << 10), 9);
        let dropped_before = stats().dropped_messages;
        let mut offered = 0u64;
        let deadline = Instant::now() + Duration::from_secs(15);
        while stats().dropped_messages < dropped_before + 20 {
            assert!(Instant::now() < deadline, "nothing dropped after offering {offered} MiB to a stalled peer");
            sender.transport.send(3, 0, vec![envelope(1, 0, append(3, offered + 1, std::slice::from_ref(&megabyte)))]);
            offered += 1;
            assert!(stats().queued_bytes <= queued_bytes_max as u64, "{} bytes queued", stats().queued_bytes);
            sleep(Duration::from_millis(2)).await;
        }
        assert!(stats().frames_sent > 0, "the stalled peer never got a frame: the test did not stall a connection");
        assert!(stats().queued_bytes_peak <= queued_bytes_max as u64, "peak {}", stats().queued_bytes_peak);
        assert!(stats().queued_bytes_peak > (queued_bytes_max / 2) as u64, "the bound was never approached");
        // The stalled peer goes: its connection fails and its queue is let go.
        assert!(stalled.borrow_mut().take().is_some(), "the stalled peer accepted no connection");
        eventually("the stalled queue released", || stats().queued_bytes == 0).await;

        // The absent peer comes up: a later message gets through, then everything does.
        let receiver = Node::new(2, 0, HashMap::new(), TransportConfig::default());
        receiver.transport.listen(absent).await.expect("the absent peer's port is still free");
        let deadline = Instant::now() + Duration::from_secs(10);
        while receiver.count() == 0 {
            assert!(Instant::now() < deadline, "never reconnected");
            sender.transport.send(2, 0, vec![envelope(1, 0, message(MessageType::MsgHeartbeat, 2, 5))]);
            sleep(Duration::from_millis(20)).await;
        }
        let later: Vec<Envelope> = (0..100).map(|i| envelope(1, 0, append(2, 100 + i, &[batch(1000, 3)]))).collect();
        let already = receiver.count();
        sender.transport.send(2, 0, later.clone());
        eventually("messages after the reconnect", || receiver.count() == already + later.len()).await;
        assert_same(&receiver.messages()[already..], &later);
        assert!(stats().connects >= 2);
    });
}

#[test]
fn ten_thousand_small_messages_travel_in_few_frames() {
    run(|| async {
        for (frame_bytes_max, frames_max) in [(64 << 20, 1), (64 << 10, 100)] {
            let config = TransportConfig { frame_bytes_max, ..TransportConfig::default() };
            let receiver = Node::new(2, 0, HashMap::new(), config.clone());
            let addr = receiver.listen().await;
            let sender = Node::new(1, 0, HashMap::from([(2, addr)]), config);
            let small = batch(100, 4);
            let sent: Vec<Envelope> = (0..10_000u64)
                .map(|i| envelope(1, (i % 100) as u32, append(2, i + 1, std::slice::from_ref(&small))))
                .collect();
            for message in &sent {
                sender.transport.send(2, 0, vec![message.clone()]);
            }
            eventually("10,000 messages", || receiver.count() == sent.len()).await;
            assert_same(&receiver.messages(), &sent);
            let (out, inbound) = (sender.transport.stats(), receiver.transport.stats());
            // Every frame fits under the maximum (the receiver refuses larger ones), and
            // frames are full: no more than one past what the bytes need.
            let frames_needed = out.bytes_sent.div_ceil(frame_bytes_max as u64);
            assert!(out.frames_sent <= frames_max && out.frames_sent <= frames_needed + 1, "{out:?}");
            assert_eq!((inbound.frames_received, inbound.bad_frames), (out.frames_sent, 0));
            assert_eq!(out.dropped_messages, 0);
        }
    });
}

#[test]
fn a_closed_raft_connection_is_reported_and_a_control_frame_is_not() {
    run(|| async {
        let receiver = Node::new(2, 0, HashMap::new(), TransportConfig::default());
        let closed = Rc::new(RefCell::new(Vec::new()));
        let seen = closed.clone();
        receiver.transport.on_closed(Rc::new(move |node| seen.borrow_mut().push(node)));
        let controls = Rc::new(RefCell::new(0));
        let counted = controls.clone();
        receiver.transport.on_control(Rc::new(move |_, _| *counted.borrow_mut() += 1));
        let rpc_addr = receiver.listen().await;

        // A control frame comes on a connection of its own that closes after it.
        let sender = Node::new(1, 0, HashMap::new(), TransportConfig::default());
        sender.transport.add_peer(2, rpc_addr);
        sender.transport.send_control(2, 0, Bytes::from_static(b"control"));
        eventually("the control frame", || *controls.borrow() == 1).await;
        sender.transport.send(2, 0, vec![envelope(1, 0, message(MessageType::MsgHeartbeat, 2, 3))]);
        eventually("the heartbeat", || receiver.count() == 1).await;
        sleep(Duration::from_millis(50)).await;
        assert!(closed.borrow().is_empty(), "a control connection closing is not a peer lost: {:?}", closed.borrow());

        // The sending node goes away: its Raft connection closes, and node 1 is reported.
        drop(sender);
        eventually("the close reported", || *closed.borrow() == vec![1]).await;
    });
}
