//! Transactions: one transactional producer, and read_committed reads that time and
//! check every committed record.
//!
//! Transaction `k` carries `n` records; record `j` of it is record `s = k·n + j` of the
//! run and goes to partition `s mod P`, so every transaction touches min(n, P)
//! partitions (one AddPartitionsToTxn for them, one commit marker on each). Each value
//! starts with the transaction's intended start time (8 bytes, UNIX ns, as in every
//! keel-bench payload) and then `s` (8 bytes, little endian).
//!
//! Two shapes:
//!
//! - **Flat out** (`--rate 0 --transactions N`): begin, send `n` records, commit, at
//!   once again; `--warmup-transactions` unmeasured ones first. Throughput is the `N`
//!   measured transactions over the time from the first measured begin to the last
//!   commit.
//! - **Fixed rate** (`--rate R` transactions/s, `--warmup`, `--duration`): after the
//!   warm-up transactions (flat out), transaction `k` of the schedule is intended at
//!   `t0 + k/R`. Open loop, as the other workloads: a producer that
//!   fell behind begins the next transaction at once and its records keep their
//!   intended time, so a slow commit is charged to every transaction queued behind it.
//!   With `--consume`, a read_committed consumer assigned every partition records
//!   receive time minus intended time: the wait for the commit and for the last stable
//!   offset to move is part of it.
//!
//! Every run ends with a check: the reader (the consumer of the run, or a fresh one
//! that reads everything back) must see every record of every committed transaction
//! exactly once, in order within its partition, and nothing of an aborted one.
//!
//! Why one producer: a transactional id is one sequential stream (begin, send, commit);
//! what a broker spends per transaction (AddPartitionsToTxn, EndTxn, markers, moving the
//! last stable offset) is what this measures, not how many producers it can hold.

use crate::cli::{OutputArgs, TopicArgs};
use crate::consumer::intended_time;
use crate::ledger::{sequence_of, Ledger, ReadCheck, VALUE_HEADER_BYTES};
use crate::options::{parse_duration, ClientOptions, LoadSpec};
use crate::resources::Resources;
use crate::stats::{self, lock, LatencyHistograms, Percentiles, Recorder};
use crate::{unix_nanos, PAYLOAD_HEADER_BYTES};
use clap::Args;
use rand::{RngCore, SeedableRng};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest init_transactions may take (the first one may create the transaction log).
const INIT_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest one commit or abort may take.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(60);
/// Commits retried after a retriable error before the run gives up.
const COMMIT_RETRIES_MAX: u32 = 3;
/// Lead time between creating the clients and the first intended transaction.
const START_LEAD: Duration = Duration::from_millis(300);
const TICK: Duration = Duration::from_millis(100);
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// The read-back stops when nothing new arrived for this long.
const READ_BACK_IDLE_MAX: Duration = Duration::from_secs(15);

#[derive(Debug, Args)]
pub struct TxnArgs {
    #[command(flatten)]
    pub client: ClientOptions,
    #[command(flatten)]
    pub topics: TopicArgs,
    /// Records per transaction, dealt over the partitions round-robin.
    #[arg(long, default_value_t = 10)]
    pub records_per_transaction: u64,
    /// Record value size in bytes (minimum 16: send time and sequence number).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Transactions per second; 0 = flat out (then --transactions is required).
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Measured transactions of a flat-out run.
    #[arg(long)]
    pub transactions: Option<u64>,
    /// Unmeasured transactions, sent flat out before the measured ones (flat out) or
    /// before the schedule starts (fixed rate): a cold broker's first transactions
    /// must not leave a backlog in the measured window.
    #[arg(long, default_value_t = 0)]
    pub warmup_transactions: u64,
    /// Measured time of a fixed-rate run.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Unmeasured time at the start of a fixed-rate schedule.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Read with a read_committed consumer during the run (end-to-end latency).
    #[arg(long)]
    pub consume: bool,
    /// Skip reading everything back after a run without --consume.
    #[arg(long)]
    pub no_verify: bool,
    #[arg(long, default_value = "keel-bench-txn")]
    pub transactional_id: String,
    /// How long the consumer may take to catch up after the last commit.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// Label for progress lines and results.
    #[arg(long, default_value = "txn")]
    pub label: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// One second of a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TxnTimelinePoint {
    pub second: f64,
    pub committed_per_sec: f64,
    pub transaction_p99_ms: Option<f64>,
    pub consumed_per_sec: f64,
    pub end_to_end_p99_ms: Option<f64>,
}

/// Everything measured in one transactional run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TxnResult {
    pub label: String,
    pub bootstrap: String,
    pub topics: Vec<String>,
    pub partitions: usize,
    pub records_per_transaction: u64,
    pub size: usize,
    pub acks: String,
    pub linger_ms: u64,
    /// Transactions per second asked for; 0 = flat out.
    pub target_rate: f64,
    pub init_transactions_secs: f64,
    /// The first transaction of the run, begin to commit (not measured otherwise).
    pub first_transaction_ms: Option<f64>,
    pub prime_secs: f64,
    pub measured_secs: f64,
    /// Transactions committed in the measured window.
    pub transactions: u64,
    pub transactions_per_sec: f64,
    pub records_per_sec: f64,
    /// Value bytes committed per second, 10^6 bytes.
    pub mb_per_sec: f64,
    pub committed_total: u64,
    pub aborted_total: u64,
    /// Intended start of a transaction to the return of its commit.
    pub transaction_latency: Percentiles,
    /// The commit_transaction call alone (flush, EndTxn).
    pub commit_latency: Percentiles,
    /// Intended send time to receipt by the read_committed consumer.
    pub end_to_end_latency: Option<Percentiles>,
    pub check: Option<ReadCheck>,
    pub errors: u64,
    pub first_error: Option<String>,
    pub resources: Option<Resources>,
    pub generator_cpu_cores: Option<f64>,
    pub timeline: Vec<TxnTimelinePoint>,
}

/// The shape of a run, fixed before it starts.
#[derive(Clone, Debug)]
struct Plan {
    partitions: Vec<(String, i32)>,
    records_per_transaction: u64,
    value_bytes: usize,
    /// Transactions per second; `None` = flat out.
    rate: Option<f64>,
    warmup_transactions: u64,
    measured_transactions: Option<u64>,
    start: Instant,
    start_unix_ns: u64,
    warmup: Duration,
    duration: Duration,
}

impl Plan {
    fn unix_ns_at(&self, at: Instant) -> u64 {
        self.start_unix_ns + at.saturating_duration_since(self.start).as_nanos() as u64
    }
}

/// Counters and histograms the producer thread fills and the monitor reads.
struct TxnStats {
    committed: AtomicU64,
    committed_records: AtomicU64,
    aborted: AtomicU64,
    measured: AtomicU64,
    /// Set when the first measured transaction begins.
    measuring: AtomicBool,
    window_start: Mutex<Option<Instant>>,
    last_measured_commit: Mutex<Option<Instant>>,
    /// Intended start to commit of the very first transaction (a cold broker).
    first_transaction: Mutex<Option<Duration>>,
    transaction: Mutex<LatencyHistograms>,
    commit: Mutex<LatencyHistograms>,
}

impl TxnStats {
    fn new() -> Self {
        TxnStats {
            committed: AtomicU64::new(0),
            committed_records: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
            measured: AtomicU64::new(0),
            measuring: AtomicBool::new(false),
            window_start: Mutex::new(None),
            last_measured_commit: Mutex::new(None),
            first_transaction: Mutex::new(None),
            transaction: Mutex::new(LatencyHistograms::new()),
            commit: Mutex::new(LatencyHistograms::new()),
        }
    }
}

/// Counts delivery failures of the transactional producer.
struct TxnContext {
    recorder: Arc<Recorder>,
}

impl ClientContext for TxnContext {
    /// librdkafka's own log lines (errors only, unless `-X log_level=7 -X debug=eos`).
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        eprintln!("{:.6} librdkafka {level:?} {facility}: {message}", unix_nanos() as f64 / 1e9);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let mut first = lock(&self.recorder.first_error);
        if first.is_none() {
            *first = Some(format!("client error: {error}: {reason}"));
        }
    }
}

impl ProducerContext for TxnContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, _)) = result {
            self.recorder.on_error(format!("delivery failed: {error}"));
        }
    }
}

/// A `BaseProducer`, polled by the thread that runs the transactions: the rdkafka
/// crate's `commit_transaction` first flushes by polling the delivery-report queue in
/// steps of up to 100 ms, and with a `ThreadedProducer` its background thread takes
/// the reports away from that poll, so every commit would wait out one step.
fn transactional_producer(
    client: &ClientOptions,
    transactional_id: &str,
    recorder: Arc<Recorder>,
) -> Result<BaseProducer<TxnContext>, String> {
    let mut config = client.producer_config();
    config
        .set("transactional.id", transactional_id)
        .set("enable.idempotence", "true")
        // librdkafka requires message.timeout.ms <= transaction.timeout.ms (60 s).
        .set("message.timeout.ms", "60000");
    for (key, value) in &client.properties {
        config.set(key, value);
    }
    // The rdkafka crate caps librdkafka's log level on its own: `-X log_level=7` lifts it.
    if let Some(level) = client.properties.iter().find(|(key, _)| key == "log_level").and_then(|(_, v)| v.parse().ok())
    {
        use rdkafka::config::RDKafkaLogLevel::{Debug, Error, Info, Notice, Warning};
        config.set_log_level(match level {
            7.. => Debug,
            6 => Info,
            5 => Notice,
            4 => Warning,
            _ => Error,
        });
    }
    config.create_with_context(TxnContext { recorder }).map_err(|error| format!("cannot create producer: {error}"))
}

fn read_committed_consumer(client: &ClientOptions, partitions: &[(String, i32)]) -> Result<BaseConsumer, String> {
    let mut config = client.consumer_config();
    config.set("isolation.level", "read_committed");
    for (key, value) in &client.properties {
        config.set(key, value);
    }
    let consumer: BaseConsumer = config.create().map_err(|error| format!("cannot create consumer: {error}"))?;
    let mut assignment = TopicPartitionList::with_capacity(partitions.len());
    for (topic, partition) in partitions {
        assignment
            .add_partition_offset(topic, *partition, Offset::Beginning)
            .map_err(|error| format!("cannot assign {topic}/{partition}: {error}"))?;
    }
    consumer.assign(&assignment).map_err(|error| format!("assign failed: {error}"))?;
    Ok(consumer)
}

/// Poll until `stop`: time every record (when `recorder` is given) and enter it in the ledger.
fn read_records(
    consumer: &BaseConsumer,
    recorder: Option<&Recorder>,
    ledger: &Mutex<Ledger>,
    errors: &Recorder,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        match consumer.poll(POLL_TIMEOUT) {
            Some(Ok(message)) => {
                let now_ns = unix_nanos();
                let payload = message.payload();
                if let Some(recorder) = recorder {
                    recorder.on_consume(intended_time(payload), payload.map_or(0, <[u8]>::len), now_ns);
                }
                if let Some(sequence) = sequence_of(payload) {
                    lock(ledger).record(message.topic(), message.partition(), sequence);
                }
            }
            Some(Err(error)) => errors.on_error(format!("consume failed: {error}")),
            None => {}
        }
    }
}

/// Commit, retrying retriable errors and aborting when the client says so.
/// Returns whether the transaction committed.
fn commit_or_abort(producer: &BaseProducer<TxnContext>, recorder: &Recorder) -> Result<bool, String> {
    let mut attempts = 0;
    loop {
        match producer.commit_transaction(COMMIT_TIMEOUT) {
            Ok(()) => return Ok(true),
            Err(KafkaError::Transaction(error)) if error.txn_requires_abort() => {
                recorder.on_error(format!("commit failed, aborting: {error}"));
                producer.abort_transaction(COMMIT_TIMEOUT).map_err(|error| format!("abort failed: {error}"))?;
                return Ok(false);
            }
            Err(KafkaError::Transaction(error)) if error.is_retriable() && attempts < COMMIT_RETRIES_MAX => {
                recorder.on_error(format!("commit failed, retrying: {error}"));
                attempts += 1;
            }
            Err(error) => return Err(format!("commit failed: {error}")),
        }
    }
}

/// The producer thread: begin, send, commit until the plan is done or `stop`.
/// Returns the outcome of every transaction (`true` = committed).
fn run_transactions(
    plan: &Plan,
    producer: &BaseProducer<TxnContext>,
    stats: &TxnStats,
    recorder: &Recorder,
    stop: &AtomicBool,
) -> Result<Vec<bool>, String> {
    let mut outcomes = Vec::new();
    let mut value = vec![0u8; plan.value_bytes];
    rand::rngs::StdRng::seed_from_u64(0x0074_786e).fill_bytes(&mut value);
    let per = plan.records_per_transaction;
    // At a fixed rate, the schedule starts once the warm-up transactions are done.
    let mut schedule_start: Option<Instant> = None;
    for index in 0u64.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let (intended, measured) = match (plan.rate, plan.measured_transactions) {
            _ if index < plan.warmup_transactions => (Instant::now(), false),
            (Some(rate), _) => {
                let schedule = *schedule_start.get_or_insert_with(|| {
                    let schedule = Instant::now();
                    let window_start_ns = plan.unix_ns_at(schedule + plan.warmup);
                    recorder.set_window(window_start_ns, window_start_ns + plan.duration.as_nanos() as u64);
                    schedule
                });
                let offset = (index - plan.warmup_transactions) as f64 / rate;
                let intended = schedule + Duration::from_secs_f64(offset);
                // A producer that fell behind does not commit its backlog after the end.
                let send_end = schedule + plan.warmup + plan.duration;
                if intended >= send_end || Instant::now() >= send_end {
                    break;
                }
                (intended, intended >= schedule + plan.warmup)
            }
            (None, Some(count)) => {
                if index >= plan.warmup_transactions + count {
                    break;
                }
                (Instant::now(), true)
            }
            (None, None) => return Err("a flat-out run needs --transactions".into()),
        };
        let now = Instant::now();
        if intended > now {
            std::thread::sleep(intended - now);
        }
        let intended_ns = plan.unix_ns_at(intended);
        if measured && !stats.measuring.swap(true, Ordering::Relaxed) {
            *lock(&stats.window_start) = Some(intended);
            if plan.rate.is_none() {
                recorder.set_window(intended_ns, u64::MAX);
            }
        }
        producer.begin_transaction().map_err(|error| format!("begin_transaction failed: {error}"))?;
        value[..PAYLOAD_HEADER_BYTES].copy_from_slice(&intended_ns.to_le_bytes());
        for sequence in index * per..(index + 1) * per {
            value[PAYLOAD_HEADER_BYTES..VALUE_HEADER_BYTES].copy_from_slice(&sequence.to_le_bytes());
            let (topic, partition) = &plan.partitions[(sequence % plan.partitions.len() as u64) as usize];
            let mut record = BaseRecord::<(), [u8], ()>::to(topic).partition(*partition).payload(&value[..]);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                        record = returned;
                        producer.poll(POLL_TIMEOUT);
                    }
                    Err((error, _)) => return Err(format!("send failed: {error}")),
                }
            }
        }
        let commit_start = Instant::now();
        let committed = commit_or_abort(producer, recorder)?;
        let done = Instant::now();
        outcomes.push(committed);
        if !committed {
            stats.aborted.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        stats.committed.fetch_add(1, Ordering::Relaxed);
        if index == 0 {
            *lock(&stats.first_transaction) = Some(done.saturating_duration_since(intended));
        }
        stats.committed_records.fetch_add(per, Ordering::Relaxed);
        lock(&stats.transaction).record(done.saturating_duration_since(intended).as_micros() as u64, measured);
        lock(&stats.commit).record(done.saturating_duration_since(commit_start).as_micros() as u64, measured);
        if measured {
            stats.measured.fetch_add(1, Ordering::Relaxed);
            *lock(&stats.last_measured_commit) = Some(done);
        }
    }
    Ok(outcomes)
}

/// Counters as of the previous progress line.
#[derive(Default)]
struct Previous {
    at: Option<Instant>,
    committed: u64,
    consumed: u64,
}

fn progress(
    label: &str,
    start: Instant,
    stats: &TxnStats,
    recorder: &Recorder,
    previous: &mut Previous,
) -> TxnTimelinePoint {
    let now = Instant::now();
    let elapsed = now.saturating_duration_since(previous.at.unwrap_or(start)).as_secs_f64().max(1e-3);
    let committed = stats.committed.load(Ordering::Relaxed);
    let consumed = recorder.consumed.load(Ordering::Relaxed);
    let point = TxnTimelinePoint {
        second: now.saturating_duration_since(start).as_secs_f64(),
        committed_per_sec: (committed - previous.committed) as f64 / elapsed,
        transaction_p99_ms: stats::take_interval_p99(&stats.transaction),
        consumed_per_sec: (consumed - previous.consumed) as f64 / elapsed,
        end_to_end_p99_ms: stats::take_interval_p99(&recorder.end_to_end),
    };
    stats::take_interval_p99(&stats.commit);
    let ms = |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{v:.1} ms"));
    let phase = if stats.measuring.load(Ordering::Relaxed) { "" } else { " warm-up" };
    eprintln!(
        "[{label}] {:>4.0}s{phase} | committed {}/s, transaction p99 {} (run {}) | received {}/s e2e p99 {} | aborted {} errors {}",
        point.second,
        stats::thousands(point.committed_per_sec),
        ms(point.transaction_p99_ms),
        ms(stats::total_p99(&stats.transaction)),
        stats::thousands(point.consumed_per_sec),
        ms(point.end_to_end_p99_ms),
        stats.aborted.load(Ordering::Relaxed),
        recorder.errors.load(Ordering::Relaxed),
    );
    *previous = Previous { at: Some(now), committed, consumed };
    point
}

/// Read every partition back read_committed until `expected` distinct records arrived
/// or nothing new came for a while. Returns the seconds it took.
fn read_back(
    client: &ClientOptions,
    partitions: &[(String, i32)],
    expected: u64,
    ledger: &Arc<Mutex<Ledger>>,
    recorder: &Arc<Recorder>,
) -> Result<f64, String> {
    let consumer = read_committed_consumer(client, partitions)?;
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (ledger, recorder, stop) = (ledger.clone(), recorder.clone(), stop.clone());
        std::thread::spawn(move || read_records(&consumer, None, &ledger, &recorder, &stop))
    };
    let (mut last_count, mut last_change) = (0, Instant::now());
    loop {
        std::thread::sleep(TICK);
        let distinct = lock(ledger).distinct;
        if distinct != last_count {
            (last_count, last_change) = (distinct, Instant::now());
        }
        if distinct >= expected || last_change.elapsed() >= READ_BACK_IDLE_MAX {
            break;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    thread.join().map_err(|_| "the read-back thread panicked".to_string())?;
    Ok(seconds)
}

/// Run the transactional workload that `args` describes against one broker.
pub fn run_txn(args: &TxnArgs) -> Result<TxnResult, String> {
    let flat_out = args.rate <= 0.0;
    if flat_out && args.transactions.is_none() {
        return Err("--rate 0 (flat out) needs --transactions".into());
    }
    if args.records_per_transaction == 0 {
        return Err("--records-per-transaction must be at least 1".into());
    }
    let client = &args.client;
    let topics = args.topics.names();
    crate::admin::create_topics(client, &topics, args.topics.partitions, &args.topics.configs)?;
    let partitions = crate::admin::topic_partitions(client, &topics)?;
    if partitions.is_empty() {
        return Err(format!("topics {topics:?} have no partitions with a leader"));
    }
    let prime_spec = LoadSpec { topics: topics.clone(), client: client.clone(), ..LoadSpec::default() };
    let prime_secs = crate::producer::prime_partitions(&prime_spec, &partitions)?;

    let recorder = Arc::new(Recorder::new(u64::MAX, u64::MAX));
    let stats = Arc::new(TxnStats::new());
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = transactional_producer(client, &args.transactional_id, recorder.clone())?;
    let init_started = Instant::now();
    producer.init_transactions(INIT_TIMEOUT).map_err(|error| format!("init_transactions failed: {error}"))?;
    let init_transactions_secs = init_started.elapsed().as_secs_f64();
    let consumer = args.consume.then(|| read_committed_consumer(client, &partitions)).transpose()?;

    let start = Instant::now() + START_LEAD;
    let start_unix_ns = unix_nanos() + START_LEAD.as_nanos() as u64;
    let plan = Plan {
        partitions: partitions.clone(),
        records_per_transaction: args.records_per_transaction,
        value_bytes: args.size.max(VALUE_HEADER_BYTES),
        rate: (!flat_out).then_some(args.rate),
        warmup_transactions: args.warmup_transactions,
        measured_transactions: args.transactions,
        start,
        start_unix_ns,
        warmup: if flat_out { Duration::ZERO } else { args.warmup },
        duration: if flat_out { Duration::from_secs(3600) } else { args.duration },
    };

    let consumer_thread = consumer.map(|consumer| {
        let (recorder, ledger, stop) = (recorder.clone(), ledger.clone(), stop.clone());
        std::thread::spawn(move || read_records(&consumer, Some(recorder.as_ref()), &ledger, &recorder, &stop))
    });
    let producer_thread = {
        let (plan, stats, recorder, stop) = (plan.clone(), stats.clone(), recorder.clone(), stop.clone());
        std::thread::spawn(move || {
            let outcomes = run_transactions(&plan, &producer, &stats, &recorder, &stop);
            // Leave no transaction open if the run failed half-way.
            if outcomes.is_err() {
                let _ = producer.abort_transaction(COMMIT_TIMEOUT);
            }
            outcomes
        })
    };

    let mut probe = args.output.probe();
    let mut probing = false;
    let mut resources = None;
    let mut generator_cpu = crate::run::CpuMeter::start();
    let mut generator_cores = None;
    let mut timeline = Vec::new();
    let mut previous = Previous::default();
    let mut next_line = start + Duration::from_secs(1);
    let mut producer_done_at: Option<Instant> = None;
    loop {
        std::thread::sleep(TICK);
        let now = Instant::now();
        if !probing && stats.measuring.load(Ordering::Relaxed) {
            if let Some(probe) = probe.as_mut() {
                probe.begin();
            }
            generator_cpu = crate::run::CpuMeter::start();
            probing = true;
        }
        if now >= next_line {
            timeline.push(progress(&args.label, start, &stats, &recorder, &mut previous));
            next_line += Duration::from_secs(1);
        }
        if producer_done_at.is_none() && producer_thread.is_finished() {
            producer_done_at = Some(now);
            generator_cores = generator_cpu.cores();
            if let (true, Some(probe)) = (probing, probe.as_mut()) {
                match probe.end() {
                    Ok(measured) => resources = Some(measured),
                    Err(error) => recorder.on_error(error),
                }
            }
        }
        if let Some(done) = producer_done_at {
            let caught_up = lock(&ledger).distinct >= stats.committed_records.load(Ordering::Relaxed);
            if consumer_thread.is_none() || caught_up || now >= done + args.drain_timeout {
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let outcomes = match producer_thread.join() {
        Ok(Ok(outcomes)) => outcomes,
        Ok(Err(error)) => {
            recorder.on_error(error.clone());
            return Err(error);
        }
        Err(_) => return Err("the producer thread panicked".into()),
    };
    if let Some(thread) = consumer_thread {
        thread.join().map_err(|_| "the consumer thread panicked".to_string())?;
    }
    let committed_records = stats.committed_records.load(Ordering::Relaxed);
    let check = if args.consume {
        Some(lock(&ledger).check(&outcomes, args.records_per_transaction))
    } else if args.no_verify {
        None
    } else {
        let seconds = read_back(client, &partitions, committed_records, &ledger, &recorder)?;
        let mut check = lock(&ledger).check(&outcomes, args.records_per_transaction);
        check.read_back_secs = seconds;
        Some(check)
    };

    let transactions = stats.measured.load(Ordering::Relaxed);
    let measured_secs = if flat_out {
        let begin = *lock(&stats.window_start);
        let end = *lock(&stats.last_measured_commit);
        match (begin, end) {
            (Some(begin), Some(end)) => end.saturating_duration_since(begin).as_secs_f64(),
            _ => 0.0,
        }
    } else {
        args.duration.as_secs_f64()
    }
    .max(1e-9);
    let transactions_per_sec = transactions as f64 / measured_secs;
    let records_per_sec = transactions_per_sec * args.records_per_transaction as f64;
    let result = TxnResult {
        label: args.label.clone(),
        bootstrap: client.bootstrap.clone(),
        topics,
        partitions: partitions.len(),
        records_per_transaction: args.records_per_transaction,
        size: plan.value_bytes,
        acks: client.acks.clone(),
        linger_ms: client.linger_ms,
        target_rate: args.rate.max(0.0),
        init_transactions_secs,
        first_transaction_ms: lock(&stats.first_transaction).map(|elapsed| elapsed.as_secs_f64() * 1e3),
        prime_secs,
        measured_secs,
        transactions,
        transactions_per_sec,
        records_per_sec,
        mb_per_sec: records_per_sec * plan.value_bytes as f64 / 1e6,
        committed_total: stats.committed.load(Ordering::Relaxed),
        aborted_total: stats.aborted.load(Ordering::Relaxed),
        transaction_latency: Percentiles::from_histogram(&lock(&stats.transaction).total),
        commit_latency: Percentiles::from_histogram(&lock(&stats.commit).total),
        end_to_end_latency: args.consume.then(|| Percentiles::from_histogram(&lock(&recorder.end_to_end).total)),
        check,
        errors: recorder.errors.load(Ordering::Relaxed),
        first_error: lock(&recorder.first_error).clone(),
        resources,
        generator_cpu_cores: generator_cores,
        timeline,
    };
    Ok(result)
}

/// Print the summary of a transactional run to stdout.
pub fn print_txn_result(result: &TxnResult) {
    println!(
        "{}: {} transactions of {} x {} B in {:.1}s: {:.1} transactions/s, {:.0} records/s, {:.2} MB/s ({} committed, {} aborted, {} errors)",
        result.label,
        result.transactions,
        result.records_per_transaction,
        result.size,
        result.measured_secs,
        result.transactions_per_sec,
        result.records_per_sec,
        result.mb_per_sec,
        result.committed_total,
        result.aborted_total,
        result.errors
    );
    let line = |name: &str, p: &Percentiles| {
        println!(
            "  {name} ms: mean {:.2} p50 {:.2} p99 {:.2} p99.9 {:.2} max {:.2} ({} samples)",
            p.mean, p.p50, p.p99, p.p999, p.max, p.count
        )
    };
    if let Some(first) = result.first_transaction_ms {
        println!("  first transaction (cold) {first:.1} ms; init_transactions {:.2} s", result.init_transactions_secs);
    }
    line("transaction (intended start to commit)", &result.transaction_latency);
    line("commit call", &result.commit_latency);
    if let Some(e) = &result.end_to_end_latency {
        line("end-to-end read_committed", e);
    }
    if let Some(c) = &result.check {
        println!(
            "  read check {}: {} of {} committed records read, {} missing, {} duplicates, {} from aborted transactions, {} out of order",
            if c.passed() { "passed" } else { "FAILED" },
            c.read_records,
            c.expected_records,
            c.missing,
            c.duplicates,
            c.from_aborted,
            c.out_of_order
        );
    }
    if let Some(r) = &result.resources {
        println!("  broker: {:.2} cores, peak RSS {:.0} MB", r.cpu_cores, r.peak_rss_mb);
    }
    if let Some(error) = &result.first_error {
        println!("  first error: {error}");
    }
}
