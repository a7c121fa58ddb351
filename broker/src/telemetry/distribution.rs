//! A distribution one shard records on its data path (request latencies, batch
//! sizes, fsync times) and reports as percentiles at scrape time.
//!
//! Why HdrHistogram recorded by the shard itself rather than the exporter's own
//! histograms: the exporter's summaries push every sample into a shared lock-free
//! bucket that allocates a block every 64 samples and is drained by the scraping
//! thread. Here a sample is one increment in a fixed array the shard alone touches
//! (no atomics, no allocation after the first sample), and percentiles are computed
//! on the shard only when `/metrics` is scraped.
//!
//! Percentiles cover a sliding window: two histograms, the current one and the one
//! before it, swapped every [`WINDOW`] by the shard's timer, so a scrape sees the last
//! one to two windows: a stall shows, then ages out. Count and sum cover the whole
//! life of the process, as Prometheus summaries' `_count` and `_sum` do.

use hdrhistogram::Histogram;

/// How long a sample counts towards percentiles: between one and two of these.
pub const WINDOW: std::time::Duration = std::time::Duration::from_secs(30);

/// The percentiles reported, as Prometheus `quantile` label values.
pub const QUANTILES: [(f64, &str); 3] = [(0.5, "0.5"), (0.99, "0.99"), (0.999, "0.999")];

/// Two significant figures: a value is known within 1%, and a histogram covering
/// 1 µs to an hour takes about 10 KiB.
const SIGNIFICANT_FIGURES: u8 = 2;

pub struct Distribution {
    current: Histogram<u32>,
    previous: Histogram<u32>,
    count: u64,
    sum: u64,
}

/// What a scrape reports of a distribution: its percentiles over the window (in the
/// unit it was recorded in), and its count and sum since start.
#[derive(Debug, Clone, Default)]
pub struct Percentiles {
    pub values: [u64; QUANTILES.len()],
    pub count: u64,
    pub sum: u64,
}

impl Distribution {
    /// A distribution of values from 1 to `highest` (larger ones count as `highest`).
    pub fn new(highest: u64) -> Distribution {
        let histogram = || {
            Histogram::new_with_bounds(1, highest.max(2), SIGNIFICANT_FIGURES)
                .expect("static bounds and precision are valid")
        };
        Distribution { current: histogram(), previous: histogram(), count: 0, sum: 0 }
    }

    pub fn record(&mut self, value: u64) {
        self.current.saturating_record(value.max(1));
        self.count += 1;
        self.sum = self.sum.wrapping_add(value);
    }

    /// Starts a new window: the current one becomes the previous one.
    pub fn rotate(&mut self) {
        std::mem::swap(&mut self.current, &mut self.previous);
        self.current.reset();
    }

    pub fn percentiles(&self) -> Percentiles {
        let mut window = self.previous.clone();
        // Same bounds on both: adding cannot fail.
        let _ = window.add(&self.current);
        let mut values = [0; QUANTILES.len()];
        if !window.is_empty() {
            for (v, (q, _)) in values.iter_mut().zip(QUANTILES) {
                *v = window.value_at_quantile(q);
            }
        }
        Percentiles { values, count: self.count, sum: self.sum }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_cover_two_windows_then_age_out() {
        let mut d = Distribution::new(60_000_000);
        for v in 1..=1000 {
            d.record(v);
        }
        let p = d.percentiles();
        assert_eq!(p.count, 1000);
        assert_eq!(p.sum, 500_500);
        assert!((495..=505).contains(&p.values[0]), "{p:?}");
        assert!((985..=1000).contains(&p.values[1]), "{p:?}");
        d.rotate();
        assert_eq!(d.percentiles().values, p.values, "the previous window still counts");
        d.rotate();
        assert_eq!(d.percentiles().values, [0, 0, 0], "two windows later the samples aged out");
        assert_eq!(d.percentiles().count, 1000, "the count is since start");
    }

    #[test]
    fn values_past_the_bound_saturate() {
        let mut d = Distribution::new(1000);
        d.record(u64::MAX / 2);
        assert!(d.percentiles().values[2] >= 990);
    }
}
