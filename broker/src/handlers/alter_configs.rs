//! AlterConfigs (legacy): replaces every dynamic config of a topic or the broker.

use std::rc::Rc;

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::str_bytes;
use crate::cluster::controller::{self, ConfigChange, Failure};
use crate::errors;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (0, 2);

/// The change a resource names, or why it cannot be changed.
pub fn resource_target(shard: &Shard, resource_type: i8, name: &str) -> Result<Option<String>, Failure> {
    match resource_type {
        RESOURCE_TOPIC => Ok(Some(name.to_string())),
        RESOURCE_BROKER if name.is_empty() || name == shard.config.node_id.to_string() => Ok(None),
        _ => Err((errors::INVALID_REQUEST, format!("Unsupported resource {resource_type}/{name}"))),
    }
}

pub async fn handle(shard: &Rc<Shard>, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut changes = Vec::new();
    let mut early = Vec::new();
    for r in &req.resources {
        match resource_target(shard, r.resource_type, &r.resource_name) {
            Ok(topic) => {
                let ops = r.configs.iter().map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string()))).collect();
                changes.push(ConfigChange { topic, replace: true, ops });
                early.push(None);
            }
            Err(e) => early.push(Some(e)),
        }
    }
    let validate_only = req.validate_only;
    let mut results = shard.submit_to(0, move |s| async move { controller::alter_configs(s, changes, validate_only).await }).await.into_iter();
    let responses = req
        .resources
        .into_iter()
        .zip(early)
        .map(|(r, e)| {
            let result = e.map(Err).unwrap_or_else(|| results.next().expect("a result per change"));
            let mut out = AlterConfigsResourceResponse::default().with_resource_type(r.resource_type).with_resource_name(r.resource_name);
            if let Err((code, message)) = result {
                out.error_code = code;
                out.error_message = Some(str_bytes(&message));
            }
            out
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}
