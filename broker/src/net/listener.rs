//! The accept loops of one shard, one per listener, with the per-shard share of the
//! connection limit (all listeners together) and the connection creation rates
//! ([`throttle::admit_connection`]): past the broker's, the loop waits before it serves the
//! new connection and accepts the next; past an IP address's, the connection is closed
//! unserved after its throttle time. A connection of a TLS listener does its
//! handshake on its own task, bounded by `tls_handshake_timeout_ms`, before it reads
//! any request; on the SSL listener with client certificates the certificate's
//! subject becomes the principal.

use std::rc::Rc;
use std::time::Duration;

use glommio::net::{TcpListener, TcpStream};

use super::conn;
use crate::config::listeners::Listener;
use crate::config::listeners::SecurityProtocol;
use crate::security::context::Session;
use crate::security::principal::{self, Principal};
use crate::shard::Shard;
use crate::throttle::{self, Admission};

pub async fn serve(shard: Rc<Shard>) -> Result<(), String> {
    let mut loops = Vec::new();
    for listener in shard.security.listeners.clone() {
        let addr = listener.addr.clone();
        let socket =
            bind(&addr).map_err(|e| format!("shard {} cannot listen on {addr} ({}): {e}", shard.id, listener.name))?;
        tracing::info!(shard = shard.id, %addr, listener = %listener.name, "accepting Kafka connections");
        loops.push(accept_loop(shard.clone(), listener, socket));
    }
    keel_storage::join::join_all(loops).await;
    Ok(())
}

async fn accept_loop(shard: Rc<Shard>, listener: Rc<Listener>, socket: TcpListener) {
    let connections_max = (shard.config.connections_max / shard.count).max(1);
    loop {
        let stream = match socket.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if shard.connections.get() >= connections_max {
            tracing::warn!(shard = shard.id, connections_max, "connection limit reached; closing new connection");
            drop(stream);
            continue;
        }
        if let Ok(peer) = stream.peer_addr() {
            match throttle::admit_connection(&shard, peer.ip()).await {
                Admission::Serve(wait) if !wait.is_zero() => glommio::timer::sleep(wait).await,
                Admission::Serve(_) => {}
                Admission::Close(after) => {
                    glommio::spawn_local(async move {
                        glommio::timer::sleep(after).await;
                        drop(stream);
                    })
                    .detach();
                    continue;
                }
            }
        }
        limit_receive_buffer(&stream, shard.config.socket_receive_buffer_bytes);
        let _ = stream.set_nodelay(true);
        let shard = shard.clone();
        let listener = listener.clone();
        glommio::spawn_local(async move {
            shard.connections.set(shard.connections.get() + 1);
            serve_connection(&shard, listener, stream).await;
            shard.connections.set(shard.connections.get() - 1);
        })
        .detach();
    }
}

async fn serve_connection(shard: &Rc<Shard>, listener: Rc<Listener>, stream: TcpStream) {
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let id = shard.security.next_session_id();
    let session = |principal| Rc::new(Session::new(shard.id, id, listener.clone(), peer.clone(), principal));
    if !listener.protocol.uses_tls() {
        return conn::serve(shard, stream, session(Principal::anonymous())).await;
    }
    let Some(tls) = &shard.security.tls else {
        // ShardSecurity refuses a TLS listener without certificates at start.
        return;
    };
    let mutual = listener.protocol == SecurityProtocol::Ssl && tls.mutual_available();
    let acceptor = futures_rustls::TlsAcceptor::from(tls.config(mutual));
    let timeout = Duration::from_millis(shard.config.tls_handshake_timeout_ms.max(1));
    let handshake = async { Some(acceptor.accept(stream).await) };
    let done = futures_lite::future::or(handshake, async {
        glommio::timer::sleep(timeout).await;
        None
    })
    .await;
    let stream = match done {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            return tls_failed(shard, &peer, &e.to_string());
        }
        None => return tls_failed(shard, &peer, "the handshake timed out"),
    };
    let principal = if mutual {
        let subject = stream.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.as_ref().to_vec());
        let Some(subject) = subject.as_deref().and_then(principal::subject_of_certificate) else {
            return tls_failed(shard, &peer, "the client certificate's subject cannot be read");
        };
        match shard.security.principal_rules.name_of(&subject) {
            Some(name) => Principal::user(&name),
            None => return tls_failed(shard, &peer, &format!("no principal mapping rule applies to {subject}")),
        }
    } else {
        Principal::anonymous()
    };
    conn::serve(shard, stream, session(principal)).await;
}

fn tls_failed(shard: &Shard, peer: &str, reason: &str) {
    let stats = &shard.security.stats;
    stats.tls_handshake_failures.set(stats.tls_handshake_failures.get() + 1);
    stats.authentication_failed(peer, "TLS", "", reason);
}
/// Binds the Kafka port as glommio does, with SO_REUSEPORT so every shard listens on
/// it, and also with SO_REUSEADDR, which glommio leaves off: without it the port
/// cannot be bound while connections that another program listening there closed
/// (a Kafka broker Keel replaces, an earlier broker in a test run) wait out TIME_WAIT,
/// up to a minute after it stopped.
fn bind(addr: &str) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    use std::os::fd::{FromRawFd, IntoRawFd};
    let addr = std::net::ToSocketAddrs::to_socket_addrs(addr)?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address"))?;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    // SAFETY: the descriptor is a bound, listening TCP socket that `socket` gives up
    // and the listener owns from here on.
    Ok(unsafe { TcpListener::from_raw_fd(socket.into_raw_fd()) })
}

/// Caps the kernel's receive buffer of a connection (Kafka's
/// `socket.receive.buffer.bytes`). Left to autotuning, each socket may grow to
/// `tcp_rmem`'s maximum (32 MiB here) with bytes the broker has not read yet: a
/// thousand clients sending large requests into connections that wait for request
/// budget would push the kernel's TCP memory into pressure, and every connection,
/// well-behaved ones too, would slow down.
fn limit_receive_buffer(stream: &glommio::net::TcpStream, bytes: usize) {
    use std::os::fd::AsRawFd;
    if bytes == 0 {
        return;
    }
    let value = bytes.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: the descriptor is the live socket `stream` owns; the option value is a
    // c_int on the stack and its size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "cannot set a connection's receive buffer");
    }
}
