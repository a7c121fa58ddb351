//! A partition owned by this shard: its log, its idempotent-producer state and the
//! topic settings its produce path checks. Lives only on its owner shard.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_protocol::batch::{self, BatchError, BatchHeader};
use keel_storage::log::{self, PartitionLog};
use keel_storage::StorageError;
use uuid::Uuid;

use super::partition_dir::{choose_dir, claim_dir, dir_owner_key, partition_dir, DirOwner};
pub use super::produce_outcome::{ProduceOutcome, TxnWrite};
use super::producer_state::{ProducerStates, SeqBatch, SeqCheck};
use super::txn_log::{AbortedTxn, PartitionTxns, TxnChange};
use super::txn_store::{aborted_key, load_txns, persist_txn, rewrite_txns, txn_changes};
use super::Shard;
use crate::errors;
use crate::metadata::configs::TopicSettings;
use crate::metadata::{Metadata, TopicMeta};
use crate::replication::shell::ReplicaHooks;

/// Leader epoch of every partition on a single node.
pub const LEADER_EPOCH: i32 = 0;
/// Appended bytes a partition may hold before they are written; past it, produce
/// waits for the flush loop.
pub const UNFLUSHED_BYTES_MAX: usize = 16 << 20;

pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    pub log: Rc<RefCell<PartitionLog>>,
    /// Which of the shard's data directories holds the partition's files.
    pub dir_index: std::cell::Cell<usize>,
    /// A move to another data directory in progress (see `log_move`).
    moving: RefCell<Option<Move>>,
    /// Appends wait while a move switches the log.
    fenced: std::cell::Cell<bool>,
    unfenced: Rc<keel_storage::Signal>,
    producers: Rc<RefCell<ProducerStates>>,
    /// Transactions on this partition: open ones, aborted ranges, the LSO.
    txns: Rc<RefCell<PartitionTxns>>,
    /// Where the transaction state is persisted (the partition's state-store keys).
    txn_keys: keel_storage::state::StateKeys,
    /// Producers whose next transaction here the coordinator confirmed (producer id →
    /// epoch): a transactional batch may begin a transaction only with this entry,
    /// which the batch or the producer's next marker takes away (KIP-890's
    /// verification guard). A retry arriving after its transaction ended finds none,
    /// asks again, and is refused, so it cannot open a transaction nobody will end.
    verified: RefCell<std::collections::HashMap<i64, i16>>,
    /// Each producer's batches append in the order their requests arrived.
    turns: super::producer_turns::ProducerTurns,
    settings: RefCell<TopicSettings>,
    /// The partition's Raft group on this node, when its topic is replicated.
    pub replica: Option<Rc<crate::replication::shell::Replica>>,
    /// A replicated partition: the highest log start offset committed (DeleteRecords).
    committed_log_start: Rc<std::cell::Cell<i64>>,
    /// Why this replica's log cannot be trusted (a batch failed its CRC): it then
    /// serves nothing and has left its Raft group here (see [`super::scrub`]).
    damaged: RefCell<Option<String>>,
}

/// A move of a partition to another data directory.
struct Move {
    target: usize,
    /// Bytes copied so far (DescribeLogDirs shows them as the future replica's size).
    copied: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// Produce errors of a producer's sequence or epoch, answered with the log start offset
/// (Kafka answers its other refusals without one).
const SEQUENCE_ERRORS: [i16; 3] =
    [errors::OUT_OF_ORDER_SEQUENCE_NUMBER, errors::INVALID_PRODUCER_EPOCH, errors::INVALID_TXN_STATE];

/// What `append_batches` did: the first batch's offset (an original offset for a
/// retried duplicate), the last offset appended (-1 when every batch was a duplicate),
/// the Raft term it was proposed in, a transaction it began, and for a request that was
/// only a retry, the max timestamp of the batch first written.
struct Appended {
    base_offset: i64,
    last_offset: i64,
    term: u64,
    begun: Option<TxnChange>,
    retried_batch_time: Option<i64>,
}

/// Prefix of a partition's keys in the shard's state store: the topic id, so a topic
/// re-created under the same name never reads the old one's state.
pub(crate) fn state_prefix(topic_id: Uuid, index: i32) -> String {
    format!("{STATE_PREFIX}{topic_id}/{index}/")
}

/// Where every partition's keys start in the shard's state store.
pub const STATE_PREFIX: &str = "partition/";

/// A partition's name in the shard journal's records: its topic id and index.
pub(crate) fn journal_key(topic_id: Uuid, index: i32) -> Bytes {
    let mut key = Vec::with_capacity(20);
    key.extend_from_slice(topic_id.as_bytes());
    key.extend_from_slice(&index.to_be_bytes());
    key.into()
}

impl Partition {
    pub async fn open(
        shard: &Shard,
        name: &str,
        topic: &TopicMeta,
        index: i32,
        meta: &Metadata,
    ) -> Result<Partition, StorageError> {
        let dir_name = format!("{name}-{index}");
        let recorded = shard.kv.get(&dir_owner_key(&dir_name)).map(|v| DirOwner::parse(&v));
        let recorded = recorded.unwrap_or_default();
        let dir_index = choose_dir(shard, &dir_name, &recorded).await?;
        let data_dir = shard.dirs.get(dir_index).path.clone();
        if let Some(e) = shard.dirs.unavailable(dir_index) {
            return Err(StorageError::io("open partition", &data_dir, std::io::Error::other(e)));
        }
        let dir = partition_dir(&data_dir, name, index);
        claim_dir(shard, &dir, &data_dir, &recorded, topic.id, (meta.version, &meta.cluster_id)).await?;
        let settings = TopicSettings::resolve(&topic.configs, &meta.broker_configs);
        let mut config = shard.log_config.clone();
        config.segment_bytes_max = settings.segment_bytes;
        config.segment_ms_max = settings.segment_ms;
        let mut producers = ProducerStates::new(&shard.producers);
        let keys = shard.kv.keys(&state_prefix(topic.id, index));
        let journal = shard.flush.journal().expect("a shard's flush loop has a journal");
        let key = journal_key(topic.id, index);
        let remember = |h: &BatchHeader| remember_producer(&mut producers, h);
        let (log, _) = PartitionLog::open_journaled(&dir, config, Some(keys), journal, key, remember).await?;
        let log = Rc::new(RefCell::new(log));
        shard.cache.adopt(&log);
        shard.flush.register(&log);
        let producers = Rc::new(RefCell::new(producers));
        let txn_keys = shard.kv.keys(&state_prefix(topic.id, index));
        let txns = Rc::new(RefCell::new(load_txns(&txn_keys, log.borrow().log_end_offset())));
        let committed_log_start = Rc::new(std::cell::Cell::new(-1));
        let mut damaged = None;
        let replica = match (topic.replicas_of(index), &shard.replication) {
            (Some(replicas), Some(replication)) => {
                // A replica a reassignment adds starts with no members: it waits for
                // its leader's snapshot, which names them.
                let node = shard.config.node_id;
                let voters =
                    if replicas.contains(&node) { replicas.iter().map(|n| *n as u64).collect() } else { Vec::new() };
                let on_append = {
                    let (producers, txns, keys) = (producers.clone(), txns.clone(), txn_keys.clone());
                    Box::new(move |h: &BatchHeader, b: &[u8]| {
                        remember_producer(&mut producers.borrow_mut(), h);
                        if h.is_control() {
                            producers.borrow_mut().end_epoch(h.producer_id, h.producer_epoch, h.max_timestamp);
                        }
                        // Written with the Raft records of this pass, before the batch
                        // is acknowledged: a follower elected after a crash knows it.
                        txns.borrow_mut().on_batch(h, b).map(|change| txn_changes(&keys, change)).unwrap_or_default()
                    }) as _
                };
                let on_truncate = {
                    let (producers, txns, keys) = (producers.clone(), txns.clone(), txn_keys.clone());
                    Box::new(move |offset: i64| {
                        producers.borrow_mut().truncate_from(offset);
                        txns.borrow_mut().truncate_from(offset);
                        let (keys, txns) = (keys.clone(), txns.clone());
                        glommio::spawn_local(async move { rewrite_txns(&keys, &txns).await }).detach();
                    }) as _
                };
                let on_log_start = {
                    let (committed, log) = (committed_log_start.clone(), log.clone());
                    Box::new(move |offset: i64| {
                        committed.set(committed.get().max(offset));
                        let log = log.clone();
                        glommio::spawn_local(async move { advance_log_start(&log, offset).await }).detach();
                    }) as _
                };
                let hooks = ReplicaHooks {
                    on_append: Some(on_append),
                    on_truncate: Some(on_truncate),
                    on_log_start: Some(on_log_start),
                    on_commit: None,
                };
                let group = group_id(topic.id, index);
                let (replica, why) = replication.add_group(group, log.clone(), voters, hooks).await.map_err(|e| {
                    StorageError::io("start the partition's Raft group", &dir, std::io::Error::other(e))
                })?;
                damaged = why;
                Some(replica)
            }
            _ => None,
        };
        let p = Partition {
            topic: name.to_string(),
            topic_id: topic.id,
            index,
            log,
            dir_index: std::cell::Cell::new(dir_index),
            moving: RefCell::new(None),
            fenced: std::cell::Cell::new(false),
            unfenced: keel_storage::Signal::new(),
            producers,
            txns,
            txn_keys,
            verified: RefCell::new(Default::default()),
            turns: Default::default(),
            settings: RefCell::new(settings),
            replica,
            committed_log_start,
            damaged: RefCell::new(None),
        };
        if let Some(why) = damaged {
            p.set_damaged(shard, why);
        }
        Ok(p)
    }

    pub fn update_settings(&self, topic: &BTreeMap<String, String>, broker: &BTreeMap<String, String>) {
        let s = TopicSettings::resolve(topic, broker);
        let mut log = self.log.borrow_mut();
        log.config.segment_bytes_max = s.segment_bytes;
        log.config.segment_ms_max = s.segment_ms;
        drop(log);
        *self.settings.borrow_mut() = s;
    }

    /// Why the partition cannot serve (its data directory, or its shard's journal
    /// directory, failed), if it cannot.
    pub fn unavailable(&self, shard: &Shard) -> Option<String> {
        self.damaged.borrow().clone().or_else(|| shard.dirs.unavailable(self.dir_index.get()))
    }

    /// Reports a storage error met while serving: a failed directory goes offline, and
    /// a corrupt batch in a replica's log takes that replica out.
    pub fn report(&self, shard: &Shard, e: &StorageError) {
        if matches!(e, StorageError::Corrupt { .. }) && self.replica.is_some() {
            self.set_damaged(shard, e.to_string());
        }
        shard.storage_error(self.dir_index.get(), e);
    }

    /// Takes a replica whose log failed a CRC check (or lost durable records, found at
    /// open) out of service on this node: it answers KAFKA_STORAGE_ERROR and its Raft
    /// group stops here, or never starts, so it neither votes nor leads. Its group's record stays: the replica is damaged, not removed, and
    /// the node asks for it to be rebuilt from its leader ([`rebuild`]).
    ///
    /// [`rebuild`]: super::Upcalls::ask_rebuild
    pub fn set_damaged(&self, shard: &Shard, why: String) {
        if self.damaged.borrow().is_some() {
            return;
        }
        tracing::error!(topic = %self.topic, partition = self.index, %why,
            "damaged replica: its Raft group stops (or never starts) on this node; it serves nothing until it is rebuilt");
        *self.damaged.borrow_mut() = Some(format!("damaged replica: {why}"));
        if let (Some(r), Some(replication)) = (&self.replica, &shard.replication) {
            replication.stop_group(r.group);
            (shard.upcalls.ask_rebuild)(shard.me.clone(), self.topic.clone(), self.index, r.group);
        }
    }

    pub fn is_damaged(&self) -> bool {
        self.damaged.borrow().is_some()
    }

    /// A move to another data directory in progress: its target and the bytes copied.
    pub fn move_progress(&self) -> Option<(usize, u64)> {
        self.moving.borrow().as_ref().map(|m| (m.target, m.copied.load(std::sync::atomic::Ordering::Relaxed)))
    }

    /// Starts a move to `target` unless one is running; false if one is.
    pub(crate) fn begin_move(&self, target: usize) -> bool {
        let mut moving = self.moving.borrow_mut();
        if moving.is_some() {
            return false;
        }
        *moving = Some(Move { target, copied: Default::default() });
        true
    }

    /// The running move's copied-bytes counter (written by the blocking thread).
    pub(crate) fn move_counter(&self) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        self.moving.borrow().as_ref().expect("a move is running").copied.clone()
    }

    pub(crate) fn fence(&self) {
        self.fenced.set(true);
    }

    pub(crate) fn unfence(&self) {
        self.fenced.set(false);
        self.unfenced.notify();
    }

    /// Ends the running move; the fence is lifted unless `unfence` is false (a move
    /// that could not restore its source's record keeps appends out for good).
    pub(crate) fn end_move(&self, unfence: bool) {
        *self.moving.borrow_mut() = None;
        if unfence {
            self.unfence();
        }
    }

    /// Opens the partition's log from its files in `dir` (a move's copy), as `open`
    /// does; producer state is kept in memory already, so batches are not revisited.
    pub(crate) async fn reopen_at(&self, shard: &Shard, dir: &std::path::Path) -> Result<PartitionLog, StorageError> {
        let settings = self.settings();
        let mut config = shard.log_config.clone();
        config.segment_bytes_max = settings.segment_bytes;
        config.segment_ms_max = settings.segment_ms;
        let keys = shard.kv.keys(&state_prefix(self.topic_id, self.index));
        let journal = shard.flush.journal().expect("a shard's flush loop has a journal");
        let key = journal_key(self.topic_id, self.index);
        let (log, _) = PartitionLog::open_journaled(dir, config, Some(keys), journal, key, |_| {}).await?;
        Ok(log)
    }

    /// The topic settings in force (retention and compaction read them).
    /// A replicated partition: moves the log start offset to the committed one (the
    /// housekeeping pass retries what the commit could not do at once).
    pub async fn advance_log_start(&self) {
        advance_log_start(&self.log, self.committed_log_start.get()).await;
    }

    pub fn settings(&self) -> TopicSettings {
        self.settings.borrow().clone()
    }

    /// Idempotent producers this partition remembers (for `/metrics`).
    pub fn producer_count(&self) -> usize {
        self.producers.borrow().len()
    }

    /// Flushes the log and writes its clean-shutdown checkpoint, so the next start
    /// skips the recovery scan. For an orderly stop, after the last append.
    pub async fn close(&self) -> Result<(), StorageError> {
        keel_storage::recovery::close(&self.log).await
    }

    /// Removes the partition's files and its state (its topic was deleted, or its
    /// replica moved off this node).
    pub async fn remove(&self, shard: &Shard) {
        let dir = self.log.borrow().dir().to_path_buf();
        log::release_files(&self.log).await;
        let target = dir.clone();
        if let Err(e) = glommio::executor().spawn_blocking(move || std::fs::remove_dir_all(&target)).await {
            tracing::error!(dir = %dir.display(), error = %e, "removing a deleted partition failed");
        }
        // Durable before the records go, and the directory owner last: a crash in
        // between leaves the owner record, from which the next start removes what is
        // left (`remove_leftover_partitions`).
        if let Some(parent) = dir.parent() {
            if let Err(e) = keel_storage::disk::sync_dir(parent).await {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot fsync the directory of a removed partition");
            }
        }
        if let Err(e) = shard.kv.keys(&state_prefix(self.topic_id, self.index)).remove_all().await {
            tracing::error!(dir = %dir.display(), error = %e, "removing a deleted partition's state failed");
        }
        let name = format!("{}-{}", self.topic, self.index);
        if let Err(e) = shard.kv.delete(&dir_owner_key(&name)).await {
            tracing::error!(dir = %dir.display(), error = %e, "removing a deleted partition's directory owner failed");
        }
    }

    /// Validates, deduplicates and appends the batches of one produce partition, then
    /// waits for durability when `acks == -1`. `txn` is the request's transactional
    /// id: a transactional batch that would begin a transaction here is first
    /// verified with that id's coordinator, or, with transaction protocol version 2
    /// (`TxnWrite::add`), added to the transaction by it (None: the broker's own
    /// writes, not verified).
    pub async fn produce(
        &self,
        shard: &Rc<Shard>,
        records: Bytes,
        acks: i16,
        timeout: Duration,
        txn: Option<&TxnWrite>,
    ) -> ProduceOutcome {
        let transactional_id = txn.map(|t| t.id.as_str());
        if let Some(why) = self.unavailable(shard) {
            return ProduceOutcome::error(errors::KAFKA_STORAGE_ERROR, why);
        }
        if let Some(code) = self.not_leader(shard) {
            return ProduceOutcome::error(code, "this node does not lead the partition");
        }
        let settings = self.settings.borrow().clone();
        if acks == -1 {
            let in_sync = self.in_sync_count(shard);
            if in_sync < settings.min_insync_replicas {
                return ProduceOutcome::error(
                    errors::NOT_ENOUGH_REPLICAS,
                    format!(
                        "{in_sync} in-sync replicas of {}-{}, fewer than min.insync.replicas {}",
                        self.topic, self.index, settings.min_insync_replicas
                    ),
                );
            }
        }
        let batches =
            match batch::split_and_validate(&records) {
                // Produce v3+ carries exactly one batch per partition (Kafka's check).
                Ok(b) if b.len() != 1 => return ProduceOutcome::error(
                    errors::INVALID_RECORD,
                    "Produce requests with version 3 and above are only allowed to contain exactly one record batch",
                ),
                Ok(b) => b,
                Err(e) => return ProduceOutcome::error(batch_error_code(&e), e.to_string()),
            };
        let batches = match recompress_for_topic(batches, settings.compression) {
            Ok(b) => b,
            Err(e) => return ProduceOutcome::error(errors::CORRUPT_MESSAGE, e),
        };
        if let Some((_, b)) = batches.iter().find(|(_, b)| b.len() > settings.max_message_bytes) {
            return ProduceOutcome::error(
                errors::MESSAGE_TOO_LARGE,
                format!("batch of {} bytes exceeds max.message.bytes {}", b.len(), settings.max_message_bytes),
            );
        }
        if batches.iter().any(|(h, _)| h.is_control()) {
            return ProduceOutcome::error(
                errors::INVALID_RECORD,
                "Client produce requests should not have control records",
            );
        }
        if batches.iter().any(|(h, _)| h.is_transactional() && !h.has_producer_id()) {
            return ProduceOutcome::error(errors::INVALID_RECORD, "a transactional batch without a producer id");
        }
        if settings.cleanup_compact {
            if let Some(refused) = refuse_keyless(&self.topic, self.index, &batches) {
                // Refused in the log's own check: Kafka reports the log start then.
                return ProduceOutcome { log_start_offset: self.log.borrow().log_start_offset, ..refused };
            }
        }
        // Taken before this request's first await; held until its batches are appended.
        let turn = batches.first().filter(|(h, _)| h.has_producer_id()).map(|(h, _)| self.turns.take(h.producer_id));
        if let Some(turn) = &turn {
            turn.wait().await;
        }
        if let (Some(txn_id), Some((h, _))) = (transactional_id, batches.first()) {
            let (pid, epoch) = (h.producer_id, h.producer_epoch);
            let known = self.txn_open_under(pid, epoch) || self.verified.borrow().get(&pid) == Some(&epoch);
            if h.is_transactional() && !known {
                let tp = (self.topic.clone(), self.index);
                let add = txn.is_some_and(|t| t.add);
                // Boxed: the coordinator's own writes come back through `produce`.
                if let Err(code) = (shard.upcalls.verify_transaction)(shard, txn_id, pid, epoch, tp, add).await {
                    return ProduceOutcome::error(
                        code,
                        format!("transaction {txn_id} does not include {}-{}", self.topic, self.index),
                    );
                }
                self.verified.borrow_mut().insert(pid, epoch);
            }
        }
        let newest = batches.iter().map(|(h, _)| h.max_timestamp).max().unwrap_or(-1);
        let incoming_timestamp = if settings.log_append_time { now_ms() } else { newest };
        let deadline = Instant::now() + timeout;
        if let Err(refused) = self.ready_to_append(shard, records.len(), incoming_timestamp, deadline).await {
            return refused;
        }
        let append_time = settings.log_append_time.then(now_ms);
        let Appended { base_offset, last_offset, term, begun, retried_batch_time } =
            match self.append_batches(shard, &batches, append_time, transactional_id.is_some()) {
                Ok(appended) => appended,
                // A producer's sequence or epoch refused: Kafka reports the log start.
                Err(refused) if SEQUENCE_ERRORS.contains(&refused.error) => {
                    return ProduceOutcome { log_start_offset: self.log.borrow().log_start_offset, ..refused };
                }
                Err(refused) => return refused,
            };
        drop(turn);
        // A transaction's first batch here is recorded durably before it is
        // acknowledged: after a crash the LSO must still stop at it.
        if let Some(change) = begun {
            persist_txn(&self.txn_keys, change).await;
        }
        match (&self.replica, &shard.replication) {
            // acks=-1 on a replicated partition: a majority has it durably.
            (Some(r), Some(replication)) => {
                if acks == -1 && last_offset >= 0 {
                    if let Err(code) = replication.wait_committed(r.group, term, last_offset, timeout).await {
                        return ProduceOutcome::error(code, "not committed by a majority of replicas");
                    }
                }
            }
            _ => {
                if last_offset >= 0 {
                    shard.flush.appended(&self.log);
                }
                // With write caching (opt-in per topic) acks=-1 is answered once
                // appended; the flush loop still writes it within one pass.
                if acks == -1 && last_offset >= 0 && !settings.write_caching {
                    if let Err(code) = self.wait_durable(last_offset, timeout).await {
                        return ProduceOutcome::error(code, "not durable before the request timed out");
                    }
                }
                // acks=0 is never answered, so waiting costs its producer nothing, and
                // a read behind it on its connection (which waits for it) sees its
                // records, as a single Kafka broker shows them at once (with write
                // caching too: the high watermark still waits for the fsync). A wait
                // that times out is no error: the records are appended.
                if acks == 0 && last_offset >= 0 {
                    let _ = self.wait_durable(last_offset, timeout).await;
                }
            }
        }
        ProduceOutcome {
            error: errors::NONE,
            message: None,
            base_offset,
            // A retried batch is answered with its first write's time, as Kafka does.
            log_append_time: retried_batch_time.or(append_time).unwrap_or(-1),
            log_start_offset: self.log.borrow().log_start_offset,
            record_errors: Vec::new(),
        }
    }

    /// The partition's single append path. It checks every batch of the request
    /// against the idempotent-producer state first and refuses the whole request if
    /// one is out of order or fenced, then appends the new batches. It is not `async`:
    /// nothing can run on this shard between the checks and the appends, so two
    /// requests can never interleave their checks and appends.
    fn append_batches(
        &self,
        shard: &Shard,
        batches: &[(BatchHeader, Bytes)],
        append_time: Option<i64>,
        verify: bool,
    ) -> Result<Appended, ProduceOutcome> {
        let mut decisions = Vec::with_capacity(batches.len());
        let mut previous: Option<&BatchHeader> = None;
        for (h, _) in batches {
            // A batch following another of the same producer in this request is
            // checked against that one, as if it had been appended.
            let check = match previous {
                Some(p) if h.has_producer_id() && p.producer_id == h.producer_id && h.base_sequence >= 0 => {
                    let expected = p.last_sequence().wrapping_add(1).max(0);
                    if p.producer_epoch != h.producer_epoch || h.base_sequence != expected {
                        SeqCheck::OutOfOrder { expected }
                    } else {
                        SeqCheck::Append
                    }
                }
                _ => self.check_sequence(h),
            };
            match check {
                SeqCheck::OutOfOrder { expected } => {
                    return Err(ProduceOutcome::error(
                        errors::OUT_OF_ORDER_SEQUENCE_NUMBER,
                        format!("sequence {} for producer {}, expected {expected}", h.base_sequence, h.producer_id),
                    ))
                }
                SeqCheck::FencedEpoch { current } => {
                    return Err(ProduceOutcome::error(
                        errors::INVALID_PRODUCER_EPOCH,
                        format!("epoch {} is older than {current}", h.producer_epoch),
                    ))
                }
                SeqCheck::Append => previous = Some(h),
                SeqCheck::Duplicate { .. } => previous = None,
            }
            decisions.push(check);
        }
        if let Some((h, _)) = batches.iter().find(|(h, _)| verify && h.is_transactional()) {
            // Checked again with no await before the append: a marker may have ended
            // the transaction (and taken the guard) while this request waited. A
            // retried batch already in the log is answered as the duplicate it is.
            let open = self.txn_open_under(h.producer_id, h.producer_epoch);
            let guarded = self.verified.borrow_mut().remove(&h.producer_id) == Some(h.producer_epoch);
            let replayed = decisions.iter().all(|d| matches!(d, SeqCheck::Duplicate { .. }));
            if !open && !guarded && !replayed {
                return Err(ProduceOutcome::error(
                    errors::INVALID_TXN_STATE,
                    "the transaction ended before this batch",
                ));
            }
        }
        let mut first: Option<i64> = None;
        let mut retried_batch_time = None;
        let mut last_offset = -1;
        let mut term = 0;
        let mut begun = None;
        let mut log = self.log.borrow_mut();
        let mut producers = self.producers.borrow_mut();
        for ((_, b), check) in batches.iter().zip(decisions) {
            if let SeqCheck::Duplicate { base_offset, max_timestamp } = check {
                first.get_or_insert(base_offset);
                retried_batch_time.get_or_insert(max_timestamp);
                continue;
            }
            // A replicated partition's batches go to its Raft log, which the shard's
            // Raft shell writes; the single append path is the same.
            let appended = match (&self.replica, &shard.replication) {
                (Some(r), Some(replication)) => match replication.propose(r.group, b, append_time) {
                    Ok((header, proposed_in)) => {
                        term = proposed_in;
                        header
                    }
                    Err((code, message)) => return Err(ProduceOutcome::error(code, message)),
                },
                _ => {
                    let header = log.append(b, LEADER_EPOCH, append_time);
                    // A replicated partition learns its transactions as its log is
                    // written (`on_append`), on the leader as on followers.
                    begun = begun.or(self.txns.borrow_mut().on_batch(&header, b));
                    header
                }
            };
            remember_producer(&mut producers, &appended);
            first.get_or_insert(appended.base_offset);
            last_offset = appended.last_offset();
        }
        let base_offset = first.expect("at least one batch");
        // Kafka answers a retry's time only when the whole request was a retry.
        let retried_batch_time = retried_batch_time.filter(|_| last_offset < 0);
        Ok(Appended { base_offset, last_offset, term, begun, retried_batch_time })
    }

    /// Waits until an append of `len` bytes may go ahead (backpressure, a segment
    /// roll), leaving no await between its return and the append.
    async fn ready_to_append(
        &self,
        shard: &Shard,
        len: usize,
        timestamp: i64,
        deadline: Instant,
    ) -> Result<(), ProduceOutcome> {
        loop {
            self.wait_writable(shard, deadline).await?;
            if let Err(e) = log::roll_if_needed_at(&self.log, len, timestamp).await {
                self.report(shard, &e);
                return Err(ProduceOutcome::error(errors::storage_error_code(&e), e.to_string()));
            }
            // A roll may have awaited while others appended: check again.
            if self.writable_now(shard) {
                return Ok(());
            }
        }
    }

    /// Ends `producer_id`'s transaction on this partition with a commit or abort
    /// marker (Kafka's WriteTxnMarkers), and waits until the marker is durable (on a
    /// replicated partition: committed). The marker's epoch becomes the producer's
    /// here, fencing batches of older epochs.
    pub async fn write_marker(
        &self,
        shard: &Shard,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
        timeout: Duration,
    ) -> i16 {
        if self.unavailable(shard).is_some() {
            return errors::KAFKA_STORAGE_ERROR;
        }
        if let Some(code) = self.not_leader(shard) {
            return code;
        }
        if let SeqCheck::FencedEpoch { .. } = self.producers.borrow().check(producer_id, producer_epoch, 0, 0) {
            return errors::INVALID_PRODUCER_EPOCH;
        }
        let now = now_ms();
        let batch = keel_protocol::batch::build_marker(producer_id, producer_epoch, commit, coordinator_epoch, now);
        let deadline = Instant::now() + timeout;
        if let Err(refused) = self.ready_to_append(shard, batch.len(), now, deadline).await {
            return refused.error;
        }
        if self.not_leader(shard).is_some() {
            return errors::NOT_LEADER_OR_FOLLOWER;
        }
        // From here on a batch of this producer needs a new verification to begin a
        // transaction: the one verified is ending now.
        self.verified.borrow_mut().remove(&producer_id);
        match (&self.replica, &shard.replication) {
            (Some(r), Some(replication)) => {
                let (header, term) = match replication.propose(r.group, &batch, None) {
                    Ok(proposed) => proposed,
                    Err((code, _)) => return code,
                };
                replication
                    .wait_committed(r.group, term, header.base_offset, timeout)
                    .await
                    .err()
                    .unwrap_or(errors::NONE)
            }
            _ => {
                let header = self.log.borrow_mut().append(&batch, LEADER_EPOCH, None);
                self.producers.borrow_mut().end_epoch(producer_id, producer_epoch, header.max_timestamp);
                let change = self.txns.borrow_mut().on_batch(&header, &batch);
                shard.flush.appended(&self.log);
                if let Err(code) = self.wait_durable(header.base_offset, timeout).await {
                    return code;
                }
                if let Some(change) = change {
                    persist_txn(&self.txn_keys, change).await;
                }
                errors::NONE
            }
        }
    }

    /// The last stable offset: what `read_committed` consumers may read below.
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.log.borrow().high_watermark();
        self.txns.borrow_mut().last_stable_offset(hw)
    }

    /// Aborted transactions a `read_committed` fetch from `from` returning data below
    /// `upto` must name.
    pub fn aborted_between(&self, from: i64, upto: i64) -> Vec<AbortedTxn> {
        self.txns.borrow().aborted_between(from, upto)
    }

    /// The producers this partition knows, for DescribeProducers: (id, epoch, last
    /// sequence, last timestamp, first offset of its open transaction or -1). A
    /// producer with a transaction open is listed even once its sequence state went.
    pub fn active_producers(&self) -> Vec<(i64, i16, i32, i64, i64)> {
        let txns = self.txns.borrow();
        let mut out: Vec<(i64, i16, i32, i64, i64)> = self
            .producers
            .borrow()
            .describe()
            .into_iter()
            .map(|(pid, epoch, seq, used)| (pid, epoch, seq, used, txns.open_since(pid).unwrap_or(-1)))
            .collect();
        for (pid, first) in txns.open_transactions() {
            if !out.iter().any(|p| p.0 == pid) {
                out.push((pid, -1, -1, -1, first));
            }
        }
        out.sort_by_key(|p| p.0);
        out
    }

    /// Forgets aborted ranges below the log start offset (retention moved it).
    pub async fn prune_aborted(&self) {
        let start = self.log.borrow().log_start_offset;
        let gone = self.txns.borrow_mut().drop_below(start);
        if gone.is_empty() {
            return;
        }
        let keys: Vec<String> = gone.iter().map(|last| self.txn_keys.key(&aborted_key(*last))).collect();
        let changes: Vec<(&str, Option<Bytes>)> = keys.iter().map(|k| (k.as_str(), None)).collect();
        if let Err(e) = self.txn_keys.kv.write(&changes).await {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "cannot prune aborted transactions");
        }
    }

    /// Why this node cannot serve clients for the partition: a replicated partition
    /// is served by its Raft leader only.
    pub fn not_leader(&self, shard: &Shard) -> Option<i16> {
        match (&self.replica, &shard.replication) {
            (Some(r), Some(replication)) if !replication.leads(r.group) => Some(errors::NOT_LEADER_OR_FOLLOWER),
            _ => None,
        }
    }

    /// How many replicas are in sync with this leader (Kafka's ISR size): one on a
    /// single node.
    fn in_sync_count(&self, shard: &Shard) -> usize {
        match (&self.replica, &shard.replication) {
            (Some(r), Some(replication)) => replication.in_sync(r.group).map_or(0, |s| s.voters.len()),
            _ => 1,
        }
    }

    /// Kafka's check of a request's CurrentLeaderEpoch: -1 skips it; an older epoch
    /// than the partition's is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH.
    pub fn check_leader_epoch(&self, current: i32) -> Option<i16> {
        let epoch = self.leader_epoch();
        match current {
            c if c < 0 || c == epoch => None,
            c if c < epoch => Some(errors::FENCED_LEADER_EPOCH),
            _ => Some(errors::UNKNOWN_LEADER_EPOCH),
        }
    }

    /// The leader epoch clients see for the partition.
    pub fn leader_epoch(&self) -> i32 {
        self.replica.as_ref().map(|r| r.epoch()).unwrap_or(LEADER_EPOCH)
    }

    /// `producer_id` has a transaction open here under `epoch`. One open under an older
    /// epoch was ended by its coordinator (as Kafka's `hasOngoingTransaction` reads
    /// it), and its marker may not be here yet: a batch of the next one is verified.
    fn txn_open_under(&self, producer_id: i64, epoch: i16) -> bool {
        self.txns.borrow().open_since(producer_id).is_some()
            && self.producers.borrow().epoch(producer_id) == Some(epoch)
    }

    fn check_sequence(&self, h: &BatchHeader) -> SeqCheck {
        if !h.has_producer_id() || h.base_sequence < 0 {
            return SeqCheck::Append;
        }
        self.producers.borrow().check(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence())
    }

    /// Backpressure before an append. While the disk refuses writes (full or failing)
    /// appends are refused with KAFKA_STORAGE_ERROR, which clients retry, until a flush
    /// succeeds; while the partition holds more than `UNFLUSHED_BYTES_MAX` bytes not
    /// yet written, or the shard more than `unflushed_bytes_max_per_shard`, the append
    /// waits for the writes. Either way memory does not fill with data the disk cannot
    /// take, and what is queued when space returns is bounded.
    async fn wait_writable(&self, shard: &Shard, deadline: Instant) -> Result<(), ProduceOutcome> {
        loop {
            if self.fenced.get() {
                let wait = self.unfenced.wait();
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ProduceOutcome::error(errors::REQUEST_TIMED_OUT, "the partition is being moved"));
                }
                futures_lite::future::or(wait, glommio::timer::sleep(left)).await;
                continue;
            }
            let wait = {
                let l = self.log.borrow();
                if let Some(e) = &l.flush_error {
                    return Err(ProduceOutcome::error(errors::KAFKA_STORAGE_ERROR, format!("log not writable: {e}")));
                }
                if l.unflushed_bytes() >= UNFLUSHED_BYTES_MAX {
                    l.changed.wait()
                } else if shard.flush.unflushed_bytes() >= shard.unflushed_bytes_max {
                    shard.flush.progress()
                } else {
                    return Ok(());
                }
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ProduceOutcome::error(errors::REQUEST_TIMED_OUT, "the log's flush did not keep up"));
            }
            futures_lite::future::or(wait, glommio::timer::sleep(left)).await;
        }
    }

    fn writable_now(&self, shard: &Shard) -> bool {
        let l = self.log.borrow();
        !self.fenced.get()
            && l.flush_error.is_none()
            && l.unflushed_bytes() < UNFLUSHED_BYTES_MAX
            && shard.flush.unflushed_bytes() < shard.unflushed_bytes_max
    }

    /// Waits until `offset` is fsynced (below the high watermark).
    pub async fn wait_durable(&self, offset: i64, timeout: Duration) -> Result<(), i16> {
        crate::util::wait_below_high_watermark(&self.log, offset, timeout, || None).await
    }
}

fn remember_producer(producers: &mut ProducerStates, h: &BatchHeader) {
    if h.has_producer_id() && h.base_sequence >= 0 {
        let batch = SeqBatch {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
            max_timestamp: h.max_timestamp,
        };
        producers.record(h.producer_id, h.producer_epoch, batch);
    }
}

/// Batches whose codec is not the topic's `compression.type` (when it is not
/// "producer"), recompressed with it, as Kafka stores them; the others as they came.
fn recompress_for_topic(
    batches: Vec<(BatchHeader, Bytes)>,
    codec: Option<i16>,
) -> Result<Vec<(BatchHeader, Bytes)>, String> {
    let Some(codec) = codec else { return Ok(batches) };
    batches
        .into_iter()
        .map(|(h, b)| {
            if h.compression() == codec {
                return Ok((h, b));
            }
            let again = keel_storage::batch_filter::recompressed(&h, &b, codec)?;
            let header = batch::validate(&again).map_err(|e| e.to_string())?;
            Ok((header, again))
        })
        .collect()
}

/// A compacted topic keeps the last record per key, so a record without one could never
/// be compacted: Kafka's log validator refuses the whole batch with INVALID_RECORD and
/// names each keyless record (by its index in the batch) in `record_errors`, so the
/// client fails exactly those. The message is Kafka's, which clients show as is.
fn refuse_keyless(topic: &str, index: i32, batches: &[(BatchHeader, Bytes)]) -> Option<ProduceOutcome> {
    use keel_storage::batch_filter::{decompressed_body, parse_records};
    // A request carries exactly one batch per partition (checked before).
    let (h, b) = batches.first()?;
    let keyless = decompressed_body(h, b).and_then(|body| -> Result<Vec<i32>, String> {
        Ok(parse_records(h, &body)?
            .iter()
            .enumerate()
            .filter(|(_, r)| r.key.is_none())
            .map(|(i, _)| i as i32)
            .collect())
    });
    let record_errors: Vec<(i32, String)> = match keyless {
        Ok(keyless) => keyless
            .into_iter()
            .map(|i| {
                (i, format!("Compacted topic cannot accept message without key in topic partition {topic}-{index}."))
            })
            .collect(),
        Err(e) => return Some(ProduceOutcome::error(errors::CORRUPT_MESSAGE, e)),
    };
    if record_errors.is_empty() {
        return None;
    }
    let shown: Vec<String> =
        record_errors.iter().take(3).map(|(i, m)| format!("RecordError(batchIndex={i}, message='{m}')")).collect();
    let message = format!(
        "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: [{}]",
        record_errors.len(),
        shown.join(", ")
    );
    Some(ProduceOutcome { record_errors, ..ProduceOutcome::error(errors::INVALID_RECORD, message) })
}

fn batch_error_code(e: &BatchError) -> i16 {
    match e {
        BatchError::BadMagic(_) => errors::UNSUPPORTED_FOR_MESSAGE_FORMAT,
        BatchError::BadCompression(_) => errors::UNSUPPORTED_COMPRESSION_TYPE,
        BatchError::BadRecordCount(_) => errors::INVALID_RECORD,
        _ => errors::CORRUPT_MESSAGE,
    }
}

/// The Raft group of a partition: its topic id and index.
pub fn group_id(topic_id: Uuid, index: i32) -> keel_raft::GroupId {
    keel_raft::GroupId { topic: topic_id.as_u128(), partition: index as u32 }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Moves a replicated log's start offset to `offset`, committed through its Raft log
/// (DeleteRecords), as far as the high watermark allows. Only the start moves: the
/// segments below it go at a retention pass once every replica has them.
async fn advance_log_start(log: &Rc<RefCell<PartitionLog>>, offset: i64) {
    let upto = offset.min(log.borrow().high_watermark());
    if upto <= log.borrow().log_start_offset {
        return;
    }
    if let Err(e) = keel_storage::retention::delete_records(log, upto).await {
        tracing::error!(dir = %log.borrow().dir().display(), error = %e, "cannot move the log start offset");
    }
}
