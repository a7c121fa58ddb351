//! Reads a deposed leader must not answer: before a group coordinator answers
//! OffsetFetch from its memory, the offsets partition's voters confirm that its node
//! still leads (Raft's ReadIndex, §6.4 of Ongaro's thesis).
//!
//! **Why.** A leader that was paused (SIGSTOP, a stalled VM) or cut off believes it
//! leads until it hears of a later term. What it holds in memory misses whatever its
//! successor committed meanwhile, so answering from it can return an offset older than
//! one another client has already read from the successor: a stale read. raft-rs's
//! check-quorum makes a cut-off leader step down about when its successor is elected,
//! but that is a race of clocks, which a paused process loses (its clock runs on while
//! its ticks do not). `compat/faults/offsets.sh` checks committed offsets for
//! linearizability under pauses and partitions. Writes were never at risk: they commit
//! through Raft, which a deposed leader cannot do.
//!
//! **Cost.** One heartbeat round trip, up to two per read: on a loopback 3-node cluster
//! on two cores, OffsetFetch p50 went from 0.75 to 1.94 ms (`docs/reliability.md`).
//!
//! **How.** Reads of one group share rounds. A round is one heartbeat to each voter
//! carrying its number; once a majority answers it in the term it was sent in, every
//! read that arrived before it was sent is vouched for. A read waits for the first
//! round sent after it arrived: the one it sends itself when none is in flight, or
//! else the next one, sent as soon as the round in flight confirms. So a burst of reads
//! costs two rounds, not one per read. A round not confirmed within an election
//! timeout (a heartbeat lost, or raft-rs dropped it before the leader committed in its
//! term) is replaced by a new one; a read gives up after two.

use std::time::{Duration, Instant};

use keel_raft::{GroupId, ReadConfirmed};

use super::shell::{refusal, Replica, Replication};
use crate::errors;

/// The read rounds of one group on its leader.
#[derive(Debug, Default)]
pub struct ReadRounds {
    /// The term the rounds below were sent in.
    term: u64,
    /// Last round sent, and when; rounds are numbered for the replica's life, across terms.
    sent: u64,
    sent_at: Option<Instant>,
    /// Highest round confirmed in `term`.
    confirmed: u64,
    /// Reads wait for the round after the one in flight.
    another: bool,
}

impl ReadRounds {
    /// A read arriving now in `term`: the round that will vouch for it, and whether it
    /// must be sent now.
    fn join(&mut self, term: u64, now: Instant, retry: Duration) -> (u64, bool) {
        if term != self.term {
            // Rounds of an earlier term never confirm in this one.
            self.term = term;
            self.confirmed = self.sent;
            self.another = false;
        }
        let in_flight = self.sent > self.confirmed && self.sent_at.is_some_and(|at| now.duration_since(at) < retry);
        if in_flight {
            self.another = true;
            return (self.sent + 1, false);
        }
        (self.send(now), true)
    }

    fn send(&mut self, now: Instant) -> u64 {
        self.sent += 1;
        self.sent_at = Some(now);
        self.another = false;
        self.sent
    }

    /// Round `round` was confirmed: the round to send next, if reads wait for one.
    fn confirm(&mut self, round: u64, now: Instant) -> Option<u64> {
        self.confirmed = self.confirmed.max(round);
        (self.another && self.confirmed >= self.sent).then(|| self.send(now))
    }

    fn vouches(&self, term: u64, round: u64) -> bool {
        self.term == term && self.confirmed >= round
    }
}

impl Replication {
    /// Waits until `group`'s voters confirm that this node still leads it, in the term
    /// it leads now. Errors: NOT_LEADER_OR_FOLLOWER when it does not lead or stops
    /// leading meanwhile; REQUEST_TIMED_OUT when no majority answered in time.
    pub async fn confirm_leadership(&self, group: GroupId) -> Result<(), i16> {
        let r = self.replica(group).ok_or(errors::NOT_LEADER_OR_FOLLOWER)?;
        let term = self.multi.borrow().leader_term(group).ok_or(errors::NOT_LEADER_OR_FOLLOWER)?;
        let retry = self.election_timeout;
        let deadline = Instant::now() + 2 * retry;
        let round = self.join_read(&r, term)?;
        loop {
            let changed = r.log.borrow().changed.wait();
            if self.multi.borrow().leader_term(group) != Some(term) {
                return Err(errors::NOT_LEADER_OR_FOLLOWER);
            }
            if r.reads.borrow().vouches(term, round) {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(errors::REQUEST_TIMED_OUT);
            }
            let slept = futures_lite::future::or(
                async {
                    changed.await;
                    false
                },
                async {
                    glommio::timer::sleep(left.min(retry)).await;
                    true
                },
            )
            .await;
            if slept {
                // Sends a new round if the one in flight is overdue.
                self.join_read(&r, term)?;
            }
        }
    }

    fn join_read(&self, r: &Replica, term: u64) -> Result<u64, i16> {
        let (round, send) = r.reads.borrow_mut().join(term, Instant::now(), self.election_timeout);
        if send {
            self.send_read(r.group, round)?;
        }
        Ok(round)
    }

    fn send_read(&self, group: GroupId, round: u64) -> Result<(), i16> {
        self.multi.borrow_mut().read_index(group, round).map_err(|e| refusal(e).0)?;
        self.wake.notify();
        Ok(())
    }

    /// The rounds a `collect` confirmed: wakes their reads, sends the next rounds.
    pub(super) fn confirm_reads(&self, reads: &[ReadConfirmed]) {
        for read in reads {
            let Some(r) = self.replica(read.group) else { continue };
            let next = r.reads.borrow_mut().confirm(read.round, Instant::now());
            if let Some(round) = next {
                // A refusal means it no longer leads, which its reads see.
                let _ = self.send_read(read.group, round);
            }
            r.log.borrow().changed.notify();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RETRY: Duration = Duration::from_secs(1);

    #[test]
    fn reads_arriving_while_a_round_is_in_flight_wait_for_the_next() {
        let now = Instant::now();
        let mut rounds = ReadRounds::default();
        assert_eq!(rounds.join(3, now, RETRY), (1, true));
        assert_eq!(rounds.join(3, now, RETRY), (2, false), "round 1 was sent before this read");
        assert_eq!(rounds.join(3, now, RETRY), (2, false));
        assert!(!rounds.vouches(3, 1));
        assert_eq!(rounds.confirm(1, now), Some(2), "the waiting reads get their round");
        assert!(rounds.vouches(3, 1) && !rounds.vouches(3, 2));
        assert_eq!(rounds.confirm(2, now), None, "nobody waits for a third");
        assert!(rounds.vouches(3, 2));
        assert_eq!(rounds.join(3, now, RETRY), (3, true));
    }

    #[test]
    fn an_overdue_round_is_replaced_and_a_new_term_vouches_for_nothing_old() {
        let now = Instant::now();
        let mut rounds = ReadRounds::default();
        assert_eq!(rounds.join(3, now, RETRY), (1, true));
        assert_eq!(rounds.join(3, now + RETRY, RETRY), (2, true), "round 1 is overdue");
        assert_eq!(rounds.confirm(2, now), None);
        assert!(rounds.vouches(3, 1), "a later round vouches for earlier reads");
        assert_eq!(rounds.join(3, now, RETRY), (3, true));
        // Leading again in term 5: round 3, sent in term 3, cannot vouch.
        assert_eq!(rounds.join(5, now, RETRY), (4, true));
        assert_eq!(rounds.confirm(3, now), None);
        assert!(!rounds.vouches(5, 4) && !rounds.vouches(3, 3));
        rounds.confirm(4, now);
        assert!(rounds.vouches(5, 4));
    }
}
