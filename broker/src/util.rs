//! Small helpers shared across the broker.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use kafka_protocol::protocol::StrBytes;

/// A protocol string of `s`.
pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Resolves when the first of `futures` does; the others are dropped.
pub async fn first_of(mut futures: Vec<Pin<Box<dyn Future<Output = ()>>>>) {
    if futures.is_empty() {
        return;
    }
    futures_lite::future::poll_fn(|cx| {
        for f in futures.iter_mut() {
            if f.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    })
    .await
}
