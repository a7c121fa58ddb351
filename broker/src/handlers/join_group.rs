//! JoinGroup: forwarded to the group's coordinator shard, where the response may stay
//! parked until the rebalance's join phase completes.

use std::rc::Rc;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
use uuid::Uuid;

use crate::cluster::routing;
use crate::coordinator::requests::JoinGroup;
use crate::groups::classic::{JoinRequest, JoinResult, Protocol};
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 9);

pub async fn handle(shard: &Rc<Shard>, ctx: &RequestContext, version: i16, req: JoinGroupRequest) -> JoinGroupResponse {
    let group_id = req.group_id.0.to_string();
    if !super::authorized(shard, ctx, acl::operation::READ, acl::resource::GROUP, &group_id) {
        return response(version, JoinResult::error(crate::errors::GROUP_AUTHORIZATION_FAILED, &req.member_id));
    }
    let client_id = ctx.client_id.as_deref().unwrap_or("").to_string();
    let instance_id = req.group_instance_id.as_deref().map(str::to_string);
    // Kafka's member ids: "<client id or instance id>-<uuid>".
    let prefix = instance_id.clone().unwrap_or_else(|| client_id.clone());
    let join = JoinRequest {
        member_id: req.member_id.to_string(),
        instance_id,
        client_id,
        client_host: String::new(),
        session_timeout_ms: req.session_timeout_ms,
        rebalance_timeout_ms: if version >= 1 { req.rebalance_timeout_ms } else { req.session_timeout_ms },
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .iter()
            .map(|p| Protocol { name: p.name.to_string(), metadata: p.metadata.clone() })
            .collect(),
        require_known_member_id: version >= 4,
        supports_skip_assignment: version >= 9,
        new_member_id: format!("{prefix}-{}", Uuid::new_v4()),
    };
    let member_id = join.member_id.clone();
    let gid = group_id.clone();
    let result = routing::on_coordinator(shard, &group_id, |partition| JoinGroup { partition, group_id: gid, join })
        .await
        .unwrap_or_else(|code| JoinResult::error(code, &member_id));
    response(version, result)
}

fn response(version: i16, r: JoinResult) -> JoinGroupResponse {
    let members = r
        .members
        .into_iter()
        .map(|m| {
            let mut member =
                JoinGroupResponseMember::default().with_member_id(str_bytes(&m.member_id)).with_metadata(m.metadata);
            if version >= 5 {
                member.group_instance_id = m.instance_id.as_deref().map(str_bytes);
            }
            member
        })
        .collect();
    let mut resp = JoinGroupResponse::default()
        .with_error_code(r.error)
        .with_generation_id(r.generation)
        .with_leader(str_bytes(&r.leader))
        .with_member_id(str_bytes(&r.member_id))
        .with_members(members);
    if version >= 7 {
        resp.protocol_type = r.protocol_type.as_deref().map(str_bytes);
        resp.protocol_name = r.protocol.as_deref().map(str_bytes);
    } else {
        // Not nullable before v7.
        resp.protocol_name = Some(str_bytes(r.protocol.as_deref().unwrap_or("")));
    }
    if version >= 9 {
        resp.skip_assignment = r.skip_assignment;
    }
    resp
}
