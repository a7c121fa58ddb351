//! A shard's quota sensors: the byte rate of each client identity over Kafka's
//! sampled window (11 samples of 1 s, `quota.window.num` and
//! `quota.window.size.seconds`), and the throttle time Kafka computes from it.
//!
//! The rate is the bytes of the samples still in the window divided by the time they
//! span, counted as at least 10 windows: a client's first burst is spread over 10 s,
//! as Kafka spreads it, so a quota allows a burst of ten seconds' worth before it
//! throttles. Past the quota, the throttle is the time the excess takes at the quota's
//! rate: `(rate - quota) / quota * window`.
//!
//! Sensors are per identity (user, client id, as [`super::resolve`] names it) and per
//! kind (produce, fetch). Client ids are the client's to choose, so their number is
//! bounded: past [`SENSORS_MAX`], idle sensors are dropped, then the least recently
//! used.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

pub const WINDOW: Duration = Duration::from_secs(1);
pub const SAMPLES: u32 = 11;
/// Sensors a shard keeps at most.
pub const SENSORS_MAX: usize = 10_000;

/// Which traffic a sensor measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Produce,
    Fetch,
}

struct Sample {
    start: Instant,
    total: f64,
}

/// One identity's sampled rate.
struct Rate {
    samples: VecDeque<Sample>,
    last_used: Instant,
}

impl Rate {
    fn new(now: Instant) -> Rate {
        Rate { samples: VecDeque::with_capacity(SAMPLES as usize), last_used: now }
    }

    fn purge(&mut self, now: Instant) {
        while self.samples.front().is_some_and(|s| now.duration_since(s.start) >= WINDOW * SAMPLES) {
            self.samples.pop_front();
        }
    }

    fn record(&mut self, value: f64, now: Instant) {
        self.purge(now);
        self.last_used = now;
        match self.samples.back_mut() {
            Some(s) if now.duration_since(s.start) < WINDOW => s.total += value,
            _ => {
                if self.samples.len() == SAMPLES as usize {
                    self.samples.pop_front();
                }
                self.samples.push_back(Sample { start: now, total: value });
            }
        }
    }

    /// The span the rate is taken over: from the oldest sample's start, and at least
    /// `SAMPLES - 1` whole windows.
    fn window(&self, now: Instant) -> Duration {
        let elapsed = self.samples.front().map_or(Duration::ZERO, |s| now.duration_since(s.start));
        let full = (elapsed.as_millis() / WINDOW.as_millis()) as u32;
        if full < SAMPLES - 1 {
            elapsed + WINDOW * (SAMPLES - 1 - full)
        } else {
            elapsed
        }
    }

    /// Bytes per second.
    fn rate(&self, now: Instant) -> f64 {
        let total: f64 = self.samples.iter().map(|s| s.total).sum();
        total / self.window(now).as_secs_f64()
    }
}

/// A shard's sensors and what they throttled, for `/metrics`.
#[derive(Default)]
pub struct Sensors {
    rates: RefCell<HashMap<(Kind, String, String), Rate>>,
    /// Responses that carried a throttle, and their throttle times in total.
    pub throttled: Cell<u64>,
    pub throttle_ms_total: Cell<u64>,
}

impl Sensors {
    /// Records `bytes` of traffic by `identity` against a quota of `bound` bytes per
    /// second, and returns the throttle time (zero within the quota).
    pub fn record(&self, kind: Kind, identity: (String, String), bound: f64, bytes: usize, now: Instant) -> Duration {
        let mut rates = self.rates.borrow_mut();
        let key = (kind, identity.0, identity.1);
        if !rates.contains_key(&key) && rates.len() >= SENSORS_MAX {
            evict(&mut rates, now);
        }
        let rate = rates.entry(key).or_insert_with(|| Rate::new(now));
        rate.record(bytes as f64, now);
        let observed = rate.rate(now);
        if observed <= bound {
            return Duration::ZERO;
        }
        // A quota of 0 stops all traffic: throttle for the whole window.
        let window = rate.window(now);
        let ms = if bound <= 0.0 {
            (window * SAMPLES).as_millis() as f64
        } else {
            ((observed - bound) / bound * window.as_millis() as f64).round()
        };
        let throttle = Duration::from_millis(ms.min((WINDOW * SAMPLES).as_millis() as f64) as u64);
        self.throttled.set(self.throttled.get() + 1);
        self.throttle_ms_total.set(self.throttle_ms_total.get() + throttle.as_millis() as u64);
        throttle
    }

    /// Takes back bytes recorded for an answer that was not sent (a throttled fetch is
    /// answered empty, as Kafka answers it).
    pub fn unrecord(&self, kind: Kind, identity: (String, String), bytes: usize, now: Instant) {
        if let Some(rate) = self.rates.borrow_mut().get_mut(&(kind, identity.0, identity.1)) {
            rate.record(-(bytes as f64), now);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.rates.borrow().len()
    }
}

/// Makes room for one sensor: drops those idle for a whole window, else the least
/// recently used.
fn evict(rates: &mut HashMap<(Kind, String, String), Rate>, now: Instant) {
    rates.retain(|_, r| now.duration_since(r.last_used) < WINDOW * SAMPLES);
    if rates.len() >= SENSORS_MAX {
        if let Some(oldest) = rates.iter().min_by_key(|(_, r)| r.last_used).map(|(k, _)| k.clone()) {
            rates.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(client: &str) -> (String, String) {
        (String::new(), client.to_string())
    }

    #[test]
    fn a_burst_of_ten_windows_passes_and_more_is_throttled_by_the_excess() {
        let sensors = Sensors::default();
        let t0 = Instant::now();
        // 1,000 B/s: the first 10,000 bytes fit the ten-second minimum window.
        assert_eq!(sensors.record(Kind::Produce, id("a"), 1000.0, 10_000, t0), Duration::ZERO);
        // 5,000 more: rate 1,500 B/s over 10 s, throttle (1500 - 1000) / 1000 * 10 s = 5 s.
        assert_eq!(sensors.record(Kind::Produce, id("a"), 1000.0, 5_000, t0), Duration::from_secs(5));
        // Another identity and another kind are measured apart.
        assert_eq!(sensors.record(Kind::Fetch, id("a"), 1000.0, 100, t0), Duration::ZERO);
        assert_eq!(sensors.record(Kind::Produce, id("b"), 1000.0, 100, t0), Duration::ZERO);
        // Taking bytes back lowers the rate.
        sensors.unrecord(Kind::Produce, id("a"), 5_000, t0);
        assert_eq!(sensors.record(Kind::Produce, id("a"), 1000.0, 0, t0), Duration::ZERO);
        // Samples older than the window no longer count.
        let later = t0 + WINDOW * SAMPLES;
        assert_eq!(sensors.record(Kind::Produce, id("a"), 1000.0, 9_000, later), Duration::ZERO);
        assert_eq!(sensors.throttled.get(), 1);
        assert_eq!(sensors.throttle_ms_total.get(), 5_000);
    }

    #[test]
    fn throttles_are_capped_at_the_whole_window_and_a_zero_quota_stops_traffic() {
        let sensors = Sensors::default();
        let t0 = Instant::now();
        assert_eq!(sensors.record(Kind::Produce, id("a"), 1.0, 1 << 30, t0), WINDOW * SAMPLES);
        assert_eq!(sensors.record(Kind::Fetch, id("z"), 0.0, 0, t0), Duration::ZERO);
        assert_eq!(sensors.record(Kind::Fetch, id("z"), 0.0, 1, t0), WINDOW * SAMPLES);
    }

    #[test]
    fn sensors_are_bounded() {
        let sensors = Sensors::default();
        let t0 = Instant::now();
        for i in 0..SENSORS_MAX + 10 {
            sensors.record(Kind::Produce, id(&i.to_string()), 1e9, 1, t0 + Duration::from_micros(i as u64));
        }
        assert_eq!(sensors.len(), SENSORS_MAX);
    }
}
