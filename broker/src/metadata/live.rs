//! What a node holds beside the committed metadata: the controller's state (on shard
//! 0), the committed versions waiting to be installed, and the leaderships of
//! replicated partitions as the node learns them. Changed by `crate::cluster` and
//! `crate::cluster::nodes`; held by every shard.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::time::Instant;

use keel_storage::Signal;

use super::{Metadata, MetadataStore};

/// The controller's state, on shard 0 of each node (the active controller of a
/// cluster is the leader of the metadata group).
pub struct Controller {
    pub store: MetadataStore,
    pub next_producer_id: Cell<i64>,
    /// In a cluster: the end of the producer-id block this node was granted (0
    /// until it asks for one; a restarted node never reuses its last block).
    pub producer_block_end: Cell<i64>,
    /// One permit: the change that holds it is the only one running.
    pub turn: glommio::sync::Semaphore,
    /// In a cluster: one permit for taking a new producer-id block.
    pub ids_turn: glommio::sync::Semaphore,
    /// In a cluster: committed metadata not installed yet.
    pub installs: RefCell<Option<Rc<Installs>>>,
    /// In a cluster, on the controller: when each broker registered last.
    pub heard: RefCell<BTreeMap<i32, Instant>>,
}

impl Controller {
    pub fn new(data_dir: &std::path::Path, meta: &Metadata) -> Controller {
        Controller {
            store: MetadataStore::new(data_dir),
            next_producer_id: Cell::new(meta.producer_id_block_end),
            producer_block_end: Cell::new(0),
            turn: glommio::sync::Semaphore::new(1),
            ids_turn: glommio::sync::Semaphore::new(1),
            installs: Default::default(),
            heard: Default::default(),
        }
    }
}

/// Committed metadata waiting to be installed, in commit order.
pub struct Installs {
    pub queue: RefCell<VecDeque<Metadata>>,
    pub signal: Rc<Signal>,
    pub busy: Cell<bool>,
    /// The version every shard of this node has installed.
    pub installed: Cell<u64>,
    /// Notified after each install.
    pub installed_signal: Rc<Signal>,
}

/// A replicated partition's leadership as this node last learned it, for Metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Leadership {
    /// The leader's node id, -1 while there is none.
    pub leader: i32,
    pub epoch: i32,
    /// As the leader of `epoch` (or, until it tells, an earlier one) last told.
    pub in_sync: Option<Vec<i32>>,
    pub offline: Vec<i32>,
}
