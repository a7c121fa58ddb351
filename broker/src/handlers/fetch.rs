//! Fetch, non-polling: read every partition from its owner shard; if fewer than
//! `min_bytes` came back, ask the owners to wait until any of the partitions' high
//! watermarks moves (woken by the flush loop) or `max_wait_ms` passes, then read again.
//!
//! Fetch sessions (KIP-227) are refused correctly: every response carries session id
//! 0, so clients keep sending full fetches. As Kafka's `FetchManager`, epoch 0 (open a
//! session) and -1 (sessionless) ask for a full fetch whatever the session id; any
//! other epoch asks for a session Keel does not hold: FETCH_SESSION_ID_NOT_FOUND.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId, TopicName};
use keel_storage::log;
use uuid::Uuid;

use crate::shard::fanout::scatter;

use crate::cluster::nodes;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::dispatch::Serve;
use crate::shard::Shard;
use crate::util::str_bytes;
use crate::{quota, throttle};

pub const VERSIONS: (i16, i16) = (4, 17);

/// From this version a throttled consumer waits by itself (KIP-219): the response
/// goes at once and the connection is muted; before it, the response is delayed.
const SELF_THROTTLE_VERSION_MIN: i16 = 8;

/// Kafka's `IsolationLevel.READ_COMMITTED`.
pub const READ_COMMITTED: i8 = 1;

#[derive(Clone)]
struct Want {
    topic: String,
    partition: i32,
    offset: i64,
    max_bytes: usize,
    /// The leader epoch the client believes current (-1: unchecked), checked as Kafka
    /// does: FENCED_LEADER_EPOCH when older than the partition's, UNKNOWN_LEADER_EPOCH
    /// when newer.
    current_leader_epoch: i32,
    /// Asked by a replica (replica id >= 0): a new replica copying a leader's log
    /// (`replication::install`) learns the log start from an OFFSET_OUT_OF_RANGE
    /// answer, which consumers get without watermarks, as from Kafka.
    replica: bool,
    /// `read_committed`: read below the last stable offset, name aborted transactions.
    committed: bool,
}

#[derive(Default)]
pub struct Got {
    error: i16,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
    /// `read_committed` only: (producer id, first offset) of the aborted transactions
    /// the records returned overlap.
    aborted: Option<Vec<(i64, i64)>>,
    records: Vec<Bytes>,
    bytes: usize,
}

impl Got {
    /// An error answer: no records and no watermarks (Kafka's -1s).
    fn failed(error: i16) -> Got {
        Got { error, high_watermark: -1, last_stable_offset: -1, log_start_offset: -1, ..Got::default() }
    }

    /// An unknown topic or topic id, found before any read. Kafka answers these apart
    /// from the partitions it reads, with the field's default, an empty list of aborted
    /// transactions, where an error from reading a log leaves the list null.
    fn unknown(error: i16) -> Got {
        Got { aborted: Some(Vec::new()), ..Got::failed(error) }
    }
}

/// Per topic of the request: its name as asked, its id, its name as resolved, and
/// per partition its index and the error already known for it.
type TopicLayout = (TopicName, Uuid, Option<String>, Vec<(i32, Option<i16>)>);

pub async fn handle(shard: &Rc<Shard>, ctx: &RequestContext, version: i16, req: FetchRequest) -> FetchResponse {
    if !matches!(req.session_epoch, 0 | -1) {
        return FetchResponse::default().with_error_code(errors::FETCH_SESSION_ID_NOT_FOUND);
    }
    let meta = shard.meta();
    // What the response may hold: the client's max_bytes, capped by the broker's
    // fetch_max_bytes (Kafka's fetch.max.bytes), so no fetch makes a shard read more.
    // A consumer with a quota gets at most what the quota allows in its window.
    let replica = req.replica_id.0 >= 0 || req.replica_state.replica_id.0 >= 0;
    let mut response_bytes_max = (req.max_bytes.max(0) as usize).min(shard.config.fetch_max_bytes);
    if let Some(cap) = throttle::fetch_bytes_max(shard, ctx).filter(|_| !replica) {
        response_bytes_max = response_bytes_max.min(cap);
    }
    // Per topic of the request: its name, id, and per partition its index and the error
    // already known for it.
    let committed = !replica && req.isolation_level == READ_COMMITTED;
    let mut layout: Vec<TopicLayout> = Vec::new();
    let mut wants: Vec<(usize, Want)> = Vec::new();
    let mut want_slots = Vec::new();
    // As Kafka: a replica needs CLUSTER_ACTION on the cluster, a consumer READ on
    // each topic, checked before the topic is looked up.
    let replica_authorized = !replica || super::cluster_authorized(shard, ctx, acl::operation::CLUSTER_ACTION);
    for t in &req.topics {
        let name =
            if version >= 13 { meta.topic_name(&t.topic_id).map(str::to_string) } else { Some(t.topic.0.to_string()) };
        let readable = match &name {
            Some(_) if replica => replica_authorized,
            Some(n) => super::authorized(shard, ctx, acl::operation::READ, acl::resource::TOPIC, n),
            None => true,
        };
        let mut parts = Vec::new();
        for p in &t.partitions {
            let owner = name.as_deref().and_then(|n| meta.owner(n, p.partition));
            let early = match (&name, owner) {
                (None, _) => Some(errors::UNKNOWN_TOPIC_ID),
                (Some(_), _) if !readable => Some(errors::TOPIC_AUTHORIZATION_FAILED),
                (Some(_), None) => Some(errors::UNKNOWN_TOPIC_OR_PARTITION),
                (Some(n), Some(owner)) => {
                    want_slots.push((layout.len(), parts.len()));
                    let max_bytes = (p.partition_max_bytes.max(0) as usize).min(response_bytes_max);
                    wants.push((
                        owner,
                        Want {
                            topic: n.clone(),
                            partition: p.partition,
                            offset: p.fetch_offset,
                            max_bytes,
                            current_leader_epoch: p.current_leader_epoch,
                            replica,
                            committed,
                        },
                    ));
                    None
                }
            };
            parts.push((p.partition, early));
        }
        layout.push((t.topic.clone(), t.topic_id, name, parts));
    }
    let min_bytes = req.min_bytes.max(0) as usize;
    let max_wait = Duration::from_millis(req.max_wait_ms.clamp(0, shard.config.fetch_wait_ms_max as i32) as u64);
    let deadline = Instant::now() + max_wait;
    let mut got = read_all(shard, &wants, response_bytes_max).await;
    loop {
        let total: usize = got.iter().map(|g| g.bytes).sum();
        let any_error = got.iter().any(|g| g.error != errors::NONE);
        let left = deadline.saturating_duration_since(Instant::now());
        if total >= min_bytes.max(1) || any_error || left.is_zero() || wants.is_empty() {
            break;
        }
        wait_any(shard, &wants, &got, left).await;
        got = read_all(shard, &wants, response_bytes_max).await;
    }
    trim_to_max_bytes(&mut got, response_bytes_max);
    // A consumer's quota counts what it is sent; past it the answer is empty, with
    // the throttle time, and the bytes are taken back, as Kafka answers (replicas have
    // no quota).
    if !replica {
        let bytes = got.iter().map(|g| g.bytes).sum();
        let self_throttles = version >= SELF_THROTTLE_VERSION_MIN;
        let throttle = throttle::charge(shard, ctx, quota::Kind::Fetch, bytes, self_throttles, true).await;
        if let Some(throttle) = throttle.filter(|t| !t.is_zero()) {
            if !self_throttles {
                glommio::timer::sleep(throttle).await;
            }
            return FetchResponse::default().with_throttle_time_ms(throttle.as_millis() as i32);
        }
    }
    for ((_, w), g) in wants.iter().zip(&got) {
        shard.metrics.fetched(&w.topic, g.bytes);
    }
    let mut got = got.into_iter();
    let mut slots = want_slots.into_iter().peekable();
    let mut leaders = Vec::new();
    let responses = layout
        .into_iter()
        .enumerate()
        .map(|(ti, (topic, topic_id, name, parts))| {
            let partitions = parts
                .into_iter()
                .enumerate()
                .map(|(pi, (partition, early))| {
                    let g = match early {
                        Some(code) => Got::unknown(code),
                        None => {
                            assert_eq!(slots.next(), Some((ti, pi)), "fetch results follow request order");
                            got.next().expect("a result for every partition read")
                        }
                    };
                    let mut data = partition_data(partition, g);
                    // Where the partition's leader is now (KIP-951), so the consumer
                    // need not wait for a metadata refresh to go there.
                    let moved = version >= 12
                        && [errors::NOT_LEADER_OR_FOLLOWER, errors::FENCED_LEADER_EPOCH].contains(&data.error_code);
                    let leader = match &name {
                        Some(n) if moved => nodes::known_leader(shard, n, partition),
                        _ => None,
                    };
                    if let Some((node, epoch)) = leader {
                        data.current_leader =
                            LeaderIdAndEpoch::default().with_leader_id(BrokerId(node)).with_leader_epoch(epoch);
                        leaders.push(node);
                    }
                    data
                })
                .collect();
            let mut r = FetchableTopicResponse::default().with_partitions(partitions);
            if version >= 13 {
                r.topic_id = topic_id;
            } else {
                r.topic = topic;
            }
            r
        })
        .collect();
    let mut response = FetchResponse::default().with_responses(responses);
    if version >= 16 {
        response.node_endpoints = nodes::endpoints_of(shard, ctx.listener_name(), &leaders)
            .into_iter()
            .map(|(id, host, port)| {
                NodeEndpoint::default().with_node_id(BrokerId(id)).with_host(str_bytes(&host)).with_port(port)
            })
            .collect();
    }
    response
}

fn partition_data(partition: i32, g: Got) -> PartitionData {
    let records = match g.records.len() {
        0 => Bytes::new(),
        1 => g.records.into_iter().next().expect("one batch"),
        _ => {
            let mut b = BytesMut::with_capacity(g.bytes);
            for r in &g.records {
                b.extend_from_slice(r);
            }
            b.freeze()
        }
    };
    let aborted = g.aborted.map(|list| {
        list.into_iter()
            .map(|(producer_id, first_offset)| {
                AbortedTransaction::default().with_producer_id(ProducerId(producer_id)).with_first_offset(first_offset)
            })
            .collect()
    });
    PartitionData::default()
        .with_partition_index(partition)
        .with_error_code(g.error)
        .with_high_watermark(g.high_watermark)
        .with_last_stable_offset(g.last_stable_offset)
        .with_log_start_offset(g.log_start_offset)
        .with_aborted_transactions(aborted)
        .with_records(Some(records))
}

/// Keeps the response within `max_bytes`, but always the first batch found (KIP-74).
fn trim_to_max_bytes(got: &mut [Got], max_bytes: usize) {
    let mut used = 0;
    for g in got.iter_mut() {
        let mut keep = 0;
        for r in &g.records {
            if used > 0 && used + r.len() > max_bytes {
                break;
            }
            used += r.len();
            keep += 1;
        }
        g.records.truncate(keep);
        g.bytes = g.records.iter().map(|r| r.len()).sum();
    }
}

/// Reads every wanted partition on its owner. Each owner reads at most
/// `response_bytes_max` for the whole request (plus, as KIP-74 asks, the first batch
/// however large), so a fetch of many partitions with large per-partition limits
/// cannot make a shard hold more than that.
async fn read_all(shard: &Rc<Shard>, wants: &[(usize, Want)], response_bytes_max: usize) -> Vec<Got> {
    let items = wants.to_vec();
    scatter(shard, items, |wants| Read { wants, budget: response_bytes_max }).await
}

/// On an owner shard: reads its partitions of a fetch (`read_owned`).
pub struct Read {
    wants: Vec<Want>,
    budget: usize,
}

impl Serve for Read {
    async fn serve(self, shard: Rc<Shard>) -> Vec<Got> {
        read_owned(&shard, self.wants, self.budget).await
    }
}

/// Partitions one owner reads at once for a fetch: one task awaiting a thousand DMA
/// reads overflows glommio's count of wakers per task.
const READS_CONCURRENCY: usize = 64;

/// Reads one owner's partitions in request order, in windows (of at most
/// `READS_CONCURRENCY`) whose limits together fit what is left of the budget. Within a window the reads run concurrently:
/// catch-up reads are DMA reads, and one partition's disk latency must not queue the
/// others behind it. Once the budget is spent the rest answer without records.
async fn read_owned(shard: &Shard, wants: Vec<Want>, budget: usize) -> Vec<Got> {
    let mut out = Vec::with_capacity(wants.len());
    let mut left = budget;
    let mut first = true;
    let mut rest = wants.as_slice();
    while !rest.is_empty() {
        let mut window = 0;
        let mut reserved = 0;
        while window < rest.len()
            && window < READS_CONCURRENCY
            && (window == 0 || reserved + rest[window].max_bytes <= left)
        {
            reserved += rest[window].max_bytes.min(left);
            window += 1;
        }
        let reads = rest[..window]
            .iter()
            .map(|w| {
                let cap = if first { w.max_bytes } else { w.max_bytes.min(left) };
                read_one(shard, w, cap, first)
            })
            .collect();
        for got in keel_storage::join::join_all(reads).await {
            left = left.saturating_sub(got.bytes);
            first &= got.bytes == 0;
            out.push(got);
        }
        rest = &rest[window..];
    }
    out
}

/// Reads one partition: up to `max_bytes`, and at least one batch when `min_one` (the
/// first partition of the response to have data, KIP-74), even with a limit of 0.
async fn read_one(shard: &Shard, w: &Want, max_bytes: usize, min_one: bool) -> Got {
    let Some(p) = shard.partition(&w.topic, w.partition) else {
        return Got::failed(errors::NOT_LEADER_OR_FOLLOWER);
    };
    if p.unavailable(shard).is_some() {
        return Got::failed(errors::KAFKA_STORAGE_ERROR);
    }
    if let Some(error) = p.not_leader(shard).or_else(|| p.check_leader_epoch(w.current_leader_epoch)) {
        return Got::failed(error);
    }
    let (hw, start, end) = {
        let l = p.log.borrow();
        (l.high_watermark(), l.log_start_offset, l.log_end_offset())
    };
    let lso = p.last_stable_offset();
    let mut got = Got {
        error: errors::NONE,
        high_watermark: hw,
        last_stable_offset: lso,
        log_start_offset: start,
        aborted: w.committed.then(Vec::new),
        ..Got::default()
    };
    if max_bytes == 0 && !min_one {
        // Nothing to read, but the offset is checked all the same, as Kafka does.
        if w.offset < start || w.offset > end {
            return Got::failed(errors::OFFSET_OUT_OF_RANGE);
        }
        return got;
    }
    let upto = if w.committed { lso } else { hw };
    match log::read(&p.log, w.offset, max_bytes, upto).await {
        Ok(r) => {
            if w.committed {
                let end = r.batches.last().and_then(|b| keel_protocol::BatchHeader::parse(b).ok());
                if let Some(end) = end {
                    let aborted = p.aborted_between(w.offset, end.last_offset() + 1);
                    got.aborted = Some(aborted.into_iter().map(|a| (a.producer_id, a.first_offset)).collect());
                }
            }
            got.records = r.batches;
            got.bytes = r.bytes;
        }
        Err(e) => {
            if !matches!(e, keel_storage::StorageError::OffsetOutOfRange { .. }) {
                tracing::warn!(topic = %w.topic, partition = w.partition, offset = w.offset, error = %e, "fetch failed");
            }
            p.report(shard, &e);
            got = Got::failed(errors::storage_error_code(&e));
            // A replica is told the log start all the same (see `Want::replica`).
            if w.replica {
                got.log_start_offset = start;
            }
        }
    }
    got
}

/// Waits on each owner until any partition read there has data past what was read,
/// or until `left` passes; returns when the first owner answers. The other owners'
/// waits are cancelled then (as they are when the connection closes), so an answered
/// fetch holds no task or call slot on any shard.
async fn wait_any(shard: &Rc<Shard>, wants: &[(usize, Want)], got: &[Got], left: Duration) {
    let mut per_owner: Vec<Vec<(String, i32, i64, bool)>> = vec![Vec::new(); shard.count];
    for ((owner, w), g) in wants.iter().zip(got) {
        let next =
            g.records.last().and_then(|b| keel_protocol::BatchHeader::parse(b).ok()).map(|h| h.last_offset() + 1);
        per_owner[*owner].push((w.topic.clone(), w.partition, next.unwrap_or(w.offset), w.committed));
    }
    let mut waits: Vec<_> = per_owner
        .into_iter()
        .enumerate()
        .filter(|(_, parts)| !parts.is_empty())
        .map(|(owner, parts)| {
            let shard = shard.clone();
            Box::pin(async move { shard.call_cancellable(owner, Wait { parts, left }).await })
                as std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>
        })
        .collect();
    // Bounded here too: a wait may first queue for a mesh call slot.
    waits.push(Box::pin(glommio::timer::sleep(left)));
    crate::util::first_of(waits).await;
}

/// On an owner shard, cancelled when its caller stops waiting: waits until any of
/// `parts` (topic, partition, next offset, read_committed) has data past the offset,
/// or until `left` passes (`wait_local`).
pub struct Wait {
    parts: Vec<(String, i32, i64, bool)>,
    left: Duration,
}

impl Serve for Wait {
    async fn serve(self, shard: Rc<Shard>) {
        wait_local(&shard, self.parts, self.left).await
    }
}

async fn wait_local(shard: &Shard, parts: Vec<(String, i32, i64, bool)>, left: Duration) {
    let mut waits = Vec::new();
    for (topic, partition, offset, committed) in parts {
        let Some(p) = shard.partition(&topic, partition) else {
            return;
        };
        if p.unavailable(shard).is_some() || p.not_leader(shard).is_some() {
            return;
        }
        let readable = if committed { p.last_stable_offset() } else { p.log.borrow().high_watermark() };
        if readable > offset {
            return;
        }
        let l = p.log.borrow();
        waits.push(Box::pin(l.changed.wait()) as std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>);
    }
    waits.push(Box::pin(glommio::timer::sleep(left)));
    crate::util::first_of(waits).await;
}
