//! ListGroups: every shard lists the groups it coordinates; filtered by state (v4+,
//! case-insensitive) and type (v5: classic or consumer).

use std::rc::Rc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use crate::coordinator::requests::ListGroups;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 5);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: ListGroupsRequest,
) -> ListGroupsResponse {
    let per_shard = shard.call_all(ListGroups).await;
    let states: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = req.types_filter.iter().map(|s| s.to_lowercase()).collect();
    let mut resp = ListGroupsResponse::default();
    let mut groups = Vec::new();
    for listed in per_shard {
        match listed {
            Ok(list) => groups.extend(list),
            Err(code) => resp.error_code = code,
        }
    }
    groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    // As Kafka: DESCRIBE on the cluster lists every group, else only those the
    // principal may DESCRIBE.
    if !super::allowed(shard, ctx, acl::operation::DESCRIBE, acl::resource::CLUSTER, acl::CLUSTER_NAME) {
        groups.retain(|g| super::allowed(shard, ctx, acl::operation::DESCRIBE, acl::resource::GROUP, &g.group_id));
    }
    resp.groups = groups
        .into_iter()
        .filter(|g| states.is_empty() || states.contains(&g.state.to_lowercase()))
        .filter(|g| types.is_empty() || types.contains(&g.group_type.to_lowercase()))
        .map(|g| {
            let mut listed = ListedGroup::default()
                .with_group_id(GroupId(str_bytes(&g.group_id)))
                .with_protocol_type(str_bytes(&g.protocol_type));
            if version >= 4 {
                listed.group_state = str_bytes(&g.state);
            }
            if version >= 5 {
                listed.group_type = str_bytes(&g.group_type);
            }
            listed
        })
        .collect();
    if resp.error_code != errors::NONE {
        tracing::debug!(code = resp.error_code, "ListGroups while a coordinator shard is loading");
    }
    resp
}
