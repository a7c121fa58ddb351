//! Small async helpers shared by handlers.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

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
