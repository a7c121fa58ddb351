//! Where a partition's transaction state ([`PartitionTxns`]) is kept: one key per open
//! transaction (its first offset) and one per aborted transaction (its producer and
//! first offset, by marker offset) among the partition's keys in the shard's state
//! store, so the last stable offset and the aborted ranges survive a crash.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use keel_storage::state::StateKeys;

use super::txn_log::{AbortedTxn, PartitionTxns, TxnChange};

const TXN_OPEN: &str = "txn-open/";
const TXN_ABORTED: &str = "txn-aborted/";

fn open_key(producer_id: i64) -> String {
    format!("{TXN_OPEN}{producer_id}")
}

pub(crate) fn aborted_key(marker_offset: i64) -> String {
    format!("{TXN_ABORTED}{marker_offset:020}")
}

fn aborted_value(a: &AbortedTxn) -> Bytes {
    let mut value = Vec::with_capacity(16);
    value.extend_from_slice(&a.producer_id.to_be_bytes());
    value.extend_from_slice(&a.first_offset.to_be_bytes());
    value.into()
}

/// A partition's transaction state as its state-store keys hold it. Open transactions
/// starting at or past the log's end began in a tail that a crash or a new leader cut.
pub(crate) fn load_txns(keys: &StateKeys, log_end: i64) -> PartitionTxns {
    let read_i64 = |v: &[u8], at: usize| v.get(at..at + 8).map(|b| i64::from_be_bytes(b.try_into().expect("8 bytes")));
    let mut open = Vec::new();
    let mut aborted = Vec::new();
    for key in keys.kv.keys_with_prefix(&keys.prefix) {
        let (Some(name), Some(value)) = (key.strip_prefix(&keys.prefix), keys.kv.get(&key)) else { continue };
        if let Some(pid) = name.strip_prefix(TXN_OPEN).and_then(|p| p.parse::<i64>().ok()) {
            if let Some(first) = read_i64(&value, 0).filter(|f| *f < log_end) {
                open.push((pid, first));
            }
        } else if let Some(last) = name.strip_prefix(TXN_ABORTED).and_then(|p| p.parse::<i64>().ok()) {
            if let (Some(producer_id), Some(first_offset), true) =
                (read_i64(&value, 0), read_i64(&value, 8), last < log_end)
            {
                aborted.push(AbortedTxn { producer_id, first_offset, last_offset: last });
            }
        }
    }
    PartitionTxns::restore(open, aborted)
}

/// The state-store changes (full key, value or removal) that record one change of a
/// partition's transactions.
pub(crate) fn txn_changes(keys: &StateKeys, change: TxnChange) -> Vec<(String, Option<Bytes>)> {
    match change {
        TxnChange::Begun { producer_id, first_offset } => {
            vec![(keys.key(&open_key(producer_id)), Some(Bytes::copy_from_slice(&first_offset.to_be_bytes())))]
        }
        TxnChange::Ended { producer_id, aborted } => {
            let mut changes = vec![(keys.key(&open_key(producer_id)), None)];
            if let Some(a) = aborted {
                changes.push((keys.key(&aborted_key(a.last_offset)), Some(aborted_value(&a))));
            }
            changes
        }
    }
}

/// Records one change of a partition's transactions durably.
pub(crate) async fn persist_txn(keys: &StateKeys, change: TxnChange) {
    let changes = txn_changes(keys, change);
    let refs: Vec<(&str, Option<Bytes>)> = changes.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let written = keys.kv.write(&refs).await;
    if let Err(e) = written {
        tracing::error!(prefix = %keys.prefix, error = %e, "cannot record a transaction's state");
    }
}

/// Rewrites a partition's transaction keys from memory (after a truncation).
pub(crate) async fn rewrite_txns(keys: &StateKeys, txns: &Rc<RefCell<PartitionTxns>>) {
    let mut changes: Vec<(String, Option<Bytes>)> = keys
        .kv
        .keys_with_prefix(&keys.prefix)
        .into_iter()
        .filter(|k| k[keys.prefix.len()..].starts_with("txn-"))
        .map(|k| (k, None))
        .collect();
    {
        let t = txns.borrow();
        for (pid, first) in t.open_transactions() {
            changes.push((keys.key(&open_key(pid)), Some(Bytes::copy_from_slice(&first.to_be_bytes()))));
        }
        for a in t.aborted_between(i64::MIN, i64::MAX) {
            changes.push((keys.key(&aborted_key(a.last_offset)), Some(aborted_value(&a))));
        }
    }
    // Later puts of a key override its removal above: the batch applies in order.
    let refs: Vec<(&str, Option<Bytes>)> = changes.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    if !refs.is_empty() {
        if let Err(e) = keys.kv.write(&refs).await {
            tracing::error!(prefix = %keys.prefix, error = %e, "cannot rewrite a partition's transactions");
        }
    }
}
