//! One Kafka connection: a reader that decodes frames and starts their handlers in
//! order, and a writer that sends responses in the same order (Kafka clients pipeline
//! up to `max.in.flight.requests.per.connection` requests). A handler starts only when
//! the requests before it allow ([`super::order`]): each request sees the effects of
//! those sent before it.
//!
//! Two bounds make the reader stop reading the socket (backpressure, not an unbounded
//! queue or an out-of-memory kill):
//! - at most `in_flight_requests_max` requests of the connection run ahead of their
//!   responses;
//! - before reading a frame's body the reader takes the frame's size from the shard's
//!   request byte budget (see [`crate::shard::budget`]), and the writer gives it back once
//!   the response is written. A frame larger than the budget could ever hold is
//!   refused as one larger than `request_bytes_max` is (the connection is closed), so
//!   the budget is a hard bound on the memory requests hold.
//!
//! When the client goes (the socket reads end or a write fails), a long-poll fetch of
//! the connection still waiting is dropped, which cancels its waits on owner shards.
//!
//! The code is generic over the stream: a plain TCP stream is served as it always was
//! (no copy, no extra layer), a TLS stream through the same reader and writer. On a
//! SASL listener the reader passes each request of a connection not yet
//! authenticated through its [`Authenticator`] before starting any handler, and
//! unauthenticated frames are capped at
//! [`sasl::UNAUTHENTICATED_FRAME_BYTES_MAX`](crate::net::sasl::UNAUTHENTICATED_FRAME_BYTES_MAX).

use std::cell::Cell;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use futures_lite::io::BufReader;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::sync::StaticPermit;
use glommio::task::JoinHandle;
use kafka_protocol::messages::ApiKey;
use keel_protocol::frame;
use keel_storage::Signal;

use super::order::{InOrder, Order, Turn};
use super::split;
use crate::handlers;
use crate::net::sasl::{self, Authenticator, Gate};
use crate::security::context::{RequestContext, Session};
use crate::shard::Shard;

/// Read buffer of each connection: what an idle connection costs (`connections_max`
/// of them at most). Small requests are read through it a buffer at a time; a frame
/// body larger than it is read straight into the frame.
pub const CONNECTION_READ_BUFFER_BYTES: usize = 16 << 10;

/// Bytes of a frame body read (and its memory touched) at a time.
const BODY_READ_STEP_BYTES: usize = 1 << 20;

/// What the writer does for one request, in request order.
enum Slot {
    /// A running handler; `None` output means no response (acks=0 produce).
    Pending(JoinHandle<Option<Bytes>>),
    /// A response known without running a handler.
    Ready(Bytes),
}

/// A slot with the request bytes it holds in the shard's budget until it is written.
struct Queued {
    slot: Slot,
    _budget: StaticPermit,
}

/// Serves one connection whose TLS handshake (if any) is done; `session` says who it
/// is so far.
pub async fn serve<S>(shard: &Rc<Shard>, stream: S, session: Rc<Session>)
where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin + 'static,
{
    let peer = session.peer.clone();
    let mut auth = session.protocol().uses_sasl().then(Authenticator::default);
    let (read_half, mut write_half) = split::split(stream);
    let mut reader = BufReader::with_capacity(CONNECTION_READ_BUFFER_BYTES, read_half);
    let (tx, rx) = local_channel::new_bounded::<Queued>(shard.config.in_flight_requests_max);
    let closed = Signal::new();
    let in_order = InOrder::new();
    let gone = Rc::new(Cell::new(false));
    let (writer_closed, writer_gone) = (closed.clone(), gone.clone());
    let writer = glommio::spawn_local(async move {
        while let Some(queued) = rx.recv().await {
            // Once the client is gone nothing more is written, but the queue is still
            // drained: each queued request gives its budget back now, not when the
            // reader stops (which may itself wait for budget).
            if writer_gone.get() {
                continue;
            }
            let response = match queued.slot {
                Slot::Ready(b) => Some(b),
                Slot::Pending(handle) => handle.await.flatten(),
            };
            if let Some(bytes) = response {
                if bytes.is_empty() {
                    // handlers::CLOSE_CONNECTION: the client sees the connection end now
                    // (a FIN), and the reader stops at its next frame.
                    let _ = write_half.close().await;
                    writer_gone.set(true);
                    writer_closed.notify();
                    continue;
                }
                if write_half.write_all(&bytes).await.is_err() {
                    writer_gone.set(true);
                    writer_closed.notify();
                }
            }
        }
        let _ = write_half.close().await;
    });
    let limit = shard.config.request_bytes_max.min(shard.request_budget.frame_bytes_max());
    loop {
        let mut prefix = [0u8; 4];
        if reader.read_exact(&mut prefix).await.is_err() {
            break;
        }
        let unauthenticated = auth.as_ref().is_some_and(|a| !a.done());
        let frame_limit = if unauthenticated { limit.min(sasl::UNAUTHENTICATED_FRAME_BYTES_MAX) } else { limit };
        let len = match frame::frame_len(prefix, frame_limit) {
            Ok(len) => len,
            Err(e) => {
                tracing::info!(%peer, error = %e, unauthenticated, "closing connection");
                break;
            }
        };
        if gone.get() {
            break;
        }
        let client_gone = closed.wait();
        let acquire = async { Some(shard.request_budget.acquire(len).await) };
        let Some(budget) = futures_lite::future::or(acquire, async {
            client_gone.await;
            None
        })
        .await
        else {
            break;
        };
        let Ok(body) = read_body(&mut reader, len).await else {
            break;
        };
        if let Some(a) = auth.as_mut().filter(|a| a.wants_raw_token()) {
            // After a v0 SaslHandshake the frames are bare SASL tokens.
            let answer = a.raw_token(shard, &session, &body);
            let close = answer.is_none();
            let slot = Slot::Ready(answer.unwrap_or(handlers::CLOSE_CONNECTION));
            if tx.send(Queued { slot, _budget: budget }).await.is_err() || close {
                break;
            }
            continue;
        }
        if let Some(until) = session.throttled_until() {
            // Muted for a quota: the request waits, as on Kafka, where the socket
            // is not read meanwhile.
            glommio::timer::sleep(until.saturating_duration_since(std::time::Instant::now())).await;
        }
        let (slot, then_close) = match handlers::prepare(shard, body) {
            Ok(handlers::Prepared::Respond(bytes)) => (Slot::Ready(bytes), false),
            Ok(handlers::Prepared::Run(request)) => {
                // Every request of a SASL connection passes the authenticator: before
                // authentication, for a re-authentication, and to find an expired session.
                let gate = match auth.as_mut() {
                    Some(a) => a.gate(shard, &session, &request),
                    None => Gate::Run,
                };
                match gate {
                    Gate::Run => {
                        let order = handlers::api(request.api_key).map_or(Order::Write, |a| a.order);
                        let turn = in_order.start(order).await;
                        (Slot::Pending(spawn_handler(shard, &session, *request, &closed, turn)), false)
                    }
                    Gate::Respond(bytes) => (Slot::Ready(bytes), false),
                    Gate::RespondAndClose(bytes) => (Slot::Ready(bytes), true),
                    Gate::Close(reason) => {
                        tracing::info!(%peer, reason, "closing a connection that is not authenticated");
                        break;
                    }
                }
            }
            Err(e) => {
                tracing::info!(%peer, error = %e, "closing connection after a bad request");
                break;
            }
        };
        if tx.send(Queued { slot, _budget: budget }).await.is_err() {
            break;
        }
        if then_close {
            // The refusal is written, then the connection closes (as Kafka does after
            // a failed authentication); nothing more is read.
            let no_budget = shard.request_budget.acquire(0).await;
            let _ = tx.send(Queued { slot: Slot::Ready(handlers::CLOSE_CONNECTION), _budget: no_budget }).await;
            break;
        }
    }
    closed.notify();
    drop(tx);
    writer.await;
}

/// Reads a frame body of `len` bytes, a step at a time: memory is touched only as
/// bytes arrive, so a client that announces a large frame and sends little (or has
/// gone: a reader waiting for budget learns of it only now) costs one step.
async fn read_body<R: futures_lite::AsyncRead + Unpin>(reader: &mut R, len: usize) -> std::io::Result<Bytes> {
    let mut body = BytesMut::with_capacity(len);
    while body.len() < len {
        let start = body.len();
        body.resize(start + (len - start).min(BODY_READ_STEP_BYTES), 0);
        reader.read_exact(&mut body[start..]).await?;
    }
    Ok(body.freeze())
}

/// Starts a request's handler, which holds its `turn` until it finishes. A fetch stops
/// (and stops waiting on other shards) when the connection closes: nobody is left to
/// read its answer.
/// The request's count, bytes and latency go to the shard's metrics when it is
/// answered (a fetch cut short by its client leaving is not counted).
fn spawn_handler(
    shard: &Rc<Shard>,
    session: &Rc<Session>,
    request: handlers::Request,
    closed: &Rc<Signal>,
    turn: Turn,
) -> JoinHandle<Option<Bytes>> {
    let shard = shard.clone();
    let ctx = RequestContext { session: session.clone(), client_id: request.header.client_id.clone() };
    let (api, version) = (request.api_key, request.version);
    let (request_bytes, started) = (request.frame.len() + 4, std::time::Instant::now());
    let run = async move {
        let response = match crate::throttle::request_quota(&shard, &ctx) {
            None => handlers::run(&shard, &ctx, request).await,
            // A client with a request-time quota: its handler's reactor time is summed
            // over every poll, charged, and a throttle set in the answer.
            Some(quota) => {
                let mut handler = Box::pin(handlers::run(&shard, &ctx, request));
                let mut busy = std::time::Duration::ZERO;
                let response = std::future::poll_fn(|cx| {
                    let polled = std::time::Instant::now();
                    let r = std::future::Future::poll(handler.as_mut(), cx);
                    busy += polled.elapsed();
                    r
                })
                .await;
                let throttle = quota.charge(&shard, &ctx, busy).await;
                match response {
                    Some(r) if !throttle.is_zero() => Some(handlers::with_throttle(r, api, version, throttle)),
                    other => other,
                }
            }
        };
        drop(turn);
        let response_bytes = response.as_ref().map_or(0, Bytes::len);
        shard.metrics.request(api, request_bytes, response_bytes, started.elapsed());
        response
    };
    if api == ApiKey::Fetch {
        let gone = closed.wait();
        return glommio::spawn_local(futures_lite::future::or(run, async move {
            gone.await;
            None
        }))
        .detach();
    }
    glommio::spawn_local(run).detach()
}
