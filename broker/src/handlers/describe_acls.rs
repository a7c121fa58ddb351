//! DescribeAcls: the ACL bindings a filter matches, grouped by resource pattern as
//! Kafka groups them. Needs DESCRIBE on the cluster; without an authorizer Kafka
//! answers SECURITY_DISABLED.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{DescribeAclsRequest, DescribeAclsResponse};

use crate::util::str_bytes;

use super::Answer;
use crate::errors;
use crate::security::acl::{self, AclFilter};
use crate::security::context::RequestContext;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (1, 3);

/// `Answer::Close`: the filter carries the UNKNOWN code (0); the connection is closed, as Kafka
/// closes it. Other codes Kafka does not know match nothing.
pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: DescribeAclsRequest,
) -> Answer<DescribeAclsResponse> {
    let filter = AclFilter {
        resource_type: req.resource_type_filter,
        resource_name: req.resource_name_filter.as_ref().map(|s| s.to_string()),
        pattern_type: req.pattern_type_filter,
        principal: req.principal_filter.as_ref().map(|s| s.to_string()),
        host: req.host_filter.as_ref().map(|s| s.to_string()),
        operation: req.operation,
        permission: req.permission_type,
    };
    if filter.has_unknown() {
        return Answer::Close;
    }
    let meta = shard.meta();
    let authorizer = &shard.security.authorizer;
    if !authorizer.authorize(&meta, ctx, acl::operation::DESCRIBE, acl::resource::CLUSTER, acl::CLUSTER_NAME) {
        return Answer::Respond(
            DescribeAclsResponse::default()
                .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED)
                .with_error_message(Some(str_bytes("Cluster authorization failed."))),
        );
    }
    if !authorizer.enabled() {
        return Answer::Respond(
            DescribeAclsResponse::default()
                .with_error_code(errors::SECURITY_DISABLED)
                .with_error_message(Some(str_bytes("No Authorizer is configured on the broker"))),
        );
    }
    let mut by_resource: BTreeMap<(i8, &str, i8), Vec<AclDescription>> = BTreeMap::new();
    for a in meta.acls.iter().filter(|a| filter.matches(a)) {
        by_resource.entry((a.resource_type, a.resource_name.as_str(), a.pattern_type)).or_default().push(
            AclDescription::default()
                .with_principal(str_bytes(&a.principal))
                .with_host(str_bytes(&a.host))
                .with_operation(a.operation)
                .with_permission_type(a.permission),
        );
    }
    let resources = by_resource
        .into_iter()
        .map(|((resource_type, name, pattern_type), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(str_bytes(name))
                .with_pattern_type(pattern_type)
                .with_acls(acls)
        })
        .collect();
    Answer::Respond(DescribeAclsResponse::default().with_resources(resources))
}
