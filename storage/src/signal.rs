//! A shard-local broadcast signal: tasks wait for "something changed" and re-check
//! their condition. Used to wake long-poll fetches and acks=-1 producers when a log's
//! high watermark moves, without polling.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Signal {
    generation: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl Signal {
    pub fn new() -> Rc<Signal> {
        Rc::new(Signal::default())
    }

    pub fn notify(&self) {
        self.generation.set(self.generation.get() + 1);
        for waker in self.wakers.take() {
            waker.wake();
        }
    }

    /// Resolves at the next `notify` after this call.
    pub fn wait(self: &Rc<Self>) -> SignalWait {
        SignalWait { signal: self.clone(), seen: self.generation.get() }
    }
}

pub struct SignalWait {
    signal: Rc<Signal>,
    seen: u64,
}

impl Future for SignalWait {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.generation.get() != self.seen {
            return Poll::Ready(());
        }
        let mut wakers = self.signal.wakers.borrow_mut();
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
