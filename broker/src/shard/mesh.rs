//! Cross-shard calls over glommio's channel mesh, Seastar's `submit_to` style.
//!
//! A call carries a `Send` closure to the target shard, which runs it on its own
//! executor against its own state and sends the `Send` result back. Every channel is
//! bounded; each shard drains its inbound channels in dedicated tasks that never block
//! on outbound sends, so two shards calling each other cannot deadlock.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use glommio::channels::channel_mesh::{Receivers, Senders};
use glommio::channels::local_channel::{self, LocalSender};

use super::Shard;

pub type Reply = Box<dyn Any + Send>;
pub type Job = Box<dyn FnOnce(Rc<Shard>) -> Pin<Box<dyn Future<Output = Reply>>> + Send>;

pub enum MeshMsg {
    Call { id: u64, job: Job },
    Reply { id: u64, value: Reply },
}

/// Calls in flight per peer before a sender waits.
pub const MESH_CHANNEL_CAPACITY: usize = 1024;

pub struct Mesh {
    senders: Senders<MeshMsg>,
    pending: RefCell<HashMap<u64, LocalSender<Reply>>>,
    next_id: Cell<u64>,
}

impl Mesh {
    pub fn new(senders: Senders<MeshMsg>) -> Mesh {
        Mesh { senders, pending: RefCell::new(HashMap::new()), next_id: Cell::new(1) }
    }

    /// This shard's id: its mesh peer id (join order, not the CPU number).
    pub fn peer_id(&self) -> usize {
        self.senders.peer_id()
    }

    pub fn peers(&self) -> usize {
        self.senders.nr_consumers()
    }

    pub async fn call(&self, target: usize, job: Job) -> Reply {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let (tx, rx) = local_channel::new_bounded(1);
        self.pending.borrow_mut().insert(id, tx);
        if self.senders.send_to(target, MeshMsg::Call { id, job }).await.is_err() {
            panic!("shard {target} is gone: the mesh only closes at shutdown");
        }
        rx.recv().await.expect("a mesh reply for every call")
    }

    fn complete(&self, id: u64, value: Reply) {
        let tx = self.pending.borrow_mut().remove(&id);
        let tx = tx.unwrap_or_else(|| panic!("mesh reply {id} matches no call"));
        let _ = tx.try_send(value);
    }

    async fn reply(&self, to: usize, id: u64, value: Reply) {
        if self.senders.send_to(to, MeshMsg::Reply { id, value }).await.is_err() {
            tracing::warn!(to, "mesh peer closed before a reply");
        }
    }
}

/// Spawns one task per peer that serves its calls and completes this shard's calls.
pub fn serve(shard: &Rc<Shard>, mut receivers: Receivers<MeshMsg>) {
    for (peer, stream) in receivers.streams() {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            while let Some(msg) = stream.recv().await {
                match msg {
                    MeshMsg::Call { id, job } => {
                        let shard = shard.clone();
                        glommio::spawn_local(async move {
                            let value = job(shard.clone()).await;
                            shard.mesh.reply(peer, id, value).await;
                        })
                        .detach();
                    }
                    MeshMsg::Reply { id, value } => shard.mesh.complete(id, value),
                }
            }
        })
        .detach();
    }
}
