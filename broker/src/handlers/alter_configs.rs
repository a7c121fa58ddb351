//! AlterConfigs (legacy): replaces every dynamic config of a topic or the broker.

use std::rc::Rc;

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::cluster::controller::{ConfigChange, Failure};
use crate::cluster::requests::AlterConfigs;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 2);

/// Relayed to the controller (see `handlers::run`) when the principal may do all it
/// asks: ALTER_CONFIGS on every resource it names.
pub fn relayed(shard: &Shard, ctx: &RequestContext, req: &AlterConfigsRequest) -> bool {
    super::configs_alterable(shard, ctx, req.resources.iter().map(|c| (c.resource_type, c.resource_name.as_str())))
}

/// The change a resource names, or why it cannot be changed. As Kafka: ALTER_CONFIGS
/// on the topic, or on the cluster for the broker.
pub fn resource_target(
    shard: &Shard,
    ctx: &RequestContext,
    resource_type: i8,
    name: &str,
) -> Result<Option<String>, Failure> {
    match resource_type {
        RESOURCE_TOPIC if !super::authorized(shard, ctx, acl::operation::ALTER_CONFIGS, acl::resource::TOPIC, name) => {
            Err((errors::TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.".to_string()))
        }
        RESOURCE_BROKER if !super::cluster_authorized(shard, ctx, acl::operation::ALTER_CONFIGS) => {
            Err((errors::CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.".to_string()))
        }
        RESOURCE_TOPIC => Ok(Some(name.to_string())),
        RESOURCE_BROKER if name.is_empty() || name == shard.config.node_id.to_string() => Ok(None),
        _ => Err((errors::INVALID_REQUEST, format!("Unsupported resource {resource_type}/{name}"))),
    }
}

/// Refuses a resource that names one config twice (INVALID_REQUEST, before anything
/// else), as Kafka does in AlterConfigs and IncrementalAlterConfigs.
pub fn refuse_duplicates<'a>(names: impl Iterator<Item = &'a str>) -> Result<(), Failure> {
    let mut names: Vec<&str> = names.collect();
    names.sort_unstable();
    if names.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err((errors::INVALID_REQUEST, "Error due to duplicate config keys".to_string()));
    }
    Ok(())
}

/// Sends the valid changes to the controller and answers every resource in request
/// order, the refused ones with their reason.
pub async fn apply(
    shard: &Rc<Shard>,
    changes: Vec<Result<ConfigChange, Failure>>,
    validate_only: bool,
) -> Vec<Result<(), Failure>> {
    let valid: Vec<ConfigChange> = changes.iter().filter_map(|c| c.as_ref().ok().cloned()).collect();
    let mut results = shard.call(0, AlterConfigs { changes: valid, validate_only }).await.into_iter();
    changes.into_iter().map(|c| c.and_then(|_| results.next().expect("a result per change"))).collect()
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: AlterConfigsRequest,
) -> AlterConfigsResponse {
    let changes = req
        .resources
        .iter()
        .map(|r| {
            refuse_duplicates(r.configs.iter().map(|c| c.name.as_str()))?;
            resource_target(shard, ctx, r.resource_type, &r.resource_name).map(|topic| {
                let ops =
                    r.configs.iter().map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string()))).collect();
                ConfigChange { topic, replace: true, ops }
            })
        })
        .collect();
    let results = apply(shard, changes, req.validate_only).await;
    let responses = req
        .resources
        .into_iter()
        .zip(results)
        .map(|(r, result)| {
            let mut out = AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name);
            if let Err((code, message)) = result {
                out.error_code = code;
                out.error_message = Some(str_bytes(&message));
            }
            out
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}
