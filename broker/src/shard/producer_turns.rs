//! Arrival order of one producer's batches on one partition.
//!
//! A client pipelines several Produce requests to a partition (up to five in flight
//! for an idempotent producer), and their sequence numbers are only valid in the
//! order they were sent. The append itself never awaits, but the path to it may:
//! a transactional batch that would begin a transaction waits for its coordinator
//! (KIP-890 verification), and any batch may wait for memory. Without an order, a
//! later request of the same producer could overtake an earlier one during such a
//! wait and be refused OUT_OF_ORDER_SEQUENCE_NUMBER, failing the producer. Kafka
//! avoids this by serving one request per connection at a time; Keel keeps
//! pipelining and instead gives each producer's batches turns on the partition:
//! a batch takes a ticket when its request reaches the partition and appends only
//! once every earlier ticket of the same producer is finished (appended or
//! refused). Batches of different producers never wait for each other.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

use keel_storage::Signal;

#[derive(Default)]
pub struct ProducerTurns {
    lines: RefCell<HashMap<i64, Line>>,
    moved: Rc<Signal>,
}

/// One producer's tickets: `next` is the next to hand out, every ticket below
/// `served` is finished, and `finished` holds those finished out of order.
#[derive(Default)]
struct Line {
    next: u64,
    served: u64,
    finished: BTreeSet<u64>,
}

/// A batch's place in its producer's line; finished when dropped.
pub struct Turn<'a> {
    turns: &'a ProducerTurns,
    producer_id: i64,
    ticket: u64,
}

impl ProducerTurns {
    /// Takes the next ticket of `producer_id`. Call before the first await of the
    /// request on this partition, so tickets follow arrival order.
    pub fn take(&self, producer_id: i64) -> Turn<'_> {
        let mut lines = self.lines.borrow_mut();
        let line = lines.entry(producer_id).or_default();
        let ticket = line.next;
        line.next += 1;
        Turn { turns: self, producer_id, ticket }
    }

    fn is_up(&self, producer_id: i64, ticket: u64) -> bool {
        self.lines.borrow().get(&producer_id).is_none_or(|l| l.served == ticket)
    }

    fn finish(&self, producer_id: i64, ticket: u64) {
        let mut lines = self.lines.borrow_mut();
        let Some(line) = lines.get_mut(&producer_id) else { return };
        line.finished.insert(ticket);
        while line.finished.remove(&line.served) {
            line.served += 1;
        }
        if line.served == line.next {
            lines.remove(&producer_id);
        }
        drop(lines);
        self.moved.notify();
    }
}

impl Turn<'_> {
    /// Resolves once every earlier ticket of this producer is finished.
    pub async fn wait(&self) {
        while !self.turns.is_up(self.producer_id, self.ticket) {
            let moved = self.turns.moved.wait();
            if self.turns.is_up(self.producer_id, self.ticket) {
                return;
            }
            moved.await;
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.turns.finish(self.producer_id, self.ticket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_ticket_waits_for_every_earlier_one_of_its_producer_only() {
        let turns = ProducerTurns::default();
        let a = turns.take(7);
        let b = turns.take(7);
        let c = turns.take(7);
        let other = turns.take(8);
        assert!(turns.is_up(7, a.ticket));
        assert!(!turns.is_up(7, b.ticket));
        assert!(turns.is_up(8, other.ticket), "another producer never waits");
        // `b` refused early (finished out of order): `c` still waits for `a`.
        drop(b);
        assert!(!turns.is_up(7, c.ticket));
        drop(a);
        assert!(turns.is_up(7, c.ticket));
        drop(c);
        drop(other);
        assert!(turns.lines.borrow().is_empty(), "a producer with no ticket out leaves no line");
    }
}
