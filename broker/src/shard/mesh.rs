//! Cross-shard calls over glommio's channel mesh, Seastar's `submit_to` style, each a
//! typed request of a service ([`dispatch`]).
//!
//! A call carries a typed request in its [`Envelope`] to the target shard, which serves
//! it on its own executor against its own state, leaves the typed reply in the
//! envelope's slot and tells the caller. Every channel is
//! bounded; each shard drains its inbound channels in dedicated tasks that never block
//! on outbound sends, so two shards calling each other cannot deadlock.
//!
//! **Bounds and cancellation.** A shard has at most `mesh_calls_in_flight_max_per_peer`
//! calls waiting on each other shard, and as many cancellable ones (long-poll waits);
//! a further call waits for a slot of its kind. Keeping the kinds apart means a client
//! holding a thousand long polls open cannot make produce requests queue behind them.
//! A slot is held until the reply comes or the caller stops waiting (its future is
//! dropped).
//! A call made cancellable (`Shard::call_cancellable`) that its caller stops
//! waiting for is cancelled on the target too: a `Cancel` follows the call on the same
//! channel and the target drops the call's task (dropping a glommio task cancels it).
//! A long-poll fetch answered by one owner, or whose connection closed, so stops
//! waiting on the others at once instead of holding their tasks for its `max_wait_ms`.
//! Other calls (controller changes, group operations) always run to their end: their
//! work must not stop half-way because one client left.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use glommio::channels::channel_mesh::{Receivers, Senders};
use glommio::channels::local_channel::{self, LocalSender};
use glommio::sync::Semaphore;
use keel_storage::Signal;

use super::dispatch::{Call, Envelope, ReplySlot, Serve};
use super::Shard;

/// A message between two shards. A request travels boxed in its envelope; its reply
/// waits in the envelope's slot, and `Reply` says it is there.
pub enum MeshMsg {
    Call {
        id: u64,
        request: Box<dyn Envelope>,
    },
    /// The caller stopped waiting for call `id`: drop its task if it still runs.
    Cancel {
        id: u64,
    },
    /// Call `id`'s reply is in its slot.
    Reply {
        id: u64,
    },
}

/// Messages a channel between two shards holds before a sender waits. Calls are
/// bounded per peer by `mesh_calls_in_flight_max_per_peer`; replies and cancels by
/// the calls they answer.
pub const MESH_CHANNEL_CAPACITY: usize = 1024;

pub struct Mesh {
    senders: Rc<Senders<MeshMsg>>,
    pending: RefCell<HashMap<u64, LocalSender<()>>>,
    next_id: Cell<u64>,
    /// Per target shard, the calls this shard may have waiting on it: uncancellable
    /// work, and cancellable waits.
    slots: Vec<Semaphore>,
    wait_slots: Vec<Semaphore>,
    slots_max: usize,
    /// Calls from other shards running here, by (caller, call id), each with the
    /// signal that cancels it.
    running: RefCell<HashMap<(usize, u64), Rc<Signal>>>,
    cancelled: Cell<u64>,
}

/// Cross-shard call counts of one shard, for `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct MeshStats {
    /// Calls this shard is waiting on, all peers together.
    pub calls_in_flight: usize,
    /// Calls from other shards running on this shard.
    pub calls_running: usize,
    /// The per-peer cap on `calls_in_flight`, for each kind (work, waits).
    pub calls_in_flight_max_per_peer: usize,
    /// Calls whose caller stopped waiting and that were cancelled on their target.
    pub calls_cancelled: u64,
    /// Calls this shard sent to other shards since start (cross-shard messages).
    pub calls_sent: u64,
}

/// Removes a call's bookkeeping if its caller stops waiting before the reply, and
/// cancels it on the target when asked to.
struct CallGuard<'a> {
    mesh: &'a Mesh,
    target: usize,
    id: u64,
    cancel_on_drop: bool,
    answered: bool,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        self.mesh.pending.borrow_mut().remove(&self.id);
        if !self.cancel_on_drop {
            return;
        }
        self.mesh.cancelled.set(self.mesh.cancelled.get() + 1);
        let (id, target) = (self.id, self.target);
        if self.mesh.senders.try_send_to(target, MeshMsg::Cancel { id }).is_err() {
            // The channel is full for now: send it from a task of its own.
            let senders = self.mesh.senders.clone();
            glommio::spawn_local(async move {
                let _ = senders.send_to(target, MeshMsg::Cancel { id }).await;
            })
            .detach();
        }
    }
}

impl Mesh {
    pub fn new(senders: Senders<MeshMsg>, calls_in_flight_max_per_peer: usize) -> Mesh {
        assert!(calls_in_flight_max_per_peer >= 1, "a shard must be able to call its peers");
        let per_peer =
            || (0..senders.nr_consumers()).map(|_| Semaphore::new(calls_in_flight_max_per_peer as u64)).collect();
        let (slots, wait_slots) = (per_peer(), per_peer());
        Mesh {
            senders: Rc::new(senders),
            pending: RefCell::new(HashMap::new()),
            next_id: Cell::new(1),
            slots,
            wait_slots,
            slots_max: calls_in_flight_max_per_peer,
            running: RefCell::new(HashMap::new()),
            cancelled: Cell::new(0),
        }
    }

    /// This shard's id: its mesh peer id (join order, not the CPU number).
    pub fn peer_id(&self) -> usize {
        self.senders.peer_id()
    }

    pub fn peers(&self) -> usize {
        self.senders.nr_consumers()
    }

    pub fn stats(&self) -> MeshStats {
        MeshStats {
            calls_in_flight: self.pending.borrow().len(),
            calls_running: self.running.borrow().len(),
            calls_in_flight_max_per_peer: self.slots_max,
            calls_cancelled: self.cancelled.get(),
            calls_sent: self.next_id.get() - 1,
        }
    }

    /// Serves `request` on `target` and waits for its reply. If the returned future is
    /// dropped first, the call's slot is freed and, with `cancel_on_drop`, the
    /// request's task on `target` is cancelled.
    pub async fn call<R: Serve>(&self, target: usize, request: R, cancel_on_drop: bool) -> R::Reply {
        assert_ne!(target, self.peer_id(), "a shard calls itself directly, not over the mesh");
        let slots = if cancel_on_drop { &self.wait_slots[target] } else { &self.slots[target] };
        let _slot = slots.acquire_permit(1).await.expect("mesh call slots are never closed");
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let (tx, rx) = local_channel::new_bounded(1);
        self.pending.borrow_mut().insert(id, tx);
        let mut guard = CallGuard { mesh: self, target, id, cancel_on_drop, answered: false };
        let (reply, theirs) = ReplySlot::new();
        let request: Box<dyn Envelope> = Box::new(Call { request, reply: theirs });
        if self.senders.send_to(target, MeshMsg::Call { id, request }).await.is_err() {
            panic!("shard {target} is gone: the mesh only closes at shutdown");
        }
        rx.recv().await.expect("a mesh reply for every call still waited for");
        guard.answered = true;
        reply.take()
    }

    fn complete(&self, id: u64) {
        // No entry: the caller stopped waiting (a dropped or cancelled call).
        if let Some(tx) = self.pending.borrow_mut().remove(&id) {
            let _ = tx.try_send(());
        }
    }

    async fn reply(&self, to: usize, id: u64) {
        if self.senders.send_to(to, MeshMsg::Reply { id }).await.is_err() {
            tracing::warn!(to, "mesh peer closed before a reply");
        }
    }

    fn cancel(&self, from: usize, id: u64) {
        // None: the call already finished (its reply crossed the cancel).
        if let Some(cancel) = self.running.borrow_mut().remove(&(from, id)) {
            cancel.notify();
        }
    }

    /// Runs a call from `peer` in a task of its own and replies, unless cancelled
    /// first. The call is registered before its task starts: glommio may run a new
    /// task at once, and a request served on its first poll must find its entry.
    fn run_call(shard: &Rc<Shard>, peer: usize, id: u64, request: Box<dyn Envelope>) {
        let cancel = Signal::new();
        let cancelled = cancel.wait();
        shard.mesh.running.borrow_mut().insert((peer, id), cancel);
        let s = shard.clone();
        glommio::spawn_local(async move {
            let run = async { Some(request.open(s.clone()).await) };
            let served = futures_lite::future::or(run, async {
                cancelled.await;
                None
            })
            .await;
            let still_wanted = s.mesh.running.borrow_mut().remove(&(peer, id)).is_some();
            if let (Some(()), true) = (served, still_wanted) {
                s.mesh.reply(peer, id).await;
            }
        })
        .detach();
    }
}

/// Spawns one task per peer that serves its calls and completes this shard's calls.
pub fn serve(shard: &Rc<Shard>, mut receivers: Receivers<MeshMsg>) {
    for (peer, stream) in receivers.streams() {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            while let Some(msg) = stream.recv().await {
                match msg {
                    MeshMsg::Call { id, request } => Mesh::run_call(&shard, peer, id, request),
                    MeshMsg::Cancel { id } => shard.mesh.cancel(peer, id),
                    MeshMsg::Reply { id } => shard.mesh.complete(id),
                }
            }
        })
        .detach();
    }
}
