//! Small helpers shared across the broker.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::protocol::StrBytes;
use keel_storage::{disk, log::PartitionLog};

use crate::errors;

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

/// Waits until `offset` is below `log`'s high watermark. Fails with `refused()`'s code
/// as soon as it gives one, with KAFKA_STORAGE_ERROR once the log cannot be written,
/// and with REQUEST_TIMED_OUT after `timeout`.
pub async fn wait_below_high_watermark(
    log: &Rc<RefCell<PartitionLog>>,
    offset: i64,
    timeout: Duration,
    refused: impl Fn() -> Option<i16>,
) -> Result<(), i16> {
    let deadline = disk::now() + timeout;
    loop {
        let wait = {
            let l = log.borrow();
            if l.high_watermark() > offset {
                return Ok(());
            }
            if let Some(code) = refused() {
                return Err(code);
            }
            if l.flush_error.is_some() {
                return Err(errors::KAFKA_STORAGE_ERROR);
            }
            l.changed.wait()
        };
        let left = deadline.saturating_sub(disk::now());
        if left.is_zero() {
            return Err(errors::REQUEST_TIMED_OUT);
        }
        futures_lite::future::or(wait, disk::sleep(left)).await;
    }
}
