//! The batch cache: each log keeps its newest batches in memory, so tail reads never
//! touch the disk, and one budget per shard ([`ShardCache`]) bounds them together.
//!
//! A batch enters the cache when it is appended and may leave once it is below the
//! high watermark, journaled and written to its segment file (before that, the cache
//! is the only place to read it from, and the journal pass reads it from there). Each log trims its own
//! cache to `cache_bytes_max` after a flush; when the shard's total passes its budget,
//! the flush loop levels the caches down: the largest are cut first, to a common
//! level chosen so the shard ends at 7/8 of its budget, and caches below that level
//! keep everything. Tail readers of a quiet partition keep their few batches; hot
//! partitions share the rest. Eviction only drops memory: an evicted batch is read
//! from its segment, so memory pressure never fails a request.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ops::Deref;
use std::rc::{Rc, Weak};

use bytes::Bytes;
use keel_protocol::batch::BatchHeader;

/// One log's cached batches, in offset order, charged to its shard's budget.
#[derive(Default)]
pub struct BatchCache {
    entries: VecDeque<(BatchHeader, Bytes)>,
    bytes: usize,
    pub(crate) shard: Option<Rc<ShardCache>>,
}

impl Deref for BatchCache {
    type Target = VecDeque<(BatchHeader, Bytes)>;

    fn deref(&self) -> &Self::Target {
        &self.entries
    }
}

impl BatchCache {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether `bytes` more fit in the shard's budget (always, for a log without one).
    pub(crate) fn has_room_for(&self, bytes: usize) -> bool {
        self.shard.as_ref().is_none_or(|s| s.used.get() + bytes <= s.limit)
    }

    pub(crate) fn push_back(&mut self, header: BatchHeader, batch: Bytes) {
        self.charge(batch.len() as isize);
        self.entries.push_back((header, batch));
    }

    pub(crate) fn pop_front(&mut self) {
        if let Some((_, b)) = self.entries.pop_front() {
            self.charge(-(b.len() as isize));
        }
    }

    pub(crate) fn pop_back(&mut self) {
        if let Some((_, b)) = self.entries.pop_back() {
            self.charge(-(b.len() as isize));
        }
    }

    pub(crate) fn clear(&mut self) {
        self.charge(-(self.bytes as isize));
        self.entries.clear();
    }

    /// Drops durable batches (ending below `durable`) from the front until at most
    /// `limit` bytes remain.
    pub(crate) fn evict_to(&mut self, limit: usize, durable: i64) {
        while self.bytes > limit {
            match self.entries.front() {
                Some((h, _)) if h.last_offset() < durable => self.pop_front(),
                _ => break,
            }
        }
    }

    fn charge(&mut self, delta: isize) {
        self.bytes = self.bytes.checked_add_signed(delta).expect("cache accounting");
        if let Some(shard) = &self.shard {
            shard.used.set(shard.used.get().checked_add_signed(delta).expect("shard cache accounting"));
        }
    }
}

impl Drop for BatchCache {
    fn drop(&mut self) {
        self.clear();
    }
}

/// What a shard's budget needs of a log holding a [`BatchCache`] (the partition log).
pub trait CachedLog {
    fn batch_cache(&self) -> &BatchCache;
    fn batch_cache_mut(&mut self) -> &mut BatchCache;
    /// Cached batches below this may be dropped.
    fn evictable_below(&self) -> i64;
}

/// The batch-cache budget of one shard, shared by its logs.
pub struct ShardCache {
    limit: usize,
    used: Cell<usize>,
    logs: RefCell<Vec<Weak<RefCell<dyn CachedLog>>>>,
}

impl ShardCache {
    pub fn new(limit: usize) -> Rc<ShardCache> {
        Rc::new(ShardCache { limit, used: Cell::new(0), logs: RefCell::new(Vec::new()) })
    }

    /// Bytes cached by every log of the shard.
    pub fn used(&self) -> usize {
        self.used.get()
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Puts `log`'s cache under this budget.
    pub fn adopt<L: CachedLog + 'static>(self: &Rc<Self>, log: &Rc<RefCell<L>>) {
        let mut l = log.borrow_mut();
        let cache = l.batch_cache_mut();
        assert!(cache.shard.is_none(), "a log belongs to one shard");
        self.used.set(self.used.get() + cache.bytes);
        cache.shard = Some(self.clone());
        let log: Weak<RefCell<L>> = Rc::downgrade(log);
        self.logs.borrow_mut().push(log);
    }

    /// When over budget, levels the logs' caches down until the shard uses at most
    /// 7/8 of it (as far as durable batches allow).
    pub fn evict(&self) {
        if self.used.get() <= self.limit {
            return;
        }
        let mut logs = self.logs.borrow_mut();
        logs.retain(|w| w.strong_count() > 0);
        let mut sizes: Vec<(usize, Rc<RefCell<dyn CachedLog>>)> = logs
            .iter()
            .filter_map(Weak::upgrade)
            .filter_map(|l| {
                let bytes = l.try_borrow().ok()?.batch_cache().bytes;
                Some((bytes, l))
            })
            .collect();
        drop(logs);
        sizes.sort_unstable_by_key(|(size, _)| std::cmp::Reverse(*size));
        let level = water_level(&sizes.iter().map(|(s, _)| *s).collect::<Vec<_>>(), self.limit / 8 * 7);
        for (size, log) in sizes {
            if size <= level {
                break;
            }
            if let Ok(mut l) = log.try_borrow_mut() {
                let bound = l.evictable_below();
                l.batch_cache_mut().evict_to(level, bound);
            }
        }
    }
}

/// The largest level L such that capping every size (sorted descending) at L keeps
/// their sum within `target`.
fn water_level(sizes: &[usize], target: usize) -> usize {
    let mut rest: usize = sizes.iter().sum();
    if rest <= target {
        return sizes.first().copied().unwrap_or(0);
    }
    for (k, &size) in sizes.iter().enumerate() {
        rest -= size;
        let capped = k + 1;
        let level = target.saturating_sub(rest) / capped;
        let next = sizes.get(k + 1).copied().unwrap_or(0);
        if level >= next {
            return level.min(size);
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::water_level;

    #[test]
    fn water_level_caps_the_largest_first() {
        assert_eq!(water_level(&[100, 10, 5], 200), 100, "under target: nothing capped");
        assert_eq!(water_level(&[100, 10, 5], 55), 40);
        assert_eq!(water_level(&[100, 60, 5], 45), 20);
        assert_eq!(water_level(&[30, 30, 30], 30), 10);
        assert_eq!(water_level(&[], 10), 0);
        for (sizes, target) in [(vec![500, 400, 3, 2, 1], 300usize), (vec![7, 7, 7, 1], 9)] {
            let l = water_level(&sizes, target);
            let sum: usize = sizes.iter().map(|s| (*s).min(l)).sum();
            assert!(sum <= target && sizes.iter().map(|s| (*s).min(l + 1)).sum::<usize>() > target);
        }
    }
}
