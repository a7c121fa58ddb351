//! LeaveGroup: one member (v0-2) or a batch of members, by member id or, for static
//! members removed by an admin, by group.instance.id (v3+).

use std::rc::Rc;

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

use crate::cluster::routing;
use crate::coordinator::requests::LeaveGroup;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (0, 5);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: LeaveGroupRequest,
) -> LeaveGroupResponse {
    let group_id = req.group_id.0.to_string();
    if !super::authorized(shard, ctx, acl::operation::READ, acl::resource::GROUP, &group_id) {
        return LeaveGroupResponse::default().with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
    }
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        req.members
            .iter()
            .map(|m| (m.member_id.to_string(), m.group_instance_id.as_deref().map(str::to_string)))
            .collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    let asked = members.clone();
    let gid = group_id.clone();
    let result =
        routing::on_coordinator(shard, &group_id, |partition| LeaveGroup { partition, group_id: gid, members })
            .await
            .and_then(|r| r);
    let mut resp = LeaveGroupResponse::default();
    match result {
        Err(code) => resp.error_code = code,
        Ok(codes) if version < 3 => resp.error_code = codes.first().copied().unwrap_or(errors::NONE),
        Ok(codes) => {
            resp.members = req
                .members
                .into_iter()
                .zip(asked.into_iter().zip(codes))
                .map(|(m, (_, code))| {
                    MemberResponse::default()
                        .with_member_id(m.member_id)
                        .with_group_instance_id(m.group_instance_id)
                        .with_error_code(code)
                })
                .collect();
        }
    }
    resp
}
