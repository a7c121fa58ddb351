//! The accept loop of one shard, with the per-shard share of the connection limit.

use std::rc::Rc;

use glommio::net::TcpListener;

use super::conn;
use crate::shard::Shard;

pub async fn serve(shard: Rc<Shard>) -> Result<(), String> {
    let addr = shard.config.kafka_addr.clone();
    let listener = bind(&addr).map_err(|e| format!("shard {} cannot listen on {addr}: {e}", shard.id))?;
    let connections_max = (shard.config.connections_max / shard.count).max(1);
    tracing::info!(shard = shard.id, %addr, "accepting Kafka connections");
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        if shard.connections.get() >= connections_max {
            tracing::warn!(shard = shard.id, connections_max, "connection limit reached; closing new connection");
            drop(stream);
            continue;
        }
        limit_receive_buffer(&stream, shard.config.socket_receive_buffer_bytes);
        let shard = shard.clone();
        glommio::spawn_local(async move {
            shard.connections.set(shard.connections.get() + 1);
            conn::serve(&shard, stream).await;
            shard.connections.set(shard.connections.get() - 1);
        })
        .detach();
    }
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
