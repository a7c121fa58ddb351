//! DeleteAcls: removes the ACL bindings each filter matches, through the controller.
//! Needs ALTER on the cluster.

use std::rc::Rc;

use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::{DeleteAclsRequest, DeleteAclsResponse};

use crate::util::str_bytes;

use super::Answer;
use crate::cluster::requests::DeleteAcls;
use crate::errors;
use crate::security::acl::{self, AclFilter};
use crate::security::context::RequestContext;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (1, 3);

/// Relayed to the controller (see `handlers::run`) when the principal may do all it
/// asks: ALTER on the cluster.
pub fn relayed(shard: &Shard, ctx: &RequestContext, _req: &DeleteAclsRequest) -> bool {
    super::cluster_allowed(shard, ctx, crate::security::acl::operation::ALTER)
}

/// `Answer::Close`: a filter carries the UNKNOWN code (0); the connection is closed, as Kafka
/// closes it.
pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: DeleteAclsRequest,
) -> Answer<DeleteAclsResponse> {
    let filters: Vec<AclFilter> = req
        .filters
        .iter()
        .map(|f| AclFilter {
            resource_type: f.resource_type_filter,
            resource_name: f.resource_name_filter.as_ref().map(|s| s.to_string()),
            pattern_type: f.pattern_type_filter,
            principal: f.principal_filter.as_ref().map(|s| s.to_string()),
            host: f.host_filter.as_ref().map(|s| s.to_string()),
            operation: f.operation,
            permission: f.permission_type,
        })
        .collect();
    if filters.iter().any(AclFilter::has_unknown) {
        return Answer::Close;
    }
    let refuse = |code: i16, message: &str| {
        let results = filters
            .iter()
            .map(|_| {
                DeleteAclsFilterResult::default().with_error_code(code).with_error_message(Some(str_bytes(message)))
            })
            .collect();
        Answer::Respond(DeleteAclsResponse::default().with_filter_results(results))
    };
    let authorizer = &shard.security.authorizer;
    if !authorizer.authorize(&shard.meta(), ctx, acl::operation::ALTER, acl::resource::CLUSTER, acl::CLUSTER_NAME) {
        return refuse(errors::CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.");
    }
    if !authorizer.enabled() {
        return refuse(errors::SECURITY_DISABLED, "No Authorizer is configured.");
    }
    // As the controller: a filter with a code Kafka does not know is refused alone.
    let checks: Vec<Result<(), &str>> = filters.iter().map(AclFilter::validate).collect();
    let valid: Vec<AclFilter> =
        filters.iter().zip(&checks).filter(|(_, c)| c.is_ok()).map(|(f, _)| f.clone()).collect();
    let deleted = if valid.is_empty() { Ok(Vec::new()) } else { shard.call(0, DeleteAcls { filters: valid }).await };
    let mut matched = match &deleted {
        Ok(m) => m.clone().into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    let results = checks
        .into_iter()
        .map(|check| match (check, &deleted) {
            (Err(message), _) => DeleteAclsFilterResult::default()
                .with_error_code(errors::INVALID_REQUEST)
                .with_error_message(Some(str_bytes(message))),
            (Ok(()), Err((code, message))) => {
                DeleteAclsFilterResult::default().with_error_code(*code).with_error_message(Some(str_bytes(message)))
            }
            (Ok(()), Ok(_)) => DeleteAclsFilterResult::default().with_error_message(None).with_matching_acls(
                matched
                    .next()
                    .expect("a result per valid filter")
                    .into_iter()
                    .map(|a| {
                        DeleteAclsMatchingAcl::default()
                            .with_resource_type(a.resource_type)
                            .with_resource_name(str_bytes(&a.resource_name))
                            .with_pattern_type(a.pattern_type)
                            .with_principal(str_bytes(&a.principal))
                            .with_host(str_bytes(&a.host))
                            .with_operation(a.operation)
                            .with_permission_type(a.permission)
                    })
                    .collect(),
            ),
        })
        .collect();
    Answer::Respond(DeleteAclsResponse::default().with_filter_results(results))
}
