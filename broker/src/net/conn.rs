//! One Kafka connection: a reader that decodes frames and starts their handlers in
//! order, and a writer that sends responses in the same order (Kafka clients pipeline
//! up to `max.in.flight.requests.per.connection` requests). At most
//! `in_flight_requests_max` requests run ahead of their responses; past that the reader
//! stops reading the socket (backpressure, not an unbounded queue).

use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use futures_lite::io::BufReader;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::net::TcpStream;
use glommio::task::JoinHandle;
use keel_protocol::frame;

use super::split;
use crate::handlers;
use crate::shard::Shard;

/// What the writer does for one request, in request order.
enum Slot {
    /// A running handler; `None` output means no response (acks=0 produce).
    Pending(JoinHandle<Option<Bytes>>),
    /// A response known without running a handler.
    Ready(Bytes),
}

pub async fn serve(shard: &Rc<Shard>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let (read_half, mut write_half) = split::split(stream);
    let mut reader = BufReader::with_capacity(64 << 10, read_half);
    let (tx, rx) = local_channel::new_bounded::<Slot>(shard.config.in_flight_requests_max);
    let writer = glommio::spawn_local(async move {
        while let Some(slot) = rx.recv().await {
            let response = match slot {
                Slot::Ready(b) => Some(b),
                Slot::Pending(handle) => handle.await.flatten(),
            };
            if let Some(bytes) = response {
                if write_half.write_all(&bytes).await.is_err() {
                    return;
                }
            }
        }
        let _ = write_half.close().await;
    });
    let limit = shard.config.request_bytes_max;
    loop {
        let mut prefix = [0u8; 4];
        if reader.read_exact(&mut prefix).await.is_err() {
            break;
        }
        let len = match frame::frame_len(prefix, limit) {
            Ok(len) => len,
            Err(e) => {
                tracing::info!(%peer, error = %e, "closing connection");
                break;
            }
        };
        let mut body = BytesMut::zeroed(len);
        if reader.read_exact(&mut body).await.is_err() {
            break;
        }
        let slot = match handlers::prepare(shard, body.freeze()) {
            Ok(handlers::Prepared::Respond(bytes)) => Slot::Ready(bytes),
            Ok(handlers::Prepared::Run(request)) => {
                let shard = shard.clone();
                Slot::Pending(glommio::spawn_local(async move { handlers::run(&shard, *request).await }).detach())
            }
            Err(e) => {
                tracing::info!(%peer, error = %e, "closing connection after a bad request");
                break;
            }
        };
        if tx.send(slot).await.is_err() {
            break;
        }
    }
    drop(tx);
    writer.await;
}
