//! DeleteGroups: an empty group and all its offsets are deleted (tombstones in
//! `__consumer_offsets`); an active one answers NON_EMPTY_GROUP.

use std::rc::Rc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use crate::cluster::routing;
use crate::coordinator::requests::DeleteGroup;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (0, 2);

/// A group named twice is answered once, as Kafka's keyed result collection does.
pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let mut groups = req.groups_names;
    let mut seen = std::collections::HashSet::new();
    groups.retain(|g| seen.insert(g.clone()));
    let calls = groups.into_iter().map(|group_id| async move {
        let id = group_id.0.to_string();
        // As Kafka: DELETE on the group.
        if !super::authorized(shard, ctx, acl::operation::DELETE, acl::resource::GROUP, &id) {
            return DeletableGroupResult::default()
                .with_group_id(group_id)
                .with_error_code(crate::errors::GROUP_AUTHORIZATION_FAILED);
        }
        let code = routing::on_coordinator(shard, &id.clone(), |partition| DeleteGroup { partition, group_id: id })
            .await
            .unwrap_or_else(|code| code);
        DeletableGroupResult::default().with_group_id(group_id).with_error_code(code)
    });
    let results = keel_storage::join::join_all(calls.collect()).await;
    DeleteGroupsResponse::default().with_results(results)
}
