//! DescribeGroups: each group described by its coordinator shard, in the classic form
//! (KIP-848 groups show their assignor as protocol and their members' partitions in
//! the consumer embedded protocol).

use std::rc::Rc;

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse, GroupId};

use crate::cluster::routing;
use crate::coordinator::requests::DescribeGroup;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 6);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    let include_ops = req.include_authorized_operations;
    let calls = req.groups.into_iter().map(|group_id| {
        let id = group_id.0.to_string();
        // As Kafka: DESCRIBE on each group.
        let refused = !super::authorized(shard, ctx, acl::operation::DESCRIBE, acl::resource::GROUP, &id);
        async move {
            if refused {
                return (id, Err(errors::GROUP_AUTHORIZATION_FAILED));
            }
            let group_id = id.clone();
            let found = routing::on_coordinator(shard, &id, |partition| DescribeGroup { partition, group_id })
                .await
                .and_then(|r| r);
            (id, found)
        }
    });
    let results = keel_storage::join::join_all(calls.collect()).await;
    let groups = results
        .into_iter()
        .map(|(id, found)| {
            let mut g = DescribedGroup::default().with_group_id(GroupId(str_bytes(&id)));
            if version < 6 {
                g.error_message = None;
            }
            match found {
                Err(code) => g.error_code = code,
                Ok(None) if version >= 6 => {
                    // Kafka also names the state of a group it does not know "Dead".
                    g.error_code = errors::GROUP_ID_NOT_FOUND;
                    g.error_message = Some(str_bytes(&format!("Group {id} not found.")));
                    g.group_state = str_bytes("Dead");
                }
                Ok(None) => g.group_state = str_bytes("Dead"),
                Ok(Some(d)) => {
                    if include_ops {
                        g.authorized_operations = super::operations(shard, ctx, acl::resource::GROUP, &id);
                    }
                    g.group_state = str_bytes(&d.state);
                    g.protocol_type = str_bytes(&d.protocol_type);
                    g.protocol_data = str_bytes(&d.protocol_data);
                    g.members = d
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut member = DescribedGroupMember::default()
                                .with_member_id(str_bytes(&m.member_id))
                                .with_client_id(str_bytes(&m.client_id))
                                .with_client_host(str_bytes(&m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment);
                            if version >= 4 {
                                member.group_instance_id = m.instance_id.as_deref().map(str_bytes);
                            }
                            member
                        })
                        .collect();
                }
            }
            g
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}
