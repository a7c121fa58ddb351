//! Typed cross-shard requests: what one shard may ask of another.
//!
//! Each service that works across shards declares its requests, one type each, and
//! the reply of each ([`mesh_service!`]): the group coordinator, transactions, the
//! controller and cluster state, quotas, partition owners, admin statistics, shutdown.
//! The mesh carries one [`ShardRequest`] per call and one [`ShardReply`] back, and the
//! target shard runs the request with [`serve`], the one place where requests meet
//! their services' handlers. A caller names a request type and gets that type's reply
//! ([`MeshRequest`], `Shard::call`): no closure crosses the mesh, and nothing is
//! downcast.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use super::Shard;

/// A request one shard makes of another, with the type of its reply.
pub trait MeshRequest: Send + Sized + 'static {
    type Reply: Send + 'static;
    /// This request as the mesh carries it.
    fn wrap(self) -> ShardRequest;
    /// This request's reply out of what the mesh carried back.
    fn unwrap(reply: ShardReply) -> Self::Reply;
}

/// How the target shard serves a request: written by each service for each of its
/// requests, next to the request.
pub trait Serve: MeshRequest {
    fn serve(self, shard: Rc<Shard>) -> impl Future<Output = Self::Reply>;
}

/// Declares a service's cross-shard requests: an enum of them, an enum of their
/// replies (variant for variant), each request's [`MeshRequest`] as the variant
/// `$service` of [`ShardRequest`] and [`ShardReply`] carries it, and the service's
/// `serve`, which answers each request with its own [`Serve`] in its own variant.
macro_rules! mesh_service {
    (
        $(#[$attr:meta])*
        $service:ident: $request:ident => $reply:ident {
            $( $(#[$vattr:meta])* $variant:ident($req:ty) -> $rep:ty, )*
        }
    ) => {
        $(#[$attr])*
        pub enum $request {
            $( $(#[$vattr])* $variant($req), )*
        }

        #[doc = concat!("The replies to [`", stringify!($request), "`], variant for variant.")]
        pub enum $reply {
            $( $variant($rep), )*
        }

        impl $request {
            /// Runs this request on `shard`, its target.
            pub async fn serve(self, shard: std::rc::Rc<$crate::shard::Shard>) -> $reply {
                match self {
                    $( $request::$variant(r) => $reply::$variant($crate::shard::dispatch::Serve::serve(r, shard).await), )*
                }
            }
        }

        $(
            impl $crate::shard::dispatch::MeshRequest for $req {
                type Reply = $rep;

                fn wrap(self) -> $crate::shard::dispatch::ShardRequest {
                    $crate::shard::dispatch::ShardRequest::$service($request::$variant(self))
                }

                // The other arm is unreachable while only one service has requests.
                #[allow(unreachable_patterns)]
                fn unwrap(reply: $crate::shard::dispatch::ShardReply) -> $rep {
                    match reply {
                        $crate::shard::dispatch::ShardReply::$service($reply::$variant(r)) => r,
                        _ => $crate::shard::dispatch::mismatched(stringify!($req)),
                    }
                }
            }
        )*
    };
}
pub(crate) use mesh_service;

/// A reply of another kind than its request: a service's `serve` answers every
/// request in the request's own variant, so this is a bug in [`mesh_service!`].
#[cold]
pub fn mismatched(request: &str) -> ! {
    unreachable!("a mesh reply of another kind than its request ({request})")
}

/// The services that take cross-shard requests: [`ShardRequest`] and [`ShardReply`]
/// with a variant for each, and [`serve`].
macro_rules! shard_services {
    ( $( $(#[$attr:meta])* $service:ident($request:ty => $reply:ty), )* ) => {
        /// Every cross-shard request, by service.
        pub enum ShardRequest {
            $( $(#[$attr])* $service($request), )*
        }

        /// Every cross-shard reply, by service, as [`ShardRequest`].
        pub enum ShardReply {
            $( $service($reply), )*
        }

        /// Runs `request` on `shard`, its target, with its service's handler. Boxed: a
        /// handler may itself call shards, and a call to its own shard comes back here.
        pub fn serve(shard: Rc<Shard>, request: ShardRequest) -> Pin<Box<dyn Future<Output = ShardReply>>> {
            match request {
                $( ShardRequest::$service(r) => Box::pin(async move { ShardReply::$service(r.serve(shard).await) }), )*
            }
        }
    };
}

shard_services! {
    /// Group operations, on a group's coordinator shard.
    Group(crate::coordinator::requests::GroupRequest => crate::coordinator::requests::GroupReply),
    /// Transactional id operations, on an id's coordinator shard.
    Txn(crate::txn::requests::TxnRequest => crate::txn::requests::TxnReply),
    /// Metadata changes on the controller's shard, and their install on every shard.
    Controller(crate::cluster::requests::ControllerRequest => crate::cluster::requests::ControllerReply),
    /// Quota sensor changes, on the shard keeping the sensor.
    Quota(crate::quota::requests::QuotaRequest => crate::quota::requests::QuotaReply),
    /// Cluster state: leaders, control messages, leadership hand-overs.
    Cluster(crate::replication::requests::ClusterRequest => crate::replication::requests::ClusterReply),
    /// Data directory failures, told to every shard.
    Dirs(super::dirs::DirsRequest => super::dirs::DirsReply),
    /// The steps of an orderly stop.
    Shutdown(super::shutdown::ShutdownRequest => super::shutdown::ShutdownReply),
    /// Reads of a shard's state for the admin API.
    Admin(crate::admin::requests::AdminRequest => crate::admin::requests::AdminReply),
    /// A Kafka request handler's work on partition owners, or on shard 0.
    Handler(crate::handlers::on_shard::HandlerRequest => crate::handlers::on_shard::HandlerReply),
}
