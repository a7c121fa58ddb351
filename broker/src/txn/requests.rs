//! The transaction coordinator's cross-shard requests. Each but `ListTransactions`
//! runs on the coordinator shard of its transactional id, with the id's
//! `__transaction_state` partition (`shell::on_coordinator` finds both);
//! `ListTransactions` runs on every shard.

use std::rc::Rc;
use std::time::Instant;

use super::markers::WriteMarkers;
use super::shell::{check, transition, wait_completed, BUSY_WAIT};
use crate::config::OFFSETS_TOPIC;
use crate::errors;
use crate::shard::dispatch::{mesh_requests, Serve};
use crate::shard::partition::now_ms;
use crate::shard::Shard;
use crate::transactions::state::{Step, Then, TxnMeta, TxnPartition, EPOCH_MAX};

// A transactional id's operation, on its coordinator shard.
mesh_requests! {
    DescribeTxn => Result<Option<TxnMeta>, i16>,
    AddWrittenPartition => Result<(), i16>,
    AddOffsets => Result<(), i16>,
    AddPartitions => Result<Vec<i16>, i16>,
    EndTxn => Result<(i64, i16), i16>,
    InitProducer => Result<(i64, i16), i16>,
    ListTransactions => Vec<(String, TxnMeta)>,
    // On a partition's owner shard, not the coordinator's.
    WriteMarkers => Vec<i16>,
}

/// `txn_id`'s state as its coordinator holds it (None: unknown).
pub struct DescribeTxn {
    pub partition: i32,
    pub txn_id: String,
}

impl Serve for DescribeTxn {
    async fn serve(self, shard: Rc<Shard>) -> Result<Option<TxnMeta>, i16> {
        check(&shard, self.partition)?;
        Ok(shard.txn.borrow().txns.get(&self.txn_id).cloned())
    }
}

/// Adds a partition a Produce writes to its transaction (transaction protocol
/// version 2), waiting for the previous transaction's markers if they are still
/// being written.
pub struct AddWrittenPartition {
    pub partition: i32,
    pub txn_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub tp: TxnPartition,
}

impl Serve for AddWrittenPartition {
    async fn serve(self, shard: Rc<Shard>) -> Result<(), i16> {
        let AddWrittenPartition { partition, txn_id, producer_id, epoch, tp } = self;
        // The previous transaction's markers may still be being written (EndTxn
        // answered once they were, before its completion was recorded): wait for it
        // rather than fail the write.
        let deadline = Instant::now() + BUSY_WAIT;
        loop {
            let settled = shard.txn.borrow().settled.clone();
            let waiting = settled.wait();
            let decide = |m: Option<&TxnMeta>| match m {
                None => Err(errors::INVALID_PRODUCER_ID_MAPPING),
                Some(m) => m.add_partitions(producer_id, epoch, std::slice::from_ref(&tp), now_ms()),
            };
            match transition(&shard, partition, &txn_id, decide).await {
                Err(errors::CONCURRENT_TRANSACTIONS) if Instant::now() < deadline => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    futures_lite::future::or(waiting, glommio::timer::sleep(left)).await;
                }
                answer => return answer.map(|_| ()),
            }
        }
    }
}

/// AddOffsetsToTxn: adds the group's `__consumer_offsets` partition.
pub struct AddOffsets {
    pub partition: i32,
    pub txn_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub offsets_partition: i32,
}

impl Serve for AddOffsets {
    async fn serve(self, shard: Rc<Shard>) -> Result<(), i16> {
        let AddOffsets { partition, txn_id, producer_id, epoch, offsets_partition } = self;
        let now = now_ms();
        let wanted = [(OFFSETS_TOPIC.to_string(), offsets_partition)];
        let decide = |m: Option<&TxnMeta>| match m {
            None => Err(errors::INVALID_PRODUCER_ID_MAPPING),
            Some(m) => m.add_partitions(producer_id, epoch, &wanted, now),
        };
        transition(&shard, partition, &txn_id, decide).await.map(|_| ())
    }
}

/// AddPartitionsToTxn, or with `verify_only` its verification form: per-partition
/// codes, or one code for all.
pub struct AddPartitions {
    pub partition: i32,
    pub txn_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub wanted: Vec<TxnPartition>,
    pub verify_only: bool,
}

impl Serve for AddPartitions {
    async fn serve(self, shard: Rc<Shard>) -> Result<Vec<i16>, i16> {
        let AddPartitions { partition, txn_id, producer_id, epoch, wanted, verify_only } = self;
        if verify_only {
            check(&shard, partition)?;
            let c = shard.txn.borrow();
            let m = c.txns.get(&txn_id).ok_or(errors::INVALID_PRODUCER_ID_MAPPING)?;
            let included = m.verify_partitions(producer_id, epoch, &wanted)?;
            return Ok(included
                .into_iter()
                .map(|i| if i { errors::NONE } else { errors::TRANSACTION_ABORTABLE })
                .collect());
        }
        let now = now_ms();
        let decide = |m: Option<&TxnMeta>| match m {
            None => Err(errors::INVALID_PRODUCER_ID_MAPPING),
            Some(m) => m.add_partitions(producer_id, epoch, &wanted, now),
        };
        transition(&shard, partition, &txn_id, decide).await.map(|_| vec![errors::NONE; wanted.len()])
    }
}

/// EndTxn: the producer id and epoch to go on with.
pub struct EndTxn {
    pub partition: i32,
    pub txn_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub commit: bool,
    /// Bump the epoch on ending (EndTxn v5, transaction protocol version 2).
    pub bump: bool,
}

impl Serve for EndTxn {
    async fn serve(self, shard: Rc<Shard>) -> Result<(i64, i16), i16> {
        let EndTxn { partition, txn_id, producer_id, epoch, commit, bump } = self;
        let now = now_ms();
        let decide = |m: Option<&TxnMeta>| match m {
            None => Err(errors::INVALID_PRODUCER_ID_MAPPING),
            Some(m) => m.end(producer_id, epoch, commit, now, bump),
        };
        let (decided, completion) = transition(&shard, partition, &txn_id, decide).await?;
        wait_completed(completion).await;
        // The producer to go on with: a new epoch after a bump (or a new producer id
        // once the epochs ran out), as the completed state holds it; or, when this
        // node stopped coordinating the id meanwhile, as the state this request made
        // durable does. Never the request's own epoch: a client told so after a bump
        // starts its sequences again under the old epoch, and its next batch is taken
        // for a duplicate of the ended transaction's first one (and acknowledged
        // without being written).
        let current = shard.txn.borrow().txns.get(&txn_id).map(|m| (m.producer_id, m.producer_epoch));
        Ok(current.unwrap_or((decided.producer_id, decided.producer_epoch)))
    }
}

/// InitProducerId of a transactional id: its producer id and new epoch.
pub struct InitProducer {
    pub partition: i32,
    pub txn_id: String,
    pub timeout: i32,
    /// The producer id and epoch the client has, if any (KIP-360).
    pub expected: Option<(i64, i16)>,
}

impl Serve for InitProducer {
    async fn serve(self, shard: Rc<Shard>) -> Result<(i64, i16), i16> {
        let InitProducer { partition, txn_id, timeout, expected } = self;
        check(&shard, partition)?;
        // A new producer id is needed for a new transactional id, or when the epoch
        // is exhausted; taken before the transition, which must not wait.
        let needs_id = shard.txn.borrow().txns.get(&txn_id).is_none_or(|m| m.producer_epoch >= EPOCH_MAX);
        let fresh = if needs_id { Some(crate::cluster::requests::allocate_producer_id(&shard).await?) } else { None };
        let now = now_ms();
        let decide = |current: Option<&TxnMeta>| match current {
            None => {
                Ok(Step { persist: Some(TxnMeta::new(fresh.expect("taken above"), timeout, now)), then: Then::Answer })
            }
            Some(m) => m.init(timeout, expected, now, || fresh.expect("taken above")),
        };
        let (meta, completion) = transition(&shard, partition, &txn_id, decide).await?;
        if completion.is_some() {
            // An earlier instance's transaction is being aborted: the client retries.
            return Err(errors::CONCURRENT_TRANSACTIONS);
        }
        Ok((meta.producer_id, meta.producer_epoch))
    }
}

/// ListTransactions: the transactional ids of the target shard's coordinator.
#[derive(Clone)]
pub struct ListTransactions;

impl Serve for ListTransactions {
    async fn serve(self, shard: Rc<Shard>) -> Vec<(String, TxnMeta)> {
        let c = shard.txn.borrow();
        c.txns.iter().map(|(id, m)| (id.clone(), m.clone())).collect()
    }
}
