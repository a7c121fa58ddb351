//! The I/O shell around [`crate::transactions::state`], on each coordinator shard: routing a
//! transactional id's request to its shard, writing each new state to
//! `__transaction_state` before it counts, the markers of a decided transaction, the
//! timer that aborts transactions past their timeout, and reading the partitions'
//! state at start-up (single node) or when this node becomes their leader (cluster).

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::{Duration, Instant};

use keel_protocol::batch::Producer;

use super::markers::{self, Marker};
use super::requests::{AddWrittenPartition, DescribeTxn};
use crate::cluster::routing;
use crate::config::TRANSACTION_TOPIC;
use crate::errors;
use crate::shard::dispatch::Serve;
use crate::shard::partition::{now_ms, Partition};
use crate::shard::Shard;
use crate::transactions::records;
use crate::transactions::state::{Step, Then, TxnMeta, TxnPartition, EPOCH_MAX};
use crate::transactions::TxnCoordinator;
use crate::util::wait_below_high_watermark;

/// How often open transactions are checked against their timeouts (Kafka's
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms` is 10 s).
const TIMEOUT_CHECK: Duration = Duration::from_secs(1);
/// How often a shard compares the partitions it leads with those it holds.
const LEADERSHIP_CHECK: Duration = Duration::from_millis(50);
/// Longest wait for a new leader's log to be committed before loading.
const ELECTION_COMMIT_WAIT: Duration = Duration::from_secs(5);
/// How long EndTxn waits for the markers before answering with the outcome decided.
const END_WAIT: Duration = Duration::from_secs(5);
/// Longest wait of a state change for another one of the same id being written, and
/// of a partition joining a transaction (version 2) for its previous one to complete.
pub const BUSY_WAIT: Duration = Duration::from_secs(5);
const RETRY_MIN: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Serves the request `request` makes of `txn_id`'s `__transaction_state` partition
/// on that partition's shard, the id's coordinator shard, creating the topic if needed.
pub async fn on_coordinator<R: Serve>(
    shard: &Rc<Shard>,
    txn_id: &str,
    request: impl FnOnce(i32) -> R,
) -> Result<R::Reply, i16> {
    let (owner, partition) = routing::internal_owner(shard, TRANSACTION_TOPIC, txn_id).await?;
    Ok(shard.call(owner, request(partition)).await)
}

/// `txn_id`'s state as this node, its coordinator, holds it (None: unknown).
pub async fn describe(shard: &Rc<Shard>, txn_id: &str) -> Result<Option<TxnMeta>, i16> {
    let txn_id = txn_id.to_string();
    on_coordinator(shard, &txn_id.clone(), |partition| DescribeTxn { partition, txn_id }).await.and_then(|r| r)
}

/// Checked on the coordinator shard before any operation: the partition is ours (in
/// a cluster: this node leads it) and its transactional ids are loaded.
pub fn check(shard: &Shard, partition: i32) -> Result<(), i16> {
    let p = shard.partition(TRANSACTION_TOPIC, partition).ok_or(errors::NOT_COORDINATOR)?;
    if p.not_leader(shard).is_some() {
        return Err(errors::NOT_COORDINATOR);
    }
    let c = shard.txn.borrow();
    let loaded = match &p.replica {
        None => c.loaded,
        Some(_) => c.led.get(&partition) == Some(&p.leader_epoch()),
    };
    if loaded {
        Ok(())
    } else {
        Err(errors::COORDINATOR_LOAD_IN_PROGRESS)
    }
}

/// Marks an id busy while its new state is written; clears it when dropped.
struct Busy<'a> {
    shard: &'a Shard,
    txn_id: String,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut c = self.shard.txn.borrow_mut();
        c.busy.remove(&self.txn_id);
        c.settled.notify();
    }
}

/// Waits until `txn_id` is not busy (true), or up to `deadline` (false).
async fn settle(shard: &Shard, txn_id: &str, deadline: Instant) -> bool {
    loop {
        let settled = {
            let c = shard.txn.borrow();
            if !c.busy.contains(txn_id) {
                return true;
            }
            c.settled.clone()
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        futures_lite::future::or(settled.wait(), glommio::timer::sleep(left)).await;
    }
}

/// Writes `meta` as `txn_id`'s state and takes it in once durable.
async fn persist(shard: &Rc<Shard>, partition: i32, txn_id: &str, meta: TxnMeta) -> Result<(), i16> {
    let record = (records::encode_key(txn_id), Some(records::encode_value(&meta)));
    routing::append_internal(shard, TRANSACTION_TOPIC, partition, Producer::NONE, &[record]).await?;
    shard.txn.borrow_mut().txns.insert(txn_id.to_string(), meta);
    Ok(())
}

/// One transition of `txn_id`: `decide` sees its state (None: unknown) and returns the
/// step; its new state is written before this returns. A change of the same id being
/// written is waited for first: the produce requests of one transaction's partitions
/// join it concurrently (version 2). Markers the step calls for are written by a task
/// of their own, whose handle is returned (EndTxn waits on it).
pub async fn transition(
    shard: &Rc<Shard>,
    partition: i32,
    txn_id: &str,
    decide: impl FnOnce(Option<&TxnMeta>) -> Result<Step, i16>,
) -> Result<(TxnMeta, Option<glommio::task::JoinHandle<()>>), i16> {
    if !settle(shard, txn_id, Instant::now() + BUSY_WAIT).await {
        return Err(errors::CONCURRENT_TRANSACTIONS);
    }
    check(shard, partition)?;
    let (step, current) = {
        let c = shard.txn.borrow();
        let current = c.txns.get(txn_id).cloned();
        (decide(current.as_ref())?, current)
    };
    let Some(next) = step.persist else {
        return Ok((current.expect("a step without a new state keeps a known one"), None));
    };
    shard.txn.borrow_mut().busy.insert(txn_id.to_string());
    let busy = Busy { shard, txn_id: txn_id.to_string() };
    persist(shard, partition, txn_id, next.clone()).await?;
    drop(busy);
    let completion = match step.then {
        Then::Answer => None,
        Then::Markers { commit, epoch, partitions } => {
            let marker = Marker {
                producer_id: next.producer_id,
                producer_epoch: epoch,
                commit,
                coordinator_epoch: coordinator_epoch(shard, partition),
            };
            let task = complete(shard.clone(), partition, txn_id.to_string(), marker, partitions);
            Some(glommio::spawn_local(task).detach())
        }
    };
    Ok((next, completion))
}

/// Waits up to `END_WAIT` for a transaction's markers (EndTxn).
pub async fn wait_completed(completion: Option<glommio::task::JoinHandle<()>>) {
    if let Some(done) = completion {
        futures_lite::future::or(
            async {
                done.await;
            },
            glommio::timer::sleep(END_WAIT),
        )
        .await;
    }
}

/// The coordinator epoch markers carry: the leader epoch of the id's partition.
fn coordinator_epoch(shard: &Shard, partition: i32) -> i32 {
    shard.partition(TRANSACTION_TOPIC, partition).map_or(0, |p| p.leader_epoch())
}

/// Writes a decided transaction's markers, retrying each partition until it is
/// written (a deleted partition needs none), then records the transaction complete.
/// Stops if this shard stops coordinating the id: its new coordinator finishes it.
async fn complete(
    shard: Rc<Shard>,
    partition: i32,
    txn_id: String,
    marker: Marker,
    partitions: BTreeSet<TxnPartition>,
) {
    let mut left: Vec<TxnPartition> = partitions.into_iter().collect();
    let mut backoff = RETRY_MIN;
    while !left.is_empty() {
        if check(&shard, partition).is_err() {
            return;
        }
        let codes = markers::write(&shard, marker, &left).await;
        let failed: Vec<(TxnPartition, i16)> = left
            .into_iter()
            .zip(codes)
            .filter(|(_, code)| *code != errors::NONE && *code != errors::UNKNOWN_TOPIC_OR_PARTITION)
            .collect();
        if let Some((tp, code)) = failed.first() {
            tracing::debug!(%txn_id, topic = %tp.0, partition = tp.1, code, "a transaction marker will be retried");
            glommio::timer::sleep(backoff).await;
            backoff = (backoff * 2).min(RETRY_MAX);
        }
        left = failed.into_iter().map(|(tp, _)| tp).collect();
    }
    loop {
        let exhausted = shard.txn.borrow().txns.get(&txn_id).is_some_and(|m| m.producer_epoch >= EPOCH_MAX);
        let fresh_id = match exhausted {
            true => crate::cluster::requests::allocate_producer_id(&shard).await.ok(),
            false => None,
        };
        let done = {
            let c = shard.txn.borrow();
            let current = c.txns.get(&txn_id).filter(|m| m.status.preparing() && m.producer_id == marker.producer_id);
            current.map(|m| m.complete(now_ms(), fresh_id))
        };
        let Some(done) = done else { return };
        match persist(&shard, partition, &txn_id, done).await {
            Ok(()) => return,
            Err(code) => {
                if check(&shard, partition).is_err() {
                    return;
                }
                tracing::warn!(%txn_id, code, "recording a completed transaction failed; retrying");
                glommio::timer::sleep(RETRY_MAX).await;
            }
        }
    }
}

/// Start-up on each shard: read its unreplicated `__transaction_state` partitions (a
/// single node's) and finish what they left prepared, then start the timeout timer
/// and, in a cluster, the following of leadership.
pub async fn start(shard: &Rc<Shard>) {
    let owned = txn_partitions(shard, false);
    for p in &owned {
        let read = read_partition(p).await;
        shard.txn.borrow_mut().txns.extend(read);
    }
    shard.txn.borrow_mut().loaded = true;
    for p in &owned {
        resume(shard, p.index);
    }
    spawn_timer(shard);
    if shard.replication.is_some() {
        let weak = Rc::downgrade(shard);
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(LEADERSHIP_CHECK).await;
                let Some(shard) = weak.upgrade() else { return };
                follow(&shard).await;
            }
        })
        .detach();
    }
}

/// This shard's `__transaction_state` partitions, replicated or not.
fn txn_partitions(shard: &Shard, replicated: bool) -> Vec<Rc<Partition>> {
    let mut owned: Vec<Rc<Partition>> = shard
        .partitions
        .borrow()
        .iter()
        .filter(|((topic, _), p)| topic == TRANSACTION_TOPIC && p.replica.is_some() == replicated)
        .map(|(_, p)| p.clone())
        .collect();
    owned.sort_by_key(|p| p.index);
    owned
}

/// The transactional ids of one partition, as its log holds them up to the high
/// watermark (last record wins; a tombstone removes).
async fn read_partition(p: &Partition) -> Vec<(String, TxnMeta)> {
    let mut txns = std::collections::HashMap::new();
    let read = routing::for_each_record(p, |r| {
        let Some(id) = r.key.as_deref().and_then(records::decode_key) else { return };
        match r.value.as_deref().and_then(records::decode_value) {
            Some(meta) => txns.insert(id, meta),
            None => txns.remove(&id),
        };
    })
    .await;
    if let Err(e) = read {
        tracing::error!(partition = p.index, error = %e, "reading {TRANSACTION_TOPIC} stopped early");
    }
    txns.into_iter().collect()
}

/// Finishes the transactions of `partition` found prepared (markers not all known to
/// be written): a coordinator crashed or lost leadership between the two phases.
fn resume(shard: &Rc<Shard>, partition: i32) {
    let prepared: Vec<(String, TxnMeta)> = {
        let c = shard.txn.borrow();
        c.txns
            .iter()
            .filter(|(id, m)| m.status.preparing() && belongs(shard, id, partition))
            .map(|(id, m)| (id.clone(), m.clone()))
            .collect()
    };
    for (id, m) in prepared {
        let marker = Marker {
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            commit: m.status == crate::transactions::state::TxnStatus::PrepareCommit,
            coordinator_epoch: coordinator_epoch(shard, partition),
        };
        tracing::info!(txn_id = %id, commit = marker.commit, "finishing a prepared transaction");
        glommio::spawn_local(complete(shard.clone(), partition, id, marker, m.partitions)).detach();
    }
}

fn belongs(shard: &Shard, txn_id: &str, partition: i32) -> bool {
    routing::internal_partition_of(shard, TRANSACTION_TOPIC, txn_id) == Some(partition)
}

fn spawn_timer(shard: &Rc<Shard>) {
    let weak = Rc::downgrade(shard);
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(TIMEOUT_CHECK).await;
            let Some(shard) = weak.upgrade() else { return };
            abort_timed_out(&shard).await;
        }
    })
    .detach();
}

/// Aborts, under a new epoch, every open transaction past its timeout.
async fn abort_timed_out(shard: &Rc<Shard>) {
    let now = now_ms();
    let expired: Vec<String> = {
        let c = shard.txn.borrow();
        c.txns.iter().filter(|(_, m)| m.expire(now).is_some()).map(|(id, _)| id.clone()).collect()
    };
    for id in expired {
        let Some(partition) = routing::internal_partition_of(shard, TRANSACTION_TOPIC, &id) else { continue };
        let decide = |m: Option<&TxnMeta>| m.and_then(|m| m.expire(now)).ok_or(errors::INVALID_TXN_STATE);
        match transition(shard, partition, &id, decide).await {
            Ok(_) => tracing::info!(txn_id = %id, "aborted a transaction past its timeout"),
            Err(code) => tracing::debug!(txn_id = %id, code, "a timed-out transaction is not aborted yet"),
        }
    }
}

/// In a cluster: loads the partitions this shard has come to lead, drops those it no
/// longer leads (as the group coordinator follows `__consumer_offsets`).
async fn follow(shard: &Rc<Shard>) {
    let partitions = txn_partitions(shard, true);
    let gone: Vec<i32> = {
        let c = shard.txn.borrow();
        c.led.keys().filter(|i| !partitions.iter().any(|p| p.index == **i)).copied().collect()
    };
    for index in gone {
        unload(shard, index);
    }
    for p in partitions {
        let leads = p.not_leader(shard).is_none();
        let epoch = p.leader_epoch();
        let held = shard.txn.borrow().led.get(&p.index).copied();
        if held.is_some() && (!leads || held != Some(epoch)) {
            unload(shard, p.index);
        }
        if leads && held != Some(epoch) {
            load(shard, &p, epoch).await;
        }
    }
}

async fn load(shard: &Rc<Shard>, p: &Partition, epoch: i32) {
    let started = Instant::now();
    let still_leads = || p.not_leader(shard).is_none() && p.leader_epoch() == epoch;
    let end = p.log.borrow().log_end_offset();
    if end > 0 {
        let deposed = || (!still_leads()).then_some(errors::NOT_LEADER_OR_FOLLOWER);
        if wait_below_high_watermark(&p.log, end - 1, ELECTION_COMMIT_WAIT, deposed).await.is_err() {
            return;
        }
    }
    let read = read_partition(p).await;
    if !still_leads() {
        return;
    }
    {
        let mut c = shard.txn.borrow_mut();
        tracing::info!(
            partition = p.index,
            epoch,
            ids = read.len(),
            ms = started.elapsed().as_millis() as u64,
            "loaded the transactional ids of {TRANSACTION_TOPIC}-{} as its leader",
            p.index
        );
        c.txns.extend(read);
        c.led.insert(p.index, epoch);
    }
    resume(shard, p.index);
}

fn unload(shard: &Shard, index: i32) {
    let mut c = shard.txn.borrow_mut();
    c.led.remove(&index);
    let TxnCoordinator { txns, .. } = &mut *c;
    txns.retain(|id, _| !belongs(shard, id, index));
    tracing::info!(partition = index, "unloaded the transactional ids of {TRANSACTION_TOPIC}-{index}");
}

/// How long a partition leader waits for a coordinator on another node to confirm.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// KIP-890, asked by a partition leader before a transactional batch begins a
/// transaction there. Without `add` (protocol version 1) it verifies: `txn_id`'s
/// coordinator must hold an Ongoing transaction of this producer and epoch that
/// includes `tp`, else INVALID_TXN_STATE (a late retry of an ended transaction, which
/// would otherwise open a transaction no marker ever ends and pin the LSO). With `add`
/// (version 2, where the write itself joins the partition to the transaction) the
/// coordinator adds it, beginning the transaction if none is open, and an epoch the
/// last end moved past is fenced. Epoch errors come back as INVALID_PRODUCER_EPOCH,
/// and NOT_ENOUGH_REPLICAS (retriable) when the coordinator cannot be asked, as Kafka
/// answers a Produce.
pub async fn verify(
    shard: &Rc<Shard>,
    txn_id: &str,
    producer_id: i64,
    epoch: i16,
    tp: TxnPartition,
    add: bool,
) -> Result<(), i16> {
    let produce_code = |code: i16| match code {
        errors::PRODUCER_FENCED | errors::INVALID_PRODUCER_EPOCH => errors::INVALID_PRODUCER_EPOCH,
        errors::INVALID_TXN_STATE | errors::INVALID_PRODUCER_ID_MAPPING => code,
        _ => errors::NOT_ENOUGH_REPLICAS,
    };
    let (node, host, port) =
        routing::coordinator_node(shard, TRANSACTION_TOPIC, txn_id).await.map_err(|_| errors::NOT_ENOUGH_REPLICAS)?;
    let local = node == shard.config.node_id;
    if add {
        let added = match local {
            true => {
                let txn_id = txn_id.to_string();
                on_coordinator(shard, &txn_id.clone(), |partition| AddWrittenPartition {
                    partition,
                    txn_id,
                    producer_id,
                    epoch,
                    tp,
                })
                .await
                .and_then(|r| r)
            }
            false => {
                let deadline = Instant::now() + BUSY_WAIT;
                loop {
                    match add_remote(&format!("{host}:{port}"), txn_id, producer_id, epoch, &tp).await {
                        Err(errors::CONCURRENT_TRANSACTIONS) if Instant::now() < deadline => {
                            glommio::timer::sleep(RETRY_MIN).await
                        }
                        answer => break answer,
                    }
                }
            }
        };
        return added.map_err(produce_code);
    }
    let found = if local {
        describe(shard, txn_id).await.map_err(produce_code)?
    } else {
        describe_remote(&format!("{host}:{port}"), txn_id).await.map_err(produce_code)?
    };
    match found {
        Some(m) if m.producer_id == producer_id && m.producer_epoch > epoch => Err(errors::INVALID_PRODUCER_EPOCH),
        Some(m)
            if m.producer_id == producer_id
                && m.producer_epoch == epoch
                && m.status == crate::transactions::state::TxnStatus::Ongoing
                && m.partitions.contains(&tp) =>
        {
            Ok(())
        }
        _ => Err(errors::INVALID_TXN_STATE),
    }
}

/// Adds `tp` to `txn_id`'s transaction on its coordinator on another node, with the
/// client form of AddPartitionsToTxn (the coordinator's answer is the same).
async fn add_remote(addr: &str, txn_id: &str, producer_id: i64, epoch: i16, tp: &TxnPartition) -> Result<(), i16> {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, ProducerId, TopicName, TransactionalId,
    };
    let str_bytes = crate::util::str_bytes;
    let request = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(str_bytes(txn_id)))
        .with_v3_and_below_producer_id(ProducerId(producer_id))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(TopicName(str_bytes(&tp.0)))
            .with_partitions(vec![tp.1])]);
    let response: AddPartitionsToTxnResponse =
        crate::outbound::call(addr, ApiKey::AddPartitionsToTxn, 3, &request, 1 << 20, VERIFY_TIMEOUT)
            .await
            .map_err(|_| errors::COORDINATOR_NOT_AVAILABLE)?;
    let code = response
        .results_by_topic_v3_and_below
        .first()
        .and_then(|t| t.results_by_partition.first())
        .map_or(errors::COORDINATOR_NOT_AVAILABLE, |p| p.partition_error_code);
    match code {
        errors::NONE => Ok(()),
        code => Err(code),
    }
}

/// A transactional id's state as its coordinator on another node describes it.
async fn describe_remote(addr: &str, txn_id: &str) -> Result<Option<TxnMeta>, i16> {
    use kafka_protocol::messages::{
        ApiKey, DescribeTransactionsRequest, DescribeTransactionsResponse, TransactionalId,
    };
    let request = DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![TransactionalId(crate::util::str_bytes(txn_id))]);
    let response: DescribeTransactionsResponse =
        crate::outbound::call(addr, ApiKey::DescribeTransactions, 0, &request, 1 << 20, VERIFY_TIMEOUT)
            .await
            .map_err(|_| errors::COORDINATOR_NOT_AVAILABLE)?;
    let Some(s) = response.transaction_states.into_iter().next() else {
        return Err(errors::COORDINATOR_NOT_AVAILABLE);
    };
    match s.error_code {
        errors::NONE => {}
        errors::TRANSACTIONAL_ID_NOT_FOUND => return Ok(None),
        code => return Err(code),
    }
    let Some(status) = crate::transactions::state::TxnStatus::from_name(&s.transaction_state) else {
        return Err(errors::COORDINATOR_NOT_AVAILABLE);
    };
    let partitions =
        s.topics.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.topic.0.to_string(), *p))).collect();
    Ok(Some(TxnMeta {
        producer_id: s.producer_id.0,
        producer_epoch: s.producer_epoch,
        timeout_ms: s.transaction_timeout_ms,
        status,
        partitions,
        start_ms: s.transaction_start_time_ms,
        last_update_ms: -1,
    }))
}
