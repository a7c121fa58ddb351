//! Raft passes a full disk left unacknowledged. A pass whose group record or journal
//! write failed after its entries were appended is kept (the latest Ready per group)
//! and written again every 100 ms until it is durable; only then is it reported to
//! the Raft core. Dropped instead, it stalled a follower until restart: its answers
//! to the leader wait for the pass, and its leader sent it nothing more.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use keel_raft::GroupId;

use super::record_change;

use super::wait_durable;

use super::Replica;

use super::Replication;

use super::StateChange;

/// How often writes that failed (a full disk) are tried again.
pub(super) const PERSIST_RETRY_INTERVAL: Duration = Duration::from_millis(100);

/// Groups whose entries were appended but whose pass failed, each with its latest such
/// Ready, and the retry timer's state.
#[derive(Default)]
pub(super) struct Unpersisted {
    passes: RefCell<Vec<(Rc<Replica>, u64)>>,
    /// A retry is scheduled.
    scheduled: Cell<bool>,
    /// A retry is due: the driver runs a pass even with no Raft actions.
    pub(super) due: Cell<bool>,
}

impl Replication {
    /// Notes that `r`'s Ready `ready` is appended but not durable, for
    /// `retry_unpersisted`; one entry per group, the latest Ready (reporting it
    /// reports the earlier ones too).
    pub(super) fn unpersisted(&self, r: Rc<Replica>, ready: u64) {
        let mut pending = self.unpersisted.passes.borrow_mut();
        match pending.iter_mut().find(|(p, _)| p.group == r.group) {
            Some(entry) => entry.1 = entry.1.max(ready),
            None => pending.push((r, ready)),
        }
    }

    /// Makes durable again what failed passes left unacknowledged: the groups' records
    /// where due, then their logs (the flush queue retries a failed journal write by
    /// itself). Returns the (group, ready) pairs now durable; the rest wait for the
    /// next try.
    pub(super) async fn retry_unpersisted(&self) -> Vec<(GroupId, u64)> {
        let pending: Vec<(Rc<Replica>, u64)> = std::mem::take(&mut *self.unpersisted.passes.borrow_mut())
            .into_iter()
            .filter(|(r, _)| self.replica(r.group).is_some_and(|now| Rc::ptr_eq(&now, r)))
            .collect();
        if pending.is_empty() {
            return Vec::new();
        }
        let due: Vec<Rc<Replica>> =
            pending.iter().filter(|(r, _)| r.record_due.replace(false)).map(|(r, _)| r.clone()).collect();
        if !due.is_empty() {
            let records: Vec<StateChange> = due.iter().map(|r| record_change(r.group, &r.record.borrow())).collect();
            if let Err(e) = self.write_state(&records).await {
                tracing::debug!(error = %e, groups = pending.len(), "Raft state still cannot be written");
                for r in &due {
                    r.record_due.set(true);
                }
                for (r, ready) in pending {
                    self.unpersisted(r, ready);
                }
                return Vec::new();
            }
        }
        let durable = self.durable_or_retried(pending).await;
        if !durable.is_empty() {
            tracing::info!(groups = durable.len(), "Raft state written after an earlier failure");
        }
        durable
    }

    /// Wakes the driver for another `retry_unpersisted` soon, while any is pending.
    pub(super) fn schedule_retry(self: &Rc<Self>) {
        if self.unpersisted.passes.borrow().is_empty() || self.unpersisted.scheduled.replace(true) {
            return;
        }
        let me = Rc::downgrade(self);
        glommio::spawn_local(async move {
            keel_storage::disk::sleep(PERSIST_RETRY_INTERVAL).await;
            if let Some(me) = me.upgrade() {
                me.unpersisted.scheduled.set(false);
                me.unpersisted.due.set(true);
                me.wake.notify();
            }
        })
        .detach();
    }

    /// The passes whose logs are durable now, as (group, ready); the others are noted
    /// for `retry_unpersisted`.
    pub(super) async fn durable_or_retried(&self, written: Vec<(Rc<Replica>, u64)>) -> Vec<(GroupId, u64)> {
        let mut durable = Vec::with_capacity(written.len());
        for (r, ready) in written {
            if wait_durable(&r.log).await.is_ok() {
                durable.push((r.group, ready));
            } else {
                self.unpersisted(r, ready);
            }
        }
        durable
    }
}
