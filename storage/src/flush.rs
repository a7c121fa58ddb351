//! The shard's flush loop: group commit for every partition the shard owns.
//!
//! Appends mark their log dirty and wake the loop. One pass takes every dirty log,
//! writes and fdatasyncs them concurrently, and advances their durable offsets. While a
//! pass runs, new appends accumulate and go in the next pass, so the fsync rate follows
//! the device's latency, not the number of partitions or requests.

use std::cell::RefCell;
use std::rc::Rc;

use futures_lite::future;

use crate::cache::ShardCache;
use crate::log::{self, PartitionLog};
use crate::signal::Signal;

#[derive(Default)]
pub struct FlushQueue {
    dirty: RefCell<Vec<Rc<RefCell<PartitionLog>>>>,
    wake: Rc<Signal>,
    /// The shard's batch-cache budget, enforced after every pass.
    cache: Option<Rc<ShardCache>>,
    /// Completed passes and their fdatasync count, for metrics.
    pub passes: std::cell::Cell<u64>,
    pub syncs: std::cell::Cell<u64>,
    /// How long passes took: what every acks=-1 produce waits for.
    pub pass_times: RefCell<PassTimes>,
}

/// Upper bounds of the pass-time buckets, in seconds.
pub const PASS_TIME_BOUNDS: [f64; 10] = [0.000_25, 0.000_5, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.25];

/// A histogram of flush pass durations (Prometheus style: cumulative at render).
#[derive(Debug, Clone, Default)]
pub struct PassTimes {
    /// Passes per bucket of [`PASS_TIME_BOUNDS`], and past the last bound.
    pub counts: [u64; PASS_TIME_BOUNDS.len() + 1],
    pub sum_seconds: f64,
}

impl PassTimes {
    fn record(&mut self, seconds: f64) {
        let i = PASS_TIME_BOUNDS.iter().position(|b| seconds <= *b).unwrap_or(PASS_TIME_BOUNDS.len());
        self.counts[i] += 1;
        self.sum_seconds += seconds;
    }
}

impl FlushQueue {
    pub fn new() -> Rc<FlushQueue> {
        Rc::new(FlushQueue::default())
    }

    /// A flush loop that also keeps the shard's batch caches within `cache`.
    pub fn with_cache(cache: Rc<ShardCache>) -> Rc<FlushQueue> {
        Rc::new(FlushQueue { cache: Some(cache), ..FlushQueue::default() })
    }

    /// Schedules `log` for the next pass.
    pub fn mark_dirty(&self, log: &Rc<RefCell<PartitionLog>>) {
        let mut dirty = self.dirty.borrow_mut();
        if !dirty.iter().any(|l| Rc::ptr_eq(l, log)) {
            dirty.push(log.clone());
        }
        drop(dirty);
        self.wake.notify();
    }

    /// Runs passes forever; spawn it once per shard.
    pub async fn run(self: Rc<Self>) {
        loop {
            let wait = self.wake.wait();
            let batch = self.dirty.take();
            if batch.is_empty() {
                wait.await;
                continue;
            }
            let count = batch.len() as u64;
            let mut passes = Vec::with_capacity(batch.len());
            for l in batch {
                passes.push(async move {
                    if let Err(e) = log::flush(&l).await {
                        tracing::error!(error = %e, "flush failed; will retry");
                        glommio::timer::sleep(std::time::Duration::from_millis(100)).await;
                        Err(l)
                    } else {
                        Ok(())
                    }
                });
            }
            let started = std::time::Instant::now();
            let results = join_all(passes).await;
            self.pass_times.borrow_mut().record(started.elapsed().as_secs_f64());
            for r in results {
                if let Err(l) = r {
                    self.mark_dirty(&l);
                }
            }
            if let Some(cache) = &self.cache {
                cache.evict();
            }
            self.passes.set(self.passes.get() + 1);
            self.syncs.set(self.syncs.get() + count);
        }
    }
}

/// Awaits all futures concurrently on the current task.
pub async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut results: Vec<Option<F::Output>> = (0..pinned.len()).map(|_| None).collect();
    future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, result) in pinned.iter_mut().zip(results.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *result = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results.into_iter().map(|r| r.expect("every future completed")).collect()
}
