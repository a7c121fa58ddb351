//! The order of a connection's requests. Kafka processes the requests of one
//! connection in the order they were sent, one at a time (it reads no request from a
//! connection until the one before is answered), and clients rely on it: an admin
//! client that sends DeleteRecords and then ListOffsets expects the second to see the
//! first. Keel promises that every request sees the effects of every request sent
//! before it on its connection, and overlaps requests only where no client can tell:
//!
//! - **reads with reads** ([`Order::Read`]: Fetch, Metadata, ListOffsets, the
//!   Describe and List APIs, OffsetFetch): none changes anything another could see;
//! - **produces with produces** ([`Order::Append`]): each is handed to its partitions'
//!   owners in the order it arrived, and an owner appends in arrival order, so the
//!   records take offsets in the order they were sent, and a producer's sequence
//!   numbers arrive in order, as with Kafka's five in flight per connection.
//!
//! Every other request ([`Order::Write`]: topic, config, ACL, quota and group changes,
//! DeleteRecords, transactions) starts only when every request before it has
//! finished, and nothing starts after it until it has finished. A read after a produce
//! waits for the produce, and a produce after a read for the read. "Finished" is when
//! the handler has its answer, which is when its effect is visible to every request
//! on this node: a metadata change is installed on every shard (in a cluster, on the
//! node that relayed it too), DeleteRecords has moved the log start, an acks=-1
//! produce is durable (acks=0 ends once its records are, though nothing is answered).
//! Kafka's brokers apply a controller's change to what they read only after they
//! answer it, so there Metadata right behind CreateTopics may miss the topic; here it
//! does not.
//!
//! The connection's reader waits here before it starts a request's handler, so a
//! connection waiting its turn reads nothing more (its requests queue in the socket,
//! as on Kafka); responses are written in request order whatever overlaps.

use std::cell::Cell;
use std::rc::Rc;

use keel_storage::Signal;

pub use crate::handlers::Order;

/// Whether a request of `order` may start while requests of `running` run.
fn overlaps(order: Order, running: Order) -> bool {
    order == running && order != Order::Write
}

/// The requests of one connection that are running: how many, all of one order.
pub struct InOrder {
    running: Cell<usize>,
    order: Cell<Order>,
    finished: Rc<Signal>,
}

impl InOrder {
    pub fn new() -> Rc<InOrder> {
        Rc::new(InOrder { running: Cell::new(0), order: Cell::new(Order::Read), finished: Signal::new() })
    }

    /// Waits until a request of `order` may start, and counts it as running until the
    /// returned turn is dropped (its handler finished or was dropped).
    pub async fn start(self: &Rc<Self>, order: Order) -> Turn {
        while self.running.get() > 0 && !overlaps(order, self.order.get()) {
            self.finished.wait().await;
        }
        self.order.set(order);
        self.running.set(self.running.get() + 1);
        Turn(self.clone())
    }
}

/// A running request's place in [`InOrder`].
pub struct Turn(Rc<InOrder>);

impl Drop for Turn {
    fn drop(&mut self) {
        let left = self.0.running.get() - 1;
        self.0.running.set(left);
        if left == 0 {
            self.0.finished.notify();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Starts requests of the given orders in turn, each running until the test ends
    /// it, and records which had started at each step.
    #[test]
    fn reads_overlap_reads_produces_overlap_produces_and_writes_overlap_nothing() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let order = InOrder::new();
                let started = Rc::new(RefCell::new(Vec::new()));
                let turns: Rc<RefCell<Vec<Option<Turn>>>> = Rc::new(RefCell::new(Vec::new()));
                let sequence = [Order::Read, Order::Read, Order::Append, Order::Append, Order::Write, Order::Read];
                let (o, s, t) = (order.clone(), started.clone(), turns.clone());
                let reader = glommio::spawn_local(async move {
                    for (i, kind) in sequence.into_iter().enumerate() {
                        let turn = o.start(kind).await;
                        s.borrow_mut().push(i);
                        t.borrow_mut().push(Some(turn));
                    }
                });
                let settle = || glommio::timer::sleep(std::time::Duration::from_millis(5));
                let finish = |i: usize| turns.borrow_mut()[i] = None;
                settle().await;
                assert_eq!(*started.borrow(), [0, 1], "two reads run together; the produce waits");
                finish(0);
                settle().await;
                assert_eq!(*started.borrow(), [0, 1], "the produce waits for every read");
                finish(1);
                settle().await;
                assert_eq!(*started.borrow(), [0, 1, 2, 3], "two produces run together; the write waits");
                finish(3);
                settle().await;
                assert_eq!(started.borrow().len(), 4, "the write waits for every produce, in any order");
                finish(2);
                settle().await;
                assert_eq!(started.borrow().len(), 5, "the write runs alone");
                settle().await;
                assert_eq!(started.borrow().len(), 5, "the read after the write waits for it");
                finish(4);
                reader.await;
                assert_eq!(started.borrow().len(), 6);
            })
            .expect("an executor")
            .join()
            .expect("the test's executor finished");
    }
}
