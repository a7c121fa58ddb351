//! Mutual TLS on the node-to-node port (`replication::rpc_tls`), with certificates
//! made by `compat/security/node-certs.sh` (openssl). A cluster whose nodes hold
//! certificates of one CA replicates as without TLS, node 3's certificate naming it by
//! its common name only and the others' by DNS name too. A process reaching a node's
//! port with a certificate for another node, with none, with one from another CA, or
//! without TLS is refused, counted, and moves no Raft state; the same forged frame
//! sent to a cluster without TLS does move it, which is what the TLS stops.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::{ApiKey, DescribeQuorumRequest, DescribeQuorumResponse};
use keel_broker::replication::frame::{FrameBuilder, Outgoing};
use keel_broker::replication::shell::METADATA_GROUP;
use keel_raft::{Envelope, Message, MessageType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::common::cluster::{produce_all, Cluster};
use crate::common::kafka::name;

fn node_certs(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../compat/security/node-certs.sh");
    let made = std::process::Command::new(script).arg(dir.path()).arg(n.to_string()).output().unwrap();
    assert!(made.status.success(), "node-certs.sh: {}", String::from_utf8_lossy(&made.stderr));
    dir
}

fn tls_flags(certs: &Path, id: i32) -> Vec<String> {
    let file = |f: String| certs.join(f).display().to_string();
    vec![
        "--rpc-tls-cert".into(),
        file(format!("keel-node-{id}.crt")),
        "--rpc-tls-key".into(),
        file(format!("keel-node-{id}.key")),
        "--rpc-tls-ca".into(),
        file("ca.pem".into()),
    ]
}

/// The metadata quorum's leader epoch (its Raft term), as node 1 answers it.
fn metadata_term(c: &Cluster) -> i32 {
    let req = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(name("__cluster_metadata"))
        .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
    let q: DescribeQuorumResponse = c.try_connect(1).unwrap().call(ApiKey::DescribeQuorum, 2, &req);
    q.topics[0].partitions[0].leader_epoch
}

/// A Raft heartbeat of the metadata group that claims to come from node 3 with a term
/// 100 past `term`: taken, it would make node 1 follow "node 3" in that term.
fn forged_heartbeat(term: i32) -> Vec<u8> {
    let mut message = Message::default();
    message.set_msg_type(MessageType::MsgHeartbeat);
    (message.from, message.to, message.term) = (3, 1, term as u64 + 100);
    let mut frame = FrameBuilder::new(3, 0, 0);
    frame.push(Outgoing::new(Envelope { group: METADATA_GROUP, message })).unwrap();
    frame.finish().parts().concat()
}

fn pem_certs(path: PathBuf) -> Vec<CertificateDer<'static>> {
    rustls_pemfile::certs(&mut std::fs::read(path).unwrap().as_slice()).collect::<Result<_, _>>().unwrap()
}

fn pem_key(path: PathBuf) -> PrivateKeyDer<'static> {
    rustls_pemfile::private_key(&mut std::fs::read(path).unwrap().as_slice()).unwrap().unwrap()
}

/// Sends `frame` to `port` over TLS trusting `certs`' CA, presenting `identity` (a
/// certificate and key file stem in `certs`) if any; returns whether the node closed
/// the connection (or failed the handshake) within five seconds.
fn send_over_tls(certs: &Path, port: u16, identity: Option<&str>, frame: &[u8]) -> bool {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pem_certs(certs.join("ca.pem")).remove(0)).unwrap();
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let config = match identity {
        Some(stem) => builder
            .with_client_auth_cert(
                pem_certs(certs.join(format!("{stem}.crt"))),
                pem_key(certs.join(format!("{stem}.key"))),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let name = ServerName::try_from("keel-node-1").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let socket = TcpStream::connect(("127.0.0.1", port)).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::StreamOwned::new(connection, socket);
    if tls.write_all(frame).and_then(|_| tls.flush()).is_err() {
        return true;
    }
    closed_within(&mut tls)
}

/// Whether the node closes the connection before the read timeout; what it sends
/// first (a TLS alert) is read past.
fn closed_within(stream: &mut impl Read) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => return !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        }
    }
}

#[test]
fn a_cluster_with_rpc_tls_replicates_and_refuses_every_forged_peer() {
    let certs = node_certs(3);
    let dir = certs.path().to_path_buf();
    let c = Cluster::start_with_node_args(3, "", |id| tls_flags(&dir, id));
    assert_eq!(c.create_topic("tls-r3", 1, 3), 0);
    let values: Vec<String> = (0..50).map(|i| format!("v{i}")).collect();
    // acks=all on three replicas: committed through the TLS transport.
    let acked = produce_all(&c, &[1, 2, 3], "tls-r3", 0, &values);
    assert_eq!(acked.len(), values.len());
    c.wait_until("every replica in sync", Duration::from_secs(30), |c| c.all_in_sync(&[1, 2, 3], "tls-r3", 3));
    let term = metadata_term(&c);
    let refused = |c: &Cluster| c.nodes[0].metric("keel_rpc_peers_refused_total", 0);
    let before = refused(&c);
    assert_eq!(before, 0, "no node refused another");
    let port = c.rpc[0];
    let frame = forged_heartbeat(term);
    assert!(send_over_tls(&dir, port, Some("keel-node-2"), &frame), "node 2's certificate speaking as node 3");
    assert!(send_over_tls(&dir, port, None, &frame), "no client certificate");
    assert!(send_over_tls(&dir, port, Some("other-ca-node-1"), &frame), "a certificate of another CA");
    let mut plain = TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    plain.write_all(&frame).unwrap();
    assert!(closed_within(&mut plain), "a frame without TLS");
    c.wait_until("four refusals counted", Duration::from_secs(10), |c| refused(c) >= before + 4);
    let after = metadata_term(&c);
    assert!(after < term + 100, "the forged term moved Raft: {term} -> {after}");
    // Still serving: another acks=all produce commits.
    assert_eq!(produce_all(&c, &[1, 2, 3], "tls-r3", 0, &values[..5]).len(), 5);
}

#[test]
fn without_rpc_tls_the_same_forged_frame_moves_raft_state() {
    let c = Cluster::start(3);
    let term = metadata_term(&c);
    let mut plain = TcpStream::connect(("127.0.0.1", c.rpc[0])).unwrap();
    plain.write_all(&forged_heartbeat(term)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while metadata_term(&c) < term + 100 {
        assert!(Instant::now() < deadline, "the forged heartbeat did not move the term past {}", term + 100);
        std::thread::sleep(Duration::from_millis(200));
    }
}
