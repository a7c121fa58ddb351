//! Latency histograms, counters and the live progress line.
//!
//! One [`Recorder`] is shared by every producer delivery callback and every
//! consumer thread of a run. Counters are atomics; each histogram sits behind its
//! own mutex, which the callbacks hold for a few tens of nanoseconds (callbacks of
//! one producer come from one librdkafka thread, so contention is low even with 50
//! producers). Latencies are recorded in microseconds from the record's *intended*
//! send time, and only for records whose intended time falls in the measured
//! window: warm-up and drain are excluded.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Highest latency a histogram holds: one hour, in microseconds.
const LATENCY_US_MAX: u64 = 3_600_000_000;

fn new_histogram() -> Histogram<u64> {
    // Three significant digits from 1 µs to one hour: about 0.1% error.
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("valid histogram bounds")
}

/// A run-long histogram plus the one for the current progress interval.
pub struct LatencyHistograms {
    pub total: Histogram<u64>,
    pub interval: Histogram<u64>,
}

impl Default for LatencyHistograms {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistograms {
    pub fn new() -> Self {
        LatencyHistograms { total: new_histogram(), interval: new_histogram() }
    }

    pub fn record(&mut self, micros: u64, measured: bool) {
        let micros = micros.clamp(1, LATENCY_US_MAX);
        self.interval.saturating_record(micros);
        if measured {
            self.total.saturating_record(micros);
        }
    }
}

/// Shared counters and histograms of one run.
pub struct Recorder {
    /// Measured window as UNIX nanoseconds of intended send time: [start, end).
    window_start_ns: AtomicU64,
    window_end_ns: AtomicU64,
    pub sent: AtomicU64,
    pub acked: AtomicU64,
    pub acked_in_window: AtomicU64,
    /// Acknowledgements that arrived (wall time) inside the window: the throughput.
    pub acked_during_window: AtomicU64,
    pub errors: AtomicU64,
    pub consumed: AtomicU64,
    pub consumed_bytes: AtomicU64,
    pub consumed_in_window: AtomicU64,
    /// Wall time (UNIX ns) of the last acknowledgement and the last consumed record.
    pub last_ack_ns: AtomicU64,
    pub last_consume_ns: AtomicU64,
    pub publish: Mutex<LatencyHistograms>,
    pub publish_delay: Mutex<LatencyHistograms>,
    pub end_to_end: Mutex<LatencyHistograms>,
    pub first_error: Mutex<Option<String>>,
}

impl Recorder {
    pub fn new(window_start_ns: u64, window_end_ns: u64) -> Self {
        Recorder {
            window_start_ns: AtomicU64::new(window_start_ns),
            window_end_ns: AtomicU64::new(window_end_ns),
            sent: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            acked_in_window: AtomicU64::new(0),
            acked_during_window: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            consumed: AtomicU64::new(0),
            consumed_bytes: AtomicU64::new(0),
            consumed_in_window: AtomicU64::new(0),
            last_ack_ns: AtomicU64::new(0),
            last_consume_ns: AtomicU64::new(0),
            publish: Mutex::new(LatencyHistograms::new()),
            publish_delay: Mutex::new(LatencyHistograms::new()),
            end_to_end: Mutex::new(LatencyHistograms::new()),
            first_error: Mutex::new(None),
        }
    }

    /// Whether a record intended at `intended_ns` belongs to the measurement.
    pub fn in_window(&self, intended_ns: u64) -> bool {
        intended_ns >= self.window_start_ns.load(Ordering::Relaxed)
            && intended_ns < self.window_end_ns.load(Ordering::Relaxed)
    }

    /// Fix the measured window once the run's start time is known.
    pub fn set_window(&self, start_ns: u64, end_ns: u64) {
        self.window_start_ns.store(start_ns, Ordering::Relaxed);
        self.window_end_ns.store(end_ns, Ordering::Relaxed);
    }

    pub fn window(&self) -> (u64, u64) {
        (self.window_start_ns.load(Ordering::Relaxed), self.window_end_ns.load(Ordering::Relaxed))
    }

    /// A record was handed to the client `delay_ns` after its intended time.
    pub fn on_send(&self, intended_ns: u64, delay_ns: u64) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let measured = self.in_window(intended_ns);
        lock(&self.publish_delay).record(delay_ns / 1000, measured);
    }

    /// The broker acknowledged a record.
    pub fn on_ack(&self, intended_ns: u64, now_ns: u64) {
        self.acked.fetch_add(1, Ordering::Relaxed);
        self.last_ack_ns.fetch_max(now_ns, Ordering::Relaxed);
        let measured = self.in_window(intended_ns);
        if measured {
            self.acked_in_window.fetch_add(1, Ordering::Relaxed);
        }
        if self.in_window(now_ns) {
            self.acked_during_window.fetch_add(1, Ordering::Relaxed);
        }
        lock(&self.publish).record(now_ns.saturating_sub(intended_ns) / 1000, measured);
    }

    pub fn on_error(&self, message: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = lock(&self.first_error);
        if first.is_none() {
            *first = Some(message);
        }
    }

    /// A consumer received a record of `bytes` whose payload says `intended_ns`.
    pub fn on_consume(&self, intended_ns: Option<u64>, bytes: usize, now_ns: u64) {
        self.consumed.fetch_add(1, Ordering::Relaxed);
        self.consumed_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.last_consume_ns.fetch_max(now_ns, Ordering::Relaxed);
        if let Some(intended_ns) = intended_ns {
            let measured = self.in_window(intended_ns);
            if measured {
                self.consumed_in_window.fetch_add(1, Ordering::Relaxed);
            }
            lock(&self.end_to_end).record(now_ns.saturating_sub(intended_ns) / 1000, measured);
        }
    }
}

/// Lock a histogram mutex; a panicked holder leaves a histogram still worth reading.
pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The percentiles we report, in milliseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p75: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn from_histogram(histogram: &Histogram<u64>) -> Self {
        let ms = |micros: u64| micros as f64 / 1000.0;
        if histogram.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: histogram.len(),
            mean: histogram.mean() / 1000.0,
            p50: ms(histogram.value_at_quantile(0.50)),
            p75: ms(histogram.value_at_quantile(0.75)),
            p95: ms(histogram.value_at_quantile(0.95)),
            p99: ms(histogram.value_at_quantile(0.99)),
            p999: ms(histogram.value_at_quantile(0.999)),
            p9999: ms(histogram.value_at_quantile(0.9999)),
            max: ms(histogram.max()),
        }
    }
}

/// Format a count with thousands separators for the progress line.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// Take one progress interval: the p99 of the interval in ms, then reset it.
pub fn take_interval_p99(histograms: &Mutex<LatencyHistograms>) -> Option<f64> {
    let mut guard = lock(histograms);
    let p99 = (!guard.interval.is_empty()).then(|| guard.interval.value_at_quantile(0.99) as f64 / 1000.0);
    guard.interval.reset();
    p99
}

/// p99 of the measured part so far, in ms.
pub fn total_p99(histograms: &Mutex<LatencyHistograms>) -> Option<f64> {
    let guard = lock(histograms);
    (!guard.total.is_empty()).then(|| guard.total.value_at_quantile(0.99) as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_records_in_window_are_measured() {
        let recorder = Recorder::new(1_000, 2_000);
        recorder.on_ack(500, 5_000_000);
        recorder.on_ack(1_500, 3_001_500);
        assert_eq!(recorder.acked.load(Ordering::Relaxed), 2);
        assert_eq!(recorder.acked_in_window.load(Ordering::Relaxed), 1);
        // Both acknowledgements arrived after the window closed.
        assert_eq!(recorder.acked_during_window.load(Ordering::Relaxed), 0);
        let publish = lock(&recorder.publish);
        assert_eq!(publish.total.len(), 1);
        assert_eq!(publish.interval.len(), 2);
        // 3 ms from intended time to acknowledgement.
        let p = Percentiles::from_histogram(&publish.total);
        assert!((p.p50 - 3.0).abs() < 0.01, "{p:?}");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1234567.0), "1,234,567");
    }
}
