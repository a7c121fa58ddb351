//! One load run: topics, consumers, producers, progress, results.
//!
//! Timeline of a run (all clients share it):
//!
//! ```text
//! t0 ── warm-up ──┬────────── measured window ──────────┬── flush / drain ──
//!                 probe.begin()                          probe.end()
//! ```
//!
//! Consumers are assigned before `t0` (or start `consumer_delay` after it, to
//! build a backlog). A progress line goes to stderr every second. Records count
//! toward latency and rate only when their intended send time is in the window.

use crate::consumer::{self, StartAt};
use crate::options::LoadSpec;
use crate::producer::{self, Schedule};
use crate::resources::{ResourceProbe, Resources};
use crate::stats::{self, lock, Percentiles, Recorder};
use crate::unix_nanos;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Lead time between creating the clients and the first intended send.
const START_LEAD: Duration = Duration::from_millis(300);
const TICK: Duration = Duration::from_millis(100);

/// One second of a run, for plots and for reading a run after the fact.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TimelinePoint {
    pub second: f64,
    pub acked_per_sec: f64,
    pub consumed_per_sec: f64,
    pub publish_p99_ms: Option<f64>,
    pub end_to_end_p99_ms: Option<f64>,
}

/// Everything measured in one run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LoadResult {
    pub label: String,
    pub spec: LoadSpec,
    pub measured_secs: f64,
    pub target_rate: f64,
    pub sent: u64,
    pub acked: u64,
    pub acked_in_window: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Records acknowledged per second while the window was open (and MB/s of
    /// values, 10^6 bytes).
    pub publish_rate: f64,
    pub publish_mb_per_sec: f64,
    pub consumed: u64,
    pub consume_rate: f64,
    pub consume_mb_per_sec: f64,
    pub publish_latency: Percentiles,
    /// How late records were handed to the client versus their intended time.
    pub publish_delay: Percentiles,
    pub end_to_end_latency: Option<Percentiles>,
    /// Backlog runs: seconds from consumer start until the backlog was gone.
    pub caught_up_secs: Option<f64>,
    /// Seconds until every new partition acknowledged a first record (not measured).
    pub prime_secs: Option<f64>,
    pub resources: Option<Resources>,
    /// CPU the load generator itself used over the window (it shares the machine).
    pub generator_cpu_cores: Option<f64>,
    pub timeline: Vec<TimelinePoint>,
}

impl LoadResult {
    /// A fixed-rate run that delivered at least 99% of its target.
    pub fn met_target(&self) -> bool {
        self.target_rate <= 0.0 || self.publish_rate >= 0.99 * self.target_rate
    }
}

/// CPU used by this process (the load generator) since `start`.
pub(crate) struct CpuMeter {
    at: Instant,
    ticks: Option<u64>,
}

impl CpuMeter {
    pub(crate) fn start() -> Self {
        CpuMeter { at: Instant::now(), ticks: crate::resources::cpu_ticks(std::process::id()) }
    }

    pub(crate) fn cores(&self) -> Option<f64> {
        let now = crate::resources::cpu_ticks(std::process::id())?;
        let seconds = self.at.elapsed().as_secs_f64().max(1e-9);
        Some(now.saturating_sub(self.ticks?) as f64 / crate::resources::clock_ticks_per_sec() / seconds)
    }
}

/// Counters as of the previous progress line.
#[derive(Default)]
struct Previous {
    at: Option<Instant>,
    sent: u64,
    acked: u64,
    consumed: u64,
}

/// Print one progress line and return its timeline point.
fn progress(
    label: &str,
    t0: Instant,
    warmup: Duration,
    consumers: bool,
    recorder: &Recorder,
    previous: &mut Previous,
) -> TimelinePoint {
    let now = Instant::now();
    let elapsed = now.saturating_duration_since(previous.at.unwrap_or(t0)).as_secs_f64().max(1e-3);
    let sent = recorder.sent.load(Ordering::Relaxed);
    let acked = recorder.acked.load(Ordering::Relaxed);
    let consumed = recorder.consumed.load(Ordering::Relaxed);
    let point = TimelinePoint {
        second: now.saturating_duration_since(t0).as_secs_f64(),
        acked_per_sec: (acked - previous.acked) as f64 / elapsed,
        consumed_per_sec: (consumed - previous.consumed) as f64 / elapsed,
        publish_p99_ms: stats::take_interval_p99(&recorder.publish),
        end_to_end_p99_ms: stats::take_interval_p99(&recorder.end_to_end),
    };
    stats::take_interval_p99(&recorder.publish_delay);
    let phase = if now < t0 + warmup { " warm-up" } else { "" };
    let ms = |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{v:.1} ms"));
    let mut line = format!("[{label}] {:>4.0}s{phase}", point.second);
    if sent > 0 || acked > 0 {
        line += &format!(
            " | sent {}/s acked {}/s | publish p99 {} (run {})",
            stats::thousands((sent - previous.sent) as f64 / elapsed),
            stats::thousands(point.acked_per_sec),
            ms(point.publish_p99_ms),
            ms(stats::total_p99(&recorder.publish)),
        );
    }
    if consumers {
        line += &format!(
            " | received {}/s e2e p99 {} (run {})",
            stats::thousands(point.consumed_per_sec),
            ms(point.end_to_end_p99_ms),
            ms(stats::total_p99(&recorder.end_to_end)),
        );
        if acked > 0 {
            line += &format!(" | lag {}", stats::thousands(acked.saturating_sub(consumed) as f64));
        }
    }
    eprintln!("{line} | errors {}", recorder.errors.load(Ordering::Relaxed));
    *previous = Previous { at: Some(now), sent, acked, consumed };
    point
}

/// Run producers (and consumers, if any) as `spec` says.
pub fn run_load(spec: &LoadSpec, label: &str, mut probe: Option<&mut ResourceProbe>) -> Result<LoadResult, String> {
    crate::admin::create_topics(&spec.client, &spec.topics, spec.partitions, &spec.topic_configs)?;
    let partitions = crate::admin::topic_partitions(&spec.client, &spec.topics)?;
    if partitions.is_empty() {
        return Err(format!("topics {:?} have no partitions with a leader", spec.topics));
    }
    let prime_secs = producer::prime_partitions(spec, &partitions)?;

    // The window is fixed once t0 is known; until then nothing is measured.
    let recorder = Arc::new(Recorder::new(u64::MAX, u64::MAX));
    let stop = Arc::new(AtomicBool::new(false));
    let shares = if spec.consumers == 0 { Vec::new() } else { consumer::split_partitions(&partitions, spec.consumers) };
    // A delayed consumer is created only when it starts: librdkafka fetches in the
    // background from assign() on, which would drain the backlog before its time.
    let delayed = !spec.consumer_delay.is_zero();
    let consumers = shares
        .iter()
        .map(|share| match delayed {
            true => Ok(None),
            false => consumer::create_consumer(spec, share, StartAt::Beginning).map(Some),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let producers = (0..spec.producers.max(1))
        .map(|_| producer::create_producer(spec, recorder.clone()))
        .collect::<Result<Vec<_>, _>>()?;

    let t0 = Instant::now() + START_LEAD;
    let start_unix_ns = unix_nanos() + START_LEAD.as_nanos() as u64;
    let window_start_ns = start_unix_ns + spec.warmup.as_nanos() as u64;
    let window_end_ns = match spec.records {
        Some(_) => u64::MAX,
        None => window_start_ns + spec.duration.as_nanos() as u64,
    };
    recorder.set_window(window_start_ns, window_end_ns);
    let schedule = Schedule { start: t0, start_unix_ns, send_end: t0 + spec.warmup + spec.duration };

    let consumer_start = t0 + spec.consumer_delay;
    let consumer_threads: Vec<_> = consumers
        .into_iter()
        .zip(shares)
        .map(|(consumer, share)| {
            let (recorder, stop, spec) = (recorder.clone(), stop.clone(), spec.clone());
            std::thread::spawn(move || {
                let consumer = match consumer {
                    Some(consumer) => consumer,
                    None => {
                        while Instant::now() < consumer_start && !stop.load(Ordering::Relaxed) {
                            std::thread::sleep(TICK);
                        }
                        consumer::create_consumer(&spec, &share, StartAt::Beginning)?
                    }
                };
                consumer::run_consumer(consumer, consumer_start, &recorder, &stop)
            })
        })
        .collect();
    let producer_threads: Vec<_> = producers
        .into_iter()
        .enumerate()
        .map(|(index, client)| {
            let (recorder, stop, spec) = (recorder.clone(), stop.clone(), spec.clone());
            std::thread::spawn(move || producer::run_producer(index, &spec, schedule, client, &recorder, &stop))
        })
        .collect();

    let mut timeline = Vec::new();
    let mut previous = Previous::default();
    let mut next_line = t0 + Duration::from_secs(1);
    let mut probing = false;
    let mut producers_done_at: Option<Instant> = None;
    let mut caught_up_secs = None;
    let mut resources: Option<Resources> = None;
    let mut generator_cpu = CpuMeter::start();
    let mut generator_cores = None;
    let lag_allowed = (spec.rate * 0.25).max(100.0) as u64;
    loop {
        std::thread::sleep(TICK);
        let now = Instant::now();
        if !probing && now >= t0 + spec.warmup {
            if let Some(probe) = probe.as_deref_mut() {
                probe.begin();
            }
            generator_cpu = CpuMeter::start();
            probing = true;
        }
        if now >= next_line {
            timeline.push(progress(label, t0, spec.warmup, spec.consumers > 0, &recorder, &mut previous));
            next_line += Duration::from_secs(1);
        }
        let acked = recorder.acked.load(Ordering::Relaxed);
        let consumed = recorder.consumed.load(Ordering::Relaxed);
        if delayed
            && !consumer_threads.is_empty()
            && caught_up_secs.is_none()
            && now > consumer_start
            && acked > 0
            && acked.saturating_sub(consumed) <= lag_allowed
        {
            caught_up_secs = Some(now.duration_since(consumer_start).as_secs_f64());
        }
        if producers_done_at.is_none() && producer_threads.iter().all(|thread| thread.is_finished()) {
            producers_done_at = Some(now);
            generator_cores = generator_cpu.cores();
            if let (true, Some(probe)) = (probing, probe.as_deref_mut()) {
                // Resources cover the measured window only, not the consumers' drain.
                match probe.end() {
                    Ok(measured) => resources = Some(measured),
                    Err(error) => recorder.on_error(error),
                }
            }
        }
        if let Some(done) = producers_done_at {
            let drained =
                recorder.consumed_in_window.load(Ordering::Relaxed) >= recorder.acked_in_window.load(Ordering::Relaxed);
            if consumer_threads.is_empty() || drained || now >= done + spec.drain_timeout {
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut failures: Vec<String> = Vec::new();
    for thread in producer_threads.into_iter().chain(consumer_threads) {
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => failures.push(error),
            Err(_) => failures.push("a client thread panicked".into()),
        }
    }
    if let Some(failure) = failures.first() {
        recorder.on_error(failure.clone());
    }
    let mut result = summarize(label, spec, &recorder, resources, caught_up_secs, timeline);
    result.generator_cpu_cores = generator_cores;
    result.prime_secs = Some(prime_secs);
    Ok(result)
}

fn summarize(
    label: &str,
    spec: &LoadSpec,
    recorder: &Recorder,
    mut resources: Option<Resources>,
    caught_up_secs: Option<f64>,
    timeline: Vec<TimelinePoint>,
) -> LoadResult {
    let (window_start_ns, window_end_ns) = recorder.window();
    let measured_secs = if window_end_ns == u64::MAX {
        // Count-limited: the window closes with the last acknowledgement.
        recorder.last_ack_ns.load(Ordering::Relaxed).saturating_sub(window_start_ns) as f64 / 1e9
    } else {
        spec.duration.as_secs_f64()
    }
    .max(1e-9);
    let payload_bytes = spec.payload_bytes() as f64;
    let acked_in_window = recorder.acked_in_window.load(Ordering::Relaxed);
    let consumed_in_window = recorder.consumed_in_window.load(Ordering::Relaxed);
    // Throughput is what the broker acknowledged while the window was open; records
    // acknowledged late still count for latency, not for the rate.
    let publish_rate = recorder.acked_during_window.load(Ordering::Relaxed) as f64 / measured_secs;
    if let Some(resources) = resources.as_mut() {
        let payload = acked_in_window as f64 * payload_bytes;
        resources.disk_bytes_per_payload_byte = (payload > 0.0).then(|| resources.disk_write_bytes as f64 / payload);
    }
    let end_to_end = (spec.consumers > 0).then(|| Percentiles::from_histogram(&lock(&recorder.end_to_end).total));
    let consume_rate = consumed_in_window as f64 / measured_secs;
    LoadResult {
        label: label.to_string(),
        spec: spec.clone(),
        measured_secs,
        target_rate: spec.rate,
        sent: recorder.sent.load(Ordering::Relaxed),
        acked: recorder.acked.load(Ordering::Relaxed),
        acked_in_window,
        errors: recorder.errors.load(Ordering::Relaxed),
        first_error: lock(&recorder.first_error).clone(),
        publish_rate,
        publish_mb_per_sec: publish_rate * payload_bytes / 1e6,
        consumed: recorder.consumed.load(Ordering::Relaxed),
        consume_rate,
        consume_mb_per_sec: consume_rate * payload_bytes / 1e6,
        publish_latency: Percentiles::from_histogram(&lock(&recorder.publish).total),
        publish_delay: Percentiles::from_histogram(&lock(&recorder.publish_delay).total),
        end_to_end_latency: end_to_end,
        caught_up_secs,
        prime_secs: None,
        resources,
        generator_cpu_cores: None,
        timeline,
    }
}

/// Read back everything in `topics` from the beginning (catch-up reads): stops after
/// `expected` records or when no record arrived for `spec.drain_timeout`.
pub fn run_catch_up(
    spec: &LoadSpec,
    expected: u64,
    label: &str,
    mut probe: Option<&mut ResourceProbe>,
) -> Result<LoadResult, String> {
    let partitions = crate::admin::topic_partitions(&spec.client, &spec.topics)?;
    // Every record counts: the window covers all intended times.
    let recorder = Arc::new(Recorder::new(0, u64::MAX));
    let stop = Arc::new(AtomicBool::new(false));
    let consumers = consumer::split_partitions(&partitions, spec.consumers.max(1))
        .iter()
        .map(|share| consumer::create_consumer(spec, share, StartAt::Beginning))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(probe) = probe.as_deref_mut() {
        probe.begin();
    }
    let generator_cpu = CpuMeter::start();
    let start = Instant::now();
    let threads: Vec<_> = consumers
        .into_iter()
        .map(|consumer| {
            let (recorder, stop) = (recorder.clone(), stop.clone());
            std::thread::spawn(move || consumer::run_consumer(consumer, start, &recorder, &stop))
        })
        .collect();
    let mut timeline = Vec::new();
    let mut previous = Previous::default();
    let mut next_line = start + Duration::from_secs(1);
    let (mut last_count, mut last_progress) = (0, start);
    loop {
        std::thread::sleep(TICK);
        let now = Instant::now();
        if now >= next_line {
            timeline.push(progress(label, start, Duration::ZERO, true, &recorder, &mut previous));
            next_line += Duration::from_secs(1);
        }
        let consumed = recorder.consumed.load(Ordering::Relaxed);
        if consumed != last_count {
            (last_count, last_progress) = (consumed, now);
        }
        if consumed >= expected || now >= last_progress + spec.drain_timeout {
            break;
        }
    }
    let generator_cores = generator_cpu.cores();
    let resources = probe.map(|probe| probe.end()).transpose().unwrap_or_else(|error| {
        recorder.on_error(error);
        None
    });
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        if let Ok(Err(error)) = thread.join() {
            recorder.on_error(error);
        }
    }
    let last_ns = recorder.last_consume_ns.load(Ordering::Relaxed);
    let start_ns = unix_nanos().saturating_sub(start.elapsed().as_nanos() as u64);
    let seconds = (last_ns.saturating_sub(start_ns) as f64 / 1e9).max(1e-9);
    let consumed = recorder.consumed.load(Ordering::Relaxed);
    let bytes = recorder.consumed_bytes.load(Ordering::Relaxed) as f64;
    let mut resources = resources;
    if let Some(resources) = resources.as_mut() {
        // Nothing is written per byte read: the ratio is for writes only.
        resources.disk_bytes_per_payload_byte = None;
    }
    let first_error = lock(&recorder.first_error).clone();
    let result = LoadResult {
        label: label.to_string(),
        spec: spec.clone(),
        measured_secs: seconds,
        consumed,
        consume_rate: consumed as f64 / seconds,
        consume_mb_per_sec: bytes / seconds / 1e6,
        errors: recorder.errors.load(Ordering::Relaxed),
        first_error,
        resources,
        generator_cpu_cores: generator_cores,
        timeline,
        ..LoadResult::default()
    };
    Ok(result)
}
