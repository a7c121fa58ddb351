//! Which voters of a group are in sync with its leader: Kafka's ISR, read from Raft
//! progress.
//!
//! Kafka keeps a follower in the ISR while it has caught up with the leader's log end
//! at some moment within `replica.lag.time.max.ms` (30 s): precisely, a fetch counts
//! as caught up when it asks for the offset the leader's log ended at on the previous
//! fetch, so a follower that keeps pace under load is not dropped for the records in
//! flight. KRaft also removes a broker from every ISR as soon as the controller fences
//! it (its heartbeats stopped).
//!
//! Raft has the same two signals on its leader. raft-rs's `recent_active` says a voter
//! answered since the last check-quorum pass (one election timeout); `matched` is the
//! last index known to be in its log. The leader samples both once per tick, before
//! raft-rs's tick can reset `recent_active`:
//! - a voter is **caught up** at a tick when it is recently active and has every entry
//!   that was committed at the previous tick (the previous-fetch rule above, with the
//!   commit index standing for the log end: a voter the commit does not wait for keeps
//!   pace as long as it is at most one tick behind);
//! - a voter is **in sync** while it was caught up within `lag_ticks`
//!   (`replica.lag.time.max.ms` in ticks), and **offline** once the leader has not
//!   heard from it for two election timeouts (it is then out of sync at once, as KRaft
//!   fences a silent broker rather than waiting the whole lag).
//!
//! The leader is always in sync. A new leader gives every voter the benefit of the
//! doubt: it counts all of them caught up when it takes over, so the ISR does not
//! flicker to the leader alone while its first heartbeats are answered.
//!
//! Why not `recent_active` alone: raft-rs clears it for every follower at each
//! check-quorum pass, so right after one the leader would briefly see an ISR of one
//! and refuse `acks=all` writes to a healthy group.

use std::collections::BTreeMap;

use crate::NodeId;

/// A group's in-sync and offline voters as its leader sees them, ascending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InSync {
    pub voters: Vec<NodeId>,
    pub offline: Vec<NodeId>,
}

/// What a voter's progress said at one tick.
#[derive(Debug, Clone, Copy)]
pub struct Observed {
    pub node: NodeId,
    pub matched: u64,
    pub recent_active: bool,
}

/// Ticks at which the leader last heard from a voter and last saw it caught up.
#[derive(Debug, Clone, Copy)]
struct Seen {
    heard: u64,
    caught_up: u64,
}

/// One group's observations, kept while this node leads it in one term.
#[derive(Debug, Default)]
pub struct InSyncTracker {
    /// The term the observations belong to (0: not leading).
    term: u64,
    /// The tick leadership began, the default for a voter not observed yet.
    since: u64,
    /// The commit index at the previous observation.
    committed_before: u64,
    voters: BTreeMap<NodeId, Seen>,
}

impl InSyncTracker {
    /// Records tick `now` of a group this node leads in `term` (`None`: it does not).
    pub fn observe(&mut self, now: u64, term: Option<u64>, committed: u64, progress: impl Iterator<Item = Observed>) {
        let Some(term) = term else {
            *self = InSyncTracker::default();
            return;
        };
        if term != self.term {
            *self = InSyncTracker { term, since: now, committed_before: committed, voters: BTreeMap::new() };
        }
        let since = self.since;
        for p in progress {
            let seen = self.voters.entry(p.node).or_insert(Seen { heard: since, caught_up: since });
            if p.recent_active {
                seen.heard = now;
                if p.matched >= self.committed_before {
                    seen.caught_up = now;
                }
            }
        }
        self.committed_before = committed;
    }

    /// The group was not ticked until `now` (quiet, with every voter caught up and
    /// alive): their clocks start again from `now`.
    pub fn resume(&mut self, now: u64) {
        for seen in self.voters.values_mut() {
            *seen = Seen { heard: now, caught_up: now };
        }
        self.since = self.since.max(now);
    }

    /// The in-sync and offline voters among `voters` at tick `now`, for the leader
    /// `leader` in `term`.
    pub fn in_sync(
        &self,
        now: u64,
        term: u64,
        leader: NodeId,
        voters: impl Iterator<Item = NodeId>,
        lag_ticks: u64,
        silent_ticks: u64,
    ) -> InSync {
        let mut answer = InSync::default();
        for node in voters {
            let seen = match self.voters.get(&node) {
                Some(seen) if self.term == term => *seen,
                // Not observed yet in this term: just taken over.
                _ => Seen { heard: now, caught_up: now },
            };
            let offline = node != leader && now.saturating_sub(seen.heard) > silent_ticks;
            if offline {
                answer.offline.push(node);
            } else if node == leader || now.saturating_sub(seen.caught_up) <= lag_ticks {
                answer.voters.push(node);
            }
        }
        answer.voters.sort_unstable();
        answer.offline.sort_unstable();
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG: u64 = 100;
    const SILENT: u64 = 20;

    fn seen(node: NodeId, matched: u64, recent_active: bool) -> Observed {
        Observed { node, matched, recent_active }
    }

    fn isr(t: &InSyncTracker, now: u64) -> InSync {
        t.in_sync(now, 1, 1, [1, 2, 3].into_iter(), LAG, SILENT)
    }

    #[test]
    fn a_new_leader_counts_every_voter_in_sync() {
        let mut t = InSyncTracker::default();
        t.observe(5, Some(1), 10, [seen(1, 10, true), seen(2, 0, false), seen(3, 0, false)].into_iter());
        assert_eq!(isr(&t, 5).voters, vec![1, 2, 3]);
        // Before any observation in the term, too.
        assert_eq!(InSyncTracker::default().in_sync(7, 2, 1, [1, 2].into_iter(), LAG, SILENT).voters, vec![1, 2]);
    }

    #[test]
    fn a_silent_voter_goes_offline_after_the_silence_window() {
        let mut t = InSyncTracker::default();
        for now in 0..=SILENT + 1 {
            t.observe(now, Some(1), 10, [seen(1, 10, true), seen(2, 10, true), seen(3, 10, false)].into_iter());
        }
        assert_eq!(isr(&t, SILENT).voters, vec![1, 2, 3]);
        assert_eq!(isr(&t, SILENT + 1), InSync { voters: vec![1, 2], offline: vec![3] });
        // It answers and has everything: back at once.
        t.observe(SILENT + 2, Some(1), 10, [seen(1, 10, true), seen(2, 10, true), seen(3, 10, true)].into_iter());
        assert_eq!(isr(&t, SILENT + 2), InSync { voters: vec![1, 2, 3], offline: vec![] });
    }

    #[test]
    fn a_voter_keeping_pace_one_tick_behind_stays_and_a_lagging_one_leaves() {
        let mut t = InSyncTracker::default();
        // Node 2 always has what was committed a tick ago; node 3 is stuck at 5.
        for now in 0..=LAG + 1 {
            let commit = 10 + now;
            t.observe(
                now,
                Some(1),
                commit,
                [seen(1, commit, true), seen(2, commit - 1, true), seen(3, 5, true)].into_iter(),
            );
        }
        assert_eq!(isr(&t, LAG), InSync { voters: vec![1, 2, 3], offline: vec![] });
        assert_eq!(isr(&t, LAG + 1), InSync { voters: vec![1, 2], offline: vec![] });
    }

    #[test]
    fn losing_leadership_forgets_the_term() {
        let mut t = InSyncTracker::default();
        t.observe(1, Some(1), 10, [seen(1, 10, true), seen(2, 10, false)].into_iter());
        t.observe(2, None, 10, std::iter::empty());
        assert_eq!(t.term, 0);
        assert!(t.voters.is_empty());
    }
}
