//! Typed cross-shard requests: what one shard may ask of another.
//!
//! Each service declares its requests next to their handlers, one type each, with the
//! type of its reply ([`mesh_requests!`]) and how the target shard serves it
//! ([`Serve`]). A caller names a request and gets that request's reply (`Shard::call`).
//! The mesh carries a request as an [`Envelope`]: the request with the slot its reply
//! comes back in, both of the request's own types. No closure crosses the mesh, no
//! list of every service's requests exists, and nothing is downcast.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use super::Shard;

/// A request one shard makes of another, with the type of its reply.
pub trait MeshRequest: Send + Sized + 'static {
    type Reply: Send + 'static;
}

/// How the target shard serves a request: written by each service for each of its
/// requests, next to the request.
pub trait Serve: MeshRequest {
    fn serve(self, shard: Rc<Shard>) -> impl Future<Output = Self::Reply>;
}

/// Declares requests and the type of each one's reply ([`MeshRequest`]).
macro_rules! mesh_requests {
    ( $( $(#[$attr:meta])* $req:ty => $rep:ty, )* ) => {
        $(
            $(#[$attr])*
            impl $crate::shard::dispatch::MeshRequest for $req {
                type Reply = $rep;
            }
        )*
    };
}
pub(crate) use mesh_requests;

/// Where the target shard leaves a reply for its caller. The target writes it once,
/// then tells the caller over the mesh; the caller takes it when told. The two never
/// hold it at once, so the lock is only ever taken uncontended.
pub struct ReplySlot<T>(Arc<Mutex<Option<T>>>);

impl<T> ReplySlot<T> {
    pub fn new() -> (ReplySlot<T>, ReplySlot<T>) {
        let slot = Arc::new(Mutex::new(None));
        (ReplySlot(slot.clone()), ReplySlot(slot))
    }

    fn put(&self, value: T) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
    }

    /// The reply, once the target said it is there.
    pub fn take(&self) -> T {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take().expect("a reply is told only once it is put")
    }
}

/// A request on its way to its target shard, with the slot for its reply.
pub trait Envelope: Send {
    /// Serves the request on `shard` and leaves its reply in the slot.
    fn open(self: Box<Self>, shard: Rc<Shard>) -> Pin<Box<dyn Future<Output = ()>>>;
}

/// The one [`Envelope`]: a request of type `R` and its reply's slot.
pub struct Call<R: MeshRequest> {
    pub request: R,
    pub reply: ReplySlot<R::Reply>,
}

impl<R: Serve> Envelope for Call<R> {
    fn open(self: Box<Self>, shard: Rc<Shard>) -> Pin<Box<dyn Future<Output = ()>>> {
        Box::pin(async move {
            let Call { request, reply } = *self;
            reply.put(request.serve(shard).await);
        })
    }
}
