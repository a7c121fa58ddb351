//! A shard's request byte budget (`request_bytes_in_flight_max_per_shard`): the bytes
//! of requests read and not yet answered, all connections of the shard together. A
//! connection takes a frame's size before reading its body and gives it back once the
//! response is written; while the budget is spent, readers stop reading their sockets.
//!
//! An eighth of the budget is kept for small requests (up to
//! `SMALL_REQUEST_BYTES_MAX`): a client sending maximum-size requests can spend the
//! rest, but the produce, fetch and heartbeat requests of everyone else, a few
//! kilobytes each, still find room. Without it a small request could wait behind every
//! large one queued before it on the shard. The largest frame a shard reads is the
//! remaining seven eighths (or `request_bytes_max`, if smaller).

use std::rc::Rc;

use glommio::sync::{Semaphore, StaticPermit};

/// Requests up to this size may use the small-request reserve.
pub const SMALL_REQUEST_BYTES_MAX: usize = 64 << 10;

pub struct RequestBudget {
    main: Rc<Semaphore>,
    reserve: Rc<Semaphore>,
    main_max: usize,
    reserve_max: usize,
}

impl RequestBudget {
    pub fn new(bytes_max: usize) -> RequestBudget {
        let reserve_max = bytes_max / 8;
        let main_max = (bytes_max - reserve_max).max(1);
        RequestBudget {
            main: Rc::new(Semaphore::new(main_max as u64)),
            reserve: Rc::new(Semaphore::new(reserve_max as u64)),
            main_max,
            reserve_max,
        }
    }

    /// The whole budget, reserve included.
    pub fn bytes_max(&self) -> usize {
        self.main_max + self.reserve_max
    }

    /// The largest frame the budget can ever hold.
    pub fn frame_bytes_max(&self) -> usize {
        self.main_max
    }

    pub fn in_use(&self) -> usize {
        self.bytes_max() - self.main.available() as usize - self.reserve.available() as usize
    }

    /// Waits until `len` bytes fit; they are given back when the permit is dropped.
    pub async fn acquire(&self, len: usize) -> StaticPermit {
        assert!(len <= self.main_max, "a frame of {len} bytes can never fit the request budget");
        let units = len as u64;
        if let Ok(permit) = self.main.try_acquire_static_permit(units) {
            return permit;
        }
        let permit = if len <= SMALL_REQUEST_BYTES_MAX && len <= self.reserve_max {
            if let Ok(permit) = self.reserve.try_acquire_static_permit(units) {
                return permit;
            }
            futures_lite::future::or(self.main.acquire_static_permit(units), self.reserve.acquire_static_permit(units))
                .await
        } else {
            self.main.acquire_static_permit(units).await
        };
        permit.expect("the request budget never closes")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn small_requests_use_the_reserve_when_large_ones_spent_the_rest() {
        glommio::LocalExecutor::default().run(async {
            let budget = Rc::new(RequestBudget::new(8 << 20));
            assert_eq!((budget.frame_bytes_max(), budget.bytes_max()), (7 << 20, 8 << 20));
            let large = budget.acquire(7 << 20).await;
            // Without the reserve this would wait for the large request.
            let small = budget.acquire(4096).await;
            assert_eq!(budget.in_use(), (7 << 20) + 4096);
            let b = budget.clone();
            let second = glommio::spawn_local(async move {
                let _permit = b.acquire(7 << 20).await;
            })
            .detach();
            glommio::timer::sleep(Duration::from_millis(10)).await;
            assert_eq!(budget.in_use(), (7 << 20) + 4096, "a second large request waits");
            drop(large);
            second.await;
            drop(small);
            assert_eq!(budget.in_use(), 0);
        });
    }
}
