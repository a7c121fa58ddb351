//! CreateAcls: ACL bindings added to the cluster metadata by the controller, as
//! KRaft keeps them. Needs ALTER on the cluster.

use std::rc::Rc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{CreateAclsRequest, CreateAclsResponse};

use crate::util::str_bytes;

use super::Answer;
use crate::cluster::requests::CreateAcls;
use crate::errors;
use crate::security::acl::{self, AclBinding};
use crate::security::context::RequestContext;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (1, 3);

/// Relayed to the controller (see `handlers::run`) when the principal may do all it
/// asks: ALTER on the cluster.
pub fn relayed(shard: &Shard, ctx: &RequestContext, _req: &CreateAclsRequest) -> bool {
    super::cluster_allowed(shard, ctx, crate::security::acl::operation::ALTER)
}

/// `Answer::Close`: a creation carries the UNKNOWN code (0), which Kafka cannot parse, and the
/// connection is closed as Kafka closes it.
pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: CreateAclsRequest,
) -> Answer<CreateAclsResponse> {
    let bindings: Vec<AclBinding> = req
        .creations
        .iter()
        .map(|c| AclBinding {
            resource_type: c.resource_type,
            resource_name: c.resource_name.to_string(),
            pattern_type: c.resource_pattern_type,
            principal: c.principal.to_string(),
            host: c.host.to_string(),
            operation: c.operation,
            permission: c.permission_type,
        })
        .collect();
    if bindings.iter().any(AclBinding::has_unknown) {
        return Answer::Close;
    }
    let refuse = |code: i16, message: &str| {
        let results = bindings
            .iter()
            .map(|_| AclCreationResult::default().with_error_code(code).with_error_message(Some(str_bytes(message))))
            .collect();
        Answer::Respond(CreateAclsResponse::default().with_results(results))
    };
    let authorizer = &shard.security.authorizer;
    if !authorizer.authorize(&shard.meta(), ctx, acl::operation::ALTER, acl::resource::CLUSTER, acl::CLUSTER_NAME) {
        return refuse(errors::CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.");
    }
    if !authorizer.enabled() {
        return refuse(errors::SECURITY_DISABLED, "No Authorizer is configured.");
    }
    if bindings.iter().any(AclBinding::has_filter_code) {
        let results = bindings
            .iter()
            .map(|_| {
                AclCreationResult::default().with_error_code(errors::UNKNOWN_SERVER_ERROR).with_error_message(None)
            })
            .collect();
        return Answer::Respond(CreateAclsResponse::default().with_results(results));
    }
    let checked: Vec<Result<AclBinding, String>> = bindings.into_iter().map(|b| b.validate().map(|_| b)).collect();
    let valid: Vec<AclBinding> = checked.iter().filter_map(|c| c.as_ref().ok().cloned()).collect();
    let committed = if valid.is_empty() { Ok(()) } else { shard.call(0, CreateAcls { acls: valid }).await };
    let results = checked
        .into_iter()
        .map(|c| {
            let outcome = match c {
                Err(message) => Err((errors::INVALID_REQUEST, message)),
                Ok(_) => committed.clone(),
            };
            match outcome {
                Ok(()) => AclCreationResult::default(),
                Err((code, message)) => {
                    AclCreationResult::default().with_error_code(code).with_error_message(Some(str_bytes(&message)))
                }
            }
        })
        .collect();
    Answer::Respond(CreateAclsResponse::default().with_results(results))
}
