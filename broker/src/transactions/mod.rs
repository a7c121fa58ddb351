//! The transaction coordinator's state machine and records: each transactional id's
//! state and its transitions ([`state::TxnMeta`]), `__transaction_state`'s record
//! schemas ([`records`]), and what each shard holds of them ([`TxnCoordinator`]). Pure;
//! the shell that writes and answers is `crate::txn`'s.

pub mod records;
pub mod state;

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use keel_storage::Signal;

use state::TxnMeta;

pub use crate::config::TRANSACTION_TOPIC;

/// The transaction coordinator state of one shard: the transactional ids of the
/// `__transaction_state` partitions it owns (and, in a cluster, leads).
#[derive(Default)]
pub struct TxnCoordinator {
    pub txns: HashMap<String, TxnMeta>,
    /// False until this shard's unreplicated `__transaction_state` partitions (a
    /// single node's) are read at start-up.
    pub loaded: bool,
    /// In a cluster: the replicated partitions this node leads and whose ids this
    /// shard holds, each with the leader epoch it was loaded in.
    pub led: HashMap<i32, i32>,
    /// Ids with a state change being written: another change of one of them waits
    /// for it (up to `crate::txn::shell::BUSY_WAIT`, then CONCURRENT_TRANSACTIONS, as Kafka
    /// answers while a transition is pending).
    pub busy: HashSet<String>,
    /// Notified whenever a state change of any id is written (or failed).
    pub settled: Rc<Signal>,
}
