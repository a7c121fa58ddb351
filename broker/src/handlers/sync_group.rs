//! SyncGroup: forwarded to the coordinator shard; followers stay parked until the
//! leader's assignment is durable.

use std::rc::Rc;

use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};

use crate::cluster::routing;
use crate::coordinator::requests::SyncGroup;
use crate::groups::classic::{SyncRequest, SyncResult};
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 5);

pub async fn handle(shard: &Rc<Shard>, ctx: &RequestContext, version: i16, req: SyncGroupRequest) -> SyncGroupResponse {
    let group_id = req.group_id.0.to_string();
    if !super::authorized(shard, ctx, acl::operation::READ, acl::resource::GROUP, &group_id) {
        return SyncGroupResponse::default().with_error_code(crate::errors::GROUP_AUTHORIZATION_FAILED);
    }
    let sync = SyncRequest {
        member_id: req.member_id.to_string(),
        instance_id: req.group_instance_id.as_deref().map(str::to_string),
        generation: req.generation_id,
        protocol_type: req.protocol_type.as_deref().map(str::to_string),
        protocol: req.protocol_name.as_deref().map(str::to_string),
        assignments: req.assignments.into_iter().map(|a| (a.member_id.to_string(), a.assignment)).collect(),
    };
    let gid = group_id.clone();
    let r = routing::on_coordinator(shard, &group_id, |partition| SyncGroup { partition, group_id: gid, sync })
        .await
        .unwrap_or_else(SyncResult::error);
    let mut resp = SyncGroupResponse::default().with_error_code(r.error).with_assignment(r.assignment);
    if version >= 5 {
        resp.protocol_type = r.protocol_type.as_deref().map(str_bytes);
        resp.protocol_name = r.protocol.as_deref().map(str_bytes);
    }
    resp
}
