//! Heartbeat of a classic group member: keeps its session alive and tells it when a
//! rebalance started (REBALANCE_IN_PROGRESS).

use std::rc::Rc;

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use crate::cluster::routing;
use crate::coordinator::requests::Heartbeat;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (0, 4);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: HeartbeatRequest,
) -> HeartbeatResponse {
    let group_id = req.group_id.0.to_string();
    if !super::authorized(shard, ctx, acl::operation::READ, acl::resource::GROUP, &group_id) {
        return HeartbeatResponse::default().with_error_code(crate::errors::GROUP_AUTHORIZATION_FAILED);
    }
    let (member_id, generation) = (req.member_id.to_string(), req.generation_id);
    let instance_id = req.group_instance_id.as_deref().map(str::to_string);
    let gid = group_id.clone();
    let code = routing::on_coordinator(shard, &group_id, |partition| Heartbeat {
        partition,
        group_id: gid,
        member_id,
        instance_id,
        generation,
    })
    .await
    .unwrap_or_else(|code| code);
    HeartbeatResponse::default().with_error_code(code)
}
