//! Quota sensors: the rate of each identity over Kafka's sampled window (11 samples
//! of 1 s, `quota.window.num` and `quota.window.size.seconds`), and the throttle time
//! Kafka computes from it; and the token buckets of controller mutation quotas.
//!
//! The rate is the total of the samples still in the window divided by the time they
//! span, counted as at least 10 windows: a client's first burst is spread over 10 s,
//! as Kafka spreads it, so a quota allows a burst of ten seconds' worth before it
//! throttles. Past the quota, the throttle is the time the excess takes at the quota's
//! rate: `(rate - quota) / quota * window`, at most the whole window for byte rates
//! and one sample for request time and connection rates, as Kafka caps them.
//!
//! A controller mutation quota (KIP-599) is a token bucket instead: it refills at the
//! quota's rate up to 11 seconds' worth, each partition created or deleted takes a
//! token, and an empty bucket throttles for the time it takes to refill to zero.
//!
//! Every identity's sensor lives on one shard (`throttle::owner`), which every shard
//! asks, so a quota is the broker's whatever shard a connection lands on.
//! Sensors are per identity (user, client id, as [`super::resolve`] names it, or an
//! IP address) and per kind. Client ids are the client's to choose, so their number
//! is bounded: past [`SENSORS_MAX`], idle sensors are dropped, then the least
//! recently used.

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
    /// Bytes produced (`producer_byte_rate`).
    Produce,
    /// Bytes fetched (`consumer_byte_rate`).
    Fetch,
    /// Reactor time spent on a client's requests, in percent of one core
    /// (`request_percentage`).
    Request,
    /// New connections to the broker (`max.connection.creation.rate`).
    BrokerConnections,
    /// New connections from one IP address (`connection_creation_rate`).
    IpConnections,
    /// Partitions created and deleted (`controller_mutation_rate`), kept in a token
    /// bucket ([`Sensors::mutate`]) rather than a rate.
    ControllerMutations,
}

impl Kind {
    /// The longest throttle Kafka gives for this kind of quota.
    fn throttle_max(self) -> Duration {
        match self {
            Kind::Produce | Kind::Fetch | Kind::ControllerMutations => WINDOW * SAMPLES,
            Kind::Request | Kind::BrokerConnections | Kind::IpConnections => WINDOW,
        }
    }
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

/// A controller mutation quota's token bucket (Kafka's TokenBucket): it holds up to
/// `SAMPLES` windows of the quota and goes below zero by what a request took past it.
struct Bucket {
    tokens: f64,
    updated: Instant,
    last_used: Instant,
}

impl Bucket {
    fn refill(&mut self, bound: f64, now: Instant) {
        let burst = bound * (WINDOW * SAMPLES).as_secs_f64();
        let earned = bound * now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + earned).min(burst);
        self.updated = now;
        self.last_used = now;
    }

    /// The time the bucket takes to refill to zero.
    fn throttle(&self, bound: f64) -> Duration {
        if self.tokens >= 0.0 {
            return Duration::ZERO;
        }
        if bound <= 0.0 {
            return WINDOW * SAMPLES;
        }
        Duration::from_millis((-self.tokens / bound * 1000.0).round() as u64)
    }
}

type Identity = (String, String);

/// A shard's sensors and what they throttled, for `/metrics`.
#[derive(Default)]
pub struct Sensors {
    rates: RefCell<HashMap<(Kind, String, String), Rate>>,
    buckets: RefCell<HashMap<Identity, Bucket>>,
    /// Client answers that carried a throttle, and their throttle times in total.
    pub throttled: Cell<u64>,
    pub throttle_ms_total: Cell<u64>,
    /// New connections delayed for the broker's connection creation rate, and new
    /// connections closed for their IP address's.
    pub connections_delayed: Cell<u64>,
    pub connections_refused: Cell<u64>,
}

impl Sensors {
    /// Records `value` (bytes, or one connection) by `identity` against a quota of
    /// `bound` per second, and returns the throttle time (zero within the quota).
    /// With `take_back_if_throttled`, a throttled value is not kept: the answer or
    /// connection that carried it is refused.
    pub fn record(
        &self,
        kind: Kind,
        identity: Identity,
        bound: f64,
        value: f64,
        take_back_if_throttled: bool,
        now: Instant,
    ) -> Duration {
        let mut rates = self.rates.borrow_mut();
        let key = (kind, identity.0, identity.1);
        if !rates.contains_key(&key) && rates.len() >= SENSORS_MAX {
            evict(&mut rates, |r| r.last_used, now);
        }
        let rate = rates.entry(key).or_insert_with(|| Rate::new(now));
        rate.record(value, now);
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
        let throttle = Duration::from_millis(ms.min(kind.throttle_max().as_millis() as f64) as u64);
        if throttle.is_zero() {
            // Over by less than half a millisecond's worth: served as within the quota,
            // so neither taken back nor counted as throttled or refused.
            return Duration::ZERO;
        }
        if take_back_if_throttled {
            rate.record(-value, now);
        }
        match kind {
            Kind::Produce | Kind::Fetch | Kind::Request | Kind::ControllerMutations => {
                self.throttled.set(self.throttled.get() + 1);
                self.throttle_ms_total.set(self.throttle_ms_total.get() + throttle.as_millis() as u64);
            }
            Kind::BrokerConnections => self.connections_delayed.set(self.connections_delayed.get() + 1),
            Kind::IpConnections => self.connections_refused.set(self.connections_refused.get() + 1),
        }
        throttle
    }

    /// Takes back a value recorded for an answer or connection that was refused.
    pub fn unrecord(&self, kind: Kind, identity: Identity, value: f64, now: Instant) {
        if let Some(rate) = self.rates.borrow_mut().get_mut(&(kind, identity.0, identity.1)) {
            rate.record(-value, now);
        }
    }

    /// Takes the partitions of one topic a controller mutation request creates or
    /// deletes from `identity`'s bucket, refilled at `bound` per second. Strict
    /// (Kafka's quota from CreateTopics v6, CreatePartitions v3, DeleteTopics v5): the
    /// topic is refused (`false`) while the bucket is below zero, however far the
    /// topics before it took it. Permissive (older versions): always taken.
    pub fn take_mutations(
        &self,
        identity: &Identity,
        bound: f64,
        partitions: usize,
        strict: bool,
        now: Instant,
    ) -> bool {
        let mut buckets = self.buckets.borrow_mut();
        if !buckets.contains_key(identity) && buckets.len() >= SENSORS_MAX {
            evict(&mut buckets, |b| b.last_used, now);
        }
        let burst = bound * (WINDOW * SAMPLES).as_secs_f64();
        let bucket = buckets.entry(identity.clone()).or_insert(Bucket { tokens: burst, updated: now, last_used: now });
        bucket.refill(bound, now);
        if strict && bucket.tokens < 0.0 {
            return false;
        }
        bucket.tokens -= partitions as f64;
        true
    }

    /// The throttle of a controller mutation request once its topics are taken: the
    /// time `identity`'s bucket takes to refill to zero.
    pub fn mutation_throttle(&self, identity: &Identity, bound: f64, now: Instant) -> Duration {
        let mut buckets = self.buckets.borrow_mut();
        let Some(bucket) = buckets.get_mut(identity) else { return Duration::ZERO };
        bucket.refill(bound, now);
        let throttle = bucket.throttle(bound);
        if !throttle.is_zero() {
            self.throttled.set(self.throttled.get() + 1);
            self.throttle_ms_total.set(self.throttle_ms_total.get() + throttle.as_millis() as u64);
        }
        throttle
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.rates.borrow().len()
    }
}

/// Makes room for one sensor: drops those idle for a whole window, else the least
/// recently used.
fn evict<K: Clone + Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>, last_used: impl Fn(&V) -> Instant, now: Instant) {
    map.retain(|_, v| now.duration_since(last_used(v)) < WINDOW * SAMPLES);
    if map.len() >= SENSORS_MAX {
        if let Some(oldest) = map.iter().min_by_key(|(_, v)| last_used(v)).map(|(k, _)| k.clone()) {
            map.remove(&oldest);
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
        let record = |kind, who, bytes: usize, at| sensors.record(kind, id(who), 1000.0, bytes as f64, false, at);
        assert_eq!(record(Kind::Produce, "a", 10_000, t0), Duration::ZERO);
        // 5,000 more: rate 1,500 B/s over 10 s, throttle (1500 - 1000) / 1000 * 10 s = 5 s.
        assert_eq!(record(Kind::Produce, "a", 5_000, t0), Duration::from_secs(5));
        // Another identity and another kind are measured apart.
        assert_eq!(record(Kind::Fetch, "a", 100, t0), Duration::ZERO);
        assert_eq!(record(Kind::Produce, "b", 100, t0), Duration::ZERO);
        // Taking bytes back lowers the rate.
        sensors.unrecord(Kind::Produce, id("a"), 5_000.0, t0);
        assert_eq!(record(Kind::Produce, "a", 0, t0), Duration::ZERO);
        // Samples older than the window no longer count.
        let later = t0 + WINDOW * SAMPLES;
        assert_eq!(record(Kind::Produce, "a", 9_000, later), Duration::ZERO);
        assert_eq!(sensors.throttled.get(), 1);
        assert_eq!(sensors.throttle_ms_total.get(), 5_000);
    }

    #[test]
    fn throttles_are_capped_at_the_whole_window_and_a_zero_quota_stops_traffic() {
        let sensors = Sensors::default();
        let t0 = Instant::now();
        assert_eq!(sensors.record(Kind::Produce, id("a"), 1.0, (1u64 << 30) as f64, false, t0), WINDOW * SAMPLES);
        assert_eq!(sensors.record(Kind::Fetch, id("z"), 0.0, 0.0, false, t0), Duration::ZERO);
        assert_eq!(sensors.record(Kind::Fetch, id("z"), 0.0, 1.0, false, t0), WINDOW * SAMPLES);
    }

    #[test]
    fn connection_rates_allow_ten_windows_then_refuse_and_take_the_refused_back() {
        let sensors = Sensors::default();
        let t0 = Instant::now();
        let ip = || ("10.0.0.1".to_string(), String::new());
        // 2 a second: 20 connections fit the ten-second minimum window.
        for i in 0..20 {
            assert_eq!(sensors.record(Kind::IpConnections, ip(), 2.0, 1.0, true, t0), Duration::ZERO, "{i}");
        }
        // The 21st makes 2.1 a second: (2.1 - 2) / 2 * 10 s = 500 ms, and is taken back,
        // so the next one is refused the same.
        for _ in 0..3 {
            assert_eq!(sensors.record(Kind::IpConnections, ip(), 2.0, 1.0, true, t0), Duration::from_millis(500));
        }
        assert_eq!(sensors.connections_refused.get(), 3);
        // Connection throttles are capped at one window.
        assert_eq!(sensors.record(Kind::BrokerConnections, id(""), 0.1, 100.0, false, t0), WINDOW);
        assert_eq!(sensors.connections_delayed.get(), 1);
        assert_eq!(sensors.throttled.get(), 0);
    }

    #[test]
    fn a_rate_over_by_less_than_a_millisecond_of_throttle_is_served_and_kept() {
        let sensors = Sensors::default();
        let t0 = Instant::now();
        let ip = || ("10.0.0.1".to_string(), String::new());
        for _ in 0..20 {
            sensors.record(Kind::IpConnections, ip(), 2.0, 1.0, true, t0);
        }
        // 21 over 10.4997 s is 2.00006 a second: a throttle of 0.3 ms, which rounds to
        // none. The connection is served, so it is neither refused nor taken back...
        let later = t0 + Duration::from_micros(499_700);
        assert_eq!(sensors.record(Kind::IpConnections, ip(), 2.0, 1.0, true, later), Duration::ZERO);
        assert_eq!(sensors.connections_refused.get(), 0);
        // ... and the next one at the same instant counts it: 22 over 10.4997 s.
        assert_eq!(sensors.record(Kind::IpConnections, ip(), 2.0, 1.0, true, later), Duration::from_millis(500));
        assert_eq!(sensors.connections_refused.get(), 1);
    }

    #[test]
    fn mutation_buckets_hold_eleven_seconds_and_refuse_only_once_empty_when_strict() {
        let sensors = Sensors::default();
        let t0 = Instant::now();
        let who = id("admin");
        let take = |n, strict, at| sensors.take_mutations(&who, 1.0, n, strict, at);
        // 1 a second: the bucket holds 11. 20 partitions are taken whole (it was not
        // empty), leaving -9; a strict request is then refused, throttled 9 s.
        assert!(take(20, true, t0));
        assert!(!take(1, true, t0));
        assert_eq!(sensors.mutation_throttle(&who, 1.0, t0), Duration::from_secs(9));
        // Four seconds later it is at -5: a permissive request is taken, leaving -7.
        let t4 = t0 + Duration::from_secs(4);
        assert!(take(2, false, t4));
        assert_eq!(sensors.mutation_throttle(&who, 1.0, t4), Duration::from_secs(7));
        // It refills, never past 11: 12 partitions leave it at -1 and refuse the next.
        let later = t0 + Duration::from_secs(100);
        assert!(take(12, true, later));
        assert!(!take(1, true, later));
        assert_eq!(sensors.mutation_throttle(&who, 1.0, later), Duration::from_secs(1));
        assert_eq!(sensors.throttled.get(), 3);
    }

    #[test]
    fn sensors_are_bounded() {
        let sensors = Sensors::default();
        let t0 = Instant::now();
        for i in 0..SENSORS_MAX + 10 {
            sensors.record(Kind::Produce, id(&i.to_string()), 1e9, 1.0, false, t0 + Duration::from_micros(i as u64));
        }
        assert_eq!(sensors.len(), SENSORS_MAX);
    }
}
