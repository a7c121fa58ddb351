//! Producers: open-loop at a fixed rate, or flat out at max rate.
//!
//! Each producer is its own librdkafka client (its own connections and I/O
//! threads), driven by one sending thread. At a fixed rate, producer `p` of `n`
//! sends its record `i` at `t0 + (p / n + i) * n / rate`: the producers interleave
//! evenly and together make `rate`. The thread sleeps only while it is ahead of
//! schedule; when it is behind (the broker or the client queue pushed back) it
//! sends at once, and the record keeps its *intended* time. Publish latency is
//! acknowledgement time minus intended time, so queueing behind a stall is
//! charged to the broker that caused it (no coordinated omission).
//!
//! At max rate the intended time is the moment of `send()`, as in Kafka's
//! ProducerPerformance with `--throughput -1`.

use crate::options::{KeyMode, LoadSpec};
use crate::stats::Recorder;
use crate::{unix_nanos, PAYLOAD_HEADER_BYTES};
use rand::{Rng, RngCore, SeedableRng};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest a producer waits for outstanding records at the end of a run.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause before retrying a send the client refused because its queue was full.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_micros(200);

/// Routes librdkafka's delivery reports into the shared recorder.
pub struct DeliveryContext {
    recorder: Arc<Recorder>,
}

impl ClientContext for DeliveryContext {
    fn error(&self, error: KafkaError, reason: &str) {
        // Transport errors are retried by the client; keep the first for the report.
        let mut first = crate::stats::lock(&self.recorder.first_error);
        if first.is_none() {
            *first = Some(format!("client error: {error}: {reason}"));
        }
    }
}

impl ProducerContext for DeliveryContext {
    /// Intended send time, UNIX nanoseconds.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, intended_ns: usize) {
        let now_ns = unix_nanos();
        match result {
            Ok(_) => self.recorder.on_ack(intended_ns as u64, now_ns),
            Err((error, _)) => self.recorder.on_error(format!("delivery failed: {error}")),
        }
    }
}

/// When sending starts and stops, shared by every producer of a run.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// Start of sending (warm-up included), monotonic and wall-clock.
    pub start: Instant,
    pub start_unix_ns: u64,
    /// No record is sent at or after this instant.
    pub send_end: Instant,
}

impl Schedule {
    fn unix_ns_at(&self, at: Instant) -> u64 {
        self.start_unix_ns + at.saturating_duration_since(self.start).as_nanos() as u64
    }
}

/// Records a producer sends when the run is limited by count, not time.
fn producer_quota(records: Option<u64>, producers: usize, index: usize) -> Option<u64> {
    records.map(|total| {
        let producers = producers.max(1) as u64;
        let share = total / producers;
        share + u64::from((index as u64) < total % producers)
    })
}

/// Chooses record keys the way `--keys` asks.
struct KeyChooser {
    mode: KeyMode,
    space: u64,
    next: u64,
    rng: rand::rngs::StdRng,
    buffer: String,
}

impl KeyChooser {
    fn new(mode: KeyMode, space: u64, producer_index: usize) -> Self {
        KeyChooser {
            mode,
            space: space.max(1),
            // Producers start at different keys so they do not move in lockstep.
            next: (producer_index as u64).wrapping_mul(7919),
            rng: rand::rngs::StdRng::seed_from_u64(0x6b65_656c ^ producer_index as u64),
            buffer: String::with_capacity(16),
        }
    }

    fn next_key(&mut self) -> Option<&str> {
        let id = match self.mode {
            KeyMode::None => return None,
            KeyMode::RoundRobin => {
                self.next = self.next.wrapping_add(1);
                self.next % self.space
            }
            KeyMode::Random => self.rng.gen_range(0..self.space),
        };
        use std::fmt::Write;
        self.buffer.clear();
        let _ = write!(self.buffer, "key-{id:08}");
        Some(&self.buffer)
    }
}

/// Build one producer client.
pub fn create_producer(spec: &LoadSpec, recorder: Arc<Recorder>) -> Result<ThreadedProducer<DeliveryContext>, String> {
    spec.client
        .producer_config()
        .create_with_context(DeliveryContext { recorder })
        .map_err(|error| format!("cannot create producer: {error}"))
}

/// Run producer `index` until the schedule ends, the quota is sent, or `stop`.
pub fn run_producer(
    index: usize,
    spec: &LoadSpec,
    schedule: Schedule,
    producer: ThreadedProducer<DeliveryContext>,
    recorder: &Recorder,
    stop: &AtomicBool,
) -> Result<(), String> {
    let producers = spec.producers.max(1);
    let quota = producer_quota(spec.records, producers, index);
    // Nanoseconds between two records of this producer, and its offset in the round.
    let interval_ns = spec.is_fixed_rate().then(|| 1e9 * producers as f64 / spec.rate);
    let phase_ns = interval_ns.map_or(0.0, |interval| interval * index as f64 / producers as f64);

    let mut payload = vec![0u8; spec.payload_bytes()];
    rand::rngs::StdRng::seed_from_u64(index as u64).fill_bytes(&mut payload);
    let mut keys = KeyChooser::new(spec.keys, spec.key_space, index);
    let topics = &spec.topics;
    let mut sequence: u64 = 0;

    loop {
        if stop.load(Ordering::Relaxed) || quota.is_some_and(|quota| sequence >= quota) {
            break;
        }
        let intended = match interval_ns {
            Some(interval) => {
                let offset = phase_ns + interval * sequence as f64;
                schedule.start + Duration::from_nanos(offset as u64)
            }
            None => Instant::now(),
        };
        // A producer that fell behind does not send its backlog after the end:
        // what the broker could not take in time is missing from the rate.
        if intended >= schedule.send_end || Instant::now() >= schedule.send_end {
            break;
        }
        let now = Instant::now();
        if intended > now {
            std::thread::sleep(intended - now);
        }
        let intended_ns = schedule.unix_ns_at(intended);
        payload[..PAYLOAD_HEADER_BYTES].copy_from_slice(&intended_ns.to_le_bytes());
        let topic = &topics[(sequence as usize + index) % topics.len()];
        let key = keys.next_key().map(str::to_owned);

        let mut record = BaseRecord::with_opaque_to(topic, intended_ns as usize).payload(&payload[..]);
        if let Some(key) = key.as_deref() {
            record = record.key(key);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    if stop.load(Ordering::Relaxed) {
                        return flush(producer);
                    }
                    record = returned;
                    std::thread::sleep(QUEUE_FULL_BACKOFF);
                }
                Err((error, _)) => {
                    recorder.on_error(format!("send failed: {error}"));
                    break;
                }
            }
        }
        recorder.on_send(intended_ns, unix_nanos().saturating_sub(intended_ns));
        sequence += 1;
    }
    flush(producer)
}

/// Longest the priming of new partitions may take.
const PRIME_TIMEOUT: Duration = Duration::from_secs(120);

/// Write one tiny record (no timestamp header, so consumers do not time it) to
/// every partition and wait until all are acknowledged: a new partition that a
/// broker lists in Metadata may still refuse writes for a while, and that start-up
/// cost should not land in the measured window. Returns the seconds it took.
pub fn prime_partitions(spec: &LoadSpec, partitions: &[(String, i32)]) -> Result<f64, String> {
    let started = Instant::now();
    let recorder = Arc::new(Recorder::new(u64::MAX, u64::MAX));
    let producer = create_producer(spec, recorder.clone())?;
    for (topic, partition) in partitions {
        let record = BaseRecord::with_opaque_to(topic, 0usize).partition(*partition).payload(&b"p"[..]);
        producer.send::<(), [u8]>(record).map_err(|(error, _)| format!("priming {topic}/{partition}: {error}"))?;
    }
    producer.flush(PRIME_TIMEOUT).map_err(|error| format!("priming did not finish in {PRIME_TIMEOUT:?}: {error}"))?;
    if let Some(error) = crate::stats::lock(&recorder.first_error).clone() {
        return Err(format!("priming failed: {error}"));
    }
    Ok(started.elapsed().as_secs_f64())
}

fn flush(producer: ThreadedProducer<DeliveryContext>) -> Result<(), String> {
    producer.flush(FLUSH_TIMEOUT).map_err(|error| format!("flush did not finish in {FLUSH_TIMEOUT:?}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_add_up_to_the_total() {
        let total: u64 = (0..7).map(|i| producer_quota(Some(100), 7, i).unwrap()).sum();
        assert_eq!(total, 100);
        assert_eq!(producer_quota(None, 3, 0), None);
    }

    #[test]
    fn round_robin_keys_cycle_through_the_key_space() {
        let mut keys = KeyChooser::new(KeyMode::RoundRobin, 3, 0);
        let seen: Vec<String> = (0..6).map(|_| keys.next_key().unwrap().to_owned()).collect();
        assert_eq!(seen[0], seen[3]);
        assert_ne!(seen[0], seen[1]);
        assert!(KeyChooser::new(KeyMode::None, 3, 0).next_key().is_none());
    }

    #[test]
    fn random_keys_stay_in_the_key_space() {
        let mut keys = KeyChooser::new(KeyMode::Random, 5, 1);
        for _ in 0..100 {
            let key = keys.next_key().unwrap().to_owned();
            let id: u64 = key.trim_start_matches("key-").parse().unwrap();
            assert!(id < 5);
        }
    }
}
