//! Load generator and side-by-side harness against Apache Kafka.
//!
//! `keel-bench` is an ordinary Kafka client program (librdkafka through the
//! `rdkafka` crate): it runs against any bootstrap address, Keel or Apache Kafka,
//! and never links the broker. It does four jobs:
//!
//! 1. **Generate load** ([`producer`], [`consumer`]): N producers publish at a fixed
//!    rate with open-loop scheduling, or at max rate; M consumers read every
//!    partition with `assign()` (no consumer groups). Latencies go into
//!    HdrHistograms ([`stats`]).
//! 2. **Run workloads** ([`workloads`]): the shapes that expose brokers (max-rate
//!    producer, fixed-rate ladder, 4 vs 50 producers, keyed records over many
//!    partitions, retention reached, backlog drain, catch-up from disk), each with
//!    a quick and a full form, while sampling the broker process ([`resources`]).
//! 3. **Compare brokers** ([`suite`], [`report`], [`svg`]): start Apache Kafka and
//!    Keel one at a time on fresh data directories on the same disk, run each
//!    workload against both, alternating which goes first, and write
//!    `results.json`, `report.md` and SVG plots.
//! 4. **Measure transactions** ([`txn`]): one transactional producer, flat out or at
//!    a fixed rate, with read_committed reads that time every record and check that
//!    each committed one arrives exactly once (`benches/transactions.sh` runs it
//!    against both brokers).
//!
//! Why open-loop: a closed-loop generator that waits for the broker before sending
//! the next record stops measuring exactly when the broker stalls (coordinated
//! omission). Here the intended send time of record `i` is `start + i / rate`, and
//! every latency is measured from that intended time, as OpenMessaging Benchmark's
//! publish delay does, so a stall shows up in the tail instead of hiding.
//!
//! The generator shares the machine with the broker under test; numbers are meant
//! to be compared side by side under the same load, never across machines.

pub mod admin;
pub mod cli;
pub mod consumer;
pub mod ledger;
pub mod options;
pub mod producer;
pub mod report;
pub mod resources;
pub mod run;
pub mod stats;
pub mod suite;
pub mod svg;
pub mod txn;
pub mod workloads;

/// Bytes at the head of every payload: the intended send time, in nanoseconds
/// since the UNIX epoch, little endian. Consumers read it back for end-to-end
/// latency (producer and consumer run on the same host, so one clock).
pub const PAYLOAD_HEADER_BYTES: usize = 8;

/// Nanoseconds since the UNIX epoch on the wall clock.
pub fn unix_nanos() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}
