//! Cluster state's cross-shard requests: the leaders every shard knows, the control
//! messages only shard 0 sends to other nodes (it holds the node's RPC transport's
//! control plane for them) or serves as the controller, and leadership hand-overs on
//! the shard owning a group.

use std::rc::Rc;

use bytes::Bytes;
use keel_raft::{GroupId, NodeId};

use super::balance::{self, Refusal};
use super::nodes::{self, ControlRequest, LeaderView};
use crate::shard::dispatch::{mesh_requests, Serve};
use crate::shard::Shard;

// Cluster state: leaders, control messages, leadership hand-overs.
mesh_requests! {
    RefreshLeaders => (),
    LearnLeaders => (),
    SendControl => (),
    ServeControl => (),
    HandLeadership => Result<(), Refusal>,
    AwaitInstalled => bool,
}

/// A peer (re)started: the target shard tells it the leadership of each of its groups.
#[derive(Clone)]
pub struct RefreshLeaders;

impl Serve for RefreshLeaders {
    async fn serve(self, shard: Rc<Shard>) {
        shard.leaders_refresh_due.set(true)
    }
}

/// Leaders told by this node's shards or by peer `from`, merged into the target
/// shard's table (`nodes::learn_leaders`).
#[derive(Clone)]
pub struct LearnLeaders {
    pub from: Option<NodeId>,
    pub entries: Vec<LeaderView>,
}

impl Serve for LearnLeaders {
    async fn serve(self, shard: Rc<Shard>) {
        nodes::merge_leaders(&shard, self.from, self.entries)
    }
}

/// Sends a control message on shard 0's transport: to node `to`, or to every peer.
pub struct SendControl {
    pub to: Option<NodeId>,
    pub payload: Bytes,
}

impl Serve for SendControl {
    async fn serve(self, shard: Rc<Shard>) {
        let Some(r) = &shard.replication else { return };
        match self.to {
            Some(node) => r.transport().send_control(node, 0, self.payload),
            None => {
                for peer in r.transport().peers() {
                    r.transport().send_control(peer, 0, self.payload.clone());
                }
            }
        }
    }
}

/// Carries out a control request on shard 0 when this node is the controller.
pub struct ServeControl(pub ControlRequest);

impl Serve for ServeControl {
    async fn serve(self, shard: Rc<Shard>) {
        nodes::serve_control(shard, self.0).await
    }
}

/// Hands the leadership of `group` to node `to`, on the shard owning the group.
pub struct HandLeadership {
    pub group: GroupId,
    pub to: NodeId,
}

impl Serve for HandLeadership {
    async fn serve(self, shard: Rc<Shard>) -> Result<(), Refusal> {
        balance::hand_to(&shard, self.group, self.to)
    }
}

/// On shard 0: waits until every shard of this node has installed metadata `version`
/// (`nodes::await_installed`).
pub struct AwaitInstalled {
    pub version: u64,
    pub timeout: std::time::Duration,
}

impl Serve for AwaitInstalled {
    async fn serve(self, shard: Rc<Shard>) -> bool {
        nodes::await_installed(&shard, self.version, self.timeout).await
    }
}
