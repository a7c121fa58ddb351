//! One transactional id's state, and the transitions Kafka's transaction coordinator
//! makes (`TransactionCoordinator`, `TransactionMetadata`): a pure state machine.
//! Requests and the time go in; the state to persist, or an error, comes out. The
//! shell writes each new state to `__transaction_state` before it answers, so the log
//! always holds what a client was told.
//!
//! ```text
//!   Empty ──AddPartitions──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
//!     ▲                        │  └────EndTxn(abort), timeout, fence──▶ PrepareAbort ──markers──▶ CompleteAbort
//!     └──InitProducerId────────┴──────────────(from Complete*: a new epoch)───────────────────────────┘
//! ```
//!
//! **Epochs fence zombies.** InitProducerId bumps the producer epoch; an open
//! transaction of the old epoch is aborted with markers of the new one, which each
//! partition then enforces. A transaction the coordinator aborts on its own (timeout)
//! also bumps the epoch, so the stalled producer is fenced rather than allowed to go on
//! as if nothing happened (Kafka's `prepareFenceProducerEpoch`).

use std::collections::BTreeSet;

use crate::errors;

/// Kafka's `TransactionState` ids, as `__transaction_state` stores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnStatus {
    Empty = 0,
    Ongoing = 1,
    PrepareCommit = 2,
    PrepareAbort = 3,
    CompleteCommit = 4,
    CompleteAbort = 5,
    Dead = 6,
    PrepareEpochFence = 7,
}

impl TxnStatus {
    pub fn from_id(id: i8) -> Option<TxnStatus> {
        ALL.into_iter().find(|s| *s as i8 == id)
    }

    /// The name DescribeTransactions and ListTransactions give (Kafka's
    /// `TransactionState.name`).
    pub fn name(self) -> &'static str {
        match self {
            TxnStatus::Empty => "Empty",
            TxnStatus::Ongoing => "Ongoing",
            TxnStatus::PrepareCommit => "PrepareCommit",
            TxnStatus::PrepareAbort => "PrepareAbort",
            TxnStatus::CompleteCommit => "CompleteCommit",
            TxnStatus::CompleteAbort => "CompleteAbort",
            TxnStatus::Dead => "Dead",
            TxnStatus::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnStatus> {
        ALL.into_iter().find(|s| s.name() == name)
    }

    /// Markers are being written: requests that would change the transaction wait.
    pub fn preparing(self) -> bool {
        matches!(self, TxnStatus::PrepareCommit | TxnStatus::PrepareAbort | TxnStatus::PrepareEpochFence)
    }
}

/// Every state, in id order.
pub const ALL: [TxnStatus; 8] = [
    TxnStatus::Empty,
    TxnStatus::Ongoing,
    TxnStatus::PrepareCommit,
    TxnStatus::PrepareAbort,
    TxnStatus::CompleteCommit,
    TxnStatus::CompleteAbort,
    TxnStatus::Dead,
    TxnStatus::PrepareEpochFence,
];

/// A topic partition in a transaction.
pub type TxnPartition = (String, i32);

/// One transactional id's state as `__transaction_state` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMeta {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub status: TxnStatus,
    pub partitions: BTreeSet<TxnPartition>,
    pub start_ms: i64,
    pub last_update_ms: i64,
}

/// What a request asks the shell to do after the new state is durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Then {
    /// Nothing: answer.
    Answer,
    /// Write markers of `epoch` (commit or abort) to the partitions, then record the
    /// completed state.
    Markers { commit: bool, epoch: i16, partitions: BTreeSet<TxnPartition> },
}

/// A transition: the state to persist (none when nothing changed) and what follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub persist: Option<TxnMeta>,
    pub then: Then,
}

impl Step {
    fn answer(persist: Option<TxnMeta>) -> Step {
        Step { persist, then: Then::Answer }
    }
}

/// The largest epoch before a producer id is exhausted and a new one is taken.
pub const EPOCH_MAX: i16 = i16::MAX - 1;

impl TxnMeta {
    /// A transactional id seen for the first time: `producer_id` at epoch 0.
    pub fn new(producer_id: i64, timeout_ms: i32, now: i64) -> TxnMeta {
        TxnMeta {
            producer_id,
            producer_epoch: 0,
            timeout_ms,
            status: TxnStatus::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now,
        }
    }

    /// InitProducerId for an id already known. `fresh_id` gives a new producer id
    /// when the epoch is exhausted. `expected` is the (producer id, epoch) a client
    /// recovering from an error names (KIP-360), or None.
    pub fn init(
        &self,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        now: i64,
        fresh_id: impl FnOnce() -> i64,
    ) -> Result<Step, i16> {
        if let Some((pid, epoch)) = expected {
            if pid != self.producer_id || epoch > self.producer_epoch {
                return Err(errors::PRODUCER_FENCED);
            }
        }
        match self.status {
            s if s.preparing() => Err(errors::CONCURRENT_TRANSACTIONS),
            TxnStatus::Ongoing => {
                // A new instance of the producer: abort the old one's transaction with
                // a new epoch; the client retries and then gets its id.
                let mut fenced = self.clone();
                fenced.producer_epoch = self.bumped_epoch();
                fenced.status = TxnStatus::PrepareAbort;
                fenced.last_update_ms = now;
                let then =
                    Then::Markers { commit: false, epoch: fenced.producer_epoch, partitions: self.partitions.clone() };
                Ok(Step { persist: Some(fenced), then })
            }
            _ => {
                let mut next = self.clone();
                if self.producer_epoch >= EPOCH_MAX {
                    next.producer_id = fresh_id();
                    next.producer_epoch = 0;
                } else {
                    next.producer_epoch += 1;
                }
                next.timeout_ms = timeout_ms;
                next.status = TxnStatus::Empty;
                next.partitions.clear();
                next.start_ms = -1;
                next.last_update_ms = now;
                Ok(Step::answer(Some(next)))
            }
        }
    }

    fn bumped_epoch(&self) -> i16 {
        (self.producer_epoch + 1).min(EPOCH_MAX)
    }

    /// The producer named in a request is this id's current one.
    fn check_producer(&self, producer_id: i64, epoch: i16) -> Result<(), i16> {
        if producer_id != self.producer_id {
            return Err(errors::INVALID_PRODUCER_ID_MAPPING);
        }
        if epoch != self.producer_epoch {
            return Err(errors::PRODUCER_FENCED);
        }
        Ok(())
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn, whose partition is the group's
    /// `__consumer_offsets` partition).
    pub fn add_partitions(
        &self,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
        now: i64,
    ) -> Result<Step, i16> {
        self.check_producer(producer_id, epoch)?;
        if self.status.preparing() {
            return Err(errors::CONCURRENT_TRANSACTIONS);
        }
        if self.status == TxnStatus::Ongoing && partitions.iter().all(|p| self.partitions.contains(p)) {
            return Ok(Step::answer(None));
        }
        let mut next = self.clone();
        if self.status != TxnStatus::Ongoing {
            next.partitions.clear();
            next.start_ms = now;
        }
        next.status = TxnStatus::Ongoing;
        next.partitions.extend(partitions.iter().cloned());
        next.last_update_ms = now;
        Ok(Step::answer(Some(next)))
    }

    /// KIP-890 verification asked by a partition leader (AddPartitionsToTxn v4+ with
    /// `verify_only`): for each partition, whether this producer's open transaction
    /// includes it. Nothing changes.
    pub fn verify_partitions(
        &self,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
    ) -> Result<Vec<bool>, i16> {
        if producer_id != self.producer_id {
            return Err(errors::INVALID_PRODUCER_ID_MAPPING);
        }
        if epoch != self.producer_epoch {
            return Err(errors::PRODUCER_FENCED);
        }
        if self.status.preparing() {
            return Err(errors::CONCURRENT_TRANSACTIONS);
        }
        let open = self.status == TxnStatus::Ongoing;
        Ok(partitions.iter().map(|p| open && self.partitions.contains(p)).collect())
    }

    /// EndTxn. A retried EndTxn whose outcome is already decided answers as the first
    /// one did. With `bump` (transaction protocol version 2, KIP-890) every commit or
    /// abort moves the producer to a new epoch, which its markers carry: a request of
    /// the ended transaction arriving late is then fenced rather than taken into the
    /// next one. A retry of such an EndTxn comes with the epoch before the bump.
    pub fn end(&self, producer_id: i64, epoch: i16, commit: bool, now: i64, bump: bool) -> Result<Step, i16> {
        if bump && producer_id == self.producer_id && epoch.checked_add(1) == Some(self.producer_epoch) {
            // The epoch just before the last bump: a retry of the EndTxn that made it,
            // or the producer of a transaction the coordinator aborted (timeout).
            match (self.status, commit) {
                (TxnStatus::CompleteCommit, true) | (TxnStatus::CompleteAbort, false) => return Ok(Step::answer(None)),
                (TxnStatus::CompleteCommit, false) | (TxnStatus::CompleteAbort, true) => {
                    return Err(errors::INVALID_TXN_STATE)
                }
                (s, _) if s.preparing() => return Err(errors::CONCURRENT_TRANSACTIONS),
                _ => {}
            }
        }
        self.check_producer(producer_id, epoch)?;
        match (self.status, commit) {
            (TxnStatus::Ongoing, _) => {
                let mut next = self.clone();
                next.status = if commit { TxnStatus::PrepareCommit } else { TxnStatus::PrepareAbort };
                next.last_update_ms = now;
                if bump {
                    next.producer_epoch = self.bumped_epoch();
                }
                let then = Then::Markers { commit, epoch: next.producer_epoch, partitions: self.partitions.clone() };
                Ok(Step { persist: Some(next), then })
            }
            // Version 2: aborting with nothing open is always allowed and moves the
            // epoch (a client whose writes all failed clears any partition they may
            // have registered); no partition needs a marker.
            (TxnStatus::Empty | TxnStatus::CompleteCommit | TxnStatus::CompleteAbort, false) if bump => {
                let mut next = self.clone();
                next.producer_epoch = self.bumped_epoch();
                next.status = TxnStatus::CompleteAbort;
                next.partitions.clear();
                next.last_update_ms = now;
                Ok(Step::answer(Some(next)))
            }
            // Version 1 retries with the same epoch; in version 2 a retry comes with the
            // epoch before the bump (above), and a commit with the current one has no
            // transaction to commit: INVALID_TXN_STATE, as Kafka answers.
            (TxnStatus::CompleteCommit, true) | (TxnStatus::CompleteAbort, false) if !bump => Ok(Step::answer(None)),
            (TxnStatus::PrepareCommit, true) | (TxnStatus::PrepareAbort, false) => Err(errors::CONCURRENT_TRANSACTIONS),
            // Aborting a transaction that never added a partition: nothing to undo.
            (TxnStatus::Empty, false) => Ok(Step::answer(None)),
            _ => Err(errors::INVALID_TXN_STATE),
        }
    }

    /// An Ongoing transaction past its timeout is aborted under a new epoch.
    pub fn expire(&self, now: i64) -> Option<Step> {
        if self.status != TxnStatus::Ongoing || self.start_ms + self.timeout_ms as i64 > now {
            return None;
        }
        let mut next = self.clone();
        next.producer_epoch = self.bumped_epoch();
        next.status = TxnStatus::PrepareAbort;
        next.last_update_ms = now;
        let then = Then::Markers { commit: false, epoch: next.producer_epoch, partitions: self.partitions.clone() };
        Some(Step { persist: Some(next), then })
    }

    /// The markers are written: the transaction is complete. An exhausted epoch moves
    /// the id on to `fresh_id` (which the caller takes only then) at epoch 0.
    pub fn complete(&self, now: i64, fresh_id: Option<i64>) -> TxnMeta {
        let mut next = self.clone();
        if let Some(id) = fresh_id.filter(|_| self.producer_epoch >= EPOCH_MAX) {
            next.producer_id = id;
            next.producer_epoch = 0;
        }
        next.status = match self.status {
            TxnStatus::PrepareCommit => TxnStatus::CompleteCommit,
            _ => TxnStatus::CompleteAbort,
        };
        next.partitions.clear();
        next.last_update_ms = now;
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> TxnPartition {
        (t.to_string(), p)
    }

    fn ongoing() -> TxnMeta {
        let m = TxnMeta::new(7, 60_000, 0);
        m.add_partitions(7, 0, &[tp("a", 0), tp("b", 1)], 10).unwrap().persist.unwrap()
    }

    #[test]
    fn a_transaction_commits_through_prepare_and_markers() {
        let m = ongoing();
        assert_eq!((m.status, m.start_ms, m.partitions.len()), (TxnStatus::Ongoing, 10, 2));
        assert_eq!(m.add_partitions(7, 0, &[tp("a", 0)], 11).unwrap().persist, None, "already in");
        let step = m.end(7, 0, true, 20, false).unwrap();
        let prepared = step.persist.unwrap();
        assert_eq!(prepared.status, TxnStatus::PrepareCommit);
        assert!(matches!(step.then, Then::Markers { commit: true, epoch: 0, ref partitions } if partitions.len() == 2));
        assert_eq!(prepared.add_partitions(7, 0, &[tp("c", 0)], 21), Err(errors::CONCURRENT_TRANSACTIONS));
        assert_eq!(prepared.end(7, 0, true, 21, false), Err(errors::CONCURRENT_TRANSACTIONS));
        let done = prepared.complete(30, None);
        assert_eq!((done.status, done.partitions.len()), (TxnStatus::CompleteCommit, 0));
        assert_eq!(done.end(7, 0, true, 31, false).unwrap().persist, None, "a retried commit");
        assert_eq!(done.end(7, 0, false, 31, false), Err(errors::INVALID_TXN_STATE));
        let next = done.add_partitions(7, 0, &[tp("c", 0)], 40).unwrap().persist.unwrap();
        assert_eq!((next.start_ms, next.partitions.len()), (40, 1), "a new transaction starts afresh");
    }

    #[test]
    fn a_new_instance_fences_the_old_and_aborts_its_transaction() {
        let m = ongoing();
        let step = m.init(60_000, None, 50, || unreachable!()).unwrap();
        let fenced = step.persist.unwrap();
        assert_eq!((fenced.status, fenced.producer_epoch), (TxnStatus::PrepareAbort, 1));
        assert!(matches!(step.then, Then::Markers { commit: false, epoch: 1, .. }));
        assert_eq!(fenced.init(60_000, None, 51, || 0), Err(errors::CONCURRENT_TRANSACTIONS));
        let aborted = fenced.complete(60, None);
        let again = aborted.init(60_000, None, 61, || 0).unwrap().persist.unwrap();
        assert_eq!((again.status, again.producer_epoch), (TxnStatus::Empty, 2));
        assert_eq!(again.end(7, 0, true, 62, false), Err(errors::PRODUCER_FENCED), "the old instance");
        assert_eq!(again.add_partitions(8, 2, &[tp("a", 0)], 62), Err(errors::INVALID_PRODUCER_ID_MAPPING));
    }

    #[test]
    fn version_2_bumps_the_epoch_at_every_end_and_fences_the_ended_transaction() {
        let m = ongoing();
        let step = m.end(7, 0, true, 20, true).unwrap();
        let prepared = step.persist.unwrap();
        assert_eq!(prepared.producer_epoch, 1);
        assert!(matches!(step.then, Then::Markers { commit: true, epoch: 1, .. }), "markers carry the new epoch");
        let done = prepared.complete(30, None);
        assert_eq!(done.end(7, 0, true, 31, true).unwrap().persist, None, "a retry with the epoch before the bump");
        assert_eq!(done.add_partitions(7, 0, &[tp("a", 0)], 32), Err(errors::PRODUCER_FENCED), "a late write");
        assert_eq!(
            done.end(7, 1, true, 32, true),
            Err(errors::INVALID_TXN_STATE),
            "nothing to commit at the new epoch"
        );
        let next = done.add_partitions(7, 1, &[tp("a", 0)], 33).unwrap().persist.unwrap();
        assert_eq!((next.status, next.producer_epoch), (TxnStatus::Ongoing, 1));
    }

    #[test]
    fn a_timed_out_transaction_is_aborted_under_a_new_epoch() {
        let m = ongoing();
        assert_eq!(m.expire(60_009), None);
        let step = m.expire(60_010).unwrap();
        assert_eq!(step.persist.as_ref().map(|p| (p.status, p.producer_epoch)), Some((TxnStatus::PrepareAbort, 1)));
        assert_eq!(TxnMeta::new(1, 10, 0).expire(1_000), None, "nothing open");
        let aborted = step.persist.unwrap().complete(60_020, None);
        assert_eq!(aborted.end(7, 0, true, 60_030, true), Err(errors::INVALID_TXN_STATE), "version 2: a retry");
        assert_eq!(aborted.end(7, 0, true, 60_030, false), Err(errors::PRODUCER_FENCED), "version 1: fenced");
    }

    #[test]
    fn an_exhausted_epoch_takes_a_new_producer_id() {
        let mut m = TxnMeta::new(7, 1000, 0);
        m.producer_epoch = EPOCH_MAX;
        let next = m.init(1000, None, 1, || 99).unwrap().persist.unwrap();
        assert_eq!((next.producer_id, next.producer_epoch), (99, 0));
    }
}
